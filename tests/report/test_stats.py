"""Wilson intervals, paired counts and flip rate."""

from __future__ import annotations

from decimal import Decimal, getcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.report.stats import Z95, flip_count, paired_counts, proportion, wilson_interval


def wilson_reference(k: int, n: int) -> tuple[Decimal, Decimal]:
    """An independent 50-digit evaluation of the same closed form."""
    getcontext().prec = 50
    z = Decimal(repr(Z95))
    kn, nn = Decimal(k), Decimal(n)
    p = kn / nn
    z2 = z * z
    denominator = 1 + z2 / nn
    centre = (p + z2 / (2 * nn)) / denominator
    half = z / denominator * (p * (1 - p) / nn + z2 / (4 * nn * nn)).sqrt()
    return centre - half, centre + half


def test_z_is_the_two_sided_95_percent_quantile() -> None:
    from statistics import NormalDist

    assert NormalDist().inv_cdf(0.975) == pytest.approx(Z95, abs=1e-15)


@pytest.mark.parametrize(
    ("k", "n", "lower", "upper"),
    [
        (0, 10, 0.0, 0.2775),  # textbook values (Newcombe 1998, table I style)
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (81, 263, 0.2553, 0.3662),
        (1, 1, 0.2065, 1.0),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, lower: float, upper: float) -> None:
    interval = wilson_interval(k, n)
    assert interval is not None
    assert interval.lower == pytest.approx(lower, abs=5e-5)
    assert interval.upper == pytest.approx(upper, abs=5e-5)


def test_wilson_is_null_without_trials_and_refuses_nonsense() -> None:
    assert wilson_interval(0, 0) is None
    empty = proportion(0, 0)
    assert empty.rate is None and empty.wilson95 is None and empty.trials == 0
    for k, n in ((-1, 3), (4, 3), (0, -1)):
        with pytest.raises(ValueError):
            wilson_interval(k, n)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=100_000).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))))
def test_wilson_properties(kn: tuple[int, int]) -> None:
    k, n = kn
    interval = wilson_interval(k, n)
    assert interval is not None
    ref_lower, ref_upper = wilson_reference(k, n)
    # Exact closed form (pinned bounds at the ends, where the closed form is exactly 0/1).
    assert interval.lower == pytest.approx(float(max(ref_lower, Decimal(0))), abs=1e-12)
    assert interval.upper == pytest.approx(float(min(ref_upper, Decimal(1))), abs=1e-12)
    assert 0.0 <= interval.lower <= k / n <= interval.upper <= 1.0
    assert (interval.lower == 0.0) == (k == 0)
    assert (interval.upper == 1.0) == (k == n)
    # Symmetry: failures mirror successes.
    mirror = wilson_interval(n - k, n)
    assert mirror is not None
    assert mirror.lower == pytest.approx(1.0 - interval.upper, abs=1e-12)
    assert mirror.upper == pytest.approx(1.0 - interval.lower, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60))
def test_paired_counts(pairs: list[tuple[bool, bool]]) -> None:
    counts = paired_counts(pairs)
    assert counts.pairs == len(pairs)
    assert counts.both_correct + counts.b + counts.c + counts.both_wrong == len(pairs)
    assert counts.b == sum(a and not b for a, b in pairs)
    assert counts.c == sum(b and not a for a, b in pairs)
    if not pairs:
        assert counts.delta_pp is None
    else:
        accuracy_a = sum(a for a, _ in pairs) / len(pairs)
        accuracy_b = sum(b for _, b in pairs) / len(pairs)
        assert counts.delta_pp == pytest.approx(100 * (accuracy_b - accuracy_a))


def test_paired_counts_example() -> None:
    counts = paired_counts([(True, True), (True, False), (False, True), (False, True),
                            (False, False)])
    assert (counts.both_correct, counts.b, counts.c, counts.both_wrong) == (1, 1, 2, 1)
    assert counts.delta_pp == pytest.approx(20.0)


def test_flip_count() -> None:
    flips = flip_count([[True, True], [True, False], [False], [], [False, False, True]])
    assert (flips.comparable, flips.flipped) == (3, 2)
    assert flips.rate == pytest.approx(2 / 3)
    nothing = flip_count([[True], []])
    assert (nothing.comparable, nothing.flipped, nothing.rate) == (0, 0, None)
