"""The controller SIGKILLed mid-slot: the journal still tells the truth, aggregation
counts the in-flight slot honestly, and recover reports the survivor without touching it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from efold_pilot_kit import HANGING_PILOT, HERE, hold_consumed, kill_controller_when

from efold.controller.rundirs.aggregate import read_run
from efold.errors import Code
from efold.protocol.records import SlotStatus


def test_controller_killed_mid_slot(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code = HANGING_PILOT.format(here=str(HERE), run=str(run), marker=str(tmp_path / "marker"))
    kill_controller_when(code, lambda: hold_consumed(run))
    view = read_run(run)
    in_flight = [r for r in view.receipts if r.slot in view.in_flight]
    (flying,) = [r for r in in_flight if r.spend.admitted]
    assert flying.status is SlotStatus.INCOMPLETE and flying.code == Code.LOOKUP_WORKER_LOST.value
    assert flying.spend.retained_units == 78_400_000 and flying.spend.usage_known is False
    # At concurrency 1 the next slot's child was launched while that request ran
    # and waited for its first admission: in flight too, admitted nothing, spent nothing.
    waiting = [r for r in in_flight if r is not flying]
    assert len(waiting) <= 1 and all(
        r.status is SlotStatus.UNADMITTED and r.code == Code.LOOKUP_WORKER_LOST.value
        and r.spend.requests == 0 and r.spend.retained_units == 0 for r in waiting)
    # recover observes the hanging child (a survivor) and signals nothing
    report = subprocess.run(
        [sys.executable, "-m", "efold.controller", "recover", str(run), "--json"],
        capture_output=True, text=True, timeout=60,
    )
    assert report.returncode == 1, report.stderr  # survivors exist
    doc = json.loads(report.stdout)
    text = json.dumps(doc)
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        (pid,) = conn.execute(
            "SELECT pid FROM launches WHERE slot = ? AND kind = 'probe'", (flying.slot,)
        ).fetchone()
    assert str(pid) in text
    os.kill(pid, 0)  # still alive: recover never signals
    os.killpg(pid, signal.SIGKILL)  # the test cleans up what it made
