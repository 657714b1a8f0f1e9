"""Reap: finish the containment a dead controller could not (``efold-controller reap``).

``recover`` only observes. ``reap`` acts, and only with the rules containment has while
the controller lives (``efold.controller.containment``): it takes the run lease (so it
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

Afterwards the run is observed again and the report says whether it is reconciled now.
"""

from __future__ import annotations

import os

import anyio
import msgspec

from efold.controller.containment import ContainmentPolicy, LaunchTarget, contain
from efold.controller.recovery import observe
from efold.errors import Code
from efold.identity import ProcessIdentity, current_identity
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


async def _reap(run_dir: str, policy: ContainmentPolicy) -> ReapReport:
    with acquire_lease(run_dir) as lease:
        journal = JournalWriter(run_dir, lease)
        try:
            epoch = journal.record_epoch(current_identity())
            lease.set_epoch(epoch)
            before = observe(run_dir)
            alive = {s.launch_id for s in before.survivors}
            wanted = set(before.unsettled_launches) | alive
            reaped: list[ReapedLaunch] = []
            for row in journal.rows("launches"):
                if row["launch_id"] not in wanted:
                    continue
                target = LaunchTarget(
                    launch_id=row["launch_id"], epoch=epoch, slot=row["slot"],
                    leader=ProcessIdentity(pid=row["pid"], start_time=row["start_time"],
                                           boot_id=row["boot_id"]),
                    pgid=row["pgid"], leader_pidfd=None, marker=row["marker"],
                )
                result = await contain(target, journal=journal, cause=Code.RUN_UNRECONCILED,
                                       policy=policy)
                reaped.append(ReapedLaunch(
                    launch_id=target.launch_id, slot=target.slot,
                    containment_id=result.containment_id, outcome=result.outcome.value,
                    members=len(result.members), signals=len(result.signals),
                    survivors=len(result.survivors),
                ))
        finally:
            journal.close()
    after = observe(run_dir)
    return ReapReport(epoch=epoch, launches=reaped, reconciled=after.reconciled,
                      verdict=after.verdict)


def reap(run_dir: str | os.PathLike[str], *,
         policy: ContainmentPolicy | None = None) -> ReapReport:
    """Reap ``run_dir`` (see the module docstring). Raises ``RegistryError`` with
    ``lease_held`` while a controller holds the run, ``journal_invalid`` for a
    directory that is not a run."""
    path = os.fspath(run_dir)
    return anyio.run(lambda: _reap(path, policy or ContainmentPolicy()), backend="trio")
