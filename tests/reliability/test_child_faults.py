"""Children that fail, by fault injection into real child programs (tests/pilot/
faulty_child.py) under the real controller, journal and containment:

1. the probe child SIGKILLs itself at each step of its protocol in turn (``die-at:STEP``):
   the run goes on, the slot has exactly one receipt with the status the ledger gives
   (unadmitted before any hold; incomplete with the whole hold retained after one; what
   was settled or answered kept), nothing of the run is left alive, recovery reconciles,
   T never exceeds C and aggregation counts every slot once;
2. the prep child SIGKILLs itself half-way through writing its snapshot
   (``prep-die-writing:FILE``): the checkpoint's slots are refused with a fixed code, the
   partial snapshot is never restored, the run goes on;
3. the snapshot bytes change between the prep child's report and the probe child's
   restore (``tamper-snapshot:FILE``, or the controller's ``run_probe`` wrapped): the
   probe child refuses (``worker_snapshot_invalid``), nothing is restored or scored;
4. receipts flipped, forged, copied, renamed, deleted or joined by an extra file after a
   finished run: ``read_run`` and the ``aggregate`` CLI refuse with the fixed code, or
   count a deleted copy honestly (tests/pilot/test_pilot.py covers rewritten JSON, a
   second copy, an unplanned slot in the content and an unvisited receipt); a receipt
   renamed to another name than its slot's is refused too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from efold_pilot_kit import faulty_program, small_registration
from reliability_kit import LONG, budget

from efold.controller.campaigns.registration import Registration
from efold.controller.pilot.pilot import PilotOutcome, run_pilot
from efold.controller.processes.marker import markers_by_process
from efold.controller.processes.proctable import scan
from efold.controller.rundirs.aggregate import AggregateError, read_run, run_reports
from efold.controller.rundirs.receipt_copies import RECEIPTS_DIR
from efold.controller.rundirs.recovery import observe
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code, EfoldError
from efold.protocol.records import Receipt, SlotStatus
from efold.report import decode_results

NATIVE = '["native"]'  # 8 slots over 4 checkpoints: about 5 s a run
# The probe child's protocol steps, in order (faulty_child.py DIE_STEPS; a step the child
# does not know exits before the marker is written, so a drift fails every test).
DIE_STEPS = ("before-hello", "after-hello", "after-ready", "after-admit", "after-consume",
             "after-settle", "after-terminal", "after-doneack")


def _journal(run: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        return list(conn.execute(sql, params))


def _pilot(tmp: Path, mode: str, roles: str = NATIVE,
           concurrency: int = 1) -> tuple[Registration, Path, PilotOutcome]:
    reg, raw = small_registration(roles=roles, extra=f"concurrency = {concurrency}\n")
    run = claim_run_dir(tmp / "run")
    out = run_pilot(reg, raw, run, program=faulty_program(mode, tmp / "marker"))
    return reg, run, out


def _receipt_files(run: Path) -> dict[str, list[Receipt]]:
    """Every receipt file of the run, by the slot its content names."""
    found: dict[str, list[Receipt]] = {}
    for path in sorted((run / RECEIPTS_DIR).iterdir()):
        receipt = msgspec.json.decode(path.read_bytes(), type=Receipt)
        found.setdefault(receipt.slot, []).append(receipt)
    return found


def _journal_spend(run: Path) -> int:
    """T from the journal: settled amounts, and every other hold at its full amount (or
    its known partial, if larger)."""
    rows = _journal(run, "SELECT state, hold_units, settled_units, partial_units FROM holds")
    return sum(settled if state == "settled" else max(hold, partial or 0)
               for state, hold, settled, partial in rows)


def _assert_run_sound(reg: Registration, run: Path, out: PilotOutcome) -> None:
    """What every child fault must leave: one receipt per planned slot (file and journal
    agreeing), nothing of the run alive, recovery reconciled, T <= C with the receipts
    showing exactly the journal's spend, and aggregation counting every slot once."""
    planned = [s.slot for s in out.plan.slots]
    files = _receipt_files(run)
    assert sorted(files) == sorted(planned)
    assert all(len(rs) == 1 for rs in files.values()), files
    journaled = [slot for (slot,) in _journal(run, "SELECT slot FROM receipts")]
    assert sorted(journaled) == sorted(planned)
    assert [r.slot for r in out.receipts] == planned

    markers = {m for (m,) in _journal(run, "SELECT marker FROM launches") if m}
    assert markers and not markers & set(markers_by_process(scan()).values())
    assert _journal(run, "SELECT COUNT(*) FROM launches WHERE exited_ns IS NULL") == [(0,)]
    report = observe(run)
    assert report.reconciled, report.verdict
    assert not report.survivors and not report.unsettled_launches

    spent = _journal_spend(run)
    assert spent <= reg.cap_units
    assert sum(r.spend.settled_units + r.spend.retained_units for r in out.receipts) == spent

    view = read_run(run)
    assert [r.slot for r in view.receipts] == planned
    assert view.journaled_missing == [] and view.in_flight == []
    results = decode_results(run_reports(view)["results.json"])
    ex = results.execution
    assert ex.planned == ex.visited == len(planned) and ex.receipt_copies_missing == 0
    assert ex.skipped + ex.unadmitted + ex.admitted == ex.visited
    assert ex.completed + ex.incomplete + ex.invalid == ex.admitted


