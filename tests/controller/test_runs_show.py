"""``runs``, ``show`` and ``--latest``, on two real faux runs: one complete, one stopped
by its cap (the newer)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from efold_pilot_kit import faulty_program, small_registration

from efold.controller.cli import main
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.report.numbers import brief


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``efold-runs`` with ``older`` (complete), ``newer`` (stopped: not_admitted_cap)
    and ``notarun`` (a directory without a journal)."""
    base = tmp_path_factory.mktemp("runs")
    runs = base / "efold-runs"
    runs.mkdir()
    reg, raw = small_registration()
    run_pilot(reg, raw, claim_run_dir(runs / "older"))
    time.sleep(0.01)
    reg, raw = small_registration(cap="5.00")  # fits one hold: the next is refused
    run_pilot(reg, raw, claim_run_dir(runs / "newer"),
              program=faulty_program("kill-after-admit", base / "marker"))
    (runs / "notarun").mkdir()
    (runs / "notarun" / "plan.json").write_text("{}")
    return runs


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), terminal_width=200)


def snapshot(run: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in run.rglob("*")}


def test_runs_lists_newest_first_with_status_counts_and_spend(root: Path) -> None:
    done = invoke("runs", str(root))
    assert done.exit_code == 0, done.output
    header, newer, older = done.stdout.strip().splitlines()
    assert header.split()[:2] == ["RUN", "STARTED"]
    assert newer.startswith("newer ") and "stopped (not_admitted_cap)" in newer
    assert older.startswith("older ") and "complete" in older
    assert "16/16" in older and "16/16" in newer
    assert "faux units" in older and "USD" not in older
    money = json.loads(invoke("show", str(root / "older"), "--json").stdout)["run"]["money"]
    # the journal's amounts, not units: settled and retained against the cap
    assert (f" settled {brief(money['settled']['usd'])} + retained "
            f"{brief(money['retained']['usd'])} of a 60.00 cap (faux units, no money spent)"
            ) in older
    # ... and each role's exact accuracy, last.
    assert older.endswith("  native 100%, pack 100%")
    assert "notarun" not in done.stdout and "(dir mtime)" not in done.stdout


def test_runs_json_is_one_array(root: Path) -> None:
    done = invoke("runs", str(root), "--json")
    assert done.exit_code == 0, done.output
    entries = json.loads(done.stdout)
    assert [e["name"] for e in entries] == ["newer", "older"]
    newer, older = entries
    assert (newer["status"], newer["stop"]) == ("stopped", "not_admitted_cap")
    assert (older["status"], older["stop"], older["campaign"]) == ("complete", None, "small")
    assert older["started_from"] == "journal" and older["started"].endswith("Z")
    assert older["reader_faux"] is True and older["refused"] is None
    assert newer["started"] >= older["started"]


