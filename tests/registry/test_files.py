"""Durable publication and private reads on real files, with real racing processes."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ordinary_user import needs_root

from efold.errors import Code
from efold.registry.errors import RegistryError
from efold.registry.files import (
    check_owner_safe,
    fsync_dir,
    make_private_dir,
    publish_exclusive,
    read_private,
)


def _code(exc: pytest.ExceptionInfo[RegistryError]) -> Code:
    return exc.value.code


def _entries(path: Path) -> list[str]:
    return sorted(os.listdir(path))


# -- publish_exclusive -----------------------------------------------------------------


def test_publish_writes_complete_private_file_and_leaves_no_temp(tmp_path: Path) -> None:
    publish_exclusive(tmp_path, "a.json", b'{"x": 1}')
    target = tmp_path / "a.json"
    assert target.read_bytes() == b'{"x": 1}'
    st = os.stat(target)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 1
    assert _entries(tmp_path) == ["a.json"]


def test_publish_mode_is_exact_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        publish_exclusive(tmp_path, "pub", b"x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "pub").st_mode) == 0o644


def test_publish_never_overwrites_an_existing_target(tmp_path: Path) -> None:
    (tmp_path / "taken").write_bytes(b"original")
    (tmp_path / "dir").mkdir()
    for name in ("taken", "dir"):
        with pytest.raises(RegistryError) as info:
            publish_exclusive(tmp_path, name, b"new")
        assert _code(info) is Code.PUBLISH_TARGET_EXISTS
    assert (tmp_path / "taken").read_bytes() == b"original"
    assert _entries(tmp_path) == ["dir", "taken"]


def test_publish_refuses_symlink_at_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    os.symlink(victim, tmp_path / "link")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for name in ("link", "dangling"):
        with pytest.raises(RegistryError) as info:
            publish_exclusive(tmp_path, name, b"evil")
        assert _code(info) is Code.PUBLISH_TARGET_EXISTS
    assert victim.read_bytes() == b"keep"
    assert not (tmp_path / "nowhere").exists()


def test_publish_refuses_symlink_at_any_parent(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    os.symlink(real, tmp_path / "alias")
    for directory in (tmp_path / "alias", tmp_path / "alias" / "sub"):
        with pytest.raises(RegistryError) as info:
            publish_exclusive(directory, "f", b"x")
        assert _code(info) is Code.PATH_REFUSED
    assert _entries(real) == ["sub"] and _entries(real / "sub") == []


def test_publish_rejects_names_that_are_not_one_component(tmp_path: Path) -> None:
    for name in ("", ".", "..", "a/b"):
        with pytest.raises(ValueError):
            publish_exclusive(tmp_path, name, b"x")


def test_two_processes_racing_for_each_name_exactly_one_wins(tmp_path: Path) -> None:
    names = 60
    code = textwrap.dedent("""
        import sys
        from efold.registry.files import publish_exclusive
        from efold.registry.errors import RegistryError
        directory, me = sys.argv[1], sys.argv[2]
        print("ready", flush=True)
        sys.stdin.readline()  # start together
        for i in range(int(sys.argv[3])):
            try:
                publish_exclusive(directory, f"n{i}", me.encode())
                print(i, "won", flush=True)
            except RegistryError as exc:
                print(i, exc.code.value, flush=True)
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), who, str(names)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for who in ("p1", "p2")
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = []
    for p in procs:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.close()
        outputs.append(p.stdout.read())
        p.stdout.close()
        p.wait(timeout=120)
    assert all(p.returncode == 0 for p in procs)
    results: dict[int, list[tuple[str, str]]] = {i: [] for i in range(names)}
    for who, out in zip(("p1", "p2"), outputs, strict=True):
        for line in out.splitlines():
            number, verdict = line.split()
            results[int(number)].append((who, verdict))
    for index, verdicts in results.items():
        winners = [who for who, verdict in verdicts if verdict == "won"]
        losers = [verdict for _, verdict in verdicts if verdict != "won"]
        assert len(winners) == 1, (index, verdicts)
        assert losers == ["publish_target_exists"]
        assert (tmp_path / f"n{index}").read_bytes() == winners[0].encode()
    assert len(_entries(tmp_path)) == names  # no temp file left behind by either


