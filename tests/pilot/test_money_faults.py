"""Hostile money figures and stops end to end: real probe children, the real
controller, the real journal. A child's absurd usage must stop the run (never crash the
controller), and a guard's stop must close admission at once, not at the terminal."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from efold_pilot_kit import faulty_program

from efold.controller.campaigns.registration import Registration
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code
from efold.protocol.records import SlotStatus
from efold.report import decode_results


def _journal(run: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        return list(conn.execute(sql))


def test_absurd_usage_stops_the_run_and_the_report_still_comes(
        tmp_path: Path, small: tuple[Registration, bytes]) -> None:
    # On the old code 2^58 input tokens made the pilot die with OverflowError while
    # journaling the priced partial: a consumed hold, no stop row, no report.
    reg, raw = small
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run, program=faulty_program("absurd-usage", tmp_path / "m"))
    assert out.stop_code is Code.LOOKUP_INVALID_USAGE
    first, *rest = out.receipts
    assert first.status is SlotStatus.INCOMPLETE and first.code == "lookup_invalid_usage"
    assert first.spend.retained_units == reg.rmax_units  # the whole hold, nothing priced
    assert all(r.status is SlotStatus.UNADMITTED and r.code == "lookup_stopped" for r in rest)
    holds = _journal(run, "SELECT state, code, partial_units, usage FROM holds")
    assert holds == [("integrity_stop", "lookup_invalid_usage", None, None)]
    assert ("lookup_invalid_usage", 1) in _journal(run, "SELECT code, sticky FROM stops")
    results = decode_results((run / "results.json").read_bytes())
    assert results.execution.incomplete == 1 and results.execution.unadmitted == len(rest)


def test_a_guard_stop_closes_admission_before_the_probe_run_ends(
        tmp_path: Path, small: tuple[Registration, bytes]) -> None:
    reg, raw = small
    run = claim_run_dir(tmp_path / "run")
    marker = tmp_path / "m"
    out = run_pilot(reg, raw, run, program=faulty_program("halt", marker))
    # The same child's next admission, still inside its probe run, was refused.
    assert marker.read_text() == "lookup_stopped"
    assert out.stop_code is Code.LOOKUP_PAYLOAD_FORBIDDEN
    assert _journal(run, "SELECT code, slot IS NOT NULL, sticky FROM stops")[0] == (
        "lookup_payload_forbidden", 1, 1)
    assert _journal(run, "SELECT COUNT(*) FROM holds") == [(0,)]
    assert all(r.code == "lookup_stopped" for r in out.receipts[1:])


def test_the_watchdog_outlasts_the_guard_abort_bound() -> None:
    # A request past its deadline is aborted (and settled by the child) within
    # ABORT_BOUND_S; the controller's watchdog must leave it that long and more.
    from efold.controller.rundirs.run_context import WATCHDOG_MARGIN_S
    from efold.guard.transport import ABORT_BOUND_S

    assert WATCHDOG_MARGIN_S > ABORT_BOUND_S
