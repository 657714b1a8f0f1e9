"""Benchmark the three kinds of user fold on one original trace: what running a fold
out of process costs, against the built-in compaction arm in process.

Run: ``python benchmarks/bench_open_folds.py [--runs 5]`` (``--quick``: one run, for CI)

Prints the median build time of one checkpoint (seconds) and its ratio to the baseline
measured in the same run, the built-in ``compaction`` arm:

* ``command``: docs/folds.md's external-command example (a Python process, JSON over
  stdio);
* ``proxy``: docs/folds.md's compaction proxy, replayed through the capture endpoint
  (one HTTP request per assistant message, 66 for this trace, plus the proxy's own
  summarisation calls answered by the deterministic summariser; start and stop of the
  proxy included);
* ``proxy, per request``: the proxy's time divided by the requests it served.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from functools import partial
from pathlib import Path

from bench_kit import median_seconds, parse_runs

from efold.corpus import original_suite
from efold.folds import ExternalCommandFold, TracePrefix, get_fold
from efold.folds.proxy import ProxyFold, deterministic_summary

DOC = Path(__file__).resolve().parents[1] / "docs" / "folds.md"
_EXAMPLE = re.compile(r"<!-- example: ([a-z0-9-]+) -->\n```(\w+)\n(.*?)^```", re.S | re.M)


def _example(name: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    return next(m.group(3) for m in _EXAMPLE.finditer(text) if m.group(1) == name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    runs = parse_runs(parser, runs=5, quick_runs=1,
                      quick_help="one run (CI); overrides --runs").runs
    item = original_suite()[0]
    prefix = TracePrefix.of(item.trace)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "facts_tail.py").write_text(_example("command-fold"))
        (root / "tail_proxy.py").write_text(_example("proxy-fold"))
        command = ExternalCommandFold("facts-tail", [sys.executable, str(root / "facts_tail.py")])
        proxy = ProxyFold("tail-proxy", [sys.executable, str(root / "tail_proxy.py")],
                          upstream_env="OPENAI_BASE_URL", port_env="PORT", model="bench",
                          context_window=68_000, summarise=deterministic_summary,
                          data_dir=root / "data", timeout_s=120)
        baseline = median_seconds(partial(get_fold("compaction").build, prefix), runs)
        rows = [("compaction (built-in, baseline)", baseline),
                ("command", median_seconds(partial(command.build, prefix), runs)),
                ("proxy", median_seconds(partial(proxy.build, prefix), runs))]
    requests = sum(1 for k, e in enumerate(prefix.events) if e.role == "assistant" and k) + 1
    print(f"one checkpoint of {item.trace.header.trace_id} ({len(prefix.events)} events), "
          f"median of {runs} run(s):")
    for name, seconds in rows:
        print(f"  {name:<34} {seconds:8.3f} s  x{seconds / baseline:6.1f}")
    print(f"  {'proxy, per agent request':<34} {rows[2][1] / requests * 1000:8.2f} ms "
          f"({requests} requests)")


if __name__ == "__main__":
    main()
