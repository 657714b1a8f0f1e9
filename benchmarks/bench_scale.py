"""The hard campaign run to completion at several sizes: does a run's cost per slot stay
flat as the campaign grows?

    python benchmarks/bench_scale.py [--sizes 60,300,600] [--repeats 3] [--grow seeds]
                                     [--dir /tmp]
    python benchmarks/bench_scale.py --quick      # one 60-slot run (CI)

Each size is a campaign on the hard suite with five roles (the bundled hard campaign's
four, plus ``compaction-2``) and ``probe_limit = 12``: 60 slots per (seed, campaign repeat). ``--grow
seeds`` (the default) adds traces: 1, 5, 10 seeds (101...) for 60, 300, 600 slots at
one campaign repeat; ``--grow repeats`` keeps one trace (seed 101) and raises the
campaign's ``repeats`` to 1, 5, 10 (each repeat has its own checkpoints). Only that one
count varies, so every size has the same slots per checkpoint, the same share of
inventory-infeasible (skipped) ``native`` slots and the same probes; a flat figure per
slot is then a property of the controller, not of the mix; comparing the two axes tells
a cost that follows traces from one that follows checkpoints or slots. A size that is
not a multiple of 60 gets the nearest count (at least 1; at most 24 seeds or 10
repeats). The cap is set high enough (1 USD per slot, at least 400 USD) that no run
stops on money.

Every run is ``register`` (untimed, afresh before each run), then ``python -m
efold.controller pilot --faux --registration F --sha256 S --run-dir D --no-progress`` in a
subprocess, which must exit 0 with every eligible slot completed and none missing (a run
that failed because the source was edited meanwhile is rerun, saying so). Per run:

* wall time of the pilot subprocess, and per planned slot;
* the controller's peak RSS: VmHWM of the controller process itself, read from
  ``/proc/PID/status`` every 20 ms (VmHWM only grows, so the last reading before exit
  is its peak up to the growth of the final 20 ms); next to it the process tree's
  largest RSS, ``ru_maxrss`` of ``os.wait4`` on the controller (the largest of the
  controller and every child it reaped: prep and probe workers included);
* journal size (``journal.sqlite`` plus ``-wal`` and ``-shm`` as found after exit) and
  run directory size (sum of the apparent sizes of every file), each per slot.

Figures are medians over ``--repeats`` runs per size. The baseline, measured in the
same invocation, is the smallest size: the flatness verdict gives per-slot wall time,
per-slot journal bytes and peak controller RSS at the largest size as a ratio against
the smallest (flat: per-slot ratios near 1.0, RSS ratio near 1.0), and what each added
slot and checkpoint cost in controller RSS and journal bytes.

The default (60, 300 and 600 slots, 3 runs each: 2,880 slots) is the long run: 10 min
on the 2-core shared development machine at load 1-2 (one run per size took 7 min at
load 3.7). ``--quick`` takes 15-35 s there.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from efold.report import decode_results

PROBES_PER_TRACE = 12
ROLES = ["native", "cold-rebuild", "compaction", "compaction-2", "pack"]
SLOTS_PER_UNIT = PROBES_PER_TRACE * len(ROLES)  # per seed per campaign repeat
FIRST_SEED, LAST_SEED = 101, 124
MAX_CAMPAIGN_REPEATS = 10
POLL_S = 0.02

CAMPAIGN = """\
# bench_scale: the hard campaign's roles at {slots} slots ({seeds} seeds x {probes} probes x
# {roles} roles x {repeats} repeats).
name = "scale-{slots}"
suite = "hard"
seeds = [{seed_list}]
roles = [{role_list}]
probe_limit = {probes}
repeats = {repeats}
selection_seed = 20261129
schedule_seed = 20261129
cap_usd = "{cap}.00"

