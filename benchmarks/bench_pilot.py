"""The faux pilot of the original campaign: wall time, next to an in-process baseline of the same reader
work measured in the same run.

    python benchmarks/bench_pilot.py [--runs 3]
    python benchmarks/bench_pilot.py --quick     # one run of a 20-slot campaign (CI)

The pilot runs three ways (``CONFIGURATIONS``): every child spawned as a new
interpreter, one at a time (``--launcher spawn``); forked from the fork-server template
(the default); and forked with two children in flight (``concurrency = 2``, one per core
here). The original campaign (the default until the medium suite) is registered at each
concurrency (``--quick``: cut to one
probe per trace, ``probe_limit = 1``: 4 traces x 5 roles = 20 slots) and run through
``--registration``. Printed: the median wall time of each, per slot, and its ratio to
the baseline (target <= 2x).

The in-process baseline does the reader work of the same slots with no process, no
journal and no fsync. After each pilot run it reads that run's ``plan.json``,
``registration.json``, the registered suite and the receipts (untimed, once), then
times, for every slot the pilot completed, in plan order: reading the slot's checkpoint
into memory from its pristine snapshot (``checkpoints/<key>/snapshot``, the path the
slot's ``SnapshotRef`` names; ``read_checkpoint``, no copy to a slot directory), the
first payload (``first_payload``), the reader loop of ``ReaderProbe.run`` (guard
request, function calls served by the checkpoint's metered lookup tool,
``append_round``, until a reply without tool calls) through a ``Guard`` built from
``route_entry``/``route_contract``/``route_transport`` with an in-memory
``TestOnlyPermitSource``, the run witness, and the probe's scorer (``corpus.score``) and
answer hash, as ``controller.pilot.judging`` computes them. It asserts that every answer
hashes to the receipt's ``answer_sha256``, that its correctness equals the receipt's
``correct``, and that the checkpoint, request count and lookup calls are the receipt's:
the baseline provably did the same work. Each run measures the pilot, then its
baseline; the medians are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_kit import compile_efold, parse_runs

FOUR_ROLES = 'roles = ["native", "cold-rebuild", "compaction", "pack"]'
FIVE_ROLES = 'roles = ["native", "cold-rebuild", "compaction", "compaction-2", "pack"]'


def register(root: Path, *, quick: bool, concurrency: int) -> list[str]:
    """The bundled original campaign with a fifth role (260 slots; ``quick``: one probe
    per trace) at ``concurrency``, registered under ``root``; returns the pilot's
    ``--registration F --sha256 S``. The original, not today's default: every figure in
    docs/performance.md was measured on 260 slots, and bench_inspect's baseline runs as
    many. The fifth role is ``compaction-2``, where ``store`` was before recall-only
    (the default probe mode) stopped admitting it."""
    from importlib import resources

    name = f"original-{'quick-' if quick else ''}n{concurrency}"
    text = resources.files("efold.controller.campaigns").joinpath("original.toml").read_text()
    keys = f'name = "{name}"\nconcurrency = {concurrency}' + ("\nprobe_limit = 1" if quick else "")
    text = text.replace('name = "original"', keys, 1)
    assert name in text, "original.toml no longer starts with its name"
    text = text.replace(FOUR_ROLES, FIVE_ROLES, 1)
    assert FIVE_ROLES in text, "original.toml no longer has its four roles"
    campaign = root / f"{name}.toml"
    campaign.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "register", str(campaign),
         "--output", str(root / name)], check=True, capture_output=True, text=True,
    )
    sha = re.search(r"^sha256: ([0-9a-f]{64})$", done.stdout, re.M)
    assert sha, done.stdout
    return ["--registration", str(root / name / "registration.json"), "--sha256", sha[1]]


def pilot_once(root: Path, registration: list[str], launcher: str
               ) -> tuple[float, int, int, Path]:
    """One pilot run: its wall time, child launches, receipts and run directory."""
    run = root / f"run-{time.monotonic_ns()}"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--no-progress",
         "--launcher", launcher, *registration, "--run-dir", str(run)], check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        launches = conn.execute("SELECT COUNT(*) FROM launches WHERE kind != 'template'"
                                ).fetchone()[0]
        slots = conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0]
    return wall, int(launches), int(slots), run


@dataclass(frozen=True)
class SlotWork:
    """What one completed slot's baseline reads and is checked against."""

    n: int  # its position in the plan's schedule
    snapshot: Path  # the pristine snapshot its SnapshotRef names
    probe: Any  # corpus.model.Probe
    task: Any  # protocol.tasks.ProbeTask, as the pilot builds it
    receipt: Any  # protocol.records.Receipt, as the pilot wrote it


