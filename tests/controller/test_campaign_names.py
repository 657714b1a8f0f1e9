"""A campaign's name is an id in every report of its runs, so ``register`` refuses a name
the reports would refuse (``report_input_invalid``) instead of registering a campaign
none of whose runs could ever be reported."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.cli import main
from efold.controller.errors import CampaignError
from efold.errors import Code
from efold.protocol.records import OPAQUE_ID
from efold.report import ReportError
from efold.report.join import check_id

CAMPAIGN = """
name = {name}
suite = "original"
roles = ["native"]
probe_limit = 1
cap_usd = "5"
"""


def _toml(name: str) -> str:
    return CAMPAIGN.format(name='"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"')


@pytest.mark.parametrize("name", ["-x", "_x", "café", "x" * 201, "", "a b", "a.b", "a/b"])
def test_a_name_the_reports_would_refuse_is_refused_at_register(name: str) -> None:
    with pytest.raises(CampaignError) as err:
        parse_campaign(_toml(name))
    assert err.value.code is Code.CAMPAIGN_INVALID
    assert err.value.detail.startswith("name must be ")
    assert OPAQUE_ID.pattern in err.value.detail  # the form the reports accept


@pytest.mark.parametrize("name", ["x", "0", "Default-2_b", "x" * 200])
def test_a_name_of_the_allowed_form_registers(name: str) -> None:
    assert parse_campaign(_toml(name)).name == name


@pytest.mark.parametrize("name", ["x", "A-1_b", "x" * 200, "x" * 201, "-x", "café", "a.b#c"])
def test_the_form_is_the_one_the_reports_check(name: str) -> None:
    try:
        check_id("campaign", name)
    except ReportError:
        accepted = False
    else:
        accepted = True
    assert accepted is (OPAQUE_ID.fullmatch(name) is not None)


def test_the_cli_refuses_such_a_name_and_writes_nothing(tmp_path: Path) -> None:
    campaign = tmp_path / "c.toml"
    campaign.write_text(_toml("-x"), encoding="utf-8")
    out = tmp_path / "reg"
    result = CliRunner().invoke(main, ["register", str(campaign), "--output", str(out)])
    assert result.exit_code == 2
    assert result.stderr.startswith("refused: campaign_invalid (name must be ")
    assert not out.exists()
