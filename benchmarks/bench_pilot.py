"""The default faux pilot: wall time, next to spawning the same number of bare
``python -I -c "import efold.worker"`` processes in the same run.

    python benchmarks/bench_pilot.py [--runs 3]
    python benchmarks/bench_pilot.py --quick     # one run of a 20-slot campaign (CI)

Prints the median of each and their ratio (target <= 1.5x), and the controller's
overhead per slot beyond the bare spawns. ``--quick`` registers the default campaign cut
to one probe per trace (``probe_limit = 1``: 4 traces x 5 roles = 20 slots) and runs it
once through ``--registration``: the same pilot path, not the default campaign's figure.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_kit import parse_runs


def register_quick(root: Path) -> list[str]:
    """The bundled default campaign with one probe per trace, registered under ``root``;
    returns the pilot's ``--registration F --sha256 S`` arguments."""
    from importlib import resources

    text = resources.files("efold.controller.campaigns").joinpath("default.toml").read_text()
    text = text.replace('name = "default"', 'name = "default-quick"\nprobe_limit = 1', 1)
    assert "probe_limit = 1" in text, "default.toml no longer starts with its name"
    campaign = root / "default-quick.toml"
    campaign.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "register", str(campaign),
         "--output", str(root / "reg")], check=True, capture_output=True, text=True,
    )
    sha = re.search(r"^sha256: ([0-9a-f]{64})$", done.stdout, re.M)
    assert sha, done.stdout
    return ["--registration", str(root / "reg" / "registration.json"), "--sha256", sha[1]]


def pilot_once(root: Path, registration: list[str] | None = None) -> tuple[float, int, int]:
    run = root / f"run-{time.monotonic_ns()}"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--no-progress",
         *(registration or []), "--run-dir", str(run)], check=True, stdout=subprocess.DEVNULL,
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
    args = parse_runs(parser, runs=3, quick_runs=1,
                      quick_help="one run of the default campaign cut to 20 slots (CI); "
                                 "overrides --runs")
    walls: list[float] = []
    bares: list[float] = []
    launches = slots = 0
    with tempfile.TemporaryDirectory() as tmp:
        registration = register_quick(Path(tmp)) if args.quick else None
        for _ in range(args.runs):
            wall, launches, slots = pilot_once(Path(tmp), registration)
            walls.append(wall)
            bares.append(bare_spawns(launches))
    wall, bare = statistics.median(walls), statistics.median(bares)
    name = "default faux pilot, probe_limit 1 (--quick)" if args.quick else "default faux pilot"
    print(f"{name}: {slots} slots, {launches} child launches, median of {args.runs}")
    print(f"  pilot wall time            {wall:8.2f} s")
    print(f"  bare spawns (same count)   {bare:8.2f} s   ({bare / launches * 1000:.1f} ms each)")
    print(f"  ratio pilot / bare         {wall / bare:8.2f} x   (target <= 1.5x)")
    print(f"  per slot, whole run        {wall / slots * 1000:8.1f} ms")
    print(f"  controller overhead / slot {(wall - bare) / slots * 1000:8.1f} ms beyond bare spawns")


if __name__ == "__main__":
    main()
