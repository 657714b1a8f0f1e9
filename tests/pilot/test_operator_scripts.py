"""The operator script runs register -> plan -> preflight -> pilot -> aggregate and fails
closed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from efold_pilot_kit import SMALL

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "operator" / "run-campaign.sh"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_operator_flow_runs_a_small_campaign(tmp_path: Path) -> None:
    campaign = tmp_path / "small.toml"
    campaign.write_text(SMALL.format(cap="60.00"))
    out = tmp_path / "out"
    done = _run(str(campaign), str(out), "--faux")
    assert done.returncode == 0, done.stdout + done.stderr
    results = [line.split(": ", 1)[1] for line in done.stdout.splitlines()
               if line.startswith("results: ")]
    assert results and Path(results[0]).is_file()
    assert (out / "preflight.json").stat().st_size > 0
    # The pilot's output was streamed through and kept: the run line, then the summary.
    log = (out / "pilot.log").read_text()
    assert log.startswith("run: ") and "results: " in log and log in done.stdout
    header = SCRIPT.read_text().split("set -euo pipefail")[0]
    for step in ("register", "plan", "preflight", "pilot", "aggregate"):
        assert f"== {step}" not in header and f" {step} " in header
        assert f"/5 {step}" in done.stdout
    assert "| native |" in (out / "aggregate.md").read_text()


def test_operator_flow_fails_closed(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nsuite = "nowhere"\nroles = ["native"]\n')
    failed = _run(str(bad), str(tmp_path / "out"), "--faux")
    assert failed.returncode != 0 and "campaign_invalid" in failed.stderr
    # register failed: the output directory the script made is gone, not left empty.
    assert not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    refused = _run(str(bad), str(tmp_path / "taken"), "--faux")
    assert refused.returncode == 2 and "already exists" in refused.stderr
    assert _run(str(bad), str(tmp_path / "x")).returncode == 2  # --faux is required
