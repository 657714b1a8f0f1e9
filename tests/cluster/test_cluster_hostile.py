"""Hostile operator faults on a cluster run (issue 44 review): processes an operator can
kill that the cluster must still answer for. Real processes on a local Ray cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from efold_cluster_kit import CLI, campaign, first_receipt, launch, started
from efold_pilot_kit import journal_rows

from efold.controller.rundirs.cluster_run import shard_scratch_path
from efold.errors import Code
from efold.registry.lease import LeaseState, probe_lease


def _keeper_of(run_dir: str) -> int:
    """The pid of the shard keeper whose scratch directory is ``run_dir``'s."""
    scratch = str(shard_scratch_path(run_dir)).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"efold.controller.cluster.shard_keeper" in argv and scratch in argv:
            return int(entry)
    raise AssertionError(f"no keeper for {run_dir}")


def test_a_killed_keeper_does_not_hide_its_controller_from_an_interruption(
        ray_cluster: Any, tmp_path: Path) -> None:
    """SIGKILL of one shard's keeper mid-run, then SIGTERM to the cluster controller:
    that shard's controller (running on, its keeper gone) is interrupted too and has
    ended before the cluster controller exits (never left spending after the operator
    stopped the run); the shard reads interrupted, not lost."""
    # Long enough that no shard ends on its own before the interruption (~20 s each).
    runs = tmp_path / "runs"
    cli = launch(ray_cluster.address, campaign(tmp_path, probes=13, cap="300.00",
                                               extra="repeats = 6\nconcurrency = 1"), runs)
    try:
        deadline = time.monotonic() + 120
        run, manifest = started(runs, deadline)
        for placed in manifest.shards:
            first_receipt(Path(placed.run_dir), deadline)
        victim = manifest.shards[0]
        os.kill(_keeper_of(victim.run_dir), signal.SIGKILL)
        time.sleep(2.0)  # the cluster controller polls the shard (every 0.5 s)
        assert probe_lease(victim.run_dir).state is LeaseState.LIVE  # it runs on
        cli.send_signal(signal.SIGTERM)
        out, err = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert "Traceback" not in out + err, err
    assert cli.returncode == 143, out + err
    # Ended when the cluster controller did: nothing of the run is left running.
    assert probe_lease(victim.run_dir).state is not LeaseState.LIVE, out
    stops = journal_rows(Path(victim.run_dir), "SELECT code FROM stops")
    assert (Code.INTERRUPTED.value,) in stops, stops
    line = json.loads(out.strip().splitlines()[-1])
    assert line["shards"]["1"] == "interrupted", line
    # Its keeper is gone, so nobody else removes its scratch: read back, it is removed.
    assert not shard_scratch_path(victim.run_dir).exists()
    recover = subprocess.run([*CLI, "recover", str(run)], capture_output=True, text=True,
                             timeout=120)
    assert recover.returncode == 0 and recover.stdout.startswith("reconciled"), recover.stdout


def test_a_link_planted_at_one_shards_path_refuses_that_shard_only(ray_cluster: Any,
                                                                   tmp_path: Path) -> None:
    """A symlink at one shard run's path (its directory moved and linked back): that
    shard is refused (path_refused, named on its line) and read from its copy; every
    reader of the cluster run still answers (each used to refuse path_refused for the whole
    run, exit 2)."""
    runs = tmp_path / "runs"
    done = subprocess.run([*CLI, "cluster", "pilot", "--faux", "--ray", ray_cluster.address,
                           "--campaign", str(campaign(tmp_path)), "--runs", str(runs),
                           "--shards", "2", "--json"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run = Path(json.loads(done.stdout.strip().splitlines()[-1])["run"])
    shard = Path(started(runs, time.monotonic() + 5)[1].shards[0].run_dir)
    shard.rename(tmp_path / "moved")
    shard.symlink_to(tmp_path / "moved")
    for command in (["show", str(run)], ["aggregate", str(run)]):
        read = subprocess.run([*CLI, *command], capture_output=True, text=True, timeout=120)
        assert read.returncode == 0 and "Complete" in read.stdout, read.stdout + read.stderr
    recover = subprocess.run([*CLI, "recover", str(run)], capture_output=True, text=True,
                             timeout=120)
    assert recover.returncode == 1 and recover.stdout.startswith("NOT reconciled: shard 1 "), \
        recover.stdout + recover.stderr
    assert "not_its_run: path_refused" in recover.stdout
    collect = subprocess.run([*CLI, "cluster", "collect", str(run)], capture_output=True,
                             text=True, timeout=120)
    assert collect.returncode == 1, collect.stdout + collect.stderr
    assert "shard 1 " in collect.stdout and "not_its_run; path_refused" in collect.stdout
    assert "shard 2 " in collect.stdout
    assert shard.is_symlink() and (tmp_path / "moved" / "journal.sqlite").is_file()


def test_collect_exits_1_for_a_shard_whose_run_is_gone(ray_cluster: Any,
                                                      tmp_path: Path) -> None:
    """A shard that ended complete whose run directory no longer holds a run (its
    journal removed): collect names it no_run and exits 1, as recover says NOT
    reconciled for it (collect exited 0: only a shard that refused has no run)."""
    runs = tmp_path / "runs"
    done = subprocess.run([*CLI, "cluster", "pilot", "--faux", "--ray", ray_cluster.address,
                           "--campaign", str(campaign(tmp_path)), "--runs", str(runs),
                           "--shards", "2", "--json"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run = Path(json.loads(done.stdout.strip().splitlines()[-1])["run"])
    shard = Path(started(runs, time.monotonic() + 5)[1].shards[0].run_dir)
    (shard / "journal.sqlite").unlink()
    collect = subprocess.run([*CLI, "cluster", "collect", str(run)], capture_output=True,
                             text=True, timeout=120)
    assert "Traceback" not in collect.stderr, collect.stderr
    assert f"{shard}): no_run" in collect.stdout, collect.stdout
    assert collect.returncode == 1, collect.stdout + collect.stderr
    recover = subprocess.run([*CLI, "recover", str(run)], capture_output=True, text=True,
                             timeout=120)
    assert recover.returncode == 1 and recover.stdout.startswith("NOT reconciled: shard 1 ")


def test_collect_through_ray_after_a_collector_was_killed_mid_fetch(ray_cluster: Any,
                                                                     tmp_path: Path) -> None:
    """A ``cluster collect --ray`` killed while unpacking leaves ``shards/.fetched/<k>``;
    the next one takes the lease and goes on (it refused private_dir_refused, exit 2,
    every time after)."""
    runs = tmp_path / "runs"
    done = subprocess.run([*CLI, "cluster", "pilot", "--faux", "--ray", ray_cluster.address,
                           "--campaign", str(campaign(tmp_path)), "--runs", str(runs),
                           "--shards", "2", "--json"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    run = Path(json.loads(done.stdout.strip().splitlines()[-1])["run"])
    (run / "shards" / ".fetched" / "1").mkdir(mode=0o700, parents=True)
    (run / "shards" / ".fetched" / "1" / "journal.sqlite").write_bytes(b"half")
    collect = subprocess.run([*CLI, "cluster", "collect", str(run), "--ray",
                              ray_cluster.address], capture_output=True, text=True,
                             timeout=300)
    assert collect.returncode == 0, collect.stdout + collect.stderr
    assert collect.stdout.count("): read") == 2, collect.stdout
    assert not (run / "shards" / ".fetched").exists()
