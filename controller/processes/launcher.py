"""Launching one child and seeing it through to its reaped end (docs/architecture.md §9, launcher).

``launch_worker`` starts ``python -m efold.worker KIND --ipc-fd N --key-fd M
[--credential-fd K]``:

* a fresh 32-byte key and the ``Assignment`` go into a pipe, written and closed before
  the spawn; the read end and the child's socket end are passed with ``pass_fds`` and
  closed here right after, so a dead child reads as EOF on our end;
* a provider credential, if the launch carries one, goes through a second pipe, written
  only once the child's ``Hello`` is accepted (``CredentialHandoff``);
* the child's environment is the allowlist (``childenv``) unless the caller gives one;
* ``start_new_session=True`` (the child leads its own session and process group),
  stdio on /dev/null, the controller a child subreaper;
* a pidfd is opened at once, then the identity (pid, start time, boot id, pgid) is
  journaled (``record_launch``) **before** any message from the child is read.

``supervise`` wraps one launch in an async context: whatever leaves the block (an IPC
error, a cancelled exchange, a timeout, any exception) contains the worker, shielded;
a normal exit closes it (``WorkerHandle.close``): wait for the exit, contain leftovers,
reap the leader, journal the exit.

With ``template=`` (``efold.controller.processes.template``) the child is forked by a running
template instead of spawned: same descriptors (relayed over the template's socket, never
read by it), same fresh session and group, adopted as the controller's child and
registered before anything reads from it; the rest is identical. A template that is
unusable falls back to the spawn above.

The leader is reaped only by its process object (trio's ``Process``, or an
``AdoptedProcess``: ``await process.wait()``), and only at the very end: until then its
zombie pins the process group number for containment.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.abc

from efold.controller.errors import ControllerError
from efold.controller.processes.adopted import WorkerProcess
from efold.controller.processes.cgroups import Cgroup
from efold.controller.processes.childenv import child_environment
from efold.controller.processes.containment import (
    ContainmentPolicy,
    ContainmentResult,
    LaunchTarget,
    contain,
)
from efold.controller.processes.credential_handoff import CredentialHandoff
from efold.controller.processes.durable import durable
from efold.controller.processes.marker import MARKER_VAR, new_marker
from efold.controller.processes.membership import left_behind, tied_now
from efold.controller.processes.proof import (
    ROLE_DESCENDANT,
    ROLE_LEADER,
    group_signal_supported,
    signal_pidfd,
)
from efold.controller.processes.run_cgroups import (
    RunCgroups,
    discard_cgroup,
    kill_cgroup,
    live_in_cgroup,
)
from efold.controller.processes.subreaper import DIRECT_CHILDREN, become_subreaper
from efold.controller.processes.template import AdoptedChild, Template
from efold.errors import Code, EfoldError
from efold.identity import ProcessIdentity, identity_of, process_group
from efold.ipc.controller_channel import ControllerChannel
from efold.ipc.errors import IpcCancelled, IpcEof, IpcLocalMisuse
from efold.ipc.framing import DEFAULT_MAX_FRAME, KEY_SIZE
from efold.ipc.messages import Binding, DoneAck, Hello, Ready, Stop, Welcome
from efold.protocol.assignment import Assignment, encode_key_pipe
from efold.protocol.exit_codes import code_for_exit_status
from efold.protocol.template_wire import Role
from efold.registry.files import write_all
from efold.registry.journal import JournalWriter

# -I: isolated (no PYTHON* variables, no user site, no cwd on sys.path): a planted module
# in the working directory cannot shadow efold inside a child.
DEFAULT_PROGRAM: Final[tuple[str, ...]] = (sys.executable, "-I", "-m", "efold.worker")
DEFAULT_EXIT_GRACE: Final = 5.0  # seconds from DoneAck/Stop to the child's own exit


@dataclass(frozen=True)
class WorkerExit:
    """How a launch ended. ``status`` is the reaped exit status (negative: killed by that
    signal; None: could not be reaped in time); ``code`` the fixed code the status stands
    for (``efold.protocol.exit_codes``); ``containment`` the episode, if there was one."""

    status: int | None
    code: Code | None
    containment: ContainmentResult | None


def teardown_bound(policy: ContainmentPolicy, exit_grace: float = DEFAULT_EXIT_GRACE) -> float:
    """The longest a launch's end can take once its child has ``DoneAck``: the exit
    grace, then containment's SIGTERM grace and every SIGKILL round, then the reap."""
    return exit_grace + policy.term_grace + (policy.kill_rounds + 1) * policy.kill_wait


