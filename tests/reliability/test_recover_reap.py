"""A controller SIGKILLed while a hostile fold's tree is live: ``recover`` names every
process of the run (the ones reparented to init included, through the launch marker),
never says reconciled while a launch has no recorded end, says so on its first line,
and ``reap`` (the one command that acts) leaves nothing alive."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import hostile_tree
import pytest
from efold_pilot_kit import HERE, kill_controller_when

from efold.controller.rundirs.recovery import SurvivorTie, observe

CONTROLLER = """
import sys
sys.path.insert(0, {here!r})
from efold_pilot_kit import faulty_program, small_registration
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
reg, raw = small_registration(extra="concurrency = 1\\n")  # one prep child at a time
run_pilot(reg, raw, claim_run_dir({run!r}), program=faulty_program("prep-hostile", {pids!r}))
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args],
                          capture_output=True, text=True, timeout=120)


def _launch_pid(run: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        (pid,) = conn.execute("SELECT pid FROM launches ORDER BY launch_id DESC").fetchone()
    return int(pid)


@pytest.fixture
def crashed_run(tmp_path: Path):
    """A run whose controller was SIGKILLed while its prep child hung with a hostile
    tree of 6 processes (setsid, double-forked, SIGTERM ignored) around it."""
    run, pids = tmp_path / "run", str(tmp_path / "tree.pids")
    code = CONTROLLER.format(here=str(HERE), run=str(run), pids=pids)
    kill_controller_when(
        code, lambda: len(hostile_tree.recorded(pids)) >= 2 * hostile_tree.DEPTH)
    worker = _launch_pid(run)
    try:
        yield run, pids, worker
    finally:
        hostile_tree.cleanup(pids)
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_recover_names_every_process_and_reap_kills_them_all(crashed_run) -> None:
    run, pids, worker = crashed_run
    tree = hostile_tree.survivors(pids)
    assert len(tree) == 2 * hostile_tree.DEPTH

    report = observe(run)
    named = {s.pid for s in report.survivors}
    assert set(tree) | {worker} <= named  # the reparented ones too
    assert any(s.tie is SurvivorTie.MARKED for s in report.survivors)
    assert not report.reconciled

    text = _cli("recover", str(run))
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert lines[0].startswith("NOT reconciled")
    # What it says to run names this run, on the first line and the last.
    assert lines[0].endswith(f"(run `efold-controller reap {shlex.quote(str(run))}`)")
    assert lines[-1] == lines[0]
    assert observe(run).verdict.endswith("(run `efold-controller reap RUN`)")  # path-free

    reaped = _cli("reap", str(run), "--json")
    assert reaped.returncode == 0, reaped.stdout + reaped.stderr
    doc = json.loads(reaped.stdout)
    assert doc["reconciled"] is True
    assert hostile_tree.survivors(pids) == []
    after = _cli("recover", str(run))
    assert after.returncode == 0 and after.stdout.startswith("reconciled")


def test_recover_is_not_reconciled_once_the_worker_alone_has_exited(crashed_run) -> None:
    run, pids, worker = crashed_run
    os.kill(worker, signal.SIGKILL)  # the launch leader is gone; its tree is not
    deadline = time.monotonic() + 10
    while observe(run).launches[-1].proof.value == "alive" and time.monotonic() < deadline:
        time.sleep(0.05)
    report = observe(run)
    assert not report.reconciled
    assert {s.pid for s in report.survivors} >= set(hostile_tree.survivors(pids))
    assert report.unsettled_launches  # no exit record and no finished containment


def test_a_run_with_nothing_alive_is_still_unsettled_until_reaped(crashed_run) -> None:
    run, pids, worker = crashed_run
    hostile_tree.cleanup(pids)
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while observe(run).survivors and time.monotonic() < deadline:
        time.sleep(0.05)
    report = observe(run)
    assert not report.survivors and not report.reconciled
    assert "never seen to end" in report.verdict
    assert _cli("reap", str(run)).returncode == 0
    assert observe(run).reconciled


def test_reap_refuses_while_a_controller_holds_the_run(tmp_path: Path) -> None:
    from efold.registry.lease import acquire_lease

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (run / "journal.sqlite").touch(mode=0o600)  # a run directory: the lease decides
    with acquire_lease(run):
        result = _cli("reap", str(run))
    assert result.returncode == 2 and "lease_held" in result.stderr
