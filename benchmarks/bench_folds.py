"""Benchmark folds/: each arm's checkpoint for one hard trace, snapshot write and verified
restore, and history search latency on that trace's store.

Run: ``python benchmarks/bench_folds.py [--seed 101] [--runs 5]`` (``--quick``: one run, for
CI)

Prints medians of several runs, each with a ratio against a baseline measured in the
same run:

* arms: baseline = encoding the trace prefix to JSON (one pass over all its bytes);
  target: every checkpoint under 1 s;
* snapshot: write + verified read of the store arm's checkpoint;
* search: p50/p95 of ``history_search`` through the metered tool (JSON in and out)
  over queries made of the trace's own fact labels and words; baseline = a linear
  case-insensitive substring scan over the same records.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import msgspec
from bench_kit import median_ms, parse_runs

from efold.corpus import generate_hard
from efold.folds.fold import TracePrefix
from efold.folds.lookup import LookupTool
from efold.folds.meter import Meter
from efold.folds.registry import BUILTIN_ARMS, get_fold
from efold.folds.snapshot import read_checkpoint, write_checkpoint
from efold.folds.store import HistoryStore


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=101)
    args = parse_runs(parser, runs=5, quick_runs=1, quick_help="one run (CI); overrides --runs")

    item = generate_hard(args.seed)
    prefix = TracePrefix.of(item.trace)
    size = len(msgspec.json.encode(prefix))
    print(f"trace {prefix.trace_id}: {len(prefix.events)} events, {size / 1e6:.2f} MB, runs={args.runs}")

    baseline = median_ms(lambda: msgspec.json.encode(prefix), args.runs)
    print(f"\n{'arm':14s} {'median ms':>10s} {'x baseline':>11s}   (baseline: JSON-encode the prefix, {baseline:.1f} ms)")
    for name in BUILTIN_ARMS:
        fold = get_fold(name)
        ms = median_ms(lambda fold=fold: fold.build(prefix), args.runs)  # type: ignore[misc]
        flag = "" if ms < 1000 else "  OVER 1 s TARGET"
        print(f"{name:14s} {ms:10.1f} {ms / baseline:11.1f}{flag}")

    store_checkpoint = get_fold("store").build(prefix)
    with tempfile.TemporaryDirectory() as scratch:
        counter = iter(range(10**6))

        def write() -> None:
            write_checkpoint(store_checkpoint, Path(scratch) / f"w{next(counter)}")

        write_ms = median_ms(write, args.runs)
        target = Path(scratch) / "r"
        manifest = write_checkpoint(store_checkpoint, target)
        read_ms = median_ms(lambda: read_checkpoint(target, expected_digest=manifest.digest), args.runs)
    print(f"\nsnapshot (store arm, {manifest.total_bytes / 1e6:.2f} MB): write {write_ms:.1f} ms, "
          f"verified read {read_ms:.1f} ms")

    assert store_checkpoint.store is not None
    records = store_checkpoint.store.records
    labels = sorted({m.group(1) for r in records for m in re.finditer(r"^([A-Z][A-Za-z ]{2,30}): ", r.text, re.M)})
    words = sorted({w for r in records[:50] for w in re.findall(r"[a-z]{6,}", r.text)})[:100]
    queries = (labels + words)[:200]
    store = HistoryStore.build(store_checkpoint.store)
    try:
        searched: list[float] = []
        scanned: list[float] = []
        for query in queries:
            tool = LookupTool(store, Meter(call_budget=1, byte_budget=10**9))
            started = time.perf_counter()
            tool.call("history_search", json.dumps({"query": query, "limit": 10}))
            searched.append((time.perf_counter() - started) * 1000)
            needle = query.lower()
            started = time.perf_counter()
            [r.id for r in records if needle in r.text.lower()][:10]
            scanned.append((time.perf_counter() - started) * 1000)
    finally:
        store.close()
    p50, p95 = _percentile(searched, 0.5), _percentile(searched, 0.95)
    b50, b95 = _percentile(scanned, 0.5), _percentile(scanned, 0.95)
    print(f"\nhistory_search over {len(records)} records, {len(queries)} queries:")
    print(f"  metered FTS5 tool  p50 {p50:.2f} ms  p95 {p95:.2f} ms")
    print(f"  linear scan        p50 {b50:.2f} ms  p95 {b95:.2f} ms   (ratio p50 {p50 / b50:.2f}x)")


if __name__ == "__main__":
    main()
