"""What the benchmark scripts share: the ``--runs``/``--quick`` options, a median timer and
efold's compiled bytecode.

A benchmark runs as ``python benchmarks/<name>.py``, so this module is importable by
name (``from bench_kit import ...``). It is not a benchmark itself: CI runs every
``benchmarks/*.py`` with ``--quick``, and run as a script this module does nothing.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import io
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final


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


# What ``compile_efold`` leaves alone in the package's directory: an editable install's
# root is the whole checkout, and the bundled boundary cases' workspaces are fixtures.
_NOT_IMPORTED: Final = re.compile(r"/(tests|scripts|examples|benchmarks|build)/|/workspace")


def compile_efold() -> str:
    """Byte-compile the efold modules every process of a timed run imports, as ``pip
    install .`` does at install time, and say where. An editable install is compiled at
    first import only, and never where ``PYTHONDONTWRITEBYTECODE`` is set: each run then
    compiles efold's modules from source again, a cost no installed copy pays and none
    of the baselines (inspect_ai, a bare interpreter) pays. Where a module cannot be
    compiled (a package this user cannot write, a broken file) the benchmark goes on,
    and says why."""
    import efold

    root = Path(efold.__file__).parent
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        compiled = compileall.compile_dir(root, quiet=1, rx=_NOT_IMPORTED)
    if compiled:
        return str(root)
    why = next((line.strip() for line in said.getvalue().splitlines() if line.strip()),
               "unknown")
    return f"{root} (not every module compiled: {why[:200]})"
