"""Wilson intervals, paired counts, Newcombe's paired interval, flip rate, the spread of
per-repeat rates and nearest-rank percentiles."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.report.stats import (
    Z95,
    flip_count,
    nearest_rank,
    newcombe_paired_interval,
    paired_counts,
    proportion,
    repeat_spread,
    wilson_interval,
)


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


# -- Newcombe's paired interval (1998, method 10) ----------------------------------------

# Newcombe (1998), Statistics in Medicine 17:2635-2650, Table II, method 10: the cells
# (A both +, B first only, C second only, D neither) and the published 95% limits of
# p1 - p2, to four decimals. (The same values pin the propint R package's tests.)
NEWCOMBE_TABLE_II = [
    ((36, 12, 2, 0), 0.0569, 0.3404),
    ((18, 12, 2, 18), 0.0562, 0.3290),
    ((53, 0, 0, 1), -0.0729, 0.0729),
    ((0, 30, 0, 0), 0.8395, 1.0),
]


@pytest.mark.parametrize(("cells", "lower", "upper"), NEWCOMBE_TABLE_II)
def test_newcombe_matches_the_published_examples(cells: tuple[int, int, int, int],
                                                 lower: float, upper: float) -> None:
    interval = newcombe_paired_interval(*cells)
    assert interval is not None
    assert interval.lower == pytest.approx(lower, abs=5e-5)
    assert interval.upper == pytest.approx(upper, abs=5e-5)


def test_newcombe_corrects_a_positive_cross_product_by_half_n() -> None:
    """18/12/2/18 has AD - BC = 300 > 0: the published limits need phi from
    max(AD - BC - n/2, 0); the uncorrected phi would give 0.0618 to 0.3239."""
    interval = newcombe_paired_interval(18, 12, 2, 18)
    assert interval is not None
    assert abs(interval.lower - 0.0618) > 1e-3 and abs(interval.upper - 0.3239) > 1e-3


def test_newcombe_edges() -> None:
    assert newcombe_paired_interval(0, 0, 0, 0) is None  # no pair: no interval
    with pytest.raises(ValueError):
        newcombe_paired_interval(1, -1, 0, 0)
    # Every pair discordant one way: the interval reaches the bound exactly.
    assert newcombe_paired_interval(0, 30, 0, 0).upper == 1.0  # type: ignore[union-attr]
    assert newcombe_paired_interval(0, 0, 30, 0).lower == -1.0  # type: ignore[union-attr]
    # No discordant pair: a zero difference with a symmetric interval around it.
    for cells in ((53, 0, 0, 1), (10, 0, 0, 0), (0, 0, 0, 10), (5, 0, 0, 5)):
        interval = newcombe_paired_interval(*cells)
        assert interval is not None
        assert interval.lower < 0.0 < interval.upper
        assert interval.lower == pytest.approx(-interval.upper, abs=1e-15)
    # One pair: still a proper interval within [-1, 1].
    one = newcombe_paired_interval(0, 1, 0, 0)
    assert one is not None and -1.0 <= one.lower < 1.0 == one.upper


_TABLES = st.tuples(*[st.integers(0, 40)] * 4).filter(lambda cells: sum(cells) > 0)


@settings(max_examples=300, deadline=None)
@given(_TABLES)
def test_newcombe_properties(cells: tuple[int, int, int, int]) -> None:
    both, first, second, neither = cells
    n = sum(cells)
    interval = newcombe_paired_interval(*cells)
    assert interval is not None
    assert -1.0 <= interval.lower <= (first - second) / n <= interval.upper <= 1.0
    # Swapping the two roles mirrors the interval around zero.
    mirror = newcombe_paired_interval(both, second, first, neither)
    assert mirror is not None
    assert mirror.lower == pytest.approx(-interval.upper, abs=1e-12)
    assert mirror.upper == pytest.approx(-interval.lower, abs=1e-12)
    # Monotone: one more pair won by the first role (taken from the second's wins)
    # never lowers either limit.
    if second:
        moved = newcombe_paired_interval(both, first + 1, second - 1, neither)
        assert moved is not None
        assert moved.lower >= interval.lower - 1e-12
        assert moved.upper >= interval.upper - 1e-12
    # The same table observed twice as often gives an interval no wider.
    doubled = newcombe_paired_interval(*(2 * cell for cell in cells))
    assert doubled is not None
    assert doubled.upper - doubled.lower <= interval.upper - interval.lower + 1e-12


def test_paired_counts_carry_the_newcombe_interval_in_points() -> None:
    # a correct / b correct: 36 both, 2 a-only (b), 12 b-only (c), 0 neither. The delta
    # is acc(b) - acc(a), so Newcombe's first margin is role b's: (36, 12, 2, 0).
    pairs = [(True, True)] * 36 + [(True, False)] * 2 + [(False, True)] * 12
    counts = paired_counts(pairs)
    assert counts.delta_pp == pytest.approx(20.0)
    assert counts.delta_pp95 is not None
    assert counts.delta_pp95.lower == pytest.approx(5.69, abs=5e-3)
    assert counts.delta_pp95.upper == pytest.approx(34.04, abs=5e-3)
    reverse = paired_counts([(b, a) for a, b in pairs])
    assert reverse.delta_pp == pytest.approx(-20.0)
    assert reverse.delta_pp95 is not None
    assert reverse.delta_pp95.lower == pytest.approx(-counts.delta_pp95.upper, abs=1e-12)
    assert reverse.delta_pp95.upper == pytest.approx(-counts.delta_pp95.lower, abs=1e-12)
    assert paired_counts([]).delta_pp95 is None


# -- the spread of per-repeat rates, nearest-rank percentiles -----------------------------

def test_repeat_spread() -> None:
    assert repeat_spread([]) is None
    assert repeat_spread([0.75]) is None  # one repeat has no spread
    two = repeat_spread([3 / 4, 1 / 3])
    assert two is not None and two.repeats == 2
    assert two.mean == pytest.approx(13 / 24, abs=1e-15)
    # Sample sd (n - 1): for two values |x - y| / sqrt(2); the population sd would be
    # |x - y| / 2.
    assert two.sd == pytest.approx((3 / 4 - 1 / 3) / math.sqrt(2), abs=1e-15)
    three = repeat_spread([0.2, 0.4, 0.6])
    assert three is not None and three.repeats == 3
    assert (three.mean, three.sd) == (pytest.approx(0.4), pytest.approx(0.2))
    same = repeat_spread([0.5, 0.5, 0.5])
    assert same is not None and same.sd == 0.0


def test_nearest_rank() -> None:
    assert nearest_rank([], 50) is None
    assert nearest_rank([7], 50) == nearest_rank([7], 95) == 7
    ten = [10, 1, 9, 2, 8, 3, 7, 4, 6, 5]  # unsorted on purpose
    assert nearest_rank(ten, 50) == 5  # rank ceil(5.0) = 5, never the mean of 5 and 6
    assert nearest_rank(ten, 95) == 10  # rank ceil(9.5) = 10
    assert nearest_rank(ten, 100) == 10
    # The boundary: 95% of 20 is exactly rank 19; of 21, rank ceil(19.95) = 20.
    assert nearest_rank(list(range(1, 21)), 95) == 19
    assert nearest_rank(list(range(1, 22)), 95) == 20
    assert nearest_rank([3, 1, 2, 4], 50) == 2  # rank ceil(2.0) = 2
    assert nearest_rank([3, 1, 2, 4, 5], 50) == 3  # rank ceil(2.5) = 3
    for bad in (0, 101, -5):
        with pytest.raises(ValueError):
            nearest_rank([1], bad)
