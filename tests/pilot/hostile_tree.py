"""A hostile process tree, as a plugin author could plant one: processes that ignore
SIGTERM, leave the group with ``setsid``, double-fork so that they are reparented, a
few levels deep. Every process it leaves alive appends ``pid start_time`` to PID_FILE.

Used three ways: imported by the faulty child (a prep body), run as an external fold
command (``python hostile_tree.py DIR MODE``: the pid file is ``DIR/tree.pids``, so the
command's arguments stay the files a registration pins) and embedded in an entry-point
fold.
A fold runs isolated (``efold.isolation``): it cannot write PID_FILE, so its records
travel as datagrams to a pathname unix socket the test listens on (``relay``), which
appends them to PID_FILE (Landlock does not mediate connecting to a socket, and a
pathname socket is the same inside the fold's network namespace).
MODE ``hang``: plant the tree, then never answer; ``answer``: plant it, then answer a
valid fold response and exit 0 (leaving the tree behind).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator

DEPTH = 3


def socket_path(pid_file: str) -> str:
    """A short path (a unix socket's is at most 107 bytes) standing for ``pid_file``."""
    return f"/tmp/efold-ht-{hashlib.sha256(pid_file.encode()).hexdigest()[:16]}.sock"


def _append(path: str, line: str) -> None:
    """Append ``line`` to ``path``; where the file cannot be written (an isolated fold),
    send it to the test's relay for ``path``'s pid file instead."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except PermissionError:
        pid_file = path.removesuffix(".builders")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(f"{path}\0{line}".encode(), socket_path(pid_file))
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@contextlib.contextmanager
def relay(pid_file: str) -> Iterator[None]:
    """Tests: while open, append what an isolated tree sends to the files it names
    (``pid_file`` or its ``.builders``)."""
    path = socket_path(pid_file)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    os.chmod(path, 0o666)  # a fold run as an ordinary user may send too
    allowed = {pid_file, pid_file + ".builders"}

    def serve() -> None:
        while True:
            try:
                data = sock.recv(4096)
            except OSError:
                return
            name, _, line = data.decode().partition("\0")
            if name in allowed:
                with open(name, "a") as f:
                    f.write(line)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        os.unlink(path)


def _record(pid_file: str) -> None:
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        start = int(f.read().rsplit(b")", 1)[1].split()[19])
    _append(pid_file, f"{os.getpid()} {start}\n")


def _hang() -> None:
    while True:
        time.sleep(3600)


def _level(pid_file: str, level: int) -> None:
    """In a fresh child: ignore SIGTERM; every other level leave the group; double-fork
    so the survivor is reparented; recurse; hang."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if level % 2 == 0:
        os.setsid()
    if os.fork() != 0:
        os._exit(0)  # the intermediate exits: its child is orphaned (reparented)
    _record(pid_file)
    if level + 1 < DEPTH and os.fork() == 0:
        _level(pid_file, level + 1)
    stay = os.fork()  # one more that stays in this process's group
    if stay == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _record(pid_file)
        _hang()
    _hang()


def builders(pid_file: str) -> list[str]:
    """The launch marker of every process that planted a tree ("none" if it had none):
    a fold that ran in the controller would show up here without one."""
    try:
        with open(pid_file + ".builders") as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def plant(pid_file: str) -> None:
    """Plant the tree from the calling process (which is left untouched) and wait until
    every member has recorded itself."""
    _append(pid_file + ".builders", os.environ.get("EFOLD_LAUNCH_MARKER", "none") + "\n")
    if os.fork() == 0:
        try:
            _level(pid_file, 0)
        finally:
            os._exit(0)
    expected = 2 * DEPTH
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(pid_file) as f:
                if len(f.read().splitlines()) >= expected:
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.01)


def recorded(pid_file: str) -> list[tuple[int, int]]:
    try:
        with open(pid_file) as f:
            return [(int(a), int(b)) for a, b in (line.split() for line in f if line.strip())]
    except FileNotFoundError:
        return []


def alive(pid: int, start: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return int(fields[19]) == start and fields[0] not in (b"Z", b"X")


def survivors(pid_file: str) -> list[int]:
    return [pid for pid, start in recorded(pid_file) if alive(pid, start)]


def cleanup(pid_file: str) -> None:
    """Tests: kill what is still alive of the tree (identity checked through a pidfd)."""
    for pid, start in recorded(pid_file):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if alive(pid, start):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            os.close(fd)


ANSWER = {"protocol": "efold-fold-v1", "messages": [{"role": "user", "content": "folded"}],
          "tools": [], "boundary_crossed": True}

if __name__ == "__main__":
    target, mode = os.path.join(sys.argv[1], "tree.pids"), sys.argv[2]
    sys.stdin.buffer.read()
    plant(target)
    if mode == "answer":
        sys.stdout.write(json.dumps(ANSWER))
        sys.stdout.flush()
        os._exit(0)
    _hang()
