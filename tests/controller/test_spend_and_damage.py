"""Issue 35: a run's money is read from its journal (every caller, settled and retained,
against the cap), never from its receipts; a file the run should hold that is gone or
unreadable makes the run DAMAGED, named, never "Complete"; and one bad receipt never
hides the rest of the run. Real faux runs, real files, the real command line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from as_user import give, run_cli, workspace
from efold_pilot_kit import faulty_program, finished_small_run, journal_money, small_registration

from efold.controller.cli import main
from efold.controller.pilot.pilot import PilotOutcome, run_pilot
from efold.controller.pilot.pilot_view import Verbosity, end_of_run
from efold.controller.rundirs.runroot import claim_run_dir
from efold.guard import units_to_usd


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), terminal_width=200)


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PilotOutcome]:
    """A finished faux run whose one admitted request was lost (its child killed after
    its admission): its hold is retained, the run stopped by its cap."""
    base = tmp_path_factory.mktemp("spend")
    reg, raw = small_registration(cap="5.00")
    outcome = run_pilot(reg, raw, claim_run_dir(base / "run"),
                        program=faulty_program("kill-after-admit", base / "marker"))
    return base / "run", outcome


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_small_run(tmp_path_factory.mktemp("clean"))


def copy_run(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, symlinks=True)
    return to


def spend_text(settled: int, retained: int, cap: str) -> str:
    return (f"settled {units_to_usd(settled)} + retained {units_to_usd(retained)} of a "
            f"{cap} cap (faux units, no money spent)")


def faux_amount(units: int) -> str:
    """The reports' faux amount: exact, without trailing zeros (two decimals at least)."""
    whole, _, fraction = units_to_usd(units).partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


# -- item 1: spend is settled AND retained, every caller's, against the cap ---------------


def test_show_runs_and_aggregate_print_settled_and_retained_from_the_journal(
        lost: tuple[Path, PilotOutcome]) -> None:
    run, _ = lost
    settled, retained, held = journal_money(run)
    assert retained > 0 and held == 0  # the lost request's hold is kept
    shown = invoke("show", str(run), "--json")
    assert shown.exit_code == 0, shown.output
    entry = json.loads(shown.stdout)["run"]
    assert (entry["money"]["settled"]["units"], entry["money"]["retained"]["units"],
            entry["money"]["open"]["units"], entry["money"]["charged"]["units"]) == (
        settled, retained, 0, settled + retained)
    assert entry["cap"]["units"] == 5 * 20_000_000  # $5.00 at 5e-8 USD a unit
    line = (f"spend: settled {faux_amount(settled)} + retained {faux_amount(retained)} of a 5.00 "
            "cap (faux units, no money spent)")
    assert line in invoke("show", str(run)).stdout.splitlines()
    listed = invoke("runs", str(run.parent)).stdout
    assert line.removeprefix("spend: ") in listed
    results = json.loads(invoke("aggregate", str(run), "--json").stdout)
    assert results["money"]["retained"]["units"] == retained
    assert results["money"]["settled"]["units"] == settled
    summary = invoke("aggregate", str(run)).stdout
    assert line.removeprefix("spend: ") in summary


def test_a_summariser_hold_counts_in_the_run_spend_never_only_the_probes(
        clean: Path, tmp_path: Path) -> None:
    """A settled hold on a checkpoint key (what a summariser's request leaves) and a lost
    one: the run's spend moves by exactly them; the probe slots' spend does not."""
    run = copy_run(clean, tmp_path / "run")
    before = json.loads(invoke("show", str(run), "--json").stdout)["run"]["money"]
    probes = json.loads(invoke("aggregate", str(run), "--json").stdout)["spend"]
    key = json.loads((run / "plan.json").read_bytes())["slots"][0]["checkpoint"]
    with contextlib.closing(sqlite3.connect(run / "journal.sqlite")) as conn:
        for permit, state, settled, hold in (("sum-1", "settled", 1_234, 5_000),
                                             ("sum-2", "lost", None, 7_000)):
            conn.execute(
                "INSERT INTO holds (permit_id, epoch, slot, request_id, round, "
                "payload_digest, hold_units, state, settled_units, admitted_ns) "
                "VALUES (?, 1, ?, ?, 0, ?, ?, ?, ?, 1)",
                (permit, key, permit, "0" * 64, hold, state, settled))
        conn.commit()
    after = json.loads(invoke("show", str(run), "--json").stdout)["run"]["money"]
    assert after["settled"]["units"] == before["settled"]["units"] + 1_234
    assert after["retained"]["units"] == before["retained"]["units"] + 7_000
    results = json.loads(invoke("aggregate", str(run), "--json").stdout)
    assert results["spend"] == probes  # the probe slots' own line is unchanged
    assert results["money"]["charged"]["units"] == (
        after["settled"]["units"] + after["retained"]["units"])


def test_the_pilots_last_lines_print_settled_and_retained_against_the_cap(
        lost: tuple[Path, PilotOutcome]) -> None:
    run, outcome = lost
    settled, retained, _ = journal_money(run)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = end_of_run(outcome, Verbosity.NORMAL, as_json=True)
    assert status == 3
    lines = out.getvalue().splitlines()
    assert f"settled {faux_amount(settled)} + retained {faux_amount(retained)} of a 5.00 cap " \
        "(faux units, no money spent)" in lines
    last = json.loads(lines[-1])
    assert (last["settled_usd"], last["retained_usd"], last["open_usd"], last["cap_usd"]) \
        == (units_to_usd(settled), units_to_usd(retained), "0", "5")


# -- item 2: damaged runs -------------------------------------------------------------


def _slot_files(run: Path) -> list[Path]:
    return sorted((run / "receipts").glob("*.json"))


