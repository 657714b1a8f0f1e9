"""Money units, the catalog, Rmax, pricing and the expected-cost scenario."""

from __future__ import annotations

import decimal
import hashlib
from pathlib import Path

import msgspec
import pytest

from efold.errors import Code
from efold.guard import (
    CatalogError,
    GuardError,
    bundled_catalog,
    catalog_digest,
    contract_policy,
    expected_cost_units,
    expected_rounds,
    expected_slot_units,
    load_catalog,
    parse_catalog,
    price_units,
    pricer_for,
    rmax_for_reader,
    rmax_units,
    units_to_usd,
    usd_to_units,
)

FAUX = ("faux", "faux-extractive-v1")


def test_rmax_for_the_faux_rates_is_exactly_3_92_usd() -> None:
    entry = bundled_catalog().entry(*FAUX)
    assert rmax_units(entry) == 78_400_000
    assert units_to_usd(78_400_000) == "3.92"
    assert rmax_for_reader(*FAUX) == 78_400_000
    # The max input-class rate is the cache-write rate (2.5), not uncached input (2).
    assert entry.max_input_class_rate == 50


def test_usd_parsing_is_exact() -> None:
    assert usd_to_units("25.00") == 500_000_000
    assert usd_to_units("0.00000005") == 1
    assert usd_to_units(" 3.92 ") == 78_400_000
    assert usd_to_units(decimal.Decimal("0.1")) == 2_000_000
    assert usd_to_units(7) == 140_000_000
    assert units_to_usd(usd_to_units("1234.56789")) == "1234.56789"
    assert units_to_usd(1) == "0.00000005"
    assert units_to_usd(0) == "0"


@pytest.mark.parametrize("bad", ["0.00000001", "-1", "NaN", "Infinity", "1e", "", 0.1, True])
def test_usd_parsing_refuses(bad: object) -> None:
    with pytest.raises(GuardError) as err:
        usd_to_units(bad)  # type: ignore[arg-type]
    assert err.value.code is Code.LOOKUP_INVALID_RATE


def test_cost_rounds_up_once_to_a_whole_unit() -> None:
    entry = bundled_catalog().entry(*FAUX)
    # cache read is 0.1 USD/M = 2 units/token; flex halves: 1 token -> 1 unit exactly.
    assert price_units(entry, {"input": 1, "output": 0, "cache_read": 1}, "flex") == 1
    gpt5 = bundled_catalog().entry("openai", "gpt-5")
    # cache read 0.125 USD/M = 2.5 units/token: 1 token costs 2.5 -> 3 units;
    # 3 tokens cost 7.5 -> 8 units (rounded once, not 3 x 3 = 9).
    assert price_units(gpt5, {"input": 1, "output": 0, "cache_read": 1}, "default") == 3
    assert price_units(gpt5, {"input": 3, "output": 0, "cache_read": 3}, "default") == 8


def test_pricing_classes_tiers_and_refusals() -> None:
    entry = bundled_catalog().entry(*FAUX)
    counts = {"input": 1000, "cache_read": 200, "cache_write": 100, "output": 50,
              "reasoning": 50}
    # 700*40 + 200*2 + 100*50 + 50*200 = 28000 + 400 + 5000 + 10000 (reasoning not added)
    assert price_units(entry, counts, "default") == 43_400
    assert price_units(entry, counts, "flex") == 21_700
    assert price_units(entry, counts, "priority") == 86_800
    assert price_units(entry, counts, None) == 86_800
    with pytest.raises(GuardError) as tier:
        price_units(entry, counts, "scale")
    assert tier.value.code is Code.LOOKUP_UNKNOWN_TIER
    with pytest.raises(GuardError) as cache:
        price_units(entry, {"input": 10, "output": 0, "cache_read": 11}, "default")
    assert cache.value.code is Code.LOOKUP_USAGE_CACHE_ABOVE_INPUT
    with pytest.raises(GuardError) as neg:
        price_units(entry, {"input": -1, "output": 0}, "default")
    assert neg.value.code is Code.LOOKUP_INVALID_USAGE
    price = pricer_for(*FAUX)
    assert price(counts, "default") == 43_400


