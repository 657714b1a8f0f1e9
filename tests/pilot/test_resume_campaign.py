"""The bundled resume comparison (``--campaign resume``): certification's two
continuation-QA repositories as boundary cases, run for real through the pilot (prep
children fold, a fresh probe child per slot resumes from the snapshot alone, the
controller's oracles judge), offline with the faux agent.

The cases are the continuation tasks' own repositories and plans, so the comparison and
``certify`` measure the same handoff; the compaction arm's summary cannot carry a plan
line of several KiB, the store arm recalls it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from efold.boundary.case import load_cases
from efold.boundary.suite import bundled_cases_root
from efold.certify.continuation import TASKS
from efold.controller.campaigns.campaign import bundled_campaign


def test_the_cases_are_the_continuation_tasks() -> None:
    campaign, _ = bundled_campaign("resume")
    assert [r.name for r in campaign.roles] == ["native", "compaction", "cold-rebuild"]
    assert campaign.probe_limit == 0
    assert campaign.boundary is not None
    cases = {c.id: c for c in load_cases(bundled_cases_root())}
    for name, task in zip(campaign.boundary.cases, TASKS, strict=True):
        case = cases[name]
        fixture = {p.relative_to(case.workspace).as_posix(): p.read_text(encoding="utf-8")
                   for p in case.workspace.rglob("*") if p.is_file()}
        assert fixture == task.initial
        plan = next(e for e in case.prefix if e.id == case.sidecar.source.critical[0])
        assert json.loads(plan.content.split("\n", 1)[1]) == task.operations


def test_the_bundled_resume_campaign_runs_offline(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "efold.controller", "pilot", "--faux",
                           "--campaign", "resume", "--quiet"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results_path = next(tmp_path.glob("efold-runs/resume-*/results.json"))
    results = json.loads(results_path.read_text())
    passed = {row["arm"]: (row["passed"]["successes"], row["passed"]["trials"])
              for row in results["boundary"]["arms"]}
    # Recall-only: what each checkpoint holds. The plan's operations sit in the middle
    # of a long result, which a summary's head and tail and the cold window both lose.
    assert passed == {"native": (2, 2), "compaction": (0, 2), "cold-rebuild": (0, 2)}
    assert {i["failing_arm"] for i in results["boundary"]["incidents"]} == {
        "compaction", "cold-rebuild"}
    assert results["spend"]["usage_known"] and results["spend"]["admitted_requests"] > 0
