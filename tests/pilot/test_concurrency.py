"""Many probe children in flight under one writer (``concurrency = N``): real children,
the real controller, the real journal.

- N children racing for the last Rmax of the cap: the cap rule, replayed from the
  journal at every admission, holds (T + Rmax <= C with every active hold counted);
- a run at N > 1, its children forked from the template, writes the same receipts and
  results as the same registration at concurrency 1 with every child spawned (the faux
  reader is deterministic), whatever order slots finish in; up to N prep children are
  alive at once, never more;
- an interruption contains every child in flight, not only one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
from efold_pilot_kit import HERE, alive, faulty_program, journal_rows, small_registration

from efold.controller.pilot.pilot import Dispatch, run_pilot
from efold.controller.rundirs.recovery import observe
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code
from efold.protocol.records import Receipt, SlotStatus

RMAX_USD = "3.92"  # the faux reader's Rmax



def _cap_rule_at_every_admission(run: Path, cap_units: int, rmax_units: int) -> int:
    """Replay the journal's holds: at each admission, what was already committed (every
    hold still open then, at its hold; every hold settled before it, at its settled
    cost; lost and stopped holds at their hold) plus Rmax must fit under the cap.
    Returns the most holds open at once."""
    holds = journal_rows(run, "SELECT admitted_ns, settled_ns, hold_units, settled_units "
                          "FROM holds ORDER BY admitted_ns")
    most = 0
    for admitted, *_ in holds:
        committed = 0
        open_now = 0
        for other_admitted, settled_ns, hold, settled in holds:
            if other_admitted >= admitted:  # type: ignore[operator]
                continue
            if settled_ns is not None and settled is not None \
                    and settled_ns < admitted:  # type: ignore[operator]
                committed += settled  # type: ignore[operator]
            else:
                committed += hold  # type: ignore[operator]
                open_now += 1
        assert committed + rmax_units <= cap_units, (admitted, committed)
        most = max(most, open_now + 1)
    return most


def test_children_racing_for_the_last_rmax_never_pass_the_cap(tmp_path: Path) -> None:
    # C = 2 Rmax: two holds fit, never a third, whatever order the four racing Admits
    # are answered in and whichever settles first (a settled faux request costs > 0).
    reg, raw = small_registration(f"{2 * float(RMAX_USD):.2f}", roles='["native"]',
                                  extra="concurrency = 4\n")
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run, program=faulty_program("race:4", tmp_path / "barrier"))
    # Every racer was answered before any hold was consumed: exactly two granted.
    replies = sorted((tmp_path / f"barrier.reply.{i}").read_text() for i in range(4))
    assert replies == ["granted", "granted", "not_admitted_cap", "not_admitted_cap"]
    assert journal_rows(run, "SELECT COUNT(*) FROM holds")[0][0] == 2
    assert _cap_rule_at_every_admission(run, reg.cap_units, reg.rmax_units) == 2
    assert out.stop_code is Code.NOT_ADMITTED_CAP
    launches = journal_rows(run, "SELECT COUNT(*) FROM launches WHERE kind = 'probe'")[0][0]
    assert launches == 4  # the racers; after the refusal nothing more was launched
    racers, later = out.receipts[:4], out.receipts[4:]
    assert sorted(r.status for r in racers).count(SlotStatus.COMPLETED) == 2
    refused = [r for r in racers if r.status is not SlotStatus.COMPLETED]
    assert [r.code for r in refused] == ["not_admitted_cap"] * 2
    assert later and all(r.status is SlotStatus.UNADMITTED and r.code == "not_admitted_cap"
                         for r in later)
    settled = sum(r.spend.settled_units for r in out.receipts)
    assert 0 < settled <= reg.cap_units


def _timeless(receipt: Receipt) -> Receipt:
    return msgspec.structs.replace(receipt, elapsed_ms=0)


def test_a_concurrent_run_writes_what_a_serial_run_writes(tmp_path: Path) -> None:
    # The serial run spawns each child; the concurrent one forks them from the template:
    # neither the launcher nor N changes a result.
    outs = {}
    for n, launcher in ((1, "spawn"), (4, "template")):
        reg, raw = small_registration(extra=f"concurrency = {n}\n")
        run = claim_run_dir(tmp_path / f"run-{n}")
        outs[n] = run_pilot(reg, raw, run, dispatch=Dispatch(launcher=launcher))  # type: ignore[arg-type]
        assert outs[n].stop_code is None
        kinds = journal_rows(run, "SELECT DISTINCT kind FROM launches ORDER BY kind")
        assert kinds == ([("prep",), ("probe",)] if launcher == "spawn" else
                         [("prep",), ("probe",), ("template",)])
    serial, concurrent = outs[1], outs[4]
    assert serial.plan.schedule_sha256 == concurrent.plan.schedule_sha256
    assert [r.slot for r in concurrent.receipts] == [s.slot for s in concurrent.plan.slots]
    assert [_timeless(r) for r in concurrent.receipts] == [_timeless(r) for r in serial.receipts]
    # Children were alive at once (launch/exit intervals overlap): prep children never
    # more than N (the serial run's one at a time); probe children never more than 2N
    # (a place may hold one ending and one waiting for its first admission).
    assert _most_at_once(concurrent.run_dir, "prep") in range(2, 5)
    assert _most_at_once(serial.run_dir, "prep") == 1
    assert _most_at_once(concurrent.run_dir, "probe") in range(2, 9)
    # The results differ only in what a clock or the registration (concurrency is part
    # of the policy the approver signs) says.
    a, b = (_without_clocks(json.loads((o.run_dir / "results.json").read_bytes()))
            for o in (serial, concurrent))
    assert a == b


def _most_at_once(run: Path, kind: str) -> int:
    """The most children of ``kind`` alive at once, from their launch and exit rows."""
    spans = journal_rows(run, "SELECT launched_ns, exited_ns FROM launches "
                              f"WHERE kind = '{kind}'")
    return max(sum(1 for a, b in spans if a <= t < b)  # type: ignore[operator]
               for t, _ in spans)


def _without_clocks(results: dict[str, object]) -> dict[str, object]:
    for name in ("run", "latency", "registration_sha256"):
        results.pop(name)
    for row in results["results"]:  # type: ignore[attr-defined]
        row.pop("latency")
    return results


CONTROLLER = """
import sys
sys.path.insert(0, {here!r})
from efold_pilot_kit import faulty_program, small_registration
from efold.controller.pilot.pilot import Dispatch, run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
reg, raw = small_registration(extra="concurrency = 3\\n")
out = run_pilot(reg, raw, claim_run_dir({run!r}), program=faulty_program("hang-all", {marker!r}))
print("interrupted", out.interrupted, flush=True)
"""



def test_an_interrupt_contains_every_child_in_flight(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code = CONTROLLER.format(here=str(HERE), run=str(run), marker=str(tmp_path / "m"))
    controller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while len(journal_rows(run, "SELECT 1 FROM holds WHERE state = 'consumed'")) < 3:
            assert controller.poll() is None, "the controller ended before the fault point"
            assert time.monotonic() < deadline, "three requests never were in flight"
            time.sleep(0.05)
        children = [int(pid) for (pid,) in journal_rows(  # type: ignore[call-overload]
            run, "SELECT pid FROM launches WHERE kind = 'probe' AND exited_ns IS NULL")]
        assert len(children) == 3
        controller.send_signal(signal.SIGINT)
        out, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert controller.returncode == 0, err.decode()
    assert out.decode().split() == ["interrupted", str(int(signal.SIGINT))]
    assert not any(alive(pid) for pid in children)
    receipts = [json.loads(p.read_bytes()) for p in sorted((run / "receipts").iterdir())]
    assert len(receipts) == 16
    flying = [r for r in receipts if r["status"] == "incomplete"]
    assert len(flying) == 3 and all(r["code"] == Code.INTERRUPTED.value for r in flying)
    assert all(r["spend"]["retained_units"] > 0 for r in flying)
    later = [r for r in receipts if r["status"] == "unadmitted"]
    assert len(later) == 13 and all(r["code"] == Code.INTERRUPTED.value for r in later)
    report = observe(run)
    assert report.reconciled, report.verdict