# -- 1. the probe child killed at each protocol step -------------------------------------

# Steps before any hold: nothing admitted. After a hold, before its settlement: the
# whole hold retained (the request may have gone out). Settled: the settled amount
# stays, the slot incomplete (no answer). Answered: completed and scored.
_BEFORE_HOLD = {"before-hello", "after-hello", "after-ready"}
_HOLD_OPEN = {"after-admit", "after-consume"}
_ANSWERED = {"after-terminal", "after-doneack"}
# CI runs every step (a run costs about 5 s); the long run repeats each once more.
REPEATS = budget(1, 2)


@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("step", DIE_STEPS)
def test_a_probe_child_killed_at_each_protocol_step(tmp_path: Path, step: str,
                                                    concurrency: int, repeat: int) -> None:
    # Forked from the run's template (the default launcher); at concurrency 3 the killed
    # child has two others in flight beside it, which must not notice.
    reg, run, out = _pilot(tmp_path, f"die-at:{step}", concurrency=concurrency)
    assert (tmp_path / "marker").read_text() == step  # it died exactly there
    assert out.stop_code is None  # a lost worker is not a stop: the run went on
    assert _journal(run, "SELECT COUNT(*) FROM launches WHERE kind = 'template'") == [(1,)]
    (dead,), = _journal(run, "SELECT slot FROM launches WHERE kind = 'probe' "
                             "AND exit_status = -9")
    killed, = (r for r in out.receipts if r.slot == dead)  # the first child to get there
    if concurrency == 1:
        assert killed is out.receipts[0]
    rest = [r for r in out.receipts if r is not killed]
    assert rest and all(r.status is SlotStatus.COMPLETED for r in rest)
    assert _journal(run, "SELECT COUNT(*) FROM launches WHERE kind = 'probe'") == [
        (len(out.plan.slots),)]  # every later slot launched its own child

    holds = _journal(run, "SELECT state, hold_units, settled_units FROM holds WHERE slot = ?",
                     (killed.slot,))
    if step in _BEFORE_HOLD:
        assert killed.status is SlotStatus.UNADMITTED
        assert killed.code == Code.IPC_EOF.value
        assert killed.spend.admitted == 0 and holds == []
        assert killed.spend.settled_units == killed.spend.retained_units == 0
    elif step in _HOLD_OPEN:
        assert killed.status is SlotStatus.INCOMPLETE
        assert killed.code == Code.IPC_EOF.value
        assert killed.spend.admitted == 1
        assert killed.spend.retained_units == reg.rmax_units
        assert killed.spend.settled_units == 0 and killed.spend.usage_known is False
        assert holds == [("lost", reg.rmax_units, None)]
    elif step == "after-settle":
        assert killed.status is SlotStatus.INCOMPLETE
        assert killed.code == Code.IPC_EOF.value
        assert killed.correct is None and killed.answer_sha256 is None  # never scored
        (state, _, settled), = holds
        assert state == "settled" and isinstance(settled, int) and settled > 0
        assert killed.spend.settled_units == settled and killed.spend.retained_units == 0
        assert killed.spend.usage_known is True
    else:
        assert step in _ANSWERED
        # The Terminal arrived: the receipt was journaled and written before DoneAck.
        assert killed.status is SlotStatus.COMPLETED and killed.code is None
        assert killed.correct is not None and killed.answer_sha256 is not None
        (state, _, settled), = holds
        assert state == "settled" and killed.spend.settled_units == settled
        assert killed.spend.retained_units == 0
    _assert_run_sound(reg, run, out)


