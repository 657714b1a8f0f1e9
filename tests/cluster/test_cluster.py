"""Campaigns over a real local Ray cluster (a head and two worker nodes, ``conftest``),
each run the real ``efold-controller cluster pilot`` in a subprocess:

- a faux campaign sharded three ways writes the same per-slot receipts and the same
  results as the same registration on one machine;
- shards racing for the last Rmax of their parts keep the whole campaign's cap: the
  holds of every shard's journal, replayed together in time order, never pass it;
- a shard's ticket bound to another node refuses in its actor (``test_shard_ticket``:
  a ticket is single use);
- Ctrl-C on the cluster run interrupts every running shard's controller, which contains its
  children: exit 130, every shard interrupted, each shard run reconciled;
- a worker node killed mid-run (its shard controller SIGKILLed, its raylet removed)
  leaves that shard lost with its slots missing, the other shards finish, the merged
  report says crashed, and ``reap`` on the node's shard run leaves nothing alive.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from efold_cluster_kit import CLI, RMAX_UNITS, accounted, launch
from efold_cluster_kit import campaign as _campaign
from efold_cluster_kit import ended as _ended
from efold_cluster_kit import first_receipt as _first_receipt
from efold_cluster_kit import shard_money as _shard_money
from efold_cluster_kit import started as _started
from efold_pilot_kit import alive, journal_rows
from efold_shard_kit import mint_ticket

from efold.controller.rundirs.aggregate import read_run
from efold.controller.rundirs.cluster_run import (
    CLUSTER_NAME,
    SHARDS_DIR,
    ClusterManifest,
    read_shards,
    shard_copy_path,
)
from efold.errors import Code, EfoldError
from efold.protocol.records import Receipt


def _cluster_pilot(cluster: Any, campaign: Path, runs: Path, *args: str,
                   check_status: int | None = 0) -> tuple[Path, dict[str, Any]]:
    done = subprocess.run([*CLI, "cluster", "pilot", "--faux", "--ray", cluster.address,
                           "--campaign", str(campaign), "--runs", str(runs), "--json", *args],
                          capture_output=True, text=True, timeout=600)
    if check_status is not None:
        assert done.returncode == check_status, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    return Path(line["run"]), line


def _timeless(receipt: Receipt) -> Receipt:
    return msgspec.structs.replace(receipt, elapsed_ms=0)


def _without_clocks(results: dict[str, Any]) -> dict[str, Any]:
    for name in ("run", "latency"):
        results.pop(name)
    for row in results["results"]:
        row.pop("latency")
    # Who held the lease when the reports were written: a one-machine pilot writes its
    # own while it holds it; the cluster's are written after it released its lease.
    results["status"].pop("shards"), results["status"].pop("controller")
    # What held the processes and how the folds ran isolated: each shard run's journal
    # says it; the merged status of a cluster run carries neither.
    results["status"].pop("containment", None)
    results["status"].pop("fold_isolation", None)
    return results


def _manifest(run: Path) -> ClusterManifest:
    return msgspec.json.decode((run / CLUSTER_NAME).read_bytes(), type=ClusterManifest)


def test_a_sharded_run_writes_what_one_machine_writes(ray_cluster: Any, tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)
    alone = subprocess.run([*CLI, "pilot", "--faux", "--campaign", str(campaign), "--runs",
                            str(tmp_path / "one"), "--json", "--quiet"],
                           capture_output=True, text=True, timeout=600, check=True)
    one = Path(json.loads(alone.stdout.strip().splitlines()[-1])["run"])
    run, line = _cluster_pilot(ray_cluster, campaign, tmp_path / "cluster", "--shards", "3")
    assert line["status"] == "complete" and line["planned"] == line["visited"] == 16
    assert line["shards"] == {"1": "complete", "2": "complete", "3": "complete"}

    manifest = _manifest(run)
    caps = [p.spec.cap_units for p in manifest.shards]
    assert sum(caps) == 60 * 20_000_000 and min(caps) >= RMAX_UNITS
    # Three shards on three nodes, each shard's run in its own directory on its node.
    assert len({p.node for p in manifest.shards}) == 3
    keys = [k for p in manifest.shards for k in p.spec.checkpoints]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 8  # 4 traces x 2 roles

    single = read_run(one)
    merged, shards = read_shards(run)
    assert merged.plan == single.plan  # the whole plan, one schedule
    assert [_timeless(r) for r in merged.receipts] == [_timeless(r) for r in single.receipts]
    # The receipts on disk, shard by shard, are the one machine's receipts of its slots.
    for shard in shards:
        assert shard.view is not None
        for receipt in shard.view.receipts:
            ours = json.loads((one / "receipts" / f"{receipt.slot}.json").read_bytes())
            theirs = json.loads((shard_copy_path(run, shard.placed.spec.mark.index)
                                 / "receipts" / f"{receipt.slot}.json").read_bytes())
            ours.pop("elapsed_ms"), theirs.pop("elapsed_ms")
            assert ours == theirs
    a, b = (_without_clocks(json.loads((r / "results.json").read_bytes())) for r in (one, run))
    assert a == b
    states = json.loads((run / "results.json").read_bytes())["status"]["shards"]
    assert [(s["index"], s["outcome"], s["visited"]) for s in states] == [
        (p.spec.mark.index, "complete", s["planned"]) for p, s in zip(manifest.shards, states, strict=True)]
    assert "Shard 2: complete" in (run / "summary.md").read_text()

    # aggregate reads the cluster run as one run; a tampered record refuses.
    agg = subprocess.run([*CLI, "aggregate", str(run), "--json"], capture_output=True,
                         text=True, timeout=120)
    assert agg.returncode == 0, agg.stderr
    _refusals_of_tampered_copies(run, tmp_path)


def _refusals_of_tampered_copies(run: Path, tmp_path: Path) -> None:
    def copy(name: str) -> Path:
        # A copy keeps the directory's name: the manifest names its cluster run.
        target = tmp_path / name / run.name
        shutil.copytree(run, target, symlinks=True)
        return target

    moved = copy("moved")  # a checkpoint moved from one shard to another in the manifest
    manifest = _manifest(moved)
    first, second = manifest.shards[0], manifest.shards[1]
    changed = msgspec.structs.replace(manifest, shards=[
        msgspec.structs.replace(first, spec=msgspec.structs.replace(
            first.spec, checkpoints=first.spec.checkpoints[:-1])),
        msgspec.structs.replace(second, spec=msgspec.structs.replace(
            second.spec, checkpoints=second.spec.checkpoints + first.spec.checkpoints[-1:])),
        *manifest.shards[2:]])
    (moved / CLUSTER_NAME).write_bytes(msgspec.json.encode(changed))
    with pytest.raises(EfoldError) as err:
        read_shards(moved)
    assert err.value.code is Code.CLUSTER_RECORDS_INVALID

    stray = copy("stray")  # shard 1's receipt dropped into shard 2's copy
    one = next((shard_copy_path(stray, 1) / "receipts").glob("*.json"))
    shutil.copy(one, shard_copy_path(stray, 2) / "receipts" / one.name)
    with pytest.raises(EfoldError) as err:
        read_shards(stray)
    assert err.value.code is Code.RECEIPT_UNPLANNED

    gone = copy("gone")  # shard 3's records never came back
    shutil.rmtree(shard_copy_path(gone, 3))
    (gone / SHARDS_DIR / "3.json").unlink()
    view, shards = read_shards(gone)
    lost = shards[2].placed.spec
    assert {r.slot for r in view.receipts}.isdisjoint(
        {s.slot for s in view.plan.slots if s.checkpoint in lost.checkpoints})
    # Read through its shards: shard 3's own run, where it lives, is the truth.
    agg = subprocess.run([*CLI, "aggregate", str(gone), "--json"], capture_output=True,
                         text=True, timeout=120)
    assert json.loads(agg.stdout)["status"]["verdict"] == "complete"
    # Shard 3's run out of reach too (another node, no shared filesystem): unknown,
    # never visited 0 or spent 0.
    shard_run = Path(_manifest(gone).shards[2].run_dir)
    hidden = shard_run.with_name(shard_run.name + ".away")
    shard_run.rename(hidden)
    try:
        agg = subprocess.run([*CLI, "aggregate", str(gone), "--json"], capture_output=True,
                             text=True, timeout=120)
    finally:
        hidden.rename(shard_run)
    results = json.loads(agg.stdout)
    status = results["status"]
    assert status["verdict"] == "crashed" and status["shards"][2]["outcome"] == "lost"
    assert status["shards"][2]["visited"] is None and results["money"] is None
    assert status["missing_slots"] == status["shards"][2]["planned"] > 0


def _global_cap_rule(runs: list[Path], cap_units: int) -> int:
    """The holds of ``runs``' journals replayed together in time order (one machine: one
    clock): at each admission on any of them, what they had all committed by then
    (settled at its cost, else at its hold) plus Rmax fits under ``cap_units``. Returns
    the number of admissions checked."""
    holds = sorted(row for run in runs for row in journal_rows(
        run, "SELECT admitted_ns, settled_ns, hold_units, settled_units FROM holds"))
    for admitted, *_ in holds:
        committed = sum(
            settled if settled_ns is not None and settled_ns < admitted else hold
            for other, settled_ns, hold, settled in holds if other < admitted)
        assert committed + RMAX_UNITS <= cap_units, (admitted, committed)
    return len(holds)


def test_shards_racing_for_the_last_rmax_keep_the_campaign_cap(ray_cluster: Any,
                                                                tmp_path: Path) -> None:
    # C = 3 Rmax + 0.06 USD: each shard's part is one Rmax and a sliver, so every shard
    # races its children (concurrency 2) for its last Rmax at once.
    campaign = _campaign(tmp_path, probes=4, cap="11.82", extra="concurrency = 2")
    run, line = _cluster_pilot(ray_cluster, campaign, tmp_path / "runs", "--shards", "3",
                               check_status=3)
    manifest = _manifest(run)
    cap = 1182 * 200_000
    assert sum(p.spec.cap_units for p in manifest.shards) == cap
    runs = [Path(p.run_dir) for p in manifest.shards]
    admitted = _global_cap_rule(runs, cap)
    # Each shard kept its own part (its children raced for its last Rmax).
    assert admitted == sum(_global_cap_rule([shard_run], placed.spec.cap_units)
                           for placed, shard_run in zip(manifest.shards, runs, strict=True))
    stops = {row[0] for r in runs for row in journal_rows(r, "SELECT code FROM stops")}
    assert Code.NOT_ADMITTED_CAP.value in stops
    assert set(line["shards"].values()) == {"stopped"}
    view, _ = read_shards(run)
    settled = sum(r.spend.settled_units for r in view.receipts)
    assert 0 < settled <= cap
    refused = [r for r in view.receipts if r.code == Code.NOT_ADMITTED_CAP.value]
    assert len(refused) == len(view.receipts) - admitted > 0


def test_a_shard_ticket_bound_to_another_node_refuses(ray_cluster: Any, tmp_path: Path) -> None:
    import ray

    from efold.controller.cluster.dispatch import RayShardHost
    from efold.controller.cluster.shard_host import default_program

    reg_bytes, ticket = mint_ticket(tmp_path, node="0" * 56)
    ray.init(address=ray_cluster.address, log_to_driver=False)
    try:
        host = RayShardHost.remote()
        with pytest.raises(ray.exceptions.RayTaskError) as err:
            ray.get(host.start.remote(msgspec.json.encode(ticket), reg_bytes,
                                      default_program()))
        assert isinstance(err.value.cause, EfoldError)
        assert err.value.cause.code is Code.CLUSTER_SHARD_MISPLACED
    finally:
        ray.shutdown()
    assert not Path(ticket.run_dir).exists()  # refused before any process started


def test_ctrl_c_interrupts_and_contains_every_shard(ray_cluster: Any, tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, probes=13)
    runs = tmp_path / "runs"
    cli = launch(ray_cluster.address, campaign, runs)
    try:
        deadline = time.monotonic() + 120
        run, manifest = _started(runs, deadline)
        # Every shard under way (on a loaded machine one may start seconds after another),
        # none near its end: 104 slots in three shards.
        for placed in manifest.shards:
            _first_receipt(Path(placed.run_dir), deadline)
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, out + err
    line = json.loads(out.strip().splitlines()[-1])
    assert line["status"] == "interrupted"
    assert "interrupted" in line["shards"].values()
    # Every shard interrupted; or, on a loaded machine, a shard that had run its whole
    # part before the signal (another still starting): complete, nothing to interrupt.
    for placed in manifest.shards:
        outcome = line["shards"][str(placed.spec.mark.index)]
        assert outcome == "interrupted" or (outcome == "complete"
                                            and _all_visited(Path(placed.run_dir))), outcome
    assert line["planned"] == 104
    # Every slot is accounted for; those the interruption reached say so.
    view, _ = read_shards(run)
    assert sum(r.code == Code.INTERRUPTED.value for r in view.receipts) > 0
    for placed in manifest.shards:
        recover = subprocess.run([*CLI, "recover", placed.run_dir], capture_output=True,
                                 text=True, timeout=120)
        assert recover.stdout.startswith("reconciled"), recover.stdout
    assert "Interrupted by the operator" in (run / "summary.md").read_text()


def test_a_shard_that_cannot_be_placed_is_refused_in_bounded_time(ray_cluster: Any,
                                                                   tmp_path: Path) -> None:
    """Four shards on three one-CPU nodes: the first and the fourth share a node, and
    whichever of them Ray places holds its CPU for its whole run. The other is refused
    (``cluster_unschedulable``) after ``--place-seconds``, naming what it asked and what
    the node has; the others run; the cluster run is readable and says which shard
    refused.

    The window is wide (30 s) because a loaded machine can take several seconds to start
    a shard's controller: a placed shard refused for being slow would free its node for
    the other. A placed shard's host holds its CPU until the driver collects, after
    every start has been waited for, so the other is refused whatever the window."""
    campaign = _campaign(tmp_path)
    started = time.monotonic()
    done = subprocess.run([*CLI, "cluster", "pilot", "--faux", "--ray", ray_cluster.address,
                           "--campaign", str(campaign), "--runs", str(tmp_path / "runs"),
                           "--shards", "4", "--place-seconds", "30", "--json"],
                          capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 3, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    # Shards 1 and 4 share the first node (round robin over three). Ray does not promise
    # to place actors in the order they were asked for, so either may get its CPU: the
    # other is refused, and the shards on the other nodes run.
    refused = [k for k, v in line["shards"].items() if v == "refused"]
    assert refused in (["1"], ["4"]), done.stdout
    assert all(v == "complete" for k, v in line["shards"].items() if k not in refused)
    assert (f"shard {refused[0]}: not placed on node" in done.stdout
            and "it asks CPU 1" in done.stdout), done.stdout
    summary = (Path(line["run"]) / "summary.md").read_text()
    assert f"Shard {refused[0]}: refused (`cluster_unschedulable`)" in summary
    assert took < 300


def _all_visited(shard_run: Path) -> bool:
    """Every slot of the shard's plan has its receipt."""
    planned = json.loads((shard_run / "plan.json").read_bytes())["slots"]
    return len(list(shard_run.glob("receipts/*.json"))) == len(planned)


