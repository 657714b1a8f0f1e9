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

The rules each item must keep are ``corpus.user_validation``'s.

Problems are collected, not raised, so ``corpus validate`` can print every one as
``FILE:LINE: code: detail``; ``load_suite_dir`` raises the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from efold.corpus.errors import CorpusError
from efold.corpus.model import (
    Event,
    Probe,
    ProbeFile,
    SuiteItem,
    Trace,
    TraceHeader,
    TraceLine,
)
from efold.corpus.probe_files import (
    ID_PATTERN,
    PROBE_FILE_SUFFIXES,
    UserProbe,
    parse_probe_file,
    probe_file_trace_id,
)
from efold.corpus.user_validation import (
    BOUNDARY_SEPARATOR,
    ItemProblem,
    is_bundled,
    probe_problems,
    trace_problems,
    validate_user_item,
)
from efold.corpus.validation import validate
from efold.errors import Code
from efold.input_files import PROBES_LIMIT, TRACE_LIMIT, InputFileError, read_input

TRACE_SUFFIX: Final = ".jsonl"
_LINE_DECODER = msgspec.json.Decoder(TraceLine)


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

    def _read(self, path: Path, what: str, limit: int) -> bytes | None:
        """The file's bytes (``input_files.read_input``: a regular file within its
        bound), or None with the problem recorded."""
        try:
            return read_input(path, what=what, limit=limit)
        except InputFileError as exc:
            unreadable = exc.code is Code.INPUT_FILE_UNREADABLE
            problem = SuiteProblem(str(path), None,
                                   Code.SUITE_DIR_INVALID if unreadable else exc.code, exc.detail)
            self.problems.append(problem)
            return None

    def check(self) -> list[SuiteItem]:
        trace_data = self._read(self.trace_path, "trace", TRACE_LIMIT)
        probe_data = self._read(self.probe_path, "probe file", PROBES_LIMIT)
        if trace_data is None or probe_data is None:
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
