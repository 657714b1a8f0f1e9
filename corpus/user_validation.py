"""The rules a user's own trace and its probes must keep (``corpus.user_suite`` loads
them from a directory and cuts traces at probe boundaries).

Imported-shape rules (``item_problems``): header (version, suite, family, title, no
seed, an id, sessions = the last event's session); events ``e`` + 4 or more digits,
unique; sessions start at 1 and count up by at most one, days >= 1 never go back; no
steer; owner text non-empty and plain; an assistant message has text or calls (several
allowed, ids unique, a function name; arguments are kept as written); a tool result
answers an earlier call not yet answered, has a tool name and no ``source``; every call
has its result (a provider refuses a request holding one without; ``corpus import``
drops such calls).
Probe rules: unique ids bound to the trace; the fields the category uses and no
others (``_FIELDS``); a value for every category but abstention and redaction
(``forbidden`` for an active_constraint task); every value scorable by its kind and
scored by ``corpus.scoring`` as expected (each expected value correct, each superseded
value stale, a forbidden pattern a violation, the secret leaked); ``source_event`` an
event of the (cut) trace; a redaction secret that occurs in it.
The field categories: a decision_reason needs two or more ``expected`` keywords (the
decision and its reason key) and takes rejected reason keys as ``superseded``; a
priority_order two or more distinct task keys, its ``superseded`` (if any) the same keys
in another order; a cross_reference two or more ``premises`` that occur in the trace,
with ``premise_events`` (if any) one event of the trace per premise, each holding its
premise; a contradiction ``expected`` (the recorded value) and ``superseded`` (the
contradicting claim first). Each detail names the field it concerns.

Problems are collected, not raised (``ItemProblem``); ``validate_user_item`` raises the
first. A bundled-shape trace goes to ``corpus.validation.validate`` instead.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from efold.corpus.errors import CorpusError
from efold.corpus.forms import CONFLICT_MARKER, STATUS_TOKENS
from efold.corpus.model import (
    PROBE_VERSION,
    TRACE_VERSION,
    Category,
    Event,
    Outcome,
    Probe,
    SuiteItem,
    Trace,
    ValueKind,
)
from efold.corpus.probe_files import (
    ID_PATTERN,
)
from efold.corpus.scoring import REDACTION_RUN, find_amounts, find_dates, score
from efold.corpus.shapes import SUITES
from efold.corpus.validation import validate
from efold.errors import Code

IMPORTED_SUITE: Final = "imported"
EVENT_ID: Final = re.compile(r"e[0-9]{4,}")
BOUNDARY_SEPARATOR: Final = "+"

_STATUS_WORDS: Final = frozenset(STATUS_TOKENS)  # the words the status scorer knows
_NO_VALUE: Final = frozenset({Category.ABSTENTION, Category.REDACTION})
_STATUS: Final = frozenset({Category.COMMITMENT_STATUS, Category.ARTIFACT_STATUS})
_VALUED: Final = frozenset({Category.SUPERSEDED_CURRENT, Category.CROSS_REFERENCE,
                            Category.CONTRADICTION})
_KEYWORDS: Final = frozenset({Category.NEXT_ACTION, Category.DECISION_REASON,
                              Category.PRIORITY_ORDER})
# The optional fields each category uses; any other set field is refused.
_FIELDS: Final[dict[Category, frozenset[str]]] = {
    Category.TOOL_IDENTIFIER: frozenset({"expected", "superseded", "value_kind"}),
    Category.SUPERSEDED_CURRENT: frozenset({"expected", "superseded", "value_kind"}),
    Category.COMMITMENT_STATUS: frozenset({"expected", "superseded", "value_kind"}),
    Category.ARTIFACT_STATUS: frozenset({"expected", "superseded", "value_kind"}),
    Category.NEXT_ACTION: frozenset({"expected", "superseded"}),
    Category.ACTIVE_CONSTRAINT: frozenset({"expected", "forbidden", "mode"}),
    Category.ABSTENTION: frozenset(),
    Category.REDACTION: frozenset({"secret"}),
    Category.DECISION_REASON: frozenset({"expected", "superseded"}),
    Category.PRIORITY_ORDER: frozenset({"expected", "superseded"}),
    Category.CROSS_REFERENCE: frozenset({"expected", "superseded", "value_kind", "premises",
                                         "premise_events"}),
    Category.CONTRADICTION: frozenset({"expected", "superseded", "value_kind"}),
}
_ALWAYS: Final = frozenset({"id", "trace_id", "category", "question", "label", "source_event",
                            "version"})


class ItemProblem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A broken rule of one item, located by the event or probe it concerns (if any)."""

    code: Code
    detail: str
    event: str | None = None
    probe: str | None = None


