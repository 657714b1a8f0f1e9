"""Per-child cost: launch -> handshake -> DoneAck -> reaped exit, next to a bare
interpreter spawn (``python -c pass``) measured in the same run.

    python benchmarks/bench_spawn.py [--runs 25]
    python benchmarks/bench_spawn.py --quick     # one warm-up, 3 runs (CI)

Each child is a real prep worker (``python -I -m efold.worker prep``, built-in body)
under the real launcher: key pipe, pidfd, identity journaled, Hello/Welcome, Prepared,
membership journaled, DoneAck, exit reaped and journaled. The baseline spawns
``python -I -c pass`` through the same anyio/trio process API and waits for it; two
more spawns show where the time goes: an interpreter that only imports msgspec (the
floor of any child sharing the msgspec codec) and one that only imports the child's
modules. The same worker launch is also measured through the fork-server template
(``efold.controller.processes.template``: forked from a pre-imported template, adopted by the
controller, same protocol), which pays no interpreter start or import, and forked into
a cgroup of its own as a run in cgroup mode does (``controller.processes.run_cgroups``: create the
launch's cgroup, place the worker before its release, read its members at DoneAck and
at exit, remove it), where a writable cgroup2 exists. All are
interleaved so that machine load hits them alike; medians are printed with the ratio
(target: <= 1.5x), then the child's import tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from bench_kit import compile_efold, parse_runs

from efold.controller.processes.adopted import AdoptedProcess
from efold.controller.processes.launcher import supervise
from efold.controller.processes.run_cgroups import CGROUP, RunCgroups
from efold.controller.processes.template import Template, running_template
from efold.identity import current_identity
from efold.ipc.messages import BudgetGrant, DeadlineGrant, Prepared, Welcome
from efold.protocol.assignment import ASSIGNMENT_VERSION, Assignment
from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease

DIGEST = "d" * 64
WELCOME = Welcome(deadlines=DeadlineGrant(run_ms=10_000, exchange_ms=10_000),
                  budgets=BudgetGrant(max_requests=10, meter_calls=8, meter_bytes=126_976))


async def one_child(journal: JournalWriter, run_dir: str, epoch: int, n: int,
                    template: Template | None = None,
                    cgroups: RunCgroups | None = None) -> float:
    slot_dir = os.path.join(run_dir, f"slot-{n}")
    os.mkdir(slot_dir, 0o700)
    assignment = Assignment(
        version=ASSIGNMENT_VERSION, kind="prep", body="builtin", run_dir=run_dir,
        slot_dir=slot_dir, epoch=epoch, slot=f"s{n:05d}", controller=current_identity(),
        registration_digest=DIGEST, plan_digest=DIGEST, build_digest=DIGEST, cache_key=None,
        snapshot=None, hello_timeout_ms=10_000,
    )
    start = time.perf_counter()
    async with supervise(journal, assignment, template=template, cgroups=cgroups) as handle:
        await handle.accept_hello(WELCOME, timeout=10)
        msg = await handle.channel.receive(timeout=10)
        assert isinstance(msg, Prepared)
        await handle.acknowledge_done()
    exit_ = await handle.close()
    elapsed = time.perf_counter() - start
    assert exit_.status == 0 and exit_.containment is None, exit_
    assert template is None or isinstance(handle.process, AdoptedProcess)  # no fallback
    return elapsed


async def spawn(code: str) -> float:
    """Wall time to spawn ``python -I -c code`` and wait for it."""
    start = time.perf_counter()
    process = await anyio.open_process([sys.executable, "-I", "-c", code],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)
    await process.wait()
    return time.perf_counter() - start


BASELINES = {
    "bare `python -I -c pass`": "pass",
    "`python -I -c 'import msgspec'`": "import msgspec",
    "child imports only (entry + builtin)": "import efold.worker.entry, efold.worker.builtin",
}


async def measure(
    runs: int, warmups: int = 3,
) -> tuple[list[float], list[float], list[float], str, dict[str, list[float]]]:
    """(spawned children, templated children, templated children in cgroups (empty
    without a writable cgroup2), why not, baselines), wall seconds each."""
    with tempfile.TemporaryDirectory() as root:
        run_dir = os.path.join(root, "run")
        os.mkdir(run_dir, 0o700)
        lease = acquire_lease(run_dir)
        journal = JournalWriter(run_dir, lease)
        epoch = journal.record_epoch(current_identity())
        lease.set_epoch(epoch)
        children: list[float] = []
        templated: list[float] = []
        in_cgroups: list[float] = []
        baselines: dict[str, list[float]] = {name: [] for name in BASELINES}
        cgroups = RunCgroups.open()
        placed = cgroups if cgroups.mode == CGROUP else None
        try:
            async with running_template(journal, epoch) as template:
                for n in range(warmups):  # warm caches (pyc, page cache) for all
                    await one_child(journal, run_dir, epoch, 1000 + n)
                    await one_child(journal, run_dir, epoch, 2000 + n, template)
                    if placed is not None:
                        await one_child(journal, run_dir, epoch, 4000 + n, template, placed)
                    for code in BASELINES.values():
                        await spawn(code)
                for n in range(runs):  # interleaved, so machine load hits all alike
                    children.append(await one_child(journal, run_dir, epoch, n))
                    templated.append(await one_child(journal, run_dir, epoch, 3000 + n,
                                                     template))
                    if placed is not None:
                        in_cgroups.append(await one_child(journal, run_dir, epoch, 5000 + n,
                                                          template, placed))
                    for name, code in BASELINES.items():
                        baselines[name].append(await spawn(code))
        finally:
            cgroups.close()
        journal.close()
        lease.release()
    return children, templated, in_cgroups, cgroups.detail, baselines


def import_breakdown() -> list[str]:
    """The child's imports costing >= 1 ms cumulative, as a tree (in-process figures)."""
    out = subprocess.run(
        [sys.executable, "-I", "-X", "importtime", "-c",
         "import efold.worker.entry, efold.worker.builtin"],
        capture_output=True, text=True, check=True,
    )
    lines: list[str] = []
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and int(parts[1]) >= 1000:
            lines.append(f"  {int(parts[1]):8d} us  {parts[2].rstrip()[1:]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args = parse_runs(parser, runs=25, quick_runs=3,
                      quick_help="one warm-up, 3 runs (CI); overrides --runs")
    print(f"efold byte-compiled first, as an install is: {compile_efold()}")
    warmups = 1 if args.quick else 3
    children, templated, in_cgroups, where, baselines = anyio.run(measure, args.runs, warmups,
                                                                 backend="trio")
    child_ms = statistics.median(children) * 1000
    templated_ms = statistics.median(templated) * 1000
    medians = {name: statistics.median(xs) * 1000 for name, xs in baselines.items()}
    bare_ms = medians["bare `python -I -c pass`"]
    msgspec_ms = medians["`python -I -c 'import msgspec'`"]
    print(f"runs: {args.runs} each, interleaved (median wall time, spawn to reaped exit)")
    for name, ms in medians.items():
        print(f"  {name:42s} {ms:7.2f} ms  ({ms / bare_ms:4.2f}x bare)")
    print(f"  {'worker launch->handshake->DoneAck->exit':42s} {child_ms:7.2f} ms")
    print(f"  {'same, forked by the template':42s} {templated_ms:7.2f} ms")
    cgroup_ms: float | None = None
    if in_cgroups:
        cgroup_ms = statistics.median(in_cgroups) * 1000
        print(f"  {'same, in a cgroup of its own':42s} {cgroup_ms:7.2f} ms  "
              f"(+{cgroup_ms - templated_ms:.2f} ms per launch for its cgroup)")
    else:
        print(f"  no cgroup measured: {where}")
    print(f"ratio worker / bare           : {child_ms / bare_ms:5.2f}x")
    print(f"ratio template worker / bare  : {templated_ms / bare_ms:5.2f}x (target <= 1.3x)")
    if cgroup_ms is not None:
        print(f"ratio same, in its cgroup / bare: {cgroup_ms / bare_ms:5.2f}x (target <= 1.3x)")
    print(f"ratio worker / msgspec floor  : {child_ms / msgspec_ms:5.2f}x")
    print("child imports >= 1 ms (cumulative, -X importtime, in-process):")
    for line in import_breakdown():
        print(line)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
