"""Side by side with inspect_ai: its mock model over N samples, in process and without
isolation, next to efold's default faux pilot over the same number of slots (a fresh,
contained, identity-verified process per slot, a durable journal), in the same run.

    python benchmarks/bench_inspect.py [--inspect-python PATH] [--runs 3] [--concurrency 1,8]
    python benchmarks/bench_inspect.py --quick      # 20 samples and slots, one run (CI)

At each concurrency N it runs efold's pilot at ``concurrency = N`` and inspect_ai with
``max_samples = N``, interleaved, and prints both, their ratio and efold's CPU per slot
(controller, template and children: every process the pilot waited for). Then one more
pilot, traced by ``strace -f -c``, gives the sync calls per slot (fsync, fdatasync and
their kin, every process of the run).

inspect_ai is not one of efold's dependencies: it runs under ``--inspect-python`` (an
interpreter that has it; default: this one). Without it the script says so and prints
efold's figure alone. Its mock model is given outputs that carry their usage, so it
never counts tokens (which would fetch a tokenizer over the network). Each sample is a
one-turn ``generate()`` scored by ``match()``: the per-sample cost of inspect's own
machinery. The ratio is against its ``eval`` call alone (its imports and start
excluded), while efold's figure is the whole ``pilot`` command, interpreter start and
reports included: the stricter comparison, the one the targets are read against. The
whole inspect_ai command (interpreter, imports, eval) and its CPU are printed too, with
the ratio of like to like.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bench_kit import compile_efold, parse_runs
from bench_pilot import pilot_once, register

INSPECT = """
import sys, time
from inspect_ai import Task, eval as run_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate

n = int(sys.argv[1])
at_once = int(sys.argv[3])

def answer(input, tools, tool_choice, config):
    out = ModelOutput.from_content(model="mockllm", content="UNKNOWN")
    out.usage = ModelUsage(input_tokens=1000, output_tokens=2, total_tokens=1002)
    return out

task = Task(dataset=[Sample(input=f"question {i}", target="UNKNOWN") for i in range(n)],
            solver=[generate()], scorer=match())
model = get_model("mockllm/model", custom_outputs=answer)
started = time.perf_counter()
logs = run_eval(task, model=model, display="none", log_dir=sys.argv[2], max_samples=at_once)
wall = time.perf_counter() - started
done = len(logs[0].samples or [])
assert logs[0].status == "success" and done == n, (logs[0].status, done)
print(f"wall {wall:.6f}")
"""


class InspectRun(NamedTuple):
    eval_wall: float  # its eval call alone
    command_wall: float  # the whole command: interpreter start, imports, eval, exit
    command_cpu: float  # the whole command's CPU seconds (user + system)


def inspect_once(python: str, n: int, log_dir: Path, at_once: int = 1) -> InspectRun | None:
    """inspect_ai's times for ``n`` mock samples, or None when ``python`` has no
    inspect_ai."""
    started = time.perf_counter()
    try:
        done, cpu = cpu_of(lambda: subprocess.run(
            [python, "-c", INSPECT, str(n), str(log_dir), str(at_once)],
            capture_output=True, text=True))
    except OSError as exc:  # not there, or not this user's to run
        print(f"  inspect_ai: cannot run {python}: {exc.strerror}")
        return None
    command_wall = time.perf_counter() - started
    if done.returncode != 0:
        if "No module named 'inspect_ai'" in done.stderr:
            return None
        raise RuntimeError(done.stderr[-2000:])
    found = re.search(r"^wall ([0-9.]+)$", done.stdout, re.M)
    assert found, done.stdout
    return InspectRun(float(found[1]), command_wall, cpu)


def cpu_of(run: Callable[[], Any]) -> tuple[Any, float]:
    """What ``run`` returns, and the CPU seconds (user + system) of every process it
    waited for: the pilot's controller and, reaped by it, its template and children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


SYNCS = ("fsync", "fdatasync", "sync_file_range", "syncfs", "sync")


