"""Smaller runs: once a probe slot is over for certain (its receipt journaled, its launch
exited and reaped, every containment episode finished ``contained``), its restored
checkpoint copy (``slots/<slot>/checkpoint``) is removed; a slot that is not keeps it.
The removal never follows a planted link and never raises for what it cannot remove."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from efold_pilot_kit import faulty_program, small_registration

from efold.controller.pilot.pilot import run_pilot
from efold.controller.pilot.slots import discard_restored_copy
from efold.controller.rundirs.aggregate import build_run_results, read_run
from efold.controller.rundirs.recovery import observe
from efold.controller.rundirs.runroot import MAX_REMOVAL_DEPTH, claim_run_dir, remove_at
from efold.registry.journal import JournalReader
from efold.worker.reader import RESTORED_DIR


@pytest.fixture(scope="module")
def contained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small faux run whose first probe child is SIGKILLed after its admission: that
    slot ends in a containment episode (contained), the others exit on their own."""
    base = tmp_path_factory.mktemp("small")
    reg, raw = small_registration()
    run = claim_run_dir(base / "run")
    run_pilot(reg, raw, run, program=faulty_program("kill-after-admit", base / "marker"))
    return run


def _rows(run: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        return conn.execute(sql, params).fetchall()


def _write(run: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(run / "journal.sqlite")
    with conn:
        conn.execute(sql, params)
    conn.close()


def test_every_finished_slot_left_no_restored_copy(contained_run: Path) -> None:
    run = contained_run
    launched = [slot for (slot,) in _rows(run, "SELECT slot FROM launches WHERE kind = 'probe'")]
    assert len(launched) == 16
    for slot in launched:
        slot_dir = run / "slots" / str(slot)
        assert slot_dir.is_dir()  # the slot's directory stays: only the copy goes
        assert not (slot_dir / RESTORED_DIR).exists(), slot
    # The controller's pristine snapshots stay: the copies were of these.
    snapshots = list((run / "checkpoints").glob("*/snapshot/manifest.json"))
    assert snapshots
    # The killed slot was contained, and its copy went too.
    ((slot, result),) = _rows(run, "SELECT l.slot, c.result FROM containments c JOIN launches l"
                                   " USING (launch_id)")
    assert result == "contained" and not (run / "slots" / str(slot) / RESTORED_DIR).exists()
    # Nothing that recover, reap or aggregate read was touched.
    assert observe(run).reconciled
    results = build_run_results(read_run(run))
    assert results.status is not None and results.status.verdict == "complete"
    assert results.execution.visited == 16


def _restore_copy(run: Path, slot: str) -> Path:
    copy = run / "slots" / slot / RESTORED_DIR
    copy.mkdir(mode=0o700)
    (copy / "checkpoint.json").write_bytes(b"{}")
    return copy


@pytest.mark.parametrize("unproven", [
    ("UPDATE launches SET exited_ns = NULL WHERE slot = ?", "no exit record"),
    ("UPDATE launches SET exit_status = NULL WHERE slot = ?", "never reaped"),
    ("INSERT INTO containments (launch_id, cause, started_ns) SELECT launch_id,"
     " 'worker_timeout', 1 FROM launches WHERE slot = ?", "an unfinished episode"),
    ("INSERT INTO containments (launch_id, cause, started_ns, finished_ns, result) SELECT"
     " launch_id, 'worker_timeout', 1, 2, 'unreconciled' FROM launches WHERE slot = ?",
     "an episode ended unreconciled"),
    ("DELETE FROM receipts WHERE slot = ?", "no journaled receipt"),
], ids=lambda case: case[1])
def test_a_slot_not_proven_over_keeps_its_copy(contained_run: Path, tmp_path: Path,
                                               unproven: tuple[str, str]) -> None:
    run = Path(shutil.copytree(contained_run, tmp_path / "run"))
    ((slot,),) = _rows(run, "SELECT slot FROM launches WHERE kind = 'probe' ORDER BY"
                            " launch_id DESC LIMIT 1")
    copy = _restore_copy(run, str(slot))
    with JournalReader(run) as journal:  # proven over as it is: the copy would go
        assert discard_restored_copy(journal, str(slot), copy.parent) is not None
    copy = _restore_copy(run, str(slot))
    _write(run, unproven[0], slot)
    with JournalReader(run) as journal:
        assert discard_restored_copy(journal, str(slot), copy.parent) is None
    assert (copy / "checkpoint.json").read_bytes() == b"{}"  # untouched: evidence


def test_a_slot_that_never_launched_is_left_alone(contained_run: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(contained_run, tmp_path / "run"))
    ((slot,),) = _rows(run, "SELECT slot FROM launches WHERE kind = 'probe' LIMIT 1")
    copy = _restore_copy(run, str(slot))
    _write(run, "DELETE FROM launches WHERE slot = ?", slot)
    with JournalReader(run) as journal:
        assert discard_restored_copy(journal, str(slot), copy.parent) is None
    assert copy.is_dir()


def test_the_removal_never_follows_a_planted_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    slot = tmp_path / "slot"
    copy = slot / RESTORED_DIR
    (copy / "sub").mkdir(parents=True)
    (copy / "checkpoint.json").write_text("{}")
    os.symlink(outside, copy / "dir-link")
    os.symlink(outside / "precious", copy / "sub" / "file-link")
    os.mkfifo(copy / "fifo")
    (copy / "readonly").mkdir()
    (copy / "readonly" / "inside").write_text("x")
    os.chmod(copy / "readonly", 0o500)
    fd = os.open(slot, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removal = remove_at(fd, RESTORED_DIR)
    finally:
        os.close(fd)
    assert removal.failures == 0 and removal.entries == 8 and removal.bytes > 0
    assert not copy.exists() and slot.is_dir()
    assert (outside / "precious").read_text() == "keep me"
    # The whole copy replaced by a link: the link goes, never what it points to.
    os.symlink(outside, copy)
    fd = os.open(slot, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert remove_at(fd, RESTORED_DIR).failures == 0
    finally:
        os.close(fd)
    assert not os.path.lexists(copy) and (outside / "precious").read_text() == "keep me"


def test_a_tree_too_deep_is_counted_never_raised(tmp_path: Path) -> None:
    slot = tmp_path / "slot"
    deep = slot / RESTORED_DIR
    for _ in range(MAX_REMOVAL_DEPTH + 1):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (slot / RESTORED_DIR / "shallow").write_text("x")
    fd = os.open(slot, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removal = remove_at(fd, RESTORED_DIR)
    finally:
        os.close(fd)
    assert removal.failures == 1
    assert deep.is_dir() and not (slot / RESTORED_DIR / "shallow").exists()
    # Exactly at the bound it all goes.
    at_bound = tmp_path / "bound"
    chain = at_bound / RESTORED_DIR
    for _ in range(MAX_REMOVAL_DEPTH):
        chain = chain / "d"
    chain.parent.mkdir(parents=True)
    chain.write_text("leaf")
    fd = os.open(at_bound, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removal = remove_at(fd, RESTORED_DIR)
    finally:
        os.close(fd)
    assert removal.failures == 0 and not (at_bound / RESTORED_DIR).exists()
