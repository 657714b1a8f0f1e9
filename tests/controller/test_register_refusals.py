"""What ``register`` accepts runs safely to a report (issue 35): a credential never sits
in a variable every child inherits, every deadline is bounded, every id the report
requires to be opaque is opaque at ``register``, and a refusal names its key once.

The CLI cases run as real processes, as root and as ``nobody`` (``tests/kit/as_user.py``).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest
from as_user import USERS, give, run_cli, workspace

from efold.controller.campaigns.campaign import (
    DEADLINE_MAXIMA,
    MAX_STEP_SECONDS,
    cap_units,
    parse_campaign,
)
from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import compute_registration
from efold.controller.campaigns.reportable import check_reportable
from efold.controller.errors import CampaignError
from efold.controller.processes.childenv import ALLOWED
from efold.errors import Code
from efold.report.join import join_receipts

FAUX = """
name = "c"
suite = "original"
roles = ["native"]
probe_limit = 1
cap_usd = "5"
"""
ENDPOINT = FAUX.replace('cap_usd = "5"', 'cap_usd = "500"') + """
[reader]
provider = "openai"
model = "gpt-5"
base_url = "https://api.openai.com/v1"
credential_env = "{name}"
"""
GOOD_SUITE = Path(__file__).resolve().parents[1] / "corpus" / "data" / "user_suite" / "good"


def _refused(text: str, base: Path | None = None) -> CampaignError:
    with pytest.raises(CampaignError) as err:
        parse_campaign(text, base)
    return err.value


# -- 1. a credential in an inherited variable ------------------------------------------


@pytest.mark.parametrize("name", ALLOWED)
def test_a_credential_env_every_child_inherits_is_refused(name: str) -> None:
    err = _refused(ENDPOINT.format(name=name))
    assert err.code is Code.CREDENTIAL_ENV_INHERITED and repr(name) in err.detail


def test_a_credential_env_of_its_own_registers() -> None:
    campaign = parse_campaign(ENDPOINT.format(name="OPENAI_API_KEY"))
    assert campaign.reader.credential_env == "OPENAI_API_KEY"


@pytest.mark.parametrize("table", ["summariser", "judge"])
def test_every_profile_is_held_to_the_rule(table: str) -> None:
    text = ENDPOINT.format(name="OPENAI_API_KEY") + f"""
