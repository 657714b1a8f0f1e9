"""A shard's keeper: the process between a shard's Ray actor and its controller, so the
controller outlives its driver long enough to end well.

Ray kills every process a dead worker leaves in its tree (the actor's children, their
process groups), so a shard controller started as the actor's child dies with it, by
SIGKILL, containing nothing. The actor therefore starts this module, which forks once
and lets its first process exit: the keeper runs on in its own session, outside the
worker's tree (reparented to init or the nearest subreaper), and starts the shard
controller as its own child. Three pipes tie it to the actor:

- **life** (its stdout): its first line is the keeper's pid; the actor reads end of
  file there when the keeper is gone;
- **death** (``DEATH_FD``, inherited; the actor holds the write end): end of file means
  the actor's process died (its driver was killed, its node or the Ray head went away).
  The keeper then sends the controller SIGTERM, the operator's interruption: it closes
  admission, contains its children, writes its reports and ends ``interrupted``;
- SIGINT or SIGTERM sent to the keeper (the actor's ``interrupt``) goes on to the
  controller.

When the controller exits, the keeper writes ``end.json`` into the scratch directory
(the exit status as a shell reports it, and the controller's last line: its ``--json``
line, or its ``refused: CODE`` line), complete or absent, for the actor to collect. It
then waits for the actor's process to end (it ends with its driver, however the driver
ends) and removes whatever is left of the scratch directory (ticket, registration,
logs): a shard's scratch outlives its shard only when its keeper is killed.

Usage (by ``controller.cluster.dispatch`` only): ``python -m efold.controller.cluster.shard_keeper
SCRATCH DEATH_FD -- PROGRAM [ARG...]``.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO, Final

import msgspec

END_NAME: Final = "end.json"
OUT_NAME: Final = "out"
ERR_NAME: Final = "err"


class KeeperEnd(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    exit_status: int  # 128 + N for a controller ended by signal N
    last_line: str  # its refusal line when it refused, else the last line it printed
    orphaned: bool  # its actor died before it ended (it was sent SIGTERM)


def last_line(scratch: Path) -> str:
    """The controller's refusal line when it refused (then it printed no ``--json``
    line), else the last line it printed."""
    try:
        refusals = [line for line in (scratch / ERR_NAME).read_bytes().splitlines()
                    if line.startswith(b"refused: ")]
        lines = (scratch / OUT_NAME).read_bytes().strip().splitlines()
    except OSError:
        return ""
    last = refusals[0] if refusals else lines[-1] if lines else b""
    return last.decode("utf-8", "replace")


def read_end(scratch: Path) -> KeeperEnd | None:
    try:
        return msgspec.json.decode((scratch / END_NAME).read_bytes(), type=KeeperEnd)
    except (OSError, msgspec.DecodeError):
        return None


def _write_end(scratch: Path, end: KeeperEnd) -> None:
    partial = scratch / f".{END_NAME}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, msgspec.json.encode(end))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(partial, scratch / END_NAME)


def private_file(path: Path) -> BinaryIO:
    """A new file of the scratch directory opened for writing, 0600 whatever the umask
    (a umask 002 user's ``open`` would make it group-readable)."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def _shell_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def keep(scratch: Path, death_fd: int, program: list[str]) -> int:
    """Run ``program`` to its end, watching ``death_fd``; write the end record."""
    with private_file(scratch / OUT_NAME) as out, private_file(scratch / ERR_NAME) as err:
        proc = subprocess.Popen(program, stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def forward(signum: int, frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    orphaned = False
    exited = os.pidfd_open(proc.pid)
    try:
        watch = select.poll()
        watch.register(exited, select.POLLIN)
        watch.register(death_fd, select.POLLIN | select.POLLHUP)
        while proc.poll() is None:
            for fd, _ in watch.poll():
                if fd == death_fd and not os.read(death_fd, 1):
                    watch.unregister(death_fd)
                    orphaned = True
                    forward(signal.SIGTERM, None)
    finally:
        os.close(exited)
    end = KeeperEnd(exit_status=_shell_status(proc.wait()), last_line=last_line(scratch),
                    orphaned=orphaned)
    if not orphaned:
        _write_end(scratch, end)
        # The actor collects it (and removes the scratch directory); stay until the
        # actor's process ends, which it does when its driver does, however it ends.
        while os.read(death_fd, 1):
            pass
    shutil.rmtree(scratch, ignore_errors=True)  # nobody is left to read it
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: shard_keeper SCRATCH DEATH_FD -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    scratch, death_fd, program = Path(argv[0]), int(argv[1]), argv[3:]
    # As a shell would leave signals: a Ray worker's thread blocks SIGINT and its
    # process ignores SIGHUP and SIGQUIT; a blocked or ignored disposition survives exec.
    for signum in (signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    child = os.fork()
    if child:  # the first process: name the keeper on the life pipe, and go
        os.write(1, f"{child}\n".encode())
        os._exit(0)
    os.setsid()
    try:
        return keep(scratch, death_fd, program)
    finally:
        os.close(1)  # the life pipe: the actor reads its end of file now


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
