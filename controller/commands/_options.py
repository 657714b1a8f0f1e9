"""What several commands share: click decorators, the refusal, a report's two forms."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, NoReturn, TypeVar, cast

import click
import msgspec

from efold.controller.campaigns.campaign import Campaign, named_campaign, route_kind
from efold.controller.campaigns.local_models import LocalModels, with_local_models
from efold.controller.campaigns.registration import (
    Registration,
    compute_registration,
    encode_registration,
    load_registration,
    subset_registration,
)
from efold.controller.campaigns.reportable import check_reportable
from efold.controller.campaigns.subset import Subset, requested
from efold.controller.errors import ControllerError
from efold.controller.rundirs.run_index import latest_run, not_a_run, private_run
from efold.controller.rundirs.runroot import DEFAULT_RUNS_ROOT
from efold.errors import Code, EfoldError
from efold.protocol.tasks import RouteKind
from efold.registry.errors import RegistryError
from efold.registry.journal import journal_path

F = TypeVar("F", bound=Callable[..., Any])


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sha256(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A usage error unless ``value`` is 64 hex digits (surrounding spaces and case
    aside), before anything reads the registration."""
    if value is not None and not _SHA256.fullmatch(value.strip().lower()):
        raise click.BadParameter(f"{value!r} is not a sha256 (64 hex digits, as `register` "
                                 "printed it)")
    return value


def registration_options(required: bool = True) -> Callable[[F], F]:
    def decorate(f: F) -> F:
        f = click.option(
            "--sha256", "sha256", required=required, metavar="SHA", callback=_sha256,
            help="The sha256 that `register` printed for the registration file.",
        )(f)
        f = click.option(
            "--registration", "registration", required=required,
            type=click.Path(exists=True, dir_okay=False), metavar="FILE",
            help="A registration.json written by `register`.",
        )(f)
        return f

    return decorate


def run_report_options(f: F) -> F:
    """``RUN_DIR`` and ``--json``: the arguments of a command that reports on a run."""
    f = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(f)
    return click.argument("run_dir", type=click.Path())(f)


def latest_run_report_options(f: F) -> F:
    """``run_report_options`` with RUN_DIR optional, and ``latest_options``: resolve the
    run with ``resolve_run(run_dir, latest, root)``."""
    f = latest_options(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(f)
    return click.argument("run_dir", required=False, type=click.Path())(f)


def latest_options(f: F) -> F:
    """``--latest`` and ``--root``: take the newest run under ROOT instead of RUN (see
    ``resolve_run``). The command's RUN argument must be optional (``required=False``)."""
    f = click.option("--root", "root", default=None, type=click.Path(), metavar="ROOT",
                     help=f"Where --latest looks (default: ./{DEFAULT_RUNS_ROOT}).")(f)
    return click.option("--latest", is_flag=True,
                        help="Use the newest run under --root instead of RUN.")(f)


def resolve_run(run: str | None, latest: bool, root: str | None,
                on_refusal: Callable[[str, str], NoReturn] | None = None) -> str:
    """RUN as given, or with ``--latest`` the newest run under ``root``. RUN with
    ``--latest``, neither, or ``--root`` without ``--latest`` is a usage error; a RUN
    that is plainly not a run directory (missing, a file, no journal), or no run under
    ``root``, is ``run_not_found``, through ``on_refusal(code, detail)`` (default:
    ``fail``; see ``refusal_for``)."""
    if run is not None and latest:
        raise click.UsageError("RUN and --latest are exclusive")
    if root is not None and not latest:
        raise click.UsageError("--root applies to --latest")
    if run is not None:
        run = private_run(run)  # plan's, preflight's or fold check's root left by a kill
        why = not_a_run(run)
        if why is not None:
            (on_refusal or fail)(Code.RUN_NOT_FOUND.value,
                                 f"{run} is not a run directory: {why}")
        return run
    if not latest:
        raise click.UsageError("give RUN, or --latest for the newest run")
    try:
        return latest_run(root if root is not None else DEFAULT_RUNS_ROOT)
    except EfoldError as exc:
        (on_refusal or fail)(exc.code.value, exc.detail)


def echo_report(report: msgspec.Struct, *, as_json: bool, text: Iterable[str]) -> None:
    """Print ``report`` as one line of JSON, or as its ``text`` lines."""
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        for line in text:
            click.echo(line)


def fail(code: str, detail: str = "") -> NoReturn:
    """Print a refusal (fixed code first) to stderr and exit 2."""
    click.echo(f"refused: {code}" + (f" ({detail})" if detail else ""), err=True)
    raise SystemExit(2)


def chosen_route(campaign: Campaign, *, faux: bool, local: bool, real: bool,
                 command: str) -> RouteKind:
    """The route ``command`` (``pilot``, ``cluster pilot``) runs ``campaign`` on: the
    flag given, else the campaign's own when it is faux or local; a paid route always
    needs ``--real``. A flag the campaign's route does not take refuses
    (``ControllerError`` ``lookup_pilot_real_route_unavailable``), naming the route."""
    kind = route_kind(campaign)
    why = None
    if not (faux or local or real):
        if kind != "real":
            return kind
        why = ("this campaign sends to a paid route: register, smoke and authorize it, "
               f"then {command} --real (docs/campaign.md)")
    elif local and kind != "local":
        why = ("--local runs a campaign whose every model is on loopback without a "
               f"credential; this one's route is {kind}")
    elif faux and kind != "faux":
        why = f"--faux sends nothing, and this campaign's route is {kind} (run it with --{kind})"
    if why is not None:
        raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE, why)
    return "faux" if faux else "local" if local else "real"


def refuse(exc: EfoldError) -> NoReturn:
    """``fail`` with an error's fixed code and detail."""
    fail(exc.code.value, exc.detail)


