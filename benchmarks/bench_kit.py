"""What the benchmark scripts share: the ``--runs``/``--quick`` options and a median timer.

A benchmark runs as ``python benchmarks/<name>.py``, so this module is importable by
name (``from bench_kit import ...``). It is not a benchmark itself: CI runs every
``benchmarks/*.py`` with ``--quick``, and run as a script this module does nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable


def parse_runs(
    parser: argparse.ArgumentParser, *, runs: int, quick_runs: int, quick_help: str
) -> argparse.Namespace:
    """Parse the command line with ``--runs`` (default ``runs``) and ``--quick`` (the CI
    mode ``quick_help`` describes) added: ``--quick`` sets ``runs`` to ``quick_runs``,
    whatever ``--runs`` says."""
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    args = parser.parse_args()
    if args.quick:
        args.runs = quick_runs
    return args


def median_seconds(action: Callable[[], object], runs: int) -> float:
    """The median wall time of ``runs`` calls of ``action``, in seconds."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def median_ms(action: Callable[[], object], runs: int) -> float:
    """``median_seconds`` in milliseconds."""
    return median_seconds(action, runs) * 1000
