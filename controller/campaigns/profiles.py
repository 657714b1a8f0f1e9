"""Provider profiles: where a caller's model requests go and how they are priced.

A campaign's ``[reader]`` table (and, for the compaction arms, its ``[summariser]``;
and its optional ``[judge]``, ``controller.campaigns.judge_profile``) is a profile: the faux
extractive reader, or an endpoint (``api``: OpenAI's Responses or Chat Completions, or
Anthropic's Messages; ``base_url``, ``model``, ``stream``, reply limit, the *name* of the
credential variable, an operator catalog). This module validates a profile, prices it (its catalog entry,
its input envelope I tightened by the model's context window, its Rmax), and freezes it
into the ``Route`` a child sends on and the ``CallerTerms`` the permit source holds it
to. Every refusal is ``campaign_invalid`` naming the field, except an unpriced model
(``lookup_invalid_rate``) and a bad catalog (its own code).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from efold.controller.errors import CampaignError
from efold.controller.processes.childenv import ALLOWED as CHILD_ENV_ALLOWED
from efold.errors import Code, EfoldError
from efold.guard.catalog import Catalog, CatalogEntry, bundled_catalog, load_catalog
from efold.guard.contract import INPUT_ENVELOPE, MAX_OUTPUT
from efold.guard.ledger import CallerTerms
from efold.guard.pricing import price_units, rmax_units
from efold.input_files import InputFileError
from efold.protocol.tasks import Route

APIS = ("responses", "chat", "messages")
# The Chat Completions field that limits a reply: OpenAI's current one, or the older
# ``max_tokens`` that some OpenAI-compatible servers (llama.cpp's Python server) read
# instead (they ignore the other, and a small model may then write until its window).
MAX_TOKENS_FIELDS = ("max_completion_tokens", "max_tokens")
FAUX_PROVIDER = "faux"
# The provider of any model on a local server: priced by the bundled catalog's wildcard
# entry at zero (a local server bills nothing), allowed only where ``is_local`` holds.
LOCAL_PROVIDER = "local"
DETERMINISTIC = "deterministic"  # the summariser profile that sends nothing
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


@dataclass(frozen=True)
class ServerPreset:
    """What a kind of OpenAI-compatible server needs of a profile (``server = NAME``):
    the API it speaks, whether its streamed answers carry usage (efold never settles a
    request without usage: where they do not, the preset does not stream), the field
    its Chat Completions endpoint reads as the reply limit, and how it names the model
    it serves (what a model-name mismatch tells the operator to change). ``tested``:
    proven against the real server in this project's tests; else from its docs."""

    api: str
    stream: bool
    max_tokens_field: str
    alias: str
    tested: bool


SERVER_PRESETS: Final = {
    "llama-server": ServerPreset(
        "chat", True, "max_tokens", "llama-server's --alias NAME (else the model file's "
        "name)", tested=True),
    "llama-cpp-python": ServerPreset(
        "chat", False, "max_tokens", "python -m llama_cpp.server --model_alias NAME (else "
        "the model file's path)", tested=True),
    "ollama": ServerPreset(
        "chat", True, "max_tokens", "the model's tag, as `ollama list` shows it", tested=False),
    "vllm": ServerPreset(
        "chat", True, "max_completion_tokens", "vllm serve --served-model-name NAME",
        tested=False),
    "openai-compatible": ServerPreset(
        "chat", True, "max_completion_tokens", "the name its /v1/models lists", tested=False),
}


# The preset of a local endpoint (loopback, no credential) that names none.
DEFAULT_LOCAL_SERVER: Final = "openai-compatible"


