"""The model-backed summariser of the compaction arms, with a fake ``complete``: what the
request holds and how it is bounded, what the checkpoint shows, and that the
deterministic default is unchanged."""

from __future__ import annotations

import hashlib
import re

import msgspec
import pytest

from efold.corpus.forms import chars_to_tokens
from efold.corpus.model import Event, SuiteItem
from efold.errors import Code
from efold.folds.arms import CompactionFold
from efold.folds.checkpoint import ReaderMessage
from efold.folds.compaction import KEEP_RECENT_TOKENS, cut_index
from efold.folds.errors import FoldError
from efold.folds.external import ExternalCommandFold
from efold.folds.fold import TracePrefix
from efold.folds.model_summary import (
    EARLIER_SUMMARY_HEADER,
    MAX_SOURCE_CHARS,
    MODEL_SUMMARY_MAX_CHARS,
    MODEL_SUMMARY_OPENING,
    SOURCE_OVERHEAD_CHARS,
    SUMMARY_INSTRUCTION,
    ModelSummary,
    model_summariser,
    summary_request,
)
from efold.folds.registry import BUILTIN_ARMS, SUMMARISING_ARMS, fold_for, uses_summariser
from efold.folds.summariser import SUMMARY_OPENING, summarise, summary_entry
from efold.folds.transcript import session_transcript

COMPACTING = ("compaction", "compaction-2", "ceiling", "store-compaction",
              "restart-switch-compact")
_OMITTED = re.compile(r"\[(\d+) earlier messages omitted to keep this request small\]")


