"""Ctrl-C after ``pilot`` claimed its run directory but before the run's own handling
was up: the message says what the directory holds. Without a journal nothing was
launched or recorded (every launch is journaled first), so it says the directory can be
removed, where ``recover`` would only refuse it (``run_not_found``); with one, it points
to ``recover``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from efold.controller.cli import main
from efold.controller.commands import pilot as pilot_command
from efold.controller.rundirs.recovery import observe
from efold.controller.rundirs.run_index import not_a_run
from efold.controller.rundirs.suggest import suggest
from efold.errors import interrupted_by
from efold.registry.journal import JOURNAL_NAME, JournalWriter
from efold.registry.lease import acquire_lease


@pytest.mark.parametrize("journal", [False, True])
@pytest.mark.parametrize("as_json", [False, True])
def test_the_message_says_what_an_early_interruption_left(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, journal: bool, as_json: bool) -> None:
    run = tmp_path / "run"

    def interrupted(*args: object, **kwargs: object) -> None:
        if journal:
            (run / JOURNAL_NAME).touch()
        raise KeyboardInterrupt

    monkeypatch.setattr(pilot_command, "run_with_progress", interrupted)
    done = CliRunner().invoke(main, ["pilot", "--faux", "--run-dir", str(run),
                                     "--launcher", "spawn"] + (["--json"] if as_json else []),
                              terminal_width=400)
    assert done.exit_code == 130, done.output
    lines = done.output.splitlines()
    if as_json:  # --json ends the output with its line, whatever the outcome
        assert json.loads(lines.pop()) == {"run": str(run) if journal else None,
                                           "status": "interrupted", "code": None,
                                           "signal": 2}
    said = lines[-1]
    if journal:
        assert said == (f"interrupted: {run} is incomplete; `efold-controller recover "
                        f"{run}` shows what it left")
        assert run.is_dir()
    else:  # the claim is undone: nothing is left to remove by hand
        assert said == (f"interrupted: nothing was recorded or launched in {run}, so it "
                        "was removed")
        assert not os.path.lexists(run)


@pytest.mark.parametrize("delay", [0.1, 0.2, 0.4])
def test_pilot_json_interrupted_before_it_claims_a_run_still_ends_with_its_line(
        tmp_path: Path, delay: float) -> None:
    """A real Ctrl-C in the command's first moments (its imports, its registration, its
    claim): no run was claimed, or the claim was undone, and the JSON line still ends
    the output, with ``run`` null."""
    child = subprocess.Popen(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--json",
         "--no-progress", "--runs", str(tmp_path / "runs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    if child.returncode != 130:  # -2: before the interpreter's own handler was up
        pytest.skip(f"the interruption came before Python's handler (exit {child.returncode})")
    line = json.loads(out.splitlines()[-1])
    if line["run"] is None:  # none claimed yet, or one claimed and undone
        assert line == {"run": None, "status": "interrupted", "code": None, "signal": 2}
        said = err.splitlines()[-1]
        assert said == "interrupted" or (said.startswith("interrupted: nothing was recorded")
                                         and said.endswith("so it was removed")), said
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    else:  # claimed in the meantime: the run's own line, which names it
        assert line["status"] == "interrupted"


def test_a_claimed_directory_without_a_journal_says_whether_its_controller_lives(
        tmp_path: Path) -> None:
    """``recover`` on a directory a controller claimed but has no journal in: while the
    claim's controller lives it is starting (never "can be removed"); once it is gone,
    nothing was launched for it and it can be removed."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    lease = acquire_lease(run)
    try:
        assert not_a_run(run) == ("no journal.sqlite yet: the controller that claimed it is "
                                  "live and still starting")
    finally:
        lease.release()
    done = CliRunner().invoke(main, ["recover", str(run)])
    assert done.exit_code == 2
    assert ("nothing was launched for it; it can be removed (`efold-controller prune "
            f"{tmp_path} --run {run}`)") in done.output


