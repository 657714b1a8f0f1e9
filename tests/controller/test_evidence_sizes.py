"""The checkpoint's reader-visible size in the evidence and the receipt (19-B).

The controller counts it from the verified snapshot's messages (``controller.pilot.evidence``),
never from the fold's own receipt; on every built-in arm the two countings agree, which
is what makes the controller's figure the same one the folds' budgets use."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from efold.controller.pilot.evidence import Evidence, VisibleSize, checkpoint_evidence, visible_size
from efold.controller.pilot.judging import judge_slot, refused_receipt
from efold.corpus import load_suite
from efold.corpus.model import Availability, FunctionCall, Probe, SuiteItem, ToolCall
from efold.errors import Code
from efold.folds.checkpoint import ReaderMessage
from efold.folds.fold import TracePrefix
from efold.folds.registry import BUILTIN_ARMS, get_fold
from efold.folds.snapshot import read_checkpoint, write_checkpoint
from efold.guard.ledger import SlotLedger
from efold.ipc.messages import MeterReading, Terminal, TerminalStatus
from efold.protocol.records import PlannedSlot, Receipt, SlotStatus


def test_visible_size_counts_contents_tool_names_and_arguments() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="history_get", arguments='{"id":"e7"}'))
    messages = [
        ReaderMessage(role="user", content="caf\u00e9 at 9"),  # 9 chars, 10 bytes
        ReaderMessage(role="assistant", content="", tool_calls=[call]),  # 11 + 11 chars
        ReaderMessage(role="tool", content="\u20ac5", tool_call_id="c1", name="history_get"),
    ]
    # chars: 9 + 22 + 2 = 33 -> ceil(33 / 4) = 9 tokens; bytes: 10 + 22 + 4 = 36 (the
    # euro sign is three bytes). Ids and names of tool results are not reader text.
    assert visible_size(messages) == VisibleSize(tokens=9, bytes=36)
    # The exact boundary of the estimate: 32 characters are 8 tokens, 33 are 9.
    assert visible_size([ReaderMessage(role="user", content="x" * 32)]).tokens == 8
    assert visible_size([ReaderMessage(role="user", content="x" * 33)]).tokens == 9
    assert visible_size([]) == VisibleSize(tokens=0, bytes=0)


@pytest.fixture(scope="module")
def item() -> SuiteItem:
    return load_suite("original")[0]


@pytest.mark.parametrize("arm", sorted(BUILTIN_ARMS))
def test_evidence_carries_the_size_the_fold_receipt_counted(tmp_path: Path, item: SuiteItem,
                                                            arm: str) -> None:
    """Through a real snapshot: write, verify, restore, then count."""
    prefix = TracePrefix.of(item.trace)
    checkpoint = get_fold(arm).build(prefix)
    manifest = write_checkpoint(checkpoint, tmp_path / "snap")
    restored = read_checkpoint(tmp_path / "snap", expected_digest=manifest.digest)
    probes = item.probes.probes
    found = checkpoint_evidence("original", restored, probes)
    assert set(found) == {p.id for p in probes}
    receipt = checkpoint.receipt
    for evidence in found.values():
        assert evidence.checkpoint_sha256 == manifest.content_digest
        assert (evidence.checkpoint_tokens, evidence.checkpoint_bytes) == (
            receipt.tokens_estimate, receipt.visible_bytes)
    assert receipt.tokens_estimate > 0 and receipt.visible_bytes >= receipt.visible_chars


def test_a_cold_rebuild_is_smaller_than_native(item: SuiteItem) -> None:
    prefix = TracePrefix.of(item.trace)
    sizes = {arm: visible_size(get_fold(arm).build(prefix).messages) for arm in BUILTIN_ARMS}
    assert sizes["cold-rebuild"].tokens < sizes["native"].tokens
    assert sizes["cold-rebuild"].bytes < sizes["native"].bytes


# -- judging copies the size into the receipt --------------------------------------------

def _slot(probe: Probe) -> PlannedSlot:
    return PlannedSlot(slot="r1.store.t.p", role="store", arm="store", suite="original",
                       trace_id="t", probe_id=probe.id, category=probe.category.value,
                       repeat=1, eligible=True, checkpoint="r1.store.t")


def _probe() -> Probe:
    return next(p for p in load_suite("original")[0].probes.probes
                if p.category.value == "tool_identifier")


def _judge(terminal: Terminal | None, evidence: Evidence) -> Receipt:
    probe = _probe()
    ledger = SlotLedger("r1.store.t.p", requests=1, admitted=1)
    return judge_slot(_slot(probe), probe, ledger, terminal=terminal, failure=None,
                      evidence=evidence, elapsed_ms=3).receipt


def test_the_receipt_carries_the_checkpoint_size_whatever_the_status() -> None:
    probe = _probe()
    sized = Evidence(Availability.PRESENT, None, "c" * 64, checkpoint_tokens=12_345,
                     checkpoint_bytes=49_380)
    answered = Terminal(status=TerminalStatus.ANSWERED, code=None,
                        answer=f"It is {probe.expected[0]}.", meter=MeterReading(calls=0, bytes=0),
                        witness="d" * 64)
    completed = _judge(answered, sized)
    assert completed.status is SlotStatus.COMPLETED
    assert (completed.checkpoint_tokens, completed.checkpoint_bytes) == (12_345, 49_380)
    lost = _judge(None, sized)  # no terminal: incomplete, still read that checkpoint
    assert lost.status is SlotStatus.INCOMPLETE
    assert (lost.checkpoint_tokens, lost.checkpoint_bytes) == (12_345, 49_380)
    bare = _judge(answered, Evidence(Availability.PRESENT, None, "c" * 64))
    assert (bare.checkpoint_tokens, bare.checkpoint_bytes) == (None, None)
    refused = refused_receipt(_slot(probe), Code.NOT_ADMITTED_CAP)  # read no checkpoint
    assert (refused.checkpoint_tokens, refused.checkpoint_bytes) == (None, None)


def test_receipts_without_sizes_decode_and_omit_them() -> None:
    old = msgspec.json.decode(
        b'{"slot":"s0000","role":"store","arm":"store","trace_id":"t1",'
        b'"probe_id":"t1.p00","category":"tool_identifier","repeat":0,"status":"skipped"}',
        type=Receipt)
    assert (old.checkpoint_tokens, old.checkpoint_bytes) == (None, None)
    assert b"checkpoint_tokens" not in msgspec.json.encode(old)
    sized = msgspec.structs.replace(old, checkpoint_tokens=7, checkpoint_bytes=28)
    again = msgspec.json.decode(msgspec.json.encode(sized), type=Receipt)
    assert (again.checkpoint_tokens, again.checkpoint_bytes) == (7, 28)
