"""Containment of one launch's processes (docs/architecture.md §9).

On a stop, a timeout, a disconnect or an integrity error the controller contains the
worker: the leader and every process tied to it (``efold.controller.processes.membership``),
reparented orphans included. One episode:

1. journal the episode (``record_containment_start``);
2. each round: snapshot /proc; journal every newly tied process as a member
   (``record_members``) **before** any signal of that round; re-prove every recorded
   member (``efold.controller.processes.proof``: pidfd + start time + pgid; a zombie is dead and,
   if it is our adopted orphan, reaped);
3. the first signalling round sends SIGTERM, later ones SIGKILL: to the whole launch
   group through the leader's pidfd with ``PIDFD_SIGNAL_PROCESS_GROUP`` when the kernel
   has it and a member of that group re-proves, and through each re-proven member's own
   pidfd otherwise (and for members that left the group). Then wait, bounded
   (``term_grace`` after SIGTERM, ``kill_wait`` after SIGKILL), on the members' pidfds;
4. stop when no re-proven member is alive, or after ``kill_rounds`` SIGKILL rounds;
5. a final snapshot: any live process still tied to the launch, or alive in a recorded
   member's process group, is a survivor. Survivors make the episode **unreconciled**:
   journaled as a sticky ``unreconciled_containment`` stop, which outranks every other
   stop cause (``JournalReader.sticky_stop``).

In cgroup mode (the target has a cgroup, ``controller/processes/run_cgroups.py``) the kernel's
membership joins the ties: each round freezes the launch's cgroup before the snapshot
(no process of it can fork while its members are read), journals every member of the
cgroup with the tied processes, signals, and thaws; every SIGKILL round also writes
``cgroup.kill``, which reaches every process of the cgroup, frozen, never journaled or
just forked. Whatever of the cgroup outlives the rounds is killed through it and waited
for (``populated 0``); any live member of it is a survivor, and so is the launch (as its
leader, unprovable) when the cgroup's members cannot be read. A process cannot leave its
cgroup by ``setsid``, double forks, clearing its environment or re-exec, so nothing of
the launch is missed. The caller removes the emptied cgroup (``run_cgroups.discard_cgroup``).

Never signalled: an unproven pid, a bare pid, a bare pgid. A recorded member whose pid is
now held by another process (recycled, or a forged record) is never signalled; if that
process is alive in the recorded group, the group is live with no re-provable member:
unreconciled.

If the journal cannot be written, containment goes on with the members it holds in
memory (every signal still needs a fresh proof) and reports ``persisted=False``: a failed
write is never treated as a durable one.

The episode runs shielded from cancellation (like trio's subprocess cleanup) and is
bounded by its policy: at most ``term_grace + kill_rounds * kill_wait`` plus scans.
The leader itself is not reaped here (its zombie pins the group until the end); the
launcher reaps it afterwards through its trio ``Process``.
"""

from __future__ import annotations

import enum
import os
import signal
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import anyio

from efold.controller.errors import ControllerError
from efold.controller.processes.cgroups import Cgroup
from efold.controller.processes.membership import leader_pins_group, live_in_groups, tied_processes
from efold.controller.processes.proctable import ProcEntry, scan
from efold.controller.processes.proof import (
    ROLE_DESCENDANT,
    ROLE_LEADER,
    Member,
    Proof,
    ProofState,
    group_signal_supported,
    prove,
    signal_pidfd,
)
from efold.controller.processes.run_cgroups import kill_cgroup, live_in_cgroup
from efold.controller.processes.subreaper import DIRECT_CHILDREN, reap_adopted
from efold.errors import Code, EfoldError
from efold.identity import ProcessIdentity, boot_id
from efold.registry.journal import JournalWriter

VIA_GROUP = "pidfd_group"
VIA_MEMBER = "pidfd"
VIA_CGROUP = "cgroup_kill"  # one row per write of cgroup.kill, pid = the launch leader's