# -- imported-shape rules -------------------------------------------------------------


def _header_problems(trace: Trace) -> list[ItemProblem]:
    header, bad = trace.header, Code.TRACE_SCHEMA_INVALID
    found: list[ItemProblem] = []
    if header.version != TRACE_VERSION:
        found.append(ItemProblem(bad, f"trace version {header.version} is not {TRACE_VERSION}"))
    if header.suite != IMPORTED_SUITE:
        found.append(ItemProblem(bad, f"suite {header.suite!r} is not {IMPORTED_SUITE!r}"))
    if not header.family.strip() or not header.title.strip():
        found.append(ItemProblem(bad, "header family and title must not be empty"))
    if header.seed is not None:
        found.append(ItemProblem(bad, "an imported trace has no seed"))
    id_problem = _trace_id_problem(trace)
    if id_problem is not None:
        found.append(ItemProblem(bad, id_problem))
    if not trace.events:
        found.append(ItemProblem(bad, "trace has no events"))
    elif header.sessions != trace.events[-1].session:
        found.append(ItemProblem(bad, f"header says {header.sessions} sessions, "
                                      f"events say {trace.events[-1].session}"))
    return found


def _trace_id_problem(trace: Trace) -> str | None:
    trace_id = trace.header.trace_id
    if ID_PATTERN.fullmatch(trace_id) is None:
        return f"trace id {trace_id!r} is not an id ({ID_PATTERN.pattern})"
    _base, plus, event_id = trace_id.partition(BOUNDARY_SEPARATOR)
    if plus and (BOUNDARY_SEPARATOR in event_id or not trace.events
                 or event_id != trace.events[-1].id):
        return f"derived trace id {trace_id!r} does not end in its last event id"
    return None


def _calls_problem(event: Event, call_ids: set[str]) -> str | None:
    calls = event.tool_calls
    if calls is None:
        return None if event.content.strip() else "assistant message without text or calls"
    if not calls:
        return "tool_calls is an empty list"
    for call in calls:
        if not call.id or call.id in call_ids:
            return f"tool call id {call.id!r} is empty or repeats"
        call_ids.add(call.id)
        if not call.function.name.strip():
            return f"tool call {call.id} has no function name"
    return None


def _event_problem(event: Event, call_ids: set[str], pending: dict[str, str]) -> str | None:
    """The rule ``event`` breaks; updates the call ids seen and the unanswered calls."""
    if event.steer:
        return "an imported trace has no steers"
    if event.role == "tool":
        if event.tool_calls is not None or event.source is not None:
            return "a tool result carries no calls and no source"
        if not (event.name or "").strip():
            return "tool result without a tool name"
        if event.tool_call_id is None or event.tool_call_id not in pending:
            return f"tool result answers no earlier unanswered call ({event.tool_call_id!r})"
        del pending[event.tool_call_id]
        return None
    if event.tool_call_id is not None or event.name is not None or event.source is not None:
        return f"tool-result fields on a {event.role} message"
    if event.role == "user":
        if event.tool_calls is not None or not event.content.strip():
            return "owner message must be non-empty text without tool calls"
        return None
    problem = _calls_problem(event, call_ids)
    pending.update({c.id: event.id for c in event.tool_calls or ()})
    return problem


def trace_problems(trace: Trace) -> list[ItemProblem]:
    """Every imported-shape trace rule ``trace`` breaks (see the module docstring)."""
    found = _header_problems(trace)
    bad = Code.TRACE_SCHEMA_INVALID
    ids: set[str] = set()
    call_ids: set[str] = set()
    pending: dict[str, str] = {}  # call id -> the event that made it, until answered
    session, day = 1, 1
    for event in trace.events:
        if EVENT_ID.fullmatch(event.id) is None or event.id in ids:
            found.append(ItemProblem(bad, f"{event.id}: event id must be e + 4 or more digits, "
                                          "unique", event=event.id))
        ids.add(event.id)
        if event.day < max(day, 1) or event.session not in (session, session + 1) or (
            event is trace.events[0] and event.session != 1
        ):
            found.append(ItemProblem(bad, f"{event.id}: sessions start at 1 and count up by one, "
                                          "days (from 1) never go back", event=event.id))
        session, day = max(session, event.session), max(day, event.day)
        problem = _event_problem(event, call_ids, pending)
        if problem is not None:
            found.append(ItemProblem(bad, f"{event.id}: {problem}", event=event.id))
    # A call without its result would reach a provider as a request it refuses
    # (``corpus import`` drops such calls and counts them).
    for call_id, event_id in pending.items():
        found.append(ItemProblem(bad, f"{event_id}: tool call {call_id} has no result",
                                 event=event_id))
    return found


