"""``compare RUN_A RUN_B``, on real faux runs of the small campaign: ``base``; ``changed``
(two repeats, and its ``pack`` role on the cold-rebuild arm); ``other`` (a campaign with
none of ``base``'s roles, so no slot in common); ``capped``, the newest (its cap fits one
hold, whose child is killed after admission)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from efold_pilot_kit import faulty_program, small_registration

from efold.controller.cli import main
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.report.numbers import brief

CHANGED = 'repeats = 2\n[role.pack]\narm = "cold-rebuild"\n'


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("compare")
    runs = base / "efold-runs"
    runs.mkdir()
    # A stop here other than the capped run's is no compare bug: most likely another
    # edit of the sources mid-run (worker_digest_mismatch); rerun.
    reg, raw = small_registration()
    assert run_pilot(reg, raw, claim_run_dir(runs / "base")).stop_code is None
    reg, raw = small_registration(extra=CHANGED)
    assert run_pilot(reg, raw, claim_run_dir(runs / "changed")).stop_code is None
    reg, raw = small_registration(roles='["cold-rebuild"]')
    run_pilot(reg, raw, claim_run_dir(runs / "other"))  # only its plan matters
    reg, raw = small_registration(cap="5.00")  # the newest run
    run_pilot(reg, raw, claim_run_dir(runs / "capped"),
              program=faulty_program("kill-after-admit", base / "marker"))
    return runs


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), terminal_width=200)


def compare_json(a: Path, b: Path) -> Any:
    done = invoke("compare", str(a), str(b), "--json")
    assert done.exit_code == 0, done.output
    assert done.stdout.count("\n") == 1  # one document
    return json.loads(done.stdout)


def snapshot(run: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in run.rglob("*")}


def test_a_run_against_itself_changes_nothing(runs: Path) -> None:
    before = snapshot(runs / "base")
    c = compare_json(runs / "base", runs / "base")
    assert snapshot(runs / "base") == before  # read-only
    changed = c["changed"]
    assert not any(changed[k] for k in ("registration", "build", "reader", "campaign",
                                        "schedule", "repeats", "roles", "status"))
    assert changed["digests"] == []
    assert c["slots"] == {"common": 16, "only_a": 0, "only_b": 0}
    assert c["a_right_b_wrong"] == c["a_wrong_b_right"] == c["status_changed"] == []


def test_another_arm_and_more_repeats_flip_slots_and_say_what_changed(runs: Path) -> None:
    c = compare_json(runs / "base", runs / "changed")
    changed = c["changed"]
    assert changed["registration"] and changed["schedule"] and changed["repeats"]
    assert changed["roles"] and "folds" in changed["digests"]
    assert not changed["reader"] and not changed["campaign"]
    assert c["slots"] == {"common": 16, "only_a": 0, "only_b": 16}
    a, b = c["a"], c["b"]
    assert (a["repeats"], b["repeats"]) == (1, 2)
    assert b["arms"] == {"native": "native", "pack": "cold-rebuild"}
    # Same code in CI; another edit of the sources between the two runs changes it.
    assert changed["build"] is (a["digests"]["build"] != b["digests"]["build"])
    down = c["a_right_b_wrong"]
    assert down  # the cold-rebuild arm keeps less than pack
    assert {s["role"] for s in down} == {"pack"} and c["a_wrong_b_right"] == []
    roles = {r["role"]: r["overall"] for r in c["roles"]}
    native, pack = roles["native"], roles["pack"]
    assert native["paired"]["b"] == native["paired"]["c"] == 0
    assert pack["paired"]["b"] == len(down) and pack["paired"]["pairs"] == 8
    assert pack["accuracy_a"]["successes"] - pack["accuracy_b"]["successes"] == len(down)
    assert pack["paired"]["delta_pp"] == pytest.approx(-100.0 * len(down) / 8)
    # B against A: the same slots flip the other way.
    back = compare_json(runs / "changed", runs / "base")
    assert [s["slot"] for s in back["a_wrong_b_right"]] == [s["slot"] for s in down]
    assert back["slots"] == {"common": 16, "only_a": 16, "only_b": 0}


def test_the_text_fits_100_columns_and_names_the_changes(runs: Path) -> None:
    done = invoke("compare", str(runs / "base"), str(runs / "changed"))
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert lines[:2] == [f"A: {runs / 'base'}", f"B: {runs / 'changed'}"]
    assert any(line.startswith("  repeats         differs  A 1  B 2") for line in lines)
    assert "  roles           differs  A native, pack  B native, pack (cold-rebuild)" in lines
    assert any(line.startswith(("  build digest    same ", "  build digest    differs "))
               for line in lines)
    assert "  slots           16 common (compared), 0 only in A, 16 only in B" in lines
    pack = next(line for line in lines if line.startswith("pack "))
    assert "8 (100.0%)" in pack
    spend = lines[lines.index("spend (the journal's, every caller)") + 1:]
    assert len(spend) == 2 and all(s.endswith(" cap (faux units, no money spent)")
                                   for s in spend)
    for side, line in zip(("base", "changed"), spend, strict=True):
        money = json.loads((runs / side / "results.json").read_bytes())["money"]
        assert line.startswith(f"  {'AB'[side == 'changed']}  settled "
                               f"{brief(money['settled']['usd'])} + retained "
                               f"{brief(money['retained']['usd'])} of a ")


def test_status_changes_are_listed(runs: Path) -> None:
    c = compare_json(runs / "base", runs / "capped")
    b = c["b"]
    assert (b["verdict"], b["stop"]) == ("stopped", "not_admitted_cap")
    changed = c["changed"]
    assert changed["status"] and not changed["schedule"]
    statuses = {(s["status_a"], s["status_b"]) for s in c["status_changed"]}
    assert ("completed", "incomplete") in statuses and ("completed", "unadmitted") in statuses
    assert len(c["status_changed"]) == 16
    text = invoke("compare", str(runs / "base"), str(runs / "capped")).stdout.splitlines()
    assert "status changed: 16" in text
    assert any(line.endswith("  completed -> incomplete") for line in text)
    assert "  status          differs  A complete  B stopped (not_admitted_cap)" in text


def test_latest_takes_the_newest_run_as_b(runs: Path) -> None:
    done = invoke("compare", str(runs / "base"), "--latest", "--root", str(runs), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["b"]["run"] == str(runs / "capped")
    both = invoke("compare", str(runs / "base"), str(runs / "other"), "--latest")
    assert both.exit_code == 2 and "exclusive" in both.output


def test_no_common_slot_and_a_non_run_refuse(runs: Path, tmp_path: Path) -> None:
    done = invoke("compare", str(runs / "base"), str(runs / "other"))
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.startswith("refused: compare_no_common_slots (")
    done = invoke("compare", str(tmp_path), str(runs / "base"))
    assert done.exit_code == 2 and done.stderr.startswith("refused: run_not_found (")
    done = invoke("compare", str(runs / "base"))
    assert done.exit_code == 2 and "give RUN, or --latest" in done.output


def test_help_states_the_exit_statuses() -> None:
    done = invoke("compare", "--help")
    assert done.exit_code == 0
    assert "0  compared" in done.output and "compare_no_common_slots" in done.output
