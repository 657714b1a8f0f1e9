"""What a controller stopped in its first moments leaves, and ``prune`` removing it:

- a *bare claim*: a directory holding nothing but its lease (and the journal it was
  still creating, ``journal.sqlite.creating``), so nothing was recorded or launched;
- a run *stopped before its plan*: a journal, no ``plan.json`` (absent, not damaged),
  reconciled, nothing launched.

Each is removed like a run, under its lease held shared: never while the controller
that claimed it lives. A directory holding anything else, or nothing at all, is not
efold's to remove and stays. Real controllers killed at random moments of their start
leave nothing else behind."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from efold_pilot_kit import small_registration

from efold.controller.cli import main
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs import runroot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.controller.rundirs.suggest import suggest_prune
from efold.identity import current_identity
from efold.registry.journal import CREATING_NAME, JOURNAL_NAME, JournalWriter
from efold.registry.lease import LEASE_NAME, acquire_lease

CLI = [sys.executable, "-m", "efold.controller"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, ["prune", *args], terminal_width=200)


def _claim(run: Path, *extra: str) -> Path:
    """A directory claimed by a controller that stopped before its journal: its lease
    released, and ``extra`` files beside it."""
    run.mkdir(mode=0o700)
    acquire_lease(run).release()
    for name in extra:  # private, as efold makes them, whatever the umask
        fd = os.open(run / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"partial")
        os.close(fd)
    return run


def _before_plan(run: Path) -> Path:
    """A run whose controller stopped after its journal's first epoch, before its plan."""
    run.mkdir(mode=0o700)
    with acquire_lease(run) as lease:
        journal = JournalWriter(run, lease)
        journal.record_epoch(current_identity())
        journal.close()
    return run


def _rows(result: Result) -> dict[str, dict[str, object]]:
    return {row["name"]: row for row in json.loads(result.stdout)["runs"]}


