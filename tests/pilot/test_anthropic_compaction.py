"""``anthropic-compact``: Anthropic's on-demand compaction as a fold, offline and against
a loopback Messages server.

The fold sends its head as Messages ``messages`` through the real ``CompactGuard`` and
HTTP transport to ``tests/kit/loopback_messages.py`` (the documented ``POST /v1/messages``
with ``compaction: {type: "summarize"}``), settles the cost Anthropic reports only in
``usage.iterations``, and holds the one signed block as digest-bound opaque items. The
plan and registration keep every reader and summariser that cannot use it away.
Nothing here has run against the live service.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from efold_pilot_kit import small_registration

from efold.controller.campaigns.campaign import suite_items, validate_campaign
from efold.controller.campaigns.plan import ineligible_code
from efold.controller.campaigns.profiles import Profile, SummariserProfile
from efold.controller.errors import CampaignError
from efold.corpus.model import Trace
from efold.errors import Code
from efold.folds import TracePrefix
from efold.folds.errors import FoldError
from efold.folds.opaque import ANTHROPIC_COMPACT_KIND
from efold.folds.provider_compact import ANTHROPIC_COMPACT, ProviderCompactFold
from efold.folds.registry import BUILTIN_ARMS
from efold.folds.request import (
    checkpoint_to_chat_request,
    checkpoint_to_messages_request,
    checkpoint_to_request,
)
from efold.guard.wire.faux import FAUX_COMPACTION_PREFIX

SONNET = "claude-sonnet-4-6"
ANTHROPIC_URL = "https://api.anthropic.com/v1"


def long_trace() -> Trace:
    reg, _ = small_registration()
    return suite_items(reg.campaign)[0].trace


def anthropic(profile: type[Profile] = Profile) -> Profile:
    return profile(provider="anthropic", model=SONNET, api="messages", base_url=ANTHROPIC_URL,
                   effort=None, credential_env="ANTHROPIC_API_KEY", max_output_tokens=4096)


def test_offline_the_faux_provider_compacts_into_one_block() -> None:
    fold = BUILTIN_ARMS["anthropic-compact"]()
    checkpoint = fold.build(TracePrefix.of(long_trace()))
    opaque = checkpoint.opaque
    assert opaque is not None
    assert (opaque.provider, opaque.api, opaque.kind) == ("faux", "anthropic-messages",
                                                          ANTHROPIC_COMPACT_KIND)
    [block] = opaque.items
    assert block["type"] == "compaction" and block["content"].startswith(FAUX_COMPACTION_PREFIX)
    again = BUILTIN_ARMS["anthropic-compact"]().build(TracePrefix.of(long_trace()))
    assert again.opaque is not None and again.opaque.items_sha256 == opaque.items_sha256
    payload = checkpoint_to_messages_request(checkpoint, "Q?", model="m", instructions="I")
    assert payload["messages"][0] == {"role": "assistant", "content": [block]}


def test_a_reply_that_is_not_one_compaction_block_builds_nothing() -> None:
    for reply in ([], [{"type": "text", "text": "hi"}],
                  [{"type": "compaction", "content": "a"}, {"type": "compaction", "content": "b"}],
                  [{"type": "compaction", "content": ""}]):
        fold = ProviderCompactFold(ANTHROPIC_COMPACT, lambda head, r=reply: r,
                                   provider="anthropic")
        with pytest.raises(FoldError) as raised:
            fold.build(TracePrefix.of(long_trace()))
        assert raised.value.code is Code.FOLD_PROVIDER_COMPACTION_INVALID


def test_other_wire_formats_refuse_the_block_instead_of_dropping_it() -> None:
    checkpoint = BUILTIN_ARMS["anthropic-compact"]().build(TracePrefix.of(long_trace()))
    for build in (lambda: checkpoint_to_request(checkpoint, "Q?", model="m", instructions=""),
                  lambda: checkpoint_to_chat_request(checkpoint, "Q?", model="m",
                                                     instructions="", stream=False)):
        with pytest.raises(FoldError) as raised:
            build()
        assert raised.value.code is Code.INVENTORY_OPAQUE_READER
    openai = BUILTIN_ARMS["openai-compact"]().build(TracePrefix.of(long_trace()))
    with pytest.raises(FoldError) as raised:
        checkpoint_to_messages_request(openai, "Q?", model="m", instructions="")
    assert raised.value.code is Code.INVENTORY_OPAQUE_READER


def test_the_plan_lets_only_an_anthropic_messages_reader_read_it() -> None:
    reg, _ = small_registration()
    c = reg.campaign
    assert c.summariser is None and c.reader.is_faux
    # Offline: the faux block is Messages-shaped; the faux reader speaks Responses only.
    assert ineligible_code("anthropic-compact", c) is Code.INVENTORY_OPAQUE_READER
    assert ineligible_code("openai-compact", c) is None
    compacted = msgspec.structs.replace(c, summariser=anthropic(SummariserProfile))
    assert ineligible_code("anthropic-compact", compacted) is Code.INVENTORY_OPAQUE_READER
    read = msgspec.structs.replace(compacted, reader=anthropic())
    assert ineligible_code("anthropic-compact", read) is None


def test_registration_refuses_a_summariser_on_another_api() -> None:
    reg, _ = small_registration(roles='["native", "anthropic-compact"]')
    c = msgspec.structs.replace(reg.campaign, reader=anthropic())
    validate_campaign(msgspec.structs.replace(c, summariser=anthropic(SummariserProfile)))
    responses = SummariserProfile(provider="openai", model="gpt-5", api="responses",
                                  base_url="https://api.openai.com/v1", effort=None)
    with pytest.raises(CampaignError) as raised:
        validate_campaign(msgspec.structs.replace(c, summariser=responses))
    assert raised.value.code is Code.CAMPAIGN_INVALID
    assert "api = 'messages'" in raised.value.detail


def test_a_messages_profile_needs_a_reply_limit() -> None:
    reg, _ = small_registration()
    limitless = msgspec.structs.replace(anthropic(), max_output_tokens=None)
    with pytest.raises(CampaignError) as raised:
        validate_campaign(msgspec.structs.replace(reg.campaign, reader=limitless))
    assert raised.value.code is Code.CAMPAIGN_INVALID
    assert "max_output_tokens" in raised.value.detail


FAUX_MESSAGES_CAMPAIGN = """name = "faux-messages"
suite = "original"
traces = ["orig-archive-scan"]
probe_limit = 2
roles = ["native", "anthropic-compact", "openai-compact"]
cap_usd = "60.00"
[reader]
provider = "faux"
api = "messages"
max_output_tokens = 512
"""


def test_offline_a_faux_messages_reader_reads_the_block_end_to_end(tmp_path: Path) -> None:
    """The whole Messages path in real children: a faux reader on ``api = "messages"``
    (guard, allowlist, event-stream parser), the ``anthropic-compact`` checkpoint's block
    first in its request; the Responses-made ``openai-compact`` checkpoint is skipped."""
    (tmp_path / "campaign.toml").write_text(FAUX_MESSAGES_CAMPAIGN)
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "efold.controller", "pilot", "--faux",
                           "--no-progress", "--campaign", "campaign.toml", "--run-dir",
                           str(run)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((run / "results.json").read_bytes())
    execution = {r["role"]: r["overall"]["execution"] for r in results["results"]}
    assert execution["native"]["completed"] == 2
    assert execution["anthropic-compact"]["completed"] == 2
    assert (execution["openai-compact"]["planned"], execution["openai-compact"]["eligible"]) \
        == (2, 0)


@pytest.mark.parametrize("effort", [None, "high"])
def test_the_compaction_request_carries_the_routes_options(effort: str | None) -> None:
    from efold.guard import Contract, WireApi
    from efold.guard.wire.compact_anthropic import check_compact_messages_payload
    from efold.protocol.tasks import Route
    from efold.worker.compact_route import compact_request

    route = Route(provider="anthropic", model=SONNET, api="anthropic-messages",
                  base_url=ANTHROPIC_URL, effort=effort, stream=True, catalog_file=None,
                  catalog_sha256="0" * 64, max_output_tokens=2048)
    head = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    body = compact_request(route, head)
    assert body["max_tokens"] == 2048 and body["compaction"] == {"type": "summarize"}
    contract = Contract(provider="anthropic", model=SONNET, api=WireApi.ANTHROPIC_MESSAGES,
                        base_url=ANTHROPIC_URL, effort=effort, stream=True)
    assert check_compact_messages_payload(body, contract, first_request=True).input_items == 1
