"""Input-size price tiers and dated snapshot names in the catalog.

The reference rule: a call is priced at the highest input-size tier whose threshold its
reported input (cached input included) strictly exceeds; Rmax takes the dearest rates
of the base and of every tier an input within the envelope I can reach.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from efold.errors import Code
from efold.guard import (
    CatalogError,
    bundled_catalog,
    contract_policy,
    expected_cost_units,
    expected_rounds,
    parse_catalog,
    price_units,
    rmax_units,
)
from efold.guard.catalog import CatalogEntry
from efold.guard.contract import INPUT_ENVELOPE, MAX_OUTPUT

# Base rates: input 1, output 4, cache read 0.5, cache write 1 USD/M = 20 / 80 / 10 / 20
# units per token. Tier 1 doubles them, tier 2 triples them (x 20 units per USD/M).
BASE = 'provider = "p"\nmodel = "m"\ninput = "1"\noutput = "4"\ncache_read = "0.5"\n' \
       'cache_write = "1"\n'


def _tier(above: object, scale: int = 2) -> str:
    return (f"[[model.input_tier]]\nabove_tokens = {above}\ninput = \"{1 * scale}\"\n"
            f"output = \"{4 * scale}\"\ncache_read = \"{scale / 2:g}\"\n"
            f"cache_write = \"{1 * scale}\"\n")


def _entry(*tiers: str, extra: str = "") -> CatalogEntry:
    text = "version = 1\n[[model]]\n" + BASE + extra + "".join(tiers)
    return parse_catalog(text.encode()).entry("p", "m")


def _refused(text: str) -> Code:
    with pytest.raises(CatalogError) as err:
        parse_catalog(text.encode())
    return err.value.code


def test_rates_pick_the_highest_tier_strictly_exceeded() -> None:
    entry = _entry(_tier(1000, 2), _tier(5000, 3))
    # At the threshold: still base. One token past it: the tier.
    assert entry.rates_for_input(1000)["input"] == 20
    assert entry.rates_for_input(1001)["input"] == 40
    assert entry.rates_for_input(5000)["output"] == 160
    assert entry.rates_for_input(5001)["output"] == 240
    assert entry.rates_for_input(0) == entry.units_per_token


def test_cached_input_counts_toward_the_threshold() -> None:
    entry = _entry(_tier(1000, 2))
    # 1000 reported input tokens (all cache reads): base, 1000 x 10 + 10 x 80.
    assert price_units(entry, {"input": 1000, "cache_read": 1000, "output": 10},
                       "default") == 10_800
    # 1001, all cached: over the threshold, so every class is at the tier's rates.
    assert price_units(entry, {"input": 1001, "cache_read": 1001, "output": 10},
                       "default") == 1001 * 20 + 10 * 160


def test_rmax_counts_only_tiers_an_input_within_the_envelope_can_reach() -> None:
    base = 2 * (INPUT_ENVELOPE * 20 + MAX_OUTPUT * 80)
    tripled = 2 * (INPUT_ENVELOPE * 60 + MAX_OUTPUT * 240)
    assert rmax_units(_entry()) == base == 31_360_000
    # Threshold I - 1: an input of exactly I exceeds it, so the tier is reachable.
    assert rmax_units(_entry(_tier(INPUT_ENVELOPE - 1, 3))) == tripled
    # Threshold I: no admitted input (<= I) strictly exceeds it.
    assert rmax_units(_entry(_tier(INPUT_ENVELOPE, 3))) == base
    # The same boundary with a small envelope passed explicitly.
    assert rmax_units(_entry(_tier(999, 3)), 1000, 0) == 2 * 1000 * 60
    assert rmax_units(_entry(_tier(1000, 3)), 1000, 0) == 2 * 1000 * 20


def test_worst_rates_are_the_classwise_maximum_over_reachable_rate_sets() -> None:
    # A tier dearer on input but cheaper on output: Rmax takes the dearest of each.
    cheap_output = ('[[model.input_tier]]\nabove_tokens = 10\ninput = "5"\noutput = "1"\n'
                    'cache_read = "1"\ncache_write = "1"\n')
    entry = _entry(cheap_output)
    worst = entry.worst_rates_within(100)
    assert worst["input"] == 100 and worst["output"] == 80
    assert entry.worst_rates_within(10) == entry.units_per_token
    assert rmax_units(entry, 100, 10) == 2 * (100 * 100 + 10 * 80)


def test_the_estimate_prices_each_round_at_the_tier_it_reaches() -> None:
    entry = _entry(_tier(1000, 2))
    inputs = [r.input for r in expected_rounds()]
    assert inputs[0] <= 1000 < inputs[1]  # round 1 at base, rounds 2 and 3 at the tier
    half = [Fraction(n, 2) for n in inputs]
    expected = (half[0] * 20 + half[0] * 10 + 300 * 80
                + sum(h * 40 + h * 20 + 300 * 160 for h in half[1:]))
    assert expected_cost_units(entry) == expected == 3_152_460


def test_faux_rmax_is_unchanged_and_the_policy_states_the_tier_rule() -> None:
    assert rmax_units(bundled_catalog().entry("faux", "faux-extractive-v1")) == 78_400_000
    money = contract_policy()["money"]
    assert "strictly exceeded" in money["input_tiers"]
    assert "cached" in money["input_tiers"]


@pytest.mark.parametrize("tiers", [
    [_tier(2000), _tier(1000)],  # unordered
    [_tier(1000), _tier(1000)],  # duplicate threshold
    [_tier(0)],
    [_tier(-5)],
    [_tier('"5"')],
    [_tier("true")],
    [_tier("1.5")],
], ids=["unordered", "duplicate", "zero", "negative", "string", "bool", "fractional"])
def test_bad_thresholds_refuse_with_the_tier_code(tiers: list[str]) -> None:
    text = "version = 1\n[[model]]\n" + BASE + "".join(tiers)
    assert _refused(text) is Code.CATALOG_TIERS_INVALID


def test_an_empty_tier_list_refuses() -> None:
    assert _refused("version = 1\n[[model]]\n" + BASE + "input_tier = []\n") \
        is Code.CATALOG_TIERS_INVALID


@pytest.mark.parametrize("tier", [
    _tier(1000) + "discount = 1\n",  # unknown key
    _tier(1000).replace('cache_write = "2"\n', ""),  # a class missing
    _tier(1000).replace('input = "2"', 'input = "-2"'),  # negative rate
    _tier(1000).replace('input = "2"', "input = inf"),  # not finite
], ids=["unknown-key", "missing-class", "negative-rate", "infinite-rate"])
def test_malformed_tiers_refuse_as_an_invalid_catalog(tier: str) -> None:
    assert _refused("version = 1\n[[model]]\n" + BASE + tier) is Code.CATALOG_INVALID


def test_a_tier_table_that_is_not_an_array_refuses() -> None:
    text = "version = 1\n[[model]]\n" + BASE + "input_tier = 5\n"
    assert _refused(text) is Code.CATALOG_INVALID


def test_snapshots_name_the_same_model() -> None:
    entry = _entry(extra='snapshots = ["m-2025-01-01", "m-2025-02-01"]\n')
    assert entry.accepts_model("m")
    assert entry.accepts_model("m-2025-01-01") and entry.accepts_model("m-2025-02-01")
    assert not entry.accepts_model("m-2025-03-01")
    assert not entry.accepts_model("M") and not entry.accepts_model("")
    assert not _entry().accepts_model("m-2025-01-01")


OTHER = 'provider = "p"\nmodel = "n"\ninput = "1"\noutput = "1"\ncache_read = "1"\n' \
        'cache_write = "1"\n'


@pytest.mark.parametrize("text", [
    BASE + "snapshots = []\n",
    BASE + 'snapshots = [""]\n',
    BASE + "snapshots = [5]\n",
    BASE + 'snapshots = "m-1"\n',
    BASE + 'snapshots = ["m-1", "m-1"]\n',
    BASE + 'snapshots = ["m"]\n',  # the model itself
    BASE + 'snapshots = ["n"]\n[[model]]\n' + OTHER,  # another entry's model
    BASE + 'snapshots = ["x"]\n[[model]]\n' + OTHER + 'snapshots = ["x"]\n',  # claimed twice
])
def test_bad_snapshot_lists_refuse(text: str) -> None:
    assert _refused("version = 1\n[[model]]\n" + text) is Code.CATALOG_INVALID


def test_bundled_openai_entries_accept_their_dated_snapshots() -> None:
    catalog = bundled_catalog()
    assert catalog.entry("openai", "gpt-5").accepts_model("gpt-5-2025-08-07")
    assert catalog.entry("openai", "gpt-5-mini").accepts_model("gpt-5-mini-2025-08-07")
    assert not catalog.entry("openai", "gpt-5").accepts_model("gpt-5-mini-2025-08-07")
    assert catalog.entry("faux", "faux-extractive-v1").accepts_model("faux-extractive-v1")
