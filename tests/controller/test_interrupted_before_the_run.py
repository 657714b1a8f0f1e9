"""Ctrl-C after ``pilot`` claimed its run directory but before the run's own handling
was up: the message says what the directory holds. Without a journal nothing was
launched or recorded (every launch is journaled first), so it says the directory can be
removed, where ``recover`` would only refuse it (``run_not_found``); with one, it points
to ``recover``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from efold.controller.cli import main
from efold.controller.commands import pilot as pilot_command
from efold.registry.journal import JOURNAL_NAME


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
        assert json.loads(lines.pop()) == {"run": str(run), "status": "interrupted",
                                           "code": None, "signal": 2}
    said = lines[-1]
    if journal:
        assert said == (f"interrupted: {run} is incomplete; `efold-controller recover "
                        f"{run}` shows what it left")
    else:
        assert said == (f"interrupted: {run} was claimed but nothing was recorded or "
                        "launched in it (it has no journal); it can be removed")
        assert CliRunner().invoke(main, ["recover", str(run)]).exit_code == 2


@pytest.mark.parametrize("delay", [0.1, 0.2, 0.4])
def test_pilot_json_interrupted_before_it_claims_a_run_still_ends_with_its_line(
        tmp_path: Path, delay: float) -> None:
    """A real Ctrl-C in the command's first moments (its imports, its registration): no
    run was claimed, and the JSON line still ends the output, with ``run`` null."""
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
    if line["run"] is None:
        assert line == {"run": None, "status": "interrupted", "code": None, "signal": 2}
        assert err.splitlines()[-1] == "interrupted"
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    else:  # claimed in the meantime: the run's own line, which names it
        assert line["status"] == "interrupted"
