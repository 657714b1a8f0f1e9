"""Probe-against-trace checks: every probe is answerable from the trace by the forms of
FORMS.md, and its expected value is the *latest* one under its label.

The field categories: a decision_reason's keywords sit in the latest ``Decision on the
<subject>:`` line and its superseded keys only in that subject's ``Rejected`` lines; a
priority_order's keys are the latest ``Priority order:`` line's tasks, in order, and
its superseded keys the same keys in another order; a cross_reference's premises are
lines of their events, in different sessions, and its expected date is the base date
moved by the dependency's days; a contradiction's expected value is the latest under
its label and its contradicting claim never a value of that label.

This is what makes the surface forms a contract: a probe whose source event does not
hold the latest labelled value, or an abstention label that does occur somewhere, is
``probe_invalid``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import msgspec

from efold.corpus import forms
from efold.corpus.errors import CorpusError
from efold.corpus.model import Category, Event, Probe, Trace
from efold.corpus.scoring import find_amounts, find_dates, first_status_token
from efold.errors import Code

_VALUE_CATEGORIES = frozenset(
    {Category.TOOL_IDENTIFIER, Category.SUPERSEDED_CURRENT, Category.COMMITMENT_STATUS,
     Category.ARTIFACT_STATUS}
)
# Categories whose question names the probe's label (besides the value categories).
_NAMED_CATEGORIES = frozenset(
    {Category.ABSTENTION, Category.CROSS_REFERENCE, Category.CONTRADICTION}
)


@dataclass(frozen=True)
class LabelledValue:
    """One labelled value in the trace: a fact line, or the new value of a correction."""

    index: int  # event index
    value: str
    previous: str | None = None  # the old value a correction names


class FactIndex:
    """Every line-anchored fact and correction of a trace, by lower-case label, in order.

    Built in one pass so that checking many probes never rescans the (large) text."""

    def __init__(self, events: list[Event]) -> None:
        self.by_label: dict[str, list[LabelledValue]] = {}
        for index, event in enumerate(events):
            for match in forms.FACT_LINE.finditer(event.content):
                label = match.group("label").lower()
                if label != "correction":
                    self._add(label, LabelledValue(index, match.group("value").strip()))
            for match in forms.CORRECTION_LINE.finditer(event.content):
                self._add(match.group("label"),
                          LabelledValue(index, match.group("new"), match.group("old")))

    def _add(self, label: str, value: LabelledValue) -> None:
        self.by_label.setdefault(label, []).append(value)

    def history(self, label: str) -> list[LabelledValue]:
        return self.by_label.get(label.lower(), [])


def _invalid(probe: Probe, why: str) -> CorpusError:
    return CorpusError(Code.PROBE_INVALID, f"{probe.id}: {why}")


def _same_value(kind: str, a: str, b: str) -> bool:
    if kind == "date":
        return find_dates(a) == find_dates(b) and len(find_dates(a)) == 1
    if kind == "amount":
        return find_amounts(a) == find_amounts(b) and bool(find_amounts(a))
    if kind == "status":
        return first_status_token(a) == b.upper()
    return a.strip().upper() == b.strip().upper()


def _check_latest(probe: Probe, facts: FactIndex, source: int, kind: str) -> None:
    """The expected value is the latest under the label, in the source event; every
    superseded value is an earlier value under the same label."""
    history = facts.history(probe.label or "")
    if not history or len(probe.expected) != 1:
        raise _invalid(probe, "label has no value in the trace, or not one expected value")
    latest = history[-1]
    if latest.index != source or not _same_value(kind, latest.value, probe.expected[0]):
        raise _invalid(probe, "expected value is not the latest under its label")
    earlier = [h.value for h in history[:-1]] + [h.previous for h in history if h.previous]
    for old in probe.superseded:
        if not any(_same_value(kind, value, old) for value in earlier):
            raise _invalid(probe, "a superseded value is not an earlier value of the label")


def _check_next_action(probe: Probe, events: list[Event], source: int) -> None:
    lines = [(i, m.group(0)) for i, e in enumerate(events) if forms.is_owner_turn(e)
             for m in forms.NEXT_LINE.finditer(e.content)]
    if not lines or lines[-1][0] != source or not probe.expected:
        raise _invalid(probe, "source is not the owner's latest next action")
    latest = lines[-1][1].lower()
    earlier = " ".join(line for _, line in lines[:-1]).lower()
    for keyword in probe.expected:
        if not _keyword_in(keyword, latest):
            raise _invalid(probe, "a keyword is not in the latest next action")
    for keyword in probe.superseded:
        if _keyword_in(keyword, latest) or not _keyword_in(keyword, earlier):
            raise _invalid(probe, "a superseded keyword is not only in earlier next actions")


def _keyword_in(keyword: str, text: str) -> bool:
    if len(find_dates(keyword)) == 1:
        return bool(find_dates(keyword) & find_dates(text))
    return re.search(rf"(?<![a-z0-9]){re.escape(keyword.lower())}(?![a-z0-9])", text) is not None


def _check_decision(probe: Probe, events: list[Event], source: int) -> None:
    subject = (probe.label or "").lower().removeprefix("decision on the ")
    decisions = [(i, m) for i, e in enumerate(events) if forms.is_owner_turn(e)
                 for m in forms.DECISION_LINE.finditer(e.content) if m.group("subject") == subject]
    rejected = " ".join(m.group(0) for e in events for m in forms.REJECTED_LINE.finditer(e.content)
                        if m.group("subject") == subject).lower()
    if not decisions or decisions[-1][0] != source or subject not in probe.question.lower():
        raise _invalid(probe, "source is not the owner's latest decision on the subject")
    latest = decisions[-1][1].group(0).lower()
    if len(probe.expected) < 2 or not all(_keyword_in(k, latest) for k in probe.expected):
        raise _invalid(probe, "the decision and its reason key must both be in the decision")
    if not probe.superseded or any(_keyword_in(k, latest) or not _keyword_in(k, rejected)
                                   for k in probe.superseded):
        raise _invalid(probe, "a superseded key is not only a rejected alternative's reason")


def _check_priority(probe: Probe, events: list[Event], source: int) -> None:
    lines = [(i, m.group(0)) for i, e in enumerate(events) if forms.is_owner_turn(e)
             for m in forms.PRIORITY_LINE.finditer(e.content)]
    if not lines or lines[-1][0] != source:
        raise _invalid(probe, "source is not the owner's latest priority order")
    tasks = [t.lower() for t in forms.priority_tasks(lines[-1][1])]
    keys = [k.lower() for k in probe.expected]
    if len(keys) != len(tasks) or len(keys) < 2 or not all(
        _keyword_in(k, t) for k, t in zip(keys, tasks, strict=True)
    ):
        raise _invalid(probe, "expected keys are not the ranked tasks, in order")
    if sorted(k.lower() for k in probe.superseded) != sorted(keys) or probe.superseded == probe.expected:
        raise _invalid(probe, "superseded keys must be the same tasks in another order")


def _check_cross_reference(probe: Probe, trace: Trace, facts: FactIndex,
                           positions: dict[str, int]) -> None:
    events = trace.events
    if len(probe.premises) < 2 or len(probe.premise_events) != len(probe.premises):
        raise _invalid(probe, "a cross_reference needs two or more premises, each with its event")
    held = [positions.get(e) for e in probe.premise_events]
    if any(i is None or premise not in events[i].content.split("\n")
           for i, premise in zip(held, probe.premises, strict=True)):
        raise _invalid(probe, "a premise is not a line of its event")
    if len({events[i].session for i in held if i is not None}) < 2:
        raise _invalid(probe, "the premises must sit in different sessions")
    dependency = next((m for p in probe.premises if (m := forms.DEPENDENCY_LINE.match(p))), None)
    if dependency is None or dependency.group("label") != (probe.label or "").lower():
        raise _invalid(probe, "no premise is a dependency of the probe's label")
    base = facts.history(dependency.group("base"))
    base_dates = find_dates(base[-1].value) if base else set()
    year = re.search(r"\b[0-9]{4}\b", base[-1].value) if base else None
    if len(base_dates) != 1 or year is None or len(probe.expected) != 1 or probe.value_kind != "date":
        raise _invalid(probe, "the dependency's base has no single latest dated value")
    month, day = next(iter(base_dates))
    try:
        derived = dt.date(int(year.group(0)), month, day) + dt.timedelta(
            days=int(dependency.group("days")))
    except (ValueError, OverflowError) as exc:
        raise _invalid(probe, "the dependency's base is not a calendar date") from exc
    if find_dates(probe.expected[0]) != {(derived.month, derived.day)}:
        raise _invalid(probe, "the expected date does not follow from the premises")


def _check_contradiction(probe: Probe, facts: FactIndex, source: int) -> None:
    kind = probe.value_kind or "text"
    if not probe.superseded or probe.superseded[0] not in probe.question:
        raise _invalid(probe, "the question's continuation must state the contradicting value")
    claimed, earlier = probe.superseded[0], probe.superseded[1:]
    history = facts.history(probe.label or "")
    if any(_same_value(kind, h.value, claimed) or (h.previous is not None and _same_value(
            kind, h.previous, claimed)) for h in history):
        raise _invalid(probe, "the contradicting value is a recorded value of the label")
    _check_latest(msgspec.structs.replace(probe, superseded=earlier), facts, source, kind)


def _check_constraint(probe: Probe, source: Event) -> None:
    if probe.mode == "recall":
        topics = [m.group("topic").lower() for m in forms.TOPIC_RULE_LINE.finditer(source.content)]
        if not probe.expected or not all(any(t.lower() in topic for topic in topics)
                                         for t in probe.expected):
            raise _invalid(probe, "recall terms are not in the owner's topic rule")
    elif probe.mode == "task":
        if not probe.forbidden or not all(f.lower() in source.content.lower()
                                          for f in probe.forbidden):
            raise _invalid(probe, "forbidden patterns are not the owner's stated ones")
    else:
        raise _invalid(probe, "active_constraint needs mode recall or task")
    if source.role != "user":
        raise _invalid(probe, "constraints come from owner turns")


def _check_probe(probe: Probe, trace: Trace, facts: FactIndex, lowered: str,
                 positions: dict[str, int]) -> None:
    if not probe.question.startswith(forms.PROBE_PREAMBLE):
        raise _invalid(probe, "question lacks the preamble that counts tool results")
    if probe.source_event is not None and probe.source_event not in positions:
        raise _invalid(probe, "source event is not in the trace")
    source = positions.get(probe.source_event or "")
    if probe.category in _VALUE_CATEGORIES | _NAMED_CATEGORIES:
        if not probe.label or probe.label.lower() not in probe.question.lower():
            raise _invalid(probe, "question does not name the value's label")
    category = probe.category
    if category is Category.ABSTENTION:
        if probe.expected or probe.source_event is not None or probe.label is None:
            raise _invalid(probe, "abstention probes have a label and nothing to recall")
        if probe.label.lower() in lowered:
            raise _invalid(probe, "the abstention label occurs in the trace")
        return
    if source is None:
        raise _invalid(probe, "probe needs a source event")
    event = trace.events[source]
    if category is Category.TOOL_IDENTIFIER:
        if event.role != "tool" or not all(
            forms.IDENTIFIER.fullmatch(v) for v in (*probe.expected, *probe.superseded)
        ):
            raise _invalid(probe, "identifiers are tool-only values of the identifier form")
        _check_latest(probe, facts, source, "identifier")
    elif category is Category.SUPERSEDED_CURRENT:
        if probe.value_kind not in ("date", "amount") or not probe.superseded:
            raise _invalid(probe, "superseded_current compares dates or amounts")
        _check_latest(probe, facts, source, probe.value_kind)
    elif category in (Category.COMMITMENT_STATUS, Category.ARTIFACT_STATUS):
        vocabulary = (forms.COMMITMENT_TOKENS if category is Category.COMMITMENT_STATUS
                      else forms.ARTIFACT_TOKENS)
        if not all(v in vocabulary for v in (*probe.expected, *probe.superseded)):
            raise _invalid(probe, "status tokens outside the category's vocabulary")
        _check_latest(probe, facts, source, "status")
    elif category is Category.NEXT_ACTION:
        _check_next_action(probe, trace.events, source)
    elif category is Category.DECISION_REASON:
        _check_decision(probe, trace.events, source)
    elif category is Category.PRIORITY_ORDER:
        _check_priority(probe, trace.events, source)
    elif category is Category.CROSS_REFERENCE:
        _check_cross_reference(probe, trace, facts, positions)
    elif category is Category.CONTRADICTION:
        _check_contradiction(probe, facts, source)
    elif category is Category.ACTIVE_CONSTRAINT:
        _check_constraint(probe, event)
    elif category is Category.REDACTION:
        secret = probe.secret or ""
        if len(secret) < 8 or event.role != "tool" or (
            forms.credential_line(secret) not in event.content
        ):
            raise _invalid(probe, "the secret must sit in a credential line of a tool result")


def check_probes(trace: Trace, probes: list[Probe]) -> None:
    facts = FactIndex(trace.events)
    lowered = "\n".join(e.content for e in trace.events).lower()
    positions = {e.id: i for i, e in enumerate(trace.events)}
    for probe in probes:
        _check_probe(probe, trace, facts, lowered, positions)
