"""Provider compaction as a fold, end to end as far as the checkpoint and the plan.

The ``openai-compact`` fold replays a bundled trace, sends its head through the real
``CompactGuard`` and HTTP transport to a loopback server reproducing the documented
``POST /v1/responses/compact`` shapes (``tests/kit/loopback_compact.py``), and holds
the reply as digest-bound opaque items; the plan marks every reader that is not that
provider and wire API inventory-infeasible (``inventory_opaque_reader``). Offline, the
faux provider plays the endpoint through the same guard.

A prep child building it and a probe child reading it are in
``test_provider_compaction_route.py``. Nothing here has run against the live service.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from efold_pilot_kit import small_registration
from loopback_compact import ENCRYPTED_PREFIX, serve_compact

from efold.controller.campaigns.campaign import suite_items
from efold.controller.campaigns.feasibility import opaque_reader_code
from efold.controller.campaigns.plan import FAUX_COMPACTORS, ineligible_code
from efold.controller.campaigns.profiles import Profile, SummariserProfile
from efold.corpus.model import Trace
from efold.errors import Code
from efold.folds import TracePrefix
from efold.folds.compaction import cut_index
from efold.folds.errors import FoldError
from efold.folds.opaque import OPENAI_COMPACT_KIND, verify_opaque
from efold.folds.provider_compact import (
    OPENAI_COMPACT,
    CompactCall,
    ProviderCompacted,
    ProviderCompactFold,
    reader_request,
)
from efold.folds.request import checkpoint_to_request, message_items
from efold.folds.transcript import reader_message, session_transcript
from efold.guard import FAUX_BASE_URL, Contract, HttpTransport, WireApi, bundled_catalog
from efold.guard.compact import CompactGuard
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.wire.compact_openai import compact_payload
from efold.guard.wire.faux import FAUX_COMPACTION_PREFIX, FauxTransport, faux_compaction
from efold.protocol.tasks import Route
from efold.worker.compact_route import compact_transport

MODEL = "gpt-5"
FAUX_COMPACTOR = FAUX_COMPACTORS["openai-compact"]


def long_trace() -> Trace:
    reg, _ = small_registration()
    return suite_items(reg.campaign)[0].trace


def guarded_compact(guard: CompactGuard, model: str) -> CompactCall:
    """What a prep child's ``CompactRoute.compact`` does, over a test permit source."""

    def compact(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        result = guard.request(compact_payload(model, items))
        if not result.ok:
            raise FoldError(result.code or Code.LOOKUP_STOPPED, "compaction did not settle")
        return list(result.output_items)

    return compact


def loopback_fold(base_url: str) -> tuple[ProviderCompactFold, TestOnlyPermitSource]:
    entry = bundled_catalog().entry("openai", MODEL)
    source = TestOnlyPermitSource(entry=entry)
    contract = Contract(provider="openai", model=MODEL, api=WireApi.OPENAI_RESPONSES,
                        base_url=base_url, effort=None, tools=())
    guard = CompactGuard(contract, entry, source, HttpTransport(base_url), deadline_s=10.0)
    fold = ProviderCompactFold(OPENAI_COMPACT, guarded_compact(guard, MODEL), provider="openai")
    return fold, source


def test_the_provider_compacts_the_head_and_the_tail_stays_visible() -> None:
    trace = long_trace()
    prefix = TracePrefix.of(trace)
    with serve_compact() as server:
        fold, source = loopback_fold(server.base_url)
        built = fold.build_compacted(prefix)
    transcript = session_transcript(prefix.events)
    cut = cut_index(transcript, fold.policy.keep_recent_tokens)
    assert 0 < cut < len(transcript)
    [request] = server.requests
    head = [item for e in transcript[:cut] for item in message_items(reader_message(e))]
    assert request["path"] == "/v1/responses/compact"
    assert request["body"] == {"model": MODEL, "input": head}
    [record] = source.records
    assert record.settled_units is not None and record.settled_units > 0
    opaque = built.opaque
    assert opaque is not None and verify_opaque(opaque) is opaque
    assert (opaque.provider, opaque.api, opaque.kind) == ("openai", "openai-responses",
                                                          OPENAI_COMPACT_KIND)
    assert opaque.items[-1]["encrypted_content"].startswith(ENCRYPTED_PREFIX)
    assert [m.content for m in built.checkpoint.messages] == \
        [reader_message(e).content for e in transcript[cut:]]
    receipt = built.checkpoint.receipt
    assert receipt.boundary.kind == "compaction" and receipt.boundary.verified
    [stats] = receipt.compactions
    assert (stats.summarised_messages, stats.kept_messages) == (cut, len(transcript) - cut)


@pytest.mark.parametrize("mode", ["two_compactions"])
def test_a_settled_reply_without_one_compaction_item_builds_nothing(mode: str) -> None:
    with serve_compact(mode) as server:
        fold, source = loopback_fold(server.base_url)
        with pytest.raises(FoldError) as raised:
            fold.build_compacted(TracePrefix.of(long_trace()))
    assert raised.value.code is Code.FOLD_PROVIDER_COMPACTION_INVALID
    assert source.records[0].settled_units is not None  # the money was settled all the same


def test_a_request_that_does_not_settle_fails_the_build_with_its_code() -> None:
    with serve_compact("missing_usage") as server:
        fold, source = loopback_fold(server.base_url)
        with pytest.raises(FoldError) as raised:
            fold.build_compacted(TracePrefix.of(long_trace()))
    assert raised.value.code is Code.LOOKUP_MISSING_USAGE
    assert source.records[0].settled_units is None


def test_below_the_trigger_nothing_is_sent() -> None:
    trace = long_trace()
    short = msgspec.structs.replace(trace, events=trace.events[:3])
    sent: list[Any] = []
    fold = ProviderCompactFold(OPENAI_COMPACT, lambda items: sent.append(items) or [],
                               provider="openai")
    built = fold.build_compacted(TracePrefix.of(short))
    assert sent == [] and built.opaque is None
    assert not built.checkpoint.receipt.boundary.verified
    assert len(built.checkpoint.messages) == len(session_transcript(short.events))


def faux_build(trace: Trace) -> tuple[ProviderCompacted, FauxTransport]:
    entry = bundled_catalog().entry("faux", "faux-extractive-v1")
    transport = FauxTransport(lambda payload: [], compactor=faux_compaction)
    contract = Contract(provider="faux", model="faux-extractive-v1",
                        api=WireApi.OPENAI_RESPONSES, base_url=FAUX_BASE_URL, effort=None,
                        tools=())
    guard = CompactGuard(contract, entry, TestOnlyPermitSource(entry=entry), transport)
    fold = ProviderCompactFold(OPENAI_COMPACT, guarded_compact(guard, "faux-extractive-v1"),
                               provider=FAUX_COMPACTOR[0])
    return fold.build_compacted(TracePrefix.of(trace)), transport


def test_offline_the_faux_provider_plays_the_endpoint_deterministically() -> None:
    first, transport = faux_build(long_trace())
    again, _ = faux_build(long_trace())
    assert transport.sends == 1
    assert first.opaque is not None and again.opaque is not None
    assert first.opaque.items_sha256 == again.opaque.items_sha256
    assert first.opaque.items[-1]["encrypted_content"].startswith(FAUX_COMPACTION_PREFIX)
    assert opaque_reader_code(first.opaque, *FAUX_COMPACTOR) is None


def test_opaque_items_are_digest_bound() -> None:
    built, _ = faux_build(long_trace())
    assert built.opaque is not None
    items = [dict(i) for i in built.opaque.items]
    items[-1]["encrypted_content"] += "x"
    tampered = msgspec.structs.replace(built.opaque, items=items)
    with pytest.raises(FoldError) as raised:
        verify_opaque(tampered)
    assert raised.value.code is Code.FOLD_OPAQUE_DIGEST_MISMATCH


def test_only_the_same_provider_and_api_can_read_them() -> None:
    built, _ = faux_build(long_trace())
    opaque = built.opaque
    assert opaque_reader_code(None, "openai", "openai-chat") is None
    assert opaque_reader_code(opaque, "faux", "openai-responses") is None
    assert opaque_reader_code(opaque, "faux", "openai-chat") is Code.INVENTORY_OPAQUE_READER
    assert opaque_reader_code(opaque, "openai", "openai-responses") \
        is Code.INVENTORY_OPAQUE_READER


def test_the_plan_marks_other_readers_infeasible_with_the_reason() -> None:
    reg, _ = small_registration()
    c = reg.campaign
    assert c.summariser is None and c.reader.is_faux
    # Offline: the faux compactor, read by the faux reader on the same API.
    assert ineligible_code("openai-compact", c) is None
    chat_reader = msgspec.structs.replace(c, reader=Profile(api="chat", effort=None))
    assert ineligible_code("openai-compact", chat_reader) is Code.INVENTORY_OPAQUE_READER
    openai = SummariserProfile(provider="openai", model=MODEL, api="responses",
                               base_url="https://api.openai.com/v1", effort=None)
    compacted_by_openai = msgspec.structs.replace(c, summariser=openai)
    assert ineligible_code("openai-compact", compacted_by_openai) \
        is Code.INVENTORY_OPAQUE_READER
    read_by_openai = msgspec.structs.replace(
        compacted_by_openai, reader=Profile(provider="openai", model=MODEL,
                                            base_url="https://api.openai.com/v1"))
    assert ineligible_code("openai-compact", read_by_openai) is None
    # Other arms keep their rules: only the suite decides them.
    assert ineligible_code("compaction", chat_reader) is None
    assert ineligible_code("ceiling", c) is Code.INVENTORY_INFEASIBLE


def test_a_same_provider_reader_starts_with_the_opaque_items() -> None:
    built, _ = faux_build(long_trace())
    assert built.opaque is not None
    payload = reader_request(built, "Q?", model="faux-extractive-v1", instructions="I")
    plain = checkpoint_to_request(built.checkpoint, "Q?", model="faux-extractive-v1",
                                  instructions="I")
    n = len(built.opaque.items)
    assert payload["input"][n:] == plain["input"]
    assert payload["input"][n - 1] == {"type": "compaction", "id": "cmp_faux",
                                       "encrypted_content": built.opaque.items[-1][
                                           "encrypted_content"]}
    assert {k: v for k, v in payload.items() if k != "input"} == \
        {k: v for k, v in plain.items() if k != "input"}
    tampered = ProviderCompacted(built.checkpoint, msgspec.structs.replace(
        built.opaque, items=built.opaque.items[:-1]))
    with pytest.raises(FoldError) as raised:
        reader_request(tampered, "Q?", model="faux-extractive-v1", instructions="I")
    assert raised.value.code is Code.FOLD_OPAQUE_DIGEST_MISMATCH


def test_a_prep_child_compacts_on_http_or_with_the_faux_provider() -> None:
    catalog = bundled_catalog().digest
    real = Route(provider="openai", model=MODEL, api="openai-responses",
                 base_url="http://127.0.0.1:9/v1", effort=None, stream=True,
                 catalog_file=None, catalog_sha256=catalog)
    faux = msgspec.structs.replace(real, provider="faux", model="faux-extractive-v1",
                                   base_url=FAUX_BASE_URL)
    http = compact_transport(real, None)
    assert isinstance(http, HttpTransport) and http.route == real.base_url
    offline = compact_transport(faux, None)
    assert isinstance(offline, FauxTransport)
    entry = bundled_catalog().entry("faux", "faux-extractive-v1")
    contract = Contract(provider="faux", model="faux-extractive-v1",
                        api=WireApi.OPENAI_RESPONSES, base_url=FAUX_BASE_URL, effort=None,
                        tools=())
    guard = CompactGuard(contract, entry, TestOnlyPermitSource(entry=entry), offline)
    result = guard.request(compact_payload("faux-extractive-v1", [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]))
    assert result.ok and result.output_items[-1]["type"] == "compaction"