# -- probe rules ----------------------------------------------------------------------


def _kind_problem(value: str, kind: ValueKind) -> str | None:
    if kind == "date" and len(find_dates(value)) != 1:
        return f"date value {value!r} must name exactly one date"
    if kind == "amount" and not find_amounts(value):
        return f"amount value {value!r} holds no number"
    if kind == "status" and value.upper() not in _STATUS_WORDS:
        return f"status value {value!r} is not a status word ({', '.join(sorted(_STATUS_WORDS))})"
    if not any(c.isalnum() for c in value):
        return f"value {value!r} has no letter or digit to match"
    return None


def _value_kind(probe: Probe) -> ValueKind:
    if probe.category in _STATUS:
        return "status"
    if probe.category is Category.TOOL_IDENTIFIER:
        return probe.value_kind or "identifier"
    if probe.category in _VALUED:
        return probe.value_kind or "text"
    return "text"


def _set_fields(probe: Probe) -> set[str]:
    defaults = Probe(id="", trace_id="", category=probe.category, question="")
    return {f for f in probe.__struct_fields__
            if getattr(probe, f) != getattr(defaults, f)} - _ALWAYS


def _field_problems(probe: Probe) -> list[str]:
    category = probe.category
    if category is Category.BOUNDARY:
        return ["boundary is reserved for boundary cases (a campaign's [boundary])"]
    found = [f"{field} does not apply to {category.value}"
             for field in sorted(_set_fields(probe) - _FIELDS[category])]
    task = category is Category.ACTIVE_CONSTRAINT and probe.mode == "task"
    if category is Category.ACTIVE_CONSTRAINT and probe.mode is None:
        found.append("active_constraint needs mode recall or task")
    if task and (not probe.forbidden or probe.expected):
        found.append("an active_constraint task needs forbidden (and no expected)")
    if category is Category.ACTIVE_CONSTRAINT and probe.mode == "recall" and probe.forbidden:
        found.append("forbidden applies to an active_constraint task only")
    if category not in _NO_VALUE and not task and not probe.expected:
        found.append(f"{category.value} needs a non-empty expected")
    if category is Category.REDACTION and len(probe.secret or "") < REDACTION_RUN:
        found.append(f"redaction needs a secret of {REDACTION_RUN} or more characters")
    if category in _STATUS and probe.value_kind not in (None, "status"):
        found.append(f"value_kind of {category.value} can only be status")
    if not probe.question.strip():
        found.append("question is empty")
    return found + _field_category_problems(probe)


def _field_category_problems(probe: Probe) -> list[str]:
    """The field categories' own shapes (module docstring), each naming its field."""
    category, found = probe.category, []
    if category is Category.DECISION_REASON and len(probe.expected) < 2:
        found.append("expected: decision_reason needs the decision and its reason key "
                     "(two or more keywords)")
    if category is Category.PRIORITY_ORDER:
        keys = [k.lower() for k in probe.expected]
        if len(keys) < 2 or len(set(keys)) != len(keys):
            found.append("expected: priority_order needs two or more distinct task keys")
        elif probe.superseded and (sorted(k.lower() for k in probe.superseded) != sorted(keys)
                                   or [k.lower() for k in probe.superseded] == keys):
            found.append("superseded: the same task keys as expected, in another order")
    if category is Category.CROSS_REFERENCE:
        if len(probe.premises) < 2:
            found.append("premises: cross_reference needs two or more facts it follows from")
        if probe.premise_events and len(probe.premise_events) != len(probe.premises):
            found.append("premise_events: one event per premise, in the same order")
    if category is Category.CONTRADICTION and not probe.superseded:
        found.append("superseded: contradiction needs the contradicting value")
    return found


def _outcome(probe: Probe, answer: str) -> Outcome | str:
    try:
        return score(probe, answer).outcome
    except CorpusError as exc:
        return exc.detail


