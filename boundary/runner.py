"""The contained command runner: one allowed command, run on a workspace copy.

``run_contained(argv, cwd, timeout_s=...)`` runs a command a case allows (the workspace
``test`` tool, the ``tests-pass`` oracle) and returns its exit status and the tail of its
output. Rules:

- **Its own session and process group** (``start_new_session=True``), stdin on
  /dev/null, stderr merged into stdout, every other descriptor closed.
- **A minimal environment, never the caller's**: ``PATH`` a fixed value (the directory of
  efold's interpreter, then ``/usr/local/bin:/usr/bin:/bin``), ``HOME`` the working
  directory, ``LANG=C.UTF-8``, ``PYTHONDONTWRITEBYTECODE=1``, ``PYTHONHASHSEED=0``,
  ``TMPDIR`` the call's private temporary directory, and the run's own marker ``EFOLD_RUN_MARKER`` (a fresh random token). The only variable
  taken from the caller is the launch marker ``EFOLD_LAUNCH_MARKER``, when the caller
  carries one (a probe child does): it is how the controller's containment still finds
  what this command left if the child itself is killed mid-run. No credential, proxy or
  tool variable is ever passed on.
- **Isolated** (``efold.isolation.ChildIsolation``, between fork and exec): a network
  namespace with only its own loopback, and Landlock writes only beneath the working
  directory (the workspace copy) and a private temporary directory made for the call
  (``TMPDIR``, removed afterwards). The ruleset is built here, in the caller; the
  child only enters the namespace, enforces it and reports. Where the kernel refuses
  either, the command still runs and ``CommandResult.isolation`` says why.
- ``argv[0]`` ``python`` (or ``python3``) is efold's own interpreter (``sys.executable``);
  any other name is looked up on the fixed ``PATH``.
- **Nothing outlives the call.** When the command exits (or times out: its group is
  killed at once), every process of the run is SIGKILLed, repeatedly until none is
  left (for up to 10 s; one still alive then is refused, ``unreconciled_containment``):
  its process group (while the unreaped leader pins the group number) and every
  process started no earlier than the leader that carries the run's marker (a
  grandchild that called ``setsid`` and double-forked away). Only then is the leader
  reaped. A process that both left the group and re-executed with a cleaned environment
  (``env -i``) is beyond this sweep (as it is beyond the controller's marker rule).
- Signals go through a pidfd opened before the process's start time is re-checked, so a
  recycled pid is never signalled (as in ``efold.controller.processes.proof``).
- The output kept is the **tail**: at most ``output_limit`` bytes, decoded as UTF-8 with
  replacement; ``truncated`` says whether earlier output was dropped.
- A command that cannot start gives exit 127 (not found) or 126 (not executable) and the
  reason as its output, as a shell would; a command killed by a signal gives
  ``-signal``. A timeout gives ``exit_code=None, timed_out=True``.

This module sits below the controller and cannot use its containment helpers; in the
controller process itself, a caller must register the leader as a direct child (see
``efold.controller.processes.subreaper``) while workers may be live.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from efold.boundary.errors import BoundaryError
from efold.errors import Code
from efold.identity import process_group, process_state, start_time
from efold.isolation import ChildIsolation, Isolation

DEFAULT_OUTPUT_LIMIT: Final = 64 * 1024
SAFE_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
RUN_MARKER_VAR: Final = "EFOLD_RUN_MARKER"
LAUNCH_MARKER_VAR: Final = "EFOLD_LAUNCH_MARKER"  # efold.controller.processes.marker.MARKER_VAR
PYTHON_NAMES: Final = frozenset({"python", "python3"})

_SWEEP_S: Final = 10.0  # at most; a round that finds nothing alive ends the sweep sooner
_SWEEP_PAUSE_S: Final = 0.02
_EXIT_WAIT_S: Final = 5.0  # after a SIGKILL to the group, for the leader to exit
_DRAIN_S: Final = 1.0  # after the sweep, for the pipe to reach EOF
_CHUNK: Final = 1 << 16


class CommandResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one contained run did. ``exit_code`` is None exactly when ``timed_out``."""

    exit_code: int | None
    timed_out: bool
    stdout: str  # the output tail (stdout and stderr merged), at most output_limit bytes
    duration_s: float
    truncated: bool = False  # earlier output was dropped to keep the tail
    # How the command ran (no network, writes only its workspace and tmp); None: it
    # never started.
    isolation: Isolation | None = None