@dataclass(frozen=True)
class ContainmentPolicy:
    term_grace: float = 1.0  # seconds to wait after SIGTERM
    kill_wait: float = 2.0  # seconds to wait after each SIGKILL round
    kill_rounds: int = 5
    use_group_signal: bool = True  # False forces per-member pidfds (tests, old kernels)
    # Told each sticky stop the episode decides, at once: right after its journal write
    # (before the signal it precedes), not when the episode ends, which may be a whole
    # SIGTERM grace later. Must not raise or await (the run closes admission in memory).
    on_stop: Callable[[Code], None] | None = None


@dataclass(frozen=True)
class LaunchTarget:
    """What containment needs about one launch. ``leader_pidfd`` is the pidfd opened at
    launch (owned by the launcher, never closed here); None if there is none."""

    launch_id: int
    epoch: int
    slot: str
    leader: ProcessIdentity
    pgid: int
    leader_pidfd: int | None
    marker: str | None = None  # the launch's environment marker, if it had one
    # The launch's cgroup (cgroup mode), opened by the caller, who keeps owning it (and
    # removes it once empty); containment only reads, freezes, thaws and kills it.
    cgroup: Cgroup | None = None


class ContainmentOutcome(enum.StrEnum):
    CONTAINED = "contained"  # nothing tied to the launch is alive any more
    UNRECONCILED = "unreconciled"  # something is alive that could not be proven or killed


class SurvivorReason(enum.StrEnum):
    UNPROVABLE = "unprovable"  # alive in a recorded group, identity not re-provable
    SURVIVED_KILL = "survived_kill"  # re-proven member still alive after every round


@dataclass(frozen=True)
class Survivor:
    identity: ProcessIdentity
    pgid: int
    reason: SurvivorReason


@dataclass(frozen=True)
class SignalSent:
    pid: int
    signal: int
    via: str


@dataclass(frozen=True)
class ContainmentResult:
    launch_id: int
    containment_id: int | None  # None if the episode could not be journaled
    cause: Code
    outcome: ContainmentOutcome
    members: tuple[Member, ...]  # every member known, in recording order
    signals: tuple[SignalSent, ...]
    survivors: tuple[Survivor, ...]
    persisted: bool  # every journal write of the episode succeeded
    # Sticky stops this episode decided (journaled unless ``persisted`` is False): the
    # pilot must take every one of them before it launches anything else.
    stops: tuple[Code, ...] = ()

    @property
    def code(self) -> Code | None:
        """``unreconciled_containment`` when the pilot must take that absorbing stop."""
        if self.outcome is ContainmentOutcome.UNRECONCILED:
            return Code.UNRECONCILED_CONTAINMENT
        return None


_T = TypeVar("_T")


