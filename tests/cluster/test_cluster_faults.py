"""Cluster runs under faults a shared cluster cannot stage: a node where efold cannot be
imported, a node directory no shard can write, and the Ray head killed mid-run (each
test that kills a head has a cluster of its own). After each, the cluster run is
readable, says which shard ended how and why, its money is the shard journals', and
``recover`` agrees with the shard runs."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray.cluster_utils
from efold_cluster_kit import (
    CLI,
    accounted,
    campaign,
    ended,
    first_receipt,
    launch,
    shard_money,
    started,
)


@pytest.fixture(scope="module")
def unfit_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A head (1 CPU, resource ``fit``) and a node (resource ``unfit``) whose Python
    finds, before the real one, an ``efold`` package that fails to import: efold is
    broken there."""
    broken = tmp_path_factory.mktemp("broken")
    (broken / "efold").mkdir()
    (broken / "efold" / "__init__.py").write_text(
        'raise ImportError("efold is broken on this node")\n')
    cluster = ray.cluster_utils.Cluster(initialize_head=True, connect=False,
                                        head_node_args={"num_cpus": 1,
                                                        "resources": {"fit": 1}})
    cluster.add_node(num_cpus=1, resources={"unfit": 1},
                     env_vars={"PYTHONPATH": str(broken)})
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


def _pilot(cluster: Any, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                            dict[str, Any]]:
    done = subprocess.run([*CLI, "cluster", "pilot", "--faux", "--ray", cluster.address,
                           "--campaign", str(campaign(tmp_path)), "--runs",
                           str(tmp_path / "runs"), "--json", *args],
                          capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done, json.loads(done.stdout.strip().splitlines()[-1])


def _refused_cleanly(run: Path, code: str) -> None:
    """A cluster run whose one shard refused before any run began: readable, stopped
    with the shard's code, nothing spent, and reconciled."""
    status = json.loads((run / "results.json").read_bytes())
    assert status["status"]["verdict"] == "stopped" and status["status"]["stop"] == code
    assert status["money"]["settled"]["units"] == 0
    summary = (run / "summary.md").read_text()
    assert f"Shard 1: refused (`{code}`)" in summary and f"Stopped: {code}" in summary
    for command in (["show", str(run)], ["aggregate", str(run)], ["recover", str(run)]):
        done = subprocess.run([*CLI, *command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_node_that_cannot_import_efold_refuses_its_shard(unfit_cluster: Any,
                                                          tmp_path: Path) -> None:
    done, line = _pilot(unfit_cluster, tmp_path, "--shards", "1", "--resource", "unfit")
    assert done.returncode == 3, done.stdout + done.stderr
    assert line["shards"] == {"1": "refused"}
    assert "cannot run efold (ImportError: efold is broken on this node)" in done.stdout
    _refused_cleanly(Path(line["run"]), "cluster_node_unfit")


def test_an_unwritable_node_directory_refuses_every_shard(unfit_cluster: Any,
                                                          tmp_path: Path) -> None:
    # A file where the node directory's parent should be: nobody, root included, can
    # make the shard's scratch or run directory under it.
    (tmp_path / "not-a-dir").write_text("")
    done, line = _pilot(unfit_cluster, tmp_path, "--shards", "1", "--resource", "fit",
                        "--node-runs", str(tmp_path / "not-a-dir" / "runs"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert line["shards"] == {"1": "refused"}
    assert "the shard's scratch directory cannot be made" in done.stdout, done.stdout
    _refused_cleanly(Path(line["run"]), "path_not_writable")


def test_the_ray_head_killed_mid_run(tmp_path: Path) -> None:
    """The head dies (its GCS and raylet, SIGKILL): the shards' actors die, their
    keepers interrupt their controllers, which contain and end; the driver ends
    (Ray ends a driver whose head is gone) without reports or with them. Read through
    its shards, the cluster run has their money; recover agrees with them; collect
    writes the reports; nothing of any shard is left alive or unnamed."""
    cluster = ray.cluster_utils.Cluster(initialize_head=True, connect=False,
                                        head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    runs = tmp_path / "runs"
    try:
        cli = launch(cluster.address, campaign(tmp_path, probes=13), runs)
        try:
            deadline = time.monotonic() + 120
            run, manifest = started(runs, deadline)
            # Mid-run for every shard: on 2 cores a shard's actor can still be starting
            # when the first shard has receipts (a shard never started is another case).
            for placed in manifest.shards:
                first_receipt(Path(placed.run_dir), deadline)
            cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False)
            out, err = cli.communicate(timeout=300)
        finally:
            if cli.poll() is None:
                cli.kill()
        assert "Traceback" not in out + err
        deadline = time.monotonic() + 180
        for placed in manifest.shards:
            ended(placed.run_dir, deadline)
            recover = subprocess.run([*CLI, "recover", placed.run_dir], capture_output=True,
                                     text=True, timeout=120)
            assert recover.returncode == 0, recover.stdout
    finally:
        cluster.shutdown()
    spent = sum(shard_money(p.run_dir) for p in manifest.shards)
    assert spent > 0
    recover = subprocess.run([*CLI, "recover", str(run)], capture_output=True, text=True,
                             timeout=120)
    assert recover.returncode == 0 and recover.stdout.startswith("reconciled"), recover.stdout
    collect = subprocess.run([*CLI, "cluster", "collect", str(run)], capture_output=True,
                             text=True, timeout=300)
    assert collect.returncode == 0, collect.stdout + collect.stderr
    results = json.loads((run / "results.json").read_bytes())
    assert results["money"]["settled"]["units"] == spent
    status = results["status"]
    assert status["unreconciled"] is False
    assert all(s["visited"] is not None for s in status["shards"])
    assert accounted(results) == 104
