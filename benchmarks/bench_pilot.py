"""The default faux pilot: wall time, next to spawning the same number of bare
``python -I -c "import efold.worker"`` processes in the same run.

    python benchmarks/bench_pilot.py [--runs 3]

Prints the median of each and their ratio (target <= 1.5x), and the controller's
overhead per slot beyond the bare spawns.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pilot_once(root: Path) -> tuple[float, int, int]:
    run = root / f"run-{time.monotonic_ns()}"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--no-progress",
         "--run-dir", str(run)], check=True, stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    with sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True) as conn:
        launches = conn.execute("SELECT COUNT(*) FROM launches").fetchone()[0]
        slots = conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
    return wall, int(launches), int(slots)


def bare_spawns(n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-I", "-c", "import efold.worker"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    walls: list[float] = []
    bares: list[float] = []
    launches = slots = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            wall, launches, slots = pilot_once(Path(tmp))
            walls.append(wall)
            bares.append(bare_spawns(launches))
    wall, bare = statistics.median(walls), statistics.median(bares)
    print(f"default faux pilot: {slots} slots, {launches} child launches, median of {args.runs}")
    print(f"  pilot wall time            {wall:8.2f} s")
    print(f"  bare spawns (same count)   {bare:8.2f} s   ({bare / launches * 1000:.1f} ms each)")
    print(f"  ratio pilot / bare         {wall / bare:8.2f} x   (target <= 1.5x)")
    print(f"  per slot, whole run        {wall / slots * 1000:8.1f} ms")
    print(f"  controller overhead / slot {(wall - bare) / slots * 1000:8.1f} ms beyond bare spawns")


if __name__ == "__main__":
    main()
