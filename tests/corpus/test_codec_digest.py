"""JSONL/JSON io is strict and canonical; digests bind text and probes."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

import msgspec
import pytest

from efold.corpus import (
    CorpusError,
    SuiteItem,
    corpus_digest,
    dump_probes,
    dump_trace,
    item_digest,
    load_probes,
    load_trace,
    trace_digest,
)
from efold.errors import Code


def test_round_trip_is_byte_identical(original_items: list[SuiteItem]) -> None:
    for item in original_items:
        data = dump_trace(item.trace)
        assert dump_trace(load_trace(data)) == data
        assert load_probes(dump_probes(item.probes)) == item.probes


def test_committed_data_files_are_canonical(original_items: list[SuiteItem]) -> None:
    folder = resources.files("efold.corpus.data").joinpath("original")
    for item in original_items:
        trace_id = item.trace.header.trace_id
        assert folder.joinpath(f"{trace_id}.jsonl").read_bytes() == dump_trace(item.trace)
        assert folder.joinpath(f"{trace_id}.probes.json").read_bytes() == dump_probes(item.probes)


def test_first_line_is_the_header_in_the_openai_shape(original_items: list[SuiteItem]) -> None:
    lines = dump_trace(original_items[0].trace).splitlines()
    header = msgspec.json.decode(lines[0])
    assert header["kind"] == "trace" and header["fictional"] is True
    call = next(msgspec.json.decode(line) for line in lines if b'"tool_calls"' in line)
    assert call["role"] == "assistant" and call["tool_calls"][0]["type"] == "function"
    assert isinstance(call["tool_calls"][0]["function"]["arguments"], str)


@pytest.mark.parametrize("mutate", [
    lambda d: d[:-1],  # no trailing newline
    lambda d: d.split(b"\n", 1)[1],  # header missing
    lambda d: d + d.split(b"\n", 1)[0] + b"\n",  # a second header
    lambda d: d.replace(b'"role":"assistant"', b'"role":"system"', 1),
    lambda d: d.replace(b'"steer":true', b'"steer":true,"extra":1', 1),  # unknown field
    lambda d: d + b"{not json\n",
])
def test_malformed_trace_files_are_schema_invalid(
    original_items: list[SuiteItem], mutate: Callable[[bytes], bytes]
) -> None:
    data = dump_trace(original_items[0].trace)
    with pytest.raises(CorpusError) as err:
        load_trace(mutate(data))
    assert err.value.code is Code.TRACE_SCHEMA_INVALID


def test_malformed_probe_file_is_probe_invalid() -> None:
    with pytest.raises(CorpusError) as err:
        load_probes(b'{"trace_id": "x", "probes": [{"id": 1}]}')
    assert err.value.code is Code.PROBE_INVALID


def test_digests_are_stable_and_bind_probes(original_items: list[SuiteItem]) -> None:
    item = original_items[0]
    assert trace_digest(item.trace) == trace_digest(load_trace(dump_trace(item.trace)))
    probes = item.probes.probes
    changed = msgspec.structs.replace(
        item.probes, probes=[msgspec.structs.replace(probes[0], expected=["ACC-XXXX-000"]),
                             *probes[1:]])
    other = SuiteItem(trace=item.trace, probes=changed)
    assert trace_digest(other.trace) == trace_digest(item.trace)
    assert item_digest(other) != item_digest(item)
    assert corpus_digest([other, *original_items[1:]]) != corpus_digest(original_items)


def test_corpus_digest_is_order_independent_and_refuses_duplicates(
    original_items: list[SuiteItem],
) -> None:
    assert corpus_digest(original_items) == corpus_digest(list(reversed(original_items)))
    with pytest.raises(CorpusError) as err:
        corpus_digest([original_items[0], original_items[0]])
    assert err.value.code is Code.TRACE_SCHEMA_INVALID
