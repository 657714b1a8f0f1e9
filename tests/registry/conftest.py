"""Fixtures for registry tests: real helper processes that hold a run lease."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# A lease-holding child. It acquires, runs EXTRA (test-specific set-up, which may set
# `info`), reports "ready <pid> <info>", then obeys one command per stdin line.
_HOLDER = textwrap.dedent(
    """
    import os, subprocess, sys
    from efold.registry.lease import acquire_lease, probe_lease
    lease = acquire_lease(sys.argv[1])
    info = ""
    {extra}
    print("ready", os.getpid(), info, flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "release":
            lease.release()
            print("released", flush=True)
        elif cmd.startswith("epoch "):
            lease.set_epoch(int(cmd.split()[1]))
            print("ok", flush=True)
        elif cmd == "probe":
            print(probe_lease(sys.argv[1]).state, flush=True)
        elif cmd == "exit":
            break
    """
)


class Holder:
    """A child process holding the lease of one run directory."""

    def __init__(self, proc: subprocess.Popen[str], pid: int, ready_line: str) -> None:
        self.proc = proc
        self.pid = pid
        self.ready_line = ready_line

    def send(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def spawn_holder() -> Iterator[Callable[..., Holder]]:
    holders: list[Holder] = []

    def spawn(run_dir: str | os.PathLike[str], extra: str = "") -> Holder:
        code = _HOLDER.format(extra=textwrap.dedent(extra).strip())
        proc = subprocess.Popen(
            [sys.executable, "-c", code, os.fspath(run_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("ready"):
            err = proc.stderr.read() if proc.stderr is not None else ""
            proc.kill()
            proc.wait()
            raise AssertionError(f"holder failed to start: {line!r} {err}")
        parts = line.split()
        holder = Holder(proc, int(parts[1]), line)
        holders.append(holder)
        return holder

    yield spawn
    for holder in holders:
        holder.close()
        if holder.proc.stderr is not None:
            holder.proc.stderr.close()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir(mode=0o700)
    return path
