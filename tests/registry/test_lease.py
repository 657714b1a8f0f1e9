"""The run lease, with real processes: exclusion, the POSIX-lock pitfall, death."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from efold.errors import Code
from efold.identity import current_identity
from efold.registry.errors import RegistryError
from efold.registry.lease import (
    LEASE_NAME,
    LeaseState,
    acquire_lease,
    probe_lease,
)


def _wait_dead(pid: int) -> None:
    # The holder is our child: reap it so /proc no longer shows it (not even a zombie).
    os.waitpid(pid, 0)


def test_absent_when_no_lease_file(run_dir: Path) -> None:
    status = probe_lease(run_dir)
    assert status.state is LeaseState.ABSENT
    assert status.holder is None


def test_acquire_records_holder_and_release_marks_released(run_dir: Path) -> None:
    me = current_identity()
    with acquire_lease(run_dir, epoch=3) as lease:
        assert (lease.holder.pid, lease.holder.start_time, lease.holder.boot_id) == (
            me.pid, me.start_time, me.boot_id)
        assert lease.holder.epoch == 3
        lease.assert_held()
        status = probe_lease(run_dir)  # from the holder itself: its own fd is not ours
        assert status.state is LeaseState.LIVE
        assert status.holder == lease.holder
        lease.set_epoch(9)
        assert probe_lease(run_dir).holder == lease.holder
        assert lease.holder.epoch == 9
        assert os.stat(run_dir / LEASE_NAME).st_mode & 0o777 == 0o600
    status = probe_lease(run_dir)
    assert status.state is LeaseState.RELEASED
    assert status.holder is not None and status.holder.epoch == 9
    with pytest.raises(RegistryError) as info:
        lease.assert_held()
    assert info.value.code is Code.LEASE_NOT_HELD
    with pytest.raises(RegistryError) as info:
        lease.set_epoch(10)
    assert info.value.code is Code.LEASE_NOT_HELD
    lease.release()  # idempotent
    # A released lease can be taken again, by the same file, as a new acquisition.
    inode = os.stat(run_dir / LEASE_NAME).st_ino
    with acquire_lease(run_dir) as again:
        assert again.file_identity[1] == inode
        assert len(again.holder.token) == 32 and again.holder.token != lease.holder.token
        assert probe_lease(run_dir).holder == again.holder


def test_second_process_cannot_acquire(run_dir: Path, spawn_holder: Any) -> None:
    holder = spawn_holder(run_dir)
    with pytest.raises(RegistryError) as info:
        acquire_lease(run_dir)
    assert info.value.code is Code.LEASE_HELD
    status = probe_lease(run_dir)
    assert status.state is LeaseState.LIVE
    assert status.holder is not None and status.holder.pid == holder.pid
    # A failed acquire leaves the holder's file alone.
    assert holder.send("probe") == "live"
    assert holder.send("epoch 5") == "ok"
    status = probe_lease(run_dir)
    assert status.holder is not None and status.holder.epoch == 5
    assert holder.send("release") == "released"
    assert probe_lease(run_dir).state is LeaseState.RELEASED
    with acquire_lease(run_dir) as lease:
        assert lease.holder.pid == os.getpid()


def test_holder_opening_and_closing_the_lease_file_keeps_the_lease(
    run_dir: Path, spawn_holder: Any
) -> None:
    # The holder opens and closes other descriptors on its own lease file, including
    # one with a POSIX lock: with fcntl locks (or a SQLite lease) this drops the lease.
    holder = spawn_holder(run_dir, extra="""
        import fcntl
        path = os.path.join(sys.argv[1], ".efold-lease")
        for _ in range(3):
            fd = os.open(path, os.O_RDONLY)
            os.close(fd)
        with open(path, "rb") as f:
            f.read()
        fd = os.open(path, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.close(fd)
        lease.assert_held()
        info = str(probe_lease(sys.argv[1]).state)
    """)
    assert holder.ready_line.split()[2] == "live"
    with pytest.raises(RegistryError) as info:
        acquire_lease(run_dir)
    assert info.value.code is Code.LEASE_HELD
    assert probe_lease(run_dir).state is LeaseState.LIVE


def test_open_and_close_in_this_process_keeps_lease_against_another(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        for _ in range(3):
            with open(run_dir / LEASE_NAME, "rb") as f:
                f.read()
        fd = os.open(run_dir / LEASE_NAME, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        lease.assert_held()
        code = textwrap.dedent("""
            import sys
            from efold.registry.lease import acquire_lease
            from efold.registry.errors import RegistryError
            try:
                acquire_lease(sys.argv[1])
            except RegistryError as exc:
                print(exc.code.value)
            else:
                print("acquired")
        """)
        out = subprocess.run([sys.executable, "-c", code, str(run_dir)],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == "lease_held"


def test_sigkilled_holder_reads_dead_and_lease_can_be_retaken(
    run_dir: Path, spawn_holder: Any
) -> None:
    holder = spawn_holder(run_dir)
    assert holder.send("epoch 4") == "ok"
    os.kill(holder.pid, signal.SIGKILL)
    _wait_dead(holder.pid)
    status = probe_lease(run_dir)
    assert status.state is LeaseState.HOLDER_DEAD
    assert status.holder is not None
    assert (status.holder.pid, status.holder.epoch) == (holder.pid, 4)
    inode = os.stat(run_dir / LEASE_NAME).st_ino
    with acquire_lease(run_dir) as lease:
        assert lease.holder.pid == os.getpid()
        assert lease.file_identity[1] == inode  # same file, taken over, not recreated
        assert probe_lease(run_dir).state is LeaseState.LIVE


def test_lease_descriptor_is_not_inherited_across_exec(run_dir: Path, spawn_holder: Any) -> None:
    # The holder starts a long-lived program with close_fds=False: only O_CLOEXEC keeps
    # the lock from outliving the holder inside it.
    holder = spawn_holder(run_dir, extra="""
        child = subprocess.Popen(["sleep", "60"], close_fds=False)
        info = str(child.pid)
    """)
    grandchild = int(holder.ready_line.split()[2])
    try:
        os.kill(holder.pid, signal.SIGKILL)
        _wait_dead(holder.pid)
        assert probe_lease(run_dir).state is LeaseState.HOLDER_DEAD
        with acquire_lease(run_dir):
            pass
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_forked_copy_neither_holds_nor_releases(run_dir: Path) -> None:
    with acquire_lease(run_dir) as lease:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 0
            try:
                lease.assert_held()
                code = 1  # a forked copy must not pass as the holder
            except RegistryError:
                pass
            lease.release()  # must not unlock the parent's shared description
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        lease.assert_held()
        assert probe_lease(run_dir).state is LeaseState.LIVE


def test_replaced_or_removed_lease_file_is_not_held(run_dir: Path) -> None:
    lease = acquire_lease(run_dir)
    try:
        os.rename(run_dir / LEASE_NAME, run_dir / "moved")
        (run_dir / LEASE_NAME).write_bytes(b"")
        os.chmod(run_dir / LEASE_NAME, 0o600)
        with pytest.raises(RegistryError) as info:
            lease.assert_held()
        assert info.value.code is Code.LEASE_NOT_HELD
        os.unlink(run_dir / LEASE_NAME)
        with pytest.raises(RegistryError) as info:
            lease.assert_held()
        assert info.value.code is Code.LEASE_NOT_HELD
    finally:
        lease.release()


def test_acquire_refuses_unsafe_lease_files_without_deleting_them(run_dir: Path) -> None:
    path = run_dir / LEASE_NAME
    path.write_bytes(b"someone else's")
    os.chmod(path, 0o666)
    with pytest.raises(RegistryError) as info:
        acquire_lease(run_dir)
    assert info.value.code is Code.LEASE_FILE_INVALID
    assert path.read_bytes() == b"someone else's"

    os.chmod(path, 0o600)
    os.link(path, run_dir / "alias")
    with pytest.raises(RegistryError) as info:
        acquire_lease(run_dir)
    assert info.value.code is Code.LEASE_FILE_INVALID
    assert path.read_bytes() == b"someone else's"
    os.unlink(run_dir / "alias")
    os.unlink(path)

    target = run_dir / "target"
    target.write_bytes(b"keep")
    os.symlink(target, path)
    with pytest.raises(RegistryError) as info:
        acquire_lease(run_dir)
    assert info.value.code is Code.LEASE_FILE_INVALID
    assert os.path.islink(path) and target.read_bytes() == b"keep"
    with pytest.raises(RegistryError) as info:
        probe_lease(run_dir)
    assert info.value.code is Code.LEASE_FILE_INVALID


def test_acquire_refuses_symlinked_run_dir(run_dir: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    os.symlink(run_dir, link)
    with pytest.raises(RegistryError) as info:
        acquire_lease(link)
    assert info.value.code is Code.PATH_REFUSED
    assert not (run_dir / LEASE_NAME).exists()


def test_empty_unlocked_lease_file_is_not_live(run_dir: Path) -> None:
    # A creator that died between creating the file and writing its record.
    path = run_dir / LEASE_NAME
    path.write_bytes(b"")
    os.chmod(path, 0o600)
    status = probe_lease(run_dir)
    assert (status.state, status.holder) == (LeaseState.HOLDER_DEAD, None)
    with acquire_lease(run_dir):
        assert probe_lease(run_dir).state is LeaseState.LIVE


def test_concurrent_probes_do_not_make_acquire_fail(run_dir: Path) -> None:
    # A process probing in a tight loop takes brief shared locks; acquire retries
    # across them instead of reading a probe as a holder.
    code = textwrap.dedent("""
        import sys, time
        from efold.registry.lease import probe_lease
        print("go", flush=True)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            probe_lease(sys.argv[1])
    """)
    with acquire_lease(run_dir):
        pass
    prober = subprocess.Popen([sys.executable, "-c", code, str(run_dir)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert prober.stdout is not None and prober.stdout.readline().strip() == "go"
        started = time.monotonic()
        for _ in range(20):
            with acquire_lease(run_dir) as lease:
                lease.assert_held()
        assert time.monotonic() - started < 15
    finally:
        prober.kill()
        prober.wait()
        assert prober.stdout is not None
        prober.stdout.close()
