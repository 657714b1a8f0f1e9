"""The report says how the run's folds ran isolated: ``status.fold_isolation`` in
``results.json`` (counts from the journal, as each prep child reported) and one status
line, which points at ``fold check`` when a fold ran without an isolation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import (
    compute_registration,
    load_registration,
    write_registration,
)
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir

SIMULATING_CHILD = Path(__file__).resolve().parent / "simulating_child.py"

CAMPAIGN = """
name = "isolation-report"
suite = "original"
roles = ["compaction", "pack"]
traces = ["orig-stage-hire", "orig-archive-scan"]
probe_limit = 1
cap_usd = "60.00"
"""


def _pilot(tmp: Path) -> Path:
    (tmp / "c.toml").write_text(CAMPAIGN)
    done = subprocess.run([sys.executable, "-m", "efold.controller", "pilot", "--faux",
                           "--campaign", str(tmp / "c.toml"), "--run-dir", str(tmp / "run"),
                           "--no-progress"], capture_output=True, text=True, timeout=300,
                          env=os.environ)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "run"


def test_every_checkpoint_isolated_is_counted_and_said(tmp_path: Path) -> None:
    run = _pilot(tmp_path)
    status = json.loads((run / "results.json").read_text())["status"]
    assert status["fold_isolation"] == {"checkpoints": 4, "isolated": 4,
                                        "network_isolated": 4, "writes_isolated": 4,
                                        "not_reported": 0}
    assert ("Fold isolation: 4 of 4 checkpoints built with no network and writes only in "
            "their slot\n") in (run / "summary.md").read_text().replace("- ", "")


def test_a_fold_without_an_isolation_is_counted_and_pointed_at(tmp_path: Path) -> None:
    # The children are this test's: a worker that sets the simulation in itself (the
    # child environment is an allowlist, so a variable of ours would not reach it).
    campaign = parse_campaign(CAMPAIGN)
    reg = compute_registration(campaign, CAMPAIGN.encode())
    path, sha = write_registration(reg, tmp_path / "registered")
    loaded = load_registration(str(path), sha)
    run = claim_run_dir(tmp_path / "run")
    run_pilot(loaded.registration, loaded.data, run,
              program=(sys.executable, "-I", str(SIMULATING_CHILD), "writes"))
    status = json.loads((run / "results.json").read_text())["status"]
    assert status["fold_isolation"] == {"checkpoints": 4, "isolated": 0,
                                        "network_isolated": 4, "writes_isolated": 0,
                                        "not_reported": 0}
    summary = (run / "summary.md").read_text()
    assert "Fold isolation: 0 of 4 checkpoints built with no network and writes only in " \
           "their slot (no network: 4, writes confined: 0, not reported: 0; " \
           "`efold-controller fold check` says why)" in summary
