"""The contained command runner, on real processes: exit codes, the timeout, a detached
grandchild that ignores SIGTERM, the minimal environment, the output tail."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from efold.boundary import runner
from efold.boundary.errors import BoundaryError
from efold.boundary.runner import RUN_MARKER_VAR, run_contained
from efold.errors import Code


def _py(code: str) -> list[str]:
    return ["python", "-c", textwrap.dedent(code)]


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for init (dead all the same)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# A grandchild that ignores SIGTERM, holds the output pipe open and sleeps; with
# DETACH it leaves the session and group first (setsid, then the classic second fork).
_GRANDCHILD = """
import os, signal, sys, time
DETACH = {detach}
child = os.fork()
if child == 0:
    if DETACH:
        os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open("gc.tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename("gc.tmp", "gc.pid")
        time.sleep(60)
    os._exit(0)
os.waitpid(child, 0)
while not os.path.exists("gc.pid"):
    time.sleep(0.01)
print("leader done", flush=True)
{after}
"""


def _grandchild(detach: bool, after: str = "") -> list[str]:
    return ["python", "-c", _GRANDCHILD.format(detach=detach, after=after)]


def test_exit_codes_and_merged_output(tmp_path: Path) -> None:
    ok = run_contained(_py("print('hello')"), tmp_path, timeout_s=30)
    assert (ok.exit_code, ok.timed_out, ok.stdout, ok.truncated) == (0, False, "hello\n", False)
    failed = run_contained(
        _py("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"),
        tmp_path, timeout_s=30)
    assert failed.exit_code == 3 and not failed.timed_out
    assert "out\n" in failed.stdout and "err\n" in failed.stdout
    killed = run_contained(_py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
                           tmp_path, timeout_s=30)
    assert killed.exit_code == -9 and not killed.timed_out


def test_python_is_efolds_interpreter_and_cwd_is_the_workspace(tmp_path: Path) -> None:
    result = run_contained(_py("import os, sys; print(sys.executable); print(os.getcwd())"),
                           tmp_path, timeout_s=30)
    assert result.stdout.splitlines() == [sys.executable, str(tmp_path.resolve())]


def test_a_command_that_cannot_start_is_exit_127(tmp_path: Path) -> None:
    result = run_contained(["efold-no-such-command-here"], tmp_path, timeout_s=30)
    assert result.exit_code == 127 and "cannot start efold-no-such-command-here" in result.stdout


def test_timeout_kills_a_sleeping_process(tmp_path: Path) -> None:
    result = run_contained(
        _py("import os, time; open('leader.pid', 'w').write(str(os.getpid())); "
            "print('sleeping', flush=True); time.sleep(60)"),
        tmp_path, timeout_s=1.0)
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "sleeping\n"
    assert 1.0 <= result.duration_s < 10
    assert _dead(int((tmp_path / "leader.pid").read_text()))


@pytest.mark.parametrize("detach", [True, False], ids=["setsid-double-fork", "same-group"])
def test_a_grandchild_ignoring_sigterm_does_not_outlive_the_call(tmp_path: Path,
                                                                 detach: bool) -> None:
    result = run_contained(_grandchild(detach), tmp_path, timeout_s=30)
    # The grandchild still held the output pipe: the call returned because it is dead.
    assert result.exit_code == 0 and result.stdout == "leader done\n"
    assert result.duration_s < 10
    pid = int((tmp_path / "gc.pid").read_text())
    assert _dead(pid)


def test_a_detached_grandchild_dies_with_a_timed_out_leader(tmp_path: Path) -> None:
    result = run_contained(_grandchild(True, after="time.sleep(60)"), tmp_path, timeout_s=1.0)
    assert result.timed_out
    assert _dead(int((tmp_path / "gc.pid").read_text()))


def test_a_process_that_outlives_the_sweep_is_refused_by_pid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process still alive when the sweep's bound runs out (in the kernel, one stuck in
    an uninterruptible sleep; here, one whose SIGKILLs are not sent) is refused by its
    pid, never passed over: the call does not return a result as if it were contained."""
    monkeypatch.setattr(runner, "_kill_proven", lambda pid, start: None)
    monkeypatch.setattr(runner, "_SWEEP_S", 0.5)
    with pytest.raises(BoundaryError) as caught:
        run_contained(_grandchild(True), tmp_path, timeout_s=30)
    pid = int((tmp_path / "gc.pid").read_text())
    try:
        assert caught.value.code is Code.UNRECONCILED_CONTAINMENT
        assert f"pid {pid}" in caught.value.detail and "0.5 s after SIGKILL" in caught.value.detail
        assert not _dead(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_the_environment_is_minimal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EFOLD_TEST_SECRET", "hunter2")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("EFOLD_LAUNCH_MARKER", raising=False)
    result = run_contained(_py("import json, os; print(json.dumps(dict(os.environ)))"),
                           tmp_path, timeout_s=30)
    env = json.loads(result.stdout)
    assert set(env) == {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
                        "TMPDIR", RUN_MARKER_VAR}
    assert env["HOME"] == str(tmp_path)
    # The call's own temporary directory, not the workspace, gone after the call.
    assert env["TMPDIR"] != str(tmp_path) and not os.path.exists(env["TMPDIR"])
    assert env["PATH"] == f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin"
    assert (env["LANG"], env["PYTHONDONTWRITEBYTECODE"], env["PYTHONHASHSEED"]) == (
        "C.UTF-8", "1", "0")
    assert "hunter2" not in result.stdout and "sk-test" not in result.stdout


def test_the_launch_marker_is_passed_on_for_the_controller(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EFOLD_LAUNCH_MARKER", "0" * 32)
    result = run_contained(_py("import os; print(os.environ['EFOLD_LAUNCH_MARKER'])"),
                           tmp_path, timeout_s=30)
    assert result.stdout == "0" * 32 + "\n"


def test_output_keeps_only_the_tail(tmp_path: Path) -> None:
    result = run_contained(_py("print('a' * 100000); print('END')"), tmp_path,
                           timeout_s=30, output_limit=100)
    assert result.truncated and result.exit_code == 0
    assert len(result.stdout.encode()) == 100 and result.stdout.endswith("a\nEND\n")


def test_a_cut_multibyte_character_is_replaced(tmp_path: Path) -> None:
    result = run_contained(_py("import sys; sys.stdout.buffer.write('\u00e9'.encode() * 3)"),
                           tmp_path, timeout_s=30, output_limit=5)
    assert result.stdout == "\ufffd\u00e9\u00e9"


def test_bad_calls_are_efold_bugs(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        run_contained([], tmp_path, timeout_s=1)
    with pytest.raises(ValueError):
        run_contained(["python"], tmp_path, timeout_s=0)
    with pytest.raises(NotADirectoryError):
        run_contained(["python"], tmp_path / "missing", timeout_s=1)
