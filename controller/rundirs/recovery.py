"""Recovery: observe what a run left behind. Observation only.

``observe(run_dir)`` reads the journal read-only, re-proves every recorded process
(launch leaders and containment members) against /proc, looks for live processes still
tied to each launch, and returns a content-free report: ids, pids, start times, process
groups, states, fixed codes. It never signals, never launches, never writes the journal
and never readmits a slot: after a controller crash the processes it left are named here
so that an operator (or a later controller that re-proves them) can act.

Ties are those of ``efold.controller.processes.membership`` except adoption (rule 4): the process
that would have adopted orphans is the dead controller, so its orphans now belong to
init or another subreaper and cannot be attributed by parentage. They are still found
through their recorded identity (rule 3), their recorded process group and the launch
marker in their environment (rule 5, ``efold.controller.processes.marker``).

In cgroup mode (the run journaled a run cgroup, ``controller.processes.run_cgroups``) the kernel's
membership joins the ties: every live process of the run's cgroup is a survivor, named
with the launch whose cgroup holds it (tie ``cgroup``), whatever it did to its group,
session, environment or name. A run cgroup that is gone was empty (the kernel removes
only empty ones); one that cannot be read here makes the run NOT reconciled.

Reconciled means all of: no live process tied to any launch (and, in cgroup mode, the
run's cgroup empty or gone), every launch has an exit record or a finished containment
episode, no containment episode is unfinished, and no receipt copy the journal could
restore is missing once no controller holds the run (``controller.rundirs.receipt_copies``:
a controller killed between journaling a receipt and publishing its copy; ``reap``
restores it). A
launch the controller never saw end (it died first) is unsettled even when nothing of it
is visible now: only ``efold-controller reap`` (which proves and journals its end) or a
finished containment settles it.
"""

from __future__ import annotations

import enum
import os
from typing import Any, Final

import msgspec

from efold.controller.errors import ControllerError
from efold.controller.processes.marker import markers_by_process
from efold.controller.processes.membership import leader_pins_group, live_in_groups, tied_processes
from efold.controller.processes.proctable import ProcEntry, scan
from efold.controller.processes.proof import Member as RecordedMember
from efold.controller.processes.proof import ProofState, prove
from efold.controller.processes.run_cgroups import (
    CGROUP,
    PROCESS_GROUP_BLIND_SPOT,
    JournaledCgroup,
    journaled_mode,
    live_entries,
    open_run_cgroup,
)
from efold.controller.processes.template import TEMPLATE_KIND
from efold.controller.rundirs.receipt_copies import lost_copies
from efold.controller.rundirs.suggest import suggest
from efold.identity import ProcessIdentity, boot_id
from efold.registry.journal import JournalReader
from efold.registry.lease import LeaseState, probe_lease

# 2: unsettled launches, marked survivors, verdict; 3: containment; 4: run_cgroup,
# cgroup_state, survivors tied by cgroup (their launch None when no launch row names it);
# 5: lost_receipt_copies
REPORT_VERSION = 5


class SurvivorTie(enum.StrEnum):
    RECORDED = "recorded"  # a recorded process, re-proven alive
    DESCENDANT = "descendant"  # tied by group or parent links, never recorded
    UNPROVABLE = "unprovable"  # alive in a recorded group, identity not re-provable
    MARKED = "marked"  # carries the launch's environment marker (found after reparenting)
    CGROUP = "cgroup"  # a live member of the run's cgroup (found by the kernel's membership)


class ProcessState(msgspec.Struct, frozen=True):
    role: str  # leader | descendant
    launch_id: int
    pid: int
    start_time: int
    pgid: int
    proof: ProofState


class LaunchState(msgspec.Struct, frozen=True):
    launch_id: int
    epoch: int
    slot: str
    kind: str
    pid: int
    start_time: int
    pgid: int
    exit_recorded: bool
    exit_status: int | None
    proof: ProofState


