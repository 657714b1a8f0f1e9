"""Wall time bound by the endpoint, not by efold: a real-route campaign against a loopback
Chat Completions endpoint that answers every request after a fixed delay, at
``concurrency`` 1, 4 and 8, next to the ideal (slots x delay / N).

    python benchmarks/bench_concurrency.py [--runs 1] [--delay 1.0] [--probes 6]
    python benchmarks/bench_concurrency.py --quick   # delay 0.25 s, 8 slots, N = 1 and 4 (CI)

Each N is its own registered campaign (concurrency is part of the policy the approver
signs), run as an operator runs the real route: keygen, register, authorize (smoke and
pilot), ``smoke``, then ``pilot --real``, with ``CI=1`` (loopback only). The reader is
the real HTTP reader: one guarded request per slot (the ``native`` arm asks without a
lookup tool), admitted, consumed, sent, settled on the endpoint's usage, journaled.

Printed per N (median of ``--runs``): the pilot's whole wall time, its probe phase (first
probe launch to last probe exit, from the journal) and both against the ideal; the
target is the probe phase within 1.2x of ideal at N = 8.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench_kit import parse_runs

EFOLD = [sys.executable, "-m", "efold.controller"]
PROVIDER, MODEL = "local", "delayed"
CATALOG = f"""version = 1

[[model]]
provider = "{PROVIDER}"
model = "{MODEL}"
input = "0.5"
output = "1.5"
cache_read = "0.05"
cache_write = "0.5"
"""
CAMPAIGN = """\
name = "delayed-n{n}"
suite = "original"
roles = ["native"]
probe_limit = {probes}
selection_seed = 1
schedule_seed = 1
cap_usd = "20.00"
concurrency = {n}

[reader]
provider = "{provider}"
model = "{model}"
api = "chat"
base_url = "{url}"
stream = false
catalog = "catalog.toml"
max_output_tokens = 16
max_tokens_field = "max_tokens"
"""
REPLY = {"id": "c1", "object": "chat.completion", "model": MODEL,
         "choices": [{"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": "UNKNOWN"}}],
         "usage": {"prompt_tokens": 1000, "completion_tokens": 2, "total_tokens": 1002}}


@contextmanager
def delayed_endpoint(delay: float) -> Iterator[str]:
    """A loopback endpoint: every POST is answered after ``delay`` seconds, each on its
    own thread (an endpoint that can serve any number at once)."""
    body = json.dumps(REPLY).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


class Operator:
    """One campaign on the real route in ``root``: registered, authorized, smoked."""

    def __init__(self, root: Path, campaign: str) -> None:
        self.root = root
        self.env = {**os.environ, "EFOLD_ACCOUNT_ID": "acct-bench-fictional", "CI": "1"}
        root.mkdir()
        (root / "catalog.toml").write_text(CATALOG)
        (root / "campaign.toml").write_text(campaign)
        self.run("keygen", "--out", "approver")
        out = self.run("register", "campaign.toml", "--output", "reg")
        sha = re.search(r"^sha256: ([0-9a-f]{64})$", out, re.M)
        assert sha, out
        self.reg = ["--registration", str(root / "reg" / "registration.json"),
                    "--sha256", sha[1], "--trust", "approver.pub"]
        (root / "runs").mkdir(mode=0o700)
        self.runs = 0

    def run(self, *args: str) -> str:
        done = subprocess.run([*EFOLD, *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=3600)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def _authorize(self, name: str, *extra: str) -> str:
        self.run("authorize", *self.reg[:4], *extra, "--key", "approver.key",
                 "--out", f"{name}.json", "--output-root", str(self.root / "runs" / name),
                 "--approver", "ops@example.invalid", "--approval-reference", "bench-0001")
        return str(self.root / f"{name}.json")

    def smoke(self) -> None:
        auth = self._authorize("smoke", "--smoke")
        self.run("smoke", *self.reg, "--run-dir", str(self.root / "runs" / "smoke"),
                 "--authorization", auth, "--no-progress")

    def pilot(self) -> tuple[float, float, int]:
        """One ``pilot --real``: (wall seconds, probe-phase seconds, slots)."""
        self.runs += 1
        name = f"pilot-{self.runs}"
        auth = self._authorize(name)
        run = self.root / "runs" / name
        started = time.perf_counter()
        self.run("pilot", "--real", *self.reg, "--run-dir", str(run), "--authorization", auth,
                 "--no-progress")
        wall = time.perf_counter() - started
        with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
            first, last, slots = conn.execute(
                "SELECT MIN(launched_ns), MAX(exited_ns), COUNT(*) FROM launches "
                "WHERE kind = 'probe'").fetchone()
            settled = conn.execute("SELECT COUNT(*) FROM holds WHERE state = 'settled'"
                                   ).fetchone()[0]
        assert settled == slots, f"{settled} of {slots} requests settled"
        return wall, (last - first) / 1e9, int(slots)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=1.0, help="seconds per request")
    parser.add_argument("--probes", type=int, default=6, help="probes per trace (4 traces)")
    parser.add_argument("--levels", default="1,4,8", help="concurrency levels")
    args = parse_runs(parser, runs=1, quick_runs=1,
                      quick_help="delay 0.25 s, 2 probes per trace, N = 1 and 4 (CI)")
    if args.quick:
        args.delay, args.probes, args.levels = 0.25, 2, "1,4"
    levels = [int(n) for n in args.levels.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, delayed_endpoint(args.delay) as url:
        for n in levels:
            op = Operator(Path(tmp) / f"n{n}", CAMPAIGN.format(
                n=n, probes=args.probes, provider=PROVIDER, model=MODEL, url=url))
            op.smoke()
            samples = [op.pilot() for _ in range(args.runs)]
            slots = samples[0][2]
            wall = statistics.median(s[0] for s in samples)
            phase = statistics.median(s[1] for s in samples)
            rows.append((n, slots, wall, phase, slots * args.delay / n))
    print(f"endpoint delay {args.delay:.2f} s per request; runs: {args.runs} (median)")
    print(f"{'N':>3} {'slots':>5} {'ideal':>8} {'probe phase':>12} {'ratio':>6} "
          f"{'pilot wall':>11} {'ratio':>6}")
    for n, slots, wall, phase, ideal in rows:
        print(f"{n:>3} {slots:>5} {ideal:>7.2f}s {phase:>11.2f}s {phase / ideal:>5.2f}x "
              f"{wall:>10.2f}s {wall / ideal:>5.2f}x")
    top = rows[-1]
    print(f"probe phase at N = {top[0]}: {top[3] / top[4]:.2f}x ideal (target <= 1.2x)")


if __name__ == "__main__":
    main()