def journal_refusal(run_dir: str, exc: EfoldError) -> str | None:
    """The detail of a refusal that is the run's journal's own (a ``RegistryError``
    ``journal_invalid``: SQLite's words or the file's checks, which say nothing of
    where), with the journal named so the operator knows which file is damaged; None
    for any other refusal. The commands that read a run open no other journal."""
    if isinstance(exc, RegistryError) and exc.code is Code.JOURNAL_INVALID:
        return f"{journal_path(run_dir)}: {exc.detail or 'refused'}"
    return None


def refusal_for(as_json: bool) -> Callable[[str, str], NoReturn]:
    """``fail``, and under ``--json`` first the refusal as one JSON object on stdout
    (``{"refused": CODE, "detail": ...}``), so that ``--json`` always yields JSON."""
    def refuse_(code: str, detail: str) -> NoReturn:
        if as_json:
            click.echo(msgspec.json.encode({"refused": code, "detail": detail}).decode())
        fail(code, detail)
    return refuse_


def real_route_options(f: F) -> F:
    """``--authorization`` and ``--trust``: what a real run (``pilot --real``, ``smoke``)
    verifies and consumes."""
    f = click.option("--process-group-containment", "process_group_ok", is_flag=True,
                     help="Run without a cgroup where none can be made (process-group "
                          "containment; the report says so). Without it a real run "
                          "refuses: containment_unavailable.")(f)
    f = click.option("--trust", multiple=True, type=click.Path(dir_okay=False),
                     help="A trusted approver public key (repeatable).")(f)
    return click.option("--authorization", default=None, type=click.Path(dir_okay=False),
                        help="A signed authorization file (consumed once).")(f)


def _id_list(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    """Repeatable, each a comma list: ``--roles a,b --roles c`` is ``[a, b, c]``."""
    ids = [part.strip() for given in value for part in given.split(",")]
    if any(not i for i in ids):
        raise click.BadParameter("an empty name: give NAME[,NAME...]")
    return ids


def subset_options(f: F) -> F:
    """``--roles``, ``--traces``, ``--probes`` and ``--limit``, handed to the command as
    one ``subset: Subset | None`` argument (None: no subset flag given). Unknown ids
    are refused when the subset is registered (``subset_unknown``); ``--limit`` below 1
    is a usage error."""

    @functools.wraps(f)
    def command(*args: Any, roles: list[str], traces: list[str], probes: list[str],
                limit: int | None, **kwargs: Any) -> Any:
        return f(*args, subset=requested(roles, traces, probes, limit), **kwargs)

    g = click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Subset: only the schedule's first N (trace, probe) blocks; every "
                          "role gets the same N slots per repeat.")(command)
    g = click.option("--probes", multiple=True, callback=_id_list, metavar="ID[,ID...]",
                     help="Subset: only these probe ids (repeatable).")(g)
    g = click.option("--traces", multiple=True, callback=_id_list, metavar="ID[,ID...]",
                     help="Subset: only these trace ids (repeatable).")(g)
    g = click.option("--roles", multiple=True, callback=_id_list, metavar="NAME[,NAME...]",
                     help="Subset: only these roles (repeatable). Any subset flag makes a "
                          "new registration with its own sha256.")(g)
    return cast(F, g)


def campaign_option(f: F) -> F:
    """``pilot --campaign NAME|FILE``: register a campaign and run it in one step."""
    return click.option(
        "--campaign", "campaign", default=None, metavar="NAME|FILE",
        help="--faux: register this campaign (a TOML file, or a bundled one: `default`, "
             "`original`, `hard`, `boundary`, `resume`, `lookup`) and run it; the "
             "registration is printed and kept in the run directory.")(f)


class PilotRegistration(NamedTuple):
    registration: Registration
    data: bytes  # the exact bytes the run publishes as its registration.json
    made: bool  # made here (--campaign or a subset): print it, it is no file yet


def pilot_registration(*, campaign: str | None, registration: str | None,
                       sha256: str | None, subset: Subset | None,
                       real: bool, models: LocalModels | None = None) -> PilotRegistration:
    """What ``pilot`` runs: the verified ``--registration`` (narrowed by ``subset``, a
    new registration), or ``--campaign`` (default: the bundled default campaign)
    registered now, with ``subset``. ``--campaign`` with ``--registration`` is a usage
    error. A real run takes only a registration as given, smoked and authorized:
    ``--campaign`` or a subset with ``--real`` refuses
    (``lookup_pilot_real_route_unavailable``), as ``--real`` without a registration does.
    ``models``: models on this machine put into the campaign
    (``campaigns.local_models``)."""
    if campaign is not None and registration is not None:
        raise click.UsageError("--campaign and --registration/--sha256 are exclusive")
    if real and (campaign is not None or subset is not None):
        raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
                              "--real runs a registration that was smoked and authorized as "
                              "it is: register the campaign (subset flags included), smoke "
                              "and authorize it, then --registration FILE --sha256 S")
    if registration is not None and sha256 is not None:
        loaded = load_registration(registration, sha256)
        if subset is None:
            return PilotRegistration(loaded.registration, loaded.data, made=False)
        reg = subset_registration(loaded.registration, subset)
        return PilotRegistration(reg, encode_registration(reg), made=True)
    if real:
        raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
                              "--real needs --registration FILE --sha256 S")
    spec, raw = named_campaign(campaign or "default")
    if models:
        spec = with_local_models(spec, models)
    reg = compute_registration(spec, raw, subset)
    check_reportable(reg)  # as ``register`` does: what runs must run to a report
    return PilotRegistration(reg, encode_registration(reg),
                             made=campaign is not None or subset is not None or bool(models))