def contained_environment(cwd: Path, marker: str) -> dict[str, str]:
    """The whole environment of a contained command (module docstring)."""
    env = {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), SAFE_PATH]),
        "HOME": str(cwd),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        RUN_MARKER_VAR: marker,
    }
    launch = os.environ.get(LAUNCH_MARKER_VAR)
    if launch is not None:
        env[LAUNCH_MARKER_VAR] = launch
    return env


def resolve_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``python``/``python3`` replaced by efold's interpreter."""
    if not argv:
        raise ValueError("argv must name a command")
    head = sys.executable if argv[0] in PYTHON_NAMES else argv[0]
    return [head, *argv[1:]]


def run_contained(argv: Sequence[str], cwd: Path, *, timeout_s: float,
                  output_limit: int = DEFAULT_OUTPUT_LIMIT) -> CommandResult:
    """Run ``argv`` in ``cwd`` contained (module docstring); never leaves a process."""
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    if output_limit < 0:
        raise ValueError("output_limit must not be negative")
    if not Path(cwd).is_dir():
        raise NotADirectoryError(f"no working directory {cwd}")
    command = resolve_argv(argv)
    tmp = tempfile.mkdtemp(prefix="efold-runner-")
    try:
        return _run(command, argv[0], Path(cwd), tmp, timeout_s, output_limit)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(command: list[str], name: str, cwd: Path, tmp: str, timeout_s: float,
         output_limit: int) -> CommandResult:
    marker = secrets.token_hex(16)
    started = time.monotonic()
    env = {**contained_environment(cwd, marker), "TMPDIR": tmp}
    isolation = ChildIsolation([str(cwd), tmp])
    try:
        try:
            process = subprocess.Popen(
                command, cwd=cwd, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                close_fds=True, start_new_session=True, preexec_fn=isolation.apply,
            )
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            reason = exc.strerror or type(exc).__name__
            return CommandResult(exit_code=code, timed_out=False,
                                 stdout=f"cannot start {name}: {reason}\n",
                                 duration_s=time.monotonic() - started)
        isolated = isolation.result()
    finally:
        isolation.close()
    try:
        leader_start = start_time(process.pid)  # an unreaped child: readable
    except BaseException:
        process.kill()
        process.wait()
        raise
    tail = _Tail(output_limit)
    timed_out = False
    # Invariant: the leader is reaped only at the very end of the ``finally`` below,
    # after the sweep: until then its pid and process group number cannot be recycled.
    try:
        timed_out = not _pump(process, tail, started + timeout_s)
    finally:
        _kill_group(process.pid)  # the leader on a timeout or an error, and what it left
        _await_leader_exit(process.pid, _EXIT_WAIT_S)
        try:
            _sweep(process.pid, leader_start, marker)
        finally:  # a refused sweep still drains the output and reaps the leader
            if process.stdout is not None:
                _drain(process.stdout.fileno(), tail, time.monotonic() + _DRAIN_S)
                process.stdout.close()
            process.wait()
    return CommandResult(
        exit_code=None if timed_out else process.returncode,
        timed_out=timed_out, stdout=tail.text(),
        duration_s=time.monotonic() - started, truncated=tail.truncated,
        isolation=isolated,
    )


