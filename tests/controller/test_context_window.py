"""A model's context window tightens the input envelope I (never widens it): the
checkpoints whose first request cannot fit are inventory-infeasible at plan time, and
Rmax is taken over the tightened envelope."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from loopback_chat import CATALOG

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.profiles import profile_envelope
from efold.controller.cli import main
from efold.controller.errors import CampaignError
from efold.errors import Code
from efold.guard import INPUT_ENVELOPE, Contract, GuardError, WireApi, parse_catalog
from efold.guard.money import units_to_usd
from efold.guard.pricing import rmax_units

WINDOW = 60_000  # U counts bytes: the compaction checkpoint fits, the longer ones do not
CAMPAIGN = """name = "window"
suite = "original"
traces = ["orig-archive-scan"]
probe_limit = 2
roles = ["compaction", "cold-rebuild", "native"]
cap_usd = "5.00"
[reader]
provider = "local"
model = "tiny"
api = "chat"
base_url = "http://127.0.0.1:9/v1"
stream = false
catalog = "catalog.toml"
"""


def _write(tmp_path: Path, window: str) -> Path:
    (tmp_path / "catalog.toml").write_text(CATALOG.decode() + window + "\n")
    (tmp_path / "campaign.toml").write_text(CAMPAIGN)
    return tmp_path / "campaign.toml"


def test_the_window_tightens_the_envelope_and_rmax(tmp_path: Path) -> None:
    campaign = parse_campaign(_write(tmp_path, f"context_window = {WINDOW}").read_text(),
                              tmp_path)
    assert profile_envelope(campaign.reader) == WINDOW
    wide = parse_campaign(_write(tmp_path, "context_window = 1000000").read_text(), tmp_path)
    assert profile_envelope(wide.reader) == INPUT_ENVELOPE  # never widened


def test_a_contract_may_tighten_i_but_never_widen_it() -> None:
    def contract(envelope: int) -> Contract:
        return Contract(provider="local", model="tiny", api=WireApi.OPENAI_CHAT,
                        base_url="http://127.0.0.1:9/v1", effort=None, stream=False,
                        input_envelope=envelope)

    assert contract(WINDOW).input_envelope == WINDOW
    for bad in (INPUT_ENVELOPE + 1, 0):
        with pytest.raises(GuardError) as err:
            contract(bad)
        assert err.value.code is Code.LOOKUP_ROUTE_MISMATCH


def test_a_window_that_is_not_a_positive_integer_refuses(tmp_path: Path) -> None:
    for window in ("context_window = 0", 'context_window = "8k"'):
        with pytest.raises(CampaignError) as err:
            parse_campaign(_write(tmp_path, window).read_text(), tmp_path)
        assert err.value.code is Code.CATALOG_INVALID


def test_plan_skips_the_checkpoints_the_window_cannot_take(tmp_path: Path) -> None:
    _write(tmp_path, f"context_window = {WINDOW}")
    runner = CliRunner()
    registered = runner.invoke(main, ["register", str(tmp_path / "campaign.toml"),
                                      "--output", str(tmp_path / "reg")])
    assert registered.exit_code == 0, registered.output
    sha = registered.output.split("sha256: ")[1].strip()
    planned = runner.invoke(main, ["plan", "--registration", str(tmp_path / "reg" /
                                   "registration.json"), "--sha256", sha, "--json"])
    assert planned.exit_code == 0, planned.output
    summary = json.loads(planned.stdout)  # stderr names the private root
    # compaction fits; cold-rebuild and native (two probes each) do not.
    assert (summary["slots"], summary["eligible"], summary["skipped_inventory_infeasible"]) \
        == (6, 2, 4)
    entry = parse_catalog((tmp_path / "catalog.toml").read_bytes()).entry("local", "tiny")
    assert summary["estimate"]["rmax_usd"] == units_to_usd(rmax_units(entry, WINDOW))
