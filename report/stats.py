"""Statistics the report prints: Wilson 95% intervals, paired contrasts with Newcombe's
interval, flip rate, the spread of per-repeat rates and nearest-rank percentiles.

Pure functions over counts, booleans and integers; they know nothing about slots or
files. Everything is descriptive: a Wilson interval describes sampling uncertainty of one
proportion, a paired delta (and its Newcombe interval) describes the same pairs seen by
two roles. None of it is a significance, power or model-quality claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

from efold.report.schema import FlipCount, Interval, PairCounts, Proportion, RepeatSpread

__all__ = [
    "Z95", "flip_count", "nearest_rank", "newcombe_paired_interval", "paired_counts",
    "proportion", "repeat_spread", "wilson_interval",
]

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
    # Role b's margin comes first: the interval is of acc(b) - acc(a), like delta_pp.
    interval = newcombe_paired_interval(both_correct, c, b, both_wrong)
    return PairCounts(
        delta_pp95=None if interval is None else Interval(lower=100.0 * interval.lower,
                                                          upper=100.0 * interval.upper),
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


def newcombe_paired_interval(both: int, first_only: int, second_only: int, neither: int,
                             z: float = Z95) -> Interval | None:
    """Newcombe's hybrid score interval (Newcombe 1998, method 10) for the difference
    p1 - p2 of two paired proportions, as proportions in [-1, 1]; None without a pair.

    The cells are Newcombe's A..D: ``both`` (+ +), ``first_only`` (+ -), ``second_only``
    (- +) and ``neither`` (- -); n = A + B + C + D, p1 = (A + B) / n, p2 = (A + C) / n.
    With the Wilson intervals (l1, u1) of p1 and (l2, u2) of p2, and phi the correlation
    of the two margins::

        phi     = (AD - BC) / sqrt((A+B)(C+D)(A+C)(B+D)), with AD - BC replaced by
                  max(AD - BC - n/2, 0) when AD > BC, and 0 when a margin is empty
        delta   = sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)
        epsilon = sqrt((u1 - p1)^2 - 2 phi (u1 - p1)(p2 - l2) + (p2 - l2)^2)
        [p1 - p2 - delta, p1 - p2 + epsilon]

    The n/2 correction of a positive AD - BC is Newcombe's own for method 10; with it
    the paper's worked examples come out as published (36/12/2/0: 0.0569 to 0.3404;
    18/12/2/18: 0.0562 to 0.3290; 53/0/0/1: -0.0729 to 0.0729; 0/30/0/0: 0.8395 to 1).
    The bounds are clamped to [-1, 1].
    """
    cells = (both, first_only, second_only, neither)
    if any(cell < 0 for cell in cells):
        raise ValueError(f"invalid paired table {cells}")
    n = sum(cells)
    if n == 0:
        return None
    first, second = both + first_only, both + second_only
    w1, w2 = wilson_interval(first, n, z), wilson_interval(second, n, z)
    assert w1 is not None and w2 is not None  # n > 0
    p1, p2 = first / n, second / n
    margins = first * (second_only + neither) * second * (first_only + neither)
    cross: float = both * neither - first_only * second_only
    if cross > 0:
        cross = max(cross - n / 2.0, 0.0)
    phi = cross / math.sqrt(margins) if margins else 0.0
    d1_low, d1_high = p1 - w1.lower, w1.upper - p1
    d2_low, d2_high = p2 - w2.lower, w2.upper - p2
    # max(0, .): |phi| <= 1 keeps both radicands non-negative; rounding may not.
    delta = math.sqrt(max(0.0, d1_low ** 2 - 2.0 * phi * d1_low * d2_high + d2_high ** 2))
    epsilon = math.sqrt(max(0.0, d1_high ** 2 - 2.0 * phi * d1_high * d2_low + d2_low ** 2))
    difference = (first_only - second_only) / n
    return Interval(lower=max(-1.0, difference - delta), upper=min(1.0, difference + epsilon))


def repeat_spread(rates: Sequence[float]) -> RepeatSpread | None:
    """The mean and sample standard deviation (n - 1 in the denominator) of per-repeat
    rates; None with fewer than two rates (one repeat has no spread)."""
    if len(rates) < 2:
        return None
    mean = math.fsum(rates) / len(rates)
    variance = math.fsum((rate - mean) ** 2 for rate in rates) / (len(rates) - 1)
    return RepeatSpread(repeats=len(rates), mean=mean, sd=math.sqrt(variance))


# A nearest-rank percentile is one of its values, so it keeps their type.
_Value = TypeVar("_Value", int, float)


def nearest_rank(values: Sequence[_Value], percent: int) -> _Value | None:
    """The nearest-rank ``percent``-th percentile: the smallest value such that at
    least ``percent``% of the values are at or below it, i.e. the value at 1-based rank
    ceil(percent * n / 100) of the sorted values (rank 1 at least). Always one of the
    values, never an interpolation; None without values."""
    if not 0 < percent <= 100:
        raise ValueError(f"percentile {percent} is not in (0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-percent * len(ordered) // 100))  # integer ceiling, exact
    return ordered[rank - 1]
