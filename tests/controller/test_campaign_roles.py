"""A role's settings, working directory, environment and proxy wiring, and directory
suites: what a campaign accepts, what it refuses (each with ``campaign_invalid`` and a
sentence naming the role and the key), and what reaches the prep task."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from efold.controller.campaigns.campaign import ProxySpec, parse_campaign
from efold.controller.errors import CampaignError
from efold.controller.pilot.preparation import prep_task
from efold.errors import Code
from efold.folds.pinning import fold_identity

HEAD = """
name = "roles"
suite = "original"
roles = ["r"]
cap_usd = "60"
"""


def _campaign(table: str, base: Path | None = None):
    return parse_campaign(HEAD + "[role.r]\n" + table, base)


def _refused(table: str, needle: str, base: Path | None = None) -> None:
    with pytest.raises(CampaignError) as refused:
        _campaign(table, base)
    assert refused.value.code is Code.CAMPAIGN_INVALID
    assert needle in refused.value.detail and "'r'" in refused.value.detail, refused.value.detail


COMMAND = f'command = ["{sys.executable}", "-c", "pass"]\n'
PROXY = COMMAND + 'proxy = { upstream_env = "UPSTREAM", port_env = "PORT" }\n'


def test_a_proxy_role_reaches_its_prep_task(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    campaign = _campaign(PROXY + 'cwd = "work"\nenv = { TRIGGER = "8000" }\n'
                         'settings = { keep = 6, nested = { a = [1, 2] } }\n', tmp_path)
    (role,) = campaign.roles
    assert role.proxy == ProxySpec(upstream_env="UPSTREAM", port_env="PORT")
    assert role.cwd == str(tmp_path / "work")  # relative to the campaign file
    task = prep_task(role, trace_file="t.jsonl", trace_sha256="a" * 64)
    assert task.proxy is not None and task.proxy.model == "faux-extractive-v1"
    assert task.proxy.context_window > 0
    assert (task.settings, task.env, task.cwd) == (role.settings, role.env, role.cwd)
    assert fold_identity(role)["kind"] == "proxy"  # pinned like a command, as a proxy


@pytest.mark.parametrize(("table", "needle"), [
    ('arm = "native"\nsettings = { a = 1 }\n', "takes no settings"),
    ('arm = "compaction"\nsettings = { trigger = 1 }\n', "takes no settings"),
    ('arm = "native"\ncwd = "/"\n', "cwd applies to command roles only"),
    ('arm = "native"\nenv = { A = "1" }\n', "env applies to command roles only"),
    ('arm = "native"\nproxy = { upstream_env = "U", port_env = "P" }\n',
     "proxy applies to command roles only"),
    (COMMAND + 'cwd = "/no/such/dir"\n', "is not a directory"),
    (COMMAND + 'env = { PATH = "/tmp" }\n', "'PATH' is not allowed"),
    (COMMAND + 'env = { EFOLD_X = "1" }\n', "'EFOLD_X' is not allowed"),
    (COMMAND + 'env = { "A-B" = "1" }\n', "'A-B' is not allowed"),
    (COMMAND + 'proxy = { upstream_env = "X", port_env = "X" }\n', "must differ"),
    (PROXY + 'env = { PORT = "1" }\n', "the proxy wiring sets"),
    (COMMAND + f'settings = {{ blob = "{"x" * 70_000}" }}\n', "at most 65536"),
])
def test_role_refusals(table: str, needle: str) -> None:
    _refused(table, needle)


def test_a_proxy_needs_both_names() -> None:
    with pytest.raises(CampaignError) as refused:
        _campaign(COMMAND + 'proxy = { upstream_env = "U" }\n')
    assert refused.value.code is Code.CAMPAIGN_INVALID and "port_env" in refused.value.detail


def test_a_suite_that_is_neither_bundled_nor_a_directory_is_refused(tmp_path: Path) -> None:
    text = HEAD.replace('suite = "original"', 'suite = "my-convos"') + '[role.r]\narm = "native"\n'
    with pytest.raises(CampaignError) as refused:
        parse_campaign(text, tmp_path)
    assert "neither a bundled suite" in refused.value.detail
    (tmp_path / "my-convos").mkdir()
    campaign = parse_campaign(text, tmp_path)
    assert campaign.suite == "my-convos" and campaign.suite_dir == str(tmp_path / "my-convos")
    with pytest.raises(CampaignError) as seeded:
        parse_campaign(text.replace('cap_usd', 'seeds = [101]\ncap_usd'), tmp_path)
    assert "seeds apply to the generated suites (medium, hard) only" in seeded.value.detail


def test_a_relative_script_is_pinned_in_the_command_s_cwd(tmp_path: Path) -> None:
    folds = tmp_path / "folds"
    folds.mkdir()
    (folds / "fold.py").write_text("print('v1')\n")
    campaign = _campaign(f'command = ["{sys.executable}", "fold.py"]\ncwd = "folds"\n', tmp_path)
    (role,) = campaign.roles
    before = fold_identity(role)
    assert list(before["argument_files"]) == ["fold.py"]  # type: ignore[call-overload]
    (folds / "fold.py").write_text("print('v2')\n")
    assert fold_identity(role) != before  # the edit is a new pin
