"""Hostile review of a cluster run's files (issue 44), without Ray: a shard's records
brought back on the oldest Python efold accepts, a copy a killed publisher left half
made, and a shard's scratch files as an ordinary user (umask 002) leaves them."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sysconfig
import tarfile
from pathlib import Path

import msgspec
import pytest
from as_user import NOBODY, drop, ordinary_python, workspace

from efold.controller.cluster.shard_keeper import KeeperEnd
from efold.controller.rundirs.cluster_collect import publish_copy, run_records_tar, unpack_records
from efold.controller.rundirs.cluster_run import SHARDS_DIR, shard_copy_path
from efold.controller.rundirs.runroot import private_subdir
from efold.errors import Code, EfoldError

# Debian 12's python3.11 is 3.11.2: tarfile has no extraction filters before 3.11.4,
# and efold's pyproject accepts any 3.11.
OLD_PYTHON = shutil.which("python3.11", path="/usr/bin:/usr/local/bin")


def _records(tmp: Path) -> bytes:
    shard = tmp / "shard-run"
    (shard / "receipts").mkdir(parents=True)
    (shard / "journal.sqlite").write_bytes(b"journal")
    (shard / "receipts" / "a.json").write_bytes(b"{}")
    (shard / "slots").mkdir()  # never copied
    return run_records_tar(shard)


def _cluster_run(tmp: Path) -> Path:
    run = tmp / "run"
    run.mkdir(mode=0o700)
    private_subdir(run, SHARDS_DIR)
    return run


def _lacks_filters(python: str) -> bool:
    done = subprocess.run([python, "-c", "import tarfile; print(hasattr(tarfile, "
                           "'data_filter'))"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() == "False"


@pytest.mark.skipif(OLD_PYTHON is None or not _lacks_filters(OLD_PYTHON),
                    reason="no Python 3.11 without tarfile's extraction filters here")
def test_a_shard_copy_is_published_on_a_python_without_tar_filters(tmp_path: Path) -> None:
    """On 3.11.0-3.11.3 (no ``filter=``), publishing a shard's copy worked on no shard:
    the cluster controller died with a TypeError after its first shard ended."""
    assert OLD_PYTHON is not None
    tar, run = _records(tmp_path), _cluster_run(tmp_path)
    (tmp_path / "records.tar").write_bytes(tar)
    script = (f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
              "from pathlib import Path\n"
              "from efold.controller.rundirs.cluster_collect import publish_copy\n"
              f"publish_copy(Path({str(run)!r}), 1, Path({str(tmp_path / 'records.tar')!r})"
              ".read_bytes())\n")
    done = subprocess.run([OLD_PYTHON, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    copy = shard_copy_path(run, 1)
    assert (copy / "journal.sqlite").read_bytes() == b"journal"
    assert (copy / "receipts" / "a.json").read_bytes() == b"{}"
    assert not (copy / "slots").exists()
    assert os.stat(copy / "journal.sqlite").st_mode & 0o777 == 0o600
    assert sorted(os.listdir(run / SHARDS_DIR)) == ["1"]


def test_records_holding_a_link_are_refused(tmp_path: Path) -> None:
    """Records from a node are regular files and directories; a link (or a name out of
    the directory) is refused, never extracted, whichever Python unpacks them."""
    for name, kind in (("journal.sqlite", tarfile.SYMTYPE), ("../escape", tarfile.REGTYPE)):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            member = tarfile.TarInfo(name)
            member.type, member.linkname = kind, "/etc/passwd"
            tar.addfile(member, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
        where = tmp_path / f"into-{kind!r}"
        where.mkdir()
        with pytest.raises(EfoldError) as err:  # a fixed code, never a tarfile traceback
            unpack_records(buffer.getvalue(), where)
        assert err.value.code is Code.CLUSTER_RECORDS_INVALID
        assert not (tmp_path / "escape").exists() and os.listdir(where) == []
        if OLD_PYTHON is not None and _lacks_filters(OLD_PYTHON):  # efold's own refusal
            (tmp_path / "hostile.tar").write_bytes(buffer.getvalue())
            script = (f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
                      "from pathlib import Path\nfrom efold.errors import EfoldError\n"
                      "from efold.controller.rundirs.cluster_collect import unpack_records\n"
                      "try:\n"
                      f"    unpack_records(Path({str(tmp_path / 'hostile.tar')!r}).read_bytes(),"
                      f" Path({str(where)!r}))\n"
                      "except EfoldError as exc:\n    print('refused', exc.code.value)\n")
            done = subprocess.run([OLD_PYTHON, "-c", script], capture_output=True, text=True,
                                  timeout=120)
            assert done.stdout.startswith("refused cluster_records_invalid"), \
                done.stdout + done.stderr
            assert not (tmp_path / "escape").exists() and os.listdir(where) == []


def test_a_partial_copy_left_by_a_killed_publisher_does_not_block_the_next(
        tmp_path: Path) -> None:
    """A cluster controller (or collect) killed while unpacking a shard's copy leaves
    ``shards/.<k>.partial``; the next publisher under the lease (collect) replaces it
    (it refused private_dir_refused for that shard forever)."""
    tar, run = _records(tmp_path), _cluster_run(tmp_path)
    left = private_subdir(run, SHARDS_DIR, ".1.partial")
    (left / "journal.sqlite").write_bytes(b"half")
    publish_copy(run, 1, tar)
    assert (shard_copy_path(run, 1) / "journal.sqlite").read_bytes() == b"journal"
    assert sorted(os.listdir(run / SHARDS_DIR)) == ["1"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become an ordinary user")
def test_a_keepers_scratch_files_are_private_under_umask_002(tmp_path: Path) -> None:
    """The keeper's ``out``/``err`` (the controller's output) are 0600 for a user with
    umask 002, as every other file of a run (they were 0664)."""
    with ordinary_python() as python, workspace("nobody") as home:
        if python is None:
            pytest.skip("no interpreter the ordinary user can run")
        home.chmod(0o755)  # a umask 002 user's own directory, made private enough
        scratch = home / ".run-s1.scratch"
        scratch.mkdir(mode=0o700)
        os.chown(scratch, NOBODY, NOBODY)
        # The shard "controller": prints the modes of the keeper's files it writes to.
        program = [python, "-c", "import os, sys; print(' '.join(oct(os.stat(p).st_mode & "
                   "0o777) for p in sys.argv[1:]))", str(scratch / "out"),
                   str(scratch / "err")]
        death_r, death_w = os.pipe()
        try:
            # Started as the actor starts it: its first process names the keeper on
            # stdout (the life pipe, held by the keeper until its end) and exits.
            first = subprocess.Popen([*drop("nobody"), python, "-m",
                                      "efold.controller.cluster.shard_keeper", str(scratch),
                                      str(death_r), "--", *program],
                                     pass_fds=(death_r,), umask=0o002, cwd=home,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "HOME": str(home)})
            assert first.stdout is not None
            assert first.stdout.readline().strip().isdigit()
            assert first.wait(timeout=60) == 0
            os.close(death_r)
            death_r = -1
            end = scratch / "end.json"
            for _ in range(300):
                if end.exists():
                    break
                subprocess.run(["sleep", "0.1"], check=True)
            kept = msgspec.json.decode(end.read_bytes(), type=KeeperEnd)
            assert kept.exit_status == 0, kept
            assert kept.last_line == "0o600 0o600", kept
            assert os.stat(end).st_mode & 0o777 == 0o600
        finally:
            if death_r >= 0:
                os.close(death_r)
            os.close(death_w)  # the actor's end: the keeper removes its scratch and ends
        assert first.stdout.read() == b""  # end of the life pipe: the keeper is gone
        assert not scratch.exists()
