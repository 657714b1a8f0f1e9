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
    ('[reader]\nprovider = "local"\nmodel = "m"\napi = "chat"\n'
     'base_url = "https://example.com/v1"\n', Code.CAMPAIGN_INVALID, "priced at zero"),
    ('[reader]\nprovider = "local"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
     'credential_env = "KEY"\napi = "chat"\n', Code.CAMPAIGN_INVALID, "priced at zero"),
    ('[reader]\nprovider = "local"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
     'server = "lmstudio"\n', Code.CAMPAIGN_INVALID, "reader.server must be one of"),
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


def test_a_server_preset_fills_what_the_table_leaves_out() -> None:
    local = 'provider = "local"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
    preset = parse_campaign(HEAD + "[reader]\n" + local + 'server = "llama-cpp-python"\n')
    r = preset.reader
    assert (r.api, r.stream, r.max_tokens_field, r.effort, r.server) == (
        "chat", False, "max_tokens", None, "llama-cpp-python")
    assert r.is_local
    # A key the table sets wins over the preset.
    own = parse_campaign(HEAD + "[reader]\n" + local + 'server = "llama-server"\n'
                         "stream = false\n")
    assert (own.reader.api, own.reader.stream) == ("chat", False)
    # The bundled catalog prices any local model at zero; a summariser may now make
    # dozens of requests per checkpoint.
    summarised = parse_campaign(HEAD + "[summariser]\n" + local + 'server = "vllm"\n')
    assert summarised.summariser is not None
    assert summarised.summariser.max_requests == 64
    assert summarised.summariser.max_tokens_field == "max_completion_tokens"


def test_a_catalog_path_is_the_campaign_files_sibling(tmp_path: Path) -> None:
    (tmp_path / "prices.toml").write_bytes(CATALOG)
    (tmp_path / "c.toml").write_text(
        HEAD + '[reader]\nprovider = "local"\nmodel = "tiny"\napi = "chat"\n'
        'base_url = "http://127.0.0.1:9/v1"\nstream = false\ncatalog = "prices.toml"\n')
    campaign, _ = load_campaign(tmp_path / "c.toml")
    assert campaign.reader.catalog == str((tmp_path / "prices.toml").resolve())