@dataclass(frozen=True)
class BaselineSetup:
    """A pilot run's records, loaded once (untimed): the completed slots in plan order
    and the campaign's reader terms."""

    slots: list[SlotWork]
    cap_units: int
    max_requests: int
    meter_calls: int
    meter_bytes: int
    deadline_s: float


def load_baseline(run: Path) -> BaselineSetup:
    """plan.json, registration.json, the registered suite and the receipts of ``run``:
    every slot the pilot completed, with the task ``controller.pilot.pilot`` gives its child.
    Also imports now what the reader loop would import on its first slot."""
    import msgspec

    # Imported lazily by the reader loop: loaded here, with the records, not in slot 1.
    import efold.folds.request
    import efold.guard.wire.faux
    import efold.worker.faux_reader  # noqa: F401
    from efold.controller.campaigns.campaign import campaign_cases, campaign_items, probe_seconds
    from efold.controller.campaigns.profiles import route_of
    from efold.controller.campaigns.registration import REGISTRATION_NAME, Registration
    from efold.controller.rundirs.aggregate import PLAN_NAME
    from efold.controller.rundirs.receipt_copies import RECEIPTS_DIR, receipt_name
    from efold.protocol.records import Plan, Receipt, SlotStatus
    from efold.protocol.tasks import ProbeTask
    from efold.worker.prep import snapshot_path

    plan = msgspec.json.decode((run / PLAN_NAME).read_bytes(), type=Plan)
    reg = msgspec.json.decode((run / REGISTRATION_NAME).read_bytes(), type=Registration)
    campaign = reg.campaign
    # A judge or a boundary case is work this baseline does not do: refuse, not skip.
    assert campaign.judge is None and not campaign_cases(campaign), "reader slots only"
    items = {i.trace.header.trace_id: i for i in campaign_items(campaign, [])}
    probes = {(t, p.id): p for t, i in items.items() for p in i.probes.probes}
    roles = {r.name: r for r in campaign.roles}
    route = route_of(campaign.reader)
    slots: list[SlotWork] = []
    for n, planned in enumerate(plan.slots):
        path = run / RECEIPTS_DIR / receipt_name(planned.slot)
        receipt = msgspec.json.decode(path.read_bytes(), type=Receipt)
        if receipt.status is not SlotStatus.COMPLETED:
            continue
        probe = probes[(planned.trace_id, planned.probe_id)]
        task = ProbeTask(question=probe.question, instructions=roles[planned.role].instructions,
                         route=route)
        slots.append(SlotWork(n, snapshot_path(str(run / "checkpoints" / planned.checkpoint)),
                              probe, task, receipt))
    budgets = campaign.budgets
    return BaselineSetup(slots, reg.cap_units, budgets.max_requests, budgets.lookup_calls,
                         budgets.lookup_bytes, probe_seconds(campaign))


@dataclass(frozen=True)
class SlotDone:
    checkpoint_sha256: str
    answer: str
    correct: bool
    requests: int
    lookup_calls: int