class WorkerHandle:
    """One launched child. Owns its pidfd, channel and process (a trio ``Process`` when
    spawned, an ``AdoptedProcess`` when forked by a template) until ``close``."""

    def __init__(
        self,
        *,
        journal: JournalWriter,
        assignment: Assignment,
        launch_id: int,
        identity: ProcessIdentity,
        pgid: int,
        pidfd: int,
        process: WorkerProcess,
        channel: ControllerChannel,
        marker: str | None = None,
        credential: CredentialHandoff | None = None,
        cgroup: Cgroup | None = None,
    ) -> None:
        self.journal = journal
        self.assignment = assignment
        self.launch_id = launch_id
        self.identity = identity
        self.pgid = pgid
        self.pidfd = pidfd
        self.process = process
        self.channel = channel
        self.marker = marker  # the launch's environment marker (controller/processes/marker.py)
        # The launch's cgroup (cgroup mode): the child was placed in it before it ran
        # anything of its own; removed at ``close`` once empty. None: process-group mode.
        self.cgroup = cgroup
        self.containment: ContainmentResult | None = None
        # Invariant: True once a look after the leader's exit saw any other process tied
        # to the launch, live or a zombie. While False (and no containment ran), nothing
        # can die after that look: an exited leader starts nothing, and it left nothing.
        self._left_any = False
        # Written only from ``accept_hello``, once the Hello is accepted; else discarded.
        self.credential = credential
        self._closed = False
        self._members_noted = False  # set by ``note_members``, once per launch
        # Whether the exit row waits deferred for the writer's next commit (a run's
        # launches: ``supervise(defer_exit=True)``) or is committed at once.
        self.defer_exit = False

    @property
    def target(self) -> LaunchTarget:
        a = self.assignment
        return LaunchTarget(
            launch_id=self.launch_id, epoch=a.epoch, slot=a.slot, leader=self.identity,
            pgid=self.pgid, leader_pidfd=self.pidfd, marker=self.marker,
            cgroup=self.cgroup,
        )

    # -- protocol steps the controller always takes the same way -------------------

    async def accept_hello(self, welcome: Welcome, *, timeout: float) -> Hello:
        """Receive ``Hello``; answer ``Welcome`` if its protocol, digests and cache key
        are the assignment's, else ``Stop{worker_digest_mismatch}`` and raise."""
        msg = await self.channel.receive(timeout=timeout)
        if not isinstance(msg, Hello):  # the core admits nothing else first: a bug here
            raise self.channel.abandon(IpcLocalMisuse("accept_hello after the handshake"))
        await durable(self.journal)  # the launch row, before any answer
        a = self.assignment
        expected = (a.protocol, a.registration_digest, a.plan_digest, a.build_digest,
                    a.cache_key)
        got = (msg.protocol, msg.registration_digest, msg.plan_digest, msg.build_digest,
               msg.cache_key)
        if got != expected:
            self.discard_credential()
            await self.channel.reply(Stop(code=Code.WORKER_DIGEST_MISMATCH))
            raise ControllerError(Code.WORKER_DIGEST_MISMATCH, "hello differs from assignment")
        self._deliver_credential()
        await self.channel.reply(welcome)
        return msg

    def _deliver_credential(self) -> None:
        """The Hello is accepted: the credential, if any, goes to the child now, before
        ``Welcome`` (so it is in the pipe before the child's body runs)."""
        if self.credential is not None:
            self.credential.deliver()

    def discard_credential(self) -> None:
        """The launch will not reach (or has passed) an accepted Hello: close the write
        end unwritten, if it is still open."""
        if self.credential is not None:
            self.credential.discard()

    async def accept_ready(self, *, timeout: float) -> Ready:
        """Receive ``Ready``; its arrival digest must be the assigned snapshot's."""
        msg = await self.channel.receive(timeout=timeout)
        if not isinstance(msg, Ready):  # a probe child sends nothing else after Welcome
            raise self.channel.abandon(IpcLocalMisuse("accept_ready out of place"))
        snapshot = self.assignment.snapshot
        if snapshot is None or msg.arrival_digest != snapshot.digest:
            raise ControllerError(Code.WORKER_SNAPSHOT_INVALID, "arrival digest differs")
        return msg

    async def acknowledge_done(self) -> None:
        """Journal the worker's live descendants (unless ``note_members`` did), then send
        ``DoneAck`` (the reference's order: membership is durable before the child may
        exit: committed here, if it waits deferred, and synced off the event loop, as
        every row another slot deferred meanwhile rides with it)."""
        if not self._members_noted:
            await self.note_members()
        with self.journal.unsynced():
            self.journal.commit_pending()
        await durable(self.journal)
        await self.channel.reply(DoneAck())

    async def note_members(self) -> None:
        """Scan the worker's live descendants now and journal them, deferred: the next
        commit (the slot's receipt) carries them, and ``acknowledge_done`` commits them
        before ``DoneAck`` in any case. The child is waiting for ``DoneAck`` meanwhile."""
        self._members_noted = True
        members = [(self.identity, self.pgid, ROLE_LEADER)]
        await DIRECT_CHILDREN.quiet()  # then scan at once (``DirectChildren``)
        seen = {self.identity.pid}
        for entry in [*tied_now(self.identity, self.pgid, self.marker),
                      *live_in_cgroup(self.cgroup)]:
            if entry.exited or entry.pid in seen:
                continue
            seen.add(entry.pid)
            ident = ProcessIdentity(
                pid=entry.pid, start_time=entry.start_time, boot_id=self.identity.boot_id
            )
            members.append((ident, entry.pgid, ROLE_DESCENDANT))
        with self.journal.deferred():
            self.journal.record_members(launch_id=self.launch_id, containment_id=None,
                                        members=members)

    # -- the end -------------------------------------------------------------------

    async def wait_exit(self, timeout: float) -> bool:
        """True once the leader has exited (pidfd readable), without reaping it."""
        with anyio.move_on_after(timeout):
            await anyio.wait_readable(self.pidfd)
            return True
        return False

    async def contain(
        self, cause: Code, *, policy: ContainmentPolicy | None = None,
        survivor_stop: Code | None = None,
    ) -> ContainmentResult:
        """Contain this launch now (the channel is abandoned first)."""
        self.discard_credential()
        if not self.channel.finished:
            self.channel.abandon(IpcCancelled("contained"))
        result = await contain(
            self.target, journal=self.journal, cause=cause, policy=policy,
            survivor_stop=survivor_stop,
        )
        self.containment = result
        return result

    async def close(
        self, *, policy: ContainmentPolicy | None = None,
        exit_grace: float = DEFAULT_EXIT_GRACE,
    ) -> WorkerExit:
        """Finish the launch: containment if the exchange did not end by protocol, the
        child outlives ``exit_grace``, or it left live processes behind (those take a
        durable ``lookup_worker_lost`` stop first); then reap and journal the exit.
        Shielded and bounded; idempotent."""
        with anyio.CancelScope(shield=True):
            self.discard_credential()
            if not self._closed:
                self._closed = True
                await self._finish(policy, exit_grace)
            status = self.process.returncode
        return WorkerExit(
            status=status,
            code=code_for_exit_status(status) if status is not None else None,
            containment=self.containment,
        )

    async def _finish(self, policy: ContainmentPolicy | None, exit_grace: float) -> None:
        if self.containment is None:
            if not self.channel.finished:
                await self.contain(self.channel.failure or Code.LOOKUP_WORKER_LOST,
                                   policy=policy, survivor_stop=Code.LOOKUP_WORKER_LOST)
            elif not await self.wait_exit(exit_grace):
                await self.contain(Code.WORKER_TIMEOUT, policy=policy,
                                   survivor_stop=Code.LOOKUP_WORKER_LOST)
            else:
                await DIRECT_CHILDREN.quiet()  # then scan at once (``DirectChildren``)
                if self._leftovers():
                    await self.contain(Code.LOOKUP_WORKER_LOST, policy=policy,
                                       survivor_stop=Code.LOOKUP_WORKER_LOST)
        await self.channel.aclose()
        # The leader is dead unless containment could not kill it: bounded reap.
        with anyio.move_on_after((policy or ContainmentPolicy()).kill_wait):
            await self.process.wait()
        status = self.process.returncode
        if status is not None:
            DIRECT_CHILDREN.discard(self.identity.pid)
            os.close(self.pidfd)
        if self.containment is not None or self._left_any:
            self._leftovers()  # reap any orphan that died after the last look
        discard_cgroup(self.cgroup)
        try:
            if self.defer_exit:
                # Nothing waits on the exit row: it rides with the writer's next commit
                # (usually the next slot's first hold, or the phase's end), before any
                # reader outside this writer needs it (docs/architecture.md, "Orderings").
                with self.journal.deferred():
                    self.journal.record_exit(self.launch_id, status)
            else:
                self.journal.record_exit(self.launch_id, status)
        except (EfoldError, sqlite3.Error):
            pass  # the exit row is bookkeeping; the containment episode is the record

    def _leftovers(self) -> bool:
        """Whether the exited leader left live processes behind (``left_behind``, and
        any live member of the launch's cgroup: a process that escaped every other tie)."""
        alive, seen = left_behind(self.identity, self.pgid, self.marker)
        if live_in_cgroup(self.cgroup):
            alive = seen = True
        self._left_any = self._left_any or seen
        return alive