def test_a_run_stopped_before_it_launched_anything_is_reconciled_as_such(
        tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    with acquire_lease(run) as lease:
        JournalWriter(run, lease).close()
    report = observe(run)
    assert report.reconciled and report.launches == []
    assert report.verdict.endswith("(nothing was launched for it)")
    said = CliRunner().invoke(main, ["recover", str(run)])
    assert said.exit_code == 0
    assert "containment: none recorded (nothing was launched)" in said.output.splitlines()


@pytest.mark.parametrize(("path", "said"), [
    ("runs/a b", "efold-controller reap 'runs/a b'"),
    ("-h", "efold-controller reap ./-h"),
    ("it's", "efold-controller reap 'it'\"'\"'s'"),
    ("/abs/run", "efold-controller reap /abs/run"),
])
def test_a_suggested_command_pastes_as_it_reads(path: str, said: str) -> None:
    assert suggest("reap", path) == said


_INTERRUPTED_IMPORT = """
import builtins, sys
sys.argv = ["efold-controller", *sys.argv[1:]]
real = builtins.__import__
def interrupting(name, globals=None, locals=None, fromlist=(), level=0):
    if name == "efold.controller" and "cli" in (fromlist or ()) \\
            and "efold.controller.cli" not in sys.modules \\
            and not getattr(builtins, "interrupted", False):
        builtins.interrupted = True
        raise KeyboardInterrupt  # a Ctrl-C while the program's modules are imported
    return real(name, globals, locals, fromlist, level)
builtins.__import__ = interrupting
from efold.controller.__main__ import run
run()
"""


@pytest.mark.parametrize(("args", "line"), [
    (["pilot", "--faux", "--json"], True),
    (["pilot", "--faux"], False),
    (["runs", "--json"], False),
])
def test_a_ctrl_c_while_the_program_starts_is_said_as_any_early_one(
        tmp_path: Path, args: list[str], line: bool) -> None:
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT, *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"  # no traceback
    if line:
        assert json.loads(done.stdout) == {"run": None, "status": "interrupted",
                                           "code": None, "signal": 2}
    else:
        assert done.stdout == ""


@pytest.mark.parametrize(("args", "line"), [
    (["pilot", "--faux", "--json"], True),
    (["pilot", "--json", "--run-dir", "x"], True),
    (["pilot", "--run-dir", "--json"], False),  # the run directory's name
    (["pilot", "--campaign", "--json", "--faux"], False),
    (["pilot", "--faux", "--", "--json"], False),
    (["pilot", "--run-dir", "--", "--json"], True),  # a run directory named "--"
    (["runs", "--json"], False),
])
def test_the_closing_line_reads_json_only_as_the_option_itself(args: list[str],
                                                              line: bool) -> None:
    from efold.controller.cli import _closing_json_line

    assert (_closing_json_line(args) is not None) is line


_WRAPPED_INTERRUPT = """
import sys
sys.argv = ["efold-controller", *sys.argv[1:]]
from efold.controller import __main__ as program, cli
real = cli.load_command
calls = []
def load(name):
    calls.append(name)
    if len(calls) == 1:  # as a Ctrl-C inside a class's __set_name__ comes out
        raise RuntimeError("Error calling __set_name__") from KeyboardInterrupt()
    return real(name)
cli.load_command = load
program.run()
"""


def test_a_ctrl_c_wrapped_by_an_import_is_an_interruption(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _WRAPPED_INTERRUPT, "pilot", "--faux",
                           "--json"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"
    assert json.loads(done.stdout)["status"] == "interrupted"


def test_interrupted_by_follows_causes_and_contexts() -> None:
    assert interrupted_by(KeyboardInterrupt())
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert interrupted_by(outer)
    assert not interrupted_by(RuntimeError("a bug"))
    looped = ValueError("a")
    looped.__context__ = ValueError("b")
    looped.__context__.__context__ = looped
    assert not interrupted_by(looped)