class _Tail:
    """The last ``limit`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()  # invariant: len(data) <= limit
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        excess = len(self.data) - self.limit
        if excess > 0:
            del self.data[:excess]
            self.truncated = True

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _pump(process: subprocess.Popen[bytes], tail: _Tail, deadline: float) -> bool:
    """Read output until the leader exits (True) or the deadline passes (False). The
    leader is not reaped: a pidfd tells its exit."""
    assert process.stdout is not None  # Popen made the pipe
    out = process.stdout.fileno()
    pidfd = os.pidfd_open(process.pid)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(out, selectors.EVENT_READ, "out")
            selector.register(pidfd, selectors.EVENT_READ, "exit")
            open_out = True
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for key, _ in selector.select(remaining):
                    if key.data == "exit":
                        return True
                    chunk = os.read(out, _CHUNK)
                    if chunk:
                        tail.add(chunk)
                    elif open_out:  # EOF: only the exit is left to wait for
                        selector.unregister(out)
                        open_out = False
    finally:
        os.close(pidfd)


def _drain(fd: int, tail: _Tail, deadline: float) -> None:
    """What is left in the pipe, until EOF (every writer is dead) or the deadline."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0:
            if not selector.select(remaining):
                return
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return
            tail.add(chunk)


def _kill_group(pgid: int) -> None:
    """SIGKILL a process group whose number the caller's unreaped leader pins."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _await_leader_exit(pid: int, timeout: float) -> None:
    """Wait (without reaping) until ``pid``, our child, has exited, or ``timeout``."""
    end = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= end:
            return
        time.sleep(0.005)


def _sweep(leader: int, leader_start: int, marker: str) -> None:
    """SIGKILL the leader's group and every marked process until none is left alive."""
    sweep_marked(f"{RUN_MARKER_VAR}={marker}", leader_start, group=leader)


def sweep_marked(variable: str, not_before: int, *, group: int = 0) -> None:
    """SIGKILL, until none is left alive, every process started no earlier than
    ``not_before`` that is in process group ``group`` (0: none; its unreaped leader must
    pin the number) or whose initial environment holds ``variable`` (``NAME=value``)
    exactly; never ``group``'s leader itself. A killed process takes a while to die on a
    loaded machine, so rounds go on for up to ``_SWEEP_S``; any still alive then is
    refused (``unreconciled_containment``), never passed over in silence."""
    needle = variable.encode()
    deadline = time.monotonic() + _SWEEP_S
    while True:
        if group:
            _kill_group(group)
        found = [(pid, start) for pid, start in _run_processes(group, not_before, needle)
                 if pid != group]
        if not found:
            return
        if time.monotonic() >= deadline:
            raise BoundaryError(Code.UNRECONCILED_CONTAINMENT,
                                f"{len(found)} process(es) still alive {_SWEEP_S:g} s "
                                f"after SIGKILL: pid {', '.join(str(p) for p, _ in found)}")
        for pid, start in found:
            _kill_proven(pid, start)
        time.sleep(_SWEEP_PAUSE_S)


def _run_processes(leader: int, not_before: int, needle: bytes) -> list[tuple[int, int]]:
    """(pid, start time) of every live process started no earlier than ``not_before``
    that is in the leader's group (``leader`` 0: none) or carries ``needle``."""
    found: list[tuple[int, int]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            start = start_time(pid)
            if start < not_before or process_state(pid) in ("Z", "X"):
                continue  # older than the run, or dead (its parent or init reaps it)
            if (leader and process_group(pid) == leader) or _carries(pid, needle):
                found.append((pid, start))
        except (ProcessLookupError, OSError, ValueError, IndexError):
            continue  # gone while read
    return found


def _carries(pid: int, needle: bytes) -> bool:
    """Whether ``pid``'s initial environment holds ``needle`` (NAME=value) exactly."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return False  # gone, or another user's
    return needle in raw.split(b"\0")


def _kill_proven(pid: int, start: int) -> None:
    """SIGKILL ``pid`` through a pidfd, only if it is still the process that started
    at ``start``."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # gone, or no handle: never signalled by bare pid
    try:
        if start_time(pid) == start:  # else recycled
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # died meanwhile, or not ours
    finally:
        os.close(fd)
