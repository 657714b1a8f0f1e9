"""Exact bounds of the cold boundary and of compaction, on synthetic traces."""

from __future__ import annotations

from efold.folds.arms import CeilingFold, ColdRebuildFold, CompactionFold, CompactionTwiceFold
from efold.folds.checkpoint import cite
from efold.folds.compaction import (
    CEILING_TOKENS,
    KEEP_RECENT_TOKENS,
    SMALLEST_TRIGGER,
    SMALLEST_TRIGGER_TOKENS,
    compact,
    context_tokens,
)
from efold.folds.projection import PROJECTION_BYTES, RESULT_HEAD_BYTES, cold_boundary
from efold.folds.summariser import SUMMARY_BUDGET_TOKENS, summarise
from efold.folds.transcript import session_transcript


def test_text_window_keeps_the_last_64_text_messages(synthetic):
    t = synthetic()
    for i in range(50):
        t.owner(f"Owner note {i}")
        t.reply(f"Assistant note {i}")
    t.tool("tiny result")
    cold = cold_boundary(session_transcript(t.events))
    texts = [m.content for m in cold.messages[1:]]
    assert len(texts) == 64 and texts[0] == "Owner note 18" and texts[-1] == "Assistant note 49"
    assert cold.stats.text_messages_available == 100 and cold.stats.text_messages_kept == 64
    assert all(m.tool_calls is None for m in cold.messages)


def test_projection_stops_at_32_records(synthetic):
    t = synthetic()
    t.owner("start")
    results = [t.tool(f"Result {i}") for i in range(40)]
    cold = cold_boundary(session_transcript(t.events))
    assert cold.projected_ids == [r.id for r in results[-32:]]
    assert cold.stats.tool_records_projected == 32 and cold.stats.tool_records_dropped == 8


def test_projection_stops_at_64_kib_and_keeps_the_16_kib_head(synthetic, make_filler):
    t = synthetic()
    t.owner("start")
    old = t.tool(make_filler(10_000, "old"))
    oversized = t.tool("Booking ref: BK-Q2M8-884\n" + make_filler(40_000, "big") + "\nTAILMARK")
    newest = [t.tool(make_filler(15_000, f"n{i}")) for i in range(3)]
    cold = cold_boundary(session_transcript(t.events))
    # 3 x 15,000 + 16,384 = 61,384 bytes fit; the 10,000-byte record would cross 64 KiB
    assert cold.projected_ids == [oversized.id] + [r.id for r in newest]
    assert cold.stats.projected_bytes == 3 * 15_000 + RESULT_HEAD_BYTES <= PROJECTION_BYTES
    assert cold.stats.tool_records_truncated == 1 and cold.stats.tool_records_dropped == 1
    projection = cold.messages[0].content
    assert "BK-Q2M8-884" in projection and "TAILMARK" not in projection
    assert cite(oversized.id) in projection and cite(old.id) not in projection
    assert f"[truncated: the first {RESULT_HEAD_BYTES} of" in projection


def test_projection_is_a_contiguous_run_of_the_newest_records(synthetic, make_filler):
    t = synthetic()
    t.owner("start")
    small_old = t.tool("small and old")
    t.tool(make_filler(30_000, "a"))
    newest = [t.tool(make_filler(13_000, f"b{i}")) for i in range(4)]
    cold = cold_boundary(session_transcript(t.events))
    # 4 x 13,000 + 16,384 > 64 KiB: the 30 KB record stops the run; the small older one
    # would fit but does not jump the queue
    assert cold.projected_ids == [r.id for r in newest]
    assert small_old.id not in cold.projected_ids


