"""Aggregation: receipts + plan -> results, refusing anything it cannot vouch for.

Read-only over the run: it reads ``plan.json``, ``receipts/*.json`` and the journal's
receipt digests, and changes none of them. It refuses (fixed codes):
- ``receipt_duplicate``: two receipts claim one slot;
- ``receipt_unplanned``: a receipt for a slot the plan does not have;
- ``receipt_unvisited``: a receipt the journal never recorded (the slot was not visited);
- ``receipt_changed``: a receipt whose bytes no longer hash to the journaled digest;
- ``receipt_unreadable``: a receipt file that cannot be read.
With ``allow_damaged`` (``read_run``) each such file is named as damaged instead.
A journaled receipt whose file is gone is counted as missing, never invented, and named
as damaged.

It also reads how the run ended, for the reports' status (``efold.report.status``): the
run lease's state (probed first, so a controller that ends meanwhile never reads as a
crash), then the journal's stops, launches and containment episodes. Nothing here
writes: the lease probe takes only a brief shared lock and the journal opens read-only.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec

from efold.controller.campaigns.campaign import route_kind
from efold.controller.campaigns.registration import REGISTRATION_NAME, Registration
from efold.controller.processes.run_cgroups import META_MODE, META_OPERATOR_FALLBACK
from efold.controller.processes.template import TEMPLATE_KIND
from efold.controller.rundirs.receipt_copies import RECEIPTS_DIR, receipt_name
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.folds.probe_modes import ProbeMode
from efold.folds.registry import calls_summariser, extracts_ledger
from efold.isolation import Isolation
from efold.protocol.records import (
    OPAQUE_ID,
    DesignRecord,
    Plan,
    PlannedSlot,
    Receipt,
    SlotSpend,
    SlotStatus,
    TokenCounts,
)
from efold.protocol.tasks import RouteKind
from efold.registry import publish_exclusive
from efold.registry.journal import HOLD_ACTIVE, HOLD_CONSUMED, HOLD_SETTLED, JournalReader
from efold.registry.lease import probe_lease
from efold.report import (
    REPORT_FILES,
    EpisodeFact,
    LaunchFact,
    MoneyFact,
    Results,
    RunFacts,
    StopFact,
    build_results,
    decode_results,
    render_reports,
)
from efold.report.errors import ReportError
from efold.report.results import STAND_IN_EXTRACTOR, STAND_IN_SUMMARISER
from efold.report.schema import ContainmentMode, ControllerState, FoldIsolation, RunContainment
from efold.worker.judge import JUDGE_RUN_SUFFIX

PLAN_NAME = "plan.json"
RESULTS_NAME = "results.json"
_RECEIPTS_PREFIX = f"{RECEIPTS_DIR}/"
_UNNAMED_RECEIPT = "(unnamed).json"  # stands for a receipt file whose name is no slot id


class AggregateError(EfoldError):
    """The run's receipts cannot be aggregated as they are."""


@dataclass(frozen=True)
class RunView:
    plan: Plan
    receipts: list[Receipt]  # verified receipts, plus one derived per in-flight slot
    journaled_missing: list[str]  # journaled receipts whose file is absent
    in_flight: list[str]  # launched, no receipt (the controller stopped mid-slot)
    faux: bool  # the registered reader is the faux extractive reader
    reader: str  # the registered reader, provider/model
    summariser_spends: dict[str, SlotSpend]  # checkpoint key -> its summary requests' spend
    summarisers: dict[str, str]  # role -> summariser provider/model its fold asks
    facts: RunFacts  # how the run went: stops, launches, containment, the run lease
    judge: str | None = None  # the registered judge, provider/model (19-C); None: none
    build: str | None = None  # the registration's build digest
    route: RouteKind | None = None  # faux, local or real (``campaign.route_kind``)
    probe_mode: ProbeMode | None = None  # the registration's (``folds.probe_modes``)
    design: list[DesignRecord] = field(default_factory=list)  # the registration's


