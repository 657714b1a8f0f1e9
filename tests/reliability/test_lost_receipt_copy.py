"""A controller SIGKILLed between journaling a slot's receipt and publishing its copy.

The slot is done (it may have paid: it is never run again), so its copy is restored
from the journal: ``recover`` says NOT reconciled and names the slot, a continuation is
refused until ``reap`` has restored it, ``reap`` publishes exactly the journaled bytes,
and afterwards the run is reconciled, aggregates with no damage and continues with the
slots it never ran. What the journal cannot restore exactly is never published."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from efold.controller.rundirs.receipt_copies import lost_copies
from efold.controller.rundirs.recovery import observe

CRASHING = Path(__file__).resolve().parent / "crashing_controller.py"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args],
                          capture_output=True, text=True, timeout=300)


def _receipt_rows(run: Path) -> list[dict[str, object]]:
    uri = f"file:{run / 'journal.sqlite'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn, conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute("SELECT * FROM receipts ORDER BY slot")]


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A faux run whose controller died right after its first receipt's commit: the
    census finds that write (the batch that journals a receipt and its slot's status)."""
    tmp = tmp_path_factory.mktemp("lost")
    log = tmp / "census.log"
    subprocess.run([sys.executable, str(CRASHING), str(tmp / "census"), "none", "0",
                    "after", str(log)], check=True, capture_output=True, timeout=300)
    first = next(int(line.split()[0]) for line in log.read_text().splitlines()
                 if line.split()[1:] == ["batched", "__enter__"])
    run = tmp / "run"
    subprocess.run([sys.executable, str(CRASHING), str(run), "none", str(first), "after",
                    str(tmp / "crash.log")], capture_output=True, timeout=300, check=False)
    return run


def test_a_lost_copy_is_named_restored_exactly_and_the_run_then_continues(
        crashed: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    subprocess.run(["cp", "-a", str(crashed), str(run)], check=True)
    (row,) = _receipt_rows(run)  # the one receipt journaled before the crash
    slot, body = str(row["slot"]), row["body"]
    assert isinstance(body, bytes)
    assert not (run / "receipts" / f"{slot}.json").exists()

    seen = _cli("recover", str(run))
    assert seen.returncode == 1, seen.stdout
    assert seen.stdout.startswith("NOT reconciled") and "1 receipt copy" in seen.stdout
    assert f"reap restores them from the journal): {slot}" in seen.stdout

    copy = run / "receipts" / f"{slot}.json"
    for _ in range(2):  # the crash's own state, then a copy lost in a reconciled run
        reaped = _cli("reap", str(run))
        assert reaped.returncode == 0, reaped.stdout + reaped.stderr
        assert f"restored 1 missing receipt copy(ies) from the journal: {slot}" \
            in reaped.stdout
        assert copy.read_bytes() == body
        assert copy.stat().st_mode & 0o777 == 0o600
        assert _cli("recover", str(run)).returncode == 0
        copy.unlink()
        # Only the copy is missing now: a continuation (which holds the run's lease
        # while it checks) is refused too, naming it.
        refused = _cli("pilot", "--continue", str(run), "--json")
        assert refused.returncode == 2
        line = json.loads(refused.stdout.splitlines()[-1])
        assert line["refused"] == "run_unreconciled"
        assert "NOT reconciled: 1 receipt copy(ies) missing" in line["detail"]
    _cli("reap", str(run))
    aggregated = _cli("aggregate", str(run))
    assert aggregated.returncode == 0, aggregated.stderr
    assert "Damaged files (gone or unreadable): 0" in aggregated.stdout

    continued = _cli("pilot", "--continue", str(run), "--json")
    assert continued.returncode == 0, continued.stdout + continued.stderr
    again = _cli("reap", str(run))  # nothing left to restore, and nothing done twice
    assert "nothing to reap" in again.stdout
    assert copy.read_bytes() == body


def _damage(run: Path, slot: str, sql: str, *params: object) -> None:
    uri = f"file:{run / 'journal.sqlite'}"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn, conn:
        conn.execute(sql, (*params, slot))


@pytest.mark.parametrize("case", ["older journal", "bytes not the digest's", "name taken",
                                  "receipts/ not a directory", "no single name"])
def test_what_the_journal_cannot_restore_exactly_is_left_alone(
        crashed: Path, tmp_path: Path, case: str) -> None:
    run = tmp_path / "run"
    subprocess.run(["cp", "-a", str(crashed), str(run)], check=True)
    (row,) = _receipt_rows(run)
    slot = str(row["slot"])
    copy = run / "receipts" / f"{slot}.json"
    if case == "older journal":  # before version 4 a receipt row had no bytes
        _damage(run, slot, "UPDATE receipts SET body = NULL WHERE slot = ?")
    elif case == "bytes not the digest's":
        _damage(run, slot, "UPDATE receipts SET body = ? WHERE slot = ?", b"{}\n")
    elif case == "name taken":
        copy.mkdir()
    elif case == "receipts/ not a directory":
        shutil.rmtree(run / "receipts")
        (run / "receipts").write_bytes(b"")
    else:  # a slot id no file can be named after (only a changed journal holds one)
        _damage(run, slot, "UPDATE receipts SET slot = ? WHERE slot = ?", "../x")
    assert lost_copies(run, _receipt_rows(run)) == []
    assert observe(run).lost_receipt_copies == []
    reaped = _cli("reap", str(run))
    assert "restored" not in reaped.stdout and "Traceback" not in reaped.stderr
    if case == "name taken":
        assert copy.is_dir()
    elif case != "receipts/ not a directory":
        assert not os.path.lexists(copy)


def test_an_unreadable_receipts_directory_is_not_taken_for_lost_copies(
        crashed: Path, tmp_path: Path) -> None:
    """As an ordinary user, a ``receipts/`` this user cannot read hides whether a copy
    is there: nothing is called missing (``reap`` could not restore it anyway)."""
    if os.geteuid() == 0:
        pytest.skip("root reads a directory of any mode")
    run = tmp_path / "run"
    subprocess.run(["cp", "-a", str(crashed), str(run)], check=True)
    (run / "receipts").chmod(0)
    try:
        assert observe(run).lost_receipt_copies == []
    finally:
        (run / "receipts").chmod(0o700)


def test_an_earlier_link_with_a_missing_copy_refuses_the_continuation(
        crashed: Path, tmp_path: Path) -> None:
    """A chain's reports read every link: a copy missing in an earlier link refuses the
    next continuation until ``reap`` of that link has restored it."""
    first = tmp_path / "first"
    subprocess.run(["cp", "-a", str(crashed), str(first)], check=True)
    assert _cli("reap", str(first)).returncode == 0
    second = tmp_path / "second"  # a part of the rest: slots are left after it
    ran = _cli("pilot", "--continue", str(first), "--slots", "0:3", "--run-dir", str(second),
               "--no-progress")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (row,) = _receipt_rows(first)
    (first / "receipts" / f"{row['slot']}.json").unlink()
    refused = _cli("plan", "--continue", str(second))
    assert refused.returncode == 2
    assert f"{first} (an earlier link of the chain): 1 receipt copy(ies) missing" \
        in refused.stderr
    assert f"`efold-controller reap {first}` first" in refused.stderr
    assert _cli("reap", str(first)).returncode == 0
    assert "refused" not in _cli("plan", "--continue", str(second)).stderr