class ContainmentState(msgspec.Struct, frozen=True):
    containment_id: int
    launch_id: int
    cause: str
    finished: bool
    result: str | None


class SurvivorState(msgspec.Struct, frozen=True):
    launch_id: int | None  # None: in the run's cgroup, in no journaled launch's cgroup
    pid: int
    start_time: int
    ppid: int
    pgid: int
    tie: SurvivorTie


class RecoveryReport(msgspec.Struct, frozen=True):
    version: int
    lease: str
    lease_holder_pid: int | None
    sticky_stop: str | None
    launches: list[LaunchState]
    members: list[ProcessState]
    containments: list[ContainmentState]
    survivors: list[SurvivorState]
    unfinished_containments: int
    unsettled_launches: list[int]  # neither an exit record nor a finished containment
    reconciled: bool  # nothing alive, every launch settled, no containment unfinished
    verdict: str  # one line, first in every rendering: reconciled, or why not
    containment: str  # "cgroup" or "process-group": what membership rests on
    run_cgroup: str | None  # cgroup mode: the run's cgroup (as the kernel names it)
    # cgroup mode: "empty", "gone" (removed: it was empty), "populated", or
    # "unreadable (why)"; None in process-group mode.
    cgroup_state: str | None
    # Journaled receipts whose copy is missing and that ``reap`` restores from the
    # journal, by slot; empty while a controller holds the run (it is publishing them).
    # (The field keeps its first name, ``lost``: a crash is the usual way to lose one.)
    lost_receipt_copies: list[str] = msgspec.field(default_factory=list)



def _identity(row: dict[str, Any]) -> ProcessIdentity:
    return ProcessIdentity(pid=row["pid"], start_time=row["start_time"], boot_id=row["boot_id"])


def _survivors_of(
    launch: dict[str, Any],
    members: list[RecordedMember],
    table: dict[int, ProcEntry],
    current_boot: str,
    marked: dict[int, str],
) -> list[SurvivorState]:
    leader = _identity(launch)
    if leader.boot_id != current_boot:
        return []  # another boot: nothing of this launch can be alive
    recorded = [m.identity for m in members] + [leader]
    marker = launch["marker"]
    carrying = {pid for pid, found in marked.items()
                if marker is not None and found == marker
                and table[pid].start_time >= leader.start_time}
    # The marked processes are found once for every launch (``marked``, one pass over
    # /proc environments); here they join the tie as known identities.
    tied = tied_processes(
        table, leader=leader, pgid=launch["pgid"],
        recorded=[*recorded, *(ProcessIdentity(pid=pid, start_time=table[pid].start_time,
                                               boot_id=current_boot) for pid in carrying)],
        controller_pid=-1, direct_children=frozenset(),
    )
    groups = {m.pgid for m in members if m.pgid == m.identity.pid}
    if leader_pins_group(table, leader):
        groups.add(launch["pgid"])
    groups.discard(os.getpgrp())
    known = {(i.pid, i.start_time) for i in recorded}
    tied_pids = {e.pid for e in tied}
    found: dict[int, SurvivorState] = {}
    for entry in [*tied, *live_in_groups(table, groups)]:
        if entry.exited or entry.pid in found or entry.pid == os.getpid():
            continue
        if (entry.pid, entry.start_time) in known:
            tie = SurvivorTie.RECORDED
        elif entry.pid in carrying:
            tie = SurvivorTie.MARKED
        elif entry.pid in tied_pids:
            tie = SurvivorTie.DESCENDANT
        else:
            tie = SurvivorTie.UNPROVABLE
        found[entry.pid] = SurvivorState(
            launch_id=launch["launch_id"], pid=entry.pid, start_time=entry.start_time,
            ppid=entry.ppid, pgid=entry.pgid, tie=tie,
        )
    return list(found.values())


