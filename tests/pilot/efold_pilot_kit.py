"""Helpers for the pilot tests: small registered campaigns, the faulty-child program."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import (
    Registration,
    compute_registration,
    encode_registration,
)
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir

HERE = Path(__file__).resolve().parent

SMALL = """
name = "small"
suite = "original"
roles = ["native", "pack"]
probe_limit = 2
selection_seed = 7
schedule_seed = 7
cap_usd = "{cap}"
"""


# The concurrency of every small campaign that does not set its own: 1, or N under
# ``EFOLD_TEST_CONCURRENCY=N`` (the reliability suite's second pass runs the same faults
# with N probe children in flight: docs/reliability.md).
TEST_CONCURRENCY = int(os.environ.get("EFOLD_TEST_CONCURRENCY", "1"))


def small_registration(cap: str = "60.00", roles: str | None = None, *, extra: str = "",
                       ) -> tuple[Registration, bytes]:
    """The small campaign; ``extra`` is TOML appended to it (e.g. a ``[deadlines]`` table)."""
    if TEST_CONCURRENCY != 1 and "concurrency =" not in extra:
        extra = f"concurrency = {TEST_CONCURRENCY}\n" + extra
    text = SMALL.format(cap=cap) + extra
    if roles is not None:
        text = text.replace('roles = ["native", "pack"]', f"roles = {roles}")
    raw = text.encode()
    reg = compute_registration(parse_campaign(text), raw)
    return reg, encode_registration(reg)


def finished_small_run(base: Path) -> Path:
    """The small campaign run to its end in ``base/run``: the run the read-side tests
    copy and then damage."""
    reg, raw = small_registration()
    run_pilot(reg, raw, claim_run_dir(base / "run"))
    return base / "run"


# A controller process whose first probe child consumes a hold and hangs: the tests that
# SIGKILL a controller mid-request run it with ``python -c``.
HANGING_PILOT = """
import sys
sys.path.insert(0, {here!r})
from efold_pilot_kit import faulty_program, small_registration
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
reg, raw = small_registration()
run_pilot(reg, raw, claim_run_dir({run!r}), program=faulty_program("hang", {marker!r}))
"""


def journal_rows(run: Path, sql: str) -> list[tuple[object, ...]]:
    """The rows of ``sql`` over the run's journal, read-only; [] while it cannot be read
    (not yet created, or its schema not yet committed)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
            return list(conn.execute(sql))
    except sqlite3.Error:
        return []


def journal_money(run: Path) -> tuple[int, int, int]:
    """(settled, retained, open) units, summed straight from the journal's holds."""
    settled = retained = held = 0
    for state, hold, settled_units, partial in journal_rows(
            run, "SELECT state, hold_units, settled_units, partial_units FROM holds"):
        assert isinstance(hold, int)
        if state == "settled":
            assert isinstance(settled_units, int)
            settled += settled_units
        elif state in ("active", "consumed"):
            held += hold
        else:
            retained += max(hold, partial if isinstance(partial, int) else 0)
    return settled, retained, held


def alive(pid: int) -> bool:
    """Whether ``pid`` names a live process (a zombie is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def hold_consumed(run: Path) -> bool:
    """Whether the run's journal shows a consumed hold (a request in flight)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
            row = conn.execute("SELECT COUNT(*) FROM holds WHERE state = 'consumed'").fetchone()
    except sqlite3.Error:
        return False
    return bool(row and row[0])


def kill_controller_when(code: str, ready: Callable[[], bool], seconds: float = 60) -> None:
    """Run a controller (``python -c code``) and SIGKILL it once ``ready()`` holds; it
    must not end on its own first."""
    import subprocess
    import time

    controller = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + seconds
        while not ready():
            assert controller.poll() is None, "the controller ended before the fault point"
            assert time.monotonic() < deadline, "timed out waiting for the fault point"
            time.sleep(0.02)
    finally:
        controller.kill()
        controller.wait()


def faulty_program(mode: str, marker: Path) -> tuple[str, ...]:
    return (sys.executable, "-I", str(HERE / "faulty_child.py"), mode, str(marker))