@dataclass
class _Episode:
    target: LaunchTarget
    journal: JournalWriter | None
    policy: ContainmentPolicy
    cause: Code
    containment_id: int | None = None
    persisted: bool = True
    # Invariant: every member here was journaled (or the write failed and `persisted`
    # is False) before any signal that relied on it; keys prevent duplicates.
    members: list[Member] = field(default_factory=list)
    keys: set[tuple[int, int, int]] = field(default_factory=set)
    signals: list[SignalSent] = field(default_factory=list)
    boot: str = field(default_factory=boot_id)
    cgroup_unreadable: bool = False  # the cgroup's members could not be read: a survivor
    frozen: bool = False  # the launch's cgroup is frozen (only between freeze and thaw)

    def stopped(self, code: Code) -> None:
        """A sticky stop decided (and journaled, if it could be): told at once."""
        if self.policy.on_stop is not None:
            self.policy.on_stop(code)

    def write(self, action: Callable[[JournalWriter], _T]) -> _T | None:
        if self.journal is None:
            self.persisted = False
            return None
        try:
            return action(self.journal)
        except (EfoldError, sqlite3.Error, OSError):
            self.persisted = False
            return None

    def load_recorded(self) -> None:
        """Members journaled earlier for this launch (e.g. at DoneAck time)."""
        if self.journal is None:
            return
        try:
            rows = self.journal.rows("members", "launch_id = ?", (self.target.launch_id,))
        except (EfoldError, sqlite3.Error):
            self.persisted = False
            return
        for row in rows:
            ident = ProcessIdentity(
                pid=row["pid"], start_time=row["start_time"], boot_id=row["boot_id"]
            )
            self._remember(Member(ident, row["pgid"], row["role"]))

    def _remember(self, member: Member) -> bool:
        if member.key in self.keys:
            return False
        self.keys.add(member.key)
        self.members.append(member)
        return True

    def record_new(self, tied: Sequence[ProcEntry]) -> None:
        """Remember and journal (one transaction) the tied processes not yet members."""
        t = self.target
        fresh: list[Member] = []
        leader = Member(t.leader, t.pgid, ROLE_LEADER)
        if self._remember(leader):
            fresh.append(leader)
        for entry in tied:
            if entry.exited:
                continue  # a zombie is dead: nothing to contain, only to reap
            if entry.pid == t.leader.pid and entry.start_time == t.leader.start_time:
                if entry.pgid == t.pgid:
                    continue  # the leader, already recorded in its launch group
            ident = ProcessIdentity(pid=entry.pid, start_time=entry.start_time, boot_id=self.boot)
            member = Member(ident, entry.pgid, ROLE_DESCENDANT)
            if self._remember(member):
                fresh.append(member)
        if fresh:
            cid = self.containment_id
            self.write(lambda j: j.record_members(
                launch_id=t.launch_id, containment_id=cid,
                members=[(m.identity, m.pgid, m.role) for m in fresh],
            ))

    def snapshot(self) -> tuple[dict[int, ProcEntry], list[ProcEntry]]:
        """The tied processes now, the live members of the launch's cgroup among them
        (and their descendants, wherever they are)."""
        t = self.target
        in_cgroup = self.cgroup_members()
        table = scan()
        recorded = [m.identity for m in self.members]
        recorded += [ProcessIdentity(pid=e.pid, start_time=e.start_time, boot_id=self.boot)
                     for e in in_cgroup]
        tied = tied_processes(
            table, leader=t.leader, pgid=t.pgid, recorded=recorded,
            controller_pid=os.getpid(),
            direct_children=DIRECT_CHILDREN.pids() - {t.leader.pid}, marker=t.marker,
        )
        return table, tied

    def cgroup_members(self) -> list[ProcEntry]:
        try:
            return live_in_cgroup(self.target.cgroup)
        except ControllerError:
            self.cgroup_unreadable = True
            return []

    async def freeze(self) -> None:
        """Freeze the launch's cgroup (bounded; killing works on a frozen cgroup too)."""
        cgroup = self.target.cgroup
        if cgroup is not None and not self.frozen:
            self.frozen = True
            await anyio.to_thread.run_sync(_quietly, cgroup.freeze, FREEZE_WAIT_S)

    async def thaw(self) -> None:
        cgroup = self.target.cgroup
        if cgroup is not None and self.frozen:
            self.frozen = False
            await anyio.to_thread.run_sync(_quietly, cgroup.thaw, FREEZE_WAIT_S)

    def kill_cgroup(self) -> None:
        cgroup = self.target.cgroup
        if cgroup is not None and kill_cgroup(cgroup):
            self._log(self.target.leader.pid, signal.SIGKILL, VIA_CGROUP)

    async def wait_cgroup_empty(self, timeout: float) -> None:
        cgroup = self.target.cgroup
        if cgroup is not None:
            await anyio.to_thread.run_sync(_quietly, cgroup.wait_empty, timeout)

    def reap_zombies(self, tied: Sequence[ProcEntry]) -> None:
        for entry in tied:
            if entry.exited and entry.pid != self.target.leader.pid:
                reap_adopted(entry.pid, entry.start_time)

    def send(self, proofs: Sequence[Proof], sig: int) -> None:
        """One signal to every re-proven member: through the group when possible."""
        t = self.target
        alive = [p for p in proofs if p.state is ProofState.ALIVE]
        grouped = False
        if (
            self.policy.use_group_signal
            and t.leader_pidfd is not None
            and any(p.member.pgid == t.pgid for p in alive)
            and group_signal_supported(t.leader_pidfd)
        ):
            if signal_pidfd(t.leader_pidfd, sig, group=True):
                self._log(t.leader.pid, sig, VIA_GROUP)
            grouped = True
        for proof in alive:
            if (grouped and proof.member.pgid == t.pgid) or proof.pidfd is None:
                continue
            if signal_pidfd(proof.pidfd, sig):
                self._log(proof.member.identity.pid, sig, VIA_MEMBER)

    def _log(self, pid: int, sig: int, via: str) -> None:
        self.signals.append(SignalSent(pid, sig, via))
        t, cid = self.target, self.containment_id
        self.write(lambda j: j.record_signal(
            launch_id=t.launch_id, containment_id=cid, pid=pid, signal=sig, via=via,
        ))


