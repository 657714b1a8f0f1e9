"""The generated suites: ``generate(seed, suite)`` -> one trace with its probes.

``medium`` and ``hard`` share one layout, one set of facts and one probe list; only the
records' sizes differ (``shapes.RECORD_SIZES``). ``hard-distractors`` is ``hard`` with
its filler swapped for labelled hypothetical corrections.

Pure function of the seed and the suite: our own SplitMix64 stream, forked
into independent sub-streams *before* any draw (values, layout, sizes, filler,
distractors), so that the distractor pass cannot shift a single byte of the base text
and the same seed yields byte-identical output in any process on any Python >= 3.11.

``generate`` does not validate; ``load_suite`` does (and the tests validate every
allowed seed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import msgspec

from efold.corpus import forms
from efold.corpus.builder import TraceBuilder
from efold.corpus.errors import CorpusError
from efold.corpus.families import FAMILIES
from efold.corpus.hard_layout import TurnPlan, plan_layout
from efold.corpus.hard_render import RecordRenderer, RenderedRecord, assign_sizes, distract
from efold.corpus.hard_values import HANDOVER_LABEL, SURVEY_LABEL, TraceValues, make_values
from efold.corpus.model import Category, Probe, ProbeFile, SuiteItem, TraceHeader
from efold.corpus.prng import SeededRandom
from efold.corpus.shapes import (
    GENERATED,
    HARD,
    HARD_DISTRACTORS,
    HARD_FAMILIES,
    HARD_SEED_MAX,
    HARD_SEED_MIN,
    RECORD_SIZES,
    generated_trace_id,
    hard_family,
)
from efold.errors import Code

_STREAM_SALT = 0x65666F6C64  # "efold": keeps seed 101 from sharing a stream with others


def _emit(turns: list[TurnPlan], contents: list[str]) -> tuple[TraceBuilder, dict[str, str]]:
    """Events in order; returns the builder and role -> event id for probe sources."""
    builder = TraceBuilder()
    sources: dict[str, str] = {}
    texts = iter(contents)
    for turn in turns:
        if turn.session != builder.session_number:
            builder.start_session(turn.session, turn.day)
        owner = builder.owner(turn.owner)
        if turn.role:
            sources[turn.role] = owner.id
        for record in turn.records:
            result = builder.tool(record.tool, record.arguments, next(texts), steer=record.steer)
            sources.setdefault(record.role, result.id)
        builder.reply(turn.reply)
    return builder, sources


def _day_month(day: dt.date) -> str:
    """A deadline keyword such as "14 May" (compared as a date by the scorer)."""
    return f"{day.day} {forms.MONTHS[day.month - 1]}"


def _field_probes(probe: Callable[..., Probe], v: TraceValues,
                  sources: dict[str, str]) -> list[Probe]:
    """The four categories the field asks (FORMS.md §3): decision and reason, priority
    order, cross-reference, contradiction."""
    f, d = v.family, v.field
    survey, dependency = sources["survey"], sources["dependency"]
    return [
        probe(Category.DECISION_REASON, forms.decision_question(d.subject),
              label=f"decision on the {d.subject}", value_kind="text",
              expected=[d.choice, d.reason[1]], superseded=[d.rejected_reason[1]],
              source_event=sources["decision"]),
        probe(Category.PRIORITY_ORDER, forms.priority_question(), label="priority order",
              value_kind="text", expected=list(d.task_keys),
              superseded=[d.task_keys[i] for i in d.loud_order],
              source_event=sources["priority"]),
        probe(Category.CROSS_REFERENCE, forms.cross_reference_question(HANDOVER_LABEL),
              label=HANDOVER_LABEL, value_kind="date", expected=[v.date_text(d.handover)],
              superseded=[v.date_text(d.planned), v.date_text(d.survey)],
              premises=[forms.fact_line(SURVEY_LABEL, v.date_text(d.survey)),
                        forms.dependency_line(HANDOVER_LABEL, d.lag, SURVEY_LABEL)],
              premise_events=[survey, dependency], source_event=dependency),
        probe(Category.CONTRADICTION,
              forms.contradiction_question(f.amount_label, v.vendors[0], v.amount_text(d.claimed)),
              label=f.amount_label, value_kind="amount", expected=[v.amount_text(v.amounts[1])],
              superseded=[v.amount_text(d.claimed), v.amount_text(v.amounts[0])],
              source_event=sources["amount1"]),
    ]


def _probes(trace_id: str, values: TraceValues, sources: dict[str, str]) -> list[Probe]:
    f, v = values.family, values
    sent = f.commitment_sent.format(vendor=v.vendors[0])
    drafted = f.commitment_drafted.format(vendor=v.vendors[3])
    topic = v.topic.removeprefix("the ")

    def probe(category: Category, question: str, **fields: Any) -> Probe:
        return Probe(id="", trace_id=trace_id, category=category, question=question, **fields)

    probes = [
        probe(Category.TOOL_IDENTIFIER, forms.identifier_question("account reference"),
              label="account reference", expected=[v.account_ref], value_kind="identifier",
              source_event=sources["account"]),
        probe(Category.TOOL_IDENTIFIER, forms.identifier_question(f.mid_label),
              label=f.mid_label, expected=[v.mid_ref], value_kind="identifier",
              source_event=sources["mid"]),
        probe(Category.TOOL_IDENTIFIER, forms.identifier_question("booking ref"),
              label="booking ref", expected=[v.booking_ref], superseded=[v.booking_decoy],
              value_kind="identifier", source_event=sources["booking"]),
        probe(Category.ACTIVE_CONSTRAINT, forms.constraint_recall_question(), mode="recall",
              label="never mention", expected=[topic], value_kind="text",
              source_event=sources["rules"]),
        probe(Category.ACTIVE_CONSTRAINT,
              forms.constraint_task_question(v.vendors[0], f"the {f.items[0]} delivery"),
              mode="task", label="never mention", forbidden=[topic, v.phone, v.postcode],
              source_event=sources["rules"]),
        probe(Category.SUPERSEDED_CURRENT, forms.current_question(f.date_label),
              label=f.date_label, expected=[v.date_text(v.dates[2])],
              superseded=[v.date_text(v.dates[0]), v.date_text(v.dates[1])],
              value_kind="date", source_event=sources["date2"]),
        probe(Category.SUPERSEDED_CURRENT, forms.current_question(f.amount_label),
              label=f.amount_label, expected=[v.amount_text(v.amounts[1])],
              superseded=[v.amount_text(v.amounts[0])], value_kind="amount",
              source_event=sources["amount1"]),
        probe(Category.COMMITMENT_STATUS, forms.status_question(drafted),
              label=f"status of the {drafted}", expected=["DRAFTED"], value_kind="status",
              source_event=sources["drafted"]),
        probe(Category.COMMITMENT_STATUS, forms.status_question(sent),
              label=f"status of the {sent}", expected=["SENT"], value_kind="status",
              source_event=sources["sent"]),
        probe(Category.ARTIFACT_STATUS, forms.status_question(f.artifact),
              label=f"status of the {f.artifact}", expected=["SHARED"], superseded=["DRAFT"],
              value_kind="status", source_event=sources["shared"]),
        probe(Category.NEXT_ACTION, forms.next_action_question(), label="next",
              value_kind="text", expected=[f.next_new[1], _day_month(v.next_new_deadline)],
              superseded=[f.next_old[1], _day_month(v.next_old_deadline)],
              source_event=sources["next_new"]),
        probe(Category.ABSTENTION, forms.abstention_question(f.abstention_label),
              label=f.abstention_label),
        probe(Category.REDACTION, forms.redaction_question(v.portal), secret=v.secret,
              source_event=sources["password"]),
        *_field_probes(probe, values, sources),
    ]
    return [
        msgspec.structs.replace(p, id=f"{trace_id}-p{number:02d}")
        for number, p in enumerate(probes, start=1)
    ]


def generate(seed: int, suite: str = HARD) -> SuiteItem:
    """The trace of ``seed`` (101-124) in the generated ``suite`` with its probes."""
    if suite not in GENERATED:
        raise CorpusError(Code.SUITE_UNKNOWN, f"{suite!r} is not a generated suite")
    if not HARD_SEED_MIN <= seed <= HARD_SEED_MAX:
        raise CorpusError(Code.TRACE_SEED_OUT_OF_RANGE, f"seed {seed} outside 101-124")
    root = SeededRandom(seed ^ _STREAM_SALT)
    streams = {name: root.fork(name)
               for name in ("values", "layout", "sizes", "filler", "distractors", "field")}
    family = FAMILIES[hard_family(seed)]
    cycle = (seed - HARD_SEED_MIN) // len(HARD_FAMILIES)
    values = make_values(streams["values"], family, cycle, streams["field"])
    turns = plan_layout(streams["layout"], values)
    assign_sizes(streams["sizes"], turns, RECORD_SIZES[suite])
    renderer = RecordRenderer(streams["filler"], values)
    rendered: list[RenderedRecord] = [renderer.render(r) for t in turns for r in t.records]
    if suite == HARD_DISTRACTORS:
        distract(streams["distractors"], values, rendered)
    builder, sources = _emit(turns, [r.text for r in rendered])
    trace_id = generated_trace_id(suite, seed)
    header = TraceHeader(
        trace_id=trace_id, suite=suite, family=family.slug, fictional=True,
        title=family.title.format(org=values.org), sessions=turns[-1].session, seed=seed,
    )
    probes = _probes(trace_id, values, sources)
    return SuiteItem(trace=builder.build(header),
                     probes=ProbeFile(trace_id=trace_id, probes=probes))


def generate_hard(seed: int, *, distractors: bool = False) -> SuiteItem:
    """The hard (or hard-distractors) trace of ``seed``: ``generate`` for those suites."""
    return generate(seed, HARD_DISTRACTORS if distractors else HARD)
