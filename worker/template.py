"""``python -I -m efold.worker --control-fd N``: the fork-server template.

The same program as a worker's (``efold.worker.__main__`` dispatches on the first
argument), so a program that embeds the worker entry point can embed the template too.

A child costs mostly interpreter start and imports (``benchmarks/bench_spawn.py``). The
template pays them once: it imports the worker entry point and the registered bodies,
says ``TemplateReady``, then forks one worker per ``ForkRequest`` on its control socket
(wire: ``efold.protocol.template_wire``). Per request:

1. the template forks the worker with ``CLONE_PARENT`` (``efold.worker.sibling_fork``):
   its parent is the controller from birth, and when the request relays the launch's
   cgroup it is born there too (else the controller moves it there before
   ``Release``);
2. the worker at once leads its own session and group (``setsid``: pgid == pid),
   re-seeds ``random``, puts the launch marker in ``os.environ``, moves the relayed
   descriptors to 3 (ipc), 4 (key) and 5 (credential), closes every other descriptor
   (the control socket among them), and tells the template;
3. the template replies ``Forked{pid}``; the controller registers the pid as its
   direct child and answers ``Release``; the template writes the worker's "go" byte and
   replies ``Released``;
4. the worker runs the ordinary worker protocol (``efold.worker.entry.main``: key pipe,
   ``verify_parent`` and the rest, unchanged) and ``os._exit``\\ s with its status: it
   never returns here.

The worker is the controller's child before the controller has registered it: the
controller holds its membership scans off from the request until the registration
(``DIRECT_CHILDREN.spawning()``, as around a spawn), so no scan takes it for an orphan.

Invariants:

* the template holds no run secret: it never reads a relayed descriptor (the key pipe,
  the credential pipe, the IPC socket) and closes its copies right after the fork;
* a worker without its "go" byte (the template or the controller failed before
  ``Release``) exits at once, before touching any relayed descriptor: so when a launch
  fails before ``Release`` no worker ran, and the controller may spawn instead;
* no thread is ever started here (``fork`` of a threaded process is unsafe).

The controller believes the pid the template names only if that process holds the
request's IPC socket at descriptor ``FIRST_FD``: only the fork made for that request
does. A request that fails before the worker is registered ends the template, and the
controller kills the fork it may have made (``Template._retire``).

The launch marker: ``/proc/PID/environ`` shows the environment block a process was
*exec*'d with, and the worker was only forked, so /proc shows it the template's block
(with the template's own marker). The launch marker set in ``os.environ`` reaches what
the worker execs (fold commands); the worker itself is tied to its launch by its
identity and its own process group, journaled at launch like any leader's.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import importlib
import os
import pkgutil
import random
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Final

import msgspec

from efold.errors import Code
from efold.protocol.exit_codes import EXIT_OK, exit_status_for
from efold.protocol.tasks import ROUTE_KINDS
from efold.protocol.template_wire import (
    ENCODER,
    FIRST_FD,
    INTERRUPTIONS,
    LAUNCH_MARKER_VAR,
    MAX_PACKET,
    TO_TEMPLATE,
    Forked,
    ForkRequest,
    Release,
    Released,
    TemplateReady,
    TemplateRefused,
    request_problem,
)
from efold.worker import entry
from efold.worker.bodies import PREP_BODIES, PROBE_BODIES, PrepBody, ProbeBody
from efold.worker.sibling_fork import fork_sibling

# For programs that embed the template (test children): called in each grandchild,
# right after the fork, with its kind; returns the body that overrides the registered
# one (None: the registered body), and may install its hooks first, as the spawned
# program would at its start.
BodyFactory = Callable[[str], ProbeBody | PrepBody | None]

USAGE: Final = "usage: python -m efold.worker --control-fd N [--routes faux|local|real]"
# ``--routes``: where the run's workers may send (``protocol.tasks.RouteKind``): the HTTP
# client is preloaded for a local route, with its verified TLS context for a real one;
# a faux run's workers send nothing, so neither is built. Absent: real (everything).
_HIGH_FD: Final = 16  # scratch numbers above the fixed ones while descriptors move
_GO: Final = b"g"
_READY: Final = b"x"


# The packages a worker's code comes from (``tests/test_layers.py``: a child imports
# nothing above them), every module of which the template imports before it forks.
CHILD_PACKAGES: Final = ("worker", "boundary", "folds", "guard", "corpus", "ipc", "registry",
                         "protocol")


def preload(routes: str = "real") -> None:
    """Pay once what every worker would: import every module of the child's packages and
    every registered body's (one that fails to import is left to the worker, which
    refuses as usual), and, for ``routes`` other than faux, the HTTP client (with its
    verified TLS context for a real route: ``guard.wire.http.preload``); then pin the
    build digest of the code now loaded (``digests.pin_running_build``): a worker
    imports nothing of efold's from disk after the fork, so the pinned digest is the
    code it runs."""
    from efold.digests import pin_running_build
    from efold.guard.wire import http

    if routes != "faux":
        http.preload(https=routes == "real")
    names = [f"efold.{name}" for name in CHILD_PACKAGES]
    for package in names[:]:
        path = importlib.import_module(package).__path__
        names += [m.name for m in pkgutil.walk_packages(path, f"{package}.")
                  if not m.name.endswith(".__main__")]  # a __main__ runs on import
    names += [target.partition(":")[0] for target in (*PROBE_BODIES.values(),
                                                        *PREP_BODIES.values())]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # the worker meets it again and refuses with its fixed code
            continue
    warm(names)
    pin_running_build()


def warm(modules: list[str]) -> None:
    """Build, once before the fork, what every worker would build on identical inputs
    at its start: msgspec's type information of every message and record type of the
    child's modules (each ``Struct`` class's, cached on the class), every lazy export of
    their packages (``efold.lazy``: else each worker would read its package's
    ``__init__`` file again to find one), the decoder of the controller's messages,
    OpenSSL's SHA-256 and its HMAC (fetched at a process's first use: its first frame's
    MAC cost a worker about 0.25 ms), this boot's id, and the bundled price catalog
    (parsed from the package's own file, which the pinned build digest covers). Nothing
    here reads a per-slot input: what can differ per slot (the assignment, its hold,
    its snapshot, its key) is still read and checked by each worker."""
    from efold.guard.catalog import bundled_catalog
    from efold.identity import boot_id
    from efold.ipc.framing import KEY_SIZE, seal
    from efold.ipc.lockstep import warm_decoders

    for name in modules:
        module = sys.modules.get(name)
        if module is not None and "__getattr__" in vars(module):
            for export in dir(module):  # a lazy package's ``__dir__`` lists its exports
                try:
                    getattr(module, export)  # cached on the package from now on
                except Exception:  # as for an import: the worker meets it and refuses
                    continue
        for value in list(vars(module).values()) if module is not None else ():
            if isinstance(value, type) and issubclass(value, msgspec.Struct) \
                    and value.__module__ == name:
                try:
                    msgspec.json.Decoder(value)
                except Exception:  # a generic or abstract Struct: built when used
                    continue
    warm_decoders()
    seal(bytes(KEY_SIZE), b"")  # a throwaway key: only the methods are kept
    hashlib.sha256(b"").digest()
    for build in (bundled_catalog, boot_id):
        try:
            build()
        except Exception:  # as for an import: the worker meets it and refuses itself
            continue


def _reply(sock: socket.socket, msg: msgspec.Struct) -> None:
    sock.send(ENCODER.encode(msg))


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _close_all_but(keep: Sequence[int]) -> None:
    """Close every descriptor from 3 up, except ``keep``."""
    low = FIRST_FD
    for fd in sorted(set(keep)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _worker(request: ForkRequest, fds: Sequence[int], ready_w: int, go_r: int,
            bodies: BodyFactory | None) -> None:
    os.setsid()
    random.seed()
    os.environ[LAUNCH_MARKER_VAR] = request.marker
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD) for fd in (*fds, ready_w, go_r)]
    *relayed, ready_w, go_r = high
    placed = list(range(FIRST_FD, FIRST_FD + len(relayed)))
    for source, target in zip(relayed, placed, strict=True):
        os.dup2(source, target, inheritable=False)
    _close_all_but([*placed, ready_w, go_r])  # the control socket and the scratch copies
    os.write(ready_w, _READY)
    os.close(ready_w)
    go = os.read(go_r, 1)
    os.close(go_r)
    if go != _GO:
        os._exit(exit_status_for(Code.LAUNCH_FAILED))  # never released: touch nothing
    argv = [request.kind, "--ipc-fd", str(placed[0]), "--key-fd", str(placed[1])]
    if len(placed) == 3:
        argv += ["--credential-fd", str(placed[2])]
    os._exit(entry.main(argv, body=bodies(request.kind) if bodies is not None else None))


def _serve_one(sock: socket.socket, request: ForkRequest, fds: Sequence[int],
               bodies: BodyFactory | None) -> bool:
    """One fork exchange. False once the controller is gone or misbehaves."""
    cgroup_fd: int | None = None
    if request.roles[-1] == "cgroup":
        *fds, cgroup_fd = fds
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    try:
        try:
            pid = fork_sibling(cgroup_fd)
        finally:
            if cgroup_fd is not None:
                # Closed in both processes at once: the worker keeps no handle on it.
                os.close(cgroup_fd)
    except OSError:
        _close([ready_r, ready_w, go_r, go_w, *fds])
        _reply(sock, TemplateRefused(reason="fork_failed"))
        return True
    if pid == 0:
        try:
            _close([sock.detach(), ready_r, go_w])
            _worker(request, fds, ready_w, go_r, bodies)
        finally:
            os._exit(exit_status_for(Code.LAUNCH_FAILED))
    # Invariant: the template keeps no relayed descriptor past the fork.
    _close([ready_w, go_r, *fds])
    ready = os.read(ready_r, 1) == _READY  # its own session, its descriptors in place
    os.close(ready_r)
    if not ready:  # it died first: the controller's child, reaped as an adopted orphan
        os.close(go_w)
        _reply(sock, TemplateRefused(reason="fork_failed"))
        return True
    _reply(sock, Forked(pid=pid))
    released = isinstance(_receive(sock), Release)
    if released:
        try:
            os.write(go_w, _GO)
        except OSError:
            pass  # killed by the controller meanwhile
    os.close(go_w)  # without the byte: the worker exits unreleased
    if released:
        _reply(sock, Released())
    return released


def _receive(sock: socket.socket) -> object:
    """The next message with no descriptors (any that came are closed), None on EOF or
    garbage."""
    try:
        data, fds, flags, _ = socket.recv_fds(sock, MAX_PACKET, 0)
    except OSError:
        return None
    _close(fds)
    if not data or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        return None
    try:
        return TO_TEMPLATE.decode(data)
    except msgspec.DecodeError:
        return None


def serve(sock: socket.socket, bodies: BodyFactory | None = None) -> None:
    """Answer fork requests until EOF or a malformed exchange."""
    while True:
        try:
            data, fds, flags, _ = socket.recv_fds(sock, MAX_PACKET, 3)
        except OSError:
            return
        if not data or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            _close(fds)
            return
        try:
            request = TO_TEMPLATE.decode(data)
        except msgspec.DecodeError:
            request = None
        if not isinstance(request, ForkRequest) or request_problem(request, len(fds)):
            _close(fds)
            _reply(sock, TemplateRefused(reason="bad_request"))
            continue
        if not _serve_one(sock, request, fds, bodies):
            return


def main(argv: Sequence[str] | None = None, *, bodies: BodyFactory | None = None) -> int:
    """Run the template until its control socket closes. ``bodies``: see
    ``BodyFactory``; never set from anything the template reads."""
    # Spawned with the interruptions blocked (``template_wire.INTERRUPTIONS``): as
    # every process the controller starts, it takes SIGTERM and SIGINT as they come.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTIONS)
    args = list(sys.argv[1:] if argv is None else argv)
    routes = "real"
    if len(args) == 4 and args[2] == "--routes" and args[3] in ROUTE_KINDS:
        routes = args.pop()
        args.pop()
    if len(args) != 2 or args[0] != "--control-fd" or not args[1].isdigit():
        return exit_status_for(Code.WORKER_USAGE)
    preload(routes)
    if threading.active_count() != 1:
        # A fork copies only the forking thread: a lock another thread held would stay
        # held in every worker. The controller reads the exit as a dead template and
        # spawns instead.
        return exit_status_for(Code.LAUNCH_FAILED)
    # Everything imported so far moves to the collector's permanent generation: a
    # worker's collections then never touch (and copy-on-write fault in) the pages of
    # the objects it shares with the template.
    gc.freeze()
    try:
        sock = socket.socket(fileno=int(args[1]))
    except OSError:
        return exit_status_for(Code.WORKER_USAGE)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET:
        return exit_status_for(Code.WORKER_USAGE)
    try:
        _reply(sock, TemplateReady())
        serve(sock, bodies)
    except OSError:
        pass  # the controller went away mid-reply: nothing to do but leave
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
