"""Campaigns: what an operator asks efold to measure, validated before anything runs.

A campaign is a TOML file (two ship in ``controller/campaigns/``). Validation is closed:
an unknown key, an unknown arm or suite, a seed out of range... each refuses with
``campaign_invalid`` and a detail naming the field.

A role's fold is one of three kinds::

    roles = ["native", "mine", "tail-only", "cli"]

    [role.mine]
    arm = "tail-only"          # a built-in arm or an installed efold.folds plugin

    [role.cli]                 # an external command (efold-fold-v1); its arm is "cli"
    command = ["/usr/bin/python3", "/opt/folds/cli.py"]
    timeout_seconds = 30.0     # optional; default folds.external.DEFAULT_TIMEOUT_S
    cwd = "folds"              # optional working directory (relative: to the campaign)
    settings = { keep = 16 }   # optional; passed through to the fold as JSON

    [role.squeeze]             # a proxy fold: the command starts an OpenAI-compatible proxy
    command = ["/usr/bin/node", "/opt/squeeze/server.js"]
    proxy = { upstream_env = "OPENAI_BASE_URL", port_env = "PORT" }
    env = { SQUEEZE_TRIGGER = "8000" }   # optional extra variables (commands and proxies)

A role without a table is the arm of its own name. ``arm`` and ``command`` are
exclusive; a command's program is an absolute path to an executable file or a bare name
found on ``PATH``; its timeout (given or default) is at most ``deadlines.prep_seconds``;
a command role may not take the name of a built-in arm or an installed plugin.
``settings`` belongs to a plugin, command or proxy fold (a built-in arm takes none);
``cwd``, ``env`` and ``proxy`` to command roles. The registration pins every fold's
code (``efold.folds.pinning``); ``controller.pilot.preparation.prep_task`` builds the prep
task that carries the pin to the child.

The cap has its own codes, because a wrong cap is the one mistake that would otherwise
register a run that can never admit a request: ``cap_not_whole_cents`` (operators write
caps in cents; anything finer is a typo, not a budget) and ``cap_below_rmax`` (a cap
below one maximum reservation admits nothing), with the least cap that fits. A reader
its catalog does not price refuses with ``lookup_invalid_rate``. The ``[reader]`` and
``[summariser]`` tables are provider profiles (``controller.campaigns.profiles``); so is the
optional ``[judge]``, with its rubric (``controller.campaigns.judge_profile``).
"""

from __future__ import annotations

import decimal
import math
import os
import re
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from efold.boundary.case import Case
from efold.boundary.suite import bundled_cases_root, case_item, select_cases
from efold.controller.campaigns.design_spec import (
    DesignSpec,
    Guidance,
    read_guidance,
    validate_design,
)
from efold.controller.campaigns.judge_profile import (
    JudgeProfile,
    JudgeTable,
    judge_from_table,
    validate_judge,
)
from efold.controller.campaigns.profiles import (
    DETERMINISTIC,
    MAX_SUMMARY_REQUESTS,
    Profile,
    ProfileTable,
    SummariserProfile,
    profile_from_table,
    profile_rmax_units,
    validate_profile,
)
from efold.controller.errors import CampaignError
from efold.controller.processes.childenv import ALLOWED as CHILD_ENV_ALLOWED
from efold.corpus import SuiteItem, load_suite
from efold.corpus.user_suite import load_suite_dir
from efold.errors import Code, EfoldError
from efold.folds.external import DEFAULT_TIMEOUT_S
from efold.folds.ledger import LEDGER_EXTRACTIONS
from efold.folds.pinning import resolve_program
from efold.folds.probe_modes import (
    LOOKUP_ALLOWED,
    PROBE_MODES,
    RECALL_ONLY,
    ProbeMode,
    admission_refusal,
)
from efold.folds.registry import DECLARED_ARMS, extracts_ledger, plugin_arms
from efold.guard.money import UNITS_PER_USD, parse_decimal, units_to_usd
from efold.input_files import CAMPAIGN_LIMIT, InputFileError, read_input
from efold.protocol.records import OPAQUE_ID
from efold.protocol.tasks import RouteKind

CAMPAIGN_VERSION = 1
SUITES = ("original", "medium", "hard", "hard-distractors")
ARMS = ("native", "native-lookup", "cold-rebuild", "compaction", "compaction-2", "ceiling", "store",
        "store-compaction", "pack", "restart-switch-compact",
        "ledger-cold", "openai-compact", "anthropic-compact")
