"""Every arm on the real suites: valid content-free checkpoints, pressure evidence on a
hard trace, and availability that differs across arms as designed."""

from __future__ import annotations

import msgspec
import pytest

from efold.corpus.model import Availability, Category, Probe
from efold.folds.arms import (
    CEILING_PRESSURE_TOKENS,
    COLD_DROPPED_RECORDS,
    COMPACTION_PRESSURE_TOKENS,
    MID_TRACE_PRESSURE_TOKENS,
    NATIVE_PRESSURE_TOKENS,
    PROBE_AFTER_MID_PRESSURE_TOKENS,
)
from efold.folds.availability import checkpoint_availability
from efold.folds.checkpoint import Checkpoint
from efold.folds.fold import TracePrefix, checked
from efold.folds.pack import PACK_BUDGET_TOKENS
from efold.folds.projection import PROJECTION_BYTES, PROJECTION_RECORDS, TEXT_WINDOW
from efold.folds.registry import BUILTIN_ARMS, get_fold


@pytest.fixture(scope="module")
def hard_checkpoints(hard_prefix: TracePrefix) -> dict[str, Checkpoint]:
    return {name: get_fold(name).build(hard_prefix) for name in BUILTIN_ARMS}


def _early_identifier(probes: list[Probe], prefix: TracePrefix) -> Probe:
    """The tool_identifier probe whose source is the earliest event (the early account
    reference of docs/architecture.md §6)."""
    order = {e.id: i for i, e in enumerate(prefix.events)}
    identifiers = [p for p in probes if p.category is Category.TOOL_IDENTIFIER]
    return min(identifiers, key=lambda p: order[p.source_event or ""])


def _evaluator_strings(probes: list[Probe]) -> list[str]:
    values: list[str] = []
    for p in probes:
        values += [*p.expected, *p.superseded, *p.forbidden, *([p.secret] if p.secret else [])]
    return [v for v in values if len(v) >= 6]


def test_every_arm_builds_a_valid_content_free_checkpoint_on_the_original_suite(original_items):
    for item in original_items:
        prefix = TracePrefix.of(item.trace)
        secrets = _evaluator_strings(item.probes.probes)
        for name in BUILTIN_ARMS:
            checkpoint = checked(get_fold(name).build(prefix), name, prefix)
            receipt_json = msgspec.json.encode(checkpoint.receipt).decode()
            assert not [s for s in secrets if s in receipt_json], (name, "receipt holds content")
            assert checkpoint == get_fold(name).build(prefix)  # deterministic


def test_original_availability_cold_loses_the_early_rule_store_recovers_it(original_items):
    for item in original_items:
        prefix = TracePrefix.of(item.trace)
        recall = next(
            p for p in item.probes.probes
            if p.category is Category.ACTIVE_CONSTRAINT and p.mode == "recall"
        )
        states = {
            name: checkpoint_availability(get_fold(name).build(prefix), [recall])[0].availability
            for name in ("native", "cold-rebuild", "store", "pack")
        }
        assert states == {
            "native": Availability.PRESENT,
            "cold-rebuild": Availability.ABSENT,
            "store": Availability.RECOVERABLE,
            "pack": Availability.PRESENT,  # owner rules are packed verbatim
        }
        abstentions = [p for p in item.probes.probes if p.category is Category.ABSTENTION]
        native = get_fold("native").build(prefix)
        assert {a.availability for a in checkpoint_availability(native, abstentions)} == {
            Availability.NOT_APPLICABLE
        }


def test_native_keeps_everything(hard_checkpoints, hard_prefix):
    receipt = hard_checkpoints["native"].receipt
    assert receipt.messages == receipt.source_events == len(hard_prefix.events)
    assert receipt.tool_results == receipt.source_tool_records
    assert receipt.tokens_estimate == receipt.source_tokens_estimate
    (pressure,) = receipt.pressure
    assert pressure.threshold == NATIVE_PRESSURE_TOKENS and pressure.met


def test_cold_rebuild_pressure_on_a_hard_trace(hard_checkpoints):
    receipt = hard_checkpoints["cold-rebuild"].receipt
    projection = receipt.projection
    assert projection is not None
    assert projection.text_messages_kept == TEXT_WINDOW
    assert projection.tool_records_projected <= PROJECTION_RECORDS
    assert projection.projected_bytes <= PROJECTION_BYTES
    assert projection.tool_records_dropped >= COLD_DROPPED_RECORDS
    assert {p.measure: p.met for p in receipt.pressure} == {
        "text_messages_replayed": True,
        "tool_records_dropped": True,
    }


