"""Spawning the fork-server template's process (``efold.worker.template``): the
process only, before it is a launch. ``template.running_template`` makes it the run's
template launch and speaks to it.

``spawn_template`` starts ``python -I -m efold.worker --control-fd N --routes R`` like a
worker (allowlisted environment with a launch marker of its own, stdio on /dev/null,
umask 077, ``start_new_session=True``, a pidfd, registered in ``DIRECT_CHILDREN``). It
needs no event loop, so ``pilot`` may call it as the command begins (``EarlyTemplate``),
before the run it will serve exists.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from efold.controller.errors import ControllerError
from efold.controller.processes.adopted import AdoptedProcess
from efold.controller.processes.childenv import child_environment
from efold.controller.processes.marker import MARKER_VAR, new_marker
from efold.controller.processes.subreaper import DIRECT_CHILDREN, become_subreaper
from efold.errors import Code
from efold.identity import ProcessIdentity, identity_of, process_group
from efold.protocol.tasks import RouteKind
from efold.protocol.template_wire import INTERRUPTIONS

# The worker's own program: ``efold.worker`` runs the template given ``--control-fd``.
TEMPLATE_PROGRAM: Final[tuple[str, ...]] = (sys.executable, "-I", "-m", "efold.worker")
KILL_WAIT: Final = 2.0  # seconds for a SIGKILLed template (it has forked nothing) to die


def signal_pidfd(pidfd: int, sig: int) -> None:
    """Send ``sig`` through ``pidfd``; one already gone is no error."""
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        pass


# Early templates SIGKILLed that did not die in time: held, so that no ``Popen.__del__``
# ever hands their pid to ``subprocess``'s own reaping (init reaps them when we end).
_UNREAPED: list[subprocess.Popen[bytes]] = []


class SpawnedProcess(AdoptedProcess):
    """The template's process: spawned by ``subprocess.Popen`` (perhaps before the
    event loop runs, ``EarlyTemplate``), then waited for on its pidfd and reaped by pid
    as an adopted child is. The ``Popen`` is told the status it reaped, so that it
    never polls that pid again (a recycled pid may be a worker's)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        super().__init__(popen.pid)
        self.popen = popen

    def _try_reap(self) -> bool:
        reaped = super()._try_reap()
        if reaped:
            self.popen.returncode = self.returncode
        return reaped


@dataclass
class SpawnedTemplate:
    """A template process just spawned, not yet a launch: in ``DIRECT_CHILDREN``, its
    identity read, neither placed in a cgroup nor journaled."""

    program: tuple[str, ...]
    routes: RouteKind
    process: SpawnedProcess
    control: socket.socket  # the controller's end of the control socket
    pidfd: int
    identity: ProcessIdentity
    pgid: int
    marker: str

    def kill(self) -> None:
        """SIGKILL it (it holds no secret and has forked nothing) and reap it. One that
        does not die in time stays registered, its zombie left to init when the
        command ends."""
        self.control.close()
        signal_pidfd(self.pidfd, signal.SIGKILL)
        try:
            self.process.popen.wait(KILL_WAIT)
        except subprocess.TimeoutExpired:
            _UNREAPED.append(self.process.popen)  # never polled by pid again (its __del__)
            return
        DIRECT_CHILDREN.discard(self.identity.pid)
        self.process.close()
        os.close(self.pidfd)


def spawn_template(program: Sequence[str], env: dict[str, str] | None,
                   routes: RouteKind) -> SpawnedTemplate:
    """Spawn a template (``--control-fd N --routes R`` appended to ``program``, ``env``
    None: the allowlist) with a launch marker of its own, in a session of its own,
    stdio on /dev/null and umask 077, and register it in ``DIRECT_CHILDREN``.
    Synchronous: it needs no event loop (``EarlyTemplate``). Whatever ends it before it
    is registered (a vanished child, a signal's exception) kills and reaps it."""
    become_subreaper()
    marker = new_marker()
    env = {**(child_environment() if env is None else env), MARKER_VAR: marker}
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    previous = os.umask(0o077)  # whatever the operator's, as ``pilot`` runs its children
    # An interruption's exception must not land inside ``Popen`` (its child would be
    # nobody's): held until the child can be killed. The template unblocks them first.
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTIONS)
    try:
        popen = subprocess.Popen(
            [*program, "--control-fd", str(theirs.fileno()), "--routes", routes],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, pass_fds=[theirs.fileno()], env=env)
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        ours.close()
        raise ControllerError(Code.LAUNCH_FAILED, f"template spawn errno {exc.errno}") from exc
    finally:
        os.umask(previous)
        theirs.close()
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)  # one held lands in here
        return _registered(popen, ours, tuple(program), routes, marker)
    except BaseException as exc:
        ours.close()
        popen.kill()  # our unreaped child: its pid is still its own
        popen.wait()
        if isinstance(exc, OSError):
            raise ControllerError(Code.LAUNCH_FAILED,
                                  "template vanished before its identity") from exc
        raise


def _registered(popen: subprocess.Popen[bytes], control: socket.socket,
                program: tuple[str, ...], routes: RouteKind, marker: str) -> SpawnedTemplate:
    """The spawned template's pidfds and identity, registered in ``DIRECT_CHILDREN``."""
    process = SpawnedProcess(popen)
    pidfd = -1
    try:
        pidfd = os.pidfd_open(popen.pid)
        identity = identity_of(popen.pid)
        pgid = process_group(popen.pid)
    except BaseException:
        process.close()
        if pidfd >= 0:
            os.close(pidfd)
        raise
    DIRECT_CHILDREN.add(identity)
    control.setblocking(False)
    return SpawnedTemplate(program=program, routes=routes, process=process, control=control,
                           pidfd=pidfd, identity=identity, pgid=pgid, marker=marker)


class EarlyTemplate:
    """A template spawned as a command starts (``start``), before the run it will serve
    exists, so that its imports overlap the controller's own start.

    It is only a process then: no launch row, no cgroup, nothing asked of it. A run
    whose template has the same program and routes takes it (``running_template``):
    placed in its cgroup, then journaled as the run's template launch, before any fork
    request. Otherwise it is killed and reaped (``discard``: registered on every path
    out of the command before ``start``). A controller that dies before either leaves
    nothing: the template reads end of file on its control socket once it is ready,
    and leaves.
    """

    def __init__(self) -> None:
        self._spawned: SpawnedTemplate | None = None  # None until started, and once taken

    def start(self, routes: RouteKind, *, program: Sequence[str] = TEMPLATE_PROGRAM) -> None:
        """Spawn it now; where it cannot be, nothing (the run then starts its own, and
        refuses as it would)."""
        try:
            self._spawned = spawn_template(program, None, routes)
        except ControllerError:
            pass

    @property
    def identity(self) -> ProcessIdentity | None:
        """Its process, while it is this object's."""
        return None if self._spawned is None else self._spawned.identity

    def take(self, program: Sequence[str], routes: RouteKind) -> SpawnedTemplate | None:
        """The process, if it fits a run's template (the same program and routes) and
        is still alive; it is the run's from here. One that does not fit, or has died
        meanwhile, is reaped (the run spawns its own); None either way after the first
        call."""
        spawned, self._spawned = self._spawned, None
        if spawned is None:
            return None
        exited = bool(select.select([spawned.pidfd], [], [], 0)[0])
        if exited or (spawned.program, spawned.routes) != (tuple(program), routes):
            spawned.kill()
            return None
        return spawned

    def discard(self) -> None:
        """Kill and reap it unless a run took it (idempotent)."""
        spawned, self._spawned = self._spawned, None
        if spawned is not None:
            spawned.kill()