[reader]
provider = "faux"
model = "faux-extractive-v1"
api = "responses"
base_url = "faux://local"
effort = "low"
"""


@dataclass(frozen=True)
class Run:
    wall_s: float
    controller_hwm_kib: int
    tree_maxrss_kib: int
    journal_bytes: int  # journal.sqlite + -wal + -shm
    wal_bytes: int  # -wal alone (part of journal_bytes)
    run_dir_bytes: int
    launches: int
    skipped: int


@dataclass(frozen=True)
class Shape:
    """One size: ``seeds`` traces x ``repeats`` campaign repeats x 60 slots."""

    seeds: int
    repeats: int

    @property
    def slots(self) -> int:
        return self.seeds * self.repeats * SLOTS_PER_UNIT

    @classmethod
    def near(cls, size: int, grow: str) -> Shape:
        units = max(1, round(size / SLOTS_PER_UNIT))
        if grow == "seeds":
            return cls(min(units, LAST_SEED - FIRST_SEED + 1), 1)
        return cls(1, min(units, MAX_CAMPAIGN_REPEATS))


@dataclass(frozen=True)
class Registered:
    path: Path
    sha256: str
    slots: int


def register(root: Path, shape: Shape) -> Registered:
    """Register the campaign of ``shape`` afresh (a new directory each call)."""
    slots = shape.slots
    toml = root / f"scale-{slots}.toml"
    toml.write_text(CAMPAIGN.format(
        slots=slots, seeds=shape.seeds, probes=PROBES_PER_TRACE, roles=len(ROLES),
        repeats=shape.repeats,
        seed_list=", ".join(str(s) for s in range(FIRST_SEED, FIRST_SEED + shape.seeds)),
        role_list=", ".join(f'"{r}"' for r in ROLES), cap=max(400, slots)))
    out = Path(tempfile.mkdtemp(prefix=f"reg-{slots}-", dir=root)) / "reg"
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "register", str(toml), "--output", str(out)],
        capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"register failed ({done.returncode}): {done.stderr.strip()}")
    match = re.search(r"^sha256: ([0-9a-f]{64})$", done.stdout, re.M)
    assert match, done.stdout
    return Registered(out / "registration.json", match.group(1), slots)


def _vm_hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None  # a zombie has no memory map, hence no VmHWM line


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


class RunFailed(Exception):
    pass


def pilot_once(reg: Registered, run_dir: Path) -> Run:
    """One pilot subprocess, which must complete every eligible slot of the plan."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux",
         "--registration", str(reg.path), "--sha256", reg.sha256,
         "--run-dir", str(run_dir), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hwm = 0
    while True:
        reading = _vm_hwm_kib(proc.pid)
        if reading is not None:
            hwm = max(hwm, reading)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        time.sleep(POLL_S)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise RunFailed(f"pilot exited {proc.returncode}: {stderr.strip()}")
    results = decode_results((run_dir / "results.json").read_bytes())
    ex = results.execution
    if (ex.planned != reg.slots or ex.missing or ex.completed != ex.eligible
            or ex.visited != ex.planned):
        codes = Counter(f"{row.status}:{row.code}" for row in results.slots
                        if row.status not in ("completed", "skipped"))
        end = results.status
        raise RunFailed(f"run incomplete (exit 0; verdict "
                        f"{end.verdict if end else '?'}, stop "
                        f"{end.stop if end else '?'}): {ex}; slots by status:code "
                        f"{dict(codes)}")
    journal = sum(p.stat().st_size for p in run_dir.glob("journal.sqlite*"))
    wal = run_dir / "journal.sqlite-wal"
    with contextlib.closing(sqlite3.connect(f"file:{run_dir / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        launches = int(conn.execute("SELECT COUNT(*) FROM launches").fetchone()[0])
    return Run(wall_s=wall, controller_hwm_kib=hwm, tree_maxrss_kib=usage.ru_maxrss,
               journal_bytes=journal, wal_bytes=wal.stat().st_size if wal.exists() else 0,
               run_dir_bytes=_tree_bytes(run_dir), launches=launches, skipped=ex.skipped)


@dataclass(frozen=True)
class Size:
    shape: Shape
    runs: list[Run]

    @property
    def slots(self) -> int:
        return self.shape.slots

    def median(self, field: str) -> float:
        return float(statistics.median(getattr(r, field) for r in self.runs))


def run_size(root: Path, shape: Shape, run_dir: Path, attempts: int = 3) -> Run:
    """Register (untimed), then one pilot. Others may edit the source while a run is on:
    the pilot then refuses (``registration_digest_mismatch``) or its children do
    (``worker_digest_mismatch``). A failed run whose registration no longer matches the
    code (registering again gives another sha256) is rerun, saying so; any other failure
    ends the benchmark."""
    for attempt in range(1, attempts + 1):
        reg = register(root, shape)
        try:
            return pilot_once(reg, run_dir)
        except RunFailed as exc:
            now = register(root, shape).sha256
            if now == reg.sha256 or attempt == attempts:
                raise SystemExit(f"{reg.slots} slots: {exc}\n(run kept: {run_dir})") from None
            print(f"  {reg.slots} slots: the source changed during the run "
                  f"(registration {reg.sha256[:12]} -> {now[:12]}): rerunning", flush=True)
            shutil.rmtree(run_dir, ignore_errors=True)
    raise AssertionError("unreachable")


def measure(root: Path, sizes: list[int], grow: str, repeats: int) -> list[Size]:
    """The runs interleaved (each repeat visits every size, smallest first), so that a
    change in machine load hits all sizes alike."""
    shapes = sorted({Shape.near(n, grow) for n in sizes}, key=lambda shape: shape.slots)
    measured = [Size(shape, []) for shape in shapes]
    for i in range(repeats):
        for entry in measured:
            run_dir = root / f"run-{entry.slots}-{i}"
            run = run_size(root, entry.shape, run_dir)
            entry.runs.append(run)
            print(f"  {entry.slots} slots, run {i + 1}/{repeats}: {run.wall_s:.1f} s", flush=True)
            shutil.rmtree(run_dir)
    return measured


def report(sizes: list[Size], grow: str, repeats: int) -> None:
    print(f"\nhard suite, {len(ROLES)} roles, probe_limit {PROBES_PER_TRACE}, growing "
          f"{grow}, median of {repeats} run(s) per size (machine load moves the times: "
          "compare sizes within one invocation)")
    print(f"{'slots':>6} {'seeds':>5} {'reps':>4} {'skipped':>7} {'launches':>8} {'wall s':>8} "
          f"{'ms/slot':>8} {'ctl RSS MiB':>11} {'tree RSS MiB':>12} {'journal KiB':>11} "
          f"{'B/slot':>7} {'run dir KiB':>11} {'B/slot':>7}")
    for s in sizes:
        wall = s.median("wall_s")
        journal = s.median("journal_bytes")
        run_dir = s.median("run_dir_bytes")
        print(f"{s.slots:6d} {s.shape.seeds:5d} {s.shape.repeats:4d} {s.runs[0].skipped:7d} "
              f"{s.runs[0].launches:8d} {wall:8.1f} {wall / s.slots * 1000:8.1f} {s.median('controller_hwm_kib') / 1024:11.1f} "
              f"{s.median('tree_maxrss_kib') / 1024:12.1f} {journal / 1024:11.1f} "
              f"{journal / s.slots:7.0f} {run_dir / 1024:11.1f} {run_dir / s.slots:7.0f}")
    print("journal after exit: " + ", ".join(
        f"{s.slots} slots {s.median('wal_bytes') / 1024:.1f} KiB of WAL" for s in sizes))
    if len(sizes) < 2:
        print("(one size: no flatness ratio; run with --sizes 60,300,600)")
        return
    small, large = sizes[0], sizes[-1]

    def per_slot(s: Size, field: str) -> float:
        return s.median(field) / s.slots

    ratios = {
        "wall time per slot": per_slot(large, "wall_s") / per_slot(small, "wall_s"),
        "journal bytes per slot": (per_slot(large, "journal_bytes")
                                   / per_slot(small, "journal_bytes")),
        "run dir bytes per slot": (per_slot(large, "run_dir_bytes")
                                   / per_slot(small, "run_dir_bytes")),
        "controller peak RSS": (large.median("controller_hwm_kib")
                                / small.median("controller_hwm_kib")),
    }
    print(f"\nflatness, {large.slots} slots against {small.slots} (same invocation):")
    for name, ratio in ratios.items():
        print(f"  {name:24s} {ratio:6.2f}x")
    print(f"  (slots grew {large.slots / small.slots:.0f}x; a flat figure stays near 1.00x)")
    added = large.slots - small.slots
    checkpoints = (large.shape.seeds * large.shape.repeats
                   - small.shape.seeds * small.shape.repeats) * len(ROLES)
    growth = large.median("controller_hwm_kib") - small.median("controller_hwm_kib")
    print(f"  controller peak RSS grew {growth / 1024:.1f} MiB: {growth / added:.1f} KiB per "
          f"added slot, {growth / checkpoints / 1024:.2f} MiB per added checkpoint")
    journal = large.median("journal_bytes") - small.median("journal_bytes")
    print(f"  journal grew {journal / 1024:.1f} KiB: {journal / added:.0f} B per added slot "
          f"(against {per_slot(small, 'journal_bytes'):.0f} B per slot at {small.slots} "
          "slots, which carries the fixed part)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="60,300,600",
                        help="comma-separated slot counts (nearest multiple of 60)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size (median)")
    parser.add_argument("--grow", choices=("seeds", "repeats"), default="seeds",
                        help="what the size adds: traces (seeds) or campaign repeats")
    parser.add_argument("--quick", action="store_true", help="one 60-slot run (for CI)")
    parser.add_argument("--dir", default=None, help="where to put the runs (default: $TMPDIR)")
    args = parser.parse_args()
    sizes = [60] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    repeats = 1 if args.quick else args.repeats
    if repeats < 1 or not sizes or min(sizes) < 1:
        parser.error("sizes and repeats must be positive")
    root = Path(tempfile.mkdtemp(prefix="efold-bench-scale-", dir=args.dir))
    # Removed once every run succeeded; a failed run's directory is kept to inspect.
    measured = measure(root, sizes, args.grow, repeats)
    shutil.rmtree(root)
    report(measured, args.grow, repeats)


if __name__ == "__main__":
    main()