async def launch_worker(
    journal: JournalWriter,
    assignment: Assignment,
    *,
    program: Sequence[str] = DEFAULT_PROGRAM,
    max_frame: int = DEFAULT_MAX_FRAME,
    env: dict[str, str] | None = None,
    credential: bytes | None = None,
    template: Template | None = None,
    cgroups: RunCgroups | None = None,
) -> WorkerHandle:
    """Start one child for ``assignment``; see the module docstring for the order.
    ``credential`` (at most 8 KiB of ASCII, no NUL, CR or LF: ``campaign_invalid``
    otherwise, before anything starts) is handed over after the accepted Hello;
    ``env`` None is the allowlisted child environment (``child_environment``).
    ``template``: fork the child from that running template (``efold.controller.processes.template``)
    instead of spawning ``program`` (``program`` and ``env`` then apply only if the
    template is unusable and the launch falls back to a spawn); None spawns.
    ``cgroups``: the run's membership; in cgroup mode the child is placed in a fresh
    cgroup of its own before it runs anything of its own (before the template releases
    it, or right after the spawn, before its Hello is read), and the launch row names
    that cgroup. None: process-group mode."""
    handoff = CredentialHandoff(credential) if credential is not None else None
    try:
        # Until the child is registered, no membership scan of another launch in flight
        # may run (``DirectChildren``): it would take the child for an adopted orphan.
        with DIRECT_CHILDREN.spawning():
            return await _launch(journal, assignment, program=program,
                                 max_frame=max_frame, env=env, credential=handoff,
                                 template=template, cgroups=cgroups)
    except BaseException:
        if handoff is not None:
            handoff.discard()  # never written: the child, if it started, reads EOF
        raise


