"""Availability of the field categories (issue 19), model-free: a cross_reference is
present only when both of its facts are visible, recoverable when each is visible or
recoverable, and absent when one fact is neither; the other field categories read
their own fact lines."""

from __future__ import annotations

import msgspec

from efold.corpus import SuiteItem, forms
from efold.corpus.builder import TraceBuilder
from efold.corpus.model import Availability, Category, Probe
from efold.folds.availability import checkpoint_availability, probe_availability
from efold.folds.fold import TracePrefix
from efold.folds.registry import get_fold

SURVEY = forms.fact_line("Access survey date", "19 August 2031")
DEPENDENCY = forms.dependency_line("handover date", 9, "access survey date")


def _two_session_trace() -> tuple[TracePrefix, Probe]:
    """The base date in session 1, pushed out of the cold window by 80 text messages;
    the dependency in session 2, inside it."""
    b = TraceBuilder()
    survey = b.owner("The survey is booked.\n" + SURVEY)
    b.reply("Noted.")
    for n in range(40):
        b.owner(f"Carry on with item {n}.")
        b.reply("Carrying on.")
    b.start_session(2, 3)
    dependency = b.owner("A vendor wrote about the handover.\n" + DEPENDENCY)
    b.reply("Noted.")
    probe = Probe(
        id="x", trace_id="avail", category=Category.CROSS_REFERENCE,
        question=forms.cross_reference_question("handover date"), label="handover date",
        expected=["28 August 2031"], superseded=["19 August 2031"], value_kind="date",
        premises=[SURVEY, DEPENDENCY], premise_events=[survey.id, dependency.id],
        source_event=dependency.id,
    )
    return TracePrefix(trace_id="avail", events=list(b.events)), probe


def _state(arm: str, prefix: TracePrefix, probe: Probe) -> Availability:
    return probe_availability(get_fold(arm).build(prefix), probe).availability


def test_cross_reference_is_present_only_with_both_facts_visible() -> None:
    prefix, probe = _two_session_trace()
    assert _state("native", prefix, probe) is Availability.PRESENT
    # The cold rebuild keeps the dependency but not the base date: one fact is not enough.
    cold = get_fold("cold-rebuild").build(prefix)
    text = "\n".join(m.content for m in cold.messages)
    assert DEPENDENCY in text and SURVEY not in text
    assert probe_availability(cold, probe).availability is Availability.ABSENT
    # Either fact alone, as the whole probe, would be present: the rule is "every one".
    alone = msgspec.structs.replace(probe, premises=[DEPENDENCY], premise_events=[probe.premise_events[1]])
    assert probe_availability(cold, alone).availability is Availability.PRESENT


def test_one_visible_and_one_recoverable_fact_is_recoverable() -> None:
    prefix, probe = _two_session_trace()
    store = get_fold("store").build(prefix)
    result = probe_availability(store, probe)
    assert result.availability is Availability.RECOVERABLE
    assert result.path == "search" and result.calls >= 2  # a search, then the record
    # The fact absent from the store too (its event is not a record): absent.
    lost = msgspec.structs.replace(probe, premise_events=["e9999", probe.premise_events[1]])
    gone = probe_availability(store, lost)
    assert gone.availability is Availability.ABSENT and gone.path is None


def test_field_categories_on_a_hard_trace(hard_item: SuiteItem) -> None:
    prefix = TracePrefix.of(hard_item.trace)
    field = {p.category: p for p in hard_item.probes.probes
             if p.category in (Category.DECISION_REASON, Category.PRIORITY_ORDER,
                               Category.CROSS_REFERENCE, Category.CONTRADICTION)}
    native = {r.probe_id: r.availability for r in
              checkpoint_availability(get_fold("native").build(prefix), list(field.values()))}
    assert native[field[Category.CROSS_REFERENCE].id] is Availability.PRESENT
    assert native[field[Category.PRIORITY_ORDER].id] is Availability.PRESENT  # keys, any order
    # The rejected alternative's reason is visible next to the decision.
    assert native[field[Category.DECISION_REASON].id] is Availability.SUPERSEDED_PRESENT
    assert native[field[Category.CONTRADICTION].id] is Availability.SUPERSEDED_PRESENT
    cold = checkpoint_availability(get_fold("cold-rebuild").build(prefix), list(field.values()))
    assert {r.availability for r in cold} == {Availability.ABSENT}
    store = checkpoint_availability(get_fold("store").build(prefix), list(field.values()))
    assert {r.availability for r in store} == {Availability.RECOVERABLE}