HARD_SEEDS_ALLOWED = range(101, 125)
# The provider-compaction arms (``folds.provider_compact``) and the profile ``api`` of the
# one endpoint each can send to.
PROVIDER_COMPACT_APIS: Final = {"openai-compact": "responses", "anthropic-compact": "messages"}
_ROLE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
# The campaign's name is an id in every report (the plan's ``campaign``), so it must be
# an opaque id the reports accept (``OPAQUE_ID``) made of letters, digits, - and _ only.
_CAMPAIGN_NAME = re.compile(r"[A-Za-z0-9_-]+")
BUNDLED = ("default", "original", "hard", "boundary", "resume", "lookup", "contract")
_UNITS_PER_CENT: Final = UNITS_PER_USD // 100
# The cap travels in JSON (registration, plan, authorization bindings); readers that hold
# numbers as doubles are exact only below 2**53, so a larger cap could be misread.
CAP_UNITS_LIMIT: Final = 2**53


DEFAULT_INSTRUCTIONS = (
    "You are the assistant in an ongoing conversation with its owner. Answer the owner's "
    "question from what you know of the conversation, tool results included. Be brief. "
    "If the answer never came up, say UNKNOWN."
)


class ProxySpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a proxy fold is told where to listen and where its upstream is: the names of
    the two environment variables efold sets when it starts the proxy."""

    upstream_env: str  # receives the capture endpoint's base URL, http://127.0.0.1:P/v1
    port_env: str  # receives the loopback port the proxy must listen on


class Role(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """An arm plus its frozen settings.

    The fold is a built-in arm or an installed entry-point plugin named ``arm``, or,
    when ``command`` is set, an external command (``arm`` is then the role's name).
    ``instructions`` has no default so that it is always encoded: ``omit_defaults``
    leaves out only ``command`` and ``timeout_seconds`` when unset, which keeps the
    bytes of every role without a command what they were before commands existed.
    """

    name: str
    arm: str
    instructions: str  # the reader's system prompt, frozen into the registration
    command: list[str] | None = None  # an external command's argv (efold-fold-v1)
    timeout_seconds: float | None = None  # the command's limit; None: DEFAULT_TIMEOUT_S
    settings: dict[str, Any] | None = None  # passed through to a plugin, command or proxy
    cwd: str | None = None  # a command's working directory (absolute once parsed)
    env: dict[str, str] | None = None  # extra environment variables of a command or proxy
    proxy: ProxySpec | None = None  # set: ``command`` starts a proxy fold
    # Set: ``instructions`` is this guidance file's text, its sha256 checked when the
    # campaign was read (``controller.campaigns.design``).
    guidance: Guidance | None = None
    # A command's (or proxy's) source tree, pinned file by file with its fold
    # (``folds.build_tree``), absolute once parsed; ``build_sha256``: the digest the
    # campaign says that tree has (checked at register).
    build: str | None = None
    build_sha256: str | None = None



class BoundarySpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A campaign's boundary cases (docs/boundary.md §10): ``cases`` names them (full
    ids, short ids such as ``B01``, or ``["all"]``) in the cases root ``root`` (None: the
    bundled cases; else an absolute path, resolved against the campaign file's
    directory when written relative). Each case is one more item of the campaign, run
    on every role like a trace with one probe."""

    cases: list[str]
    root: str | None = None


class Budgets(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    max_requests: int = 10
    lookup_calls: int = 8
    lookup_bytes: int = 126_976


# Probe children in flight at once (``concurrency``). Each costs one process (forked
# from the template: about 9 MiB of its own, 35 MiB resident with what it shares; see
# docs/performance.md), two while one ends and the next starts in its place, and one
# open hold of at most Rmax under the cap; admission stays serialized in the one writer
# whatever N is.
MAX_CONCURRENCY: Final = 32
MIN_DEADLINE_S: Final = 0.001  # one millisecond: the unit the authorization binds
# The longest each deadline may be (docs/campaign.md, ``[deadlines]``). Every deadline
# becomes a clock reading, a watchdog sum and a millisecond count in the authorization:
# a bound keeps all of them finite and meaningful (1e300 s would overflow the lockstep
# channel's clock arithmetic only after the authorization was spent). A day for a prep
# or a probe run (the reference's are 600 s), a week for the whole run (default 6 h),
# five minutes of containment grace (default 2 s).
MAX_STEP_SECONDS: Final = 86_400.0
MAX_RUN_SECONDS: Final = 7 * 86_400.0
MAX_GRACE_SECONDS: Final = 300.0
DEADLINE_MAXIMA: Final = {"prep_seconds": MAX_STEP_SECONDS, "probe_seconds": MAX_STEP_SECONDS,
                          "run_seconds": MAX_RUN_SECONDS, "grace_seconds": MAX_GRACE_SECONDS}


# Deadline defaults by route. Offline (faux reader, deterministic summariser) a probe run
# gets 60 s and a prep 120 s. A real route gets the reference's: a 600 s probe run (and
# prep, when a summariser model writes the summaries), each watched by the controller
# until 720 s (``watchdog_margin``: a 60 s cleanup allowance and a 60 s turn margin).
FAUX_PROBE_SECONDS: Final = 60.0
FAUX_PREP_SECONDS: Final = 120.0
REAL_SECONDS: Final = 600.0


class Deadlines(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Unset (None) probe and prep deadlines take their route's default
    (``probe_seconds``, ``prep_seconds``)."""

    prep_seconds: float | None = None
    probe_seconds: float | None = None
    run_seconds: float = 6 * 3600.0
    grace_seconds: float = 2.0  # SIGTERM -> SIGKILL during containment


def probe_seconds(c: Campaign) -> float:
    """A probe run's deadline: as given, else 600 s for a real reader, 60 s faux."""
    if c.deadlines.probe_seconds is not None:
        return c.deadlines.probe_seconds
    return FAUX_PROBE_SECONDS if c.reader.is_faux else REAL_SECONDS


def prep_seconds(c: Campaign) -> float:
    """A prep's deadline: as given, else 600 s when a summariser model writes
    summaries, 120 s offline."""
    if c.deadlines.prep_seconds is not None:
        return c.deadlines.prep_seconds
    return FAUX_PREP_SECONDS if c.summariser is None else REAL_SECONDS


class Campaign(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """``suite`` is a bundled suite's name, or, for a directory of the operator's own
    traces and probes (``corpus.user_suite``), the path as the campaign file wrote it
    (the reports' label) with ``suite_dir`` its absolute path."""

    name: str
    suite: str
    roles: list[Role]
    repeats: int = 1
    seeds: list[int] = []
    probe_limit: int | None = None  # probes per trace; None = all
    selection_seed: int = 0
    traces: list[str] = []  # the suite's traces to run, by id; empty: all of them
    schedule_seed: int = 0
    cap_usd: str = "0"  # exact decimal string
    concurrency: int = 1
    reader: Profile = Profile()
    budgets: Budgets = Budgets()
    deadlines: Deadlines = Deadlines()
    version: int = CAMPAIGN_VERSION
    summariser: SummariserProfile | None = None  # None: the deterministic summariser
    suite_dir: str | None = None  # set: the suite is this directory (``suite_items``)
    # None (never encoded): no judge, and the registration's bytes are what they were
    # before judges existed. Set: ``controller.campaigns.judge_profile``.
    judge: JudgeProfile | None = None
    # None (never encoded): no boundary cases, and the registration's bytes are what
    # they were before cases existed.
    boundary: BoundarySpec | None = None
    # How launches are held (``controller.processes.run_cgroups``). None (never encoded): cgroup v2
    # where a writable hierarchy exists, else process groups, said at run open (a real
    # run refuses the fallback unless its operator passes --process-group-containment).
    # "cgroup": refuse to start without it. "process-group": never create cgroups.
    containment: Literal["cgroup", "process-group"] | None = None
    # Whether the reader may look anything up (``folds.probe_modes``). Invariant: set in
    # every campaign read from a file and in every registration ``register`` writes;
    # UNSET (never encoded) only in a registration made before modes.
    probe_mode: ProbeMode | UnsetType = UNSET
    # Fold code's isolation (``efold.isolation``: no network, writes only its slot).
    # None (never encoded): wherever the kernel allows, and each prep says which it had.
    # "required": a prep child that cannot have both refuses to run fold code
    # (``fold_isolation_unavailable``, that slot's failure).
    isolation: Literal["required"] | None = None
    # Declared comparisons between roles (``controller.campaigns.design``); empty (never
    # encoded): none.
    design: list[DesignSpec] = []


def suite_items(c: Campaign) -> list[SuiteItem]:
    """The campaign's suite, every item validated: a bundled suite (with its seeds) or
    the directory ``suite_dir`` (``corpus_digest`` binds either into the registration).
    With ``probe_limit = 0`` none: the campaign runs boundary cases only."""
    if c.probe_limit == 0:
        return []
    if c.suite_dir is not None:
        return load_suite_dir(c.suite_dir)
    return load_suite(c.suite, c.seeds or None)


def campaign_cases(c: Campaign) -> list[Case]:
    """The campaign's boundary cases, loaded whole and locked (``boundary.suite``); a
    case problem refuses with its own code."""
    if c.boundary is None:
        return []
    root = Path(c.boundary.root) if c.boundary.root is not None else bundled_cases_root()
    return select_cases(root, c.boundary.cases)


def campaign_items(c: Campaign, cases: list[Case] | None = None) -> list[SuiteItem]:
    """Every item the campaign runs: its suite's traces, then its boundary cases (one
    item each, ``boundary.suite.case_item``; ``cases``: already loaded). Two items with
    one trace id refuse."""
    chosen = campaign_cases(c) if cases is None else cases
    items = suite_items(c) + [case_item(case) for case in chosen]
    ids = [i.trace.header.trace_id for i in items]
    if len(set(ids)) != len(ids):
        raise _invalid("a boundary case's trace id is also a trace of the suite")
    return items


class _RoleTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    arm: str | None = None
    instructions: str | None = None
    guidance: str | None = None
    guidance_sha256: str | None = None
    build: str | None = None
    build_sha256: str | None = None
    command: list[str] | None = None
    timeout_seconds: float | None = None
    settings: dict[str, Any] | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    proxy: ProxySpec | None = None


class _CampaignFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The on-disk shape: ``roles`` is a list of names; ``[role.NAME]`` tables may set an
    arm other than the name (a built-in or an installed plugin), or an external
    ``command`` (argv list) with an optional ``timeout_seconds`` instead of an arm, and
    instructions."""

    name: str
    suite: str
    roles: list[str]
    repeats: int = 1
    seeds: list[int] = []
    probe_limit: int | None = None
    selection_seed: int = 0
    traces: list[str] = []
    schedule_seed: int = 0
    cap_usd: str = "0"
    concurrency: int = 1
    reader: ProfileTable | None = None
    summariser: ProfileTable | None = None
    judge: JudgeTable | None = None
    boundary: BoundarySpec | None = None
    containment: Literal["cgroup", "process-group"] | None = None
    isolation: Literal["required"] | None = None
    probe_mode: str = RECALL_ONLY
    budgets: Budgets = Budgets()
    deadlines: Deadlines = Deadlines()
    role: dict[str, _RoleTable] = {}
    design: list[DesignSpec] = []
    version: int = CAMPAIGN_VERSION


def _invalid(detail: str) -> CampaignError:
    return CampaignError(Code.CAMPAIGN_INVALID, detail)


def _probe_mode(value: str) -> ProbeMode:
    if value == RECALL_ONLY:
        return RECALL_ONLY
    if value == LOOKUP_ALLOWED:
        return LOOKUP_ALLOWED
    raise _invalid(f"probe_mode {value!r}: one of {', '.join(map(repr, PROBE_MODES))}")


def parse_campaign(text: str, base_dir: Path | None = None) -> Campaign:
    """Parse and validate campaign text; ``base_dir`` resolves relative catalog paths
    (the campaign file's directory; default the working directory)."""
    try:
        raw = tomllib.loads(text)
        spec = msgspec.convert(raw, _CampaignFile)
    # TOMLDecodeError is a ValueError, and so is tomllib's refusal of an integer past the
    # int-string digit limit; RecursionError: arrays nested too deep to parse.
    except (ValueError, RecursionError, msgspec.ValidationError) as exc:
        raise _invalid("not a campaign: " + str(exc)[:200]) from exc
    unknown_role_tables = set(spec.role) - set(spec.roles)
    if unknown_role_tables:
        raise _invalid(f"[role.*] tables for unlisted roles: {sorted(unknown_role_tables)}")
    roles: list[Role] = []
    for name in spec.roles:
        table = spec.role.get(name, _RoleTable())
        if table.arm is not None and table.command is not None:
            raise _invalid(f"role {name!r}: arm and command are exclusive")
        cwd = table.cwd
        if cwd and "\0" not in cwd:
            cwd = str((base_dir or Path.cwd()).joinpath(cwd).absolute())
        build = table.build
        if build is not None:
            if not build or "\0" in build:
                raise _invalid(f"role {name!r}: build must name a directory")
            # Normalised (no "..": the design check reads paths inside it as the build).
            build = os.path.abspath((base_dir or Path.cwd()) / build)
        instructions, guidance = table.instructions or DEFAULT_INSTRUCTIONS, None
        if (table.guidance is None) != (table.guidance_sha256 is None):
            raise _invalid(f"role {name!r}: guidance and guidance_sha256 go together")
        if table.guidance is not None and table.guidance_sha256 is not None:
            if table.instructions is not None:
                raise _invalid(f"role {name!r}: instructions and guidance are exclusive")
            instructions, guidance = read_guidance(table.guidance, table.guidance_sha256,
                                                   base_dir)
        if table.build_sha256 is not None and (
                table.build is None or not re.fullmatch(r"[0-9a-f]{64}", table.build_sha256)):
            raise _invalid(f"role {name!r}: build_sha256 goes with a build and is 64 "
                           "lowercase hex digits")
        roles.append(Role(
            name=name,
            arm=table.arm or name,
            instructions=instructions,
            command=None if table.command is None else list(table.command),
            timeout_seconds=table.timeout_seconds,
            settings=table.settings, cwd=cwd, env=table.env, proxy=table.proxy,
            guidance=guidance, build=build, build_sha256=table.build_sha256,
        ))
    reader = profile_from_table(spec.reader, "reader", base_dir) or Profile()
    summariser = None
    if spec.summariser is not None and spec.summariser.provider != DETERMINISTIC:
        summariser = profile_from_table(spec.summariser, "summariser", base_dir)
    elif spec.summariser is not None and spec.summariser != ProfileTable(provider=DETERMINISTIC):
        raise _invalid("summariser: the deterministic summariser takes no other keys")
    boundary = spec.boundary
    if boundary is not None and boundary.root is not None and "\0" not in boundary.root:
        boundary = BoundarySpec(cases=list(boundary.cases), root=str(
            (base_dir or Path.cwd()).joinpath(boundary.root).absolute()))
    suite_dir = None
    if spec.suite not in SUITES and spec.suite and "\0" not in spec.suite:
        suite_dir = str((base_dir or Path.cwd()).joinpath(spec.suite).absolute())
    campaign = Campaign(
        name=spec.name, suite=spec.suite, suite_dir=suite_dir, roles=roles, repeats=spec.repeats,
        seeds=list(spec.seeds), probe_limit=spec.probe_limit, traces=list(spec.traces),
        selection_seed=spec.selection_seed, schedule_seed=spec.schedule_seed,
        cap_usd=spec.cap_usd, concurrency=spec.concurrency, reader=reader,
        budgets=spec.budgets, deadlines=spec.deadlines, version=spec.version,
        summariser=summariser if isinstance(summariser, SummariserProfile) else None,
        judge=judge_from_table(spec.judge, base_dir), boundary=boundary,
        containment=spec.containment, isolation=spec.isolation,
        probe_mode=_probe_mode(spec.probe_mode),
        design=list(spec.design),
    )
    validate_campaign(campaign)
    return campaign


def validate_campaign(c: Campaign) -> None:
    if c.version != CAMPAIGN_VERSION:
        raise _invalid(f"unknown campaign version {c.version}")
    if not (_CAMPAIGN_NAME.fullmatch(c.name) and OPAQUE_ID.fullmatch(c.name)):
        raise _invalid("name must be ASCII letters, digits, - and _, starting with a letter "
                       "or digit, at most 200 characters: every report takes it as an id "
                       f"of the form {OPAQUE_ID.pattern}")
    if not OPAQUE_ID.fullmatch(c.suite):
        # The suite is an id in every report (each planned slot's ``suite``).
        raise _invalid(f"suite {c.suite!r}: a directory suite is named by a path without '/' "
                       "(a directory, or a symlink to one, beside the campaign file): the "
                       "reports take it as an id of the form " + OPAQUE_ID.pattern)
    if c.suite_dir is not None:
        if c.suite in SUITES or not Path(c.suite_dir).is_dir():
            raise _invalid(f"suite {c.suite!r} is neither a bundled suite {SUITES} nor a "
                           "directory of traces and probes")
        if c.seeds:
            raise _invalid("seeds apply to the generated suites (medium, hard) only")
    elif c.suite not in SUITES:
        raise _invalid(f"suite must be one of {SUITES}, or a directory of traces and probes")
    elif c.suite == "original" and c.seeds:
        raise _invalid("seeds apply to the generated suites (medium, hard) only")
    elif c.suite != "original":
        if not c.seeds:
            raise _invalid("a generated suite (medium, hard) needs seeds")
        bad = [s for s in c.seeds if s not in HARD_SEEDS_ALLOWED]
        if bad or len(set(c.seeds)) != len(c.seeds):
            raise _invalid("seeds must be distinct, within 101-124")
    if not c.roles:
        raise _invalid("at least one role")
    names = [r.name for r in c.roles]
    if len(set(names)) != len(names):
        raise _invalid("role names must be distinct")
    for name in names:
        # Role names become parts of slot ids, file names and IPC tokens.
        if not _ROLE_NAME.fullmatch(name):
            raise _invalid(f"role name {name!r}: lowercase letters, digits, - and _ (max 40)")
    if not 1 <= c.repeats <= 10:
        raise _invalid("repeats must be 1-10")
    if len(set(c.traces)) != len(c.traces) or not all(c.traces):
        raise _invalid("traces must be distinct trace ids")
    if c.probe_limit is not None and c.probe_limit < 0:
        raise _invalid("probe_limit must be >= 0 when given (0: boundary cases only)")
    if c.probe_limit == 0 and c.boundary is None:
        raise _invalid("probe_limit = 0 runs boundary cases only: it needs a [boundary]")
    if c.probe_limit == 0 and c.traces:
        raise _invalid("probe_limit = 0 asks no question of any trace: drop traces "
                       "(or ask at least one probe)")
    if c.boundary is not None and c.boundary.root is not None \
            and not Path(c.boundary.root).is_dir():
        raise _invalid(f"boundary.root {c.boundary.root!r} is not a directory of cases")
    if not 1 <= c.concurrency <= MAX_CONCURRENCY:
        raise _invalid(f"concurrency must be 1-{MAX_CONCURRENCY} (probe children in flight)")
    if not 1 <= c.budgets.max_requests <= 10:
        raise _invalid("budgets.max_requests must be 1-10")
    if not (1 <= c.budgets.lookup_calls <= 8 and 1 <= c.budgets.lookup_bytes <= 126_976):
        raise _invalid("lookup budgets may only be tightened (<= 8 calls, <= 126976 bytes)")
    for key, maximum in DEADLINE_MAXIMA.items():
        _check_seconds(f"deadlines.{key}", getattr(c.deadlines, key), maximum)
    _validate_folds(c)
    validate_design([r.name for r in c.roles], c.design)
    validate_profile(c.reader, "reader")
    if c.summariser is not None:
        validate_profile(c.summariser, "summariser")
        if c.summariser.is_faux:
            raise _invalid("summariser: the faux provider reads, it does not summarise "
                           f"(use {DETERMINISTIC!r} or an endpoint)")
        if not 1 <= c.summariser.max_requests <= MAX_SUMMARY_REQUESTS:
            raise _invalid(f"summariser.max_requests must be 1-{MAX_SUMMARY_REQUESTS}")
        # A provider-compaction arm sends its one request to its provider's endpoint on
        # the summariser route: that route must speak the endpoint's API.
        for r in c.roles:
            wanted = PROVIDER_COMPACT_APIS.get(r.arm) if r.command is None else None
            if wanted is not None and c.summariser.api != wanted:
                raise _invalid(f"role {r.name!r}: the {r.arm} arm needs a [summariser] on "
                               f"api = {wanted!r}, not {c.summariser.api!r}")
            # The ledger's extractions are one request each: a limit below them would
            # pay for the first ones and refuse the last, every checkpoint.
            if extracts_ledger(r) and c.summariser.max_requests < LEDGER_EXTRACTIONS:
                raise _invalid(f"role {r.name!r}: the {r.arm} arm makes {LEDGER_EXTRACTIONS} "
                               "extraction requests per checkpoint; summariser.max_requests "
                               f"is {c.summariser.max_requests}")
    if c.judge is not None:
        validate_judge(c.judge)
        # The judge is asked from the probe child, which holds one credential: the
        # reader's. An endpoint judge must therefore name the same variable (or, like a
        # local reader, none), so no credential ever reaches a server it is not for.
        if not c.judge.is_faux and c.judge.credential_env != c.reader.credential_env:
            raise _invalid("judge.credential_env must be the reader's (a probe child "
                           "holds one credential)")
    cap_units(c)


def _check_seconds(key: str, value: float | None, maximum: float) -> None:
    """A duration key (None: its default): finite, at least a millisecond (the
    authorization binds each deadline in whole milliseconds, at least 1) and at most
    ``maximum``. bool is an int, but no duration."""
    if value is None:
        return
    if isinstance(value, bool) or not (math.isfinite(value)
                                       and MIN_DEADLINE_S <= value <= maximum):
        raise _invalid(f"{key} must be finite, between {MIN_DEADLINE_S} and {maximum:g} s")


def _validate_folds(c: Campaign) -> None:
    """Every role names a fold that exists here: a built-in arm, an installed plugin
    that is not rejected, or an external command whose program resolves."""
    plugins: tuple[list[str], list[str]] | None = None

    def installed() -> tuple[list[str], list[str]]:
        nonlocal plugins
        if plugins is None:  # scanned once, and only when a role needs it
            names, rejected = plugin_arms()
            plugins = names, [r.name for r in rejected]
        return plugins

    for r in c.roles:
        _validate_settings(r)
        if r.command is None:
            for key, value in (("timeout_seconds", r.timeout_seconds), ("cwd", r.cwd),
                               ("env", r.env), ("proxy", r.proxy), ("build", r.build)):
                if value is not None:
                    raise _invalid(f"role {r.name!r}: {key} applies to command roles only")
            if r.arm in DECLARED_ARMS:
                raise CampaignError(Code.ARM_NOT_AVAILABLE_AT_REVISION,
                                    f"{r.arm}: role {r.name!r} names an arm the benchmark "
                                    f"declares, {DECLARED_ARMS[r.arm]}; it is not available "
                                    "at this revision")
            if r.arm in ARMS:
                if r.settings is not None:
                    raise _invalid(f"role {r.name!r}: the built-in arm {r.arm!r} takes no "
                                   "settings")
                continue
            names, rejected = installed()
            if r.arm in rejected:
                raise _invalid(f"role {r.name!r}: plugin arm {r.arm!r} is rejected "
                               "(it claims a built-in name or is registered twice)")
            if r.arm not in names:
                raise _invalid(f"role {r.name!r}: unknown arm {r.arm!r} (arms: {ARMS}; "
                               f"installed plugins: {names or 'none'}; declared, not "
                               f"available at this revision: {tuple(DECLARED_ARMS)})")
            continue
        _validate_command(c, r, installed)
    # Every fold exists: now, may each run under the probe mode? All refusals at once.
    refused = [(r, why) for r in c.roles if (why := admission_refusal(
        r.arm, r.command is None and r.arm in ARMS, c.probe_mode)) is not None]
    if refused:
        first = refused[0][0]
        others = "".join(f"; role {r.name!r} ({r.arm}): {why}" for r, why in refused[1:])
        raise CampaignError(Code.ARM_NOT_IN_PROBE_MODE,
                            f"{first.arm}: role {first.name!r} may not run under probe_mode "
                            f"= {c.probe_mode!r}: {refused[0][1]}{others}")


def _validate_command(c: Campaign, r: Role,
                      installed: Callable[[], tuple[list[str], list[str]]]) -> None:
    if r.arm != r.name:
        raise _invalid(f"role {r.name!r}: a command role's arm is its name")
    names, rejected = installed()
    if r.name in ARMS or r.name in DECLARED_ARMS or r.name in names or r.name in rejected:
        raise _invalid(f"role {r.name!r}: a command role may not take the name of a "
                       "built-in arm, a declared arm or an installed plugin")
    if not r.command or any(not arg or "\0" in arg for arg in r.command):
        raise _invalid(f"role {r.name!r}: command must be a non-empty list of non-empty strings")
    if resolve_program(r.command[0]) is None:
        raise _invalid(f"role {r.name!r}: program {r.command[0]!r} is neither an absolute path "
                       "to an executable file nor found on PATH")
    if r.cwd is not None and not (r.cwd and "\0" not in r.cwd and Path(r.cwd).is_dir()):
        raise _invalid(f"role {r.name!r}: cwd {r.cwd!r} is not a directory")
    _validate_env(r)
    _check_seconds(f"role {r.name!r}: timeout_seconds", r.timeout_seconds, MAX_STEP_SECONDS)
    timeout = command_timeout(c, r)
    if timeout > prep_seconds(c):
        given = "timeout_seconds" if r.timeout_seconds is not None else "the default timeout"
        raise _invalid(f"role {r.name!r}: {given} ({timeout:g} s) exceeds deadlines.prep_seconds "
                       f"({prep_seconds(c):g} s)")


def command_timeout(c: Campaign, r: Role) -> float:
    """A command or proxy role's limit: its ``timeout_seconds``; else 60 s
    (``DEFAULT_TIMEOUT_S``), or the prep deadline for a proxy whose own calls a summariser
    model answers (a real model's summaries take minutes, not seconds)."""
    if r.timeout_seconds is not None:
        return r.timeout_seconds
    if r.proxy is not None and c.summariser is not None:
        return prep_seconds(c)
    return DEFAULT_TIMEOUT_S


# A fold's settings travel as JSON (the command's request, a proxy's environment, the
# registration): bounded so that a settings table can never crowd out the trace.
SETTINGS_LIMIT_BYTES: Final = 64 * 1024
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Variables a role's ``env`` may not set: the child's allowlist and efold's own (a
# proxy's and a workspace's HOME is their private directory).
_RESERVED_ENV = frozenset({*CHILD_ENV_ALLOWED, "HOME"})


def _validate_settings(r: Role) -> None:
    if r.settings is None:
        return
    try:
        size = len(msgspec.json.encode(r.settings))
    except (TypeError, msgspec.EncodeError) as exc:
        raise _invalid(f"role {r.name!r}: settings must be JSON-like: {exc}") from exc
    if size > SETTINGS_LIMIT_BYTES:
        raise _invalid(f"role {r.name!r}: settings are {size} bytes as JSON "
                       f"(at most {SETTINGS_LIMIT_BYTES})")


def _validate_env(r: Role) -> None:
    """A role's ``env`` and ``proxy`` variable names: well formed, not one the child's
    environment already governs (its allowlist, ``EFOLD_*``), and not both set by
    ``env`` and by the proxy wiring."""
    names = list(r.env or {})
    if r.proxy is not None:
        if r.proxy.upstream_env == r.proxy.port_env:
            raise _invalid(f"role {r.name!r}: proxy upstream_env and port_env must differ")
        wired = [r.proxy.upstream_env, r.proxy.port_env]
        if set(wired) & set(names):
            raise _invalid(f"role {r.name!r}: env sets a variable the proxy wiring sets")
        names += wired
    for name in names:
        if not _ENV_NAME.fullmatch(name) or name in _RESERVED_ENV or name.startswith("EFOLD_"):
            raise _invalid(f"role {r.name!r}: environment variable name {name!r} is not "
                           "allowed (letters, digits and _; not an allowlisted or EFOLD_ name)")
    for value in (r.env or {}).values():
        if "\0" in value:
            raise _invalid(f"role {r.name!r}: an env value holds a NUL")


def cap_units(c: Campaign) -> int:
    """The campaign's cap in units, once it is a positive whole number of cents, below
    ``CAP_UNITS_LIMIT`` and at least one maximum reservation (Rmax) of its reader. Equal
    to Rmax is enough: exactly one request fits."""
    text = c.cap_usd.strip()
    try:
        value = parse_decimal(c.cap_usd, "cap_usd")
    except EfoldError as exc:  # its detail already names the key ("cap_usd: ...")
        raise _invalid(exc.detail or str(exc.code)) from exc
    if value <= 0:
        raise _invalid("cap_usd must be positive")
    if not _whole_cents(value):
        raise CampaignError(Code.CAP_NOT_WHOLE_CENTS,
                            f"cap_usd {text} is not a whole number of cents")
    # Magnitude first (>= 1e10 USD is far past the limit), so the quantize below stays
    # exact: a whole-cent value under 1e10 has at most 12 significant digits.
    cap = None
    if value.adjusted() < 10:
        cap = int(value.quantize(decimal.Decimal("0.01")).scaleb(2)) * _UNITS_PER_CENT
    if cap is None or cap >= CAP_UNITS_LIMIT:
        largest = _cents_text((CAP_UNITS_LIMIT - 1) // _UNITS_PER_CENT)
        raise _invalid(f"cap_usd {text} is too large: the cap in units must be below 2**53 "
                       f"(at most {largest} USD)")
    # The reader's, the summariser's and the judge's requests are admitted under this cap.
    rmax, binding = max(((profile_rmax_units(p), p) for p in (c.reader, c.summariser, c.judge)
                         if p is not None), key=lambda pair: pair[0])
    if cap < rmax:
        least = -(-rmax // _UNITS_PER_CENT)  # Rmax rounded up to a whole cent
        route = f"Rmax for {binding.provider}/{binding.model}"
        if rmax % _UNITS_PER_CENT:
            route += f" is {units_to_usd(rmax)} USD"
        raise CampaignError(
            Code.CAP_BELOW_RMAX,
            f"cap_usd {text} is below one maximum reservation: it must be at least "
            f"{_cents_text(least)} USD ({route})",
        )
    return cap


def _whole_cents(value: decimal.Decimal) -> bool:
    # From the digits, not by arithmetic: decimal's 28-digit context would round
    # 99.999999999999999999999999999999 to 100.00 before any check saw it.
    _, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # NaN or an infinity (parse_decimal refuses both)
        raise _invalid("cap_usd must be a finite decimal")
    below_cent = -2 - exponent
    return below_cent <= 0 or not any(digits[-below_cent:])


def _cents_text(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def load_campaign(path: str | Path) -> tuple[Campaign, bytes]:
    """Parse a campaign file; returns it with the raw bytes (bound into registration).
    A relative catalog path is the campaign file's sibling."""
    try:
        raw = read_input(path, what="campaign", limit=CAMPAIGN_LIMIT)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise  # a device, a FIFO, a directory, too large: its own code
        raise CampaignError(Code.CAMPAIGN_NOT_FOUND,
                            f"{exc.detail}; the bundled campaigns, named without a path: "
                            f"{', '.join(BUNDLED)}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid("campaign is not UTF-8") from exc
    return parse_campaign(text, Path(path).absolute().parent), raw


def route_kind(c: Campaign) -> RouteKind:
    """Where a campaign's model requests go: ``faux`` (nothing is sent: the faux reader,
    the deterministic summariser, a faux judge or none), ``local`` (every model it sends
    to is on loopback without a credential: nothing can be billed, so ``pilot`` runs it
    without keygen or signed authorizations) or ``real`` (a paid route: the full
    ceremony, ``pilot --real``)."""
    senders = [p for p in (c.reader, c.summariser, c.judge) if p is not None and not p.is_faux]
    if not senders:
        return "faux"
    return "local" if all(p.is_local for p in senders) else "real"


def named_campaign(name: str) -> tuple[Campaign, bytes]:
    """A command's CAMPAIGN argument: a bundled campaign's name, else a file's path."""
    return bundled_campaign(name) if name in BUNDLED else load_campaign(name)


def bundled_campaign(name: str) -> tuple[Campaign, bytes]:
    if name not in BUNDLED:
        raise CampaignError(Code.CAMPAIGN_NOT_FOUND,
                            f"no bundled campaign {name!r} (bundled: {', '.join(BUNDLED)})")
    raw = resources.files("efold.controller.campaigns").joinpath(f"{name}.toml").read_bytes()
    return parse_campaign(raw.decode("utf-8")), raw
