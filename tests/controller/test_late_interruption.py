"""A Ctrl-C that arrives after the run ended, while ``pilot`` says how it ended (its
summary, its report paths, the ``--json`` line scripts read last): ignored with a word.
The run's reports are written and its processes contained by then; the signal once cut
those last lines short into a bare ``interrupted`` and status 130."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from efold.controller.cli import main
from efold.controller.commands import pilot as pilot_command
from efold.controller.rundirs.interrupt import ending

CAMPAIGN = """
name = "late"
suite = "original"
roles = ["native"]
cap_usd = "60.00"
probe_limit = 1
"""


def test_ending_ignores_sigint_and_sigterm_with_a_word() -> None:
    told: list[str] = []
    with ending(told.append):
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
    assert told == ["SIGINT ignored: the run is already ending",
                    "SIGTERM ignored: the run is already ending"]


def test_a_ctrl_c_while_pilot_says_how_its_run_ended_changes_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    said_end = pilot_command.end_of_run

    def interrupted(*args: object, **kwargs: object) -> int:
        signal.raise_signal(signal.SIGINT)  # as the summary starts
        return said_end(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pilot_command, "end_of_run", interrupted)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    done = CliRunner().invoke(main, ["pilot", "--faux", "--campaign",
                                     str(tmp_path / "campaign.toml"), "--run-dir",
                                     str(tmp_path / "run"), "--json", "--launcher", "spawn"],
                              terminal_width=200)
    assert done.exit_code == 0, done.output
    assert "efold: SIGINT ignored: the run is already ending" in done.output
    assert json.loads(done.output.splitlines()[-1])["status"] == "complete"
