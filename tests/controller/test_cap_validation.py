"""The cap is checked at register: whole cents, below 2**53 units, at least one Rmax.

A cap below Rmax can never admit a request, so it is refused before anything is frozen
rather than planned as a run that admits nothing.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration
from efold.controller.cli import main
from efold.controller.errors import CampaignError
from efold.errors import Code

FAUX_CAMPAIGN = """
name = "c"
suite = "original"
roles = ["native"]
probe_limit = 1
cap_usd = "{cap}"
"""

MINI_CAMPAIGN = FAUX_CAMPAIGN + """
[reader]
provider = "openai"
model = "{model}"
base_url = "https://api.openai.com/v1"
credential_env = "OPENAI_API_KEY"
"""


def _refusal(text: str) -> CampaignError:
    with pytest.raises(CampaignError) as err:
        parse_campaign(text)
    return err.value


def test_a_cap_of_exactly_rmax_registers_and_one_cent_less_refuses() -> None:
    ok = parse_campaign(FAUX_CAMPAIGN.format(cap="3.92"))  # Rmax = 3.92 USD: one request fits
    assert compute_registration(ok, b"").cap_units == 78_400_000
    below = _refusal(FAUX_CAMPAIGN.format(cap="3.91"))
    assert below.code is Code.CAP_BELOW_RMAX
    assert below.detail == ("cap_usd 3.91 is below one maximum reservation: it must be at "
                            "least 3.92 USD (Rmax for faux/faux-extractive-v1)")


def test_the_minimum_cap_is_rmax_rounded_up_to_a_whole_cent() -> None:
    # gpt-5-mini: 2 x (272,000 x 0.25 + 128,000 x 2) / 1e6 = 0.648 USD.
    parse_campaign(MINI_CAMPAIGN.format(cap="0.65", model="gpt-5-mini"))
    below = _refusal(MINI_CAMPAIGN.format(cap="0.64", model="gpt-5-mini"))
    assert below.code is Code.CAP_BELOW_RMAX
    assert "at least 0.65 USD" in below.detail and "0.648 USD" in below.detail
    assert "openai/gpt-5-mini" in below.detail


@pytest.mark.parametrize("cap", ["3.925", "10.001", "0.000000001", "4.0000001"])
def test_a_cap_finer_than_a_cent_refuses(cap: str) -> None:
    err = _refusal(FAUX_CAMPAIGN.format(cap=cap))
    assert err.code is Code.CAP_NOT_WHOLE_CENTS
    assert cap in err.detail


def test_trailing_zeros_are_still_whole_cents() -> None:
    assert parse_campaign(FAUX_CAMPAIGN.format(cap="4.000000")).cap_usd == "4.000000"


def test_a_long_decimal_is_not_rounded_into_whole_cents() -> None:
    # 32 significant digits: decimal's default 28-digit context would round it to 100.00.
    err = _refusal(FAUX_CAMPAIGN.format(cap="99.999999999999999999999999999999"))
    assert err.code is Code.CAP_NOT_WHOLE_CENTS


def test_the_cap_in_units_stays_below_2_pow_53() -> None:
    # 2**53 units = 450,359,962.7370496 USD: the last whole cent below it registers.
    parse_campaign(FAUX_CAMPAIGN.format(cap="450359962.73"))
    err = _refusal(FAUX_CAMPAIGN.format(cap="450359962.74"))
    assert err.code is Code.CAMPAIGN_INVALID
    assert "2**53" in err.detail


def test_register_refuses_a_campaign_that_bypassed_parsing() -> None:
    campaign = parse_campaign(FAUX_CAMPAIGN.format(cap="60.00"))
    with pytest.raises(CampaignError) as err:
        compute_registration(msgspec.structs.replace(campaign, cap_usd="1.00"), b"")
    assert err.value.code is Code.CAP_BELOW_RMAX


def _register(tmp_path: Path, text: str) -> tuple[int, str, str, Path]:
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(text)
    out = tmp_path / "reg"
    result = CliRunner().invoke(main, ["register", str(campaign), "--output", str(out)])
    return result.exit_code, result.stdout, result.stderr, out


def test_cli_refuses_a_cap_below_rmax_with_the_minimum(tmp_path: Path) -> None:
    code, _, stderr, out = _register(tmp_path, FAUX_CAMPAIGN.format(cap="1.00"))
    assert code == 2
    assert stderr.startswith("refused: cap_below_rmax (cap_usd 1.00 is below")
    assert "at least 3.92 USD" in stderr
    assert not out.exists()


def test_cli_registers_a_cap_equal_to_rmax(tmp_path: Path) -> None:
    code, stdout, _, out = _register(tmp_path, FAUX_CAMPAIGN.format(cap="3.92"))
    assert code == 0 and "sha256: " in stdout
    assert (out / "registration.json").exists()


def test_cli_refuses_a_cap_finer_than_a_cent(tmp_path: Path) -> None:
    code, _, stderr, out = _register(tmp_path, FAUX_CAMPAIGN.format(cap="5.005"))
    assert code == 2 and stderr.startswith("refused: cap_not_whole_cents (")
    assert not out.exists()


def test_cli_refuses_an_unpriced_reader_with_its_code_and_a_sentence(tmp_path: Path) -> None:
    code, _, stderr, out = _register(tmp_path, MINI_CAMPAIGN.format(cap="60.00", model="gpt-6"))
    assert code == 2
    assert stderr.startswith("refused: lookup_invalid_rate (")
    assert "openai/gpt-6" in stderr and "gpt-5-mini" in stderr  # names what is priced
    assert "Traceback" not in stderr
    assert not out.exists()
