"""Test support shared by tests/ipc, tests/worker and tests/containment (and imported by
the child programs next to it). Not part of efold."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from efold.controller.processes.containment import ContainmentPolicy
from efold.controller.processes.proctable import read_entry
from efold.identity import ProcessIdentity, current_identity, identity_of
from efold.ipc.lockstep import controller_core
from efold.ipc.messages import Binding, BudgetGrant, DeadlineGrant, Welcome
from efold.protocol.assignment import ASSIGNMENT_VERSION, Assignment, SnapshotRef, encode_key_pipe
from efold.registry.journal import JournalWriter
from efold.registry.lease import Lease, acquire_lease

PROGRAMS = Path(__file__).resolve().parent
DIGEST = "d" * 64
FAST = ContainmentPolicy(term_grace=0.3, kill_wait=1.0, kill_rounds=3)


@dataclass
class Run:
    run_dir: str
    lease: Lease
    journal: JournalWriter
    epoch: int

    def close(self) -> None:
        self.journal.close()
        self.lease.release()


def open_run(root: Path) -> Run:
    run_dir = root / "run"
    run_dir.mkdir(mode=0o700)
    lease = acquire_lease(run_dir)
    journal = JournalWriter(run_dir, lease)
    epoch = journal.record_epoch(current_identity())
    lease.set_epoch(epoch)
    return Run(str(run_dir), lease, journal, epoch)


def slot_dir(run: Run, name: str) -> str:
    path = os.path.join(run.run_dir, name)
    os.mkdir(path, 0o700)
    return path


def make_assignment(
    run: Run,
    *,
    kind: str = "prep",
    body: str = "builtin",
    slot: str = "s0001",
    directory: str | None = None,
    snapshot: SnapshotRef | None = None,
    cache_key: str | None = None,
    controller: ProcessIdentity | None = None,
    epoch: int | None = None,
    hello_timeout_ms: int = 10_000,
) -> Assignment:
    return Assignment(
        version=ASSIGNMENT_VERSION,
        kind=kind,  # type: ignore[arg-type]
        body=body,
        run_dir=run.run_dir,
        slot_dir=directory or slot_dir(run, f"{kind}-{slot}-{time.monotonic_ns()}"),
        epoch=run.epoch if epoch is None else epoch,
        slot=slot,
        controller=controller or current_identity(),
        registration_digest=DIGEST,
        plan_digest=DIGEST,
        build_digest=DIGEST,
        cache_key=cache_key if cache_key is not None else ("ck-" + slot if kind == "probe" else None),
        snapshot=snapshot if snapshot is not None or kind != "probe"
        else SnapshotRef(path=os.devnull, digest=DIGEST),
        hello_timeout_ms=hello_timeout_ms,
    )


def welcome(*, run_ms: int = 10_000, exchange_ms: int = 10_000) -> Welcome:
    return Welcome(
        deadlines=DeadlineGrant(run_ms=run_ms, exchange_ms=exchange_ms),
        budgets=BudgetGrant(max_requests=10, meter_calls=8, meter_bytes=126_976),
    )


def program(name: str, mode: str) -> list[str]:
    """argv prefix for a test child program (the launcher appends kind and fds)."""
    return [sys.executable, str(PROGRAMS / name), mode]


def alive(pid: int, start_time: int) -> bool:
    entry = read_entry(pid)
    return entry is not None and entry.start_time == start_time and not entry.exited


def kill_proven(pid: int, start_time: int) -> None:
    """Test cleanup: SIGKILL a leftover process through a pidfd, only if it re-proves,
    and reap it if it is our child."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        entry = read_entry(pid)
        if entry is not None and entry.start_time == start_time:
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                e = read_entry(pid)
                if e is None or e.start_time != start_time or e.exited:
                    break
                time.sleep(0.01)
            e = read_entry(pid)
            if e is not None and e.start_time == start_time and e.ppid == os.getpid():
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
    finally:
        os.close(fd)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.01) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# -- a controller side without the launcher, for tests that misbehave on purpose ------


def spawn_entry(
    assignment: Assignment,
    *,
    pipe_bytes: bytes | None = None,
    prefix: list[str] | None = None,
    argv_kind: str | None = None,
) -> tuple[subprocess.Popen[bytes], socket.socket, bytes]:
    """Start the real worker entry point by hand: (process, our socket end, key).
    ``prefix`` replaces ``python -I -m efold.worker``; ``argv_kind`` the kind on argv."""
    key = os.urandom(32)
    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    args = [*(prefix or [sys.executable, "-I", "-m", "efold.worker"]),
            argv_kind or assignment.kind, "--ipc-fd", str(theirs.fileno()), "--key-fd", str(r)]
    proc = subprocess.Popen(args, pass_fds=(theirs.fileno(), r), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    theirs.close()
    os.close(r)
    data = encode_key_pipe(key, assignment) if pipe_bytes is None else pipe_bytes

    def feed() -> None:  # in a thread: more than a pipe's capacity blocks until read
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BrokenPipeError:
            pass  # the child stopped reading (an oversized pipe): that is the test
        finally:
            os.close(w)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    writer.join(timeout=20)
    ours.settimeout(20)
    return proc, ours, key


def hand_core(assignment: Assignment, proc: subprocess.Popen[bytes], key: bytes):  # type: ignore[no-untyped-def]
    binding = Binding(epoch=assignment.epoch, slot=assignment.slot, worker=identity_of(proc.pid))
    return controller_core(protocol=assignment.protocol, binding=binding, key=key)


def recv_msg(core, sock: socket.socket):  # type: ignore[no-untyped-def]
    while True:
        data = sock.recv(core.want())
        if not data:
            raise core.end_of_stream()
        msg = core.feed(data)
        if msg is not None:
            return msg
