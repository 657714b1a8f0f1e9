"""Real faux runs: the reports say how the run ended (complete, stopped, contained,
interrupted, crashed, unreconciled), and ``aggregate`` exits 4 while processes of the
run may be alive, after printing and writing the reports with their banner."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from efold_pilot_kit import (
    HANGING_PILOT,
    HERE,
    faulty_program,
    hold_consumed,
    kill_controller_when,
    small_registration,
)

from efold.controller.cli import main
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code
from efold.report import decode_results
from efold.report.schema import RunStatus
from efold.report.terms import stop_meaning

UNRECONCILED = ("**UNRECONCILED: processes of this run may be alive \u2014 run "
                "`efold-controller recover RUN` then `efold-controller reap RUN`**")


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path_factory.mktemp("clean") / "run")
    assert run_pilot(reg, raw, run).stop_code is None
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    return copy


def _write(run: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(run / "journal.sqlite")
    with conn:
        for sql, params in statements:
            conn.execute(sql, params)
    conn.close()


def _aggregate(run: Path, *args: str) -> tuple[Result, RunStatus]:
    result = CliRunner().invoke(main, ["aggregate", str(run), "--json", *args])
    assert result.stdout, (result.stderr, result.exception)
    doc = decode_results(result.stdout.encode())
    assert doc.status is not None
    return result, doc.status


def _summary_banner(text: str) -> str:
    lines = text.splitlines()
    assert lines[0].startswith("# efold results: ")
    return lines[2]


def test_a_clean_run_is_complete_and_aggregates_with_status_0(clean_run: Path) -> None:
    published = decode_results((clean_run / "results.json").read_bytes()).status
    assert published is not None and published.verdict == "complete"
    assert _summary_banner((clean_run / "summary.md").read_text()) == "**Complete**"
    assert '<p class="verdict">Complete</p>' in (clean_run / "report.html").read_text()
    result, status = _aggregate(clean_run)
    assert result.exit_code == 0, result.output
    assert (status.verdict, status.stop, status.controller) == ("complete", None, "released")
    assert not (status.crashed or status.unreconciled or status.interrupted)
    assert status.containments == [] and status.missing_slots == 0


def test_a_sticky_stop_leads_the_reports(tmp_path: Path) -> None:
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run, program=faulty_program("overspend", tmp_path / "marker"))
    code = Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED.value
    assert out.stop_code is Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED
    headline = f"Stopped: {code} ({stop_meaning(code)})"  # the code, then what it means
    assert _summary_banner((run / "summary.md").read_text()) == f"**{headline}**"
    assert f'<p class="verdict">{headline}</p>' in (run / "report.html").read_text()
    result, status = _aggregate(run)
    assert result.exit_code == 0, result.output
    assert (status.verdict, status.stop) == ("stopped", code)
    assert not status.crashed and not status.unreconciled


def test_a_run_that_outlives_its_deadline_says_it_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``deadlines.run_seconds`` passed before the schedule ended: later slots are
    visited as ``run_deadline`` and the run is stopped (not sticky), never "complete".
    The pilot's clock jumps an hour after the probe phase sets the deadline (its own
    ``time`` only; the prep phase's readings, for progress, stay real)."""
    import sys
    import time as real_time

    from efold.controller.pilot import pilot

    deadline_set: list[bool] = []

    class Clock:
        @staticmethod
        def monotonic() -> float:
            now = real_time.monotonic()
            if deadline_set:
                return now + 3600.0
            if sys._getframe(1).f_code.co_name == "run":  # _Probing.run sets the deadline
                deadline_set.append(True)
            return now

    monkeypatch.setattr(pilot, "time", Clock)
    reg, raw = small_registration(extra="[deadlines]\nrun_seconds = 60\n")
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run)
    assert out.stop_code is Code.RUN_DEADLINE
    assert {r.code for r in out.receipts} == {Code.RUN_DEADLINE.value}
    assert _summary_banner((run / "summary.md").read_text()) == (
        "**Stopped: run_deadline (the run's deadline passed; later slots were not launched)**")
    result, status = _aggregate(run)
    assert result.exit_code == 0, result.output
    assert (status.verdict, status.stop) == ("stopped", "run_deadline")
    assert not status.crashed and not status.unreconciled


def test_a_containment_episode_is_reported_with_its_outcome(tmp_path: Path) -> None:
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run,
                    program=faulty_program("kill-after-admit", tmp_path / "marker"))
    first = out.receipts[0].slot
    result, status = _aggregate(run)
    assert result.exit_code == 0, result.output
    assert status.verdict == "complete" and not status.unreconciled
    (episode,) = status.containments
    assert (episode.slot, episode.kind, episode.outcome, episode.finished) == (
        first, "probe", "contained", True)
    line = (f"- Containment {episode.containment_id}: launch {episode.launch_id} "
            f"(probe {first}), cause `{episode.cause}`, contained")
    assert line in (run / "summary.md").read_text().splitlines()


