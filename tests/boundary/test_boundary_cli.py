"""``efold-controller boundary validate | lock | show``, run as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from efold.controller.cli import main
from efold.controller.commands import boundary as boundary_command
from tests.boundary.conftest import CASE_ID, MakeCase, sidecar_data, write_sidecar


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", "boundary",
                           *map(str, args)], capture_output=True, text=True, timeout=60)


def test_validate_lock_validate_then_an_edit_is_refused(make_case: MakeCase,
                                                        case_root: Path) -> None:
    case_dir = make_case()
    make_case(lambda d: d.update(id="X01-explore", tier="exploratory"))
    first = _run("validate", case_root)
    assert first.returncode == 2, first.stderr
    assert f"{CASE_ID}" in first.stdout and "boundary_lock_stale" in first.stdout
    assert "0 of 2 valid and locked" in first.stdout

    locked = _run("lock", case_root)
    assert locked.returncode == 0, locked.stderr
    assert f"added     {CASE_ID}" in locked.stdout and "2 cases locked" in locked.stdout

    ok = _run("validate", case_root, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] is True
    assert [(c["id"], c["version"], c["tier"], c["oracles"]) for c in report["cases"]] == [
        (CASE_ID, 1, "hard", 3), ("X01-explore", 1, "exploratory", 3)]

    data = sidecar_data()
    data["oracle"]["success"].pop(1)
    write_sidecar(case_dir, data)
    changed = _run("validate", case_root)
    assert changed.returncode == 2
    line = next(li for li in changed.stdout.splitlines() if li.startswith(CASE_ID))
    assert "v1" in line and "2 oracles" in line and "boundary_case_changed" in line
    assert any(li.startswith("X01-explore") and li.endswith("OK")
               for li in changed.stdout.splitlines())
    refused = _run("lock", case_root)
    assert refused.returncode == 2
    assert refused.stderr.startswith("refused: boundary_case_changed (")


def test_validate_reports_an_invalid_case_with_its_field(make_case: MakeCase,
                                                         case_root: Path) -> None:
    make_case(lambda d: d["continuation"].update(maxActions=99), name="broken")
    done = _run("validate", case_root, "--json")
    assert done.returncode == 2
    (line,) = json.loads(done.stdout)["cases"]
    assert line["id"] == "broken" and line["code"] == "boundary_case_invalid"
    assert line["detail"].endswith("99 is outside 1-64 - at `$.continuation.maxActions`")
    refused = _run("lock", case_root)
    assert refused.returncode == 2 and "boundary_case_invalid" in refused.stderr
    assert not (case_root / "boundary.lock").exists()


def test_show_prints_the_summary_and_the_fixture_identity(make_case: MakeCase) -> None:
    case_dir = make_case()
    text = _run("show", case_dir)
    assert text.returncode == 0, text.stderr
    assert f"case        {CASE_ID}  v1  (hard, coding)" in text.stdout
    assert "oracles     3: tests-pass, forbidden-path-unchanged, file-equals" in text.stdout
    as_json = _run("show", case_dir, "--json")
    summary = json.loads(as_json.stdout)
    assert summary["identity"]["case_id"] == CASE_ID
    assert set(summary["identity"]["oracle_files"]) == {
        "workspace/src/shop/api.py", "workspace/src/shop/pricing.py",
        "workspace.expected/src/shop/pricing.py"}
    missing = _run("show", case_dir.parent / "nope", "--json")
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["refused"] == "boundary_case_invalid"


def test_a_missing_default_root_is_said_clearly(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boundary_command, "bundled_cases_root", lambda: tmp_path / "cases")
    for args in (["validate"], ["lock"]):
        done = CliRunner().invoke(main, ["boundary", *args])
        assert done.exit_code == 2
        assert "the bundled cases directory does not exist yet" in done.output


def test_validate_refuses_a_required_recall_case_whose_answer_is_in_view(
        make_case: MakeCase, case_root: Path) -> None:
    """The answer of a required-recall case must be absent from the checkpoint surface:
    here it is in the last owner turn, which every fold that carries the work on keeps,
    so no arm would need recall and the case cannot measure it."""
    make_case(lambda d: d.update(id="X11-visible-answer", tier="exploratory",
                                 recall={"required": True,
                                         "answer": "bulk threshold of 20"}))
    make_case(lambda d: d.update(id="X12-hidden-answer", tier="exploratory",
                                 recall={"required": True, "answer": "BULK-ANSWER-NOT-SAID"}))
    assert _run("lock", case_root).returncode == 0
    done = _run("validate", case_root, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = {c["id"]: c for c in json.loads(done.stdout)["cases"]}
    visible = lines["X11-visible-answer"]
    assert visible["code"] == "boundary_case_invalid"
    assert "($.recall.answer) is visible in the cold boundary's checkpoint" in visible["detail"]
    # An answer the session never shows is not refused by this rule.
    assert "code" not in lines["X12-hidden-answer"]
    # Nothing is run, or paid for, on such a case: boundary run and register refuse it.
    ran = _run("run", "--faux", case_root)
    assert ran.returncode == 2 and "refused: boundary_case_invalid" in ran.stderr
    assert "X11-visible-answer" in ran.stderr
    campaign = case_root.parent / "c.toml"
    campaign.write_text(f'name = "c"\nsuite = "original"\nroles = ["native"]\n'
                        f'probe_limit = 0\ncap_usd = "10.00"\n[boundary]\n'
                        f'root = "{case_root}"\ncases = ["X11"]\n')
    registered = subprocess.run([sys.executable, "-m", "efold.controller", "register",
                                 str(campaign), "--output", str(case_root.parent / "reg")],
                                capture_output=True, text=True, timeout=120)
    assert registered.returncode == 2, registered.stdout + registered.stderr
    assert "boundary_case_invalid" in registered.stderr and "X11" in registered.stderr
    assert not (case_root.parent / "reg").exists()