def test_a_killed_driver_leaves_every_shard_to_end_well(ray_cluster: Any,
                                                       tmp_path: Path) -> None:
    """SIGKILL of the cluster controller mid-run: every shard's actor dies with it, and
    every shard's keeper interrupts its controller, which contains its children and
    ends interrupted, its scratch directory removed. The cluster run, read through its
    shards, has their money (never 0) and recover agrees with the shard runs; collect
    writes its reports and end records."""
    campaign = _campaign(tmp_path, probes=13)
    runs = tmp_path / "runs"
    cli = launch(ray_cluster.address, campaign, runs)
    try:
        deadline = time.monotonic() + 120
        run, manifest = _started(runs, deadline)
        for placed in manifest.shards:
            _first_receipt(Path(placed.run_dir), deadline)
        cli.kill()
        cli.wait(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
    deadline = time.monotonic() + 120
    ends: list[str] = []
    for placed in manifest.shards:
        _ended(placed.run_dir, deadline)
        stops = journal_rows(Path(placed.run_dir), "SELECT code FROM stops")
        # Interrupted; or, on a loaded machine, a shard that had run its whole part
        # before the kill (the others still starting): complete, nothing to interrupt.
        finished = _all_visited(Path(placed.run_dir))
        assert (Code.INTERRUPTED.value,) in stops or (finished and not stops), stops
        ends.append("complete" if finished and not stops else "interrupted")
        recover = subprocess.run([*CLI, "recover", placed.run_dir], capture_output=True,
                                 text=True, timeout=120)
        assert recover.returncode == 0, recover.stdout
    assert "interrupted" in ends
    spent = sum(_shard_money(p.run_dir) for p in manifest.shards)
    assert spent > 0
    # Read through its shards, before any collect: their money, their visits.
    show = subprocess.run([*CLI, "show", str(run), "--json"], capture_output=True, text=True,
                          timeout=120)
    assert show.returncode == 0, show.stdout + show.stderr
    recover = subprocess.run([*CLI, "recover", str(run)], capture_output=True, text=True,
                             timeout=120)
    assert recover.returncode == 0 and recover.stdout.startswith("reconciled"), recover.stdout
    assert recover.stdout.count("shard ") >= 3
    collect = subprocess.run([*CLI, "cluster", "collect", str(run)], capture_output=True,
                             text=True, timeout=300)
    assert collect.returncode == 0, collect.stdout + collect.stderr
    assert collect.stdout.count("ended interrupted") == ends.count("interrupted"), \
        collect.stdout
    results = json.loads((run / "results.json").read_bytes())
    assert results["money"]["settled"]["units"] == spent
    assert "a controller held the run lease" not in (run / "summary.md").read_text()
    status = results["status"]
    assert [s["outcome"] for s in status["shards"]] == ends
    visited = sum(len(list(Path(p.run_dir).glob("receipts/*.json"))) for p in manifest.shards)
    assert sum(s["visited"] for s in status["shards"]) == visited > 0
    assert status["missing_slots"] + visited == accounted(results) == 104


def test_a_killed_shard_controller_is_reaped_through_the_cluster_run(ray_cluster: Any,
                                                                    tmp_path: Path) -> None:
    """SIGKILL of one shard's controller (children in flight, no containment): the
    shard ends failed, the cluster run reads UNRECONCILED, and so does recover on it;
    reap on the cluster run reaps that shard's run on its node and collects it again,
    after which recover on the cluster run and on the shard run say reconciled, and
    every planned slot is visited, missing or in flight."""
    campaign = _campaign(tmp_path, probes=13, extra="concurrency = 2")
    runs = tmp_path / "runs"
    cli = launch(ray_cluster.address, campaign, runs)
    try:
        deadline = time.monotonic() + 120
        run, manifest = _started(runs, deadline)
        victim = manifest.shards[1]
        _first_receipt(Path(victim.run_dir), deadline)
        (pid,) = journal_rows(Path(victim.run_dir), "SELECT pid FROM epochs")[0]
        os.kill(int(pid), signal.SIGKILL)  # type: ignore[call-overload]
        out, err = cli.communicate(timeout=600)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 3, out + err
    line = json.loads(out.strip().splitlines()[-1])
    assert line["shards"]["2"] == "failed", line
    results = json.loads((run / "results.json").read_bytes())
    status = results["status"]
    assert status["unreconciled"] is True
    # The slot in flight at the kill is visited, missing, or (killed between journaling
    # its receipt and publishing it) a missing copy: counted once, never dropped.
    assert accounted(results) == sum(s["planned"] for s in status["shards"]) == 104
    recover = subprocess.run([*CLI, "recover", str(run)], capture_output=True, text=True,
                             timeout=120)
    assert recover.returncode == 1 and recover.stdout.startswith("NOT reconciled"), \
        recover.stdout
    # Reaped on its node by a Ray task bound to it, and collected from there.
    reap = subprocess.run([*CLI, "cluster", "collect", str(run), "--ray", ray_cluster.address,
                           "--reap"], capture_output=True, text=True, timeout=300)
    assert reap.returncode == 0, reap.stdout + reap.stderr
    assert "shard 2 " in reap.stdout and "reap on its node: reconciled" in reap.stdout, \
        reap.stdout
    for target in (str(run), victim.run_dir):
        recover = subprocess.run([*CLI, "recover", target], capture_output=True, text=True,
                                 timeout=120)
        assert recover.returncode == 0 and recover.stdout.startswith("reconciled"), \
            recover.stdout
    status = json.loads((run / "results.json").read_bytes())["status"]
    assert status["unreconciled"] is False
    shown = subprocess.run([*CLI, "aggregate", str(run), "--json"], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert _marker_alive(Path(victim.run_dir)) == []


def _marker_alive(run: Path) -> list[int]:
    """Pids of live processes carrying the run's launch marker (``recover``'s search)."""
    marker = journal_rows(run, "SELECT marker FROM launches")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if any(m and f"EFOLD_LAUNCH_MARKER={m}".encode() in environ for (m,) in marker) \
                and alive(int(entry)):
            found.append(int(entry))
    return found


def test_a_node_killed_mid_run_leaves_its_shard_failed(ray_cluster: Any, tmp_path: Path) -> None:
    # Last in this module: it removes a node from the module's cluster.
    campaign = _campaign(tmp_path, probes=13, extra="concurrency = 2")
    cli = launch(ray_cluster.address, campaign, tmp_path / "runs")
    try:
        deadline = time.monotonic() + 120
        run, manifest = _started(tmp_path / "runs", deadline)
        workers = {n.node_id: n for n in ray_cluster.worker_nodes}
        victim = next(p for p in manifest.shards if p.node in workers)
        victim_run = Path(victim.run_dir)
        _first_receipt(victim_run, deadline)
        # The node dies: its shard controller first (SIGKILL: no containment), then the
        # raylet and every Ray worker of the node.
        (pid,) = journal_rows(victim_run, "SELECT pid FROM epochs")[0]
        os.kill(int(pid), signal.SIGKILL)  # type: ignore[call-overload]
        ray_cluster.remove_node(workers[victim.node], allow_graceful=False)
        out, err = cli.communicate(timeout=600)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 3, out + err
    line = json.loads(out.strip().splitlines()[-1])
    index = str(victim.spec.mark.index)
    # Lost to the driver; its run, which this machine reaches, says its controller died.
    assert f"shard {index}: lost" in out and f"shard {index}: its run on its node reads " \
        "failed" in out
    assert line["shards"][index] == "failed"
    assert all(v == "complete" for k, v in line["shards"].items() if k != index)
    results = json.loads((run / "results.json").read_bytes())
    status = results["status"]
    assert status["verdict"] == "unreconciled"  # its controller died with children out
    failed = status["shards"][victim.spec.mark.index - 1]
    visited = len(list(victim_run.glob("receipts/*.json")))
    # Its receipts, and any slot it left in flight (visited, never scored).
    assert failed["outcome"] == "failed"
    assert failed["visited"] >= visited > 0
    assert accounted(results) == 104
    assert results["money"]["settled"]["units"] == sum(
        _shard_money(p.run_dir) for p in manifest.shards)
    assert f"Shard {index}: failed" in (run / "summary.md").read_text()
    # Its node is gone: asked through Ray, it cannot answer, and collect says so.
    asked = subprocess.run([*CLI, "cluster", "collect", str(run), "--ray",
                            ray_cluster.address], capture_output=True, text=True, timeout=600)
    assert asked.returncode == 1, asked.stdout + asked.stderr
    assert f"shard {index} " in asked.stdout and "unreachable" in asked.stdout, asked.stdout
    # reap on the cluster run (here, where its run is) reaps the dead node's shard run
    # (its controller died with children in flight) and collects it; then recover says
    # reconciled on both.
    reap = subprocess.run([*CLI, "reap", str(run)], capture_output=True, text=True,
                          timeout=300)
    assert reap.returncode == 0, reap.stdout + reap.stderr
    for target in (run, victim_run):
        recover = subprocess.run([*CLI, "recover", str(target)], capture_output=True,
                                 text=True, timeout=120)
        assert recover.returncode == 0 and recover.stdout.startswith("reconciled"), \
            recover.stdout
    assert json.loads((run / "results.json").read_bytes())["status"]["verdict"] == "crashed"
    assert _marker_alive(victim_run) == []
    ray_cluster.add_node(num_cpus=1)  # the module's cluster as it was, for any test after


def test_a_role_that_measured_nothing_over_the_cluster_run_exits_1(
        ray_cluster: Any, tmp_path: Path) -> None:
    """Its fold failed at every checkpoint: every shard completes (a shard is no failure
    for a role it measured nothing of), and the cluster run, judging roles over all of
    them, exits 1 naming the role."""
    script = tmp_path / "broken_fold.py"
    script.write_text("import sys\nsys.exit(3)\n")
    campaign = _campaign(tmp_path, extra=f"""
[role.broken]
command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]
""")
    campaign.write_text(campaign.read_text().replace('roles = ["native", "pack"]',
                                                     'roles = ["native", "broken"]'))
    done = subprocess.run([*CLI, "cluster", "pilot", "--faux", "--ray", ray_cluster.address,
                           "--campaign", str(campaign), "--runs", str(tmp_path / "runs"),
                           "--json", "--shards", "2"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["shards"] == {"1": "complete", "2": "complete"}
    assert line["unmeasured"] == ["broken"]
    assert "  role broken: none of its 8 slots answered (8 worker_body_failed)" in done.stderr