def test_prune_removes_the_leftovers_of_a_stopped_start_and_nothing_else(
        tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir(mode=0o700)
    _claim(root / "claimed")
    _claim(root / "creating", CREATING_NAME, f"{CREATING_NAME}-wal")
    _before_plan(root / "before-plan")
    _claim(root / "with-notes", "notes.txt")  # something else: not ours to remove
    (root / "empty").mkdir()  # nothing to tell whose it is by
    damaged = _before_plan(root / "damaged-plan")
    (damaged / "plan.json").write_text("{")  # damaged is not absent: kept, as evidence

    listed = invoke(str(root), "--dry-run", "--json")
    assert listed.exit_code == 1, listed.output  # the damaged run is kept
    rows = _rows(listed)
    assert {name: (row["status"], row["action"]) for name, row in rows.items()} == {
        "claimed": ("claimed, nothing recorded", "remove"),
        "creating": ("claimed, nothing recorded", "remove"),
        "before-plan": ("stopped before its plan", "remove"),
        "damaged-plan": ("refused: run_records_invalid", "keep"),
    }
    notes = {note["name"]: note["why"] for note in json.loads(listed.stdout)["notes"]}
    assert set(notes) == {"with-notes", "empty"}

    done = invoke(str(root), "--yes", "--json")
    assert done.exit_code == 1, done.output
    assert {n: r["action"] for n, r in _rows(done).items()} == {
        "claimed": "removed", "creating": "removed", "before-plan": "removed",
        "damaged-plan": "keep"}
    assert sorted(os.listdir(root)) == ["damaged-plan", "empty", "with-notes"]
    assert sorted(os.listdir(root / "with-notes")) == [LEASE_NAME, "notes.txt"]


def test_a_claim_whose_controller_lives_is_kept_until_it_is_gone(tmp_path: Path) -> None:
    """Another process holds the claim's lease (a controller still starting): kept,
    ``prune_run_live``; once that process is gone, removed."""
    root = tmp_path / "runs"
    root.mkdir(mode=0o700)
    run = root / "starting"
    run.mkdir(mode=0o700)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from efold.registry.lease import acquire_lease\n"
         f"lease = acquire_lease({str(run)!r})\n"
         "print('held', flush=True)\ntime.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        kept = invoke(str(root), "--yes")
        assert kept.exit_code == 1, kept.output
        assert ("kept: prune_run_live (starting: the controller that claimed it is live "
                "and still starting)") in kept.output
        assert run.is_dir()
    finally:
        holder.kill()
        holder.wait()
    gone = invoke(str(root), "--yes")
    assert gone.exit_code == 0, gone.output
    assert not run.exists()


def test_the_selection_applies_to_claims_as_to_runs_except_keep(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir(mode=0o700)
    _claim(root / "claimed")
    # --keep spares the newest runs: a claim is no run, so it is still a candidate.
    assert _rows(invoke(str(root), "--keep", "5", "--dry-run", "--json"))["claimed"][
        "action"] == "remove"
    # --older-than dates a claim by its directory's mtime: a fresh one is spared.
    assert _rows(invoke(str(root), "--older-than", "1h", "--dry-run", "--json")) == {}
    # --run names it, as the message of recover and of an interrupted pilot do.
    named = invoke(str(root), "--run", str(root / "claimed"), "--dry-run", "--json")
    assert _rows(named)["claimed"]["action"] == "remove", named.output
    # --slots-only touches runs' slots/ alone: a claim has none, and is only noted.
    slots = json.loads(invoke(str(root), "--slots-only", "--dry-run", "--json").stdout)
    assert slots["runs"] == [] and [n["name"] for n in slots["notes"]] == ["claimed"]


def test_only_a_private_claim_of_plain_files_is_one(tmp_path: Path) -> None:
    """A claim's names holding a directory (a user's files inside), a lease that is a
    FIFO or group-writable, or a claim directory others may write: none is a bare claim,
    each is left alone (as its files are), and listed as a note."""
    root = tmp_path / "runs"
    root.mkdir(mode=0o700)
    (root / "lease-dir").mkdir(mode=0o700)
    (root / "lease-dir" / LEASE_NAME).mkdir(mode=0o700)
    (root / "lease-dir" / LEASE_NAME / "thesis.txt").write_text("mine")
    _claim(root / "creating-dir")
    (root / "creating-dir" / CREATING_NAME).mkdir()
    (root / "creating-dir" / CREATING_NAME / "user.txt").write_text("mine")
    (root / "fifo").mkdir(mode=0o700)
    os.mkfifo(root / "fifo" / LEASE_NAME, 0o600)
    _claim(root / "shared-lease")
    os.chmod(root / "shared-lease" / LEASE_NAME, 0o664)
    _claim(root / "shared-dir")
    os.chmod(root / "shared-dir", 0o775)
    before = sorted(os.listdir(root))
    done = invoke(str(root), "--yes", "--json")
    assert done.exit_code == 0, done.output
    assert _rows(done) == {}
    assert sorted(n["name"] for n in json.loads(done.stdout)["notes"]) == before
    assert sorted(os.listdir(root)) == before
    assert (root / "lease-dir" / LEASE_NAME / "thesis.txt").read_text() == "mine"
    assert (root / "creating-dir" / CREATING_NAME / "user.txt").read_text() == "mine"


def test_a_lease_that_names_no_holder_yet_is_kept_for_a_minute(tmp_path: Path) -> None:
    """A lease file is created, then locked, then its holder written: a claim whose
    lease names no holder may be a controller between those steps. Kept while the file
    is younger than a minute; older, it was killed there, and the claim goes."""
    root = tmp_path / "runs"
    root.mkdir(mode=0o700)
    run = root / "taking"
    run.mkdir(mode=0o700)
    lease = run / LEASE_NAME
    os.close(os.open(lease, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    kept = invoke(str(root), "--yes")
    assert kept.exit_code == 1, kept.output
    assert "kept: prune_run_live (taking: its lease names no holder yet" in kept.output
    old = time.time() - 120
    os.utime(lease, (old, old))
    gone = invoke(str(root), "--yes")
    assert gone.exit_code == 0, gone.output
    assert not run.exists()


def test_keep_spares_runs_with_a_plan_only(tmp_path: Path) -> None:
    """``--keep 1`` spares the newest run that has a plan: a run stopped before its
    plan, newer, is no run to keep, and goes."""
    root = tmp_path / "runs"
    reg, raw = small_registration()
    run_pilot(reg, raw, claim_run_dir(root / "complete"))
    time.sleep(0.01)
    _before_plan(root / "before-plan")
    rows = _rows(invoke(str(root), "--keep", "1", "--dry-run", "--json"))
    assert {name: row["action"] for name, row in rows.items()} == {"before-plan": "remove"}


def test_a_claim_interrupted_before_its_lease_is_removed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A Ctrl-C between the claim and its lease removes the directory claimed."""
    def interrupted(run: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runroot, "acquire_lease", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runroot.claim_leased_run_dir(tmp_path / "runs" / "run")
    assert os.listdir(tmp_path / "runs") == []


def test_the_suggested_prune_names_the_real_parent(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """From inside the claim, ``recover .`` suggests the prune of its real path."""
    run = _claim(tmp_path / "run")
    monkeypatch.chdir(run)
    assert suggest_prune(".") == f"efold-controller prune {tmp_path} --run {run}"


def _kill_in_start(root: Path, rng: random.Random) -> None:
    """A real ``pilot --faux`` SIGKILLed at a random moment soon after it claimed its
    run directory (its journal, plan and first launches follow within about a second)."""
    child = subprocess.Popen([*CLI, "pilot", "--faux", "--no-progress", "--runs", str(root)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             cwd=root.parent)
    before = set(os.listdir(root)) if root.exists() else set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        if root.exists() and set(os.listdir(root)) - before:
            break
        time.sleep(0.001)
    time.sleep(rng.uniform(0, 1.0))
    child.send_signal(signal.SIGKILL)
    child.wait()


def test_prune_and_reap_leave_nothing_of_controllers_killed_in_their_start(
        tmp_path: Path) -> None:
    """Controllers SIGKILLed at random moments of their start leave bare claims, runs
    stopped before their plan and runs with launches; ``prune`` removes the first two,
    keeps the others unreconciled until ``reap``, then removes them too. Only empty
    directories (a kill between the claim and the lease) are left, as notes."""
    root = tmp_path / "runs"
    rng = random.Random(20261207)
    for _ in range(10):
        _kill_in_start(root, rng)
    left = sorted(n for n in os.listdir(root) if not n.startswith("."))
    first = invoke(str(root), "--yes", "--json")
    assert first.exit_code in (0, 1), first.output
    for name, row in _rows(first).items():
        assert row["action"] == "removed" or row["code"] == "prune_unreconciled", (name, row)
        if row["action"] != "removed":
            reaped = CliRunner().invoke(main, ["reap", str(root / name)])
            assert reaped.exit_code == 0, reaped.output
    second = invoke(str(root), "--yes", "--json")
    assert second.exit_code == 0, second.output
    # efold's own records beside the runs (``.efold-*``: the faux burns) stay.
    remaining = sorted(n for n in os.listdir(root) if not n.startswith("."))
    assert all(not os.listdir(root / name) for name in remaining), (left, remaining)
    notes = json.loads(second.stdout)["notes"]
    assert [n["name"] for n in notes] == remaining
    assert not any((root / name / JOURNAL_NAME).exists() for name in remaining)
