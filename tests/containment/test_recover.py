"""``efold-controller recover``: observation only, after a real controller was
SIGKILLed in the middle of a containment (test f), and on a clean run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from proc_harness import PROGRAMS, Run, alive, kill_proven, make_assignment, wait_until, welcome

from efold.controller.processes.launcher import supervise
from efold.controller.processes.proctable import read_entry
from efold.registry.journal import JournalReader


def recover(run_dir: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "efold.controller", "recover", run_dir, *extra],
        capture_output=True, text=True, timeout=60,
    )


def _rows(run_dir: str, table: str) -> list[dict]:  # type: ignore[type-arg]
    with JournalReader(run_dir) as reader:
        return reader.rows(table)


def test_f_controller_killed_mid_containment_recover_reports_survivors_and_signals_nothing(
    tmp_path: Path,
) -> None:
    controller = subprocess.Popen(
        [sys.executable, str(PROGRAMS / "controller_script.py"), str(tmp_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    run_dir = str(tmp_path / "run")
    members: list[dict] = []  # type: ignore[type-arg]
    try:
        # Wait until the controller journaled the members and sent its SIGTERM.
        def terminated() -> bool:
            try:
                return bool(_rows(run_dir, "signals"))
            except Exception:
                return False
        assert wait_until(terminated, timeout=30), controller.stderr
        controller.kill()
        controller.wait()
        members = _rows(run_dir, "members")
        signals_before = _rows(run_dir, "signals")
        assert [m["role"] for m in members] == ["leader", "descendant"]
        leader, grandchild = members
        # Both ignore SIGTERM; the leader still exits on its own, because its dead
        # controller reads as EOF on the channel. The grandchild has no such link.
        assert wait_until(lambda: not alive(leader["pid"], leader["start_time"]), timeout=10)
        assert alive(grandchild["pid"], grandchild["start_time"])

        out = recover(run_dir, "--json")
        assert out.returncode == 1, out.stderr  # survivors: not reconciled
        report = json.loads(out.stdout)
        survivors = [(s["pid"], s["start_time"], s["pgid"], s["tie"]) for s in report["survivors"]]
        assert survivors == [
            (grandchild["pid"], grandchild["start_time"], grandchild["pgid"], "recorded")
        ]
        assert report["reconciled"] is False
        assert report["lease"] == "holder_dead"
        assert report["unfinished_containments"] == 1
        assert [m["proof"] for m in report["members"]] == ["exited", "alive"]
        assert "/" not in out.stdout  # content-free: no paths

        # Observation only: nothing signalled, nothing written, the survivor untouched.
        assert _rows(run_dir, "signals") == signals_before
        assert alive(grandchild["pid"], grandchild["start_time"])
        entry = read_entry(grandchild["pid"])
        assert entry is not None and entry.state != "T"
        text = recover(run_dir)
        assert text.returncode == 1 and "NOT reconciled" in text.stdout
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        for m in members:
            kill_proven(m["pid"], m["start_time"])


@pytest.mark.anyio
async def test_recover_on_a_clean_run_is_reconciled(run: Run) -> None:
    async with supervise(run.journal, make_assignment(run)) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        await handle.channel.receive(timeout=10)
        await handle.acknowledge_done()
    out = await anyio.to_thread.run_sync(lambda: recover(run.run_dir, "--json"))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["reconciled"] is True and report["survivors"] == []
    assert report["lease"] == "live"
    # It says what it rests on and what that cannot see (no cgroup membership yet).
    assert report["containment"] == "process-group"
    assert report["verdict"].startswith("reconciled: nothing of this run is alive")
    assert "dropped its launch marker cannot be seen" in report["verdict"]
    (launch,) = report["launches"]
    assert launch["exit_recorded"] and launch["exit_status"] == 0
    assert launch["proof"] == "exited"


def test_recover_refuses_a_directory_without_a_journal(tmp_path: Path) -> None:
    out = recover(str(tmp_path))
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"refused: run_not_found ({tmp_path} is not a run directory: no journal.sqlite)")


def test_recover_never_signals_by_construction() -> None:
    """The recovery modules hold no path to a signal: no kill, no pidfd_send_signal."""
    root = Path(__file__).resolve().parents[2]
    for rel in ("controller/rundirs/recovery.py", "controller/commands/recover.py"):
        source = (root / rel).read_text()
        for forbidden in ("send_signal", "os.kill", "killpg", "signal_pidfd", "launch_worker",
                          "JournalWriter", "contain("):
            assert forbidden not in source, (rel, forbidden)
