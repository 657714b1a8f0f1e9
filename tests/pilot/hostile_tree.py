"""A hostile process tree, as a plugin author could plant one: processes that ignore
SIGTERM, leave the group with ``setsid``, double-fork so that they are reparented, a
few levels deep. Every process it leaves alive appends ``pid start_time`` to PID_FILE.

Used three ways: imported by the faulty child (a prep body), run as an external fold
command (``python hostile_tree.py DIR MODE``: the pid file is ``DIR/tree.pids``, so the
command's arguments stay the files a registration pins) and embedded in an entry-point
fold.
MODE ``hang``: plant the tree, then never answer; ``answer``: plant it, then answer a
valid fold response and exit 0 (leaving the tree behind).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

DEPTH = 3


def _record(pid_file: str) -> None:
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        start = int(f.read().rsplit(b")", 1)[1].split()[19])
    fd = os.open(pid_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{os.getpid()} {start}\n".encode())
    finally:
        os.close(fd)


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
    with open(pid_file + ".builders", "a") as f:
        f.write(os.environ.get("EFOLD_LAUNCH_MARKER", "none") + "\n")
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
