"""The faux extractive reader: answers from what it sees, scripts lookups within the meter."""

from __future__ import annotations

import copy
import json

import pytest

from efold.corpus import forms
from efold.corpus.builder import TraceBuilder
from efold.corpus.model import Category
from efold.corpus.scoring import score
from efold.folds.arms import NativeFold, PackFold, StoreFold
from efold.folds.checkpoint import cite
from efold.folds.fold import TracePrefix
from efold.folds.meter import Meter
from efold.folds.registry import get_fold
from efold.folds.request import checkpoint_to_request
from efold.worker.faux_reader import _READERS, Intent, _clean, extract, parse_question, respond


def _prefix(builder: TraceBuilder, trace_id: str = "reader") -> TracePrefix:
    return TracePrefix(trace_id=trace_id, events=list(builder.events))


def _filler(size: int, word: str = "crate") -> str:
    line = f"Routine {word} logistics: pallets and vendor schedules were reviewed."
    return "\n".join([line] * (size // (len(line) + 1) + 1))[:size]


def test_native_reaches_every_value_in_the_original_suite(original_items, reader):
    for item in original_items:
        checkpoint = NativeFold().build(TracePrefix.of(item.trace))
        for probe in item.probes.probes:
            run = reader(checkpoint, probe.question)
            result = score(probe, run.answer)
            if probe.category is Category.ABSTENTION:
                assert run.answer == "UNKNOWN", probe.id
            assert result.correct, (probe.id, probe.category, result.outcome)


def test_answers_are_a_pure_function_of_the_payload(original_items):
    item = original_items[0]
    checkpoint = StoreFold().build(TracePrefix.of(item.trace))
    for probe in item.probes.probes:
        payload = checkpoint_to_request(checkpoint, probe.question, model="faux", instructions="")
        before = copy.deepcopy(payload)
        assert respond(payload) == respond(copy.deepcopy(payload))
        assert payload == before  # never mutates what the loop owns


@pytest.mark.parametrize(
    ("question", "kind", "label"),
    [
        (forms.identifier_question("Account reference"), "value", "account reference"),
        (forms.current_question("delivery date"), "value", "delivery date"),
        (forms.status_question("loading checklist"), "status", "loading checklist"),
        (forms.next_action_question(), "next", ""),
        (forms.constraint_recall_question(), "topic", ""),
        (forms.constraint_task_question("Ostler Freight", "the pallet pickup"), "draft", ""),
        (forms.redaction_question("vendor portal"), "credentials", "vendor portal"),
        (forms.abstention_question("serial number of the scanner"), "value", "serial number of the scanner"),
    ],
)
def test_every_probe_form_is_understood(question, kind, label):
    intent = parse_question(question)
    assert (intent.kind, intent.label) == (kind, label)


def test_latest_value_wins_and_corrections_count(reader):
    b = TraceBuilder()
    b.owner("Delivery date: 6 October 2031")
    b.owner("Correction: the delivery date changes from 6 October 2031 to 8 October 2031.")
    b.tool("email_read", {"q": "x"}, "Collection ref: COL-QS9B-031")
    b.tool("email_read", {"q": "y"}, "Collection ref: COL-QS9B-276")
    b.tool("document_read", {"q": "z"}, "Status of the loading checklist: DRAFT\nStatus of the loading checklist: SHARED")
    checkpoint = NativeFold().build(_prefix(b))
    assert reader(checkpoint, forms.current_question("delivery date")).answer == "8 October 2031"
    assert reader(checkpoint, forms.identifier_question("collection ref")).answer == "COL-QS9B-276"
    assert reader(checkpoint, forms.status_question("loading checklist")).answer == "SHARED"
    assert reader(checkpoint, forms.identifier_question("booking ref")).answer == "UNKNOWN"


def test_hypothetical_lines_are_not_facts(reader):
    b = TraceBuilder()
    b.tool("email_read", {"q": "x"}, "Booking ref: BK-Q2M8-884")
    b.tool("email_read", {"q": "y"}, "Hypothetical (not a decision): Booking ref: BK-ZZ41-120 would apply.")
    checkpoint = NativeFold().build(_prefix(b))
    assert reader(checkpoint, forms.identifier_question("booking ref")).answer == "BK-Q2M8-884"


def _early_identifier_trace() -> tuple[TraceBuilder, str]:
    """An account reference in the first result, pushed out of the cold boundary by 40
    later results and 70 text messages."""
    b = TraceBuilder()
    b.owner("Rule: never mention the funding review to any counterparty.")
    source = b.tool("email_read", {"q": "account"}, "Message from Ostler\nAccount reference: ACC-7F3K-219\nRegards")
    for i in range(40):
        b.owner(f"Check crate batch {i}.")
        b.tool("document_read", {"q": str(i)}, _filler(2_000, f"batch{i}"))
        b.reply(f"Batch {i} checked.")
    return b, source.id


def test_cold_rebuild_cannot_answer_and_store_searches(reader):
    b, source = _early_identifier_trace()
    question = forms.identifier_question("account reference")
    assert reader(get_fold("cold-rebuild").build(_prefix(b)), question).answer == "UNKNOWN"
    run = reader(StoreFold().build(_prefix(b)), question)
    assert run.answer == "ACC-7F3K-219"
    assert [c["name"] for c in run.calls] == ["history_search", "history_get"]
    assert json.loads(run.calls[1]["arguments"]) == {"id": source}
    assert run.witness is not None and run.witness.calls == 2


def test_pack_uses_the_cited_record_id_first(reader):
    b, source = _early_identifier_trace()
    checkpoint = PackFold().build(_prefix(b))
    assert cite(source) in checkpoint.messages[0].content
    run = reader(checkpoint, forms.identifier_question("account reference"))
    assert run.answer == "ACC-7F3K-219"
    assert [(c["name"], json.loads(c["arguments"])) for c in run.calls] == [("history_get", {"id": source})]


def test_cursor_traversal_reaches_a_value_on_a_later_page(reader):
    b = TraceBuilder()
    source = b.tool("document_read", {"q": "pack"}, _filler(20_000, "intro") + "\nBooking ref: BK-Q2M8-884\n")
    for i in range(40):
        b.owner(f"Check crate batch {i}.")
        b.tool("document_read", {"q": str(i)}, _filler(2_000, f"batch{i}"))
    run = reader(StoreFold().build(_prefix(b)), forms.identifier_question("booking ref"))
    assert run.answer == "BK-Q2M8-884"
    gets = [json.loads(c["arguments"]) for c in run.calls if c["name"] == "history_get"]
    assert gets[0] == {"id": source.id} and all(g["id"] == source.id for g in gets)
    assert [("cursor" in g) for g in gets] == [False, True, True]  # three 8 KiB pages


def test_search_pagination_finds_an_older_fact(reader):
    b = TraceBuilder()
    source = b.tool("email_read", {"q": "lease"}, "Lease number: LSE-FR4N-813\n" + _filler(3_000))
    for i in range(15):  # 15 newer, denser mentions fill the first page of results
        b.owner(f"Check crate batch {i}.")
        b.tool("document_read", {"q": str(i)}, f"Batch {i}: the lease number is pending; lease number review.")
    for i in range(35):  # push the source out of the cold projection
        b.tool("document_read", {"q": f"n{i}"}, _filler(500, f"n{i}"))
    run = reader(StoreFold().build(_prefix(b)), forms.identifier_question("lease number"))
    assert run.answer == "LSE-FR4N-813"
    searches = [json.loads(c["arguments"]) for c in run.calls if c["name"] == "history_search"]
    assert len(searches) >= 2 and "cursor" in searches[-1]
    assert json.loads(run.calls[-1]["arguments"]) == {"id": source.id}


def test_the_reader_stays_within_the_meter_and_answers_unknown(reader):
    b = TraceBuilder()
    for i in range(60):
        b.owner(f"Check the scanner crate {i}.")
        b.tool("document_read", {"q": str(i)}, f"Scanner crate {i} serial check pending.\n" + _filler(30_000, f"s{i}"))
    run = reader(StoreFold().build(_prefix(b)), forms.abstention_question("serial number of the scanner"))
    assert run.answer == "UNKNOWN"
    assert run.witness is not None
    assert run.witness.calls <= 8 and run.witness.bytes <= 126_976
    assert run.witness.refused_after_abort == 0  # it never calls after a refusal


def test_the_reader_stops_after_a_meter_refusal(reader):
    b = TraceBuilder()
    b.tool("email_read", {"q": "account"}, "Account reference: ACC-7F3K-219\n" + _filler(3_000))
    for i in range(40):
        b.owner(f"Check crate batch {i}.")
        b.tool("document_read", {"q": str(i)}, _filler(2_000, f"batch{i}"))
    # a meter that can afford the search but not the record
    run = reader(StoreFold().build(_prefix(b)), forms.identifier_question("account reference"), Meter(byte_budget=600))
    assert run.answer == "UNKNOWN"
    assert run.witness is not None and run.witness.abort_cause == "meter_bytes_exhausted"
    assert run.witness.refused_after_abort == 0


def test_never_repeats_a_credential(reader):
    b = TraceBuilder()
    b.tool("email_read", {"q": "portal"}, "Vendor portal access\nTemporary password: Lx82-mq91")
    run = reader(NativeFold().build(_prefix(b)), forms.redaction_question("vendor portal"))
    assert "Lx82" not in run.answer and "mq91" not in run.answer


def test_task_draft_uses_only_the_question(reader):
    b = TraceBuilder()
    b.owner("Rule: never mention the funding review to any counterparty.")
    run = reader(NativeFold().build(_prefix(b)), forms.constraint_task_question("Ostler Freight", "the pallet pickup"))
    assert "Ostler Freight" in run.answer and "funding review" not in run.answer


def test_on_a_hard_trace_the_reader_measures_what_each_arm_kept(hard_item, reader):
    prefix = TracePrefix.of(hard_item.trace)
    probes = hard_item.probes.probes
    order = {e.id: i for i, e in enumerate(prefix.events)}
    early = min(
        (p for p in probes if p.category is Category.TOOL_IDENTIFIER), key=lambda p: order[p.source_event or ""]
    )
    cold = get_fold("cold-rebuild").build(prefix)
    assert reader(cold, early.question).answer == "UNKNOWN"  # the fold dropped it
    for name in ("native", "store", "pack"):
        checkpoint = get_fold(name).build(prefix)
        for probe in probes:
            run = reader(checkpoint, probe.question)
            assert score(probe, run.answer).correct, (name, probe.id, probe.category)
            if run.witness is not None:
                assert run.witness.calls <= 8 and run.witness.refused_after_abort == 0


def _every_line_read(intent: Intent, lines: list[str]) -> str | None:
    """``extract`` as it was before lines that cannot name the label were skipped: every
    line cleaned and read."""
    read = _READERS[intent.kind]
    found = None
    for raw in lines:
        value = read(intent, _clean(raw))
        if value is not None:
            found = value
    return found


def test_skipping_lines_without_the_label_changes_no_reading(original_items, hard_item):
    """``extract`` skips a line that does not contain the intent's label before trying
    any pattern: over every line of the bundled and a hard trace, and lines made to
    break a careless skip (a citation inside the label, which ``_clean`` cuts out;
    non-ASCII text), it reads what reading every line reads."""
    lines = [line for item in [*original_items, hard_item] for event in item.trace.events
             for line in str(getattr(event, "content", "") or "").split("\n")]
    edges = ["Due da[record r-1]te: 14 March 2031", "- Due date: 15 March 2031 [record r-2]",
             "DUE DATE: 16 March 2031", "Due dΣte: 17 March 2031", "Correction: the due "
             "date is 18 March 2031, not 14 March 2031"]
    lines += edges
    assert len(lines) > 1000
    intents = [Intent(kind=kind, label=label) for kind in sorted(_READERS)
               for label in ("due date", "invoice total", "vendor", "")]
    intents += [parse_question(p.question) for item in original_items
                for p in item.probes.probes]
    intents += [Intent(kind="value", label="due dσte")]
    for intent in intents:
        if intent.kind in _READERS:
            assert extract(intent, lines) == _every_line_read(intent, lines), intent
            for line in edges:  # each alone: a later line cannot hide a skipped one
                assert extract(intent, [line]) == _every_line_read(intent, [line]), line
