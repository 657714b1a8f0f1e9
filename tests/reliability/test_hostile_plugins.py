"""Hostile plugin folds, as an external command and as an installed entry point: each
plants a tree of processes that ignore SIGTERM, call ``setsid`` and double-fork a few
levels, then hangs (or answers and leaves the tree behind). Under ``plan``,
``preflight`` and ``pilot`` no fold code runs in the controller, and nothing of the tree
is alive at the end; with the controller SIGKILLed mid-attack, ``recover`` names it and
``reap`` kills it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hostile_tree
import pytest
from efold_pilot_kit import kill_controller_when
from plugin_kit import installed_plugin

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, write_registration
from efold.controller.rundirs.recovery import observe

PILOT_DIR = Path(hostile_tree.__file__).resolve().parent

CAMPAIGN = """
name = "hostile"
suite = "original"
roles = ["{role}"]
probe_limit = 1
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
[deadlines]
prep_seconds = 4.0
grace_seconds = 0.5
[role.{role}]
{fold}
"""

ENTRY_POINT = """
import sys
sys.path.insert(0, {pilot!r})
import hostile_tree

class Fold:
    name = {name!r}

    def build(self, prefix):
        hostile_tree.plant({pids!r})
        {after}
"""


@contextmanager
def hostile_fold(kind: str, tmp: Path) -> Iterator[tuple[str, str]]:
    """(role name, [role] table body) of a hostile fold; the tree's pid file is
    ``tmp/tree.pids`` (its records relayed: the fold runs isolated)."""
    pids = str(tmp / "tree.pids")
    with hostile_tree.relay(pids):
        if kind.startswith("command"):
            mode = "answer" if kind.endswith("answer") else "hang"
            argv = [sys.executable, str(PILOT_DIR / "hostile_tree.py"), str(tmp), mode]
            yield "hostile-cmd", f"command = {argv!r}\ntimeout_seconds = 3.0"
            return
        after = "return None" if kind.endswith("answer") else "hostile_tree._hang()"
        name = "hostile-ep"
        source = ENTRY_POINT.format(pilot=str(PILOT_DIR), name=name, pids=pids, after=after)
        with installed_plugin(name, source):
            yield name, f'arm = "{name}"'


def _registration(tmp: Path, role: str, fold: str) -> tuple[Path, str]:
    text = CAMPAIGN.format(role=role, fold=fold)
    reg = compute_registration(parse_campaign(text), text.encode())
    return write_registration(reg, tmp / "registered")


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args],
                          capture_output=True, text=True, timeout=timeout)


def _wait_gone(pids: str, seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while hostile_tree.survivors(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return hostile_tree.survivors(pids)


KINDS = ["command-hang", "command-answer", "entry-point-hang", "entry-point-answer"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["plan", "preflight", "pilot"])
def test_a_hostile_fold_leaves_nothing_alive(tmp_path: Path, kind: str, command: str) -> None:
    pids = str(tmp_path / "tree.pids")
    try:
        with hostile_fold(kind, tmp_path) as (role, fold):
            path, sha = _registration(tmp_path, role, fold)
            args = [command, "--registration", str(path), "--sha256", sha]
            if command == "pilot":
                args = ["pilot", "--faux", "--registration", str(path), "--sha256", sha,
                        "--run-dir", str(tmp_path / "run"), "--no-progress"]
            started = time.monotonic()
            result = _cli(*args)
            elapsed = time.monotonic() - started
        assert "Traceback" not in result.stderr, result.stderr
        assert hostile_tree.recorded(pids), "the hostile fold never ran"
        # Every build ran in a launched child (it carries a launch marker), never in
        # the controller process.
        assert "none" not in hostile_tree.builders(pids)
        assert _wait_gone(pids) == [], "processes of the hostile fold survived"
        assert elapsed < 120  # the watchdog bounds a fold that never returns
        if command == "pilot":
            report = observe(tmp_path / "run")
            assert report.reconciled, report.verdict
    finally:
        hostile_tree.cleanup(pids)


CRASHING_PILOT = """
import sys
from efold.controller.pilot.pilot import run_pilot
from efold.controller.campaigns.registration import load_registration
from efold.controller.rundirs.runroot import claim_run_dir
loaded = load_registration({path!r}, {sha!r})
run_pilot(loaded.registration, loaded.data, claim_run_dir({run!r}))
"""


@pytest.mark.parametrize("kind", ["command-hang", "entry-point-hang"])
def test_a_controller_killed_mid_attack_then_recover_and_reap(tmp_path: Path,
                                                              kind: str) -> None:
    pids = str(tmp_path / "tree.pids")
    run = tmp_path / "run"
    try:
        with hostile_fold(kind, tmp_path) as (role, fold):
            path, sha = _registration(tmp_path, role, fold)
            code = CRASHING_PILOT.format(path=str(path), sha=sha, run=str(run))
            kill_controller_when(
                code, lambda: len(hostile_tree.recorded(pids)) >= 2 * hostile_tree.DEPTH)
            report = observe(run)
            assert not report.reconciled
            named = {s.pid for s in report.survivors}
            assert set(hostile_tree.survivors(pids)) <= named
            reaped = _cli("reap", str(run))
            assert reaped.returncode == 0, reaped.stdout + reaped.stderr
            assert _wait_gone(pids) == []
            assert observe(run).reconciled
    finally:
        hostile_tree.cleanup(pids)
