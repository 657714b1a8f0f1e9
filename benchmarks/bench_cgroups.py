"""Cost of cgroup membership per launch: create a launch cgroup, place a process in it,
kill it through ``cgroup.kill``, wait for ``populated 0`` and remove the cgroup.

    python benchmarks/bench_cgroups.py [--runs 25]
    python benchmarks/bench_cgroups.py --quick     # 3 runs (CI)

The process is a held ``sleep`` spawned before the clock starts (its spawn is what
bench_spawn.py measures); only the cgroup's own work is timed. Where this process has no
writable cgroup2 it prints why (the fallback, ``process-group``) and measures nothing.
Target (issue 43): a few milliseconds per launch.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import uuid

from bench_kit import parse_runs

from efold.controller.processes.cgroup_mount import NoCgroup2, find_cgroup2
from efold.controller.processes.cgroups import RunCgroup


def main() -> int:
    args = parse_runs(argparse.ArgumentParser(description=__doc__), runs=25, quick_runs=3,
                      quick_help="3 runs (CI)")
    found = find_cgroup2()
    if isinstance(found, NoCgroup2):
        print(f"cgroup membership: not measured (mode process-group: {found.reason})")
        return 0
    steps: dict[str, list[float]] = {"create": [], "place": [], "kill+empty": [],
                                     "remove": [], "total": []}
    with RunCgroup.create(found, f"bench-{uuid.uuid4().hex[:12]}") as run:
        for n in range(args.runs):
            sleeper = subprocess.Popen(["sleep", "30"])
            t0 = time.perf_counter()
            launch = run.launch_cgroup(f"l{n}")
            t1 = time.perf_counter()
            launch.place(sleeper.pid)
            t2 = time.perf_counter()
            launch.kill()
            if not launch.wait_empty(timeout=5.0):
                print("cgroup membership: a killed launch cgroup stayed populated",
                      file=sys.stderr)
                return 1
            t3 = time.perf_counter()
            launch.remove()
            t4 = time.perf_counter()
            for name, seconds in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0),
                                     strict=True):
                steps[name].append(seconds)
            sleeper.wait()
        run.remove()
    print(f"cgroup per launch, median of {args.runs} runs (ms): " + ", ".join(
        f"{name} {statistics.median(values) * 1000:.2f}" for name, values in steps.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
