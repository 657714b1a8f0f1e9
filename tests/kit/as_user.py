"""Run ``efold-controller`` as a real process, as root or as an ordinary user.

Operators are not root. A refusal that holds only for root (a file root may read, a
directory root may write) is no refusal, so the bad-input tests run each case twice:
as this process's user and, when that is root, as ``nobody`` (uid/gid 65534, no
supplementary groups) with umask 002, on a workspace that user owns.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
REFUSED = re.compile(r"^refused: ([a-z0-9_]+)(?: \((.*)\))?$", re.MULTILINE)
# Who may run a case: ourselves, and nobody when we are root (otherwise we cannot).
USERS = ["self", "nobody"] if os.geteuid() == 0 else ["self"]


@dataclass(frozen=True)
class Answer:
    exit: int
    stdout: str
    stderr: str

    @property
    def code(self) -> str | None:
        """The refusal's fixed code, or None when the command did not refuse."""
        match = REFUSED.search(self.stderr)
        return match.group(1) if match else None

    @property
    def detail(self) -> str:
        match = REFUSED.search(self.stderr)
        return (match.group(2) or "") if match else ""


def _runs_as_nobody(python: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "import efold"], user=NOBODY, group=NOBODY,
                              extra_groups=[], capture_output=True, timeout=60, cwd="/")
    except PermissionError:
        return False
    return done.returncode == 0


@contextmanager
def ordinary_python() -> Iterator[str | None]:
    """An interpreter the ordinary user can run with this environment's packages: ours,
    or (when ours lives where that user cannot reach, e.g. under /root) a throwaway venv
    of the system's same-version Python that adds our site-packages; None when there is
    none. A command that starts children (a pilot's fork-server template re-executes
    its interpreter) needs one; a refusal before any child may not."""
    if os.geteuid() != 0 or _runs_as_nobody(sys.executable):
        yield sys.executable
        return
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/bin:/usr/local/bin")
    if system is None:
        yield None
        return
    venv = Path(tempfile.mkdtemp(prefix="efold-nobody-venv-", dir="/tmp"))
    try:
        venv.chmod(0o755)
        subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True)
        purelib = sysconfig.get_paths()["purelib"]
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "efold-under-test.pth").write_text(
            f"import site; site.addsitedir({purelib!r})\n")
        interpreter = str(venv / "bin" / "python")
        assert _runs_as_nobody(interpreter), "the ordinary user's interpreter cannot import efold"
        yield interpreter
    finally:
        shutil.rmtree(venv, ignore_errors=True)


@contextmanager
def workspace(user: str) -> Iterator[Path]:
    """A fresh directory ``user`` owns (mode 0775: group-writable, as umask 002 makes)."""
    path = Path(tempfile.mkdtemp(prefix="efold-as-user-", dir="/tmp"))
    try:
        path.chmod(0o775)
        if user == "nobody":
            os.chown(path, NOBODY, NOBODY)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def give(path: Path, user: str) -> None:
    """Hand a file or FIFO made by the test to ``user`` (umask 002 modes)."""
    if user == "nobody":
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def drop(user: str) -> list[str]:
    """The argv prefix that runs a command as ``user`` (nothing for ourselves)."""
    return [] if user != "nobody" else [
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def run_cli(args: list[str], cwd: Path, user: str, timeout: float = 60.0) -> Answer:
    """``efold-controller ARGS`` in ``cwd`` as ``user``. A hang fails the test (the
    timeout raises): a refusal must come at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFOLD_")}
    env["HOME"] = str(cwd)
    proc = subprocess.run([*drop(user), sys.executable, "-m", "efold.controller", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env,
                          umask=0o002, stdin=subprocess.DEVNULL, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return Answer(proc.returncode, proc.stdout, proc.stderr)
