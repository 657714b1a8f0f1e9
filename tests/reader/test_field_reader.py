"""The faux extractive reader on the field categories (issue 19): it answers them from
what the checkpoint shows, so a full-context checkpoint answers them and a fold that
lost one fact fails them."""

from __future__ import annotations

import pytest

from efold.corpus import forms, generate_hard
from efold.corpus.builder import TraceBuilder
from efold.corpus.model import Category, Outcome, Probe
from efold.corpus.scoring import score
from efold.folds.arms import NativeFold
from efold.folds.fold import TracePrefix
from efold.folds.registry import get_fold
from efold.worker.faux_reader import parse_question

FIELD = (Category.DECISION_REASON, Category.PRIORITY_ORDER, Category.CROSS_REFERENCE,
         Category.CONTRADICTION)
SURVEY = forms.fact_line("Access survey date", "19 August 2031")
PLANNED = forms.fact_line("Handover date", "2 September 2031")
DEPENDENCY = forms.dependency_line("handover date", 9, "access survey date")
CROSS = Probe(id="x", trace_id="r", category=Category.CROSS_REFERENCE,
              question=forms.cross_reference_question("handover date"), label="handover date",
              expected=["28 August 2031"], superseded=["2 September 2031", "19 August 2031"],
              value_kind="date")


@pytest.mark.parametrize(("question", "kind", "label"), [
    (forms.decision_question("kiln shelves supplier"), "decision", "kiln shelves supplier"),
    (forms.priority_question(), "priority", ""),
    (forms.cross_reference_question("Handover date"), "cross", "handover date"),
    (forms.contradiction_question("repair quote", "Ashby Ovens", "GBP 1,900.00"),
     "contradiction", "repair quote"),
])
def test_the_field_questions_are_understood(question: str, kind: str, label: str) -> None:
    intent = parse_question(question)
    assert (intent.kind, intent.label) == (kind, label)
    if kind == "contradiction":
        assert intent.subject == "GBP 1,900.00"


@pytest.mark.parametrize("seed", [101, 106, 116])
def test_full_context_answers_every_field_category(seed: int, reader) -> None:
    for item in (generate_hard(seed), generate_hard(seed, distractors=True)):
        checkpoint = NativeFold().build(TracePrefix.of(item.trace))
        for probe in (p for p in item.probes.probes if p.category in FIELD):
            run = reader(checkpoint, probe.question)
            assert score(probe, run.answer).correct, (probe.id, run.answer)


def _native(*turns: str) -> object:
    b = TraceBuilder()
    for text in turns:
        b.owner(text)
        b.reply("Noted.")
    return NativeFold().build(TracePrefix(trace_id="r", events=list(b.events)))


def test_cross_reference_needs_both_facts(reader) -> None:
    both = reader(_native(PLANNED, SURVEY, DEPENDENCY), CROSS.question).answer
    assert score(CROSS, both).outcome is Outcome.CORRECT and both == "28 August 2031"
    # The dependency lost: the planned date, as a reader that kept one fact answers.
    planned = reader(_native(PLANNED, SURVEY), CROSS.question).answer
    assert score(CROSS, planned).outcome is Outcome.STALE
    # The base date lost: the move cannot be worked out.
    no_base = reader(_native(PLANNED, DEPENDENCY), CROSS.question).answer
    assert no_base == "UNKNOWN" and not score(CROSS, no_base).correct


def test_a_cold_rebuild_that_lost_the_base_date_fails_and_the_store_recovers_it(reader) -> None:
    b = TraceBuilder()
    b.owner("The survey is booked.\n" + SURVEY)
    b.reply("Noted.")
    for n in range(40):
        b.owner(f"Carry on with item {n}.")
        b.reply("Carrying on.")
    b.start_session(2, 3)
    b.owner("A vendor wrote about the handover.\n" + DEPENDENCY)
    b.reply("Noted.")
    prefix = TracePrefix(trace_id="r", events=list(b.events))
    assert not score(CROSS, reader(get_fold("cold-rebuild").build(prefix), CROSS.question).answer).correct
    run = reader(get_fold("store").build(prefix), CROSS.question)
    assert score(CROSS, run.answer).correct and run.witness is not None and run.witness.calls >= 2


def test_decision_priority_and_contradiction_read_only_their_forms(reader) -> None:
    subject = "kiln shelves supplier"
    rejected = forms.rejected_line(subject, "Yarrow Kilns", "the support contract")
    decided = forms.decision_line(subject, "Calloway Kilns", "the shorter lead time")
    decision = Probe(id="d", trace_id="r", category=Category.DECISION_REASON,
                     question=forms.decision_question(subject),
                     expected=["Calloway Kilns", "lead time"], superseded=["support contract"])
    assert score(decision, reader(_native(rejected, decided), decision.question).answer).correct
    # Only the rejected alternative kept: its reason is never presented as the decision's.
    assert reader(_native(rejected), decision.question).answer == "UNKNOWN"

    keys = ["glaze buckets", "extraction hood", "pallet of clay"]
    ranking = forms.priority_line([f"price the {keys[0]}", f"inspect the {keys[1]}",
                                   f"count the {keys[2]}"])
    louder = forms.loud_request_line(keys[2], keys[:2])
    priority = Probe(id="p", trace_id="r", category=Category.PRIORITY_ORDER,
                     question=forms.priority_question(), expected=keys,
                     superseded=[keys[2], keys[0], keys[1]])
    assert score(priority, reader(_native(ranking, louder), priority.question).answer).correct
    assert reader(_native(louder), priority.question).answer == "UNKNOWN"  # not a ranking

    question = forms.contradiction_question("repair quote", "Ashby Ovens", "GBP 1,900.00")
    contradiction = Probe(id="c", trace_id="r", category=Category.CONTRADICTION,
                          question=question, label="repair quote", value_kind="amount",
                          expected=["GBP 1,840.00"], superseded=["GBP 1,900.00"])
    recorded = forms.fact_line("Repair quote", "GBP 1,840.00")
    named = reader(_native(recorded), question).answer
    assert named.startswith("CONFLICT") and score(contradiction, named).correct
    # The recorded value lost: the reader silently follows the message.
    followed = reader(_native("Nothing about money yet."), question).answer
    assert followed == "GBP 1,900.00" and score(contradiction, followed).outcome is Outcome.STALE