# -- 2. the prep child killed while writing its snapshot -----------------------------------

PREP_FILES = ["manifest.json", "checkpoint.json"][: budget(1, 2)]


@pytest.mark.parametrize("name", PREP_FILES)
def test_a_prep_child_killed_mid_snapshot_refuses_its_slots_and_the_run_goes_on(
        tmp_path: Path, name: str) -> None:
    from efold.folds import read_checkpoint

    reg, run, out = _pilot(tmp_path, f"prep-die-writing:{name}")
    reached, written = (tmp_path / "marker").read_text().split()
    assert reached == name
    assert out.stop_code is None
    (key, status), = _journal(run, "SELECT slot, exit_status FROM launches "
                                   "WHERE kind = 'prep' AND exit_status != 0")
    assert status == -9
    # The partial snapshot is on disk and can never verify.
    snapshot = run / "checkpoints" / str(key) / "snapshot"
    half, full = (int(n) for n in written.split("/"))
    assert 0 < half < full and (snapshot / name).stat().st_size == half
    if name != "manifest.json":
        assert not (snapshot / "manifest.json").exists()
    with pytest.raises(EfoldError):
        read_checkpoint(snapshot)
    # Its slots: refused with one fixed code, no probe child, no assignment, nothing
    # restored anywhere; every other slot completed.
    mine = [r for r in out.receipts if r.slot.startswith(f"{key}.")]
    assert mine and {r.slot for r in mine} == {
        s.slot for s in out.plan.slots if s.checkpoint == key}
    assert {(r.status, r.code) for r in mine} == {(SlotStatus.UNADMITTED, Code.IPC_EOF.value)}
    assert all(r.spend.admitted == 0 and r.correct is None for r in mine)
    others = [r for r in out.receipts if r not in mine]
    assert others and all(r.status is SlotStatus.COMPLETED for r in others)
    slots = {r.slot for r in mine}
    launched = {s for (s,) in _journal(run, "SELECT slot FROM launches WHERE kind = 'probe'")}
    assert not launched & slots
    assigned = {s for (s,) in _journal(run, "SELECT slot FROM assignments")}
    assert key not in assigned and not assigned & slots
    assert not any((run / "slots" / s).exists() for s in slots)
    _assert_run_sound(reg, run, out)


# -- 3. snapshot bytes tampered between prep and probe -------------------------------------

TAMPER = [("checkpoint.json", NATIVE)]
if LONG:
    TAMPER += [("manifest.json", NATIVE), ("store.sqlite", '["store"]')]


@pytest.mark.parametrize(("name", "roles"), TAMPER, ids=[n for n, _ in TAMPER])
def test_a_snapshot_tampered_after_prep_is_refused_by_every_probe_child(
        tmp_path: Path, name: str, roles: str) -> None:
    """The tampering probe child flips a byte of the pristine snapshot before the real
    restore; the bytes stay changed, so every probe of that checkpoint must refuse."""
    reg, run, out = _pilot(tmp_path, f"tamper-snapshot:{name}", roles)
    assert (tmp_path / "marker").read_text().startswith(f"{name} ")
    assert out.stop_code is None
    first = out.plan.slots[0]
    mine = [r for r, s in zip(out.receipts, out.plan.slots, strict=True)
            if s.checkpoint == first.checkpoint]
    assert len(mine) >= 2  # the tampered bytes were offered more than once
    for r in mine:
        assert (r.status, r.code) == (SlotStatus.UNADMITTED, Code.WORKER_SNAPSHOT_INVALID.value)
        assert r.spend.admitted == 0 and r.correct is None and r.answer_sha256 is None
        assert _journal(run, "SELECT exit_status FROM launches WHERE slot = ?", (r.slot,)) \
            == [(69,)]  # the child's own refusal (worker_snapshot_invalid)
        assert _journal(run, "SELECT COUNT(*) FROM holds WHERE slot = ?", (r.slot,)) == [(0,)]
    others = [r for r in out.receipts if r not in mine]
    assert others and all(r.status is SlotStatus.COMPLETED for r in others)
    _assert_run_sound(reg, run, out)