class Profile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A provider profile: where a caller's requests go and how they are priced.

    ``faux`` (the offline extractive reader) or an endpoint: ``api`` (``chat`` or
    ``responses``, OpenAI-compatible; ``messages``, Anthropic's Messages API),
    ``base_url``, ``model``, ``stream``, the *name* of the
    environment variable holding the credential (None: a local server that takes none)
    and an operator ``catalog`` (an absolute path once parsed; None: the bundled one).
    Its digest is bound into the registration; the credential itself never is.
    """

    provider: str = FAUX_PROVIDER
    model: str = "faux-extractive-v1"
    api: str = "responses"
    base_url: str = "faux://local"
    effort: str | None = "low"  # reasoning effort every request carries; None: none
    stream: bool = True
    credential_env: str | None = None
    catalog: str | None = None
    max_output_tokens: int | None = None  # per request (None: the model's own limit)
    max_tokens_field: str = "max_completion_tokens"  # chat: the field the server reads
    server: str | None = None  # the server preset it was written with (``SERVER_PRESETS``)

    @property
    def is_faux(self) -> bool:
        return self.provider == FAUX_PROVIDER

    @property
    def is_local(self) -> bool:
        """An endpoint on this machine that takes no credential: nothing can be billed,
        so it runs on the local route (``pilot`` without keygen or signed authorizations)."""
        return (not self.is_faux and is_loopback_url(self.base_url)
                and self.credential_env is None)


class SummariserProfile(Profile, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The compaction arms' summariser model (``[summariser]``), an auxiliary caller of
    its own route: each checkpoint it summarises may make at most ``max_requests``
    guarded requests, under the same cap and durable permit source as the probes."""

    max_requests: int = 64  # DEFAULT_SUMMARY_REQUESTS


# A summariser's request limit per checkpoint: compaction proxies make dozens (29-33
# per checkpoint were seen); each is still admitted under the cap at its Rmax.
DEFAULT_SUMMARY_REQUESTS: Final = 64
MAX_SUMMARY_REQUESTS: Final = 256


# How long the controller's watchdog outlasts the deadline it grants a child: 5 s
# offline; on a real route the reference's 720 s watchdog over a 600 s probe run (a
# 60 s cleanup allowance and a 60 s turn margin).
FAUX_WATCHDOG_MARGIN_S: Final = 5.0
REAL_WATCHDOG_MARGIN_S: Final = 120.0


class ProfileTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A ``[reader]`` or ``[summariser]`` table as written: ``effort`` defaults by API
    (``low`` for Responses, none for Chat Completions), ``stream`` to true, ``catalog``
    is relative to the campaign file's directory."""

    provider: str
    model: str | None = None
    api: str | None = None  # None: the preset's, else "responses"
    base_url: str | None = None
    effort: str | None = None
    stream: bool | None = None  # None: the preset's, else true
    credential_env: str | None = None
    catalog: str | None = None
    max_output_tokens: int | None = None
    max_tokens_field: str | None = None  # None: the preset's, else max_completion_tokens
    max_requests: int | None = None  # [summariser] only
    server: str | None = None  # a preset (``SERVER_PRESETS``): fills what is not written


def _invalid(detail: str) -> CampaignError:
    return CampaignError(Code.CAMPAIGN_INVALID, detail)


def profile_from_table(table: ProfileTable | None, what: str,
                       base_dir: Path | None) -> Profile | None:
    """A written profile table, resolved (None: no table)."""
    if table is None:
        return None
    if table.max_requests is not None and what != "summariser":
        raise _invalid(f"{what}.max_requests: only the summariser has a request limit")
    faux = table.provider == FAUX_PROVIDER
    if not faux and (table.model is None or table.base_url is None):
        raise _invalid(f"{what}: an endpoint profile needs model and base_url")
    server = table.server
    if server is None and not faux and table.credential_env is None \
            and is_loopback_url(table.base_url or ""):
        server = DEFAULT_LOCAL_SERVER  # a local endpoint speaks what --reader's does
    preset = None
    if server is not None:
        preset = SERVER_PRESETS.get(server)
        if preset is None:
            raise _invalid(f"{what}.server must be one of {tuple(SERVER_PRESETS)}")
    default = Profile()
    api = table.api or (preset.api if preset else default.api)
    stream = table.stream if table.stream is not None else (
        preset.stream if preset else default.stream)
    max_tokens_field = table.max_tokens_field or (
        preset.max_tokens_field if preset and api == "chat" else default.max_tokens_field)
    catalog = table.catalog
    if catalog is not None:
        path = Path(catalog).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        catalog = os.path.realpath(path)
    effort = table.effort if table.effort is not None else (
        "low" if api == "responses" else None)
    profile = Profile(
        provider=table.provider, model=table.model or default.model, api=api,
        base_url=(table.base_url or default.base_url).rstrip("/"), effort=effort,
        stream=stream, credential_env=table.credential_env, catalog=catalog,
        max_output_tokens=table.max_output_tokens, max_tokens_field=max_tokens_field,
        server=server)
    if what == "summariser":
        return SummariserProfile(**msgspec.structs.asdict(profile),
                                 max_requests=table.max_requests or DEFAULT_SUMMARY_REQUESTS)
    return profile


def validate_profile(p: Profile, what: str) -> None:
    """A profile names a route efold can send to and a model its catalog prices."""
    if p.api not in APIS:
        raise _invalid(f"{what}.api must be one of {APIS}")
    if p.api == "responses" and not p.stream:
        raise _invalid(f"{what}: the Responses API is only spoken streamed (stream = true)")
    if p.max_output_tokens is not None and not 1 <= p.max_output_tokens <= MAX_OUTPUT:
        raise _invalid(f"{what}.max_output_tokens must be 1-{MAX_OUTPUT}")
    if p.max_tokens_field not in MAX_TOKENS_FIELDS:
        raise _invalid(f"{what}.max_tokens_field must be one of {MAX_TOKENS_FIELDS}")
    if p.max_tokens_field != MAX_TOKENS_FIELDS[0] and p.api != "chat":
        raise _invalid(f"{what}.max_tokens_field applies to the chat API only")
    if p.api == "messages" and p.max_output_tokens is None:
        # The Messages API requires a reply limit on every request; efold does not
        # guess one (a model's own limit differs by model and changes).
        raise _invalid(f"{what}: the Messages API needs max_output_tokens (its max_tokens)")
    if p.effort is not None and not re.fullmatch(r"[a-z]{1,16}", p.effort):
        raise _invalid(f"{what}.effort must be a short lowercase word")
    if p.is_faux:
        if p.base_url != "faux://local" or p.api == "chat" or p.credential_env:
            raise _invalid(f"{what}: the faux provider is faux://local over responses "
                           "or messages")
    else:
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", p.provider):
            raise _invalid(f"{what}.provider: lowercase letters, digits, '.', '_' and '-'")
        if not re.fullmatch(r"https?://[^\s/?#@]+(/[^\s?#]*)?", p.base_url):
            raise _invalid(f"{what}.base_url must be an http(s) URL without query, fragment "
                           "or user:password@ (a credential goes in credential_env)")
        if p.base_url.startswith("http://") and not is_loopback_url(p.base_url):
            raise _invalid(f"{what}.base_url: plain http only to a loopback server "
                           "(a credential must never cross a network in clear)")
        if p.provider == LOCAL_PROVIDER and p.catalog is None and not p.is_local:
            raise _invalid(f"{what}.provider {LOCAL_PROVIDER!r} is priced at zero by the "
                           "bundled catalog, for a loopback base_url without "
                           "credential_env only (an operator catalog may price it)")
    if p.server is not None and p.server not in SERVER_PRESETS:
        raise _invalid(f"{what}.server must be one of {tuple(SERVER_PRESETS)}")
    if p.credential_env is not None and not _ENV_NAME.fullmatch(p.credential_env):
        raise _invalid(f"{what}.credential_env must be an environment variable NAME "
                       "(upper case, digits, _), never the credential itself")
    if p.credential_env in CHILD_ENV_ALLOWED:
        # Every child starts with the allowlisted variables (``childenv.ALLOWED``), fold
        # code included: a credential kept in one would reach them all, in environ.
        raise CampaignError(
            Code.CREDENTIAL_ENV_INHERITED,
            f"{what}.credential_env {p.credential_env!r} is a variable every child "
            f"inherits ({', '.join(CHILD_ENV_ALLOWED)}): keep the credential in a "
            "variable of its own")
    profile_entry(p, what)  # the model is priced by the profile's catalog


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` names this machine (127.0.0.0/8, ::1 or localhost)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def profile_catalog(p: Profile) -> Catalog:
    """The catalog that prices a profile: its operator catalog, else the bundled one."""
    if p.catalog is None:
        return bundled_catalog()
    try:
        return load_catalog(p.catalog)
    except EfoldError as exc:
        # An input file refusal already names the catalog and its path.
        detail = exc.detail if isinstance(exc, InputFileError) else f"catalog {p.catalog}: {exc.detail}"
        raise CampaignError(exc.code, detail) from exc


def profile_entry(p: Profile, what: str = "reader") -> CatalogEntry:
    """The profile's model in its catalog; an unpriced model refuses with
    ``lookup_invalid_rate``, naming what is priced."""
    catalog = profile_catalog(p)
    try:
        return catalog.entry(p.provider, p.model)
    except EfoldError:
        priced = sorted(m for q, m in catalog.entries if q == p.provider)
        where = "the bundled catalog" if p.catalog is None else p.catalog
        raise CampaignError(
            Code.LOOKUP_INVALID_RATE,
            f"{what} {p.provider}/{p.model} has no price in {where}; "
            f"priced {p.provider} models: {', '.join(priced) or 'none'}"
            + (f" (a model on a local server: provider = {LOCAL_PROVIDER!r}, priced at zero)"
               if p.is_local else ""),
        ) from None


def profile_envelope(p: Profile) -> int:
    """I for the profile's route: the registered envelope, tightened by the model's
    context window when its catalog gives one."""
    return profile_entry(p).input_envelope(INPUT_ENVELOPE)


def profile_rmax_units(p: Profile) -> int:
    """Rmax of a profile's route (its catalog, its envelope): the hold every admission
    of its requests takes."""
    entry = profile_entry(p)
    return rmax_units(entry, entry.input_envelope(INPUT_ENVELOPE))


def watchdog_margin(profile: Profile | None) -> float:
    """How long the controller's watchdog outlasts the deadline it grants a child that
    sends on ``profile`` (None: a child that sends nothing): long enough for the child
    to abort its own request and settle it (an own abort, not a killed worker)."""
    if profile is None or profile.is_faux:
        return FAUX_WATCHDOG_MARGIN_S
    return REAL_WATCHDOG_MARGIN_S


_WIRE_API = {"responses": "openai-responses", "chat": "openai-chat",
             "messages": "anthropic-messages"}


def route_of(p: Profile) -> Route:
    """The frozen route a child sends a profile's requests on (no credential: that
    travels on its own descriptor)."""
    return Route(provider=p.provider, model=p.model, api=_WIRE_API[p.api],
                 base_url=p.base_url, effort=p.effort, stream=p.stream,
                 catalog_file=p.catalog, catalog_sha256=profile_catalog(p).digest,
                 max_output_tokens=p.max_output_tokens, max_tokens_field=p.max_tokens_field)


def caller_terms(p: Profile, max_requests: int) -> CallerTerms:
    """What the permit source holds a caller on ``p``'s route to: Rmax of the route,
    ``max_requests`` requests, the route's catalog prices, its input envelope."""
    entry = profile_entry(p)
    envelope = entry.input_envelope(INPUT_ENVELOPE)
    return CallerTerms(rmax_units=rmax_units(entry, envelope), max_requests=max_requests,
                       price=functools.partial(price_units, entry), input_envelope=envelope)
