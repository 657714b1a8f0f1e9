"""How a run ended: its status, from journal facts the caller reads for the report.

The report never opens the journal itself (``report/`` reads no durable state but what
it is handed). ``efold.controller.rundirs.aggregate.read_run`` reads the journal and the run
lease read-only into ``RunFacts``; ``run_status`` turns those facts and the joined slots
into the ``RunStatus`` of ``results.json``, and ``status_banner`` into the fixed
sentences every rendered report opens with.

Every fact is checked like a receipt: codes must be fixed codes, ids opaque ids, states
from their closed sets, or the whole report refuses (``report_input_invalid``).

Crash detection needs no clean-end marker in the journal: the run lease is one. A
controller that ends by returning or by an exception marks the lease released; one that
dies (SIGKILL, OOM, power) leaves it ``holder_dead``. Independently of the lease, a run
whose controller is gone is unfinished when a planned slot has no receipt, a slot was
left in flight, or a launch has neither an exit record nor a finished containment
episode. An interrupted run (an ``interrupted`` stop in the journal) is reported as
interrupted, never as crashed, whatever it left unvisited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import get_args

import msgspec

from efold.errors import Code
from efold.protocol.records import OPAQUE_ID
from efold.report.errors import ReportError
from efold.report.join import Observation, check_id
from efold.report.schema import (
    ChainFacts,
    ContainmentEpisode,
    ControllerState,
    EpisodeOutcome,
    FoldIsolation,
    LaunchKind,
    RunContainment,
    RunStatus,
    ShardOutcomeName,
    ShardState,
    Verdict,
)

__all__ = [
    "CONTROLLER_STATES", "VERDICTS", "EpisodeFact", "LaunchFact", "MoneyFact", "RunFacts",
    "StopFact",
    "check_span", "run_status", "status_banner",
]

_FIXED_CODES = frozenset(code.value for code in Code)

# The run lease's states (``efold.registry.lease.LeaseState`` values).
CONTROLLER_STATES: frozenset[str] = frozenset(get_args(ControllerState))
# The verdicts, in precedence order (the first that holds wins).
VERDICTS: tuple[str, ...] = get_args(Verdict)
_OUTCOMES: frozenset[str] = frozenset(get_args(EpisodeOutcome))
_LAUNCH_KINDS: frozenset[str] = frozenset(get_args(LaunchKind))
_SHARD_OUTCOMES: frozenset[str] = frozenset(get_args(ShardOutcomeName))
_NODE_ID = re.compile(r"[0-9a-f]{1,128}")
_VERDICTS: frozenset[str] = frozenset(get_args(Verdict))
# A chain link's chosen part of the schedule, as ``pilot --slots``/``--chunk`` took it.
_PART = re.compile(r"slots [0-9]{1,9}:[0-9]{1,9}|chunk [0-9]{1,6}/[0-9]{1,6}")
# A damaged file as the reports may name it: a run file by its fixed name, or a receipt
# by its slot id, optionally inside a cluster run's shard copy (``shards/<k>/``).
# ``receipts/(unnamed).json`` stands for a receipt file whose own name is no slot id.
_DAMAGED_NAME = re.compile(r"((shards|links)/[0-9]{1,6}/)?(results\.json|receipts/(\(unnamed\)|"
                           + OPAQUE_ID.pattern + r")\.json)")
# Listed by id in the rendered banner; results.json always holds every id.
_BANNER_IDS = 10


class StopFact(msgspec.Struct, frozen=True):
    """One ``stops`` row."""

    code: str
    sticky: bool


class LaunchFact(msgspec.Struct, frozen=True):
    """One ``launches`` row: ``exited`` when its exit was recorded (``exited_ns``)."""

    launch_id: int
    slot: str
    kind: LaunchKind
    exited: bool


class EpisodeFact(msgspec.Struct, frozen=True):
    """One ``containments`` row: ``result`` is null until the episode finished."""

    containment_id: int
    launch_id: int
    cause: str
    finished: bool
    result: EpisodeOutcome | None


class MoneyFact(msgspec.Struct, frozen=True):
    """The journal's holds summed (``efold.controller.rundirs.aggregate.journal_money``): settled
    units, retained units (closed unsettled holds at their charge) and open units
    (holds not closed yet, at their full amount). Every caller's holds."""

    settled_units: int
    retained_units: int
    open_units: int