def test_a_snapshot_tampered_for_one_launch_refuses_only_that_slot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's ``run_probe`` wrapped: a byte of the manifest flipped just
    before the first probe launch, put back right after it. That slot refuses; every
    later probe of the same checkpoint restores the pristine bytes and completes."""
    import efold.controller.pilot.pilot as pilot

    real = pilot.run_probe
    hit: list[str] = []

    async def tampering(ctx, *, planned, snapshot, **kw):
        if hit:
            return await real(ctx, planned=planned, snapshot=snapshot, **kw)
        hit.append(planned.slot)
        path = Path(snapshot.path) / "manifest.json"
        original = path.read_bytes()
        mode = path.stat().st_mode
        os.chmod(path, 0o600)
        changed = bytearray(original)
        changed[len(changed) // 2] ^= 0x01
        path.write_bytes(bytes(changed))
        try:
            return await real(ctx, planned=planned, snapshot=snapshot, **kw)
        finally:
            path.write_bytes(original)
            os.chmod(path, mode & 0o777)

    monkeypatch.setattr(pilot, "run_probe", tampering)
    reg, raw = small_registration(roles=NATIVE)
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, raw, run)
    assert out.stop_code is None
    first, *rest = out.receipts
    assert hit == [first.slot]
    assert (first.status, first.code) == (SlotStatus.UNADMITTED,
                                          Code.WORKER_SNAPSHOT_INVALID.value)
    assert first.spend.admitted == 0 and first.correct is None
    same = [r for r, s in zip(out.receipts, out.plan.slots, strict=True)
            if s.checkpoint == out.plan.slots[0].checkpoint and r is not first]
    assert same and all(r.status is SlotStatus.COMPLETED for r in same)
    assert all(r.status is SlotStatus.COMPLETED for r in rest)
    _assert_run_sound(reg, run, out)


# -- 4. receipts tampered after a finished run ---------------------------------------------


@dataclass(frozen=True)
class FinishedRun:
    run: Path
    killed: str  # the slot whose child died with a consumed hold (incomplete, retained)
    other: str  # a completed slot


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """A finished run with a killed slot among its receipts (its retained hold is the
    money figure a forger would hide)."""
    tmp = tmp_path_factory.mktemp("finished")
    _, run, out = _pilot(tmp, "die-at:after-consume")
    killed, other = out.receipts[0], out.receipts[1]
    assert killed.status is SlotStatus.INCOMPLETE and other.status is SlotStatus.COMPLETED
    return FinishedRun(run, killed.slot, other.slot)


def _copy(finished: FinishedRun, tmp: Path) -> Path:
    run = tmp / "run"
    shutil.copytree(finished.run, run, symlinks=True)
    return run


def _rfile(run: Path, slot: str) -> Path:
    return run / RECEIPTS_DIR / f"{slot}.json"


def _write(path: Path, data: bytes) -> None:
    if path.exists():
        os.chmod(path, 0o600)
    path.write_bytes(data)


def _flip(run: Path, f: FinishedRun) -> None:
    """One byte of the killed slot's receipt, inside a digest: still a receipt."""
    path = _rfile(run, f.killed)
    data = bytearray(path.read_bytes())
    at = data.index(b'"checkpoint_sha256":"') + len(b'"checkpoint_sha256":"')
    data[at] ^= 0x01
    _write(path, bytes(data))


def _break(run: Path, f: FinishedRun) -> None:
    """The first byte of a receipt: no longer JSON."""
    path = _rfile(run, f.killed)
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    _write(path, bytes(data))


def _forge(run: Path, f: FinishedRun) -> None:
    """The killed slot re-encoded as completed with nothing retained (canonically, as the
    controller would write it): hiding lost money is a change like any other."""
    from efold.controller.pilot.receipts import encode_receipt

    path = _rfile(run, f.killed)
    receipt = msgspec.json.decode(path.read_bytes(), type=Receipt)
    forged = msgspec.structs.replace(
        receipt, status=SlotStatus.COMPLETED, code=None,
        spend=msgspec.structs.replace(receipt.spend, retained_units=0, usage_known=True))
    _write(path, encode_receipt(forged))


def _copy_over_other(run: Path, f: FinishedRun) -> None:
    """The killed slot's receipt copied under the completed slot's name."""
    _write(_rfile(run, f.other), _rfile(run, f.killed).read_bytes())


def _extra_json(run: Path, f: FinishedRun) -> None:
    _write(run / RECEIPTS_DIR / "notes.json", b'{"note": "not a receipt"}\n')


def _rename_unplanned(run: Path, f: FinishedRun) -> None:
    _rfile(run, f.killed).rename(run / RECEIPTS_DIR / "r9.native.nowhere.nowhere-p00.json")