def _long_trace(synthetic, make_filler, turns: int, result_size: int):
    t = synthetic()
    t.owner("Rule: never mention the funding review to any counterparty.")
    mid_marker = None
    for i in range(turns):
        t.owner(f"Please read document {i}.")
        body = (
            f"Document {i}\nLease number: LSE-AAAA-{i:03d}\n"
            + make_filler(result_size // 2, f"x{i}")
            + f"\nMiddle reference: MID-{i:04d}-{i % 1000:03d}\n"
            + make_filler(result_size // 2, f"y{i}")
            + f"\nClosing line {i}"
        )
        result = t.tool(body, name="document_read")
        if i == 0:
            mid_marker = result
        t.reply(f"Read document {i}.")
        if i % 10 == 9:
            t.next_day()
    return t, mid_marker


def test_summariser_keeps_heads_and_tails_and_loses_the_middle(synthetic, make_filler):
    t, _first = _long_trace(synthetic, make_filler, 3, 6_000)
    summary = summarise(session_transcript(t.events)).render()
    assert "Lease number: LSE-AAAA-000" in summary  # head line survives whole
    assert "Closing line 0" in summary  # tail survives
    assert "MID-0000-000" not in summary  # the middle of a long result is lost
    assert "Rule: never mention the funding review to any counterparty." in summary
    assert "characters omitted" in summary


def test_summary_respects_its_budget_by_eliding_oldest_entries(synthetic, make_filler):
    t, _ = _long_trace(synthetic, make_filler, 400, 2_000)
    summary = summarise(session_transcript(t.events))
    assert summary.tokens() <= SUMMARY_BUDGET_TOKENS
    assert summary.elided > 0
    rendered = summary.render()
    # assistant entries go first, then tool results oldest first; owner turns go last
    assert "Read document 0." not in rendered and "Document 0\n" not in rendered
    assert "Document 399\n" in rendered
    assert "Please read document 0." in rendered
    assert "Rule: never mention the funding review" in rendered


def test_compaction_fires_at_the_trigger_and_keeps_a_4000_token_tail(synthetic, make_filler):
    t, _ = _long_trace(synthetic, make_filler, 20, 3_000)
    context = list(session_transcript(t.events))
    assert context_tokens(context) >= SMALLEST_TRIGGER_TOKENS == 6_400
    compacted, stats = compact(context, SMALLEST_TRIGGER, "probe")
    assert stats is not None and stats.tokens_before == context_tokens(context)
    tail = compacted[1:]
    cut = len(context) - len(tail)
    assert tail == context[cut:]
    # the cut is the first valid cut point at or after the message where the tail reaches
    # 4,000 tokens: the tail is under 4,000 tokens unless it starts exactly there, and the
    # previous valid cut point would have kept at least 4,000
    assert context_tokens(tail) < KEEP_RECENT_TOKENS or context_tokens(tail[1:]) < KEEP_RECENT_TOKENS
    previous = max(i for i in range(cut) if context[i].role in ("user", "assistant"))
    assert context_tokens(context[previous:]) >= KEEP_RECENT_TOKENS
    assert tail[0].role in ("user", "assistant")  # never a tool result
    assert stats.kept_messages == len(compacted) - 1 and stats.tokens_after < stats.tokens_before


def test_compaction_does_not_fire_below_the_trigger(synthetic):
    t = synthetic()
    t.owner("short")
    t.reply("short")
    context, stats = compact(list(session_transcript(t.events)), SMALLEST_TRIGGER, "probe")
    assert stats is None and len(context) == 2


def test_compaction_arms_on_a_long_synthetic_trace(synthetic, make_filler):
    t, _first = _long_trace(synthetic, make_filler, 60, 4_000)
    prefix = t.prefix()
    one = CompactionFold().build(prefix)
    assert one.receipt.boundary.verified and len(one.receipt.compactions) == 1
    assert one.messages[0].content.startswith("The conversation before this point was compacted")
    two = CompactionTwiceFold().build(prefix)
    stages = [c.stage for c in two.receipt.compactions]
    assert stages == ["mid_trace", "probe"] and two.receipt.boundary.verified
    mid, probe = two.receipt.compactions
    prefix_tokens = one.receipt.source_tokens_estimate
    # the mid-trace turn is the first owner turn at or past the token midpoint
    assert prefix_tokens / 2 <= mid.tokens_before <= prefix_tokens / 2 + 2_000
    assert probe.tokens_before < prefix_tokens  # the summary replaced the first half
    # the earlier summary is folded in: the turn-1 rule survives both compactions
    assert "Rule: never mention the funding review" in two.messages[0].content
    ceiling = CeilingFold().build(prefix)
    assert prefix_tokens < CEILING_TOKENS
    assert not ceiling.receipt.boundary.verified and ceiling.receipt.compactions == []
    assert len(ceiling.messages) == len(prefix.events)  # below the ceiling: untouched


def test_cold_rebuild_receipt_counts(synthetic, make_filler):
    t, _ = _long_trace(synthetic, make_filler, 60, 4_000)
    checkpoint = ColdRebuildFold().build(t.prefix())
    receipt = checkpoint.receipt
    assert receipt.projection is not None
    assert receipt.projection.tool_records_available == 60
    assert receipt.tools_offered == [] and checkpoint.store is None
    dropped = next(p for p in receipt.pressure if p.measure == "tool_records_dropped")
    assert dropped.observed == receipt.projection.tool_records_dropped and dropped.threshold == 32