def run_records(run: Path) -> tuple[Plan, Registration]:
    """plan.json, checked against registration.json (the plan names its registration's
    sha256, and its schedule digest covers its own slots), and the registered reader."""
    try:
        plan = msgspec.json.decode((run / PLAN_NAME).read_bytes(), type=Plan)
        reg_bytes = (run / REGISTRATION_NAME).read_bytes()
        reg = msgspec.json.decode(reg_bytes, type=Registration)
    except (OSError, msgspec.DecodeError) as exc:
        raise AggregateError(Code.RUN_RECORDS_INVALID, "plan or registration unreadable") from exc
    if plan.registration_sha256 != sha256_hex(reg_bytes) \
            or not plan.schedule_matches():
        raise AggregateError(Code.RUN_RECORDS_INVALID, "plan does not match the run")
    return plan, reg


def read_run(run_dir: str | os.PathLike[str], *, allow_damaged: bool = False) -> RunView:
    """The run as its records say. A receipt that fails a check refuses with its code;
    with ``allow_damaged`` it is named among the damaged files instead (its slot, when
    the journal recorded it, then counts as a missing copy) and the rest is read: one
    bad file never hides a whole run. A journaled receipt that is gone, and a
    ``results.json`` that does not parse, are damage in either mode."""
    run = Path(run_dir)
    plan, reg = run_records(run)
    # The lease before the journal: if the controller is gone now, the journal read
    # after this is its final state.
    controller = probe_lease(run).state.value
    with JournalReader(run) as journal:
        journaled = {r["slot"]: r["digest"] for r in journal.rows("receipts")}
        launches = journal.rows("launches")
        launched = {r["slot"] for r in launches if r["kind"] == "probe"}
        holds = journal.rows("holds")
        stops = journal.rows("stops")
        containments = journal.rows("containments")
        sticky = journal.sticky_stop()
        started_ns, ended_ns = _journal_span(journal)
        containment = _containment(journal)
        fold_isolation = fold_isolation_of(journal.rows("assignments", "kind = 'checkpoint'"))
    planned = {s.slot for s in plan.slots}
    seen: dict[str, Receipt] = {}
    damaged: set[str] = set()
    rdir = run / RECEIPTS_DIR
    # Only published receipts: a crash inside an exclusive publish can leave a hidden
    # temporary file (".<name>.tmp-..."), which is never a receipt.
    try:
        listed = os.listdir(rdir) if rdir.is_dir() else []
    except OSError as exc:
        raise AggregateError(Code.RECEIPT_UNREADABLE,
                             f"{RECEIPTS_DIR}/: {exc.strerror or 'unreadable'}") from exc
    names = sorted(n for n in listed if n.endswith(".json") and not n.startswith("."))
    for name in names:
        try:
            receipt = _verified_receipt(rdir, name, planned, journaled, seen)
        except AggregateError:
            if not allow_damaged:
                raise
            damaged.add(_damaged_name(name))
            continue
        seen[receipt.slot] = receipt
    order = {s.slot: i for i, s in enumerate(plan.slots)}
    by_slot = {s.slot: s for s in plan.slots}
    in_flight = sorted((launched & planned) - set(journaled), key=lambda s: order[s])
    for slot in in_flight:
        seen[slot] = _in_flight_receipt(by_slot[slot], [h for h in holds if h["slot"] == slot])
    receipts = sorted(seen.values(), key=lambda r: order[r.slot])
    missing = sorted(set(journaled) - set(seen), key=lambda s: order.get(s, -1))
    damaged.update(_RECEIPTS_PREFIX + receipt_name(slot) for slot in missing
                   if not os.path.lexists(rdir / receipt_name(slot)))
    if not _results_parse(run):
        damaged.add(RESULTS_NAME)
    # The fork-server template is the controller's own machinery, not a slot's launch,
    # and the report's launch facts are the slots' (prep, probe). Whatever containing it
    # decided reaches the report through the stops it journaled (unreconciled: sticky);
    # a controller killed before either leaves a template nothing proves ended, which
    # the status must count as ``recover`` does (``template_unended``).
    template_ids = {r["launch_id"] for r in launches if r["kind"] == TEMPLATE_KIND}
    contained = {r["launch_id"] for r in containments if r["finished_ns"] is not None}
    template_unended = any(r["exited_ns"] is None and r["launch_id"] not in contained
                           for r in launches if r["launch_id"] in template_ids)
    facts = _run_facts(controller, sticky, stops,
                       [r for r in launches if r["launch_id"] not in template_ids],
                       [r for r in containments if r["launch_id"] not in template_ids],
                       in_flight, started_ns, ended_ns)
    facts = msgspec.structs.replace(facts, money=journal_money(holds),
                                    damaged_files=sorted(damaged),
                                    template_unended=template_unended,
                                    containment=containment,
                                    fold_isolation=fold_isolation)
    # The judge's holds (``<slot>#judge``, 19-C) are in its slots' receipts, not here.
    summaries = _checkpoint_spends([h for h in holds if h["slot"] not in planned
                                    and not h["slot"].endswith(JUDGE_RUN_SUFFIX)])
    return registered_view(reg, plan, receipts, missing, in_flight, summaries, facts)