def _once_each(survivors: list[SurvivorState], template_ids: set[int]) -> list[SurvivorState]:
    """Each live process once. A worker forked by the template carries the template's
    marker too, so it is tied to both launches: it is named with its own."""
    kept: dict[int, SurvivorState] = {}
    for survivor in survivors:
        seen = kept.get(survivor.pid)
        if seen is None or (seen.launch_id in template_ids
                            and survivor.launch_id not in template_ids):
            kept[survivor.pid] = survivor
    return list(kept.values())


def _superseded(episode: ContainmentState, episodes: list[ContainmentState]) -> bool:
    """An episode a dead controller left unfinished is superseded by a later finished
    episode of the same launch (``reap``'s): its end is then on record."""
    return any(e.finished and e.launch_id == episode.launch_id
               and e.containment_id > episode.containment_id for e in episodes)


def _cgroup_survivors(journaled: JournaledCgroup, launches: list[dict[str, Any]],
                     ) -> tuple[str, list[SurvivorState]]:
    """The run cgroup's state and its live members, each named with the launch whose
    journaled cgroup holds it (None: no launch row names that cgroup)."""
    try:
        cgroup = open_run_cgroup(journaled)
    except ControllerError as exc:
        return f"unreadable ({exc.code.value}: {exc.detail})", []
    if cgroup is None:
        return "gone", []
    # By name: seen from another cgroup namespace the run's cgroup has another path.
    owners = {row["cgroup"].rpartition("/")[2]: row["launch_id"]
              for row in launches if row.get("cgroup")}
    found: list[SurvivorState] = []

    def add(pids: list[int], launch_id: int | None) -> None:
        found.extend(SurvivorState(
            launch_id=launch_id, pid=e.pid, start_time=e.start_time, ppid=e.ppid,
            pgid=e.pgid, tie=SurvivorTie.CGROUP) for e in live_entries(pids))

    try:
        with cgroup:
            add(cgroup.own_pids(), None)  # placed nowhere else: no launch of its own
            for child in cgroup.children():
                with child:
                    add(child.pids(), owners.get(child.name))
    except ControllerError as exc:
        return f"unreadable ({exc.code.value}: {exc.detail})", []
    return ("populated" if found else "empty"), found


def _verdict(survivors: int, unsettled: int, unfinished: int, mode: str,
             cgroup_state: str | None, lost_copies: int, launched: int) -> str:
    unreadable = cgroup_state is not None and cgroup_state.startswith("unreadable")
    if not (survivors or unsettled or unfinished or unreadable or lost_copies):
        # No launch row: nothing was launched (each is journaled before it starts), as
        # in a run stopped before it recorded its containment.
        # An empty cgroup left by a dead controller holds nothing, but stays until
        # ``reap`` removes it.
        left = f"; `{REAP_HINT}` removes it" if cgroup_state == "empty" else ""
        basis = ("nothing was launched for it" if not launched else
                 f"cgroup containment: the run's cgroup is {cgroup_state}{left}"
                 if mode == CGROUP else PROCESS_GROUP_BLIND_SPOT)
        return ("reconciled: nothing of this run is alive and every launch has ended "
                f"({basis})")
    reasons = []
    if unreadable:
        reasons.append(f"the run's cgroup is {cgroup_state}")
    if survivors:
        reasons.append(f"{survivors} live process(es) of the run")
    if unsettled:
        reasons.append(f"{unsettled} launch(es) never seen to end")
    if unfinished:
        reasons.append(f"{unfinished} unfinished containment(s)")
    if lost_copies:
        reasons.append(f"{lost_copies} receipt copy(ies) missing, restorable from the "
                       "journal")
    return "NOT reconciled: " + ", ".join(reasons) + f" (run `{REAP_HINT}`)"


# What the verdict says to run; the report names no path, its text does (``named``).
REAP_HINT: Final = "efold-controller reap RUN"


def named(verdict: str, run_dir: str | os.PathLike[str]) -> str:
    """``verdict`` as text for an operator: the command it says to run names the run
    (quoted for a shell) instead of ``RUN``."""
    return verdict.replace(REAP_HINT, suggest("reap", run_dir))


