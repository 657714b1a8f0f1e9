"""The controller's side of the fork-server template (``efold.worker.template``).

``running_template`` spawns the template process (``template_spawn``: like a worker,
with a launch marker of its own, registered in ``DIRECT_CHILDREN``), places it in its
cgroup, journals it as a launch of kind ``"template"`` in slot ``TEMPLATE_SLOT`` and
yields a ``Template`` at once: the run's setup goes on while it imports, and its first
fork request waits for its ``TemplateReady``. ``pilot`` may have spawned it earlier
still, as the command began (``template_spawn.EarlyTemplate``): the run then takes that
process, places it and journals it, before any fork request. ``launch_worker(...,
template=...)`` asks it for each child (``Template.fork_child``); on exit the template
is closed (EOF on its control socket), contained if it does not leave in time or leaves
processes behind (``efold.controller.processes.containment``), reaped, and its exit
journaled.

If the controller dies, ``recover``/``reap`` find the template through its launch row
like any launch: its group, and its marker, which every process forked from it shows in
``/proc/PID/environ`` (see ``efold.worker.template`` on markers).

Failure: any broken exchange (EOF, a malformed or unexpected reply, a timeout, a child
that fails the adoption checks) marks the template dead for good, and every later launch
spawns. The failing launch spawns too when no worker can have run, i.e. the failure
came before ``Release`` (a worker that never got its "go" byte exits untouched).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, Literal

import anyio
import anyio.abc
import msgspec

from efold.controller.errors import ControllerError
from efold.controller.processes.adopted import AdoptedProcess
from efold.controller.processes.cgroups import Cgroup, cgroup_of
from efold.controller.processes.containment import ContainmentPolicy, LaunchTarget, contain
from efold.controller.processes.marker import MARKER_VAR
from efold.controller.processes.membership import left_behind
from efold.controller.processes.proctable import read_entry, scan_since
from efold.controller.processes.run_cgroups import (
    RunCgroups,
    discard_cgroup,
    kill_cgroup,
    live_in_cgroup,
)
from efold.controller.processes.subreaper import DIRECT_CHILDREN, reap_adopted
from efold.controller.processes.template_spawn import (
    TEMPLATE_PROGRAM,
    EarlyTemplate,
    SpawnedProcess,
    SpawnedTemplate,
    signal_pidfd,
    spawn_template,
)
from efold.errors import Code, EfoldError
from efold.identity import ProcessIdentity, identity_of, process_group
from efold.protocol.assignment import WorkerKind
from efold.protocol.tasks import RouteKind
from efold.protocol.template_wire import (
    ENCODER,
    FIRST_FD,
    FROM_TEMPLATE,
    LAUNCH_MARKER_VAR,
    MAX_PACKET,
    Forked,
    ForkRequest,
    Release,
    Released,
    Role,
    TemplateReady,
)
from efold.registry.journal import JournalWriter

# How a run starts its children: forked from a template, or each spawned.
Launcher = Literal["template", "spawn"]
TEMPLATE_KIND: Final = "template"
# Not an opaque id (those start alphanumeric): it can never be a planned slot's.
TEMPLATE_SLOT: Final = "-template-"
DEFAULT_READY_TIMEOUT: Final = 10.0  # seconds for the template's imports
DEFAULT_EXCHANGE_TIMEOUT: Final = 5.0  # seconds per reply once it is ready
DEFAULT_EXIT_GRACE: Final = 2.0  # seconds from EOF on its socket to its exit

assert LAUNCH_MARKER_VAR == MARKER_VAR  # the wire's copy (it sits below the controller)


class TemplateBroken(Exception):
    """The template failed an exchange (internal: it becomes ``alive = False``)."""


@dataclass
class AdoptedChild:
    """A worker forked by the template, adopted: the controller's own child (born so),
    registered in ``DIRECT_CHILDREN``, in its own session and group (pgid == pid)."""

    identity: ProcessIdentity
    pgid: int
    pidfd: int  # the launch pidfd (the launcher owns it from here)
    process: AdoptedProcess


class Template:
    """One running template, as the launcher sees it.

    Adoption race, and how it is closed: rule 4 of ``efold.controller.processes.membership``
    attributes any process parented to the controller and not in ``DIRECT_CHILDREN`` to
    whichever launch is being contained. The worker is the controller's child from its
    birth (``CLONE_PARENT``) and registered (pidfd opened, identity read,
    ``DIRECT_CHILDREN.add``) only once the template names it, so ``fork_child`` is only
    ever called inside ``DIRECT_CHILDREN.spawning()`` (the launcher's, around every
    launch, as for a spawned child): every scan that may attribute orphans awaits
    ``DIRECT_CHILDREN.quiet()`` first, so none runs in between. A request that fails
    before the registration (a template too slow to answer, a wrong answer) could leave
    a fork made later, outside that block: so the failure ends the template and kills
    any fork of that request before the block ends (``_retire``). The worker runs
    nothing of its own before ``Release``, which comes after the registration.
    """

    def __init__(self, *, control: socket.socket, template: ProcessIdentity, pidfd: int,
                 exchange_timeout: float, ready_by: float) -> None:
        self._control = control
        self.identity = template  # the template process (its launch row's identity)
        self._pidfd = pidfd  # its launch pidfd (owned by its launch: only signalled here)
        self.exchange_timeout = exchange_timeout
        # Invariant: no request is sent before ``TemplateReady`` has been read. The first
        # launch waits for it (until ``ready_by``, on anyio's clock), so the run's own
        # setup goes on while the template imports.
        self._ready = False
        self._ready_by = ready_by
        # Invariant: at most one exchange on the control socket at a time (the wire is
        # strictly in turn); held from the request to ``Released``.
        self._lock = anyio.Lock()
        # Invariant: once False, never True again: every later launch spawns.
        self.alive = True

    def mark_dead(self) -> None:
        self.alive = False

    async def _send(self, msg: msgspec.Struct, fds: Sequence[int] = ()) -> None:
        data = ENCODER.encode(msg)
        with anyio.fail_after(self.exchange_timeout):
            while True:
                try:
                    socket.send_fds(self._control, [data], list(fds))
                    return
                except BlockingIOError:
                    await anyio.wait_writable(self._control)

    async def _receive(self, timeout: float | None = None) -> object:
        with anyio.fail_after(self.exchange_timeout if timeout is None else timeout):
            while True:
                try:
                    data, fds, flags, _ = socket.recv_fds(self._control, MAX_PACKET, 0)
                    break
                except BlockingIOError:
                    await anyio.wait_readable(self._control)
        for fd in fds:
            os.close(fd)
        if not data or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise TemplateBroken("eof or oversized reply")
        try:
            return FROM_TEMPLATE.decode(data)
        except msgspec.DecodeError as exc:
            raise TemplateBroken("malformed reply") from exc

    async def _await_ready(self) -> None:
        """Read ``TemplateReady`` once (under the lock); a template that does not say it
        in time, or says anything else, is dead."""
        try:
            msg = await self._receive(max(0.0, self._ready_by - anyio.current_time()))
        except (TemplateBroken, OSError, TimeoutError) as exc:
            raise TemplateBroken("not ready in time") from exc
        if not isinstance(msg, TemplateReady):
            raise TemplateBroken("spoke before it was ready")
        self._ready = True

    async def fork_child(self, *, kind: WorkerKind, marker: str, fds: Sequence[tuple[Role, int]],
                         cgroup: Cgroup | None = None) -> AdoptedChild | None:
        """A new worker for ``kind`` with ``fds`` relayed, adopted (and placed in
        ``cgroup``, if given, before it is released); None if the template is (or just
        became) unusable and no worker ran: spawn instead. Raises ``launch_failed`` if
        the template broke after the child was released, a cgroup code if it could not
        be placed (it is killed unreleased)."""
        if not self.alive:
            return None
        async with self._lock:
            if not self.alive:
                return None
            if not self._ready:
                try:
                    await self._await_ready()  # not shielded: nothing is sent before it
                except TemplateBroken:
                    self.mark_dead()
                    return None
                except BaseException:  # cancelled: what it says next is unknown
                    self.mark_dead()
                    raise
            with anyio.CancelScope(shield=True):  # a half-done exchange would desync the wire
                try:
                    return await self._exchange(kind, marker, fds, cgroup)
                except (TemplateBroken, OSError, TimeoutError, EfoldError) as exc:
                    self.mark_dead()
                    if isinstance(exc, ControllerError):
                        raise
        return None

    async def _exchange(self, kind: WorkerKind, marker: str, fds: Sequence[tuple[Role, int]],
                        cgroup: Cgroup | None) -> AdoptedChild | None:
        # Only the fork made for this request holds its IPC socket (the template closes
        # its copy right after the fork): that names it, and nothing else does.
        ipc = os.fstat(dict(fds)["ipc"]).st_ino
        request = ForkRequest(kind=kind, marker=marker, roles=tuple(role for role, _ in fds))
        try:
            await self._send(request, [fd for _, fd in fds])
            reply = await self._receive()
            if not isinstance(reply, Forked):
                raise TemplateBroken("refused or unexpected reply")
            child = _register(reply.pid, template=self.identity, ipc=ipc)
            if child is None:
                raise TemplateBroken("child failed its adoption checks")
        except BaseException:
            await self._retire(ipc)
            raise
        try:
            if cgroup is not None and cgroup_of(child.identity.pid) != cgroup.rel:
                # Not born there (the template could not clone into it): move it, held,
                # before it has run anything of its own.
                cgroup.place(child.identity.pid)
            await self._send(Release())
        except BaseException:
            _abandon(child)  # unreleased: it exits untouched without its "go" byte
            raise
        try:
            if not isinstance(await self._receive(), Released):
                raise TemplateBroken("unexpected reply to release")
            entry = read_entry(child.identity.pid)
            if entry is None or entry.ppid != os.getpid() \
                    or entry.start_time != child.identity.start_time:
                raise ControllerError(Code.LAUNCH_FAILED, "adopted child is not ours")
        except BaseException as exc:
            _abandon(child)
            if isinstance(exc, (TemplateBroken, OSError, TimeoutError)):
                # Released (maybe): the child may have read its key pipe. No respawn.
                raise ControllerError(Code.LAUNCH_FAILED, "template broke after release") \
                    from exc
            raise
        return child

    async def _retire(self, ipc: int) -> None:
        """After a request that may have forked a worker nobody registered (no reply in
        time, a wrong reply, a fork that fails its checks): end the template (SIGKILL:
        it holds no secret), so that it forks nothing more, and kill the fork it may
        have made, the controller's unregistered child that holds the request's IPC
        socket (``ipc``, an inode). Called inside the launch's
        ``DIRECT_CHILDREN.spawning()``: no scan can see that fork meanwhile, and none
        is left once this returns (a fork made just before the template died reads EOF
        for its "go" byte and exits untouched; it is killed here either way)."""
        self.mark_dead()
        signal_pidfd(self._pidfd, signal.SIGKILL)
        with anyio.move_on_after(self.exchange_timeout):
            await anyio.wait_readable(self._pidfd)
        for entry in scan_since(self.identity.start_time).values():
            if entry.ppid == os.getpid() and entry.pid not in DIRECT_CHILDREN \
                    and not entry.exited and _holds_socket(entry.pid, ipc):
                _kill_unregistered(entry.pid, entry.start_time, self.exchange_timeout)

    def close(self) -> None:
        self.alive = False
        self._control.close()

    def importing_for(self) -> float:
        """Seconds left of its readiness deadline while it has not said ``TemplateReady``
        (it may still be importing: a run that ended before its first fork), else 0."""
        return 0.0 if self._ready else max(0.0, self._ready_by - anyio.current_time())


def _forked_by(pid: int, template: ProcessIdentity, ipc: int) -> bool:
    """Whether ``pid`` is the worker the template just forked: the controller's own
    child, not registered (no worker already launched), started after the template,
    and holding the request's IPC socket (inode ``ipc``) at its place (``FIRST_FD``).
    A reply naming any other process is never believed, let alone signalled."""
    entry = read_entry(pid)
    return (entry is not None and entry.ppid == os.getpid() and pid not in DIRECT_CHILDREN
            and entry.start_time >= template.start_time
            and _socket_at(pid, FIRST_FD) == ipc)


def _socket_at(pid: int, fd: int) -> int | None:
    """The inode of the socket at ``pid``'s descriptor ``fd``, or None."""
    try:
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    if not (link.startswith("socket:[") and link.endswith("]")):
        return None
    return int(link[len("socket:["):-1])


