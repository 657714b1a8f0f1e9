"""Smaller runs: the reader restores its checkpoint in memory, so a probe slot's
directory holds nothing of it (the pristine snapshots stay in ``checkpoints/``); and
``runroot.remove_at``, which ``prune`` removes with, never follows a planted link and
never raises for what it cannot remove."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest
from efold_pilot_kit import faulty_program, small_registration

from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.aggregate import build_run_results, read_run
from efold.controller.rundirs.recovery import observe
from efold.controller.rundirs.runroot import MAX_REMOVAL_DEPTH, claim_run_dir, remove_at

_TREE = "tree"  # what remove_at is asked to remove below a directory


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


def test_a_probe_slots_directory_holds_no_copy_of_its_checkpoint(contained_run: Path) -> None:
    run = contained_run
    launched = [slot for (slot,) in _rows(run, "SELECT slot FROM launches WHERE kind = 'probe'")]
    assert len(launched) == 16
    for slot in launched:
        slot_dir = run / "slots" / str(slot)
        assert slot_dir.is_dir() and not list(slot_dir.iterdir()), slot  # private, empty
    # The controller's pristine snapshots are what every probe read.
    snapshots = list((run / "checkpoints").glob("*/snapshot/manifest.json"))
    assert snapshots
    ((result,),) = _rows(run, "SELECT result FROM containments")
    assert result == "contained"
    assert observe(run).reconciled
    results = build_run_results(read_run(run))
    assert results.status is not None and results.status.verdict == "complete"
    assert results.execution.visited == 16


def test_the_removal_never_follows_a_planted_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    slot = tmp_path / "slot"
    copy = slot / _TREE
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
        removal = remove_at(fd, _TREE)
    finally:
        os.close(fd)
    assert removal.failures == 0 and removal.entries == 8 and removal.bytes > 0
    assert not copy.exists() and slot.is_dir()
    assert (outside / "precious").read_text() == "keep me"
    # The whole copy replaced by a link: the link goes, never what it points to.
    os.symlink(outside, copy)
    fd = os.open(slot, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert remove_at(fd, _TREE).failures == 0
    finally:
        os.close(fd)
    assert not os.path.lexists(copy) and (outside / "precious").read_text() == "keep me"


def test_a_tree_too_deep_is_counted_never_raised(tmp_path: Path) -> None:
    slot = tmp_path / "slot"
    deep = slot / _TREE
    for _ in range(MAX_REMOVAL_DEPTH + 1):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (slot / _TREE / "shallow").write_text("x")
    fd = os.open(slot, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removal = remove_at(fd, _TREE)
    finally:
        os.close(fd)
    assert removal.failures == 1
    assert deep.is_dir() and not (slot / _TREE / "shallow").exists()
    # Exactly at the bound it all goes.
    at_bound = tmp_path / "bound"
    chain = at_bound / _TREE
    for _ in range(MAX_REMOVAL_DEPTH):
        chain = chain / "d"
    chain.parent.mkdir(parents=True)
    chain.write_text("leaf")
    fd = os.open(at_bound, os.O_RDONLY | os.O_DIRECTORY)
    try:
        removal = remove_at(fd, _TREE)
    finally:
        os.close(fd)
    assert removal.failures == 0 and not (at_bound / _TREE).exists()