# How long a freeze or thaw may take to show in cgroup.events before the episode goes on
# (a frozen cgroup is still killed; a thawed one is waited on).
FREEZE_WAIT_S = 1.0


def _quietly(action: Callable[..., bool], *args: object) -> bool:
    """A blocking cgroup action for a worker thread; a failure is False (what lives is
    what the survivor check sees)."""
    try:
        return bool(action(*args))
    except ControllerError:
        return False


async def _wait_readable(fd: int) -> None:
    await anyio.wait_readable(fd)


async def _wait_exited(proofs: Sequence[Proof], timeout: float) -> None:
    """Until every ALIVE proof's process has exited (pidfd readable), or ``timeout``."""
    fds = [p.pidfd for p in proofs if p.state is ProofState.ALIVE and p.pidfd is not None]
    if not fds:
        return
    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as tg:
            for fd in fds:
                tg.start_soon(_wait_readable, fd)


def recorded_groups(
    members: Sequence[Member], target: LaunchTarget, table: dict[int, ProcEntry]
) -> set[int]:
    """The process groups that must be empty once the launch is contained: the launch
    group while the leader pins its number, and every group a recorded member led (the
    group of a descendant that escaped with ``setsid``). Never the controller's own."""
    groups = {m.pgid for m in members if m.pgid == m.identity.pid}
    if leader_pins_group(table, target.leader):
        groups.add(target.pgid)
    else:
        # Not pinned: another group may carry that number now; only the members' own
        # proofs (the tied list) speak for the launch.
        groups.discard(target.pgid)
    groups.discard(os.getpgrp())
    return groups


def _survivors(episode: _Episode) -> list[Survivor]:
    table, tied = episode.snapshot()
    episode.reap_zombies(tied)
    known = {(m.identity.pid, m.identity.start_time) for m in episode.members}
    groups = recorded_groups(episode.members, episode.target, table)
    found: dict[int, Survivor] = {}
    if episode.cgroup_unreadable:
        t = episode.target
        found[t.leader.pid] = Survivor(t.leader, t.pgid, SurvivorReason.UNPROVABLE)
    for entry in [*(e for e in tied if not e.exited), *live_in_groups(table, groups)]:
        if entry.pid in found:
            continue
        reason = (
            SurvivorReason.SURVIVED_KILL
            if (entry.pid, entry.start_time) in known
            else SurvivorReason.UNPROVABLE
        )
        ident = ProcessIdentity(pid=entry.pid, start_time=entry.start_time, boot_id=episode.boot)
        found[entry.pid] = Survivor(ident, entry.pgid, reason)
    return list(found.values())