def _holds_socket(pid: int, ipc: int) -> bool:
    """Whether any descriptor of ``pid`` is the socket of inode ``ipc``."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    return any(_socket_at(pid, int(fd)) == ipc for fd in fds)


def _kill_unregistered(pid: int, start_time: int, timeout: float) -> None:
    """SIGKILL an unregistered child of ours (re-proved through a pidfd), wait for its
    death and reap it, as an adopted orphan is (``reap_adopted``): nobody else owns it."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        entry = read_entry(pid)
        if entry is None or entry.ppid != os.getpid() or entry.start_time != start_time:
            return
        signal_pidfd(pidfd, signal.SIGKILL)
        select.select([pidfd], [], [], timeout)
        reap_adopted(pid, start_time)
    finally:
        os.close(pidfd)


def _register(pid: int, *, template: ProcessIdentity, ipc: int) -> AdoptedChild | None:
    """Open the child's pidfds, read its identity, check it is the worker the template
    forked for this request (``_forked_by``) and leads its own group, and register it
    in ``DIRECT_CHILDREN``; None (nothing registered; a worker in the wrong group
    killed) if it does not check out. Once it is known to be our child, its pid stays
    its own until we reap it, so the checks made after ``pidfd_open`` are about the
    process it names."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    if not _forked_by(pid, template, ipc):
        os.close(pidfd)
        return None
    try:
        identity = identity_of(pid)
        pgid = process_group(pid)
        process = AdoptedProcess(pid)
    except OSError:
        os.close(pidfd)
        return None
    if pgid != pid:
        signal_pidfd(pidfd, signal.SIGKILL)
        os.close(pidfd)
        process.close()
        return None
    DIRECT_CHILDREN.add(identity)
    return AdoptedChild(identity=identity, pgid=pgid, pidfd=pidfd, process=process)


def _abandon(child: AdoptedChild) -> None:
    """Kill a registered child that no launch will own; keep it registered (its zombie
    is reaped by ``AdoptedProcess.wait`` at the template's end)."""
    signal_pidfd(child.pidfd, signal.SIGKILL)
    os.close(child.pidfd)
    _ABANDONED.append(child.process)


# Killed registered children no launch owns; reaped at the template's end.
_ABANDONED: list[AdoptedProcess] = []


@dataclass
class _TemplateLaunch:
    """The template process as a launch (its own journal row and containment target)."""

    journal: JournalWriter
    epoch: int
    launch_id: int
    identity: ProcessIdentity
    pgid: int
    pidfd: int
    marker: str
    process: SpawnedProcess
    control: socket.socket  # the controller's end of its control socket
    cgroup: Cgroup | None  # the template's own cgroup (its forked workers leave it)

    @property
    def target(self) -> LaunchTarget:
        return LaunchTarget(launch_id=self.launch_id, epoch=self.epoch, slot=TEMPLATE_SLOT,
                            leader=self.identity, pgid=self.pgid, leader_pidfd=self.pidfd,
                            marker=self.marker, cgroup=self.cgroup)

    def leftovers(self) -> bool:
        """Whether processes tied to the template outlive it (``left_behind``, or a
        live member of its cgroup)."""
        return left_behind(self.identity, self.pgid, self.marker)[0] \
            or bool(live_in_cgroup(self.cgroup))


async def _start(journal: JournalWriter, epoch: int, program: Sequence[str],
                 env: dict[str, str] | None, cgroups: RunCgroups | None, routes: RouteKind,
                 early: EarlyTemplate | None) -> _TemplateLaunch:
    spawned = early.take(program, routes) if early is not None and env is None else None
    if spawned is None:
        if early is not None:
            early.discard()
        spawned = spawn_template(program, env, routes)
    cgroup = None
    try:
        cgroup = cgroups.new_launch() if cgroups is not None else None
        return _launched(journal, epoch, spawned, cgroup)
    except BaseException:
        with anyio.CancelScope(shield=True):
            spawned.control.close()
            signal_pidfd(spawned.pidfd, signal.SIGKILL)
            if cgroup is not None:
                kill_cgroup(cgroup)
            await spawned.process.wait()
            os.close(spawned.pidfd)
            DIRECT_CHILDREN.discard(spawned.identity.pid)
            discard_cgroup(cgroup)
        raise


def _launched(journal: JournalWriter, epoch: int, spawned: SpawnedTemplate,
              cgroup: Cgroup | None) -> _TemplateLaunch:
    """``spawned`` made the run's template launch: placed in ``cgroup`` (before any fork
    request: every worker it forks starts there, or is moved), then journaled."""
    if cgroup is not None:
        cgroup.place(spawned.identity.pid)
    launch = _TemplateLaunch(journal=journal, epoch=epoch, launch_id=-1,
                             identity=spawned.identity, pgid=spawned.pgid,
                             pidfd=spawned.pidfd, marker=spawned.marker,
                             process=spawned.process, control=spawned.control, cgroup=cgroup)
    launch.launch_id = journal.record_launch(
        epoch=epoch, slot=TEMPLATE_SLOT, kind=TEMPLATE_KIND, identity=spawned.identity,
        pgid=spawned.pgid, marker=spawned.marker, cgroup=cgroup.rel if cgroup else None,
    )
    return launch


async def _finish(launch: _TemplateLaunch, template: Template,
                  policy: ContainmentPolicy, exit_grace: float) -> None:
    """Close the control socket (the template leaves on EOF), contain what is left,
    reap, journal the exit."""
    grace = max(exit_grace, template.importing_for())  # EOF is read once it is ready
    template.close()
    exited = False
    with anyio.move_on_after(grace):
        await anyio.wait_readable(launch.pidfd)
        exited = True
    if exited:
        await DIRECT_CHILDREN.quiet()  # then scan at once (``DirectChildren``)
    if not exited or launch.leftovers():
        await contain(launch.target, journal=launch.journal,
                      cause=Code.WORKER_TIMEOUT if not exited else Code.LOOKUP_WORKER_LOST,
                      policy=policy)
    with anyio.move_on_after(policy.kill_wait):
        await launch.process.wait()
    for process in list(_ABANDONED):
        with anyio.move_on_after(policy.kill_wait):
            await process.wait()
            DIRECT_CHILDREN.discard(process.pid)
            _ABANDONED.remove(process)
    status = launch.process.returncode
    if status is not None:
        DIRECT_CHILDREN.discard(launch.identity.pid)
        os.close(launch.pidfd)
    discard_cgroup(launch.cgroup)
    try:
        launch.journal.record_exit(launch.launch_id, status)
    except (EfoldError, sqlite3.Error):
        pass  # bookkeeping; a containment episode, if any, is the record


@asynccontextmanager
async def running_template(
    journal: JournalWriter,
    epoch: int,
    *,
    program: Sequence[str] = TEMPLATE_PROGRAM,
    env: dict[str, str] | None = None,
    policy: ContainmentPolicy | None = None,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
    exchange_timeout: float = DEFAULT_EXCHANGE_TIMEOUT,
    exit_grace: float = DEFAULT_EXIT_GRACE,
    cgroups: RunCgroups | None = None,
    routes: RouteKind = "real",
    early: EarlyTemplate | None = None,
) -> AsyncIterator[Template]:
    """A running template for the block (see the module docstring). ``program`` is the
    argv prefix (``--control-fd N`` is appended); ``env`` None is the allowlist. Every
    launch made through it must be closed before the block ends: the end contains
    whatever the template left, its forked workers included. ``cgroups``: the run's
    membership; in cgroup mode the template runs in a cgroup of its own and each worker
    it forks is moved to the launch's cgroup before it is released. ``routes``: what the
    run's workers may send to (``campaign.route_kind``): the template preloads the HTTP
    client only for what they may use (``--routes``, ``efold.worker.template``).
    ``early``: a template started as the command began (``EarlyTemplate``), taken
    if its program and routes are these (else discarded, and one spawned here)."""
    launch = await _start(journal, epoch, program, env, cgroups, routes, early)
    template = Template(control=launch.control, template=launch.identity, pidfd=launch.pidfd,
                        exchange_timeout=exchange_timeout,
                        ready_by=anyio.current_time() + ready_timeout)
    try:
        yield template
    finally:
        with anyio.CancelScope(shield=True):
            await _finish(launch, template, policy or ContainmentPolicy(), exit_grace)