def test_fsync_failure_is_fatal_and_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(RegistryError) as info:
        publish_exclusive(tmp_path, "f", b"data")
    assert _code(info) is Code.FSYNC_FAILED
    assert len(calls) == 1
    monkeypatch.undo()
    assert _entries(tmp_path) == []  # the final name never appeared, the temp is gone


def test_publish_syncs_the_directory_once_and_even_when_the_temp_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One directory fsync makes the name and the temp's removal durable together; if
    the temp cannot be removed after the link, the published name is still made durable
    before the error."""
    synced: list[bool] = []  # True: a directory
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    publish_exclusive(tmp_path, "a", b"data")
    assert synced == [False, True]  # the file, then the directory, once
    synced.clear()
    real_unlink = os.unlink

    def failing_unlink(path: str, *, dir_fd: int | None = None) -> None:
        if str(path).startswith(".b.tmp-"):
            raise OSError(errno.EIO, "injected")
        real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", failing_unlink)
    with pytest.raises(RegistryError) as info:
        publish_exclusive(tmp_path, "b", b"data")
    assert _code(info) is Code.PUBLISH_FAILED
    assert synced == [False, True]  # the name, linked, was made durable all the same


# -- read_private ----------------------------------------------------------------------


def _private(path: Path, data: bytes = b"secret", mode: int = 0o600) -> Path:
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def test_read_private_reads_a_private_file(tmp_path: Path) -> None:
    _private(tmp_path / "f", b"hello")
    assert read_private(tmp_path, "f", max_bytes=5) == b"hello"
    assert read_private(tmp_path, "f", max_bytes=5, owner_only=True) == b"hello"


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_read_private_refuses_group_or_other_writable(tmp_path: Path, mode: int) -> None:
    _private(tmp_path / "f", mode=mode)
    with pytest.raises(RegistryError) as info:
        read_private(tmp_path, "f", max_bytes=100)
    assert _code(info) is Code.PRIVATE_READ_REFUSED


def test_read_private_owner_only_refuses_readable_by_others(tmp_path: Path) -> None:
    _private(tmp_path / "f", mode=0o640)
    assert read_private(tmp_path, "f", max_bytes=100) == b"secret"
    with pytest.raises(RegistryError) as info:
        read_private(tmp_path, "f", max_bytes=100, owner_only=True)
    assert _code(info) is Code.PRIVATE_READ_REFUSED


def test_read_private_refuses_hard_linked_file(tmp_path: Path) -> None:
    _private(tmp_path / "f")
    os.link(tmp_path / "f", tmp_path / "alias")
    for name in ("f", "alias"):
        with pytest.raises(RegistryError) as info:
            read_private(tmp_path, name, max_bytes=100)
        assert _code(info) is Code.PRIVATE_READ_REFUSED


@needs_root
def test_read_private_refuses_symlinks_fifos_dirs_and_foreign_files(tmp_path: Path) -> None:
    _private(tmp_path / "f")
    os.symlink(tmp_path / "f", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo", 0o600)
    (tmp_path / "dir").mkdir()
    _private(tmp_path / "foreign")
    os.chown(tmp_path / "foreign", 12345, 12345)  # tests run as root here; see below
    names = ["link", "fifo", "dir"] + (["foreign"] if os.geteuid() == 0 else [])
    for name in names:
        with pytest.raises(RegistryError) as info:
            read_private(tmp_path, name, max_bytes=100)
        assert _code(info) is Code.PRIVATE_READ_REFUSED, name


def test_read_private_refuses_symlinked_parent(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    _private(tmp_path / "real" / "f")
    os.symlink(tmp_path / "real", tmp_path / "alias")
    with pytest.raises(RegistryError) as info:
        read_private(tmp_path / "alias", "f", max_bytes=100)
    assert _code(info) is Code.PATH_REFUSED


def test_read_private_refuses_oversized_and_reports_missing(tmp_path: Path) -> None:
    _private(tmp_path / "f", b"x" * 11)
    with pytest.raises(RegistryError) as info:
        read_private(tmp_path, "f", max_bytes=10)
    assert _code(info) is Code.PRIVATE_READ_REFUSED
    with pytest.raises(RegistryError) as info:
        read_private(tmp_path, "absent", max_bytes=10)
    assert _code(info) is Code.PRIVATE_FILE_MISSING


def test_read_private_refuses_file_swapped_between_check_and_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _private(tmp_path / "f", b"checked")
    _private(tmp_path / "other", b"swapped in")
    real_open = os.open

    def swapping_open(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == "f":  # the racer wins between lstat and open
            os.rename(tmp_path / "other", tmp_path / "f")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", swapping_open)
    with pytest.raises(RegistryError) as info:
        read_private(tmp_path, "f", max_bytes=100)
    assert _code(info) is Code.PRIVATE_READ_REFUSED
    assert "before open" in info.value.detail


def test_read_private_refuses_file_swapped_while_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _private(tmp_path / "f", b"checked")
    _private(tmp_path / "other", b"swapped in")
    real_read = os.read

    def swapping_read(fd: int, n: int) -> bytes:
        if (tmp_path / "other").exists():  # the original keeps its one link elsewhere
            os.rename(tmp_path / "f", tmp_path / "f.old")
            os.rename(tmp_path / "other", tmp_path / "f")
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", swapping_read)
    with pytest.raises(RegistryError) as info:
        read_private(tmp_path, "f", max_bytes=100)
    assert _code(info) is Code.PRIVATE_READ_REFUSED
    assert "while reading" in info.value.detail


# -- private directories ---------------------------------------------------------------


def test_make_private_dir_creates_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        make_private_dir(tmp_path / "a")
        make_private_dir(tmp_path / "b" / "c" / "d", parents=True)
    finally:
        os.umask(old)
    for path in ("a", "b", "b/c", "b/c/d"):
        assert stat.S_IMODE(os.stat(tmp_path / path).st_mode) == 0o700, path
    make_private_dir(tmp_path / "a")  # an existing private dir is accepted
    fsync_dir(tmp_path / "a")


@needs_root
def test_make_private_dir_refuses_unsafe_existing_entries(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    os.symlink(tmp_path / "real", tmp_path / "link")
    (tmp_path / "open").mkdir()
    os.chmod(tmp_path / "open", 0o770)
    (tmp_path / "file").write_bytes(b"")
    (tmp_path / "foreign").mkdir(mode=0o700)
    os.chown(tmp_path / "foreign", 12345, 12345)
    for name in ("link", "open", "file", "foreign"):
        with pytest.raises(RegistryError) as info:
            make_private_dir(tmp_path / name)
        assert _code(info) is Code.PRIVATE_DIR_REFUSED, name
    with pytest.raises(RegistryError) as info:
        make_private_dir(tmp_path / "link" / "sub")
    assert _code(info) is Code.PATH_REFUSED
    assert os.listdir(tmp_path / "real") == []


@needs_root
def test_check_owner_safe(tmp_path: Path) -> None:
    check_owner_safe(tmp_path)
    check_owner_safe("/tmp")  # world-writable but sticky
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / "x").mkdir()
    with pytest.raises(RegistryError) as info:
        check_owner_safe(shared / "x")
    assert _code(info) is Code.PATH_REFUSED
    os.chmod(shared, 0o1777)
    check_owner_safe(shared / "x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 12345, 12345)
    with pytest.raises(RegistryError) as info:
        check_owner_safe(foreign)
    assert _code(info) is Code.PATH_REFUSED
    os.symlink(tmp_path, tmp_path / "alias")
    with pytest.raises(RegistryError) as info:
        check_owner_safe(tmp_path / "alias")
    assert _code(info) is Code.PATH_REFUSED


def test_a_name_published_without_its_directory_fsync_is_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sync_dir=False``: the data is fsynced before the name exists (what a power loss
    may lose is the name, never part of the data); the directory's fsync is the
    caller's, once for many names (receipts: at the probe phase's end)."""
    import efold.registry.files as files

    synced: list[str] = []
    real = files.fsync_fd

    def fsync_fd(fd: int) -> None:
        synced.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real(fd)

    monkeypatch.setattr(files, "fsync_fd", fsync_fd)
    files.publish_exclusive(tmp_path, "a.json", b"{}\n", sync_dir=False)
    assert synced == ["file"]
    files.publish_exclusive(tmp_path, "b.json", b"{}\n")
    assert synced == ["file", "file", "dir"]
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json"]  # no temp left
    assert (tmp_path / "a.json").read_bytes() == b"{}\n"