class FakeModel:
    """A ``complete`` that records every request and answers from ``replies`` in turn."""

    def __init__(self, *replies: str) -> None:
        self.replies = replies
        self.calls: list[list[dict[str, str]]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.calls.append(messages)
        return self.replies[len(self.calls) - 1]

    def user(self, call: int) -> str:
        messages = self.calls[call]
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[0]["content"] == SUMMARY_INSTRUCTION
        return messages[1]["content"]


def _owner_events(count: int, width: int = 100) -> list[Event]:
    return [
        Event(id=f"e{i:04d}", session=1, day=1, role="user", content=f"Turn {i}: ".ljust(width, "."))
        for i in range(count)
    ]


def test_compaction_checkpoint_is_the_model_summary_then_the_kept_tail(original_items):
    prefix = TracePrefix.of(original_items[0].trace)
    model = FakeModel("  Rule: no weekend deliveries. Lease LSE-1234.\n")
    built = fold_for("compaction", summariser=model_summariser(model)).build(prefix)
    plain = fold_for("compaction").build(prefix)
    assert len(model.calls) == 1
    expected = MODEL_SUMMARY_OPENING + "\n\nRule: no weekend deliveries. Lease LSE-1234."
    assert built.messages[0] == ReaderMessage(role="user", content=expected)
    assert MODEL_SUMMARY_OPENING.startswith("The conversation before this point was compacted.")
    assert "written by a model" in MODEL_SUMMARY_OPENING
    # the cut does not depend on the summariser: the same tail follows
    assert built.messages[1:] == plain.messages[1:] and len(built.messages) > 1
    assert plain.messages[0].content.startswith(SUMMARY_OPENING)
    [stats] = built.receipt.compactions
    assert built.receipt.boundary.verified
    assert stats.summary_tokens == chars_to_tokens(len(expected))
    assert stats.kept_messages == len(built.messages) - 1
    assert stats.summarised_messages == plain.receipt.compactions[0].summarised_messages


def test_the_request_holds_the_instruction_and_the_summarised_head(synthetic, make_filler):
    t = synthetic()
    t.owner("Rule: never mention the funding review to any counterparty.")
    t.tool(
        "Lease number: LSE-AAAA-001\n" + make_filler(15_000, "a") + "\nMIDDLE-REF-77\n"
        + make_filler(15_000, "b") + "\nClosing line 1",
        name="document_read",
    )
    t.reply("Read the lease.")
    t.owner("Next: reconcile the quarter.")
    t.reply(make_filler(17_000, "tail") + "\nTAILMARK")
    model = FakeModel("The summary.")
    built = CompactionFold(model_summariser(model)).build(t.prefix())
    user = model.user(0)
    assert "[Owner, day 1]\nRule: never mention the funding review to any counterparty." in user
    assert "Lease number: LSE-AAAA-001" in user and "Closing line 1" in user
    assert "MIDDLE-REF-77" not in user  # tool results are sent as head and tail
    assert "Next: reconcile the quarter." in user
    assert "TAILMARK" not in user  # the kept tail is not summarised
    assert EARLIER_SUMMARY_HEADER not in user and not _OMITTED.search(user)
    assert built.messages[1].content.endswith("TAILMARK")
    [stats] = built.receipt.compactions
    assert stats.summarised_messages == 5 and stats.kept_messages == 1
    assert stats.tool_results_cut == 1 and stats.summary_entries_elided == 0


def test_compaction_2_asks_twice_and_folds_the_first_summary_into_the_second(original_items):
    prefix = TracePrefix.of(original_items[1].trace)
    model = FakeModel("FIRST SUMMARY: account ACC-77.", "SECOND SUMMARY: account ACC-77, rule R.")
    built = fold_for("compaction-2", summariser=model_summariser(model)).build(prefix)
    assert len(model.calls) == 2
    first, second = model.user(0), model.user(1)
    assert EARLIER_SUMMARY_HEADER not in first
    assert second.startswith(EARLIER_SUMMARY_HEADER + "\nFIRST SUMMARY: account ACC-77.\n")
    # the earlier summary is passed as its text, without the reader-facing opening line
    assert MODEL_SUMMARY_OPENING not in second
    assert built.messages[0].content == MODEL_SUMMARY_OPENING + "\n\nSECOND SUMMARY: account ACC-77, rule R."
    assert [s.stage for s in built.receipt.compactions] == ["mid_trace", "probe"]
    assert built.receipt.boundary.verified


def test_a_previous_summary_of_either_kind_is_folded_in(synthetic, make_filler):
    t = synthetic()
    t.owner("Rule: invoices go to the finance inbox.")
    t.tool("Invoice ref: INV-0042\n" + make_filler(3_000, "x") + "\nEnd of invoice")
    earlier = session_transcript(t.events)
    deterministic = summarise(earlier)
    assert deterministic.results_cut == 1
    later = _owner_events(2)
    model = FakeModel("Folded summary.")
    folded = model_summariser(model)(later, deterministic)
    assert EARLIER_SUMMARY_HEADER + "\n" + deterministic.render() + "\n" in model.user(0)
    assert "Turn 0: " in model.user(0) and "Turn 1: " in model.user(0)
    assert folded == ModelSummary(text="Folded summary.", elided=0, results_cut=1)

    previous = ModelSummary(text="EARLIER: rule X stands.", elided=2, results_cut=3)
    model = FakeModel("Second fold.")
    again = model_summariser(model)(session_transcript(t.events), previous)
    assert EARLIER_SUMMARY_HEADER + "\nEARLIER: rule X stands.\n" in model.user(0)
    assert again == ModelSummary(text="Second fold.", elided=2, results_cut=4)


def test_the_deterministic_summariser_refuses_a_model_summary():
    previous = ModelSummary(text="written by a model", elided=0, results_cut=0)
    with pytest.raises(FoldError) as raised:
        summarise(_owner_events(1), previous)
    assert raised.value.code is Code.FOLD_INPUT_INVALID


@pytest.mark.parametrize("reply", ["", "   \n\t "])
def test_an_empty_reply_is_refused(original_items, reply):
    prefix = TracePrefix.of(original_items[0].trace)
    model = FakeModel(reply)
    with pytest.raises(FoldError) as raised:
        fold_for("compaction", summariser=model_summariser(model)).build(prefix)
    assert raised.value.code is Code.LOOKUP_EMPTY_FINAL_OUTPUT
    assert len(model.calls) == 1


def test_an_error_from_complete_propagates_unchanged(original_items):
    prefix = TracePrefix.of(original_items[0].trace)
    failure = FoldError(Code.LOOKUP_SEND_FAILED, "the request failed")

    def failing(messages: list[dict[str, str]]) -> str:
        raise failure

    with pytest.raises(FoldError) as raised:
        fold_for("compaction", summariser=model_summariser(failing)).build(prefix)
    assert raised.value is failure


@pytest.mark.parametrize("arm", ["compaction", "ceiling"])
def test_a_huge_trace_yields_a_bounded_request_that_counts_the_cut(hard_prefix, arm):
    model = FakeModel("Hard summary.")
    built = fold_for(arm, summariser=model_summariser(model)).build(hard_prefix)
    user = model.user(0)
    assert len(user) <= MAX_SOURCE_CHARS + SOURCE_OVERHEAD_CHARS
    assert len(user) >= MAX_SOURCE_CHARS - 2_000  # the bound is used, not undershot
    omitted = _OMITTED.search(user)
    assert omitted is not None and int(omitted.group(1)) > 0
    [stats] = built.receipt.compactions
    assert stats.summary_entries_elided == int(omitted.group(1))
    assert stats.summarised_messages > stats.summary_entries_elided
    # the newest summarised message is sent; the oldest ones are the ones cut
    transcript = session_transcript(hard_prefix.events)
    newest = summary_entry(transcript[stats.summarised_messages - 1]).text
    oldest = summary_entry(transcript[0]).text
    assert newest in user and oldest not in user


def test_the_source_bound_cuts_oldest_messages_whole_and_says_how_many():
    events = _owner_events(10)  # each entry: "[Owner, day 1]\n" + 100 chars, 117 with separator
    request = summary_request(events, None, max_source_chars=3 * 117 + 50)
    user = request.messages[1]["content"]
    assert request.omitted_messages == 7
    assert "[7 earlier messages omitted to keep this request small]" in user
    assert "Turn 6: " not in user
    assert all(f"Turn {i}: " in user for i in (7, 8, 9))


def test_a_long_earlier_summary_keeps_its_last_half_of_the_bound():
    previous = ModelSummary(text="START" + "m" * 990 + "END", elided=0, results_cut=0)
    request = summary_request(_owner_events(5), previous, max_source_chars=400)
    user = request.messages[1]["content"]
    assert request.omitted_summary_chars == 998 - 200
    assert "[... the first 798 characters omitted ...]" in user
    assert "m" * 197 + "END" in user and "START" not in user
    # 200 characters left for messages: one entry of 117 fits, the other four are cut
    assert request.omitted_messages == 4 and "Turn 4: " in user
    assert len(user) <= 400 + SOURCE_OVERHEAD_CHARS


def test_a_long_reply_is_capped_and_marked_truncated():
    summarise_with = model_summariser(FakeModel("x" * (MODEL_SUMMARY_MAX_CHARS + 10)))
    summary = summarise_with(_owner_events(1), None)
    assert isinstance(summary, ModelSummary)
    assert summary.truncated and summary.text == "x" * MODEL_SUMMARY_MAX_CHARS
    assert summary.render().endswith(f"\n\n[summary truncated at {MODEL_SUMMARY_MAX_CHARS} characters]")
    exact = model_summariser(FakeModel("y" * MODEL_SUMMARY_MAX_CHARS))(_owner_events(1), None)
    assert isinstance(exact, ModelSummary) and not exact.truncated
    assert exact.render() == MODEL_SUMMARY_OPENING + "\n\n" + "y" * MODEL_SUMMARY_MAX_CHARS
    assert exact.tokens() == chars_to_tokens(len(exact.render()))


# sha256 over the messages of compaction, compaction-2 and ceiling on each original-suite
# item, computed with the code from before summarisers became pluggable.
_DETERMINISTIC_MESSAGES_SHA256 = "61c1406963119aa7042e543627f908a4f275dd1f947339e06ed9812e891d4396"


def test_the_deterministic_default_is_unchanged(original_items: list[SuiteItem]):
    digest = hashlib.sha256()
    for item in original_items:
        prefix = TracePrefix.of(item.trace)
        for arm in COMPACTING:
            default = fold_for(arm).build(prefix)
            assert fold_for(arm, summariser=None).build(prefix) == default
            assert SUMMARISING_ARMS[arm](None).build(prefix) == default
            # The digest predates the last two (store-compaction's context is
            # compaction's; restart-switch-compact compacts a cold boundary).
            if arm not in ("store-compaction", "restart-switch-compact"):
                digest.update(msgspec.json.encode(default.messages))
        # the compaction arm's summary is the deterministic summary of the cut head
        transcript = session_transcript(prefix.events)
        cut = cut_index(transcript, KEEP_RECENT_TOKENS)
        summary = fold_for("compaction").build(prefix).messages[0].content
        assert summary == summarise(transcript[:cut]).render()
    assert digest.hexdigest() == _DETERMINISTIC_MESSAGES_SHA256


def test_only_the_built_in_compaction_arms_use_a_summariser(original_items):
    assert [arm for arm in BUILTIN_ARMS if uses_summariser(arm)] == list(COMPACTING)
    assert not uses_summariser("my-plugin")
    for arm in COMPACTING:
        fold = BUILTIN_ARMS[arm]()  # still a zero-argument factory
        assert fold.name == arm and vars(fold)["summariser"] is summarise
    prefix = TracePrefix.of(original_items[0].trace)
    model = FakeModel()
    for arm in BUILTIN_ARMS:
        if not uses_summariser(arm):
            assert fold_for(arm, summariser=model_summariser(model)).build(prefix) == fold_for(arm).build(prefix)
    assert model.calls == []
    external = fold_for("compaction", ["python3", "fold.py"], summariser=model_summariser(model))
    assert isinstance(external, ExternalCommandFold) and external.name == "compaction"
