"""What the cluster tests share: a small campaign, and waits on a cluster run and its
shard runs as they appear on this machine."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
from efold_pilot_kit import journal_rows

from efold.controller.rundirs.aggregate import journal_money
from efold.controller.rundirs.cluster_run import CLUSTER_NAME, ClusterManifest, shard_scratch_path
from efold.registry.lease import LeaseState, probe_lease

CLI = [sys.executable, "-m", "efold.controller"]


def manifest(run: Path) -> ClusterManifest:
    return msgspec.json.decode((run / CLUSTER_NAME).read_bytes(), type=ClusterManifest)


CAMPAIGN = """
name = "cluster-small"
suite = "original"
roles = ["native", "pack"]
probe_limit = {probes}
selection_seed = 7
schedule_seed = 7
cap_usd = "{cap}"
{extra}
"""
RMAX_UNITS = 78_400_000  # the faux reader's Rmax (3.92 USD)


def campaign(tmp: Path, *, probes: int = 2, cap: str = "60.00", extra: str = "") -> Path:
    path = tmp / "campaign.toml"
    path.write_text(CAMPAIGN.format(probes=probes, cap=cap, extra=extra))
    return path


def started(runs: Path, deadline: float) -> tuple[Path, ClusterManifest]:
    """The cluster run under ``runs`` once its manifest is published, and the manifest."""
    while not list(runs.glob("*-cluster-*/cluster.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    run = next(runs.glob("*-cluster-*/cluster.json")).parent
    return run, manifest(run)


def first_receipt(shard_run: Path, deadline: float) -> None:
    while not list(shard_run.glob("receipts/*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(shard_run.glob("receipts/*.json")), f"{shard_run} never started"


def shard_money(run_dir: str) -> int:
    """A shard run's settled units, from its own journal (every caller's holds)."""
    rows = journal_rows(Path(run_dir), "SELECT state, hold_units, settled_units, "
                        "partial_units FROM holds")
    holds = [dict(zip(("state", "hold_units", "settled_units", "partial_units"), r,
                      strict=True)) for r in rows]
    return journal_money(holds).settled_units


def ended(run_dir: str, deadline: float) -> None:
    """Wait until the shard run's controller has let go of its lease and its keeper has
    removed its scratch directory (the keeper's last act)."""
    scratch = shard_scratch_path(run_dir)
    while (probe_lease(run_dir).state is LeaseState.LIVE or scratch.exists()) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert probe_lease(run_dir).state is not LeaseState.LIVE, f"{run_dir} still running"
    assert not scratch.exists(), f"{scratch} left behind: {_scratch_state(scratch)}"


def _scratch_state(scratch: Path) -> str:
    """What is in a scratch directory left behind, and every live process that names it
    (its keeper) with where it waits: what a failure needs to say which keeper path ran."""
    names = sorted(p.name for p in scratch.iterdir()) if scratch.exists() else []
    holders = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if str(scratch) in cmdline:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                holders.append(f"pid {proc.name} state {stat[0]} ppid {stat[1]} "
                               f"wchan {(proc / 'wchan').read_text()}: {cmdline[:200]}")
        except OSError:
            continue
    return f"files {names}; processes {holders or 'none'}"


def launch(address: str, campaign: Path, runs: Path) -> subprocess.Popen[str]:
    """A faux ``cluster pilot`` of ``campaign`` over three shards, running (its output
    piped): the fault tests kill or interrupt it mid-run."""
    return subprocess.Popen([*CLI, "cluster", "pilot", "--faux", "--ray", address,
                             "--campaign", str(campaign), "--runs", str(runs), "--shards", "3",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def accounted(results: dict[str, Any]) -> int:
    """The planned slots a cluster run's results account for: visited (a slot left in
    flight included), missing, and those whose receipt was journaled but whose copy a
    SIGKILL between the two writes left unpublished (named as damaged). A slot is never
    counted nowhere."""
    status, execution = results["status"], results["execution"]
    return (sum(s["visited"] for s in status["shards"]) + status["missing_slots"]
            + execution["receipt_copies_missing"])