def test_a_launch_left_without_an_exit_makes_aggregate_exit_4(clean_run: Path,
                                                             tmp_path: Path) -> None:
    run = _copy(clean_run, tmp_path)
    _write(run, ("UPDATE launches SET exited_ns = NULL, exit_status = NULL WHERE launch_id ="
                 " (SELECT MAX(launch_id) FROM launches WHERE kind = 'probe')", ()))
    ((launch_id,),) = sqlite3.connect(run / "journal.sqlite").execute(
        "SELECT MAX(launch_id) FROM launches WHERE kind = 'probe'").fetchall()
    out = tmp_path / "reports"
    result, status = _aggregate(run, "--output", str(out))
    assert result.exit_code == 4
    assert result.stderr.strip() == f"unreconciled: {Code.RUN_UNRECONCILED.value}"
    assert status.verdict == "unreconciled" and status.unreconciled
    assert status.unexited_launches == [launch_id] and status.crashed
    # The reports were still printed and written, the banner first.
    assert _summary_banner((out / "summary.md").read_text()) == UNRECONCILED
    assert 'class="status status-unreconciled"' in (out / "report.html").read_text()
    text = CliRunner().invoke(main, ["aggregate", str(run)])
    assert text.exit_code == 4 and _summary_banner(text.stdout) == UNRECONCILED


def _unvisit_last_slots(run: Path, count: int) -> list[str]:
    """As if the controller had stopped before the last ``count`` slots: no launch, no
    hold, no receipt."""
    plan = json.loads((run / "plan.json").read_text())
    slots = [s["slot"] for s in plan["slots"][-count:]]
    launches = "SELECT launch_id FROM launches WHERE slot = ?"
    for slot in slots:
        (run / "receipts" / f"{slot}.json").unlink()
        _write(run, *((f"DELETE FROM {table} WHERE launch_id IN ({launches})", (slot,))
                      for table in ("signals", "members", "containments")))
        _write(run, *((f"DELETE FROM {table} WHERE slot = ?", (slot,))
                      for table in ("receipts", "slot_status", "launches", "holds",
                                    "assignments")))
    return slots


def test_an_interrupted_run_says_so_and_a_short_run_is_a_crash(clean_run: Path,
                                                              tmp_path: Path) -> None:
    run = _copy(clean_run, tmp_path)
    gone = _unvisit_last_slots(run, 3)
    # Slots never visited and no interruption on record: the controller ended early.
    result, status = _aggregate(run)
    assert result.exit_code == 0, result.output
    assert (status.verdict, status.crashed, status.missing_slot_ids) == ("crashed", True, gone)
    assert _summary_banner(CliRunner().invoke(main, ["aggregate", str(run)]).stdout) == (
        "**Crashed: controller ended before the run did; 3 slots missing**")
    # The operator's interruption on record: interrupted, not crashed.
    _write(run, ("INSERT INTO stops (epoch, code, slot, sticky, recorded_ns)"
                 " VALUES (1, ?, NULL, 1, 0)", (Code.INTERRUPTED.value,)))
    result, status = _aggregate(run)
    assert result.exit_code == 0, result.output
    assert (status.verdict, status.stop, status.interrupted, status.crashed) == (
        "interrupted", "interrupted", True, False)
    assert status.missing_slots == 3
    text = CliRunner().invoke(main, ["aggregate", str(run)]).stdout
    assert _summary_banner(text) == "**Interrupted by the operator**"
    assert "- Missing slots (eligible, never visited): 3 (" in text


def test_a_killed_controller_is_a_crash_and_unreconciled(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code = HANGING_PILOT.format(here=str(HERE), run=str(run), marker=str(tmp_path / "marker"))
    kill_controller_when(code, lambda: hold_consumed(run))
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        # The child whose request is in flight (at concurrency 1 the next slot's
        # child may be waiting for its first admission too).
        unexited = conn.execute("SELECT pid, slot FROM launches WHERE kind = 'probe' AND "
                                "exited_ns IS NULL").fetchall()
        ((pid,),) = conn.execute("SELECT pid FROM launches JOIN holds USING (slot) WHERE "
                                 "kind = 'probe' AND exited_ns IS NULL").fetchall()
    try:
        report = subprocess.run(
            [sys.executable, "-m", "efold.controller", "aggregate", str(run)],
            capture_output=True, text=True, timeout=60,
        )
        assert report.returncode == 4, report.stderr
        assert _summary_banner(report.stdout) == UNRECONCILED
        assert "- Crashed: yes" in report.stdout.splitlines()
        assert ("- Controller: the controller died without releasing the run lease"
                in report.stdout.splitlines())
        assert "run_unreconciled" in report.stderr
        result, status = _aggregate(run)
        assert result.exit_code == 4
        assert status.crashed and status.controller == "holder_dead"
        assert len(status.in_flight) == len(unexited) in (1, 2)
        assert status.missing_slots == 16 - len(unexited)
        assert len(status.unexited_launches) == len(unexited)
    finally:
        os.killpg(pid, signal.SIGKILL)  # the test cleans up what it made


def test_aggregate_help_documents_every_exit_status() -> None:
    text = CliRunner().invoke(main, ["aggregate", "--help"]).stdout
    assert "Exit status:" in text
    for status in ("0  reports printed", "2  refused", "4  run_unreconciled"):
        assert status in text
