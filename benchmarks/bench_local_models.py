"""A campaign against models on this machine, on the local route, as a table: each
role's exact accuracy with its 95% Wilson interval, its checkpoint's size, and the wall
time per slot (the median of the role's slots, prep excluded) and of the whole run.

    python benchmarks/bench_local_models.py --reader URL --model NAME \\
        [--summariser URL --summariser-model NAME] [--server llama-server] \\
        [--limit 2] [--roles native,compaction] [--campaign FILE] [--runs 1]
    python benchmarks/bench_local_models.py --quick    # CI: the model server's first block

The figures are the run's own (``results.json``, its receipts), printed as the Markdown
table ``docs/local-models.md`` holds. ``--quick`` uses ``EFOLD_MODEL_SERVER_URL`` (the
model server ``.ci/model_server.sh`` starts) as reader and summariser, one block of the
compaction role; without that server it says so and exits 0. Tiny models on a small CPU: the
point is that the route is right and the figures are honest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EFOLD = [sys.executable, "-m", "efold.controller"]


def _interval(exact: dict[str, Any]) -> str:
    if not exact["trials"]:
        return "-"
    w = exact["wilson95"]
    return (f"{exact['successes']}/{exact['trials']} "
            f"({w['lower'] * 100:.0f}-{w['upper'] * 100:.0f}%)")


def run_once(args: argparse.Namespace, root: Path) -> tuple[Path, float, int]:
    cmd = [*EFOLD, "pilot", "--runs", str(root), "--json", "--no-progress"]
    for flag, value in (("--reader", args.reader), ("--model", args.model),
                        ("--summariser", args.summariser),
                        ("--summariser-model", args.summariser_model),
                        ("--server", args.server), ("--campaign", args.campaign),
                        ("--roles", args.roles), ("--limit", args.limit)):
        if value is not None:
            cmd += [flag, str(value)]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root,
                          env={**os.environ, "COLUMNS": "200"})
    seconds = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        sys.exit(f"pilot failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return Path(json.loads(lines[-1])["run"]), seconds, done.returncode


def table(run: Path, seconds: float) -> str:
    results = json.loads((run / "results.json").read_bytes())
    receipts = [json.loads(p.read_bytes()) for p in (run / "receipts").glob("*.json")]
    rows = ["| role | exact (95% CI) | checkpoint (median tokens) | s per slot (median) |",
            "| --- | --- | --- | --- |"]
    for role in results["results"]:
        name = role["role"] if "role" in role else role["arm"]
        times = [r["elapsed_ms"] / 1000 for r in receipts
                 if r["role"] == name and r.get("elapsed_ms") is not None]
        compression = role["compression"]
        size = "-" if compression is None else f"{compression['tokens_median']:,}"
        median = f"{statistics.median(times):.1f}" if times else "-"
        rows.append(f"| {name} | {_interval(role['overall']['exact'])} | {size} | {median} |")
    run_info = results["run"]
    slots = results["execution"]["visited"]
    rows.append("")
    status = results["status"] or {}
    codes = sorted({r["code"] for r in receipts if r.get("code")})
    rows.append(f"reader {run_info['reader']}; summarisers "
                f"{json.dumps(run_info['summarisers'])}; {slots} slots in {seconds:.0f} s "
                f"({seconds / max(slots, 1):.1f} s per slot, preparation included); "
                f"{status.get('verdict', '?')}"
                + (f" ({status['stop']})" if status.get("stop") else "")
                + (f"; slot codes: {', '.join(codes)}" if codes else ""))
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reader")
    parser.add_argument("--model")
    parser.add_argument("--summariser")
    parser.add_argument("--summariser-model")
    parser.add_argument("--server")
    parser.add_argument("--campaign")
    parser.add_argument("--roles")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="repeat the run (figures of each)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keep", metavar="DIR", help="make the runs under DIR and keep them")
    args = parser.parse_args()
    if args.quick:
        url = os.environ.get("EFOLD_MODEL_SERVER_URL")
        if not url:
            print("no model server (EFOLD_MODEL_SERVER_URL unset): nothing measured; "
                  "start one with: eval \"$(bash .ci/model_server.sh start)\"")
            return 0
        args.reader = args.summariser = url
        args.model = args.summariser_model = "smollm2"
        args.server = args.server or "llama-server"
        args.roles, args.limit = "compaction", 1
    if args.reader is None and args.summariser is None and args.campaign is None:
        parser.error("give --reader/--model, --summariser/--summariser-model or --campaign")
    with tempfile.TemporaryDirectory(prefix="efold-local-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        for n in range(args.runs):
            run, seconds, status = run_once(args, root)
            print(f"run {n + 1}: exit {status} ({run})", flush=True)
            print(table(run, seconds), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