class RunFacts(msgspec.Struct, frozen=True):
    """What the journal and the lease say about how the run went (read-only).

    ``sticky_stop`` is ``JournalReader.sticky_stop()`` (unreconciled containment
    outranking every other sticky cause); ``in_flight`` the probe slots launched without
    a receipt; ``controller`` the run lease's state when read.

    ``started_ns`` / ``ended_ns`` (Unix nanoseconds, the journal's own clock): the first
    controller epoch's start and the latest time any journal row records; null when the
    caller did not read them (the run metadata then has no times)."""

    sticky_stop: str | None
    stops: list[StopFact]
    launches: list[LaunchFact]
    containments: list[EpisodeFact]
    in_flight: list[str]
    controller: ControllerState
    started_ns: int | None = None
    ended_ns: int | None = None
    shards: list[ShardState] | None = None  # a cluster run's shards (``ShardState``)
    chain: ChainFacts | None = None  # a chain's links (``controller.rundirs.chain``)
    money: MoneyFact | None = None  # the journal's money; None: not read
    # Files the run should hold that are gone or unreadable, by their names inside the
    # run directory (``receipts/<slot>.json``, ``results.json``): the run is damaged.
    damaged_files: list[str] = []
    # The controller's fork-server template (no slot's launch, so not in ``launches``)
    # has neither a journaled exit nor a finished containment. A live controller's
    # template runs until after its reports; without one, nothing proves it ended.
    template_unended: bool = False
    containment: RunContainment | None = None  # the journaled mode; None: not journaled
    fold_isolation: FoldIsolation | None = None  # the checkpoints' isolation; None: not read


def _refuse(detail: str) -> ReportError:
    return ReportError(Code.REPORT_INPUT_INVALID, detail)


def _check_code(kind: str, value: object) -> None:
    if not isinstance(value, str) or value not in _FIXED_CODES:
        raise _refuse(f"{kind} is not a fixed code")