async def _launch(
    journal: JournalWriter,
    assignment: Assignment,
    *,
    program: Sequence[str],
    max_frame: int,
    env: dict[str, str] | None,
    credential: CredentialHandoff | None,
    template: Template | None,
    cgroups: RunCgroups | None,
) -> WorkerHandle:
    become_subreaper()
    cgroup = cgroups.new_launch() if cgroups is not None else None
    try:
        return await _launch_in(journal, assignment, program=program, max_frame=max_frame,
                                env=env, credential=credential, template=template,
                                cgroup=cgroup)
    except BaseException:
        discard_cgroup(cgroup)  # emptied by the failure path's kill, or never used
        raise


async def _launch_in(
    journal: JournalWriter,
    assignment: Assignment,
    *,
    program: Sequence[str],
    max_frame: int,
    env: dict[str, str] | None,
    credential: CredentialHandoff | None,
    template: Template | None,
    cgroup: Cgroup | None,
) -> WorkerHandle:
    key = secrets.token_bytes(KEY_SIZE)
    marker = new_marker()
    env = {**(child_environment() if env is None else env), MARKER_VAR: marker}
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    key_read, key_write = os.pipe()  # both O_CLOEXEC; pass_fds makes the read end inherit
    try:
        try:
            write_all(key_write, encode_key_pipe(key, assignment))
        finally:
            os.close(key_write)
        argv = [*program, assignment.kind, "--ipc-fd", str(theirs.fileno()),
                "--key-fd", str(key_read)]
        pass_fds = [theirs.fileno(), key_read]
        if credential is not None and credential.read_fd is not None:
            argv += ["--credential-fd", str(credential.read_fd)]  # the number, never the value
            pass_fds.append(credential.read_fd)
        adopted: AdoptedChild | None = None
        if template is not None:
            relayed: list[tuple[Role, int]] = [("ipc", theirs.fileno()), ("key", key_read)]
            if credential is not None and credential.read_fd is not None:
                relayed.append(("credential", credential.read_fd))
            if cgroup is not None:
                relayed.append(("cgroup", cgroup.fd))  # the worker is born in it
            # None: the template is (or just became) unusable and no child ran: spawn.
            adopted = await template.fork_child(kind=assignment.kind, marker=marker,
                                                fds=relayed, cgroup=cgroup)
        if adopted is None:
            spawned = await anyio.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
                pass_fds=pass_fds, env=env,
            )
    except BaseException as exc:
        ours.close()
        if isinstance(exc, OSError):
            raise ControllerError(Code.LAUNCH_FAILED, f"spawn errno {exc.errno}") from exc
        raise
    finally:
        theirs.close()
        os.close(key_read)
        if credential is not None:
            credential.close_read_end()
    process: WorkerProcess
    if adopted is not None:
        process, pidfd = adopted.process, adopted.pidfd
        identity, pgid, pid = adopted.identity, adopted.pgid, adopted.identity.pid
    else:
        process, pid = spawned, spawned.pid
        try:
            # Into its cgroup first: so far it runs only the interpreter's start, and it
            # runs nothing of its own before its Hello is answered. In a thread: a move
            # may wait for an RCU grace period (``worker/cgroup_fork.py``), and other
            # launches in flight go on meanwhile.
            if cgroup is not None:
                await anyio.to_thread.run_sync(cgroup.place, pid)
            pidfd = os.pidfd_open(pid)  # our unreaped child: the pid cannot be recycled yet
            identity = identity_of(pid)
            pgid = process_group(pid)
        except BaseException as exc:  # a cancelled placement included
            ours.close()
            spawned.kill()  # by pid, but safe: an unreaped child's pid is still its own
            with anyio.CancelScope(shield=True):
                await spawned.wait()
            if isinstance(exc, OSError):
                raise ControllerError(Code.LAUNCH_FAILED,
                                      "child vanished before its identity") from exc
            raise
    DIRECT_CHILDREN.add(identity)
    try:
        if pgid != pid:
            raise ControllerError(Code.LAUNCH_FAILED, "child does not lead its own group")
        # Synced off the event loop before its Hello is answered (``accept_hello``): the
        # child starts meanwhile.
        with journal.unsynced():
            launch_id = journal.record_launch(
                epoch=assignment.epoch, slot=assignment.slot, kind=assignment.kind,
                identity=identity, pgid=pgid, marker=marker,
                cgroup=cgroup.rel if cgroup is not None else None,
            )
        binding = Binding(epoch=assignment.epoch, slot=assignment.slot, worker=identity)
        channel = await ControllerChannel.over_socket(
            ours, protocol=assignment.protocol, binding=binding, key=key, max_frame=max_frame
        )
    except BaseException:
        # No handle will exist: kill its whole fresh group through the leader's pidfd
        # (the unreaped leader pins that group), reap the leader, give up.
        with anyio.CancelScope(shield=True):
            ours.close()
            _kill_via(pidfd)
            if cgroup is not None:
                kill_cgroup(cgroup)
            os.close(pidfd)
            await process.wait()
            DIRECT_CHILDREN.discard(pid)
        raise
    return WorkerHandle(
        journal=journal, assignment=assignment, launch_id=launch_id, identity=identity,
        pgid=pgid, pidfd=pidfd, process=process, channel=channel, marker=marker,
        credential=credential, cgroup=cgroup,
    )


