"""The controller SIGKILLed at each distinct journal write point of a small faux pilot
(and, in the long run, at every write, before and after its commit). After each crash:

* ``recover`` tells the truth: not reconciled while a launch has no recorded end;
* ``reap`` leaves nothing of the run alive (no process carries any launch marker), and
  restores every receipt copy the crash kept from being published, byte for byte;
* ``aggregate`` either refuses with a fixed code or counts every slot at most once, and
  its spend is exactly the journal's;
* T never exceeds C (settled plus retained, from the journal's holds);
* the faux authorization, once consumed, can never be consumed again.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from efold_pilot_kit import small_registration
from reliability_kit import LONG

from efold.controller.processes.marker import markers_by_process
from efold.controller.processes.proctable import scan
from efold.controller.rundirs.aggregate import read_run, run_reports
from efold.controller.rundirs.reap import reap
from efold.controller.rundirs.recovery import observe
from efold.errors import EfoldError

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "crashing_controller.py"
MODES = ("none", "prep-survivor", "kill-after-admit", "halt", "absurd-usage")


def _controller(tmp: Path, mode: str, crash_at: int, when: str) -> tuple[Path, Path, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    run, log, auth = tmp / "run", tmp / "writes.log", tmp / "auth.json"
    subprocess.run([sys.executable, str(SCRIPT), str(run), mode, str(crash_at), when,
                    str(log), str(auth)], timeout=300, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return run, log, auth


def _writes(log: Path) -> list[tuple[int, str]]:
    """Each write as (index, point): the record method, its caller and the run's phase
    (checkpoints are prepared before the first probe slot is assigned)."""
    out: list[tuple[int, str]] = []
    phase = "prep"
    for line in log.read_text().splitlines():
        i, method, caller = line.split()
        if (method, caller) == ("record_assignment", "run_probe"):
            phase = "probe"
        out.append((int(i), f"{phase}:{method}<-{caller}"))
    return out


def _points() -> list[tuple[str, int, str]]:
    """Census runs (no crash), then the crash points: every distinct write point (a
    record method, its caller and the phase) at its first occurrence in the first mode that has
    it, and the last write of the clean run; the long run takes every write of every
    mode, before and after its commit."""
    points: list[tuple[str, int, str]] = []
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            _, log, _ = _controller(Path(tmp) / mode, mode, 0, "after")
            writes = _writes(log)
            if LONG:
                points += [(mode, i, when) for i, _ in writes for when in ("after", "before")]
                continue
            for i, point in writes:
                if point not in seen:
                    seen.add(point)
                    points.append((mode, i, "after"))
            if mode == "none":
                points.append((mode, writes[-1][0], "after"))
    return points


def _shared_points() -> list[tuple[str, int, str]]:
    """The census, once per test run: every xdist worker collects the same tests only if
    they all see one census, and a census's write count varies with timing (a
    prep survivor's containment rounds). The first worker's census is shared with the
    others through a file named by the run's id (``PYTEST_XDIST_TESTRUNUID``), under a
    lock; without xdist, the census is taken here."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        return _points()
    shared = Path(tempfile.gettempdir()) / f"efold-crash-points-{run_id}.json"
    with open(shared.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shared.exists():
            return [(m, i, w) for m, i, w in json.loads(shared.read_text())]
        points = _points()
        shared.write_text(json.dumps(points))
        return points


POINTS = _shared_points()


def test_the_crash_points_cover_at_least_twenty_distinct_writes() -> None:
    assert len(POINTS) >= 20, POINTS


def _run_markers(run: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        return {m for (m,) in conn.execute("SELECT marker FROM launches") if m}


def _journaled_receipts(run: Path) -> dict[str, bytes]:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        return {slot: body for slot, body in conn.execute("SELECT slot, body FROM receipts")}


def _spend_from_journal(run: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        rows = conn.execute("SELECT state, hold_units, settled_units FROM holds").fetchall()
    return sum(settled if state == "settled" else hold for state, hold, settled in rows)


def _reuse_refused(run: Path, auth: Path) -> None:
    from efold.registry.authorization import (
        FAUX_ACCOUNT_ID,
        AuthorizationBindings,
        AuthorizationDomain,
    )
    from efold.registry.burn import consume_authorization
    from efold.registry.errors import RegistryError
    from efold.registry.lease import acquire_lease

    saved = json.loads(auth.read_text())
    bindings = msgspec.json.decode(saved["bindings"], type=AuthorizationBindings)
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(saved["key"]))
    run.rename(run.with_name("crashed"))  # a fresh run root at the very bound path
    run.mkdir(mode=0o700)
    with acquire_lease(run) as lease, pytest.raises(RegistryError) as refused:
        consume_authorization(base64.b64decode(saved["artifact"]),
                              domain=AuthorizationDomain.FAUX, trusted_keys=[key],
                              expected=bindings, account_id=FAUX_ACCOUNT_ID, lease=lease,
                              run_id="again")
    assert refused.value.code.value == "authorization_consumed"


@pytest.mark.parametrize(("mode", "crash_at", "when"), POINTS,
                         ids=[f"{m}-{i}-{w}" for m, i, w in POINTS])
def test_a_controller_killed_at_a_write_point(tmp_path: Path, mode: str, crash_at: int,
                                              when: str) -> None:
    run, log, auth = _controller(tmp_path, mode, crash_at, when)
    writes = _writes(log)
    # it died right there: at its last write, or at a batch whose nested writes follow it
    outer = [i for i, point in writes if "@batch" not in point]
    assert crash_at in (writes[-1][0], outer[-1])
    reg, _ = small_registration(roles='["native"]')
    if not (run / "journal.sqlite").exists():
        return  # killed before the journal file was created: nothing else exists
    if (crash_at, when) == (1, "before"):
        # Killed before the schema committed: an empty journal file. Nothing can have
        # been launched (every launch is journaled first); recover and reap refuse it.
        from efold.registry.errors import RegistryError

        with pytest.raises(RegistryError) as refused:
            observe(run)
        assert refused.value.code.value == "journal_invalid"
        assert {p.name for p in run.iterdir()} <= {
            ".efold-lease", "journal.sqlite", "journal.sqlite-wal", "journal.sqlite-shm"}
        return
    markers = _run_markers(run)

    report = observe(run)
    if report.unsettled_launches or report.survivors:
        assert not report.reconciled and report.verdict.startswith("NOT reconciled")
    journaled = _journaled_receipts(run)
    lost = sorted(slot for slot in journaled if not (run / "receipts" / f"{slot}.json").exists())
    assert report.lost_receipt_copies == lost  # journaled, never published: named
    if lost:
        assert not report.reconciled and "receipt copy" in report.verdict
    reaped = reap(run)
    assert reaped.reconciled, reaped.verdict
    assert reaped.restored_receipts == lost
    for slot, body in journaled.items():  # every copy, exactly the journaled bytes
        assert (run / "receipts" / f"{slot}.json").read_bytes() == body
    alive = markers_by_process(scan())
    assert not markers & set(alive.values())  # nothing of the run is alive

    spent = _spend_from_journal(run)
    assert spent <= reg.cap_units  # T <= C
    try:
        results = msgspec.json.decode(run_reports(read_run(run))["results.json"])
    except EfoldError:
        pass  # refused with a fixed code (e.g. the plan was never published)
    else:
        slots = [row["slot"] for row in results["slots"]]
        assert len(slots) == len(set(slots))
        ex = results["execution"]
        assert ex["visited"] <= ex["planned"]
        assert results["spend"]["units"] == spent if "units" in results["spend"] else True

    if auth.exists() and crash_at >= 2 and (run.parent / "run").exists():
        consumed = any(p.name.startswith(".efold") for p in run.iterdir())
        if consumed:
            _reuse_refused(run, auth)
    os.sync()
