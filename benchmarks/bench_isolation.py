"""Cost of isolating foreign code (``efold.isolation``): per prep child and per boundary
runner command.

    python benchmarks/bench_isolation.py [--runs 25]
    python benchmarks/bench_isolation.py --quick     # 3 runs (CI)

Prep child: a fresh ``python -I`` process that has imported what a prep child imports
times ``isolate([slot])`` (``ctypes`` included: it is loaded at the first syscall), as
this user and, when root, as nobody
(the user-namespace path). Runner: ``/bin/true`` started as ``run_contained`` starts it,
without isolation, with ``ChildIsolation`` as ``preexec_fn`` (the chosen way), and
through an exec wrapper (``python -I -c`` that isolates then execs): the difference to
the bare start is the cost. Medians, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from bench_kit import parse_runs

from efold.isolation import ChildIsolation

# What a prep child has imported before it isolates (its entry, the prep body): the
# timed part is what isolating adds (ctypes, loaded at the first syscall, included).
PREP = """
import sys, time
import efold.worker.entry, efold.worker.prep
from efold.isolation import isolate
t0 = time.perf_counter()
i = isolate([sys.argv[1]])
print((time.perf_counter() - t0) * 1000, i.complete)
"""
WRAPPER = ("import os, sys; from efold.isolation import isolate; "
           "isolate([sys.argv[1]]); os.execv(sys.argv[2], sys.argv[2:])")


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def prep_cost(runs: int, as_nobody: bool) -> tuple[float, bool]:
    ms: list[float] = []
    complete = True
    for _ in range(runs):
        slot = tempfile.mkdtemp(prefix="efold-bench-iso-")
        if as_nobody:
            os.chown(slot, 65534, 65534)
        prefix = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
                  if as_nobody else [])
        out = subprocess.run([*prefix, sys.executable, "-I", "-c", PREP, slot],
                             capture_output=True, text=True, check=True, cwd="/").stdout
        os.rmdir(slot)
        value, ok = out.split()
        ms.append(float(value))
        complete = complete and ok == "True"
    return statistics.median(ms), complete


def spawn(argv: list[str], preexec: Callable[[], None] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   close_fds=True, start_new_session=True, preexec_fn=preexec, check=True)
    return time.perf_counter() - t0


def runner_costs(runs: int) -> dict[str, float]:
    work = tempfile.mkdtemp(prefix="efold-bench-iso-")
    bare: list[float] = []
    preexec: list[float] = []
    wrapper: list[float] = []
    for _ in range(runs):
        bare.append(spawn(["/bin/true"]))
        t0 = time.perf_counter()
        isolation = ChildIsolation([work])
        try:
            spawn(["/bin/true"], isolation.apply)
            isolation.result()
        finally:
            isolation.close()
        preexec.append(time.perf_counter() - t0)
        wrapper.append(spawn([sys.executable, "-I", "-c", WRAPPER, work, "/bin/true"]))
    os.rmdir(work)
    return {"bare": _median_ms(bare), "preexec": _median_ms(preexec),
            "wrapper": _median_ms(wrapper)}


def main() -> int:
    args = parse_runs(argparse.ArgumentParser(description=__doc__), runs=25, quick_runs=3,
                      quick_help="3 runs (CI)")
    ms, ok = prep_cost(args.runs, as_nobody=False)
    print(f"prep child isolate(), median of {args.runs} (ms): {ms:.2f} "
          f"({'isolated' if ok else 'NOT isolated'})")
    if os.geteuid() == 0:
        ms, ok = prep_cost(args.runs, as_nobody=True)
        print(f"prep child isolate() as nobody (user namespace), median (ms): {ms:.2f} "
              f"({'isolated' if ok else 'NOT isolated'})")
    costs = runner_costs(args.runs)
    print(f"runner start of /bin/true, median of {args.runs} (ms): bare {costs['bare']:.2f}, "
          f"preexec isolation {costs['preexec']:.2f} "
          f"(+{costs['preexec'] - costs['bare']:.2f}), exec wrapper {costs['wrapper']:.2f} "
          f"(+{costs['wrapper'] - costs['bare']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