def _kill_via(pidfd: int) -> None:
    """SIGKILL a child that never got a handle, with its group where the kernel can."""
    if group_signal_supported(pidfd):
        signal_pidfd(pidfd, signal.SIGKILL, group=True)
    signal_pidfd(pidfd, signal.SIGKILL)


def cause_of(exc: BaseException) -> Code:
    """The containment cause for an exception leaving a supervised block."""
    if isinstance(exc, EfoldError):
        return exc.code
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return Code.IPC_CANCELLED
    if isinstance(exc, TimeoutError):
        return Code.WORKER_TIMEOUT
    return Code.LOOKUP_WORKER_LOST


@asynccontextmanager
async def supervise(
    journal: JournalWriter,
    assignment: Assignment,
    *,
    policy: ContainmentPolicy | None = None,
    exit_grace: float = DEFAULT_EXIT_GRACE,
    program: Sequence[str] = DEFAULT_PROGRAM,
    max_frame: int = DEFAULT_MAX_FRAME,
    env: dict[str, str] | None = None,
    credential: bytes | None = None,
    template: Template | None = None,
    cgroups: RunCgroups | None = None,
    defer_exit: bool = False,
) -> AsyncIterator[WorkerHandle]:
    """Launch a worker for the block; contain it if anything escapes the block, close
    it otherwise. The handle's ``containment`` and ``close()`` result say what happened.
    ``credential``: see ``launch_worker`` (written once the block's ``accept_hello``
    accepts the Hello; never if the block fails first). ``defer_exit``: the exit row
    rides with the writer's next commit (``WorkerHandle.defer_exit``)."""
    handle = await launch_worker(
        journal, assignment, program=program, max_frame=max_frame, env=env,
        credential=credential, template=template, cgroups=cgroups,
    )
    handle.defer_exit = defer_exit
    try:
        yield handle
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            handle.discard_credential()  # at once: a child waiting on it reads EOF
            if handle.containment is None:
                if isinstance(exc, IpcEof):
                    # The child closed its end: it refused or finished on its own. Give
                    # it the exit grace, so its exit status (a fixed code) is what the
                    # record shows; containment then finds only what it left behind.
                    await handle.wait_exit(exit_grace)
                # Whatever the cause, descendants the worker leaves alive are a durable
                # lookup_worker_lost stop, journaled before the first signal.
                await handle.contain(cause_of(exc), policy=policy,
                                     survivor_stop=Code.LOOKUP_WORKER_LOST)
            await handle.close(policy=policy, exit_grace=exit_grace)
        raise
    await handle.close(policy=policy, exit_grace=exit_grace)
