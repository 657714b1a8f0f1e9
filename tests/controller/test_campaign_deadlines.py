"""Deadlines are bound into the authorization in whole milliseconds, so ``register``
refuses one below a millisecond instead of registering a campaign whose every pilot
would fail to authorize."""

from __future__ import annotations

from pathlib import Path

import pytest

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration
from efold.controller.errors import CampaignError
from efold.controller.rundirs.authorize_run import run_bindings
from efold.errors import Code

CAMPAIGN = """
name = "deadlines"
suite = "original"
roles = ["native"]
probe_limit = 1
cap_usd = "5"
[deadlines]
{key} = {value}
"""


@pytest.mark.parametrize("key", ["prep_seconds", "probe_seconds", "run_seconds",
                                 "grace_seconds"])
@pytest.mark.parametrize("value", ["0.0004", "1e-9", "0", "-1"])
def test_a_deadline_below_a_millisecond_is_refused(key: str, value: str) -> None:
    with pytest.raises(CampaignError) as err:
        parse_campaign(CAMPAIGN.format(key=key, value=value))
    assert err.value.code is Code.CAMPAIGN_INVALID and "0.001" in str(err.value)


def test_a_millisecond_registers_and_binds_as_one(tmp_path: Path) -> None:
    text = CAMPAIGN.format(key="run_seconds", value="0.001")
    reg = compute_registration(parse_campaign(text), text.encode())
    bindings = run_bindings(reg, text.encode(), "0" * 64, tmp_path, "EFOLD_FAUX")
    assert bindings.deadlines["run_ms"] == 1
