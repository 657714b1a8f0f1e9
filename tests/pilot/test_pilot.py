"""The faux pilot end to end, with real children, and its fault paths."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from efold_pilot_kit import faulty_program, small_registration

from efold.controller.campaigns.profiles import Profile, route_of
from efold.controller.campaigns.registration import Registration
from efold.controller.errors import ControllerError
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.aggregate import read_run
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code
from efold.protocol.records import SlotStatus
from efold.report import decode_results


def _journal(run: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        return list(conn.execute(sql))


def test_small_faux_pilot_runs_end_to_end(tmp_path: Path,
                                          small: tuple[Registration, bytes]) -> None:
    reg, raw = small
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run)
    assert out.stop_code is None
    assert len(out.receipts) == len(out.plan.slots) == 16
    assert {r.status for r in out.receipts} == {SlotStatus.COMPLETED}
    # Native keeps everything, so the extractive reader answers all its probes.
    assert all(r.correct for r in out.receipts if r.role == "native")
    # Every receipt is journaled, fsynced and matches; aggregation accepts the run.
    view = read_run(run)
    assert len(view.receipts) == 16 and view.journaled_missing == []
    for name in ("results.json", "summary.md", "report.html"):
        assert (run / name).stat().st_size > 0
    results = decode_results((run / "results.json").read_bytes())
    assert results.execution.completed == 16
    # Holds journaled for every admitted request, all settled, none left open.
    states = Counter(s for (s,) in _journal(run, "SELECT state FROM holds"))
    assert states and set(states) == {"settled"}
    # The faux authorization was consumed before any launch.
    assert (run / "authorization-consumed.json").exists()
    first_launch = _journal(run, "SELECT MIN(launched_ns) FROM launches")[0][0]
    assert isinstance(first_launch, int)
    # Reports are content-free: no probe question or answer text in them.
    from efold.corpus import load_suite

    texts = [(run / n).read_text() for n in ("results.json", "summary.md", "report.html")]
    for item in load_suite("original"):
        for probe in item.probes.probes:
            assert all(probe.question not in t for t in texts)
            for value in probe.expected:
                if len(value) >= 8:
                    assert all(value not in t for t in texts)


def test_a_second_pilot_on_the_same_run_root_refuses(tmp_path: Path) -> None:
    claim_run_dir(tmp_path / "run")
    with pytest.raises(ControllerError) as err:
        claim_run_dir(tmp_path / "run")
    assert err.value.code is Code.RUN_ROOT_EXISTS


def test_pilot_cli_refuses_an_existing_run_dir(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from efold.controller.cli import main

    (tmp_path / "taken").mkdir()
    result = CliRunner().invoke(main, ["pilot", "--faux", "--run-dir", str(tmp_path / "taken")])
    assert result.exit_code == 2
    assert "run_root_exists" in result.output


def test_a_child_killed_mid_request_keeps_the_hold_and_the_run_goes_on(tmp_path: Path) -> None:
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run,
                    program=faulty_program("kill-after-admit", tmp_path / "marker"))
    assert out.stop_code is None
    first, *rest = out.receipts
    assert first.status is SlotStatus.INCOMPLETE
    assert first.spend.admitted == 1 and first.spend.retained_units == reg.rmax_units
    assert first.spend.usage_known is False
    assert all(r.status is SlotStatus.COMPLETED for r in rest)
    lost = _journal(run, "SELECT slot, state, hold_units FROM holds WHERE state != 'settled'")
    assert lost == [(first.slot, "lost", reg.rmax_units)]
    # The dead child was contained and its exit journaled.
    statuses = _journal(run, f"SELECT exit_status FROM launches WHERE slot = '{first.slot}'")
    assert statuses == [(-9,)]


def test_a_slot_without_its_directory_stops_the_run_and_the_report_still_comes(
        tmp_path: Path) -> None:
    """A slot whose private directory cannot be made (here a name planted in ``slots/``;
    as much for a ``slots/`` made unwritable mid-run) is refused before any launch with
    the reason, and stops the run: the slots before it complete, the rest are not
    admitted, the reports are written and no hold is left open."""
    from efold.controller.campaigns.plan import plan_for

    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    slots = [s.slot for s in plan_for(reg).slots]
    victim = run / "slots" / slots[2]
    done = threading.Event()

    def plant() -> None:  # once the first slot's directory is made, before the third's
        while not done.is_set() and not (run / "slots" / slots[0]).exists():
            time.sleep(0.0005)
        victim.write_text("planted")

    planter = threading.Thread(target=plant)
    planter.start()
    try:
        out = run_pilot(reg, raw, run)
    finally:
        done.set()
        planter.join()
    assert out.stop_code is Code.PRIVATE_DIR_REFUSED
    first, second, refused, *rest = out.receipts
    assert first.status is second.status is SlotStatus.COMPLETED
    assert refused.slot == victim.name and refused.status is SlotStatus.UNADMITTED
    assert refused.code == Code.PRIVATE_DIR_REFUSED.value and refused.spend.admitted == 0
    assert rest and all(r.code == Code.LOOKUP_STOPPED.value for r in rest)
    assert victim.read_text() == "planted"  # never followed nor removed
    assert _journal(run, f"SELECT COUNT(*) FROM launches WHERE slot = '{victim.name}'") == [(0,)]
    assert _journal(run, "SELECT COUNT(*) FROM holds WHERE state != 'settled'") == [(0,)]
    assert (Code.PRIVATE_DIR_REFUSED.value, 1) in _journal(run, "SELECT code, sticky FROM stops")
    results = decode_results((run / "results.json").read_bytes())
    assert results.execution.unadmitted == len(rest) + 1


def test_an_integrity_stop_is_sticky_and_the_report_still_comes(tmp_path: Path) -> None:
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run, program=faulty_program("overspend", tmp_path / "marker"))
    assert out.stop_code is Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED
    first, *rest = out.receipts
    assert first.status is SlotStatus.INCOMPLETE
    assert first.code == Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED.value
    assert rest and all(r.status is SlotStatus.UNADMITTED for r in rest)
    assert all(r.code == Code.LOOKUP_STOPPED.value for r in rest)
    assert all(r.spend.admitted == 0 for r in rest)
    # Nothing was launched after the stop: only the first slot's child, and (at
    # concurrency 1) the second's, launched while the first's request ran, refused at
    # its first admission.
    probes = _journal(run, "SELECT slot FROM launches WHERE kind = 'probe' ORDER BY launch_id")
    assert [slot for (slot,) in probes] in ([first.slot], [first.slot, rest[0].slot])
    stops = _journal(run, "SELECT code, sticky FROM stops")
    assert (Code.LOOKUP_USAGE_INPUT_ABOVE_ADMITTED.value, 1) in stops
    results = decode_results((run / "results.json").read_bytes())
    assert results.execution.unadmitted == len(rest) and results.execution.incomplete == 1


def test_a_cap_that_fits_one_hold_refuses_the_next_and_counts_honestly(tmp_path: Path) -> None:
    """Rmax <= C < 2 Rmax (a cap below Rmax no longer registers): the first request is
    admitted, its child is killed so its whole hold is retained as lost, and the next
    admission (retained Rmax + Rmax > C) refuses with the cap code."""
    reg, raw = small_registration(cap="5.00")
    assert reg.rmax_units <= reg.cap_units < 2 * reg.rmax_units
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run,
                    program=faulty_program("kill-after-admit", tmp_path / "marker"))
    assert out.stop_code is Code.NOT_ADMITTED_CAP
    first, *rest = out.receipts
    assert first.status is SlotStatus.INCOMPLETE
    assert first.spend.admitted == 1 and first.spend.retained_units == reg.rmax_units
    assert rest and {r.status for r in rest} == {SlotStatus.UNADMITTED}
    assert {r.code for r in rest} == {Code.NOT_ADMITTED_CAP.value}
    assert _journal(run, "SELECT state, hold_units FROM holds") == [("lost", reg.rmax_units)]
    results = decode_results((run / "results.json").read_bytes())
    ex = results.execution
    assert (ex.planned, ex.visited, ex.unadmitted, ex.admitted, ex.completed) == (16, 16, 15, 1, 0)


def test_children_do_not_inherit_credentials(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("CI", "")
    reg, raw = small_registration(roles='["native"]')
    run = claim_run_dir(tmp_path / "run")
    marker = tmp_path / "env.json"
    run_pilot(reg, raw, run, program=faulty_program("env", marker))
    names = json.loads(marker.read_text())
    assert "OPENAI_API_KEY" not in names
    assert "CI" in names  # presence preserved: paid routes refuse where it is set
    assert set(names) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "CI",
                          "EFOLD_LAUNCH_MARKER"}
    assert "EFOLD_LAUNCH_MARKER" in names  # how recover finds a reparented descendant


def test_aggregate_refuses_tampered_receipts(tmp_path: Path,
                                             small: tuple[Registration, bytes]) -> None:
    from efold.controller.rundirs.aggregate import AggregateError

    reg, raw = small
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run)
    receipts = run / "receipts"
    first = receipts / f"{out.receipts[0].slot}.json"
    original = first.read_bytes()

    def refused() -> Code:
        with pytest.raises(AggregateError) as err:
            read_run(run)
        return err.value.code

    # changed: same slot, different bytes
    doc = json.loads(original)
    doc["elapsed_ms"] += 1
    os.chmod(first, 0o600)
    first.write_bytes(json.dumps(doc).encode())
    assert refused() is Code.RECEIPT_CHANGED
    # duplicate: a second file claiming the same slot
    first.write_bytes(original)
    (receipts / "copy.json").write_bytes(original)
    assert refused() is Code.RECEIPT_DUPLICATE
    (receipts / "copy.json").unlink()
    # unplanned: a receipt for a slot the plan does not have
    doc = json.loads(original)
    doc["slot"] = "r9.native.nowhere.p00"
    (receipts / "extra.json").write_bytes(json.dumps(doc).encode())
    assert refused() is Code.RECEIPT_UNPLANNED
    (receipts / "extra.json").unlink()
    # a journaled receipt whose copy is gone is a missing copy, never invented
    first.unlink()
    view = read_run(run)
    assert len(view.receipts) == 15 and view.journaled_missing == [out.receipts[0].slot]
    first.write_bytes(original)
    # unvisited: a receipt the journal never recorded
    conn = sqlite3.connect(run / "journal.sqlite")
    conn.execute("DELETE FROM receipts WHERE slot = ?", (out.receipts[0].slot,))
    conn.commit()
    conn.close()
    assert refused() is Code.RECEIPT_UNVISITED
    # a plan that is not the run's own
    first.unlink()
    plan = json.loads((run / "plan.json").read_text())
    plan["registration_sha256"] = "0" * 64
    os.chmod(run / "plan.json", 0o600)
    (run / "plan.json").write_text(json.dumps(plan))
    assert refused() is Code.RUN_RECORDS_INVALID

def test_children_refuse_a_run_built_from_other_code(tmp_path: Path) -> None:
    """The controller assigns the registration's build digest; every child recomputes its
    own from the code it runs and refuses on a difference (a module edited since the
    registration was checked, a mixed install). The refusal's own code, from the child's
    exit status, is what the receipts show."""
    from efold.controller.campaigns.registration import encode_registration

    reg, raw = small_registration(roles='["native"]')
    # The build the controller assigns to every child of the run: not the code they run.
    reg = msgspec.structs.replace(reg, digests=msgspec.structs.replace(reg.digests,
                                                                        build="f" * 64))
    raw = encode_registration(reg)
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run)
    assert out.stop_code is Code.WORKER_DIGEST_MISMATCH
    assert {r.status for r in out.receipts} == {SlotStatus.UNADMITTED}
    assert {r.code for r in out.receipts} == {Code.WORKER_DIGEST_MISMATCH.value,
                                              Code.LOOKUP_STOPPED.value}
    assert _journal(run, "SELECT exit_status FROM launches WHERE kind != 'template'") == [
        (68,)]  # one child launch only


def test_a_probe_child_refuses_an_assignment_the_journal_does_not_hold(
        tmp_path: Path, small: tuple[Registration, bytes]) -> None:
    """The child reads its cache key and snapshot back from the journal before Ready."""
    from efold.digests import build_digest
    from efold.identity import current_identity
    from efold.protocol.assignment import ASSIGNMENT_VERSION, Assignment, SnapshotRef
    from efold.protocol.tasks import ProbeTask
    from efold.worker.errors import WorkerError
    from efold.worker.reader import ReaderProbe

    reg, raw = small
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run)
    slot = out.receipts[0].slot
    (key, digest), = _journal(run, f"SELECT cache_key, snapshot_digest FROM assignments "
                                   f"WHERE slot = '{slot}'")
    checkpoint = out.plan.slots[0].checkpoint
    snapshot = SnapshotRef(path=str(run / "checkpoints" / checkpoint / "snapshot"),
                           digest=str(digest))
    task = ProbeTask(question="q", instructions="i", route=route_of(Profile()))

    def assignment(cache_key: str, target: str) -> Assignment:
        return Assignment(
            version=ASSIGNMENT_VERSION, kind="probe", body="reader", run_dir=str(run),
            slot_dir=str(tmp_path / target), epoch=1, slot=slot,
            controller=current_identity(),
            registration_digest=hashlib.sha256((run / "registration.json").read_bytes()).hexdigest(),
            plan_digest=hashlib.sha256((run / "plan.json").read_bytes()).hexdigest(),
            build_digest=build_digest(), cache_key=cache_key, snapshot=snapshot,
            hello_timeout_ms=1000, task=task,
        )

    (tmp_path / "ok").mkdir(mode=0o700)
    assert ReaderProbe().restore(assignment(str(key), "ok")) == digest
    (tmp_path / "forged").mkdir(mode=0o700)
    with pytest.raises(WorkerError) as err:
        ReaderProbe().restore(assignment("efold-forged-000000", "forged"))
    assert err.value.code is Code.LOOKUP_CACHE_ASSIGNMENT_INVALID


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_worker_that_leaves_a_process_behind_stops_the_run(tmp_path: Path,
                                                             concurrency: int) -> None:
    """Containment journals lookup_worker_lost before its first signal, kills the
    SIGTERM-ignoring grandchild, and the pilot takes that stop as it is journaled, a
    whole SIGTERM grace before the episode ends: nothing is admitted after it, in any
    place, and nothing launched after it is admitted. At concurrency 1 the leftover is found in the first slot's
    teardown, after its DoneAck; the next slot's first admission waits only for that
    DoneAck, so it may have been admitted once before the stop (its one request, under
    the cap), never after it (docs/architecture.md, "Orderings"). The leftover, still in
    the first launch's group, is that launch's alone: no other launch's teardown or
    containment takes it."""
    reg, raw = small_registration(extra=f"concurrency = {concurrency}\n")
    run = claim_run_dir(tmp_path / "run")
    marker = tmp_path / "marker"
    out = run_pilot(reg, raw, run, program=faulty_program("survivor", marker))
    assert out.stop_code is Code.LOOKUP_WORKER_LOST
    (stop_ns,) = _journal(run, "SELECT recorded_ns FROM stops WHERE code = 'lookup_worker_lost'")[0]
    assert _journal(run, f"SELECT COUNT(*) FROM holds WHERE admitted_ns > {stop_ns}") == [(0,)]
    # A launch decided before the stop may be made just after it (its fork exchange was
    # under way): it is refused at its first admission and spends nothing.
    late = {slot for (slot,) in _journal(run, "SELECT slot FROM launches WHERE kind = 'probe'"
                                              f" AND launched_ns > {stop_ns}")}
    assert {r.code for r in out.receipts if r.slot in late} <= {Code.LOOKUP_STOPPED.value}
    assert _journal(run, "SELECT cause FROM containments") == [("lookup_worker_lost",)]
    survivor = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(survivor, 0)
    assert (Code.LOOKUP_WORKER_LOST.value, 1) in _journal(run, "SELECT code, sticky FROM stops")
    admitted = [slot for (slot,) in _journal(run, "SELECT slot FROM holds ORDER BY admitted_ns")]
    unadmitted = [r for r in out.receipts if r.slot not in admitted]
    assert unadmitted and {r.code for r in unadmitted} == {Code.LOOKUP_STOPPED.value}
    if concurrency == 1:
        first, second, *_ = out.receipts
        assert first.status is SlotStatus.COMPLETED  # its answer came before the leftover
        assert admitted in ([first.slot], [first.slot, second.slot])  # one hold each: faux
        # Launched: the first slot, then at most the two after it (each launched while
        # the slot before it was under way).
        slots = [slot for (slot,) in _journal(
            run, "SELECT slot FROM launches WHERE kind = 'probe' ORDER BY launch_id")]
        assert slots == [r.slot for r in out.receipts[:len(slots)]] and len(slots) <= 3


@pytest.mark.parametrize(("fault", "ended"), [
    ("hang", Code.IPC_TIMEOUT),  # its request never settles: the Settle's wait times out
    ("rounds-to-the-watchdog", Code.WORKER_TIMEOUT),  # round after round, to its deadline
])
def test_a_child_waiting_for_its_first_admission_outwaits_a_slot_that_ran_to_its_deadline(
        tmp_path: Path, fault: str, ended: Code) -> None:
    """At concurrency 1 the second slot's child is launched at
    the first slot's first admission and waits for that slot's end. The first slot runs
    to a timeout, then its containment: a wait longer than probe_seconds, which counts
    against neither the waiting slot's watchdog nor its child's exchange timeout
    (``RunContext.welcome``'s ``admit_wait``), so it is then admitted and completes."""
    reg, raw = small_registration(roles='["native"]',
                                  extra="concurrency = 1\n[deadlines]\nprobe_seconds = 2\n")
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run, program=faulty_program(fault, tmp_path / "marker"))
    first, second, *rest = out.receipts
    assert first.status is SlotStatus.INCOMPLETE and first.code == ended.value
    assert second.status is SlotStatus.COMPLETED and all(
        r.status is SlotStatus.COMPLETED for r in rest)
    ((exited_ns,),) = _journal(run, f"SELECT exited_ns FROM launches WHERE slot = '{first.slot}'")
    ((launched_ns, admitted_ns),) = _journal(
        run, "SELECT launched_ns, admitted_ns FROM launches JOIN holds USING (slot) "
             f"WHERE slot = '{second.slot}'")
    assert launched_ns < exited_ns < admitted_ns  # type: ignore[operator]
    assert admitted_ns - launched_ns > 2_000_000_000  # type: ignore[operator]


def test_a_slots_receipt_and_members_are_durable_before_its_done_ack(tmp_path: Path) -> None:
    """Load-bearing, kept (docs/architecture.md, "Orderings"): every child, on its
    ``DoneAck``, finds its slot's receipt and its own membership committed in the
    journal, read from its own process. The members are deferred to ride with the
    receipt's commit; neither may wait for a later one."""
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    witness = tmp_path / "witness"
    witness.mkdir()
    out = run_pilot(reg, raw, run, program=faulty_program("witness-done-ack", witness))
    assert out.stop_code is None
    seen = [json.loads(p.read_text()) for p in witness.iterdir()]
    completed = [r for r in out.receipts if r.status is SlotStatus.COMPLETED]
    assert len(seen) == len(completed) > 1
    assert all(s == {"receipts": 1, "members": 1} for s in seen), seen
