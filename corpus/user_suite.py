"""A user's own conversations as a suite: a directory of traces and their probe files.

A directory suite holds, flat, one ``<trace_id>.jsonl`` per trace and exactly one probe
file beside it (``<trace_id>.probes.toml`` | ``.probes.jsonl`` | ``.probes.json``, see
``corpus.probe_files``); any other entry is refused (``suite_dir_invalid``).

Two trace shapes are accepted:

* *imported* (``header.suite == "imported"``, written by ``corpus import``): checked by
  ``validate_user_item`` - the rules below, never the FORMS.md surface conventions;
* *bundled* (``original``, ``hard``, ``hard-distractors``, e.g. the output of
  ``corpus generate``): checked by ``corpus.validation.validate``, probed at their end.

Boundaries: a probe with a ``boundary`` earlier than the trace's last event belongs to a
*derived* item whose trace is the trace cut after that event, whose trace id is
``<trace_id>+<event id>`` (an OPAQUE_ID; ``+`` never occurs in an imported base id) and
whose ``header.sessions`` is the session of that event. Probes without a boundary, or
with the last event's, form the item of the whole trace.

Imported-shape rules (``item_problems``): header (version, suite, family, title, no
seed, an id, sessions = the last event's session); events ``e`` + 4 or more digits,
unique; sessions start at 1 and count up by at most one, days >= 1 never go back; no
steer; owner text non-empty and plain; an assistant message has text or calls (several
allowed, ids unique, a function name; arguments are kept as written); a tool result
answers an earlier call not yet answered, has a tool name and no ``source``. A call
without a result is allowed (``corpus import`` keeps one), but a boundary never falls
between a call and its result.
Probe rules: unique ids bound to the trace; the fields the category uses and no
others (``_FIELDS``); a value for every category but abstention and redaction
(``forbidden`` for an active_constraint task); every value scorable by its kind and
scored by ``corpus.scoring`` as expected (each expected value correct, each superseded
value stale, a forbidden pattern a violation, the secret leaked); ``source_event`` an
event of the (cut) trace; a redaction secret that occurs in it.

Problems are collected, not raised, so ``corpus validate`` can print every one as
``FILE:LINE: code: detail``; ``load_suite_dir`` raises the first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from efold.corpus.errors import CorpusError
from efold.corpus.forms import STATUS_TOKENS
from efold.corpus.model import (
    PROBE_VERSION,
    TRACE_VERSION,
    Category,
    Event,
    Outcome,
    Probe,
    ProbeFile,
    SuiteItem,
    Trace,
    TraceHeader,
    TraceLine,
    ValueKind,
)
from efold.corpus.probe_files import (
    ID_PATTERN,
    PROBE_FILE_SUFFIXES,
    UserProbe,
    parse_probe_file,
    probe_file_trace_id,
)
from efold.corpus.scoring import REDACTION_RUN, find_amounts, find_dates, score
from efold.corpus.shapes import SUITES
from efold.corpus.validation import validate
from efold.errors import Code

IMPORTED_SUITE: Final = "imported"
TRACE_SUFFIX: Final = ".jsonl"
EVENT_ID: Final = re.compile(r"e[0-9]{4,}")
BOUNDARY_SEPARATOR: Final = "+"

_LINE_DECODER = msgspec.json.Decoder(TraceLine)
_STATUS_WORDS: Final = frozenset(STATUS_TOKENS)  # the words the status scorer knows
_NO_VALUE: Final = frozenset({Category.ABSTENTION, Category.REDACTION})
_STATUS: Final = frozenset({Category.COMMITMENT_STATUS, Category.ARTIFACT_STATUS})
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
}
_ALWAYS: Final = frozenset({"id", "trace_id", "category", "question", "label", "source_event",
                            "version"})


class ItemProblem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A broken rule of one item, located by the event or probe it concerns (if any)."""

    code: Code
    detail: str
    event: str | None = None
    probe: str | None = None