def test_catalog_reads_toml_floats_exactly(tmp_path: Path) -> None:
    text = ('version = 1\n[[model]]\nprovider = "p"\nmodel = "m"\n'
            'input = 0.1\noutput = "0.3"\ncache_read = 0\ncache_write = 0.7\n')
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    catalog = load_catalog(path)
    entry = catalog.entry("p", "m")
    assert entry.usd_per_million["input"] == decimal.Decimal("0.1")  # not 0.1000000000000000055
    assert entry.units_per_token["input"] == 2
    assert catalog.digest == hashlib.sha256(text.encode()).hexdigest()
    assert catalog_digest(path) == catalog.digest


def test_bundled_catalog_digest_is_of_the_shipped_bytes() -> None:
    shipped = Path(__file__).resolve().parents[2] / "guard" / "catalog.toml"
    assert catalog_digest() == hashlib.sha256(shipped.read_bytes()).hexdigest()


@pytest.mark.parametrize("text", [
    'version = 2\n[[model]]\nprovider="p"\nmodel="m"\ninput="1"\noutput="1"\ncache_read="1"\ncache_write="1"\n',
    'version = 1\n',
    'version = 1\nextra = 1\n[[model]]\nprovider="p"\nmodel="m"\ninput="1"\noutput="1"\ncache_read="1"\ncache_write="1"\n',
    'version = 1\n[[model]]\nprovider="p"\nmodel="m"\ninput="1"\noutput="1"\ncache_read="1"\n',
    'version = 1\n[[model]]\nprovider="p"\nmodel="m"\ninput="-1"\noutput="1"\ncache_read="1"\ncache_write="1"\n',
    'version = 1\n[[model]]\nprovider="p"\nmodel="m"\ninput="1"\noutput="1"\ncache_read="1"\ncache_write="1"\nmax_output=5\n',
    'version = 1\n[[model]]\nprovider="p"\nmodel="m"\ninput="1"\noutput="1"\ncache_read="1"\ncache_write="1"\n'
    '[[model]]\nprovider="p"\nmodel="m"\ninput="1"\noutput="1"\ncache_read="1"\ncache_write="1"\n',
    'version = 1\n[[model]]\nprovider="p"\nmodel="m"\ninput=inf\noutput="1"\ncache_read="1"\ncache_write="1"\n',
    'not toml [',
])
def test_invalid_catalogs_refuse(text: str) -> None:
    with pytest.raises(CatalogError) as err:
        parse_catalog(text.encode())
    assert err.value.code is Code.CATALOG_INVALID


def test_missing_model_is_not_free() -> None:
    with pytest.raises(GuardError) as err:
        bundled_catalog().entry("faux", "no-such-model")
    assert err.value.code is Code.LOOKUP_INVALID_RATE


def test_expected_scenario_rounds_are_pinned() -> None:
    rounds = expected_rounds()
    # Half of 126,976 returned bytes over two lookups = 31,744 tokens each (1 per byte);
    # round k: 900*k allowance + lookups delivered before it + 300 per earlier round.
    assert [r.input for r in rounds] == [900, 1800 + 31_744 + 300, 2700 + 63_488 + 600]
    assert [r.output for r in rounds] == [300, 300, 300]
    assert all(r.cached * 2 == r.input for r in rounds)


def test_expected_cost_in_exact_units() -> None:
    entry = bundled_catalog().entry(*FAUX)
    total_input = 900 + 33_844 + 66_788  # 101,532
    # Half cached at 2 units/token, half uncached at 40, output 900 tokens at 200.
    expected = total_input // 2 * 40 + total_input // 2 * 2 + 900 * 200
    assert expected_cost_units(entry) == expected == 2_312_172
    assert expected_slot_units(*FAUX) == expected
    # A planner that knows the checkpoint size adds it to each of the three rounds.
    assert expected_slot_units(*FAUX, initial_input_tokens=1000) == expected + 3 * 1000 * 21


def test_contract_policy_is_plain_json_and_binds_the_rules() -> None:
    policy = contract_policy()
    assert msgspec.json.decode(msgspec.json.encode(policy)) == policy
    assert policy["input_envelope"] == 272_000 and policy["max_output"] == 128_000
    assert policy["max_requests"] == 10
    assert policy["money"]["tiers"] == {"default": "1/1", "flex": "1/2", "priority": "2/1"}
    assert "previous_response_id" in policy["wire"]["openai-responses"]["stored_input_refused"]
