"""A faux campaign sharded over a local Ray cluster, against the same registration on
one machine, measured in the same run.

    python benchmarks/bench_cluster.py [--runs 3] [--campaign original]
    python benchmarks/bench_cluster.py --quick     # one run of a 20-slot campaign (CI)

The script starts a Ray cluster on this machine (``ray.cluster_utils``: a head and two
worker nodes, one CPU each, each its own raylet), registers the campaign once
(``--quick``: the original campaign cut to one probe per trace, 20 slots) and times,
each ``--runs`` times (medians printed):

- ``pilot --faux --registration ...``: one machine, the baseline;
- ``cluster pilot --faux --ray ADDRESS --shards K`` for K = 1, 2, 3.

For every cluster run it also prints the overhead per shard: the cluster run's wall
time minus its slowest shard's own wall time on its node (``shards/<k>.json``), that
is what the cluster adds around the shards (joining the cluster, consuming the
authorization, minting tickets, starting one actor and one controller per node, polling,
copying each shard's records back, the merged aggregate), divided by K. All shards share
this machine's two cores, so a speed-up here is bounded by two; on separate machines
each shard has its node to itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_kit import parse_runs
from ray.cluster_utils import Cluster

CLI = [sys.executable, "-m", "efold.controller"]
QUICK_CAMPAIGN = """
name = "bench-cluster"
suite = "original"
roles = ["native", "cold-rebuild", "compaction", "compaction-2", "pack"]
probe_limit = 1
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
"""


def _run(argv: list[str]) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=1800)
    seconds = time.perf_counter() - started
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def _register(work: Path, campaign: str | None, quick: bool) -> tuple[str, str]:
    if quick:
        source = work / "campaign.toml"
        source.write_text(QUICK_CAMPAIGN)
        campaign = str(source)
    done = subprocess.run([*CLI, "register", campaign or "original", "--output",
                           str(work / "reg")], capture_output=True, text=True, check=True)
    sha = done.stdout.strip().splitlines()[-1].split()[-1]
    return str(work / "reg" / "registration.json"), sha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaign", default=None,
                        help="The campaign to shard (default: the bundled original, 260 slots).")
    args = parse_runs(parser, runs=3, quick_runs=1,
                      quick_help="one run of a 20-slot cut of the original campaign")
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 1})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        with tempfile.TemporaryDirectory(prefix="efold-bench-cluster-") as tmp:
            work = Path(tmp)
            reg, sha = _register(work, args.campaign, args.quick)
            given = ["--registration", reg, "--sha256", sha, "--json"]
            walls: dict[str, list[float]] = {}
            overheads: dict[str, list[float]] = {}
            slots = 0
            for i in range(args.runs):
                seconds, line = _run([*CLI, "pilot", "--faux", *given, "--quiet",
                                      "--run-dir", str(work / f"one-{i}")])
                walls.setdefault("one machine", []).append(seconds)
                slots = int(line["planned"])  # type: ignore[call-overload]
                for k in (1, 2, 3):
                    seconds, line = _run([*CLI, "cluster", "pilot", "--faux", *given,
                                          "--ray", cluster.address, "--shards", str(k),
                                          "--run-dir", str(work / f"cluster-{k}-{i}")])
                    assert line["status"] == "complete", line
                    name = f"cluster, {k} shard{'s' if k > 1 else ''}"
                    walls.setdefault(name, []).append(seconds)
                    run = Path(str(line["run"]))
                    slowest = max(json.loads(p.read_bytes())["seconds"]
                                  for p in (run / "shards").glob("*.json"))
                    overheads.setdefault(name, []).append((seconds - slowest) / k)
    finally:
        cluster.shutdown()
    base = statistics.median(walls["one machine"])
    print(f"{slots} slots, {args.runs} run(s) each, medians; 3 Ray nodes on this machine "
          f"(2 cores)")
    print(f"{'run':<20} {'wall s':>8} {'vs one machine':>15} {'overhead/shard s':>17}")
    for name, samples in walls.items():
        wall = statistics.median(samples)
        extra = f"{statistics.median(overheads[name]):>17.2f}" if name in overheads else \
            f"{'':>17}"
        print(f"{name:<20} {wall:>8.2f} {wall / base:>14.2f}x {extra}")


if __name__ == "__main__":
    main()
