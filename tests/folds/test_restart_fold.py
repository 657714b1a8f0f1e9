"""The restart-switch-compact arm's build (``folds.arms.RestartSwitchCompactFold``): the
cold boundary of the durable session, then one compaction of that reseeded context, in
which the projected tool records are summarised as the tool results they are (head and
tail, counted as cut), never as owner turns; the text window is kept whole."""

from __future__ import annotations

from efold.corpus.model import SuiteItem
from efold.folds import TracePrefix
from efold.folds.arms import ColdRebuildFold, RestartSwitchCompactFold, durable_session
from efold.folds.projection import cold_boundary


def test_the_reseed_is_compacted_with_its_records_as_tool_results(
        original_items: list[SuiteItem]) -> None:
    for item in original_items:
        prefix = TracePrefix.of(item.trace)
        built = RestartSwitchCompactFold().build(prefix)
        receipt = built.receipt
        cold = cold_boundary(durable_session(prefix))
        assert receipt.boundary.kind == "restart" and receipt.boundary.verified
        assert receipt.projection == ColdRebuildFold().build(prefix).receipt.projection
        (compaction,) = receipt.compactions
        summary = built.messages[0].content
        assert summary.count("[Tool result ") == len(cold.projected) > 0
        assert "[Owner, day 0]" not in summary
        # Records over the summariser's allowance are cut to head and tail, and counted.
        assert compaction.tool_results_cut > 0 and "; head and tail of " in summary
        # The text window follows the summary whole.
        assert [m.content for m in built.messages[1:]] == [e.content for e in cold.window]
        assert compaction.summarised_messages == len(cold.projected)