def baseline_slot(setup: BaselineSetup, work: SlotWork) -> SlotDone:
    """One slot's reader work in this process: ``ReaderProbe.restore`` without the copy,
    ``ReaderProbe.run`` with an in-memory permit source, then the controller's score."""
    from efold.corpus import score
    from efold.folds.meter import Meter
    from efold.folds.snapshot import read_checkpoint
    from efold.guard import HISTORY_TOOLS, Guard
    from efold.guard.testing import TestOnlyPermitSource
    from efold.worker.reader import append_round, first_payload, run_witness
    from efold.worker.route import reply_text, route_contract, route_entry, route_transport

    restored = read_checkpoint(work.snapshot)
    task = work.task
    cache_key = f"efold-baseline-{work.n:06d}"
    lookup = restored.lookup_tool(Meter(call_budget=setup.meter_calls,
                                        byte_budget=setup.meter_bytes))
    entry = route_entry(task.route)
    contract = route_contract(task.route, entry, cache_key=cache_key, tools=HISTORY_TOOLS)
    source = TestOnlyPermitSource(setup.cap_units, entry=entry, max_requests=setup.max_requests)
    guard = Guard(contract, entry, source, route_transport(task.route, None),
                  run_id=work.receipt.slot, deadline_s=setup.deadline_s)
    payload = first_payload(restored.checkpoint, task, cache_key)
    rounds: list[dict[str, Any]] = []
    answer = ""
    for _ in range(setup.max_requests + 1):  # as ReaderProbe.run: the limit's refusal too
        result = guard.request(payload)
        rounds.append({"outcome": result.outcome.value,
                       "code": result.code.value if result.code else None})
        assert result.ok, f"{work.receipt.slot}: {result.outcome.value} {result.code}"
        calls = [i for i in result.output_items if i.get("type") == "function_call"]
        if not calls:
            answer = reply_text(result.output_items)
            break
        assert lookup is not None, f"{work.receipt.slot}: tool calls without a store"
        outputs = [lookup.call(str(c.get("name")), str(c.get("arguments", ""))) for c in calls]
        append_round(payload, calls, outputs, api=task.route.api,
                     text=reply_text(result.output_items))
    assert answer, f"{work.receipt.slot}: no answer"
    meter, _witness = run_witness(lookup, {"rounds": rounds})
    return SlotDone(restored.manifest.content_digest, answer, score(work.probe, answer).correct,
                    len(rounds), meter.calls)


def baseline_once(run: Path) -> tuple[float, int]:
    """The in-process baseline of the pilot run in ``run``: its wall time over the
    completed slots (loading excluded) and their count, every slot checked against its
    receipt after the timing."""
    setup = load_baseline(run)
    started = time.perf_counter()
    done = [baseline_slot(setup, work) for work in setup.slots]
    wall = time.perf_counter() - started
    for work, got in zip(setup.slots, done, strict=True):
        r = work.receipt
        # As controller.judging: answer_sha256 = sha256_hex(terminal.answer.encode()).
        assert hashlib.sha256(got.answer.encode()).hexdigest() == r.answer_sha256, r.slot
        assert got.correct == r.correct, r.slot
        assert got.checkpoint_sha256 == r.checkpoint_sha256, r.slot
        assert (got.requests, got.lookup_calls) == (r.spend.requests, r.lookup_calls), r.slot
    assert setup.slots, "the pilot completed no slot"
    return wall, len(setup.slots)


# (launcher, concurrency): the old way (a new interpreter per child, one at a time),
# the template, and the template with one child in flight per core of this machine.
CONFIGURATIONS = (("spawn", 1), ("template", 1), ("template", 2))


def main() -> None:
    parser = argparse.ArgumentParser()
    args = parse_runs(parser, runs=3, quick_runs=1,
                      quick_help="one run of the original campaign cut to 20 slots (CI); "
                                 "overrides --runs")
    print(f"efold byte-compiled first, as an install is: {compile_efold()}")
    walls: dict[tuple[str, int], list[float]] = {c: [] for c in CONFIGURATIONS}
    bases: list[float] = []
    launches = slots = completed = 0
    with tempfile.TemporaryDirectory() as tmp:
        registrations = {n: register(Path(tmp), quick=args.quick, concurrency=n)
                         for n in {n for _, n in CONFIGURATIONS}}
        for _ in range(args.runs):  # interleaved: every configuration, then a baseline
            for launcher, n in CONFIGURATIONS:
                wall, launches, slots, run = pilot_once(Path(tmp), registrations[n], launcher)
                walls[(launcher, n)].append(wall)
            base, completed = baseline_once(run)
            bases.append(base)
    base = statistics.median(bases)
    name = "original faux pilot, probe_limit 1 (--quick)" if args.quick else "original faux pilot"
    print(f"{name}: {slots} slots, {launches} child launches, median of {args.runs}")
    print(f"  in-process baseline                {base:8.2f} s  {base / completed * 1000:7.1f} "
          f"ms/slot  ({completed} completed slots, each checked against its receipt)")
    for (launcher, n), samples in walls.items():
        wall = statistics.median(samples)
        print(f"  pilot, {launcher:<8} concurrency {n}  {wall:8.2f} s  "
              f"{wall / slots * 1000:7.1f} ms/slot  {wall / base:6.1f}x baseline "
              "(target <= 2x)")


if __name__ == "__main__":
    main()