def sync_calls(root: Path, registration: list[str]) -> tuple[int, int] | None:
    """(sync calls, slots) of one pilot run traced by ``strace -f -c`` (every process of
    the run), or None without strace."""
    if shutil.which("strace") is None:
        return None
    out = root / f"strace-{time.monotonic_ns()}.txt"
    run = root / f"run-traced-{time.monotonic_ns()}"
    subprocess.run(["strace", "-f", "-c", "-e", f"trace={','.join(SYNCS)}", "-o", str(out),
                    sys.executable, "-m", "efold.controller", "pilot", "--faux",
                    "--no-progress", *registration, "--run-dir", str(run)],
                   check=True, stdout=subprocess.DEVNULL)
    calls = 0
    for line in out.read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] in SYNCS and len(parts) >= 5:
            calls += int(parts[3])  # % time, seconds, usecs/call, calls, [errors,] syscall
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro",
                                            uri=True)) as conn, conn:
        slots = conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
    return calls, int(slots)


def side_by_side(python: str, root: Path, registration: list[str], *, concurrency: int,
                 runs: int) -> tuple[int, list[float], list[float], list[InspectRun]]:
    """(slots, efold walls, efold CPU seconds, inspect runs), interleaved run by run."""
    efold: list[float] = []
    cpu: list[float] = []
    inspect: list[InspectRun] = []
    slots = 0
    for n in range(runs):
        (wall, _, slots, _), used = cpu_of(lambda: pilot_once(root, registration, "template"))
        efold.append(wall)
        cpu.append(used)
        measured = inspect_once(python, slots, root / f"logs-{concurrency}-{n}", concurrency)
        if measured is not None:
            inspect.append(measured)
    return slots, efold, cpu, inspect


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inspect-python", default=sys.executable,
                        help="an interpreter with inspect_ai installed")
    parser.add_argument("--concurrency", default="1,8",
                        help="efold's concurrency and inspect_ai's max_samples, side by "
                             "side (default 1,8)")
    args = parse_runs(parser, runs=3, quick_runs=1,
                      quick_help="20 samples and slots, one run (CI)")
    print(f"efold byte-compiled first, as an install is: {compile_efold()}")
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        registrations = {level: register(Path(tmp), quick=args.quick, concurrency=level)
                         for level in sorted({1, *levels})}
        for level in levels:
            slots, efold_walls, cpu, inspect_runs = side_by_side(
                args.inspect_python, Path(tmp), registrations[level], concurrency=level,
                runs=args.runs)
            efold = statistics.median(efold_walls)
            print(f"{slots} samples / slots at concurrency {level}, median of "
                  f"{len(efold_walls)}")
            print(f"  efold faux pilot (template)                 {efold:7.2f} s  "
                  f"{efold / slots * 1000:7.1f} ms/slot")
            print(f"  efold CPU (controller, template, children)  "
                  f"{statistics.median(cpu):7.2f} s  "
                  f"{statistics.median(cpu) / slots * 1000:7.1f} ms/slot")
            if not inspect_runs:
                print(f"  inspect_ai: not installed for {args.inspect_python} (it is not an "
                      "efold dependency; pass --inspect-python)")
                continue
            inspect = statistics.median(r.eval_wall for r in inspect_runs)
            command = statistics.median(r.command_wall for r in inspect_runs)
            command_cpu = statistics.median(r.command_cpu for r in inspect_runs)
            print(f"  inspect_ai mockllm, in process, {level} at once  {inspect:7.2f} s  "
                  f"{inspect / slots * 1000:7.1f} ms/sample  (its eval call)")
            print(f"  ratio efold (whole command) / inspect_ai (eval call) "
                  f"{efold / inspect:5.2f} x")
            print(f"  inspect_ai, the whole command               {command:7.2f} s  "
                  f"{command / slots * 1000:7.1f} ms/sample")
            print(f"  inspect_ai CPU, the whole command           {command_cpu:7.2f} s  "
                  f"{command_cpu / slots * 1000:7.1f} ms/sample")
            print(f"  ratio, whole command to whole command       {efold / command:7.2f} x")
        traced = sync_calls(Path(tmp), registrations[1])
    if traced is None:
        print("sync calls: strace is not installed")
    else:
        calls, slots = traced
        print(f"sync calls (strace -f -c: {', '.join(SYNCS)}), one run at concurrency 1: "
              f"{calls} over {slots} slots, {calls / slots:.1f} per slot")


if __name__ == "__main__":
    main()
