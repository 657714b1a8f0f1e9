"""Reap: finish the containment a dead controller could not (``efold-controller reap``).

``recover`` only observes. ``reap`` acts, and only with the rules containment has while
the controller lives (``efold.controller.processes.containment``): it takes the run lease (so it
never races a live controller: a held lease refuses with ``lease_held``), starts a new
journal epoch, and runs one containment episode, cause ``run_unreconciled``, for every
launch that ``recover`` would not call settled or that still has live processes:

* members are the journaled ones plus every process tied to the launch now (its group
  while the leader pins it, recorded identities, the launch marker in the environment,
  parent links), each journaled before the first signal of its round;
* every signal goes through a pidfd after re-proving pid + start time + group; never an
  unproven pid, never a bare group;
* the episode's end is journaled; an episode that could not kill everything is
  unreconciled, as during a run.

In cgroup mode each launch's episode also has its journaled cgroup: frozen, its members
journaled, killed through ``cgroup.kill`` and waited empty. Then whatever still lives in
the run's cgroup (a process of a launch whose row was never written: the controller died
between placing it and journaling it) is killed through the run cgroup's own
``cgroup.kill``, and the run's cgroups are removed once empty.

Last, every receipt copy the dead controller journaled but did not publish is restored
from the journal (``controller.rundirs.receipt_copies``): the slot is never run again,
and its copy is exactly the journaled bytes.

Afterwards the run is observed again and the report says whether it is reconciled now:
in cgroup mode only when the run's cgroup is empty or gone.
"""

from __future__ import annotations

import os

import anyio
import msgspec

from efold.controller.errors import ControllerError
from efold.controller.processes.cgroups import Cgroup
from efold.controller.processes.containment import ContainmentPolicy, LaunchTarget, contain
from efold.controller.processes.proctable import read_entry
from efold.controller.processes.run_cgroups import (
    CGROUP,
    JournaledCgroup,
    discard_cgroup,
    journaled_mode,
    kill_cgroup,
    launch_cgroup_of,
    live_in_cgroup,
    open_run_cgroup,
)
from efold.controller.rundirs.receipt_copies import lost_copies, restore_copies
from efold.controller.rundirs.recovery import observe
from efold.errors import Code
from efold.identity import ProcessIdentity, boot_id, current_identity
from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease


class ReapedLaunch(msgspec.Struct, frozen=True):
    launch_id: int
    slot: str
    containment_id: int | None
    outcome: str  # contained | unreconciled
    members: int
    signals: int
    survivors: int


class ReapReport(msgspec.Struct, frozen=True):
    epoch: int
    launches: list[ReapedLaunch]
    reconciled: bool  # recover's verdict after the reap
    verdict: str
    # cgroup mode: processes killed through the run cgroup itself, in no launch's cgroup
    unattributed: int = 0
    # slots whose missing receipt copy was restored from the journal
    restored_receipts: list[str] = msgspec.field(default_factory=list)


async def _reap(run_dir: str, policy: ContainmentPolicy) -> ReapReport:
    with acquire_lease(run_dir) as lease:
        journal = JournalWriter(run_dir, lease)
        try:
            _refuse_a_live_controller(journal)
            epoch = journal.record_epoch(current_identity())
            lease.set_epoch(epoch)
            before = observe(run_dir)
            mode, journaled = journaled_mode(journal)
            run = _run_cgroup(journaled) if mode == CGROUP and journaled else None
            alive = {s.launch_id for s in before.survivors}
            wanted = set(before.unsettled_launches) | alive
            reaped: list[ReapedLaunch] = []
            for row in journal.rows("launches"):
                if row["launch_id"] not in wanted:
                    continue
                cgroup = _launch_cgroup(run, row.get("cgroup"), journaled)
                target = LaunchTarget(
                    launch_id=row["launch_id"], epoch=epoch, slot=row["slot"],
                    leader=ProcessIdentity(pid=row["pid"], start_time=row["start_time"],
                                           boot_id=row["boot_id"]),
                    pgid=row["pgid"], leader_pidfd=None, marker=row["marker"], cgroup=cgroup,
                )
                try:
                    result = await contain(target, journal=journal,
                                           cause=Code.RUN_UNRECONCILED, policy=policy)
                finally:
                    discard_cgroup(cgroup)
                reaped.append(ReapedLaunch(
                    launch_id=target.launch_id, slot=target.slot,
                    containment_id=result.containment_id, outcome=result.outcome.value,
                    members=len(result.members), signals=len(result.signals),
                    survivors=len(result.survivors),
                ))
            unattributed = await _empty_run_cgroup(run, policy) if run is not None else 0
            restored = restore_copies(run_dir, lost_copies(run_dir, journal.rows("receipts")))
        finally:
            journal.close()
    after = observe(run_dir)
    return ReapReport(epoch=epoch, launches=reaped, reconciled=after.reconciled,
                      verdict=after.verdict, unattributed=unattributed,
                      restored_receipts=restored)


def _refuse_a_live_controller(journal: JournalWriter) -> None:
    """``lease_held`` while any controller that ever opened this run's journal is alive
    (pid, start time and boot proven from /proc): the lease lives in the directory, so
    a copy of a live run has a free one, and reaping the copy would contain the live
    run's processes through their shared cgroup and records."""
    boot = boot_id()
    for row in journal.rows("epochs"):
        entry = read_entry(row["pid"])
        if row["boot_id"] == boot and row["pid"] != os.getpid() and entry is not None \
                and entry.start_time == row["start_time"] and not entry.exited:
            raise ControllerError(Code.LEASE_HELD,
                                  f"controller pid {row['pid']} of this run is alive "
                                  "(is this a copy of a live run?)")


def _run_cgroup(journaled: JournaledCgroup) -> Cgroup | None:
    """The run's cgroup, or None (gone, or not this run's or unreadable: then nothing is
    done through it, and ``recover`` afterwards says why it is not reconciled)."""
    try:
        return open_run_cgroup(journaled)
    except ControllerError:
        return None


def _launch_cgroup(run: Cgroup | None, rel: str | None,
                   journaled: JournaledCgroup | None) -> Cgroup | None:
    if run is None or journaled is None:
        return None
    try:
        return launch_cgroup_of(run, rel, journaled.rel)
    except ControllerError:
        return None


async def _empty_run_cgroup(run: Cgroup, policy: ContainmentPolicy) -> int:
    """Kill what still lives anywhere in the run's cgroup, wait for it to empty, remove
    it with its launch cgroups; how many processes it held."""
    left = len(live_in_cgroup(run))
    if left:
        kill_cgroup(run)
        try:
            await anyio.to_thread.run_sync(run.wait_empty, policy.kill_wait)
        except ControllerError:
            pass  # what still lives stays, and recover names it
    discard_cgroup(run)
    return left


def reap(run_dir: str | os.PathLike[str], *,
         policy: ContainmentPolicy | None = None) -> ReapReport:
    """Reap ``run_dir`` (see the module docstring). Raises ``lease_held`` while a
    controller holds the run or any controller of its journal is alive (a copy of a
    live run), ``journal_invalid`` for a
    directory that is not a run."""
    path = os.fspath(run_dir)
    return anyio.run(lambda: _reap(path, policy or ContainmentPolicy()), backend="trio")
