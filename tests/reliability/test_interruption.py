"""Ctrl-C and SIGTERM end a run first-class: admission closes, the child in flight is
contained, its slot is recorded ``interrupted``, the reports are written with an
"interrupted" banner, the run directory and the next step are printed, and the exit
status is 130 (143). A second signal during that shutdown never skips containment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from efold_pilot_kit import HERE, TEST_CONCURRENCY, alive, journal_rows

from efold.controller.recovery import observe
from efold.errors import Code

CONTROLLER = """
import sys
sys.path.insert(0, {here!r})
from efold_pilot_kit import faulty_program, small_registration
from efold.controller.pilot import run_pilot
from efold.controller.runroot import claim_run_dir
reg, raw = small_registration()
out = run_pilot(reg, raw, claim_run_dir({run!r}), program=faulty_program({mode!r}, {marker!r}))
print("interrupted", out.interrupted, flush=True)
"""



def _wait_for(predicate, process: subprocess.Popen[bytes], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert process.poll() is None, "the controller ended before the fault point"
        assert time.monotonic() < deadline, "timed out waiting for the fault point"
        time.sleep(0.05)



@pytest.mark.parametrize("signals", [(signal.SIGINT,), (signal.SIGINT, signal.SIGINT),
                                     (signal.SIGTERM,)])
def test_an_interrupt_contains_the_child_in_flight_and_writes_the_reports(
        tmp_path: Path, signals: tuple[int, ...]) -> None:
    run = tmp_path / "run"
    code = CONTROLLER.format(here=str(HERE), run=str(run), marker=str(tmp_path / "marker"),
                           mode="hang" if len(signals) == 1 else "hang-through-sigterm")
    controller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    try:
        # The hanging probe child has consumed a hold: a request is "in flight".
        _wait_for(lambda: journal_rows(run, "SELECT 1 FROM holds WHERE state = 'consumed'"),
                  controller)
        (child,) = journal_rows(run, "SELECT pid FROM launches WHERE exited_ns IS NULL "
                                 "AND kind = 'probe'")[0:1]
        for signum in signals:
            controller.send_signal(signum)
            time.sleep(0.05)
        out, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert controller.returncode == 0, err.decode()
    assert out.decode().split() == ["interrupted", str(signals[0])]
    assert not alive(int(child[0]))  # type: ignore[arg-type]
    stops = journal_rows(run, "SELECT code FROM stops WHERE sticky = 1")
    assert (Code.INTERRUPTED.value,) in stops
    statuses = dict(journal_rows(run, "SELECT slot, code FROM slot_status"))  # type: ignore[arg-type]
    receipts = [json.loads(p.read_bytes()) for p in sorted((run / "receipts").iterdir())]
    assert len(receipts) == 16 == len(statuses)  # every slot visited, none launched after
    # The hung child, and (at EFOLD_TEST_CONCURRENCY > 1) any other admitted one in flight.
    flying = [r for r in receipts if r["status"] == "incomplete"]
    assert 1 <= len(flying) <= TEST_CONCURRENCY
    assert all(r["code"] == Code.INTERRUPTED.value for r in flying)
    assert any(r["spend"]["retained_units"] > 0 for r in flying)  # the consumed hold counts
    later = [r for r in receipts if r["status"] == "unadmitted"]
    assert later and all(r["code"] == Code.INTERRUPTED.value for r in later)
    for name in ("results.json", "summary.md", "report.html"):
        assert (run / name).exists()
    report = observe(run)
    assert report.reconciled, report.verdict


def test_the_pilot_command_exits_130_and_says_what_to_do_next(tmp_path: Path) -> None:
    run = tmp_path / "run"
    controller = subprocess.Popen(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--run-dir", str(run),
         "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
    )
    try:
        _wait_for(lambda: len(journal_rows(run, "SELECT slot FROM receipts")) >= 3, controller)
        controller.send_signal(signal.SIGINT)
        out, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    text = out.decode()
    assert controller.returncode == 130, (text, err.decode())
    assert "Aborted" not in err.decode() and "Traceback" not in err.decode()
    assert f"run: {run}" in text and "interrupted:" in text and "recover" in text
    results = json.loads((run / "results.json").read_bytes())
    assert results["execution"]["visited"] == results["execution"]["planned"]
    assert observe(run).reconciled