def test_an_unreadable_run_is_listed_with_its_refusal(tmp_path: Path, root: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    broken = runs / "broken"
    broken.mkdir()
    (broken / "journal.sqlite").write_bytes(b"not a database")
    os.symlink(root / "older", runs / "linked")  # never followed
    done = invoke("runs", str(runs), "--json")
    assert done.exit_code == 0, done.output
    [entry] = json.loads(done.stdout)
    assert entry["name"] == "broken" and entry["refused"] == "run_records_invalid"
    assert entry["started_from"] == "mtime" and entry["status"] is None
    text = invoke("runs", str(runs))
    assert text.exit_code == 0 and "refused: run_records_invalid" in text.stdout
    assert "(dir mtime)" in text.stdout


def test_an_empty_root_lists_nothing_and_says_so(tmp_path: Path) -> None:
    done = invoke("runs", str(tmp_path))
    assert done.exit_code == 0 and done.stdout.startswith(f"No runs under {tmp_path}")
    assert json.loads(invoke("runs", str(tmp_path), "--json").stdout) == []


def test_a_missing_or_file_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for root, why in ((tmp_path / "missing", "no such directory"),
                      (tmp_path / "file", "not a directory")):
        done = invoke("runs", str(root))
        assert done.exit_code == 2 and done.stdout == ""
        assert done.stderr.startswith("refused: runs_root_invalid (") and why in done.stderr


def test_runs_where_no_run_was_ever_made_says_so_and_exits_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The README: `runs` exits 0 also when there are none; a fresh directory has no
    # ./efold-runs at all.
    monkeypatch.chdir(tmp_path)
    done = invoke("runs")
    assert done.exit_code == 0 and done.stderr == ""
    assert done.stdout.startswith("No runs: efold-runs does not exist here yet")
    as_json = invoke("runs", "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == []
    # The same root named explicitly is the operator's own path: a typo is refused.
    named = invoke("runs", "efold-runs")
    assert named.exit_code == 2 and named.stderr.startswith("refused: runs_root_invalid")


def test_recover_prints_a_summary_and_each_launch_only_with_verbose(root: Path) -> None:
    summary = invoke("recover", str(root / "older"))
    verbose = invoke("recover", str(root / "older"), "--verbose")
    launches = json.loads(invoke("recover", str(root / "older"), "--json").stdout)["launches"]
    assert summary.exit_code == verbose.exit_code == 0 and len(launches) > 1
    lines = summary.stdout.splitlines()
    assert lines[0] == lines[-1] and lines[0].startswith("reconciled")
    assert f"launches: {len(launches)}  " in summary.stdout
    assert not [line for line in lines if line.startswith("  launch ")]
    detail = [line for line in verbose.stdout.splitlines() if line.startswith("  launch ")]
    assert len(detail) == len(launches)
    assert len(verbose.stdout.splitlines()) == len(lines) + len(launches)


def test_the_default_root_is_efold_runs(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root.parent)
    done = invoke("runs", "--json")
    assert [e["name"] for e in json.loads(done.stdout)] == ["newer", "older"]


def test_show_prints_status_counts_spend_and_report_paths(root: Path) -> None:
    run = root / "older"
    before = snapshot(run)
    done = invoke("show", str(run))
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0] == "status: Complete"
    assert "campaign: small (probe mode recall-only)" in lines
    assert any(line.startswith("slots: 16/16 visited") for line in lines)
    for name in ("results.json", "summary.md", "report.html"):
        assert f"{name}: {run / name}" in lines
    as_json = json.loads(invoke("show", str(run), "--json").stdout)
    assert as_json["run"]["status"] == "complete"
    assert as_json["reports"]["summary.md"] == str(run / "summary.md")
    assert snapshot(run) == before  # show writes nothing in RUN


def test_show_says_when_the_reports_are_absent(root: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(root / "newer", copy, symlinks=True)
    for name in ("results.json", "summary.md", "report.html"):
        (copy / name).unlink()
    before = snapshot(copy)
    done = invoke("show", str(copy))
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[0] == "status: Stopped: not_admitted_cap"
    assert "absent: results.json, summary.md, report.html" in done.stdout
    assert "aggregate RUN --output DIR" in done.stdout
    assert snapshot(copy) == before


def test_show_refuses_a_directory_that_is_not_a_run(root: Path) -> None:
    done = invoke("show", str(root / "notarun"))
    assert done.exit_code == 2 and done.stderr.startswith("refused: run_not_found (")


@pytest.mark.parametrize("name", ["show", "aggregate", "recover"])
def test_latest_picks_the_newest_run(root: Path, name: str) -> None:
    latest = invoke(name, "--latest", "--root", str(root), "--json")
    given = invoke(name, str(root / "newer"), "--json")
    assert latest.exit_code == given.exit_code == 0, latest.output
    assert latest.stdout == given.stdout


def test_latest_uses_efold_runs_by_default(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root.parent)
    done = invoke("show", "--latest", "--json")
    assert json.loads(done.stdout)["run"]["name"] == "newer"


@pytest.mark.parametrize("name", ["show", "aggregate", "recover", "reap"])
def test_run_and_latest_are_usage_errors_together_or_both_absent(root: Path,
                                                                 name: str) -> None:
    for args, words in (([str(root / "older"), "--latest"], "RUN and --latest are exclusive"),
                        ([], "give RUN, or --latest"),
                        ([str(root / "older"), "--root", str(root)],
                         "--root applies to --latest")):
        done = invoke(name, *args)
        assert done.exit_code == 2, done.output
        assert "Usage: " in done.stderr and words in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["show", "aggregate", "recover", "reap"])
def test_latest_under_a_root_without_runs_is_refused(tmp_path: Path, name: str) -> None:
    done = invoke(name, "--latest", "--root", str(tmp_path))
    assert done.exit_code == 2 and done.stderr.startswith("refused: run_not_found (")
    missing = invoke(name, "--latest", "--root", str(tmp_path / "missing"))
    assert missing.exit_code == 2
    assert missing.stderr.startswith("refused: runs_root_invalid (")