async def contain(
    target: LaunchTarget,
    *,
    journal: JournalWriter | None,
    cause: Code,
    policy: ContainmentPolicy | None = None,
    survivor_stop: Code | None = None,
) -> ContainmentResult:
    """Contain every process tied to ``target``; see the module docstring.

    ``survivor_stop``: if given and any descendant besides the leader is alive at the
    first snapshot, that code is journaled as a sticky stop before the first signal
    (the pilot passes ``lookup_worker_lost`` when a finished worker left processes).
    """
    episode = _Episode(target, journal, policy or ContainmentPolicy(), cause)
    with anyio.CancelScope(shield=True):
        episode.load_recorded()
        episode.containment_id = episode.write(
            lambda j: j.record_containment_start(target.launch_id, cause.value)
        )
        rounds = 1 + episode.policy.kill_rounds
        terminated = False  # SIGTERM sent: every later round sends SIGKILL
        stops: list[Code] = []
        for round_no in range(rounds):
            await episode.freeze()  # cgroup mode: nothing of the launch forks meanwhile
            # Last before the snapshot, with no await after it: no fresh child of another
            # launch is unregistered while /proc is read (``DirectChildren``).
            await DIRECT_CHILDREN.quiet()
            proofs: list[Proof] = []
            try:
                _, tied = episode.snapshot()
                episode.record_new(tied)
                episode.reap_zombies(tied)
                proofs = [prove(m, current_boot=episode.boot) for m in episode.members]
                alive = [p for p in proofs if p.state is ProofState.ALIVE]
                if not alive:
                    if any(not e.exited for e in tied) and round_no + 1 < rounds:
                        continue  # a tied process changed group under us: re-record it
                    break
                if not terminated and survivor_stop is not None:
                    if any(p.member.role != ROLE_LEADER for p in alive):
                        stops.append(survivor_stop)
                        episode.write(lambda j: j.record_stop(
                            epoch=target.epoch, code=survivor_stop.value, slot=target.slot,
                            sticky=True,
                        ))
                        episode.stopped(survivor_stop)
                episode.send(proofs, signal.SIGKILL if terminated else signal.SIGTERM)
                if terminated:
                    episode.kill_cgroup()  # the whole cgroup, journaled or not
                wait = episode.policy.kill_wait if terminated else episode.policy.term_grace
                terminated = True
                await episode.thaw()  # the signals are delivered now
                await _wait_exited(proofs, wait)
            finally:
                await episode.thaw()
                for proof in proofs:
                    proof.close()
        if target.cgroup is not None and episode.cgroup_members():
            # Something of the cgroup outlived every round (or was never proven): kill it
            # through the kernel's membership and wait for the cgroup to empty.
            episode.kill_cgroup()
            await episode.wait_cgroup_empty(episode.policy.kill_wait)
        await DIRECT_CHILDREN.quiet()
        survivors = _survivors(episode)
        outcome = ContainmentOutcome.UNRECONCILED if survivors else ContainmentOutcome.CONTAINED
        cid = episode.containment_id
        if cid is not None:
            episode.write(lambda j: j.record_containment_end(cid, outcome.value))
        if outcome is ContainmentOutcome.UNRECONCILED:
            stops.append(Code.UNRECONCILED_CONTAINMENT)
            episode.write(lambda j: j.record_stop(
                epoch=target.epoch, code=Code.UNRECONCILED_CONTAINMENT.value, slot=target.slot,
                sticky=True,
            ))
            episode.stopped(Code.UNRECONCILED_CONTAINMENT)
    return ContainmentResult(
        launch_id=target.launch_id,
        containment_id=episode.containment_id,
        cause=cause,
        outcome=outcome,
        members=tuple(episode.members),
        signals=tuple(episode.signals),
        survivors=tuple(survivors),
        persisted=episode.persisted,
        stops=tuple(stops),
    )