def test_compaction_pressure_on_a_hard_trace(hard_checkpoints):
    one = hard_checkpoints["compaction"].receipt
    assert one.boundary.verified and len(one.compactions) == 1
    assert one.compactions[0].tokens_before >= COMPACTION_PRESSURE_TOKENS
    assert one.compactions[0].tokens_before >= one.compactions[0].trigger_tokens == 6_400
    assert all(p.met for p in one.pressure)
    two = hard_checkpoints["compaction-2"].receipt
    mid, probe = two.compactions
    assert (mid.stage, probe.stage) == ("mid_trace", "probe") and two.boundary.verified
    assert mid.tokens_before >= MID_TRACE_PRESSURE_TOKENS
    assert probe.tokens_before >= PROBE_AFTER_MID_PRESSURE_TOKENS
    ceiling = hard_checkpoints["ceiling"].receipt
    assert ceiling.boundary.verified
    assert ceiling.compactions[0].tokens_before >= CEILING_PRESSURE_TOKENS
    assert all(p.met for p in ceiling.pressure)


def test_store_compaction_crosses_the_compaction_and_keeps_the_store(hard_checkpoints):
    """(h): the compaction arm's context (one proactive compaction at the smallest
    trigger, the same summary and tail), plus the retained store and its lookup tools."""
    both = hard_checkpoints["store-compaction"]
    plain = hard_checkpoints["compaction"]
    receipt = both.receipt
    assert receipt.boundary.kind == "compaction" and receipt.boundary.verified
    assert len(receipt.compactions) == 1 and receipt.compactions[0].trigger_tokens == 6_400
    assert all(p.met for p in receipt.pressure)
    assert both.messages == plain.messages  # the context is the compaction arm's
    assert plain.tools == [] and plain.store is None
    assert both.tools and both.store is not None
    assert receipt.store is not None and receipt.store.records > 0


def test_pack_is_bounded_and_store_arms_retain_records(hard_checkpoints):
    pack = hard_checkpoints["pack"].receipt.pack
    assert pack is not None and pack.tokens_estimate <= PACK_BUDGET_TOKENS
    for name in ("store", "pack"):
        store = hard_checkpoints[name].receipt.store
        assert store is not None and store.records > 0
        assert store.omitted_credential == 1  # the temporary password's result


def test_hard_availability_differs_across_arms_as_designed(hard_checkpoints, hard_item, hard_prefix):
    early = _early_identifier(hard_item.probes.probes, hard_prefix)
    states = {
        name: checkpoint_availability(hard_checkpoints[name], [early])[0]
        for name in ("native", "cold-rebuild", "store", "pack")
    }
    assert states["native"].availability is Availability.PRESENT
    assert states["cold-rebuild"].availability is Availability.ABSENT
    assert states["store"].availability is Availability.RECOVERABLE
    assert states["store"].path == "search"
    assert states["pack"].availability is Availability.RECOVERABLE
    assert states["pack"].path == "get"  # the pack cites the source record
    for result in (states["store"], states["pack"]):
        assert 0 < result.calls <= 8 and 0 < result.bytes <= 126_976


def test_original_traces_cross_the_smallest_compaction_trigger(original_items):
    # The original traces are 11k-14k estimated tokens (corpus.shapes), over the 6,400
    # trigger: both compaction arms cross their boundary there, as on the hard suite,
    # while the 200k ceiling never fires on them.
    for item in original_items:
        prefix = TracePrefix.of(item.trace)
        for name in ("compaction", "compaction-2"):
            receipt = get_fold(name).build(prefix).receipt
            assert receipt.boundary.verified
            assert receipt.source_tokens_estimate >= 11_000
        assert len(get_fold("compaction-2").build(prefix).receipt.compactions) == 2
        assert not get_fold("ceiling").build(prefix).receipt.boundary.verified


def test_the_harness_overhead_counts_toward_the_trigger(synthetic, make_filler):
    t = synthetic("overhead")
    for i in range(12):
        t.owner(f"Read document {i}.")
        t.tool(make_filler(1_600, f"d{i}"), name="document_read")
        t.reply(f"Document {i} read.")
    bare = get_fold("compaction").build(t.prefix())
    assert 4_000 < bare.receipt.source_tokens_estimate < 6_400
    assert not bare.receipt.boundary.verified
    prefix = TracePrefix(trace_id="overhead", events=t.events, context_overhead_tokens=2_000)
    counted = get_fold("compaction").build(prefix)
    (stats,) = counted.receipt.compactions
    assert counted.receipt.boundary.verified
    assert stats.tokens_before == bare.receipt.tokens_estimate + 2_000
