"""``analyze --run``: a real faux run's receipts, paired into a comparison set, written,
read back and analyzed, every run traced to the receipt it came from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec

from efold.protocol.records import Receipt
from efold.report.comparison_set import decode_comparison

CAMPAIGN = """\
name = "paired"
suite = "original"
roles = ["native", "cold-rebuild"]
probe_limit = 6
cap_usd = "60.00"

[boundary]
cases = ["B01", "B05"]  # no required-recall case: every pair is scored

[reader]
provider = "faux"
model = "faux-extractive-v1"
api = "responses"
base_url = "faux://local"
effort = "low"
"""


def efold(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def test_a_runs_roles_are_paired_written_and_analyzed(tmp_path: Path) -> None:
    (tmp_path / "paired.toml").write_text(CAMPAIGN)
    pilot = efold("pilot", "--faux", "--campaign", "paired.toml", "--run-dir", "run",
                  "--no-progress", cwd=tmp_path)
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    done = efold("analyze", "--run", "run", "--arms", "native,cold-rebuild", "--write",
                 "set.json", "--attest-representative", cwd=tmp_path)
    # 4 traces x 6 probes + 2 cases = 26 paired tasks: past the gate of 20
    assert done.returncode == 0, done.stdout + done.stderr
    assert "26 pairs of native and cold-rebuild" in done.stdout
    assert "verdict: comparison_ready (26 paired tasks" in done.stdout
    assert "attested by the operator (not verified by efold)" in done.stdout

    data = decode_comparison((tmp_path / "set.json").read_bytes())
    assert data.arms == ["native", "cold-rebuild"] and data.representative_task_set
    assert data.provenance.faux is True and data.provenance.source == "efold-run"
    receipts = {(r.role, r.trace_id, r.probe_id): r for r in (
        msgspec.json.decode(p.read_bytes(), type=Receipt)
        for p in (tmp_path / "run" / "receipts").glob("*.json"))}
    assert len(data.runs) == len(receipts) == 52
    for entry in data.runs:
        if "/" in entry.task:
            trace, probe = entry.task.split("/")
            receipt = receipts[(entry.arm, trace, probe)]
            assert entry.checks_total == 1 and entry.unsupported_claims is not None
        else:
            receipt = next(r for (role, _, _), r in receipts.items()
                           if role == entry.arm and r.boundary is not None
                           and r.boundary.case == entry.task)
            assert receipt.boundary is not None
            assert entry.checks_total == sum(o.verdict != "not_applicable"
                                             for o in receipt.boundary.oracles)
            assert entry.unsupported_claims is None  # efold never scores an agent's prose
        assert entry.accepted is (receipt.correct is True)
        usage = receipt.spend.usage
        assert entry.tokens == usage.input + usage.output and entry.tokens > 0
        assert entry.latency_ms == receipt.elapsed_ms

    # The written set analyzes to the same figures as the run itself.
    again = efold("analyze", "set.json", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    analysis = json.loads(again.stdout)
    native, cold = analysis["arms"]
    assert native["accepted"]["successes"] == sum(
        r.correct is True for (role, _, _), r in receipts.items() if role == "native")
    assert cold["accepted"]["successes"] == sum(
        r.correct is True for (role, _, _), r in receipts.items() if role == "cold-rebuild")
    refused = efold("analyze", "--run", "run", "--arms", "native,nope", cwd=tmp_path)
    assert refused.returncode == 2 and "comparison_invalid" in refused.stderr
