"""Benchmark corpus/: generate and validate the default hard suites.

Run: ``python benchmarks/bench_corpus.py [--runs 5]`` (``--quick``: one run, for CI)

Prints medians of several runs (seconds for all 8 traces of a suite, and MB/s of the
canonical JSONL produced), each with a ratio against a baseline measured in the same
run: decoding the very same JSONL bytes with ``load_trace`` (the floor any consumer
pays just to read the traces). Target: the 8 default hard traces generated and
validated in under 10 s on this machine.
"""

from __future__ import annotations

import argparse
from functools import partial

from bench_kit import median_seconds, parse_runs

from efold.corpus import (
    SuiteItem,
    dump_trace,
    generate_hard,
    load_trace,
    original_suite,
    validate,
)
from efold.corpus.shapes import HARD_DEFAULT_SEEDS
from efold.corpus.suites import _original_items


def _generate(distractors: bool) -> list[SuiteItem]:
    return [generate_hard(seed, distractors=distractors) for seed in HARD_DEFAULT_SEEDS]


def _load_all(blobs: list[bytes]) -> None:
    for blob in blobs:
        load_trace(blob)


def _validate_all(items: list[SuiteItem]) -> None:
    for item in items:
        validate(item)


def _generate_and_validate(distractors: bool) -> None:
    for item in _generate(distractors):
        validate(item)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    runs = parse_runs(parser, runs=5, quick_runs=1,
                      quick_help="one run (CI); overrides --runs").runs

    for suite, distractors in (("hard", False), ("hard-distractors", True)):
        items = _generate(distractors)
        blobs = [dump_trace(i.trace) for i in items]
        megabytes = sum(len(b) for b in blobs) / 1e6
        baseline = median_seconds(partial(_load_all, blobs), runs)
        generate = median_seconds(partial(_generate, distractors), runs)
        validate_only = median_seconds(partial(_validate_all, items), runs)
        both = median_seconds(partial(_generate_and_validate, distractors), runs)
        print(f"{suite}: 8 traces, {megabytes:.2f} MB of JSONL (median of {runs} runs)")
        print(f"  baseline load_trace      {baseline:7.3f} s  {megabytes / baseline:7.1f} MB/s")
        print(f"  generate                 {generate:7.3f} s  {megabytes / generate:7.1f} MB/s"
              f"  x{generate / baseline:.1f} baseline")
        print(f"  validate                 {validate_only:7.3f} s  "
              f"{megabytes / validate_only:7.1f} MB/s  x{validate_only / baseline:.1f} baseline")
        print(f"  generate + validate      {both:7.3f} s  {megabytes / both:7.1f} MB/s"
              f"  x{both / baseline:.1f} baseline  (target < 10 s: "
              f"{'met' if both < 10 else 'MISSED'})")

    def load_original() -> None:
        _original_items.cache_clear()
        original_suite()

    original = median_seconds(load_original, runs)
    print(f"original: 4 traces loaded from package data and validated  {original * 1000:.1f} ms")


if __name__ == "__main__":
    main()
