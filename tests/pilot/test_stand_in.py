"""Where efold's deterministic summariser answered a fold's summary requests (no
summariser model in the campaign), the reports and the terminal say so at the top for
those roles, and nowhere else: not for a role whose fold asks nothing, and not where a
summariser model wrote the summaries (``test_local_route``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from efold.report.results import STAND_IN_SUMMARISER

CLI = [sys.executable, "-m", "efold.controller"]
SAID = "Summaries by the stand-in for"


def _faux(tmp_path: Path, roles: str) -> tuple[str, Path]:
    done = subprocess.run([*CLI, "pilot", "--faux", "--roles", roles, "--limit", "1",
                           "--runs", str(tmp_path / roles), "--json", "--no-progress"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, Path(json.loads(done.stdout.splitlines()[-1])["run"])


def test_the_stand_in_is_named_for_the_roles_it_wrote_for(tmp_path: Path) -> None:
    out, run = _faux(tmp_path, "native,compaction")
    line = f"{SAID} compaction:"
    assert line in out
    summary = (run / "summary.md").read_text()
    head = summary.split("## ")[0]  # the banner, before the first section
    assert line in head, head
    assert line in (run / "report.html").read_text()
    results = json.loads((run / "results.json").read_bytes())
    assert results["run"]["summarisers"] == {"compaction": STAND_IN_SUMMARISER}


def test_nothing_is_said_where_no_fold_asks_for_a_summary(tmp_path: Path) -> None:
    out, run = _faux(tmp_path, "native,pack")
    for text in (out, (run / "summary.md").read_text(), (run / "report.html").read_text()):
        assert "stand-in" not in text