def _read_regular(path: Path) -> bytes:
    """A regular file's bytes. Opened without blocking: a FIFO at the name is refused
    (``EINVAL``, "not a regular file") instead of waiting forever for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _verified_receipt(rdir: Path, name: str, planned: set[str], journaled: dict[str, str],
                      seen: dict[str, Receipt]) -> Receipt:
    """The receipt in ``rdir/name`` if every check holds; else ``AggregateError`` with
    the check's code (module docstring)."""
    try:
        data = _read_regular(rdir / name)
    except OSError as exc:  # gone or unreadable since it was listed, or not a file
        raise AggregateError(Code.RECEIPT_UNREADABLE,
                             f"{name}: {exc.strerror or 'unreadable'}") from exc
    try:
        receipt = msgspec.json.decode(data, type=Receipt)
    except msgspec.DecodeError as exc:
        raise AggregateError(Code.RECEIPT_CHANGED, f"{name}: not a receipt") from exc
    if receipt.slot in seen:
        raise AggregateError(Code.RECEIPT_DUPLICATE, receipt.slot)
    if receipt.slot not in planned:
        raise AggregateError(Code.RECEIPT_UNPLANNED, receipt.slot)
    if receipt.slot not in journaled:
        raise AggregateError(Code.RECEIPT_UNVISITED, receipt.slot)
    if name != receipt_name(receipt.slot):
        # Published under its own slot's name only. Another file claiming a slot
        # whose own file exists is a duplicate; else a file named for another
        # planned slot was changed, and a name no slot has is unplanned.
        if (rdir / receipt_name(receipt.slot)).exists():
            raise AggregateError(Code.RECEIPT_DUPLICATE, receipt.slot)
        named = name.removesuffix(".json")
        raise AggregateError(
            Code.RECEIPT_CHANGED if named in planned else Code.RECEIPT_UNPLANNED, name)
    if sha256_hex(data) != journaled[receipt.slot]:
        raise AggregateError(Code.RECEIPT_CHANGED, receipt.slot)
    return receipt


def _damaged_name(name: str) -> str:
    """A damaged receipt file as the reports may name it: by its name when that is a
    slot id's, else as a file that is not (the reports never carry an arbitrary name)."""
    stem = name.removesuffix(".json")
    return _RECEIPTS_PREFIX + (name if OPAQUE_ID.fullmatch(stem) else _UNNAMED_RECEIPT)


def _results_parse(run: Path) -> bool:
    """False when the run holds a ``results.json`` that does not parse as results (an
    absent one is not damage: ``aggregate --output`` makes reports elsewhere)."""
    try:
        data = (run / RESULTS_NAME).read_bytes()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        decode_results(data)
    except ReportError:  # not a results-v1 document
        return False
    return True


def hold_charge(hold: dict[str, Any]) -> tuple[int, int, int]:
    """One journaled hold as (settled, retained, open) units: what the cap counts for
    it (``guard.ledger``: a settled hold its cost; a hold closed otherwise its amount or
    its known partial cost if larger; an open hold its full amount)."""
    if hold["state"] == HOLD_SETTLED:
        return hold["settled_units"], 0, 0
    if hold["state"] in (HOLD_ACTIVE, HOLD_CONSUMED):
        return 0, 0, hold["hold_units"]
    return 0, max(hold["hold_units"], hold["partial_units"] or 0), 0


