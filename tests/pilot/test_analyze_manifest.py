"""``analyze --manifest``: a comparison reproducible from files. A manifest names the run
directories, the registration each must be, the role standing for each arm and the
tasks; real faux runs are collected through it, within one run and across two runs
made apart, and every refusal names what is wrong."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from efold.report.comparison_set import decode_comparison

CAMPAIGN = """\
name = "{name}"
suite = "original"
roles = {roles}
probe_limit = 6
cap_usd = "60.00"

[boundary]
cases = ["B01", "B05"]
"""


def efold(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def _pilot(root: Path, name: str, roles: str) -> tuple[Path, str]:
    (root / f"{name}.toml").write_text(CAMPAIGN.format(name=name, roles=roles))
    done = efold("pilot", "--faux", "--campaign", f"{name}.toml", "--run-dir", name,
                 "--no-progress", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads((root / name / "plan.json").read_bytes())
    return root / name, plan["registration_sha256"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("manifest")
    both, both_sha = _pilot(root, "both", '["native", "cold-rebuild"]')
    _, apart_sha = _pilot(root, "apart", '["compaction"]')
    tasks = sorted({json.loads(p.read_bytes())["trace_id"] + "/"
                    + json.loads(p.read_bytes())["probe_id"]
                    for p in (both / "receipts").glob("*.json")
                    if "boundary" not in json.loads(p.read_bytes())}
                   | {"B01-explicit-api-constraint", "B05-pending-obligation"})
    return {"root": root, "both_sha": both_sha, "apart_sha": apart_sha, "tasks": tasks}


def _manifest(root: Path, name: str, runs: list[dict[str, str]], tasks: list[str],
              **extra: Any) -> Path:
    path = root / f"{name}.json"
    path.write_text(json.dumps({"schema": "efold-comparison-manifest-v1",
                                "arms": [r["arm"] for r in runs], "runs": runs,
                                "tasks": tasks, **extra}))
    return path


def test_a_manifest_pairs_two_roles_of_one_run_as_the_run_itself_does(
        runs: dict[str, Any]) -> None:
    root, tasks = runs["root"], runs["tasks"]
    assert len(tasks) == 26
    path = _manifest(root, "one", [
        {"arm": "native", "run": "both", "registration_sha256": runs["both_sha"],
         "role": "native"},
        {"arm": "cold", "run": "both", "registration_sha256": runs["both_sha"],
         "role": "cold-rebuild"}], [*tasks, "orig-nowhere/p01"],
        representative_task_set=True)
    done = efold("analyze", "--manifest", "one.json", "--write", "one-set.json", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    # The task the runs never asked is named, not filled in.
    assert ("from one.json: 26 pairs over 26 of its 27 tasks; no scored pair for 1: "
            "orig-nowhere/p01") in done.stdout
    assert "verdict: comparison_ready (26 paired tasks" in done.stdout
    data = decode_comparison((root / "one-set.json").read_bytes())
    assert data.arms == ["native", "cold"] and data.representative_task_set
    assert data.provenance.source == "efold-manifest"
    assert data.provenance.manifest_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert data.provenance.registration_sha256 == runs["both_sha"]
    # The same pairs --run makes from the run, under the manifest's arm names.
    run_set = efold("analyze", "--run", "both", "--arms", "native,cold-rebuild", "--write",
                    "run-set.json", cwd=root)
    assert run_set.returncode == 0, run_set.stderr
    by_run = decode_comparison((root / "run-set.json").read_bytes())
    renamed = [(r.task, r.repeat, {"cold-rebuild": "cold"}.get(r.arm, r.arm), r.accepted,
                r.tokens) for r in by_run.runs]
    assert sorted(renamed) == sorted((r.task, r.repeat, r.arm, r.accepted, r.tokens)
                                     for r in data.runs)


def test_a_manifest_pairs_two_runs_made_apart(runs: dict[str, Any]) -> None:
    root = runs["root"]
    _manifest(root, "apart", [
        {"arm": "native", "run": "both", "registration_sha256": runs["both_sha"],
         "role": "native"},
        {"arm": "compaction", "run": str(root / "apart"),
         "registration_sha256": runs["apart_sha"], "role": "compaction"}], runs["tasks"])
    done = efold("analyze", "--manifest", "apart.json", "--json", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    analysis = json.loads(done.stdout)
    assert analysis["paired_tasks"] == 26 and analysis["candidate"] == "compaction"
    # Two registrations: the manifest binds them, no single one is claimed.
    assert analysis["provenance"].get("registration_sha256") is None
    assert analysis["provenance"]["source"] == "efold-manifest"


@pytest.mark.parametrize(("change", "words"), [
    (lambda m: m["runs"][1].update(registration_sha256="0" * 64), "not the manifest's"),
    (lambda m: m["runs"][1].update(role="pack"), "has no role 'pack'"),
    (lambda m: m["runs"][1].update(run="nowhere"), "not a run directory"),
    (lambda m: m.update(tasks=m["tasks"] + m["tasks"][:1]), "names a task twice"),
    (lambda m: m["runs"][1].update(arm="native"), "one run entry per arm"),
    (lambda m: m.update(prompt="secret"), "unknown field"),
    (lambda m: m.update(minimum_tasks=5), "minimum_tasks"),
])
def test_a_manifest_that_does_not_hold_is_refused(runs: dict[str, Any], change: Any,
                                                  words: str) -> None:
    root = runs["root"]
    manifest = {"schema": "efold-comparison-manifest-v1", "arms": ["native", "cold"],
                "runs": [{"arm": "native", "run": "both",
                          "registration_sha256": runs["both_sha"], "role": "native"},
                         {"arm": "cold", "run": "both",
                          "registration_sha256": runs["both_sha"], "role": "cold-rebuild"}],
                "tasks": runs["tasks"]}
    change(manifest)
    (root / "bad.json").write_text(json.dumps(manifest))
    done = efold("analyze", "--manifest", "bad.json", cwd=root)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("refused: comparison_invalid"), done.stderr
    assert words in done.stderr