class SuiteProblem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A problem at ``path`` (a file, or the suite directory), at ``line`` when known."""

    path: str
    line: int | None
    code: Code
    detail: str

    @property
    def location(self) -> str:
        return self.path if self.line is None else f"{self.path}:{self.line}"

    def render(self) -> str:
        """``FILE:LINE: code: detail`` (``FILE: code: detail`` without a line)."""
        return f"{self.location}: {self.code.value}: {self.detail}"


class SuiteReport(msgspec.Struct, frozen=True):
    """What a check found: the items that passed every rule, and every problem.

    Invariant: an item is listed only when its trace file and probe file had no
    problem at all; ``items`` are sorted by trace id."""

    items: list[SuiteItem]
    problems: list[SuiteProblem]


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
    if probe.category is Category.SUPERSEDED_CURRENT:
        return probe.value_kind or "text"
    return "text"


def _set_fields(probe: Probe) -> set[str]:
    defaults = Probe(id="", trace_id="", category=probe.category, question="")
    return {f for f in probe.__struct_fields__
            if getattr(probe, f) != getattr(defaults, f)} - _ALWAYS


def _field_problems(probe: Probe) -> list[str]:
    category = probe.category
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
    return found


def _outcome(probe: Probe, answer: str) -> Outcome | str:
    try:
        return score(probe, answer).outcome
    except CorpusError as exc:
        return exc.detail


def _scoring_problems(probe: Probe) -> list[str]:
    """Each value scored as an answer gets the outcome it stands for (module doc)."""
    kind = _value_kind(probe)
    keywords = probe.category is Category.NEXT_ACTION
    found = [p for v in (*probe.expected, *probe.superseded)
             if (p := _kind_problem(v, "date" if keywords and len(find_dates(v)) == 1
                                    else kind)) is not None]
    if found:
        return found
    wanted: list[tuple[str, Outcome]] = []
    if probe.category in (Category.NEXT_ACTION, Category.ACTIVE_CONSTRAINT) and probe.expected:
        wanted.append(("; ".join(probe.expected), Outcome.CORRECT))  # all keywords at once
    elif probe.category not in _NO_VALUE:
        wanted += [(v, Outcome.CORRECT) for v in probe.expected]
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
    return [ItemProblem(Code.PROBE_INVALID, f"probe {probe.id}: {p}", probe=probe.id)
            for p in found]


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


def cut_trace(trace: Trace, event_id: str) -> Trace:
    """``trace`` cut after ``event_id`` as a derived trace ``<trace_id>+<event_id>``
    (its sessions those of the kept events). ``event_id`` must be an earlier event."""
    index = [e.id for e in trace.events].index(event_id)
    events = trace.events[: index + 1]
    header = msgspec.structs.replace(
        trace.header, trace_id=f"{trace.header.trace_id}{BOUNDARY_SEPARATOR}{event_id}",
        sessions=events[-1].session)
    return Trace(header=header, events=events)


def _split_calls(trace: Trace, index: int) -> list[str]:
    """Calls made at or before ``index`` whose results come after it."""
    calls = {c.id for e in trace.events[: index + 1] for c in e.tool_calls or ()}
    later = {e.tool_call_id for e in trace.events[index + 1 :] if e.role == "tool"}
    return sorted(calls & later)


def _boundary_problem(trace: Trace, entry: UserProbe, positions: dict[str, int]) -> str | None:
    boundary = entry.boundary
    if boundary is None or boundary == trace.events[-1].id:
        return None
    if boundary not in positions:
        return f"boundary {boundary!r} is not an event of {trace.header.trace_id}"
    if is_bundled(trace):
        return "a bundled-suite trace is probed at its last event only"
    split = _split_calls(trace, positions[boundary])
    if split:
        return f"boundary {boundary} separates tool call {split[0]} from its result"
    derived = f"{trace.header.trace_id}{BOUNDARY_SEPARATOR}{boundary}"
    if ID_PATTERN.fullmatch(derived) is None:
        return f"derived trace id {derived!r} is not an id ({ID_PATTERN.pattern})"
    return None


def _grouped(trace: Trace, entries: Sequence[UserProbe]) -> list[SuiteItem]:
    """The items of one trace: whole trace first, then derived items by boundary."""
    by_boundary: dict[str | None, list[Probe]] = {}
    last = trace.events[-1].id
    for entry in entries:
        key = None if entry.boundary in (None, last) else entry.boundary
        by_boundary.setdefault(key, []).append(entry.probe)
    items = []
    for boundary, probes in by_boundary.items():
        cut = trace if boundary is None else cut_trace(trace, boundary)
        trace_id = cut.header.trace_id
        bound = [msgspec.structs.replace(p, trace_id=trace_id) for p in probes]
        items.append(SuiteItem(trace=cut, probes=ProbeFile(trace_id=trace_id, probes=bound)))
    return sorted(items, key=lambda i: i.trace.header.trace_id)


# -- files ----------------------------------------------------------------------------


def _decode_trace(data: bytes) -> tuple[Trace | None, list[tuple[int, str]]]:
    """The trace in ``data``, or every line that breaks the schema (line, detail)."""
    if not data.endswith(b"\n"):
        return None, [(data.count(b"\n") + 1, "trace file must end with a newline")]
    header: TraceHeader | None = None
    events: list[Event] = []
    found: list[tuple[int, str]] = []
    for number, raw in enumerate(data[:-1].split(b"\n"), start=1):
        try:
            line = _LINE_DECODER.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            found.append((number, str(exc)))
            continue
        if isinstance(line, TraceHeader) != (number == 1):
            found.append((number, "the header is the first line, and only the first"))
        elif isinstance(line, TraceHeader):
            header = line
        else:
            events.append(line)
    if found or header is None:
        return None, found or [(1, "header missing")]
    return Trace(header=header, events=events), []


class _Pair:
    """One trace file and its probe file, checked together; problems at file lines."""

    def __init__(self, trace_path: Path, probe_path: Path) -> None:
        self.trace_path, self.probe_path = trace_path, probe_path
        self.problems: list[SuiteProblem] = []
        self.lines: dict[str, int] = {}  # event id -> trace line
        self.probe_lines: dict[str, int] = {}  # probe id -> probe-file line

    def add(self, problem: ItemProblem) -> None:
        if problem.event is not None and problem.event in self.lines:
            self.at_trace(self.lines[problem.event], problem.code, problem.detail)
        elif problem.probe is not None and problem.probe in self.probe_lines:
            self.at_probes(self.probe_lines[problem.probe], problem.code, problem.detail)
        else:
            self.at_trace(1, problem.code, problem.detail)

    def at_trace(self, line: int | None, code: Code, detail: str) -> None:
        self.problems.append(SuiteProblem(str(self.trace_path), line, code, detail))

    def at_probes(self, line: int | None, code: Code, detail: str) -> None:
        self.problems.append(SuiteProblem(str(self.probe_path), line, code, detail))

    def add_error(self, exc: CorpusError) -> None:
        """A ``validate`` refusal, located by the event or probe id it starts with."""
        head = exc.detail.split(":", 1)[0]
        self.add(ItemProblem(exc.code, exc.detail, event=head, probe=head))

    def check(self) -> list[SuiteItem]:
        try:
            trace_data, probe_data = self.trace_path.read_bytes(), self.probe_path.read_bytes()
        except OSError as exc:
            self.at_trace(None, Code.SUITE_DIR_INVALID, f"cannot read: {exc.strerror}")
            return []
        parsed = parse_probe_file(self.probe_path.name, probe_data)
        for file_problem in parsed.problems:
            self.at_probes(file_problem.line, Code.PROBE_INVALID, file_problem.detail)
        self.probe_lines = {e.probe.id: e.line for e in parsed.probes}
        trace, decode_problems = _decode_trace(trace_data)
        for line, detail in decode_problems:
            self.at_trace(line, Code.TRACE_SCHEMA_INVALID, detail)
        if trace is None:
            return []
        self.lines = {e.id: n for n, e in enumerate(trace.events, start=2)}
        stem = self.trace_path.name.removesuffix(TRACE_SUFFIX)
        if trace.header.trace_id != stem:
            self.at_trace(1, Code.SUITE_DIR_INVALID,
                          f"trace id {trace.header.trace_id!r} is not the file name's {stem!r}")
        if not is_bundled(trace):
            if BOUNDARY_SEPARATOR in trace.header.trace_id:
                self.at_trace(1, Code.TRACE_SCHEMA_INVALID, f"a trace file's id has no "
                              f"{BOUNDARY_SEPARATOR!r} (it marks derived items)")
            for problem in trace_problems(trace):
                self.add(problem)
        if not trace.events:
            return []
        items = self._items(trace, parsed.probes)
        return items if not self.problems else []

    def _items(self, trace: Trace, entries: list[UserProbe]) -> list[SuiteItem]:
        positions = {e.id: n for n, e in enumerate(trace.events)}
        good: list[UserProbe] = []
        for entry in entries:
            problem = _boundary_problem(trace, entry, positions)
            if problem is None:
                good.append(entry)
            else:
                self.at_probes(entry.line, Code.PROBE_BOUNDARY_INVALID,
                               f"probe {entry.probe.id}: {problem}")
        items = _grouped(trace, good) if good else []
        for item in items:
            if is_bundled(trace):
                try:
                    validate(item)
                except CorpusError as exc:
                    self.add_error(exc)
                continue
            for probe in item.probes.probes:
                for found in probe_problems(item.trace, probe):
                    self.add(found)
        return items


def check_pair(trace_path: Path, probe_path: Path) -> SuiteReport:
    """Check one trace file with its probe file (see the module docstring)."""
    pair = _Pair(trace_path, probe_path)
    items = pair.check()
    problems = list(pair.problems)
    for item in items:  # imported items once more, whole, through the public validator
        try:
            if not is_bundled(item.trace):  # (a bundled item just passed ``validate``)
                validate_user_item(item)
        except CorpusError as exc:  # pragma: no cover - the pair check covers these rules
            problems.append(SuiteProblem(str(trace_path), None, exc.code, exc.detail))
    return SuiteReport(items=items if not problems else [], problems=problems)


def probe_files_beside(trace_path: Path) -> list[Path]:
    """The probe files that exist beside a trace file (one is expected)."""
    stem = trace_path.name.removesuffix(TRACE_SUFFIX)
    return [p for s in PROBE_FILE_SUFFIXES if (p := trace_path.with_name(stem + s)).is_file()]


def check_trace_file(trace_path: Path) -> SuiteReport:
    """Check one trace file with the one probe file beside it (as in a directory)."""
    beside = probe_files_beside(trace_path)
    if not trace_path.is_file() or len(beside) != 1:
        detail = ("no trace file" if not trace_path.is_file() else
                  "needs exactly one probe file beside it, found "
                  + (", ".join(p.name for p in beside) or "none"))
        return SuiteReport([], [SuiteProblem(str(trace_path), None, Code.SUITE_DIR_INVALID,
                                             detail)])
    return check_pair(trace_path, beside[0])


def check_suite_dir(path: Path) -> SuiteReport:
    """Check a directory suite; every item that passed, and every problem found."""
    dir_problem = Code.SUITE_DIR_INVALID
    try:
        entries = sorted(path.iterdir())
    except OSError as exc:
        return SuiteReport([], [SuiteProblem(str(path), None, dir_problem,
                                             f"cannot list: {exc.strerror}")])
    problems: list[SuiteProblem] = []
    traces: dict[str, Path] = {}
    probe_files: dict[str, list[Path]] = {}
    for entry in entries:
        trace_id = probe_file_trace_id(entry.name)
        if not entry.is_file():
            problems.append(SuiteProblem(str(entry), None, dir_problem,
                                         "not a file (a directory suite is flat)"))
        elif trace_id is not None:
            probe_files.setdefault(trace_id, []).append(entry)
        elif entry.name.endswith(TRACE_SUFFIX) and len(entry.name) > len(TRACE_SUFFIX):
            traces[entry.name.removesuffix(TRACE_SUFFIX)] = entry
        else:
            problems.append(SuiteProblem(str(entry), None, dir_problem,
                                         "neither a trace (.jsonl) nor a probe file ("
                                         + ", ".join(PROBE_FILE_SUFFIXES) + ")"))
    for trace_id, files in sorted(probe_files.items()):
        if trace_id not in traces:
            problems += [SuiteProblem(str(f), None, dir_problem,
                                      f"probe file without its trace {trace_id}{TRACE_SUFFIX}")
                         for f in files]
        elif len(files) > 1:
            problems.append(SuiteProblem(str(traces[trace_id]), None, dir_problem,
                                         "more than one probe file: "
                                         + ", ".join(f.name for f in files)))
    if not traces:
        problems.append(SuiteProblem(str(path), None, dir_problem, "no trace (.jsonl) in it"))
    items: list[SuiteItem] = []
    for trace_id, trace_path in sorted(traces.items()):
        files = probe_files.get(trace_id, [])
        if not files:
            problems.append(SuiteProblem(str(trace_path), None, dir_problem,
                                         "no probe file beside it ("
                                         + ", ".join(trace_id + s for s in PROBE_FILE_SUFFIXES)
                                         + ")"))
        elif len(files) == 1:
            report = check_pair(trace_path, files[0])
            items += report.items
            problems += report.problems
    problems += _repeated_ids(path, items)
    return SuiteReport(items=sorted(items, key=lambda i: i.trace.header.trace_id),
                       problems=sorted(problems, key=lambda p: (p.path, p.line or 0)))


def _repeated_ids(path: Path, items: list[SuiteItem]) -> list[SuiteProblem]:
    ids = [i.trace.header.trace_id for i in items]
    return [SuiteProblem(str(path), None, Code.SUITE_DIR_INVALID, f"trace id {t!r} repeats")
            for t in sorted({t for t in ids if ids.count(t) > 1})]


def load_suite_dir(path: Path | str) -> list[SuiteItem]:
    """The validated items of a directory suite, sorted by trace id.

    Raises ``CorpusError`` with the first problem's code; its detail is that problem's
    ``FILE[:LINE]: detail`` and how many more there are (``check_suite_dir`` has all)."""
    report = check_suite_dir(Path(path))  # every item passed ``validate_user_item``
    if report.problems:
        first = report.problems[0]
        more = len(report.problems) - 1
        raise CorpusError(first.code, f"{first.location}: {first.detail}"
                          + (f" (and {more} more)" if more else ""))
    return report.items