def journal_money(holds: list[dict[str, Any]]) -> MoneyFact:
    """The run's money from its journal: every caller's holds (reader, summariser,
    judge), never the receipts'."""
    charges = [hold_charge(h) for h in holds]
    return MoneyFact(settled_units=sum(c[0] for c in charges),
                     retained_units=sum(c[1] for c in charges),
                     open_units=sum(c[2] for c in charges))


def _extractor(role: str, receipts: list[Receipt], configured: bool, model: str) -> str:
    """What wrote a ledger role's ledgers: what its slots' receipts say. A receipt that
    read a checkpoint without an account is from a run made before the model extractor
    (the deterministic one wrote it); with no checkpoint read at all (every build
    failed), the extractor the registration configured, which was asked."""
    own = [r for r in receipts if r.role == role]
    if any(r.ledger is not None and r.ledger.extractor == "model" for r in own):
        return model
    if any(r.ledger is not None or r.checkpoint_sha256 is not None for r in own):
        return STAND_IN_EXTRACTOR
    return model if configured else STAND_IN_EXTRACTOR


def registered_view(reg: Registration, plan: Plan, receipts: list[Receipt],
                    journaled_missing: list[str], in_flight: list[str],
                    summariser_spends: dict[str, SlotSpend], facts: RunFacts) -> RunView:
    """A run's view, with what the registration says of its routes."""
    reader = reg.campaign.reader
    summariser = reg.campaign.summariser
    # The plan's roles only: a cluster shard's plan may hold some of the campaign's.
    # Without a summariser model, the deterministic stand-in answers their requests.
    model = STAND_IN_SUMMARISER if summariser is None else \
        f"{summariser.provider}/{summariser.model}"
    summarisers = {role.name: model for role in reg.campaign.roles
                   if calls_summariser(role) and role.name in plan.roles}
    summarisers.update({role.name: _extractor(role.name, receipts, summariser is not None,
                                              model)
                        for role in reg.campaign.roles
                        if extracts_ledger(role) and role.name in plan.roles})
    judge = reg.campaign.judge
    return RunView(plan, receipts, journaled_missing, in_flight, reader.is_faux,
                   f"{reader.provider}/{reader.model}", summariser_spends, summarisers,
                   facts, None if judge is None else f"{judge.provider}/{judge.model}",
                   reg.digests.build, route_kind(reg.campaign),
                   None if isinstance(reg.campaign.probe_mode, msgspec.UnsetType)
                   else reg.campaign.probe_mode,
                   [] if isinstance(reg.design, msgspec.UnsetType) else list(reg.design))


# Every journal column that records a time (Unix ns): the run's span reads them all.
_JOURNAL_TIMES: dict[str, tuple[str, ...]] = {
    "epochs": ("started_ns",), "launches": ("launched_ns", "exited_ns"),
    "containments": ("started_ns", "finished_ns"), "members": ("recorded_ns",),
    "signals": ("sent_ns",), "holds": ("admitted_ns", "consumed_ns", "settled_ns"),
    "stops": ("recorded_ns",), "slot_status": ("updated_ns",),
    "receipts": ("recorded_ns",), "assignments": ("recorded_ns",),
}


def _journal_span(journal: JournalReader) -> tuple[int | None, int | None]:
    """The first controller epoch's start and the latest time any journal row records
    (None, None without an epoch)."""
    starts = [r["started_ns"] for r in journal.rows("epochs")]
    if not starts:
        return None, None
    times = [row[column] for table, columns in _JOURNAL_TIMES.items()
             for row in journal.rows(table) for column in columns
             if row[column] is not None]
    return min(starts), max(times)


def _containment(journal: JournalReader) -> RunContainment | None:
    """The run's journaled membership mode (None: a journal from before it)."""
    mode = journal.meta(META_MODE)
    if mode not in ("cgroup", "process-group"):
        return None
    return RunContainment(mode=cast(ContainmentMode, mode),
                          operator_allowed=journal.meta(META_OPERATOR_FALLBACK) is not None)