def test_a_deleted_receipt_makes_a_damaged_run_and_leaves_the_spend_alone(
        clean: Path, tmp_path: Path) -> None:
    run = copy_run(clean, tmp_path / "run")
    before = json.loads(invoke("show", str(run), "--json").stdout)["run"]
    assert before["status"] == "complete" and before["damaged_files"] == []
    gone = _slot_files(run)[0]
    gone.unlink()
    name = f"receipts/{gone.name}"
    shown = invoke("show", str(run), "--json")
    assert shown.exit_code == 0, shown.output
    entry = json.loads(shown.stdout)["run"]
    assert entry["status"] == "damaged" and entry["damaged_files"] == [name]
    assert entry["money"] == before["money"]  # the journal's, not the receipts'
    text = invoke("show", str(run)).stdout.splitlines()
    assert text[0].startswith("status: Damaged: 1 file gone or unreadable") and name in text[0]
    assert f"damaged: {name} (gone or unreadable)" in text
    assert "damaged" in invoke("runs", str(run.parent)).stdout.split()
    summary = invoke("aggregate", str(run))
    assert summary.exit_code == 0, summary.output
    assert "Complete" not in summary.stdout
    assert f"**Damaged: 1 file gone or unreadable ({name})" in summary.stdout
    assert f"- Damaged files (gone or unreadable): 1 ({name})" in summary.stdout
    results = json.loads(invoke("aggregate", str(run), "--json").stdout)
    assert results["status"]["verdict"] == "damaged"
    assert results["status"]["damaged_files"] == [name]
    # The banner's "missing slots" and the execution table's "missing" are one figure:
    # the slot was visited (the journal says so); its receipt copy is what is gone.
    assert "- Missing slots (eligible, never visited): 0" in summary.stdout
    assert results["status"]["missing_slots"] == results["execution"]["missing"] == 0
    assert results["execution"]["receipt_copies_missing"] == 1


def test_a_malformed_receipt_names_the_damage_and_hides_nothing_else(
        clean: Path, tmp_path: Path) -> None:
    run = copy_run(clean, tmp_path / "run")
    bad = _slot_files(run)[1]
    bad.write_bytes(b"{ not json")
    name = f"receipts/{bad.name}"
    shown = invoke("show", str(run), "--json")
    assert shown.exit_code == 0, shown.output  # one bad file never blocks the run
    entry = json.loads(shown.stdout)["run"]
    assert (entry["status"], entry["damaged_files"]) == ("damaged", [name])
    assert entry["visited"] == entry["planned"] - 1
    refused = invoke("aggregate", str(run))
    assert refused.exit_code == 2 and refused.stderr.startswith("refused: receipt_changed")
    allowed = invoke("aggregate", str(run), "--allow-damaged", "--json")
    assert allowed.exit_code == 0, allowed.output
    results = json.loads(allowed.stdout)
    assert results["status"]["verdict"] == "damaged"
    assert results["status"]["damaged_files"] == [name]
    assert results["execution"]["receipt_copies_missing"] == 1
    html = tmp_path / "out"
    assert invoke("aggregate", str(run), "--allow-damaged", "--output", str(html)).exit_code == 0
    page = (html / "report.html").read_text()
    assert "DAMAGED" in page and name in page


def test_a_results_json_that_does_not_parse_is_damage(clean: Path, tmp_path: Path) -> None:
    run = copy_run(clean, tmp_path / "run")
    (run / "results.json").write_bytes(b'{"schema": "results-v1"')
    entry = json.loads(invoke("show", str(run), "--json").stdout)["run"]
    assert (entry["status"], entry["damaged_files"]) == ("damaged", ["results.json"])
    (run / "results.json").unlink()  # absent is not damage: aggregate --output makes it
    entry = json.loads(invoke("show", str(run), "--json").stdout)["run"]
    assert (entry["status"], entry["damaged_files"]) == ("complete", [])


def test_a_stray_file_is_named_only_by_a_run_files_name(clean: Path, tmp_path: Path) -> None:
    """A file in receipts/ whose name is no slot id (it could hold anything) is damage,
    named by a fixed stand-in, never by its own name."""
    run = copy_run(clean, tmp_path / "run")
    (run / "receipts" / "<b>my notes.json").write_bytes(b"{}")
    entry = json.loads(invoke("show", str(run), "--json").stdout)["run"]
    assert (entry["status"], entry["damaged_files"]) == ("damaged",
                                                         ["receipts/(unnamed).json"])
    assert entry["visited"] == entry["planned"]  # no slot's receipt was lost
    assert "my notes" not in invoke("aggregate", str(run), "--allow-damaged").stdout


def test_a_receipt_its_user_cannot_read_is_damage_not_a_crash(clean: Path) -> None:
    """As an ordinary user (``nobody`` when the tests run as root, who reads anything),
    umask 002: a receipt that user may not read is named as damaged by ``show``, and
    ``aggregate`` refuses it with its own code, never a traceback."""
    user = "nobody" if os.geteuid() == 0 else "self"
    with workspace(user) as space:
        run = copy_run(clean, space / "run")
        for path in [run, *run.rglob("*")]:
            give(path, user)
        locked = _slot_files(run)[2]
        locked.chmod(0)
        shown = run_cli(["show", str(run), "--json"], space, user)
        assert shown.exit == 0, shown.stderr
        entry = json.loads(shown.stdout)["run"]
        assert (entry["status"], entry["damaged_files"]) == (
            "damaged", [f"receipts/{locked.name}"])
        refused = run_cli(["aggregate", str(run)], space, user)
        assert (refused.exit, refused.code) == (2, "receipt_unreadable")
        assert f"{locked.name}: Permission denied" in refused.detail
