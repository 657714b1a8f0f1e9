"""The optional ``[judge]`` profile (19-C): what it may say, that the cap must fit its
Rmax, and what the registration binds of it (profile, model, template sha256, rubric)
while a registration without a judge carries no trace of one."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.judge_profile import JudgeProfile, judge_terms
from efold.controller.campaigns.profiles import profile_rmax_units
from efold.controller.campaigns.registration import (
    compute_registration,
    encode_registration,
    load_registration,
    reader_document,
    registration_sha256,
    write_registration,
)
from efold.controller.errors import CampaignError
from efold.errors import Code
from efold.guard.money import UNITS_PER_USD
from efold.worker import judge as worker_judge

HEAD = ('name = "j"\nsuite = "original"\nroles = ["native", "cold-rebuild"]\n'
        'probe_limit = 2\ntraces = ["orig-stage-hire"]\ncap_usd = "{cap}"\n')
FAUX_JUDGE = '[judge]\nprovider = "faux"\n'
UNITS_PER_CENT = UNITS_PER_USD // 100


def campaign_text(judge: str = FAUX_JUDGE, cap: str = "50") -> str:
    return HEAD.format(cap=cap) + judge


def reg_of(text: str):  # type: ignore[no-untyped-def]
    return compute_registration(parse_campaign(text), text.encode())


def test_a_judge_table_defaults_to_the_fields_six_dimensions_and_threshold_3() -> None:
    judge = parse_campaign(campaign_text()).judge
    assert isinstance(judge, JudgeProfile)
    assert judge.rubric == ["accuracy", "context_awareness", "artifact_trail", "completeness",
                            "continuity", "instruction_following"]
    assert judge.pass_threshold == 3
    assert (judge.provider, judge.model) == ("faux", "faux-extractive-v1")
    assert judge_terms(judge).max_requests == 1  # one judge request per answer
    assert parse_campaign(HEAD.format(cap="50")).judge is None


@pytest.mark.parametrize(("extra", "needle"), [
    ("rubric = []\n", "1-12"),
    ('rubric = ["accuracy", "accuracy"]\n', "distinct"),
    ('rubric = ["Accuracy"]\n', "dimension id"),
    ('rubric = ["a b"]\n', "dimension id"),
    ("pass_threshold = 0\n", "pass_threshold"),
    ("pass_threshold = 6\n", "pass_threshold"),
    ("max_requests = 2\n", "max_requests"),
    ('base_url = "http://10.0.0.7/v1"\n', "faux"),
])
def test_a_bad_judge_table_refuses_naming_the_field(extra: str, needle: str) -> None:
    with pytest.raises(CampaignError) as caught:
        parse_campaign(campaign_text(FAUX_JUDGE + extra))
    assert caught.value.code is Code.CAMPAIGN_INVALID
    assert needle in caught.value.detail


@pytest.mark.parametrize("threshold", [1, 5])
def test_the_threshold_bounds_are_accepted(threshold: int) -> None:
    judge = parse_campaign(campaign_text(FAUX_JUDGE + f"pass_threshold = {threshold}\n")).judge
    assert judge is not None and judge.pass_threshold == threshold


def test_an_endpoint_judge_must_name_the_readers_credential_variable() -> None:
    judge = ('[judge]\nprovider = "openai"\nmodel = "gpt-5"\n'
             'base_url = "https://api.openai.com/v1"\n')
    with pytest.raises(CampaignError) as caught:
        parse_campaign(campaign_text(judge + 'credential_env = "OPENAI_API_KEY"\n'))
    assert caught.value.code is Code.CAMPAIGN_INVALID and "credential_env" in caught.value.detail
    reader = ('[reader]\nprovider = "openai"\nmodel = "gpt-5-mini"\n'
              'base_url = "https://api.openai.com/v1"\ncredential_env = "OPENAI_API_KEY"\n')
    both = parse_campaign(campaign_text(reader + judge + 'credential_env = "OPENAI_API_KEY"\n'))
    assert both.judge is not None and both.judge.credential_env == "OPENAI_API_KEY"
    # The faux judge sends nothing anywhere: any reader may have it.
    assert parse_campaign(campaign_text(reader + FAUX_JUDGE)).judge is not None


def test_an_unpriced_judge_model_refuses_with_the_rate_code() -> None:
    table = ('[judge]\nprovider = "openai"\nmodel = "gpt-6"\n'
             'base_url = "https://api.openai.com/v1"\n')
    with pytest.raises(CampaignError) as caught:
        parse_campaign(campaign_text(table))
    assert caught.value.code is Code.LOOKUP_INVALID_RATE


def test_the_cap_must_fit_the_judges_rmax_at_the_exact_cent(tmp_path: Path) -> None:
    # A judge priced ten times the reader: its Rmax, not the reader's, binds the cap.
    (tmp_path / "prices.toml").write_text(
        'version = 1\n\n[[model]]\nprovider = "faux"\nmodel = "faux-extractive-v1"\n'
        'input = "20"\noutput = "100"\ncache_read = "1"\ncache_write = "25"\n')
    table = FAUX_JUDGE + 'catalog = "prices.toml"\n'
    ok = parse_campaign(campaign_text(table, cap="50"), tmp_path)
    assert ok.judge is not None
    rmax = profile_rmax_units(ok.judge)
    assert rmax > profile_rmax_units(ok.reader)
    least = -(-rmax // UNITS_PER_CENT)
    at = f"{least // 100}.{least % 100:02d}"
    below = f"{(least - 1) // 100}.{(least - 1) % 100:02d}"
    assert parse_campaign(campaign_text(table, cap=at), tmp_path).judge is not None
    with pytest.raises(CampaignError) as caught:
        parse_campaign(campaign_text(table, cap=below), tmp_path)
    assert caught.value.code is Code.CAP_BELOW_RMAX


def test_a_registration_without_a_judge_carries_no_trace_of_one() -> None:
    reg = reg_of(campaign_text(judge=""))
    assert b"judge" not in encode_registration(reg)
    assert set(reader_document(reg.campaign)) == {"reader", "roles", "faux_reader_sha256"}


def test_the_registration_binds_the_judge_profile_model_and_template(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain = reg_of(campaign_text(judge=""))
    judged = reg_of(campaign_text())
    assert judged.digests.reader != plain.digests.reader  # the judge is in the reader digest
    doc = reader_document(judged.campaign)
    assert doc["judge_template_sha256"] == worker_judge.template_sha256()
    assert doc["judge_rubric"] == list(worker_judge.DEFAULT_RUBRIC)
    # The registration round-trips and verifies with its judge.
    path, sha = write_registration(judged, tmp_path / "reg")
    assert load_registration(path, sha).registration.campaign.judge == judged.campaign.judge
    base = registration_sha256(judged)
    assert registration_sha256(reg_of(campaign_text())) == base  # deterministic
    # Another model, rubric or threshold: another registration.
    other_model = ('[judge]\nprovider = "openai"\nmodel = "gpt-5"\n'
                   'base_url = "https://api.openai.com/v1"\n')
    assert registration_sha256(reg_of(campaign_text(other_model))) != base
    assert registration_sha256(reg_of(campaign_text(FAUX_JUDGE + 'rubric = ["accuracy"]\n'))) \
        != base
    assert registration_sha256(reg_of(campaign_text(FAUX_JUDGE + "pass_threshold = 4\n"))) \
        != base
    # Another judge prompt: another reader digest, and the old registration no longer
    # verifies (registration_digest_mismatch).
    monkeypatch.setattr(worker_judge, "JUDGE_INSTRUCTIONS",
                        worker_judge.JUDGE_INSTRUCTIONS + " Be strict.")
    changed = reg_of(campaign_text())
    assert changed.digests.reader != judged.digests.reader
    assert registration_sha256(changed) != base
    with pytest.raises(Exception) as caught:
        load_registration(path, sha)
    assert getattr(caught.value, "code", None) is Code.REGISTRATION_DIGEST_MISMATCH


def test_the_judge_profile_is_a_strict_struct() -> None:
    judge = parse_campaign(campaign_text()).judge
    encoded = msgspec.json.encode(judge)
    assert msgspec.json.decode(encoded, type=JudgeProfile) == judge
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(encoded[:-1] + b',"extra":1}', type=JudgeProfile)