def observe(run_dir: str | os.PathLike[str], *, lease_ours: bool = False) -> RecoveryReport:
    """The recovery report for ``run_dir``. Raises ``RegistryError(journal_invalid)`` if
    the journal cannot be read. ``lease_ours``: the caller holds the run's lease, so a
    live lease is no controller publishing receipts (``reap``, a continuation)."""
    with JournalReader(run_dir) as journal:
        launches = journal.rows("launches")
        member_rows = journal.rows("members")
        containment_rows = journal.rows("containments")
        sticky = journal.sticky_stop()
        mode, journaled = journaled_mode(journal)
        receipt_rows = journal.rows("receipts")
    lease = probe_lease(run_dir)
    # A live controller publishes what it journaled: only a dead one's copies are lost.
    publishing = lease.state is LeaseState.LIVE and not lease_ours
    lost = [] if publishing else lost_copies(run_dir, receipt_rows)
    current_boot = boot_id()
    table = scan()
    marked = markers_by_process(table)
    by_launch: dict[int, list[RecordedMember]] = {}
    members: list[ProcessState] = []
    for row in member_rows:
        member = RecordedMember(_identity(row), row["pgid"], row["role"])
        by_launch.setdefault(row["launch_id"], []).append(member)
        proof = prove(member, current_boot=current_boot)
        proof.close()
        members.append(ProcessState(
            role=row["role"], launch_id=row["launch_id"], pid=row["pid"],
            start_time=row["start_time"], pgid=row["pgid"], proof=proof.state,
        ))
    launch_states: list[LaunchState] = []
    survivors: list[SurvivorState] = []
    for row in launches:
        proof = prove(RecordedMember(_identity(row), row["pgid"], "leader"), current_boot=current_boot)
        proof.close()
        launch_states.append(LaunchState(
            launch_id=row["launch_id"], epoch=row["epoch"], slot=row["slot"], kind=row["kind"],
            pid=row["pid"], start_time=row["start_time"], pgid=row["pgid"],
            exit_recorded=row["exited_ns"] is not None, exit_status=row["exit_status"],
            proof=proof.state,
        ))
        survivors.extend(
            _survivors_of(row, by_launch.get(row["launch_id"], []), table, current_boot,
                          marked)
        )
    containments = [
        ContainmentState(
            containment_id=r["containment_id"], launch_id=r["launch_id"], cause=r["cause"],
            finished=r["finished_ns"] is not None, result=r["result"],
        )
        for r in containment_rows
    ]
    survivors = _once_each(survivors, {row["launch_id"] for row in launches
                                       if row["kind"] == TEMPLATE_KIND})
    cgroup_state = None
    if mode == CGROUP and journaled is not None:
        cgroup_state, in_cgroup = _cgroup_survivors(journaled, launches)
        seen = {s.pid for s in survivors}
        survivors.extend(s for s in in_cgroup if s.pid not in seen)
    finished = {c.launch_id for c in containments if c.finished}
    unsettled = [launch.launch_id for launch in launch_states
                 if not launch.exit_recorded and launch.launch_id not in finished]
    unfinished = sum(1 for c in containments if not c.finished and not _superseded(c, containments))
    return RecoveryReport(
        version=REPORT_VERSION,
        lease=lease.state.value,
        lease_holder_pid=lease.holder.pid if lease.holder else None,
        sticky_stop=sticky,
        launches=launch_states,
        members=members,
        containments=containments,
        survivors=survivors,
        unfinished_containments=unfinished,
        unsettled_launches=unsettled,
        reconciled=not survivors and not unsettled and not unfinished and not lost
        and not (cgroup_state or "").startswith("unreadable"),
        verdict=_verdict(len(survivors), len(unsettled), unfinished, mode, cgroup_state,
                         len(lost), len(launch_states)),
        containment=mode, run_cgroup=journaled.rel if journaled else None,
        cgroup_state=cgroup_state, lost_receipt_copies=[copy.slot for copy in lost],
    )
