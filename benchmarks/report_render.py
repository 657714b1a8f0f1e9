"""Benchmark: building results-v1 and rendering the three report files.

Baseline, measured in the same run: strictly decoding the plan and every receipt from
JSON, the work the aggregate command must do anyway before it can report. The ratio says
how much the report adds on top of merely reading its inputs.

    .venv/bin/python benchmarks/report_render.py [--runs 7]
    .venv/bin/python benchmarks/report_render.py --quick    # one run (CI)

Sizes: the default campaign (4 traces x 13 probes x 5 roles x 1 repeat = 260 slots) and
a hard-sized campaign with repeats (8 traces x 16 probes x 5 roles x 3 repeats = 1,920).
"""

from __future__ import annotations

import argparse
import hashlib
import random

import msgspec
from bench_kit import median_ms, parse_runs

from efold.corpus.model import Availability, Outcome
from efold.protocol.records import Plan, PlannedSlot, Receipt, SlotSpend, SlotStatus, TokenCounts
from efold.report import build_results, render_html, render_json, render_markdown

ROLES = ["native", "cold-rebuild", "compaction", "store", "pack"]
CATEGORIES = ["tool_identifier", "active_constraint", "superseded_current",
              "commitment_status", "artifact_status", "next_action", "abstention"]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def synthetic(traces: int, probes: int, repeats: int, seed: int = 1) -> tuple[bytes, bytes]:
    """Plan and receipts as the JSON bytes a run directory would hold."""
    rng = random.Random(seed)
    slots: list[PlannedSlot] = []
    for repeat in range(repeats):
        for t in range(traces):
            for p in range(probes):
                for role in ROLES:
                    slots.append(PlannedSlot(
                        slot=f"s{len(slots):05d}", role=role, arm=role, suite="hard",
                        trace_id=f"hard-{101 + t}", probe_id=f"hard-{101 + t}.p{p:02d}",
                        category=CATEGORIES[p % len(CATEGORIES)], repeat=repeat,
                        eligible=True, checkpoint=f"{role}.hard-{101 + t}.r{repeat}"))
    plan = Plan(registration_sha256=_sha("r"), campaign="bench", roles=ROLES, repeats=repeats,
                cap_units=500_000_000, rmax_units=78_400_000, slots=slots,
                schedule_sha256=_sha("s"))
    receipts = []
    for slot in slots:
        outcome = rng.choice([Outcome.CORRECT] * 3 + list(Outcome))
        receipts.append(Receipt(
            slot=slot.slot, role=slot.role, arm=slot.arm, trace_id=slot.trace_id,
            probe_id=slot.probe_id, category=slot.category, repeat=slot.repeat,
            status=SlotStatus.COMPLETED, outcome=outcome, correct=outcome is Outcome.CORRECT,
            availability=rng.choice(list(Availability)),
            spend=SlotSpend(requests=2, admitted=2, settled_units=rng.randrange(10**6),
                        usage=TokenCounts(input=150_000, output=300)),
            answer_sha256=_sha(slot.slot), checkpoint_sha256=_sha(slot.checkpoint)))
    return msgspec.json.encode(plan), msgspec.json.encode(receipts)


def bench(name: str, traces: int, probes: int, repeats: int, runs: int) -> None:
    plan_bytes, receipt_bytes = synthetic(traces, probes, repeats)

    def decode() -> tuple[Plan, list[Receipt]]:
        return (msgspec.json.decode(plan_bytes, type=Plan),
                msgspec.json.decode(receipt_bytes, type=list[Receipt]))

    plan, receipts = decode()
    results = build_results(plan, receipts, faux=True)
    baseline = median_ms(decode, runs)
    build = median_ms(lambda: build_results(plan, receipts, faux=True), runs)
    as_json = median_ms(lambda: render_json(results), runs)
    as_md = median_ms(lambda: render_markdown(results), runs)
    as_html = median_ms(lambda: render_html(results), runs)
    total = build + as_json + as_md + as_html
    sizes = (len(render_json(results)), len(render_markdown(results).encode()),
             len(render_html(results).encode()))
    print(f"{name}: {len(plan.slots)} slots, median of {runs} runs")
    print(f"  baseline decode plan+receipts  {baseline:8.2f} ms")
    print(f"  build_results                  {build:8.2f} ms")
    print(f"  render_json                    {as_json:8.2f} ms")
    print(f"  render_markdown                {as_md:8.2f} ms")
    print(f"  render_html                    {as_html:8.2f} ms")
    print(f"  report total                   {total:8.2f} ms  "
          f"= {total / baseline:.1f}x baseline, {1000 * total / len(plan.slots):.1f} us/slot")
    print(f"  sizes: results.json {sizes[0]:,} B, summary.md {sizes[1]:,} B, "
          f"report.html {sizes[2]:,} B")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    runs = parse_runs(parser, runs=7, quick_runs=1,
                      quick_help="one run (CI); overrides --runs").runs
    bench("default campaign", traces=4, probes=13, repeats=1, runs=runs)
    bench("hard-sized, 3 repeats", traces=8, probes=16, repeats=3, runs=runs)


if __name__ == "__main__":
    main()
