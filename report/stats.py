"""Statistics the report prints: Wilson 95% intervals, paired contrasts, flip rate.

Pure functions over counts and booleans; they know nothing about slots or files.
Everything is descriptive: a Wilson interval describes sampling uncertainty of one
proportion, a paired delta describes the same pairs seen by two roles. None of it is a
significance, power or model-quality claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from efold.report.schema import FlipCount, Interval, PairCounts, Proportion

__all__ = ["Z95", "flip_count", "paired_counts", "proportion", "wilson_interval"]

# The two-sided 95% normal quantile, Phi^-1(0.975), to double precision.
Z95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z95) -> Interval | None:
    """The Wilson score interval for ``successes`` out of ``trials``; None when
    ``trials == 0`` (there is nothing to estimate).

        centre    = (p + z^2 / 2n) / (1 + z^2 / n)
        half      = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2)

    The bounds are clamped to [0, 1], and pinned to exactly 0 (no success) and exactly
    1 (no failure), where the formula is exact but floating point is not.
    """
    if trials < 0 or successes < 0 or successes > trials:
        raise ValueError(f"invalid proportion {successes}/{trials}")
    if trials == 0:
        return None
    n = float(trials)
    p = successes / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denominator
    half = (z / denominator) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    lower = 0.0 if successes == 0 else max(0.0, centre - half)
    upper = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(lower=lower, upper=upper)


def proportion(successes: int, trials: int) -> Proportion:
    """``successes / trials`` with its Wilson 95% interval (rate null when empty)."""
    interval = wilson_interval(successes, trials)
    rate = successes / trials if trials else None
    return Proportion(successes=successes, trials=trials, rate=rate, wilson95=interval)


def paired_counts(pairs: Iterable[tuple[bool, bool]]) -> PairCounts:
    """Tabulate (a correct, b correct) pairs: concordant cells, discordant ``b`` (a
    right, b wrong) and ``c`` (a wrong, b right), and the paired delta b - a in
    percentage points."""
    both_correct = b = c = both_wrong = 0
    for a_correct, b_correct in pairs:
        if a_correct and b_correct:
            both_correct += 1
        elif a_correct:
            b += 1
        elif b_correct:
            c += 1
        else:
            both_wrong += 1
    total = both_correct + b + c + both_wrong
    delta = 100.0 * (c - b) / total if total else None
    return PairCounts(
        pairs=total, both_correct=both_correct, b=b, c=c, both_wrong=both_wrong, delta_pp=delta
    )


def flip_count(groups: Iterable[Sequence[bool]]) -> FlipCount:
    """Each group is the pass/fail of one (role, trace, probe) across the repeats that
    were scored. A group with fewer than two scored repeats cannot flip and is not
    comparable; a comparable group flipped when its repeats disagree."""
    comparable = flipped = 0
    for outcomes in groups:
        if len(outcomes) < 2:
            continue
        comparable += 1
        if any(outcomes) and not all(outcomes):
            flipped += 1
    rate = flipped / comparable if comparable else None
    return FlipCount(comparable=comparable, flipped=flipped, rate=rate)