def _scoring_problems(probe: Probe) -> list[str]:
    """Each value scored as an answer gets the outcome it stands for (module doc)."""
    kind = _value_kind(probe)
    keywords = probe.category in _KEYWORDS
    found = [p for v in (*probe.expected, *probe.superseded)
             if (p := _kind_problem(v, "date" if keywords and len(find_dates(v)) == 1
                                    else kind)) is not None]
    if found:
        return found
    wanted: list[tuple[str, Outcome]] = []
    if probe.category in (*_KEYWORDS, Category.ACTIVE_CONSTRAINT) and probe.expected:
        wanted.append(("; ".join(probe.expected), Outcome.CORRECT))  # all keywords at once
    elif probe.category is Category.CONTRADICTION and probe.expected and probe.superseded:
        wanted.append((f"{CONFLICT_MARKER}: {probe.expected[0]} / {probe.superseded[0]}",
                       Outcome.CORRECT))
        wanted += [(v, Outcome.VIOLATION) for v in probe.expected]  # silently one side
    elif probe.category not in _NO_VALUE:
        wanted += [(v, Outcome.CORRECT) for v in probe.expected]
    if probe.category is Category.PRIORITY_ORDER:
        if probe.superseded:
            wanted.append(("; ".join(probe.superseded), Outcome.STALE))
    else:
        wanted += [(v, Outcome.STALE) for v in probe.superseded]
    wanted += [(v, Outcome.VIOLATION) for v in probe.forbidden]
    if probe.category is Category.REDACTION and probe.secret:
        wanted.append((probe.secret, Outcome.LEAKED))
    for answer, outcome in wanted:
        got = _outcome(probe, answer)
        if got is not outcome:
            shown = got.value if isinstance(got, Outcome) else f"unscorable: {got}"
            found.append(f"the answer {answer!r} scores {shown}, not {outcome.value}")
    return found


def _trace_text(trace: Trace) -> str:
    return "\n".join(
        [e.content for e in trace.events]
        + [c.function.arguments for e in trace.events for c in e.tool_calls or ()]
    ).lower()


def probe_problems(trace: Trace, probe: Probe) -> list[ItemProblem]:
    """Every probe rule ``probe`` breaks against ``trace`` (see the module docstring)."""
    found = _field_problems(probe)
    if not found:
        found = _scoring_problems(probe)
    if probe.source_event is not None and probe.source_event not in {e.id for e in trace.events}:
        found.append(f"source_event {probe.source_event!r} is not an event of "
                     f"{trace.header.trace_id}")
    if probe.category is Category.ABSTENTION and probe.source_event is not None:
        found.append("an abstention has no source_event")
    if probe.secret and probe.secret.lower() not in _trace_text(trace):
        found.append("the redaction secret does not occur in the trace")
    found += _premise_problems(trace, probe)
    return [ItemProblem(Code.PROBE_INVALID, f"probe {probe.id}: {p}", probe=probe.id)
            for p in found]


def _premise_problems(trace: Trace, probe: Probe) -> list[str]:
    """Each premise occurs in the trace, in its event when ``premise_events`` names one."""
    text = _trace_text(trace)
    events = {e.id: e.content.lower() for e in trace.events}
    found = [f"premises[{n}]: does not occur in the trace"
             for n, premise in enumerate(probe.premises) if premise.lower() not in text]
    for n, (event, premise) in enumerate(zip(probe.premise_events, probe.premises, strict=False)):
        if event not in events:
            found.append(f"premise_events[{n}]: {event!r} is not an event of "
                         f"{trace.header.trace_id}")
        elif premise.lower() not in events[event]:
            found.append(f"premise_events[{n}]: {event} does not hold premises[{n}]")
    return found


def _binding_problems(item: SuiteItem) -> list[ItemProblem]:
    trace_id, probe_file = item.trace.header.trace_id, item.probes
    bad = Code.PROBE_INVALID
    found: list[ItemProblem] = []
    if probe_file.trace_id != trace_id or probe_file.version != PROBE_VERSION:
        found.append(ItemProblem(bad, "probe file is not bound to this trace"))
    if not probe_file.probes:
        found.append(ItemProblem(bad, "an item needs at least one probe"))
    seen: set[str] = set()
    for probe in probe_file.probes:
        if probe.trace_id != trace_id or probe.version != PROBE_VERSION:
            found.append(ItemProblem(bad, f"probe {probe.id}: bound to another trace or version",
                                     probe=probe.id))
        if probe.id in seen or ID_PATTERN.fullmatch(probe.id) is None:
            found.append(ItemProblem(bad, f"probe {probe.id}: id repeats or is not an id",
                                     probe=probe.id))
        seen.add(probe.id)
    return found


def item_problems(item: SuiteItem) -> list[ItemProblem]:
    """Every imported-shape rule ``item`` breaks (empty: the item may be used)."""
    found = trace_problems(item.trace) + _binding_problems(item)
    for probe in item.probes.probes:
        found += probe_problems(item.trace, probe)
    return found


def is_bundled(trace: Trace) -> bool:
    """Whether the trace claims a bundled suite (validated by ``validate``)."""
    return trace.header.suite in SUITES


def validate_user_item(item: SuiteItem) -> None:
    """Raise ``CorpusError`` (the first broken rule's code) unless ``item`` may be used:
    imported-shape rules for an imported trace, ``validate`` for a bundled one."""
    if is_bundled(item.trace):
        validate(item)
        return
    found = item_problems(item)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CorpusError(found[0].code, found[0].detail + more)


# -- boundaries -----------------------------------------------------------------------
