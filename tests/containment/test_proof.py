"""``controller.processes.proof.prove`` on real processes: every clause of the identity proof is
needed (a recorded member is ALIVE only when boot id, start time, liveness and process
group all match what /proc shows now). Each test below fails when its clause is deleted
from ``prove`` (checked by ``scripts/mutate.py``, docs/reliability.md)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from efold.controller.processes import proof as proof_module
from efold.controller.processes.proof import (
    ROLE_DESCENDANT,
    ROLE_LEADER,
    Member,
    ProofState,
    group_signal_supported,
    prove,
    signal_pidfd,
)
from efold.controller.processes.subreaper import DIRECT_CHILDREN
from efold.identity import ProcessIdentity, boot_id, identity_of


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live child in its own session: its process group is its pid, not ours. SIGHUP
    ends it whatever the test runner inherited (``nohup`` ignores it)."""
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                              "signal.signal(signal.SIGHUP, signal.SIG_DFL); print('ready', "
                              "flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, start_new_session=True)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    ident = identity_of(child.pid)
    DIRECT_CHILDREN.add(ident)  # started on purpose: never an adopted orphan
    try:
        yield child
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        DIRECT_CHILDREN.discard(ident)


def _member(child: subprocess.Popen[bytes], *, pgid: int | None = None,
            boot: str | None = None, start_delta: int = 0) -> Member:
    real = identity_of(child.pid)
    ident = ProcessIdentity(pid=real.pid, start_time=real.start_time + start_delta,
                            boot_id=real.boot_id if boot is None else boot)
    return Member(identity=ident, pgid=child.pid if pgid is None else pgid, role=ROLE_LEADER)


def test_the_recorded_process_in_its_recorded_group_is_alive(
        sleeper: subprocess.Popen[bytes]) -> None:
    proof = prove(_member(sleeper))
    try:
        assert proof.state is ProofState.ALIVE
        assert proof.pidfd is not None and proof.entry is not None
        assert proof.entry.pgid == sleeper.pid
        assert signal_pidfd(proof.pidfd, 0)  # the handle names the live process
    finally:
        proof.close()
    assert proof.pidfd is None


def test_a_recorded_group_that_differs_from_the_live_one_is_not_proven(
        sleeper: subprocess.Popen[bytes]) -> None:
    # Same pid, same start time, alive: only the group differs (the group the test runs
    # in, which the child left with setsid). A recycled group or a process that moved
    # must never be signalled as the recorded member.
    other = os.getpgid(0)
    assert other != sleeper.pid
    for pgid in (other, sleeper.pid + 1, sleeper.pid - 1):
        proof = prove(_member(sleeper, pgid=pgid))
        assert proof.state is ProofState.MISMATCH, pgid
        assert proof.pidfd is None
        assert proof.entry is not None and proof.entry.pgid == sleeper.pid
    assert sleeper.poll() is None  # nothing was signalled


def test_a_recorded_boot_id_that_differs_is_not_proven(
        sleeper: subprocess.Popen[bytes]) -> None:
    # A record from another boot names nothing of this boot, even if the pid, start time
    # and group happen to match a live process now: it counts as dead, no handle.
    current = boot_id()
    other = current[:-1] + ("0" if current[-1] != "0" else "1")
    proof = prove(_member(sleeper, boot=other))
    assert proof.state is ProofState.EXITED
    assert proof.pidfd is None and proof.entry is None
    # The caller's idea of the current boot is the one compared, when it gives one.
    proof = prove(_member(sleeper), current_boot=other)
    assert proof.state is ProofState.EXITED and proof.pidfd is None
    proof = prove(_member(sleeper, boot=other), current_boot=other)
    try:
        assert proof.state is ProofState.ALIVE
    finally:
        proof.close()
    assert sleeper.poll() is None


def test_a_start_time_that_differs_is_a_mismatch(sleeper: subprocess.Popen[bytes]) -> None:
    for delta in (1, -1):
        proof = prove(_member(sleeper, start_delta=delta))
        assert proof.state is ProofState.MISMATCH
        assert proof.pidfd is None and proof.entry is not None


