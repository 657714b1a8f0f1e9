"""``plan --continue RUN`` (issue 39, its first part): what a continuation of a run would
run and the cap it has left, read from the run's records alone. Real faux runs, a real
interruption, a real lost request, a second process holding a live lease."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))
import msgspec
from efold_pilot_kit import faulty_program, journal_money, small_registration

from efold.controller.cli import main
from efold.controller.errors import ControllerError
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.continuation import TERMINAL, plan_continuation
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code
from efold.protocol.records import Plan, Receipt
from efold.registry.lease import LeaseState, probe_lease


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), terminal_width=200)


def _receipts(run: Path) -> dict[str, Receipt]:
    return {p.stem: msgspec.json.decode(p.read_bytes(), type=Receipt)
            for p in (run / "receipts").glob("*.json")}


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default campaign, interrupted (SIGINT) after some slots were answered."""
    work = tmp_path_factory.mktemp("interrupted")
    run = work / "run"
    child = subprocess.Popen([sys.executable, "-m", "efold.controller", "pilot", "--faux",
                              "--no-progress", "--run-dir", str(run)], cwd=work,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:  # until the probe phase has answered some slots
        if line.startswith("probe slots:") and "/272," in line:
            break
    child.send_signal(signal.SIGINT)
    child.communicate(timeout=300)
    assert child.returncode == 130
    return run


def test_the_remainder_is_every_slot_without_a_terminal_receipt_in_schedule_order(
        interrupted: Path) -> None:
    cont = plan_continuation(interrupted)
    plan = msgspec.json.decode((interrupted / "plan.json").read_bytes(), type=Plan)
    receipts = _receipts(interrupted)
    finished = {slot for slot, r in receipts.items() if r.status in TERMINAL}
    assert 0 < len(finished) < len(plan.slots)
    assert cont.remaining == [s.slot for s in plan.slots if s.slot not in finished]
    # The interruption left receipts that are not terminal (not admitted): they run again.
    assert any(receipts[s].status.value == "unadmitted" for s in cont.remaining if s in receipts)
    assert (cont.planned, cont.terminal) == (len(plan.slots), len(finished))
    settled, retained, _ = journal_money(interrupted)
    assert (cont.settled_units, cont.retained_units) == (settled, retained)
    assert cont.remaining_cap_units == cont.cap_units - settled - retained
    assert cont.registration_sha256 == plan.registration_sha256

    shown = invoke("plan", "--continue", str(interrupted))
    assert shown.exit_code == 0, shown.output
    assert f"slots: {len(cont.remaining):,} of {len(plan.slots):,} to run" in shown.output
    assert "faux units, no money is spent" in shown.output and "$" not in shown.output
    as_json = json.loads(invoke("plan", "--continue", str(interrupted), "--json").output)
    assert as_json["remaining"] == cont.remaining
    both = invoke("plan", "--continue", str(interrupted), "--registration",
                  str(interrupted / "registration.json"), "--sha256", "0" * 64)
    assert both.exit_code == 2 and "--continue RUN takes its registration from RUN" in both.output


def test_a_lost_requests_hold_stays_retained_and_a_cap_left_below_rmax_refuses(
        tmp_path: Path) -> None:
    reg, raw = small_registration(cap="5.00")
    run = claim_run_dir(tmp_path / "run")
    run_pilot(reg, raw, run, program=faulty_program("kill-after-admit", tmp_path / "marker"))
    settled, retained, _ = journal_money(tmp_path / "run")
    assert retained > 0  # the lost request's hold: never assumed refunded
    with pytest.raises(ControllerError) as caught:
        plan_continuation(tmp_path / "run")
    assert caught.value.code is Code.CAP_BELOW_RMAX
    left = reg.cap_units - settled - retained
    assert str(left) in caught.value.detail and left < reg.rmax_units
    refused = invoke("plan", "--continue", str(tmp_path / "run"))
    assert refused.exit_code == 2 and "refused: cap_below_rmax" in refused.output


def test_a_run_a_controller_still_holds_refuses(tmp_path: Path) -> None:
    """A second process runs the campaign; while its lease is live, no continuation."""
    run = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "efold.controller", "pilot", "--faux",
                              "--no-progress", "--campaign", "hard", "--run-dir", str(run)],
                             cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ((run / "journal.sqlite").exists()
                   and probe_lease(run).state is LeaseState.LIVE):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.05)
        with pytest.raises(ControllerError) as caught:
            plan_continuation(run)
        assert caught.value.code is Code.LEASE_HELD
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=300)
    assert child.returncode == 130
    assert plan_continuation(run).remaining  # ended and reconciled: now it may be continued