def _swap_names(run: Path, f: FinishedRun) -> None:
    killed, other = _rfile(run, f.killed), _rfile(run, f.other)
    parked = killed.with_name("parked.tmp")
    killed.rename(parked)
    other.rename(killed)
    parked.rename(other)


def _fifo(run: Path, f: FinishedRun) -> None:
    """A FIFO at the receipt's name: read, it would wait for a writer forever."""
    path = _rfile(run, f.killed)
    path.unlink()
    os.mkfifo(path)


# (fault, code, what the refusal's detail names: "killed" for the killed slot's id)
TAMPERED = [
    pytest.param(_flip, Code.RECEIPT_CHANGED, "killed", id="byte-flipped"),
    pytest.param(_break, Code.RECEIPT_CHANGED, "not a receipt", id="not-json"),
    pytest.param(_forge, Code.RECEIPT_CHANGED, "killed", id="forged-money"),
    pytest.param(_copy_over_other, Code.RECEIPT_DUPLICATE, "killed",
                 id="copied-over-another-slot"),
    pytest.param(_extra_json, Code.RECEIPT_CHANGED, "notes.json: not a receipt",
                 id="extra-json-file"),
    pytest.param(_rename_unplanned, Code.RECEIPT_UNPLANNED, "r9.native.nowhere",
                 id="renamed-unplanned"),
    pytest.param(_swap_names, Code.RECEIPT_DUPLICATE, "", id="two-names-swapped"),
    pytest.param(_fifo, Code.RECEIPT_UNREADABLE, "not a regular file", id="a-fifo"),
]


def _cli_aggregate(run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", "aggregate", str(run)],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("tamper", "code", "names"), TAMPERED)
def test_a_tampered_receipt_is_refused_with_its_code(
        finished: FinishedRun, tmp_path: Path, tamper: Callable[[Path, FinishedRun], None],
        code: Code, names: str) -> None:
    run = _copy(finished, tmp_path)
    read_run(run)  # the copy aggregates as it is
    tamper(run, finished)
    with pytest.raises(AggregateError) as err:
        read_run(run)
    assert err.value.code is code
    assert (finished.killed if names == "killed" else names) in err.value.detail
    cli = _cli_aggregate(run)
    assert cli.returncode == 2, (cli.stdout, cli.stderr)
    assert cli.stderr.startswith(f"refused: {code.value}")
    assert cli.stdout == ""  # no report from a refused run
    for name in ("results.json", "summary.md", "report.html"):
        assert (run / name).read_bytes() == (finished.run / name).read_bytes()


def test_a_deleted_receipt_is_a_missing_copy_never_invented(finished: FinishedRun,
                                                            tmp_path: Path) -> None:
    run = _copy(finished, tmp_path)
    before = read_run(run)
    _rfile(run, finished.killed).unlink()
    view = read_run(run)
    assert view.journaled_missing == [finished.killed]
    assert [r.slot for r in view.receipts] == [
        r.slot for r in before.receipts if r.slot != finished.killed]
    ex = decode_results(run_reports(view)["results.json"]).execution
    assert (ex.planned, ex.visited, ex.receipt_copies_missing) == (
        len(before.plan.slots), len(before.plan.slots) - 1, 1)
    assert ex.incomplete == 0  # the killed slot's status is unknown now, never guessed
    cli = _cli_aggregate(run)
    assert cli.returncode == 0, cli.stderr
    results = json.loads(
        subprocess.run([sys.executable, "-m", "efold.controller", "aggregate", str(run),
                        "--json"], capture_output=True, text=True, timeout=120,
                       check=True).stdout)
    assert results["execution"]["receipt_copies_missing"] == 1


def test_files_that_are_not_published_receipts_are_not_counted(finished: FinishedRun,
                                                               tmp_path: Path) -> None:
    """Only ``*.json`` names not starting with a dot are receipts (a crash inside an
    exclusive publish leaves a hidden temporary): other files change no count."""
    run = _copy(finished, tmp_path)
    before = decode_results(run_reports(read_run(run))["results.json"])
    data = _rfile(run, finished.other).read_bytes()
    _write(run / RECEIPTS_DIR / "README.txt", b"an operator's note\n")
    _write(run / RECEIPTS_DIR / f".{finished.other}.json.tmp-1234", data)
    after = decode_results(run_reports(read_run(run))["results.json"])
    assert after.execution == before.execution
    assert _cli_aggregate(run).returncode == 0