def test_a_zombie_counts_as_exited() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ident = identity_of(child.pid)
    DIRECT_CHILDREN.add(ident)
    try:
        # Exited but not reaped: /proc still shows it, as a zombie.
        deadline = time.monotonic() + 10
        while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proof = prove(Member(identity=ident, pgid=child.pid, role=ROLE_DESCENDANT))
        assert proof.state is ProofState.EXITED
        assert proof.pidfd is None
        assert proof.entry is not None and proof.entry.exited
    finally:
        child.wait()
        DIRECT_CHILDREN.discard(ident)
    # Reaped: nothing holds the pid (or another process does, with another start time).
    proof = prove(Member(identity=ident, pgid=child.pid, role=ROLE_DESCENDANT))
    assert proof.state in (ProofState.EXITED, ProofState.MISMATCH)
    assert proof.pidfd is None


def test_signal_pidfd_reaches_the_process_and_reports_a_gone_one(
        sleeper: subprocess.Popen[bytes]) -> None:
    proof = prove(_member(sleeper))
    assert proof.pidfd is not None
    try:
        assert signal_pidfd(proof.pidfd, signal.SIGKILL)
        sleeper.wait(timeout=10)
        assert sleeper.returncode == -signal.SIGKILL
        assert not signal_pidfd(proof.pidfd, 0)
    finally:
        proof.close()


def test_signal_pidfd_signals_the_process_not_one_of_its_threads() -> None:
    # Every thread blocks SIGUSR1; a second thread waits for it with sigwait. A
    # process-directed signal (flags 0) is taken by that thread; a signal directed at
    # the leader thread only (PIDFD_SIGNAL_THREAD) would stay pending on the main thread
    # and never be seen. Containment signals processes.
    code = (
        "import signal, sys, threading, time\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
        "def wait():\n"
        "    signal.sigwait({signal.SIGUSR1})\n"
        "    sys.stdout.write('taken\\n'); sys.stdout.flush()\n"
        "threading.Thread(target=wait, daemon=True).start()\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
        "time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    ident = identity_of(child.pid)
    DIRECT_CHILDREN.add(ident)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        proof = prove(Member(identity=ident, pgid=child.pid, role=ROLE_LEADER))
        try:
            assert proof.state is ProofState.ALIVE and proof.pidfd is not None
            assert signal_pidfd(proof.pidfd, signal.SIGUSR1)
        finally:
            proof.close()
        taken: list[str] = []
        reader = threading.Thread(target=lambda: taken.append(child.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(timeout=10)
        assert taken == ["taken\n"]
    finally:
        child.kill()
        child.wait()
        DIRECT_CHILDREN.discard(ident)


def test_the_group_signal_probe_delivers_nothing(monkeypatch: pytest.MonkeyPatch,
                                                 sleeper: subprocess.Popen[bytes]) -> None:
    # The probe (signal 0) checks that the kernel takes the group flag; it must never
    # deliver a signal (SIGHUP, signal 1, would end the sleeper).
    monkeypatch.setattr(proof_module, "_group_support", None)
    fd = os.pidfd_open(sleeper.pid)
    try:
        assert group_signal_supported(fd) is True
        assert group_signal_supported(fd) is True  # cached: probed once
    finally:
        os.close(fd)
    with pytest.raises(subprocess.TimeoutExpired):  # still running: nothing delivered
        sleeper.wait(timeout=0.5)


def test_the_group_signal_probe_on_an_empty_group_says_supported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The leader is gone (exited and reaped; its pidfd still open): the kernel
    # understood the flag and found nobody to signal, which is support, not its absence.
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ident = identity_of(child.pid)
    DIRECT_CHILDREN.add(ident)
    fd = os.pidfd_open(child.pid)
    try:
        child.wait()
        DIRECT_CHILDREN.discard(ident)
        with pytest.raises(ProcessLookupError):  # what the probe meets here
            signal.pidfd_send_signal(fd, 0)
        monkeypatch.setattr(proof_module, "_group_support", None)
        assert group_signal_supported(fd) is True
    finally:
        os.close(fd)
        DIRECT_CHILDREN.discard(ident)


def test_the_group_signal_probe_raises_on_a_descriptor_that_is_no_pidfd(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Only EINVAL (a kernel before 6.9 that does not know the flag) means "unsupported";
    # any other failure is an error, never read as an answer and cached.
    monkeypatch.setattr(proof_module, "_group_support", None)
    fd = os.open(tmp_path / "not-a-pidfd", os.O_CREAT | os.O_RDWR)
    try:
        with pytest.raises(OSError) as raised:
            group_signal_supported(fd)
        assert raised.value.errno == errno.EBADF
    finally:
        os.close(fd)
    assert proof_module._group_support is None
