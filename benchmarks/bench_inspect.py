"""Side by side with inspect_ai: its mock model over N samples, in process and without
isolation, next to efold's default faux pilot over the same number of slots (a fresh,
contained, identity-verified process per slot, a durable journal), in the same run.

    python benchmarks/bench_inspect.py [--inspect-python PATH] [--runs 3]
    python benchmarks/bench_inspect.py --quick      # 20 samples and slots, one run (CI)

inspect_ai is not one of efold's dependencies: it runs under ``--inspect-python`` (an
interpreter that has it; default: this one). Without it the script says so and prints
efold's figure alone. Its mock model is given outputs that carry their usage, so it
never counts tokens (which would fetch a tokenizer over the network). Each sample is a
one-turn ``generate()`` scored by ``match()``: the per-sample cost of inspect's own
machinery. Its figure is its ``eval`` call alone (its imports and start excluded);
efold's is the whole ``pilot`` command, interpreter start and reports included.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_kit import parse_runs
from bench_pilot import pilot_once, register

INSPECT = """
import sys, time
from inspect_ai import Task, eval as run_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate

n = int(sys.argv[1])

def answer(input, tools, tool_choice, config):
    out = ModelOutput.from_content(model="mockllm", content="UNKNOWN")
    out.usage = ModelUsage(input_tokens=1000, output_tokens=2, total_tokens=1002)
    return out

task = Task(dataset=[Sample(input=f"question {i}", target="UNKNOWN") for i in range(n)],
            solver=[generate()], scorer=match())
model = get_model("mockllm/model", custom_outputs=answer)
started = time.perf_counter()
logs = run_eval(task, model=model, display="none", log_dir=sys.argv[2])
wall = time.perf_counter() - started
done = len(logs[0].samples or [])
assert logs[0].status == "success" and done == n, (logs[0].status, done)
print(f"wall {wall:.6f}")
"""


def inspect_once(python: str, n: int, log_dir: Path) -> float | None:
    """inspect_ai's wall time for ``n`` mock samples (its eval call only), or None
    when ``python`` has no inspect_ai."""
    done = subprocess.run([python, "-c", INSPECT, str(n), str(log_dir)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        if "No module named 'inspect_ai'" in done.stderr:
            return None
        raise RuntimeError(done.stderr[-2000:])
    found = re.search(r"^wall ([0-9.]+)$", done.stdout, re.M)
    assert found, done.stdout
    return float(found[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inspect-python", default=sys.executable,
                        help="an interpreter with inspect_ai installed")
    args = parse_runs(parser, runs=3, quick_runs=1,
                      quick_help="20 samples and slots, one run (CI)")
    inspect_walls: list[float] = []
    efold_walls: list[float] = []
    slots = 0
    with tempfile.TemporaryDirectory() as tmp:
        registration = register(Path(tmp), quick=args.quick, concurrency=1)
        for n in range(args.runs):
            wall, _, slots, _ = pilot_once(Path(tmp), registration, "template")
            efold_walls.append(wall)
            measured = inspect_once(args.inspect_python, slots, Path(tmp) / f"logs-{n}")
            if measured is None:
                break
            inspect_walls.append(measured)
    efold = statistics.median(efold_walls)
    print(f"{slots} samples / slots, median of {len(efold_walls)}")
    print(f"  efold faux pilot (template, concurrency 1)  {efold:7.2f} s  "
          f"{efold / slots * 1000:7.1f} ms/slot")
    if not inspect_walls:
        print(f"  inspect_ai: not installed for {args.inspect_python} (it is not an efold "
              "dependency; pass --inspect-python)")
        return
    inspect = statistics.median(inspect_walls)
    print(f"  inspect_ai mockllm, in process              {inspect:7.2f} s  "
          f"{inspect / slots * 1000:7.1f} ms/sample")
    print(f"  ratio efold / inspect_ai                    {efold / inspect:7.2f} x")


if __name__ == "__main__":
    main()