[{table}]
provider = "openai"
model = "gpt-5"
base_url = "https://api.openai.com/v1"
credential_env = "TZ"
"""
    assert _refused(text).code is Code.CREDENTIAL_ENV_INHERITED


# -- 2. bounded deadlines ---------------------------------------------------------------


@pytest.mark.parametrize(("key", "maximum"), sorted(DEADLINE_MAXIMA.items()))
def test_each_deadline_registers_at_its_maximum_and_refuses_one_past(key: str,
                                                                    maximum: float) -> None:
    at = FAUX + f"[deadlines]\n{key} = {maximum!r}\n"
    assert getattr(parse_campaign(at).deadlines, key) == maximum
    past = FAUX + f"[deadlines]\n{key} = {math.nextafter(maximum, math.inf)!r}\n"
    err = _refused(past)
    assert err.code is Code.CAMPAIGN_INVALID and f"deadlines.{key}" in err.detail
    assert f"{maximum:g}" in err.detail


@pytest.mark.parametrize("key", sorted(DEADLINE_MAXIMA))
@pytest.mark.parametrize("value", ["1e300", "inf", "nan", "-inf"])
def test_a_deadline_no_clock_can_hold_is_refused(key: str, value: str) -> None:
    err = _refused(FAUX + f"[deadlines]\n{key} = {value}\n")
    assert err.code is Code.CAMPAIGN_INVALID and f"deadlines.{key}" in err.detail


def test_a_command_timeout_is_bounded_too(tmp_path: Path) -> None:
    role = (f'roles = ["cli"]\n[deadlines]\nprep_seconds = {MAX_STEP_SECONDS!r}\n'
            f'[role.cli]\ncommand = ["{shutil.which("true")}"]\ntimeout_seconds = {{t}}\n')
    text = FAUX.replace('roles = ["native"]\n', "") + role
    assert parse_campaign(text.format(t=repr(MAX_STEP_SECONDS)), tmp_path).roles[0] \
        .timeout_seconds == MAX_STEP_SECONDS
    for bad in ("1e300", "0.0009", "nan"):
        err = _refused(text.format(t=bad), tmp_path)
        assert "timeout_seconds" in err.detail, bad


# -- 3. ids the report requires are opaque at register -----------------------------------


def _suite_with_trace_id(root: Path, trace_id: str) -> Path:
    """A copy of the good suite's ``deploy`` trace under ``trace_id``, with its probe d1
    (d2 asks at an earlier boundary: its item's trace id would be ``<trace_id>+e0005``)."""
    suite = root / "convos"
    suite.mkdir()
    text = (GOOD_SUITE / "deploy.jsonl").read_text()
    (suite / f"{trace_id}.jsonl").write_text(
        text.replace('"trace_id":"deploy"', f'"trace_id":"{trace_id}"', 1))
    first = (GOOD_SUITE / "deploy.probes.jsonl").read_text().splitlines()[0]
    assert '"id": "d1"' in first and "boundary" not in first
    (suite / f"{trace_id}.probes.jsonl").write_text(first + "\n")
    return suite


def _dir_campaign(root: Path) -> str:
    return FAUX.replace('suite = "original"', 'suite = "convos"').replace(
        "probe_limit = 1\n", "")


def test_a_suite_named_by_a_path_with_a_slash_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sub" / "convos").mkdir(parents=True)
    err = _refused(FAUX.replace('suite = "original"', 'suite = "sub/convos"'), tmp_path)
    assert err.code is Code.CAMPAIGN_INVALID and "'sub/convos'" in err.detail


# A slot id is r<repeat>.<role>.<trace>.<probe>: "r1.native." + trace + ".d1" is 13
# characters longer than the trace id, and an id in a report is at most 200.
@pytest.mark.parametrize(("length", "reportable"), [(187, True), (188, False)])
def test_a_trace_id_whose_slot_id_the_report_refuses_is_refused_at_register(
        tmp_path: Path, length: int, reportable: bool) -> None:
    _suite_with_trace_id(tmp_path, "t" * length)
    text = _dir_campaign(tmp_path)
    reg = compute_registration(parse_campaign(text, tmp_path), text.encode())
    if reportable:
        check_reportable(reg)
        assert max(len(s.slot) for s in plan_for(reg).slots) == 200
        assert len(join_receipts(plan_for(reg), [])) == 1  # the report takes the plan
        return
    with pytest.raises(CampaignError) as err:
        check_reportable(reg)
    assert err.value.code is Code.CAMPAIGN_INVALID
    assert "the reports would refuse" in err.value.detail and "slot" in err.value.detail


@pytest.mark.parametrize("campaign", ["default", "hard", "boundary", "resume"])
def test_every_bundled_campaign_is_reportable(campaign: str) -> None:
    from efold.controller.campaigns.campaign import bundled_campaign

    spec, raw = bundled_campaign(campaign)
    check_reportable(compute_registration(spec, raw))


# -- 6. the key is named once ----------------------------------------------------------


@pytest.mark.parametrize(("cap", "detail"), [
    ("-5", "cap_usd: must be finite and >= 0"),
    ("five", "cap_usd: not a decimal"),
])
def test_a_cap_refusal_names_its_key_once(cap: str, detail: str) -> None:
    err = _refused(FAUX.replace('"5"', f'"{cap}"'))
    assert err.code is Code.CAMPAIGN_INVALID and err.detail == detail


def test_cap_units_still_reads_a_good_cap() -> None:
    assert cap_units(parse_campaign(FAUX)) == 5 * 20_000_000


# -- the CLI, as root and as an ordinary user -------------------------------------------


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize(("text", "code", "needle"), [
    (ENDPOINT.format(name="PATH"), "credential_env_inherited", "'PATH'"),
    (FAUX + "[deadlines]\nprobe_seconds = 1e300\n", "campaign_invalid",
     "deadlines.probe_seconds"),
    (FAUX.replace('"original"', '"sub/convos"'), "campaign_invalid", "'sub/convos'"),
    (FAUX.replace('"5"', '"-5"'), "campaign_invalid", "cap_usd: must be"),
], ids=["credential-in-PATH", "probe-1e300", "suite-with-slash", "cap-negative"])
def test_register_refuses_with_its_code_and_writes_nothing(user: str, text: str, code: str,
                                                           needle: str) -> None:
    with workspace(user) as w:
        (w / "sub" / "convos").mkdir(parents=True)
        (w / "c.toml").write_text(text)
        for path in (w / "sub", w / "sub" / "convos", w / "c.toml"):
            give(path, user)
        answer = run_cli(["register", "c.toml", "--output", "out"], w, user)
        assert (answer.exit, answer.code) == (2, code), answer.stderr
        assert needle in answer.detail and "cap_usd: cap_usd" not in answer.detail
        assert not (w / "out").exists()


@pytest.mark.parametrize("user", USERS)
def test_register_refuses_a_long_trace_id_before_writing(user: str) -> None:
    with workspace(user) as w:
        suite = _suite_with_trace_id(w, "t" * 188)
        (w / "c.toml").write_text(_dir_campaign(w))
        for path in (suite, *suite.iterdir(), w / "c.toml"):
            give(path, user)
        answer = run_cli(["register", "c.toml", "--output", "out"], w, user)
        assert (answer.exit, answer.code) == (2, "campaign_invalid"), answer.stderr
        assert "the reports would refuse" in answer.detail
        assert not (w / "out").exists()


@pytest.mark.parametrize("user", USERS)
def test_register_runs_as_the_user_who_asked(user: str) -> None:
    """The kit's drop of privileges is real: what ``register`` writes is the user's."""
    with workspace(user) as w:
        (w / "c.toml").write_text(FAUX)
        give(w / "c.toml", user)
        answer = run_cli(["register", "c.toml", "--output", "out"], w, user)
        assert answer.exit == 0, answer.stderr
        owner = (w / "out" / "registration.json").stat().st_uid
        assert owner == (65534 if user == "nobody" else os.geteuid())


@pytest.mark.parametrize("user", USERS)
def test_pilot_of_a_campaign_file_refuses_what_register_refuses(user: str) -> None:
    """``pilot --campaign`` registers in memory: the same check, before any run."""
    with workspace(user) as w:
        suite = _suite_with_trace_id(w, "t" * 188)
        (w / "c.toml").write_text(_dir_campaign(w))
        for path in (suite, *suite.iterdir(), w / "c.toml"):
            give(path, user)
        answer = run_cli(["pilot", "--faux", "--campaign", "c.toml", "--run-dir", "run"], w,
                         user)
        assert (answer.exit, answer.code) == (2, "campaign_invalid"), answer.stderr
        assert "the reports would refuse" in answer.detail and not (w / "run").exists()