def fold_isolation_of(rows: list[dict[str, Any]]) -> FoldIsolation:
    """Counts of how the prepared checkpoints' folds ran isolated (their journaled
    ``Isolation``; a row without one is not reported)."""
    said = []
    for row in rows:
        raw = row.get("isolation")
        try:
            said.append(None if raw is None else msgspec.json.decode(raw, type=Isolation))
        except msgspec.DecodeError:
            said.append(None)
    told = [i for i in said if i is not None]
    return FoldIsolation(
        checkpoints=len(rows), isolated=sum(i.complete for i in told),
        network_isolated=sum(i.network == "loopback-only" for i in told),
        writes_isolated=sum(i.writes != "unrestricted" for i in told),
        not_reported=len(rows) - len(told))


def _run_facts(controller: str, sticky: str | None, stops: list[dict[str, Any]],
               launches: list[dict[str, Any]], containments: list[dict[str, Any]],
               in_flight: list[str], started_ns: int | None = None,
               ended_ns: int | None = None) -> RunFacts:
    """The journal rows the status needs, as plain facts (the report checks them)."""
    return RunFacts(
        sticky_stop=sticky,
        stops=[StopFact(code=r["code"], sticky=bool(r["sticky"])) for r in stops],
        launches=[LaunchFact(launch_id=r["launch_id"], slot=r["slot"], kind=r["kind"],
                             exited=r["exited_ns"] is not None) for r in launches],
        containments=[EpisodeFact(containment_id=r["containment_id"],
                                  launch_id=r["launch_id"], cause=r["cause"],
                                  finished=r["finished_ns"] is not None, result=r["result"])
                      for r in containments],
        in_flight=list(in_flight),
        controller=cast(ControllerState, controller),
        started_ns=started_ns,
        ended_ns=ended_ns,
    )


def _checkpoint_spends(holds: list[dict[str, Any]]) -> dict[str, SlotSpend]:
    """Per checkpoint key, the spend of the summary requests its prep child made (the
    holds on a key that is no planned slot): settled, retained, and the usage checked
    at settlement (unknown once one request had none)."""
    out: dict[str, SlotSpend] = {}
    for key in sorted({h["slot"] for h in holds}):
        mine = [h for h in holds if h["slot"] == key]
        usages = [json.loads(h["usage"]) if h["usage"] else None for h in mine]
        known = [u for u in usages if u is not None]
        spent = journal_money(mine)
        out[key] = SlotSpend(
            requests=len(mine), admitted=len(mine), settled_units=spent.settled_units,
            retained_units=spent.retained_units + spent.open_units,
            usage=TokenCounts(**{k: sum(u.get(k, 0) for u in known)
                                 for k in TokenCounts.__struct_fields__}),
            usage_known=len(known) == len(mine),
        )
    return out


def _in_flight_receipt(planned: PlannedSlot, holds: list[dict[str, Any]]) -> Receipt:
    """A slot the controller launched but never closed (it died mid-slot): visited,
    unadmitted before its first hold, incomplete after it; every hold not settled is
    counted at its full amount (or its known partial, if larger). Never scored."""
    spent = journal_money(holds)
    return Receipt(
        slot=planned.slot, role=planned.role, arm=planned.arm, trace_id=planned.trace_id,
        probe_id=planned.probe_id, category=planned.category, repeat=planned.repeat,
        status=SlotStatus.INCOMPLETE if holds else SlotStatus.UNADMITTED,
        code=Code.LOOKUP_WORKER_LOST.value,
        spend=SlotSpend(requests=len(holds), admitted=len(holds),
                        settled_units=spent.settled_units,
                        retained_units=spent.retained_units + spent.open_units,
                        usage_known=not holds),
    )


def build_run_results(view: RunView) -> Results:
    """The run's content-free results, its status included."""
    return build_results(
        view.plan, view.receipts, faux=view.faux, receipt_copies_missing=view.journaled_missing,
        run_facts=view.facts, reader=view.reader, summariser_spends=view.summariser_spends,
        judge=view.judge,
        summarisers=view.summarisers, build=view.build, route=view.route,
        probe_mode=view.probe_mode, design=view.design,
    )


def run_reports(view: RunView) -> dict[str, bytes]:
    """The run's results.json, summary.md and report.html, as bytes (content-free)."""
    return render_reports(build_run_results(view))


def publish_reports(reports: dict[str, bytes], out_dir: str | os.PathLike[str], *,
                    replace: bool = False) -> None:
    for name in REPORT_FILES:
        publish_exclusive(Path(out_dir), name, reports[name], replace=replace)