def _check_count(kind: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _refuse(f"{kind} is not a non-negative integer")


def _check_facts(facts: RunFacts, planned: set[str]) -> None:
    if facts.sticky_stop is not None:
        _check_code("sticky stop", facts.sticky_stop)
    for stop in facts.stops:
        _check_code("stop code", stop.code)
    if facts.controller not in CONTROLLER_STATES:
        raise _refuse("controller state is not a lease state")
    launch_ids: set[int] = set()
    for launch in facts.launches:
        _check_count("launch id", launch.launch_id)
        check_id("launch slot", launch.slot)
        if launch.kind not in _LAUNCH_KINDS:
            raise _refuse("launch kind is not prep or probe")
        if launch.launch_id in launch_ids:
            raise _refuse("two launches share an id")
        launch_ids.add(launch.launch_id)
    for episode in facts.containments:
        _check_count("containment id", episode.containment_id)
        if episode.launch_id not in launch_ids:
            raise _refuse("a containment episode of an unknown launch")
        _check_code("containment cause", episode.cause)
        if episode.finished and episode.result not in _OUTCOMES:
            raise _refuse("a finished containment episode without a known outcome")
        if not episode.finished and episode.result is not None:
            raise _refuse("an unfinished containment episode with an outcome")
    for slot in facts.in_flight:
        if slot not in planned:
            raise _refuse("an in-flight slot the plan does not hold")
    for index, shard in enumerate(facts.shards or [], start=1):
        if shard.index != index or shard.outcome not in _SHARD_OUTCOMES \
                or not _NODE_ID.fullmatch(shard.node):
            raise _refuse("a shard out of order, with an unknown outcome or node id")
        _check_count("shard slots", shard.planned)
        if shard.visited is not None:
            _check_count("shard slots", shard.visited)
        if shard.code is not None:
            _check_code("shard code", shard.code)
    if facts.chain is not None:
        _check_chain(facts.chain)
    if facts.money is not None:
        _check_count("settled units", facts.money.settled_units)
        _check_count("retained units", facts.money.retained_units)
        _check_count("open units", facts.money.open_units)
    for name in facts.damaged_files:
        if _DAMAGED_NAME.fullmatch(name) is None:
            raise _refuse("a damaged file is not named as a run file")
    check_span(facts)


def _check_chain(chain: ChainFacts) -> None:
    _check_count("slots to run", chain.to_run)
    for index, link in enumerate(chain.links, start=1):
        if link.index != index or link.verdict not in _VERDICTS \
                or (link.part is not None and _PART.fullmatch(link.part) is None):
            raise _refuse("a link out of order, with an unknown verdict or part")
        for count in (link.planned, link.visited, link.finished):
            _check_count("link slots", count)


def check_span(facts: RunFacts) -> None:
    """The run's times are both known or both unknown, counts, and in order."""
    if (facts.started_ns is None) != (facts.ended_ns is None):
        raise _refuse("a run start without an end, or an end without a start")
    if facts.started_ns is not None and facts.ended_ns is not None:
        _check_count("run start", facts.started_ns)
        _check_count("run end", facts.ended_ns)
        if facts.ended_ns < facts.started_ns:
            raise _refuse("the run ends before it starts")


def _stop_code(facts: RunFacts) -> str | None:
    if facts.sticky_stop is not None:
        return facts.sticky_stop
    return next((s.code for s in facts.stops if not s.sticky), None)


def run_status(facts: RunFacts, observations: Sequence[Observation]) -> RunStatus:
    """The run's status (see ``RunStatus``). ``observations``: every planned slot joined
    to its receipt (``join_receipts``), in schedule order."""
    _check_facts(facts, {obs.planned.slot for obs in observations})
    launches = {launch.launch_id: launch for launch in facts.launches}
    episodes = [
        ContainmentEpisode(
            containment_id=e.containment_id, launch_id=e.launch_id,
            slot=launches[e.launch_id].slot, kind=launches[e.launch_id].kind, cause=e.cause,
            outcome=e.result if e.finished and e.result is not None else "unreconciled",
            finished=e.finished,
        )
        for e in facts.containments
    ]
    # A launch's latest episode speaks for it: a later episode that proved it contained
    # (a re-containment after recovery) supersedes an earlier unreconciled one.
    latest: dict[int, ContainmentEpisode] = {}
    for episode in sorted(episodes, key=lambda e: e.containment_id):
        latest[episode.launch_id] = episode
    episode_ended = {e.launch_id for e in episodes if e.finished}
    unexited = [launch.launch_id for launch in facts.launches
                if not launch.exited and launch.launch_id not in episode_ended]
    live = facts.controller == "live"
    interrupted = any(stop.code == Code.INTERRUPTED.value for stop in facts.stops)
    # While a controller holds the lease, its open launches and episodes are its own
    # business; only an episode that ended unreconciled is beyond its reach.
    ended_unreconciled = any(e.finished and e.outcome == "unreconciled"
                             for e in latest.values())
    unfinished = any(not e.finished for e in latest.values())
    unreconciled = ended_unreconciled or (
        not live and (unfinished or bool(unexited) or facts.template_unended))
    unvisited = [obs for obs in observations
                 if obs.status is None and not obs.receipt_copy_missing]
    missing = [obs.planned.slot for obs in unvisited if obs.eligible]
    # A chain's unvisited slots are slots still to run (``partial``), not a crash: its
    # last link ran what it was given, or its own verdict says why not.
    unfinished_run = bool((unvisited and facts.chain is None) or facts.in_flight
                          or unexited or unfinished)
    running = live and not interrupted and unfinished_run
    # A run left unfinished by a sticky stop it recorded (a cluster run's shard that
    # refused, with its code) stopped; one left unfinished without a word crashed.
    crashed = (not live and not interrupted
               and (facts.controller == "holder_dead"
                    or (unfinished_run and facts.sticky_stop is None)))
    stop = _stop_code(facts)
    verdict: Verdict
    if unreconciled:
        verdict = "unreconciled"
    elif interrupted:
        verdict = "interrupted"
    elif running:
        verdict = "running"
    elif crashed:
        verdict = "crashed"
    elif facts.damaged_files:
        verdict = "damaged"
    elif stop is not None:
        verdict = "stopped"
    elif facts.chain is not None and facts.chain.to_run:
        verdict = "partial"
    else:
        verdict = "complete"
    return RunStatus(
        verdict=verdict, stop=stop, interrupted=interrupted, crashed=crashed,
        unreconciled=unreconciled, controller=facts.controller, containments=episodes,
        unexited_launches=unexited, missing_slots=len(missing), missing_slot_ids=missing,
        in_flight=list(facts.in_flight),
        shards=None if facts.shards is None else list(facts.shards), chain=facts.chain,
        damaged_files=sorted(facts.damaged_files), containment=facts.containment,
        fold_isolation=facts.fold_isolation,
    )


# -- the banner: fixed sentences, codes, ids and counts ---------------------------------

RECOVER_COMMANDS = "run `efold-controller recover RUN` then `efold-controller reap RUN`"
UNKNOWN_HEADLINE = "Status unknown: these results were built without the run's journal"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _ids(values: Sequence[str | int]) -> str:
    shown = ", ".join(str(v) for v in values[:_BANNER_IDS])
    more = len(values) - _BANNER_IDS
    return shown + (f" and {more} more" if more > 0 else "")


def _gaps(status: RunStatus) -> str:
    parts = [_count(status.missing_slots, "slot") + " missing"]
    if status.in_flight:
        parts.append(f"{len(status.in_flight)} in flight")
    return ", ".join(parts)


def _damage(status: RunStatus) -> str:
    """What is damaged, named: the files, by their names inside the run directory."""
    files = status.damaged_files
    return (f"{_count(len(files), 'file')} gone or unreadable ({_ids(files)}); the "
            "figures count only what could be read")


def _headline(status: RunStatus) -> str:
    headline = _verdict_headline(status)
    if status.chain is not None:
        links = status.chain.links
        headline += (f" \u2014 chain of {_count(len(links), 'link')}: "
                     + ", ".join(link.verdict for link in links))
    if status.damaged_files and status.verdict != "damaged":
        # A higher verdict leads, and the damage is never left to the details.
        headline += f"; DAMAGED: {_count(len(status.damaged_files), 'file')}"
    return headline


def _verdict_headline(status: RunStatus) -> str:
    verdict = status.verdict
    if verdict == "unreconciled":
        return f"UNRECONCILED: processes of this run may be alive \u2014 {RECOVER_COMMANDS}"
    if verdict == "interrupted":
        return "Interrupted by the operator"
    if verdict == "running":
        return f"Running: a controller holds the run lease; {_gaps(status)} so far"
    if verdict == "crashed":
        how = ("controller died" if status.controller == "holder_dead"
               else "controller ended before the run did")
        return f"Crashed: {how}; {_gaps(status)}"
    if verdict == "damaged":
        return f"Damaged: {_damage(status)}"
    if verdict == "partial":
        left = status.chain.to_run if status.chain is not None else status.missing_slots
        return (f"Partial: {_count(left, 'slot')} still to run; "
                "`efold-controller pilot --continue RUN` on its last link runs them")
    if verdict == "stopped":
        gaps = f"; {_gaps(status)}" if status.missing_slots else ""
        return f"Stopped: {status.stop or 'no code'}{gaps}"
    return "Complete"


_CONTROLLER: dict[ControllerState, str] = {
    "live": "a controller held the run lease when these results were built",
    "released": "the controller released the run lease",
    "holder_dead": "the controller died without releasing the run lease",
    "absent": "the run has no lease file",
}


def _containment_line(containment: RunContainment | None) -> str:
    if containment is None:
        return "Containment: not recorded (a run from before cgroup containment)"
    if containment.mode == "cgroup":
        return ("Containment: cgroup (every process the run started stayed in the run's "
                "cgroup)")
    allowed = (", allowed by the operator's `--process-group-containment`"
               if containment.operator_allowed else "")
    return ("Containment: process groups, no writable cgroup here" + allowed + "; a process "
            "that leaves its group and session and drops its launch marker is not seen "
            "after a controller crash")


def _isolation_line(iso: FoldIsolation | None) -> list[str]:
    if iso is None or iso.checkpoints == 0:
        return []
    line = (f"Fold isolation: {iso.isolated} of {_count(iso.checkpoints, 'checkpoint')} "
            "built with no network and writes only in their slot")
    if iso.isolated < iso.checkpoints:
        line += (f" (no network: {iso.network_isolated}, writes confined: "
                 f"{iso.writes_isolated}, not reported: {iso.not_reported}; "
                 "`efold-controller fold check` says why)")
    return [line]


def status_banner(status: RunStatus | None) -> tuple[str, list[str]]:
    """The headline and its detail lines (plain text; backticks mark commands and codes).
    Built from fixed sentences, fixed codes, ids and counts only."""
    if status is None:
        return UNKNOWN_HEADLINE, []
    details = [
        f"Stop code: `{status.stop}`" if status.stop is not None else "Stop code: none",
        "Interrupted by the operator: " + ("yes" if status.interrupted else "no"),
        "Crashed: " + ("yes" if status.crashed else "no"),
        "Processes possibly alive: " + ("yes" if status.unreconciled else "no"),
        f"Controller: {_CONTROLLER[status.controller]}",
        "Missing slots (eligible, never visited): " + (
            f"{status.missing_slots} ({_ids(status.missing_slot_ids)})"
            if status.missing_slots else "0"),
        "Slots in flight (launched, never closed): " + (
            f"{len(status.in_flight)} ({_ids(status.in_flight)})" if status.in_flight else "0"),
        "Launches with no exit record and no finished containment: " + (
            f"{len(status.unexited_launches)} (launch {_ids(status.unexited_launches)})"
            if status.unexited_launches else "0"),
        _containment_line(status.containment),
        *_isolation_line(status.fold_isolation),
        f"Containment episodes: {len(status.containments)}",
        "Damaged files (gone or unreadable): " + (
            f"{len(status.damaged_files)} ({_ids(status.damaged_files)})"
            if status.damaged_files else "0"),
    ]
    for shard in status.shards or []:
        code = f" (`{shard.code}`)" if shard.code else ""
        visited = "unknown" if shard.visited is None else shard.visited
        details.append(f"Shard {shard.index}: {shard.outcome}{code}, {visited} of "
                       f"{shard.planned} slots visited, node {shard.node[:12]}")
    for link in status.chain.links if status.chain is not None else []:
        part = f" ({link.part})" if link.part else ""
        held = f", {link.containment}" if link.containment else ""
        details.append(f"Link {link.index}{part}: {link.verdict}, {link.finished} of "
                       f"{link.planned} slots finished ({link.visited} visited){held}")
    for e in status.containments:
        details.append(
            f"Containment {e.containment_id}: launch {e.launch_id} ({e.kind} {e.slot}), "
            f"cause `{e.cause}`, {e.outcome}" + ("" if e.finished else ", never finished")
        )
    return _headline(status), details

