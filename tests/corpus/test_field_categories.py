"""The four categories the field asks (issue 19): decision_reason, priority_order,
cross_reference and contradiction. Their scorers (right answers, each wrong kind,
surface-form variants), their place in the hard generator (determinism, probe checks
that can fail) and in the probe-file format of imported conversations."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import msgspec
import pytest

from efold.corpus import CorpusError, SuiteItem, dump_probes, dump_trace, forms, generate_hard
from efold.corpus.model import Category, Outcome, Probe
from efold.corpus.probe_checks import check_probes
from efold.corpus.scoring import score
from efold.corpus.user_suite import check_suite_dir
from efold.errors import Code

FIELD = (Category.DECISION_REASON, Category.PRIORITY_ORDER, Category.CROSS_REFERENCE,
         Category.CONTRADICTION)


def _probe(category: Category, **fields: object) -> Probe:
    return Probe(id="p", trace_id="t", category=category, question="q", **fields)  # type: ignore[arg-type]


DECISION = _probe(Category.DECISION_REASON, expected=["Calloway Kilns", "lead time"],
                  superseded=["support contract"], value_kind="text")
PRIORITY = _probe(Category.PRIORITY_ORDER, expected=["glaze buckets", "extraction hood", "pallet of clay"],
                  superseded=["pallet of clay", "glaze buckets", "extraction hood"])
CROSS = _probe(Category.CROSS_REFERENCE, expected=["28 August 2031"],
               superseded=["2 September 2031", "19 August 2031"], value_kind="date")
CONTRADICTION = _probe(Category.CONTRADICTION, expected=["EUR 4,380.00"],
                       superseded=["EUR 4,295.00", "EUR 4,335.00"], value_kind="amount")


def _outcome(probe: Probe, answer: str) -> Outcome:
    return score(probe, answer).outcome


# -- scorers --------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "outcome"), [
    ("Calloway Kilns, because of the shorter lead time.", Outcome.CORRECT),
    ("The owner chose calloway kilns: their LEAD-TIME was shorter.", Outcome.CORRECT),
    ("Calloway Kilns over Yarrow Kilns, for the lead time.", Outcome.CORRECT),  # naming the rival is fine
    ("Calloway Kilns, because of the on-site support contract.", Outcome.STALE),  # rejected reason
    ("Yarrow Kilns, because of the support contract.", Outcome.STALE),
    ("Calloway Kilns for the lead time and the support contract.", Outcome.CONFLICTED),
    ("Calloway Kilns.", Outcome.FABRICATED),  # the decision without its reason
    ("Because of the lead time.", Outcome.FABRICATED),  # the reason without the decision
    ("UNKNOWN", Outcome.ABSTAINED),
])
def test_decision_reason(answer: str, outcome: Outcome) -> None:
    assert _outcome(DECISION, answer) is outcome


@pytest.mark.parametrize(("answer", "outcome"), [
    ("price the glaze buckets; inspect the extraction hood; count the pallet of clay", Outcome.CORRECT),
    ("1) Glaze buckets\n2) Extraction hood\n3) Pallet of clay", Outcome.CORRECT),
    ("glaze buckets, then extraction hood, then pallet of clay (pallet of clay was pushed "
     "by the vendor)", Outcome.CORRECT),  # later mentions do not reorder
    ("pallet of clay, glaze buckets, extraction hood", Outcome.STALE),  # the louder order
    ("extraction hood, glaze buckets, pallet of clay", Outcome.FABRICATED),  # another order
    ("glaze buckets, extraction hood", Outcome.FABRICATED),  # a task missing
    ("It never came up.", Outcome.ABSTAINED),
])
def test_priority_order_is_order_sensitive(answer: str, outcome: Outcome) -> None:
    assert _outcome(PRIORITY, answer) is outcome


@pytest.mark.parametrize(("answer", "outcome"), [
    ("28 August 2031", Outcome.CORRECT),
    ("August 28th", Outcome.CORRECT),
    ("2031-08-28", Outcome.CORRECT),
    ("2 September 2031", Outcome.STALE),  # the planned date: the dependency was lost
    ("19 August 2031", Outcome.STALE),  # the base date alone: one fact is not enough
    ("28 August or 2 September", Outcome.CONFLICTED),
    ("30 August 2031", Outcome.FABRICATED),
    ("UNKNOWN", Outcome.ABSTAINED),
])
def test_cross_reference(answer: str, outcome: Outcome) -> None:
    assert _outcome(CROSS, answer) is outcome


@pytest.mark.parametrize(("answer", "outcome"), [
    ("CONFLICT: the conversation records EUR 4,380.00; the new message says EUR 4,295.00.",
     Outcome.CORRECT),
    ("That contradicts the agreed 4380 EUR (the message says 4,295).", Outcome.CORRECT),
    ("conflict - recorded EUR 4,380", Outcome.CORRECT),
    ("EUR 4,380.00", Outcome.VIOLATION),  # silently follows the record
    ("EUR 4,295.00", Outcome.STALE),  # silently follows the continuation message
    ("CONFLICT: EUR 4,295.00", Outcome.STALE),  # a marker without the recorded value
    ("EUR 4,380.00 or EUR 4,295.00", Outcome.CONFLICTED),  # both, the conflict unnamed
    ("EUR 4,335.00", Outcome.STALE),  # an earlier value
    ("UNKNOWN", Outcome.ABSTAINED),
    ("EUR 12.00", Outcome.FABRICATED),
])
def test_contradiction_needs_the_conflict_named(answer: str, outcome: Outcome) -> None:
    assert _outcome(CONTRADICTION, answer) is outcome


def test_an_empty_answer_is_never_correct() -> None:
    for probe in (DECISION, PRIORITY, CROSS, CONTRADICTION):
        result = score(probe, "  ")
        assert (result.outcome, result.correct) == (Outcome.ABSTAINED, False)


# -- the hard generator ---------------------------------------------------------------


@pytest.fixture(scope="module")
def kiln() -> SuiteItem:
    return generate_hard(101)


def _field(item: SuiteItem, category: Category) -> Probe:
    return next(p for p in item.probes.probes if p.category is category)


def test_every_hard_trace_asks_each_field_category_once(hard_items: list[SuiteItem]) -> None:
    for item in hard_items:
        assert [p.category for p in item.probes.probes][-4:] == list(FIELD)
        positions = {e.id: e for e in item.trace.events}
        cross = _field(item, Category.CROSS_REFERENCE)
        sessions = {positions[e].session for e in cross.premise_events}
        assert len(sessions) == 2  # two facts in different sessions
        for premise, event in zip(cross.premises, cross.premise_events, strict=True):
            assert premise in positions[event].content.split("\n")
        # The louder request comes after the owner's ranking and asks for the stale order.
        events = item.trace.events
        priority = _field(item, Category.PRIORITY_ORDER)
        ranked_at = next(i for i, e in enumerate(events) if e.id == priority.source_event)
        loud = [i for i, e in enumerate(events) if forms.LOUD_PREFIX in e.content]
        assert len(loud) == 1 and loud[0] > ranked_at and events[loud[0]].role == "tool"
        assert f"put the {priority.superseded[0]} first" in events[loud[0]].content
        # The derived date is written nowhere: only the two facts give it.
        assert all(cross.expected[0] not in e.content for e in item.trace.events)


def test_the_same_seed_yields_the_same_field_bytes() -> None:
    a, b = generate_hard(105), generate_hard(105)
    assert dump_trace(a.trace) == dump_trace(b.trace)
    assert dump_probes(a.probes) == dump_probes(b.probes)
    assert [_field(a, c) for c in FIELD] == [_field(b, c) for c in FIELD]
    other = generate_hard(113)  # the same family, fresh names and values
    assert _field(other, Category.DECISION_REASON).expected != _field(a, Category.DECISION_REASON).expected


def test_field_answers_score_as_the_forms_write_them(kiln: SuiteItem) -> None:
    """What the trace writes, read back by the forms, scores correct."""
    events = {e.id: e.content for e in kiln.trace.events}
    decision = _field(kiln, Category.DECISION_REASON)
    line = forms.DECISION_LINE.search(events[decision.source_event or ""])
    assert line is not None
    assert score(decision, f"{line.group('choice')}, because of {line.group('reason')}").correct
    rejected = forms.REJECTED_LINE.search(events[decision.source_event or ""])
    assert rejected is not None
    assert _outcome(decision, f"{line.group('choice')}, because of {rejected.group('reason')}") is Outcome.STALE
    priority = _field(kiln, Category.PRIORITY_ORDER)
    ranked = forms.PRIORITY_LINE.search(events[priority.source_event or ""])
    assert ranked is not None
    assert score(priority, "; ".join(forms.priority_tasks(ranked.group(0)))).correct
    assert _outcome(priority, ", ".join(priority.superseded)) is Outcome.STALE


@pytest.mark.parametrize(("category", "change"), [
    (Category.DECISION_REASON, {"expected": ["Calloway Kilns", "support contract"]}),
    (Category.DECISION_REASON, {"superseded": ["warranty"]}),
    (Category.PRIORITY_ORDER, {"expected": ["extraction hood", "glaze buckets", "pallet of clay"]}),
    (Category.PRIORITY_ORDER, {"superseded": ["glaze buckets", "extraction hood", "pallet of clay"]}),
    (Category.CROSS_REFERENCE, {"expected": ["29 August 2031"]}),
    (Category.CROSS_REFERENCE, {"premise_events": []}),
    (Category.CONTRADICTION, {"superseded": ["EUR 4,335.00"]}),  # a recorded value
    (Category.CONTRADICTION, {"expected": ["EUR 4,335.00"]}),  # not the latest
])
def test_probe_checks_refuse_a_field_probe_that_does_not_fit_its_trace(
    kiln: SuiteItem, category: Category, change: dict[str, object]
) -> None:
    probes = list(kiln.probes.probes)
    check_probes(kiln.trace, probes)
    at = next(i for i, p in enumerate(probes) if p.category is category)
    probes[at] = msgspec.structs.replace(probes[at], **change)
    with pytest.raises(CorpusError) as err:
        check_probes(kiln.trace, probes)
    assert err.value.code is Code.PROBE_INVALID


def test_kiln_101_values_are_the_pinned_ones(kiln: SuiteItem) -> None:
    """The probes the mutations above are written against (seed 101, kiln)."""
    assert _field(kiln, Category.DECISION_REASON).expected == ["Calloway Kilns", "lead time"]
    assert _field(kiln, Category.PRIORITY_ORDER).expected == [
        "glaze buckets", "extraction hood", "pallet of clay"]
    assert _field(kiln, Category.CROSS_REFERENCE).expected == ["28 August 2031"]
    assert dt.date(2031, 8, 19) + dt.timedelta(days=9) == dt.date(2031, 8, 28)


# -- probe files of imported conversations --------------------------------------------

TRACE = [
    {"kind": "trace", "trace_id": "ops", "suite": "imported", "family": "openai-chat",
     "fictional": False, "title": "ops.json", "sessions": 2, "seed": None, "version": 1},
    {"id": "e0001", "session": 1, "day": 1, "role": "user", "content":
     "We compared the two couriers.\n"
     "Rejected for the courier contract: Swiftline, because of the weekend surcharge.\n"
     "Decision on the courier contract: Parcelhop, because of the tracking coverage."},
    {"id": "e0002", "session": 1, "day": 1, "role": "assistant", "content": "Noted."},
    {"id": "e0003", "session": 1, "day": 1, "role": "user", "content":
     "Priority order: 1. renew the domain; 2. rotate the keys; 3. archive the logs."},
    {"id": "e0004", "session": 1, "day": 1, "role": "assistant", "content": "Understood."},
    {"id": "e0005", "session": 1, "day": 1, "role": "user", "content":
     "Launch review date: 10 April 2031\nHosting budget: GBP 900.00"},
    {"id": "e0006", "session": 2, "day": 2, "role": "user", "content":
     "Dependency: the launch date moves to 5 days after the launch review date."},
    {"id": "e0007", "session": 2, "day": 2, "role": "assistant", "content": "Noted."},
]
GOOD_PROBES = f'''
[[probe]]
id = "decision"
category = "decision_reason"
question = "{forms.decision_question("courier contract")}"
expected = ["Parcelhop", "tracking coverage"]
superseded = ["weekend surcharge"]
source_event = "e0001"

[[probe]]
id = "priority"
category = "priority_order"
question = "{forms.priority_question()}"
expected = ["domain", "keys", "logs"]
superseded = ["logs", "domain", "keys"]

[[probe]]
id = "launch"
category = "cross_reference"
question = "{forms.cross_reference_question("launch date")}"
expected = ["15 April 2031"]
superseded = ["10 April 2031"]
value_kind = "date"
premises = ["Launch review date: 10 April 2031",
            "Dependency: the launch date moves to 5 days after the launch review date."]
premise_events = ["e0005", "e0006"]

[[probe]]
id = "budget"
category = "contradiction"
question = "The owner now says the hosting budget is GBP 1,200.00. Check it."
expected = ["GBP 900.00"]
superseded = ["GBP 1,200.00"]
value_kind = "amount"
'''


def _directory(tmp_path: Path, probes: str) -> Path:
    lines = [msgspec.json.encode(TRACE[0])] + [
        msgspec.json.encode({"kind": "message", **event}) for event in TRACE[1:]]
    (tmp_path / "ops.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "ops.probes.toml").write_text(probes)
    return tmp_path


def test_probe_files_accept_the_field_categories(tmp_path: Path) -> None:
    report = check_suite_dir(_directory(tmp_path, GOOD_PROBES))
    assert report.problems == []
    (item,) = report.items
    probes = {p.id: p for p in item.probes.probes}
    assert [probes[i].category for i in ("decision", "priority", "launch", "budget")] == list(FIELD)
    assert probes["launch"].premise_events == ["e0005", "e0006"]
    assert score(probes["launch"], "15 April").correct


@pytest.mark.parametrize(("old", "new", "detail"), [
    ('premise_events = ["e0005", "e0006"]', 'premise_events = "e0005"',
     "probe[3].premise_events: expected a list of strings"),
    ('premises = ["Launch review date: 10 April 2031",',
     'premises = [', "probe launch: premises: cross_reference needs two or more"),
    ('premise_events = ["e0005", "e0006"]', 'premise_events = ["e0005", "e0400"]',
     "probe launch: premise_events[1]: 'e0400' is not an event of ops"),
    ('premise_events = ["e0005", "e0006"]', 'premise_events = ["e0006", "e0005"]',
     "probe launch: premise_events[0]: e0006 does not hold premises[0]"),
    ('premise_events = ["e0005", "e0006"]', 'premise_events = ["e0005"]',
     "probe launch: premise_events: one event per premise"),
    ('superseded = ["logs", "domain", "keys"]', 'superseded = ["logs", "domain", "rotate"]',
     "probe priority: superseded: the same task keys as expected, in another order"),
    ('expected = ["domain", "keys", "logs"]', 'expected = ["domain"]',
     "probe priority: expected: priority_order needs two or more distinct task keys"),
    ('expected = ["Parcelhop", "tracking coverage"]', 'expected = ["Parcelhop"]',
     "probe decision: expected: decision_reason needs the decision and its reason key"),
    ('superseded = ["weekend surcharge"]', 'premises = ["x", "y"]',
     "probe decision: premises does not apply to decision_reason"),
    ('superseded = ["GBP 1,200.00"]\n', "",
     "probe budget: superseded: contradiction needs the contradicting value"),
    ('superseded = ["GBP 1,200.00"]', 'superseded = ["GBP 900"]',
     "probe budget: the answer 'GBP 900' scores conflicted, not stale"),
])
def test_probe_files_refuse_malformed_field_probes_with_the_field_path(
    tmp_path: Path, old: str, new: str, detail: str
) -> None:
    assert old in GOOD_PROBES
    text = GOOD_PROBES.replace(old, new, 1)
    if new == "premises = [":  # keep only the dependency premise
        text = text.replace('premises = [\n            "Dependency', 'premises = ["Dependency')
    report = check_suite_dir(_directory(tmp_path, text))
    assert report.items == []
    assert any(detail in p.detail for p in report.problems), [p.detail for p in report.problems]
    assert all(p.code is Code.PROBE_INVALID and p.line is not None for p in report.problems)
