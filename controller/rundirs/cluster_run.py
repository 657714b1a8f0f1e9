"""A cluster run's directory and how it is read back as one run. No Ray here: this is
what ``aggregate``, ``show`` and ``runs`` read, with or without Ray installed.

The directory, on the machine that ran ``cluster pilot`` (the head):

- the run lease and journal of the cluster controller, and the consumption marker of
  the campaign's authorization (consumed once, before anything is dispatched);
- ``registration.json`` and ``plan.json``: the campaign's, the whole plan;
- ``cluster.json`` (``ClusterManifest``): every shard as fixed before dispatch: its
  spec (``controller.campaigns.shards``), the Ray node it is bound to, its run directory on that
  node, its authorization's id. Published before the first shard is dispatched;
- ``shards/<k>.json`` (``ShardEnd``): how shard k ended, published once it did;
- ``shards/<k>/``: the copy of shard k's run directory (its records: registration,
  plan, receipts, journal, lease; never ``slots/``), published before its end record.

Reading it (``read_cluster``) refuses like a one-machine run and more: every shard copy
is read by ``aggregate.read_run`` (its own refusals: duplicate, changed, unplanned,
unvisited receipts), must hold the cluster's registration bytes and exactly the shard
plan the manifest's spec derives (``cluster_records_invalid``), and no slot may have a
receipt in two shards (``receipt_duplicate``). A shard without a copy is lost (its node
died, or it never ended): its slots are missing, never invented, and the run reads as
crashed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import msgspec

from efold.controller.campaigns.registration import REGISTRATION_NAME, Registration
from efold.controller.campaigns.shards import ShardSpec, plan_shards, shard_plan
from efold.controller.rundirs.aggregate import (
    AggregateError,
    RunView,
    read_run,
    registered_view,
    run_records,
)
from efold.errors import Code
from efold.protocol.records import Plan, Receipt, SlotSpend
from efold.registry.lease import probe_lease
from efold.report import EpisodeFact, LaunchFact, MoneyFact, RunFacts, StopFact
from efold.report.schema import ControllerState, ShardOutcomeName, ShardState

CLUSTER_NAME = "cluster.json"
SHARDS_DIR = "shards"
CLUSTER_VERSION = 1
# Launch and containment ids of shard k are offset by k x this in the merged report, so
# "launch 2000005" is shard 2's launch 5.
SHARD_ID_STRIDE = 1_000_000


class ShardPlaced(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    spec: ShardSpec
    node: str  # the Ray node id it is bound to
    run_dir: str  # its run directory on that node
    authorization_id: str  # its shard authorization's id


class ClusterManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    cluster: str  # the cluster run's directory name
    registration_sha256: str
    authorization_id: str  # the campaign's authorization, consumed by the cluster run
    shards: list[ShardPlaced]


class ShardOutcome(enum.StrEnum):
    COMPLETE = "complete"  # its controller exited 0
    STOPPED = "stopped"  # a stop policy ended it (exit 3)
    INTERRUPTED = "interrupted"  # its controller was interrupted and contained (130/143)
    REFUSED = "refused"  # its controller refused before running anything (exit 2)
    FAILED = "failed"  # its controller exited otherwise
    LOST = "lost"  # its node, its Ray actor or its controller died: no copy came back


class ShardEnd(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    index: int
    outcome: ShardOutcome
    exit_status: int | None  # the shard controller's, when it was seen to exit
    code: str | None = None  # a refusal's or stop's fixed code, when it printed one
    seconds: float | None = None  # the shard's wall time on its node


def shard_end_name(index: int) -> str:
    return f"{index}.json"


def outcome_of(exit_status: int) -> ShardOutcome:
    """A shard controller's exit status, read as ``pilot``'s statuses."""
    if exit_status == 0:
        return ShardOutcome.COMPLETE
    if exit_status == 3:
        return ShardOutcome.STOPPED
    if exit_status in (130, 143):
        return ShardOutcome.INTERRUPTED
    if exit_status == 2:
        return ShardOutcome.REFUSED
    return ShardOutcome.FAILED


def is_cluster_run(run: Path) -> bool:
    return (run / CLUSTER_NAME).is_file()


def read_manifest(run: Path) -> ClusterManifest:
    try:
        return msgspec.json.decode((run / CLUSTER_NAME).read_bytes(), type=ClusterManifest)
    except (OSError, msgspec.DecodeError) as exc:
        raise AggregateError(Code.CLUSTER_RECORDS_INVALID, f"{CLUSTER_NAME} unreadable") from exc


def read_shard_ends(run: Path, manifest: ClusterManifest) -> dict[int, ShardEnd]:
    """The shards' end records that were published (a shard still running, or lost with
    its cluster controller, has none)."""
    ends: dict[int, ShardEnd] = {}
    for placed in manifest.shards:
        path = run / SHARDS_DIR / shard_end_name(placed.spec.mark.index)
        if not path.exists():
            continue
        try:
            end = msgspec.json.decode(path.read_bytes(), type=ShardEnd)
        except (OSError, msgspec.DecodeError) as exc:
            raise AggregateError(Code.CLUSTER_RECORDS_INVALID, f"{path.name} unreadable") from exc
        if end.index != placed.spec.mark.index:
            raise AggregateError(Code.CLUSTER_RECORDS_INVALID, f"{path.name}: another shard")
        ends[end.index] = end
    return ends


@dataclass(frozen=True)
class ShardView:
    placed: ShardPlaced
    end: ShardEnd | None  # None: no end record (running, or lost with the cluster controller)
    view: RunView | None  # None: no copy came back (lost, or not ended yet)


def read_shards(run: Path, *, allow_damaged: bool = False,
                fresh: Mapping[int, RunView] | None = None,
                releasing: bool = False) -> tuple[RunView, list[ShardView]]:
    """The cluster run as one ``RunView`` (the whole plan, every shard's receipts and
    facts merged), and each shard as read. Refuses as the module docstring says.
    ``fresh``: shard runs read where they live (``cluster_collect``), by shard index,
    each taken instead of its copy (their caller checked them as this run's shards).
    ``releasing``: the caller holds the cluster run's lease and is about to let it go
    (``cluster collect``): the run reads as its controller gone, not live."""
    plan, reg = run_records(run)
    reg_bytes = (run / REGISTRATION_NAME).read_bytes()
    manifest = read_manifest(run)
    if manifest.registration_sha256 != plan.registration_sha256 or manifest.cluster != run.name:
        raise AggregateError(Code.CLUSTER_RECORDS_INVALID, "cluster.json is another run's")
    specs = plan_shards(reg, plan, manifest.cluster, len(manifest.shards))
    if specs != [p.spec for p in manifest.shards]:
        raise AggregateError(Code.CLUSTER_RECORDS_INVALID,
                             "the shards are not the ones the plan derives")
    # The lease before the shards' records, as ``read_run`` does: if the cluster
    # controller is gone now, what is read after this is final.
    controller = "released" if releasing else probe_lease(run).state.value
    ends = read_shard_ends(run, manifest)
    shards: list[ShardView] = []
    for placed in manifest.shards:
        spec = placed.spec
        copy = shard_copy_path(run, spec.mark.index)
        view = (fresh or {}).get(spec.mark.index)
        if view is None and copy.is_dir():
            view = read_run(copy, allow_damaged=allow_damaged)
            if (copy / REGISTRATION_NAME).read_bytes() != reg_bytes or view.plan != shard_plan(
                    plan, spec.mark, spec.checkpoints, spec.cap_units):
                raise AggregateError(Code.CLUSTER_RECORDS_INVALID,
                                     f"shard {spec.mark.index}: not this run's shard")
        shards.append(ShardView(placed, ends.get(spec.mark.index), view))
    return _merged(reg, plan, controller, shards), shards


def _merged(reg: Registration, plan: Plan, controller: str, shards: list[ShardView]) -> RunView:
    """One view of every shard that came back: receipts (a slot in two shards refuses),
    facts with each shard's launch and containment ids offset by its index
    (``SHARD_ID_STRIDE``), the span from the first start to the last end. A shard that
    did not come back counts as a controller that died."""
    order = {s.slot: i for i, s in enumerate(plan.slots)}
    receipts: dict[str, Receipt] = {}
    missing: list[str] = []
    spends: dict[str, SlotSpend] = {}
    stops: list[StopFact] = []
    launches: list[LaunchFact] = []
    episodes: list[EpisodeFact] = []
    sticky: str | None = None
    spans: list[tuple[int, int]] = []
    states: list[str] = []
    damaged: list[str] = []
    # The shards' journal money; a shard whose records never came back leaves it unknown.
    moneys: list[MoneyFact | None] = []
    for shard in shards:
        if shard.view is None:
            if _never_ran(shard):
                # It spent nothing; its refusal stops the run as a sticky stop would.
                moneys.append(MoneyFact(settled_units=0, retained_units=0, open_units=0))
                assert shard.end is not None
                if shard.end.code is not None:
                    stops.append(StopFact(code=shard.end.code, sticky=True))
                    sticky = sticky or shard.end.code
                continue
            states.append("holder_dead")
            moneys.append(None)
            continue
        view, facts = shard.view, shard.view.facts
        offset = shard.placed.spec.mark.index * SHARD_ID_STRIDE
        for r in view.receipts:
            if r.slot in receipts:
                raise AggregateError(Code.RECEIPT_DUPLICATE, r.slot)
            receipts[r.slot] = r
        missing += view.journaled_missing
        prefix = f"{SHARDS_DIR}/{shard.placed.spec.mark.index}/"
        damaged += [prefix + name for name in facts.damaged_files]
        moneys.append(facts.money)
        spends.update(view.summariser_spends)
        sticky = sticky or facts.sticky_stop
        stops += facts.stops
        launches += [msgspec.structs.replace(f, launch_id=f.launch_id + offset)
                     for f in facts.launches]
        episodes += [msgspec.structs.replace(e, containment_id=e.containment_id + offset,
                                             launch_id=e.launch_id + offset)
                     for e in facts.containments]
        if facts.started_ns is not None and facts.ended_ns is not None:
            spans.append((facts.started_ns, facts.ended_ns))
        states.append(facts.controller)
    live = controller == "live"
    if not live:
        # The cluster controller is gone: a shard that died (or whose controller did)
        # makes the run's a dead controller; else every shard released its lease.
        controller = "holder_dead" if {"holder_dead", "live"} & set(states) else "released"
    in_flight = sorted((s for shard in shards if shard.view for s in shard.view.in_flight),
                       key=order.__getitem__)
    facts = RunFacts(
        sticky_stop=sticky, stops=stops, launches=launches, containments=episodes,
        in_flight=in_flight, controller=cast(ControllerState, controller),
        started_ns=min(a for a, _ in spans) if spans else None,
        ended_ns=max(b for _, b in spans) if spans else None,
        shards=[_state(plan, shard, live) for shard in shards],
        money=_summed(moneys), damaged_files=sorted(damaged),
        template_unended=any(s.view.facts.template_unended for s in shards if s.view))
    return registered_view(reg, plan, sorted(receipts.values(), key=lambda r: order[r.slot]),
                           sorted(missing, key=order.__getitem__), in_flight, spends, facts)


def _summed(moneys: list[MoneyFact | None]) -> MoneyFact | None:
    """The shards' journal money summed; None when one shard's is unknown."""
    known = [m for m in moneys if m is not None]
    if len(known) != len(moneys):
        return None
    return MoneyFact(settled_units=sum(m.settled_units for m in known),
                     retained_units=sum(m.retained_units for m in known),
                     open_units=sum(m.open_units for m in known))


def _never_ran(shard: ShardView) -> bool:
    """A shard refused with no run of its own (its actor refused before starting a
    controller, or its controller refused before opening a run): it spent nothing."""
    return shard.view is None and shard.end is not None \
        and shard.end.outcome is ShardOutcome.REFUSED


def _state(plan: Plan, shard: ShardView, live: bool) -> ShardState:
    """A shard as the report shows it. Without an end record it is ``running`` while
    the cluster controller holds its lease, else ``lost``."""
    spec = shard.placed.spec
    kept = set(spec.checkpoints)
    end = shard.end
    outcome = end.outcome.value if end else "running" if live else ShardOutcome.LOST.value
    return ShardState(index=spec.mark.index, node=shard.placed.node,
                      outcome=cast(ShardOutcomeName, outcome),
                      planned=sum(1 for s in plan.slots if s.checkpoint in kept),
                      visited=len(shard.view.receipts) if shard.view else
                      0 if _never_ran(shard) else None,
                      code=end.code if end else None)


def shard_copy_path(run: Path, index: int) -> Path:
    return run / SHARDS_DIR / str(index)


def shard_scratch_path(run_dir: str) -> Path:
    """Where a shard's actor keeps the shard's ticket, registration and logs on its node,
    beside the shard's run directory (hidden: never read as a run), until the shard
    ends: then its keeper, its actor, ``cluster collect`` or ``reap`` removes it."""
    path = Path(run_dir)
    return path.parent / f".{path.name}.scratch"
