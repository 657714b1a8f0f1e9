"""Ctrl-C after ``pilot`` claimed its run directory but before the run's own handling
was up: the message says what the directory holds. Without a journal nothing was
launched or recorded (every launch is journaled first), so it says the directory can be
removed, where ``recover`` would only refuse it (``run_not_found``); with one, it points
to ``recover``."""

from __future__ import annotations

import json
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
