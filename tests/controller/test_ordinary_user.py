"""The README's main job and its path refusals as an ordinary user: real
``efold-controller`` processes as ``nobody`` (uid/gid 65534, no supplementary groups)
with umask 002, as an operator with a user-private group runs them.

Operators are not root: a directory root may write is no proof. When this process is
not root it runs the commands as itself (it cannot drop to another user), still with
umask 002.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from as_user import ordinary_python

NOBODY = 65534
# A group-writable directory is refused only when its group is shared (nobody's nogroup):
# a user with a private group rightly has it accepted, so these run as root, as nobody.
needs_shared_group = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run as nobody, whose group others share")
REFUSED = re.compile(r"^refused: ([a-z_]+) \((.*)\)$", re.MULTILINE)


@pytest.fixture(scope="module")
def python() -> Iterator[str]:
    """An interpreter the ordinary user can run (``as_user.ordinary_python``)."""
    with ordinary_python() as interpreter:
        if interpreter is None:
            pytest.skip(f"no Python an ordinary user can run (ours: {sys.executable})")
        yield interpreter


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh directory the ordinary user owns, mode 0755."""
    path = Path(tempfile.mkdtemp(prefix="efold-ordinary-", dir="/tmp"))
    try:
        path.chmod(0o755)
        if os.geteuid() == 0:
            os.chown(path, NOBODY, NOBODY)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def efold(python: str, cwd: Path, *args: str,
          timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``efold-controller ARGS`` in ``cwd`` as the ordinary user with umask 002."""
    user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFOLD_") and k != "CI"}
    env["HOME"] = str(cwd)
    done = subprocess.run([python, "-m", "efold.controller", *args], cwd=cwd, env=env,
                          umask=0o002, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False, **user)  # type: ignore[arg-type]
    assert "Traceback" not in done.stderr, done.stderr
    return done


def refusal(done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    match = REFUSED.search(done.stderr)
    assert done.returncode == 2 and match is not None, done.stdout + done.stderr
    return match.group(1), match.group(2)


def as_user_mkdir(path: Path, mode: int) -> None:
    """A directory the ordinary user made (then ``chmod MODE``)."""
    path.mkdir()
    path.chmod(mode)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)


def owner_name() -> str:
    import pwd
    return pwd.getpwuid(NOBODY if os.geteuid() == 0 else os.geteuid()).pw_name


def modes_below(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode)
            for p in [root, *root.rglob("*")] if p.is_dir() and not p.is_symlink()}


# -- the README's main job ------------------------------------------------------------


def test_pilot_faux_under_umask_002_in_a_fresh_directory_makes_only_private_dirs(
        python: str, home: Path) -> None:
    done = efold(python, home, "pilot", "--faux", "--limit", "1", "--no-progress", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    run = Path(done.stdout.splitlines()[0].removeprefix("run: "))
    assert run.parent == home / "efold-runs"
    # Everything efold made is owner-only whatever the umask: no directory it made is
    # group- or world-writable (a later run would refuse it).
    made = modes_below(home / "efold-runs")
    assert made and all(mode & 0o022 == 0 for mode in made.values()), made
    assert made["."] == made[run.name] == 0o700
    again = efold(python, home, "pilot", "--faux", "--limit", "1", "--no-progress", "-q")
    assert again.returncode == 0, again.stdout + again.stderr


@needs_shared_group
def test_a_group_writable_working_directory_is_named_with_its_mode_owner_and_fix(
        python: str, home: Path) -> None:
    work = home / "work"
    as_user_mkdir(work, 0o775)  # as `mkdir work` under umask 002 makes it
    code, detail = refusal(efold(python, work, "pilot", "--faux", "--limit", "1"))
    assert code == "path_refused"
    assert detail.startswith(f"ancestor writable by others: {work} (mode 0775, "
                             f"owner {owner_name()}, group ")
    assert detail.endswith(f"fix: chmod g-w,o-w {work}")
    assert os.listdir(work) == []  # refused before anything was made
    work.chmod(0o755)  # the fix it names
    fixed = efold(python, work, "pilot", "--faux", "--limit", "1", "--no-progress", "-q")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


@needs_shared_group
def test_a_group_writable_runs_root_is_called_the_runs_root(python: str, home: Path) -> None:
    runs = home / "runs"
    as_user_mkdir(runs, 0o775)
    code, detail = refusal(efold(python, home, "pilot", "--faux", "--runs", str(runs)))
    assert code == "path_refused"
    assert detail.startswith(f"runs root writable by others: {runs} (mode 0775, ")
    assert detail.endswith(f"fix: chmod g-w,o-w {runs}") and os.listdir(runs) == []
    for mode in (0o755, 0o1775):  # not writable by others, or sticky (as /tmp is)
        runs.chmod(mode)
        ran = efold(python, home, "pilot", "--faux", "--runs", str(runs), "--limit", "1",
                    "--no-progress", "-q")
        assert ran.returncode == 0, ran.stdout + ran.stderr


# -- directories the user may not write ----------------------------------------------


needs_an_ordinary_user = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to make a directory the ordinary user cannot write")


@pytest.fixture
def locked(home: Path) -> Path:
    """A directory owned by root, mode 0755, inside the user's directory: the ordinary
    user may read it but not create in it."""
    path = home / "locked"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    return path


@needs_an_ordinary_user
@pytest.mark.parametrize("below", ["", "sub/runs"])
def test_an_unwritable_runs_root_refuses_with_path_not_writable(
        python: str, home: Path, locked: Path, below: str) -> None:
    runs = locked / below if below else locked
    code, detail = refusal(efold(python, home, "pilot", "--faux", "--runs", str(runs)))
    assert code == "path_not_writable"
    assert detail.startswith(f"{locked} (mode 0755, owner root) is not writable by "
                             f"{owner_name()}: cannot create ")
    assert os.listdir(locked) == []


@needs_an_ordinary_user
def test_an_unwritable_aggregate_output_refuses_with_path_not_writable(
        python: str, home: Path, locked: Path) -> None:
    done = efold(python, home, "pilot", "--faux", "--limit", "1", "--no-progress", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    run = done.stdout.splitlines()[0].removeprefix("run: ")
    for output in (locked / "report", locked / "a" / "report"):
        code, detail = refusal(efold(python, home, "aggregate", run, "--output",
                                     str(output)))
        assert code == "path_not_writable"
        assert detail.startswith(f"{locked} (mode 0755, owner root) is not writable")
    assert os.listdir(locked) == []


@needs_an_ordinary_user
@pytest.mark.parametrize("below", ["", "traces", "a/traces"])
def test_an_unwritable_corpus_out_refuses_with_path_not_writable(
        python: str, home: Path, locked: Path, below: str) -> None:
    out = locked / below if below else locked
    code, detail = refusal(efold(python, home, "corpus", "generate", "--suite", "original",
                                 "--out", str(out)))
    assert code == "path_not_writable"
    assert detail.startswith(f"{locked} (mode 0755, owner root) is not writable")
    assert os.listdir(locked) == []
