"""Provider profiles: what a ``[reader]`` or ``[summariser]`` table may say, each
refusal with its code and the field it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from loopback_chat import CATALOG

from efold.controller.campaigns.campaign import load_campaign, parse_campaign
from efold.controller.errors import CampaignError
from efold.errors import Code

HEAD = 'name = "p"\nsuite = "original"\nroles = ["compaction"]\ncap_usd = "5.00"\n'
ENDPOINT = ('provider = "openai"\nmodel = "gpt-5-mini"\nbase_url = "https://api.openai.com/v1"\n'
            'credential_env = "OPENAI_API_KEY"\n')


@pytest.mark.parametrize(("tables", "code", "names"), [
    ("[reader]\n" + ENDPOINT + 'api = "openai-chat"\n', Code.CAMPAIGN_INVALID, "reader.api"),
    ("[reader]\n" + ENDPOINT + "stream = false\n", Code.CAMPAIGN_INVALID, "streamed"),
    ("[reader]\n" + ENDPOINT.replace("https://api.openai.com", "http://10.0.0.7"),
     Code.CAMPAIGN_INVALID, "loopback"),
    ("[reader]\n" + ENDPOINT.replace("OPENAI_API_KEY", "sk-live-abc"), Code.CAMPAIGN_INVALID,
     "NAME"),
    ("[reader]\n" + ENDPOINT + "max_requests = 2\n", Code.CAMPAIGN_INVALID, "max_requests"),
    ("[reader]\n" + ENDPOINT + 'max_tokens_field = "max_tokens"\n', Code.CAMPAIGN_INVALID,
     "chat API only"),
    ("[reader]\n" + ENDPOINT + "max_output_tokens = 128001\n", Code.CAMPAIGN_INVALID,
     "max_output_tokens"),
    ("[reader]\n" + ENDPOINT.replace("gpt-5-mini", "gpt-6"), Code.LOOKUP_INVALID_RATE,
     "openai/gpt-6"),
    ('[reader]\nprovider = "openai"\nmodel = "gpt-5"\n', Code.CAMPAIGN_INVALID,
     "model and base_url"),
    ('[summariser]\nprovider = "deterministic"\nmodel = "m"\n', Code.CAMPAIGN_INVALID,
     "no other keys"),
    ('[summariser]\nprovider = "faux"\n', Code.CAMPAIGN_INVALID, "does not summarise"),
    ("[summariser]\n" + ENDPOINT + "max_requests = 257\n", Code.CAMPAIGN_INVALID, "1-256"),
])
def test_a_profile_the_route_cannot_take_refuses(tables: str, code: Code, names: str) -> None:
    with pytest.raises(CampaignError) as err:
        parse_campaign(HEAD + tables)
    assert err.value.code is code and names in err.value.detail


def test_defaults_by_api_and_the_deterministic_summariser() -> None:
    chat = parse_campaign(HEAD + "[reader]\n" + ENDPOINT + 'api = "chat"\n'
                          '[summariser]\nprovider = "deterministic"\n')
    assert (chat.reader.effort, chat.reader.stream, chat.summariser) == (None, True, None)
    responses = parse_campaign(HEAD + "[reader]\n" + ENDPOINT)
    assert responses.reader.effort == "low" and responses.reader.api == "responses"


def test_a_catalog_path_is_the_campaign_files_sibling(tmp_path: Path) -> None:
    (tmp_path / "prices.toml").write_bytes(CATALOG)
    (tmp_path / "c.toml").write_text(
        HEAD + '[reader]\nprovider = "local"\nmodel = "tiny"\napi = "chat"\n'
        'base_url = "http://127.0.0.1:9/v1"\nstream = false\ncatalog = "prices.toml"\n')
    campaign, _ = load_campaign(tmp_path / "c.toml")
    assert campaign.reader.catalog == str((tmp_path / "prices.toml").resolve())
