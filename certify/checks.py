"""The certification checks: run in the controller over what the contained child wrote.

Nothing here trusts the child's account beyond the raw files: the source events must be
exactly the fixture's (regenerated here), every stored summary is re-derived from the
checkpoint the cycle recorded, and every figure is computed from the session as read
back. Per cycle (``CYCLE_CHECKS``, in report order):

* ``fold_ok``: the fold returned a checkpoint (else its code is the detail);
* ``folded``: it folded, i.e. its checkpoint is not just the newest events verbatim;
* ``goal``, ``constraint``, ``rare_fact``: the opening's three markers are visible;
* ``files``: every file any result so far came from is named;
* ``open_errors``: every error raised and not yet resolved is named;
* ``sources``: the opening turn, each file's latest result and each open error's result
  are kept verbatim or cited as ``[record <id>]``;
* ``citations``: every cited record exists on the branch;
* ``closure``: every tool result follows its call, and every call whose result exists
  is followed by it;
* ``round_trip``: the stored line is exactly what was recorded, decodes and re-encodes to
  the same bytes, and holds the summary with the cycle's marker;
* ``context``: the session's built context after the fold is the stored summary then the
  kept events, and after the next append it is that plus the new events;
* ``summary_bytes``: the summary is valid UTF-8 and at most 32 KiB;
* ``prior_offered``: the fold was offered exactly the latest stored summary;
* ``poison``: the checkpoint carries no stored summary's marker, whatever the fold
  declares (a fold may build on its previous summary; it must not pass its stored
  bytes on).

Then the late growth bound over the last 20 cycles' summary sizes, the six closure
fixtures, and the maximal source's summary size.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from efold.certify import fixture
from efold.certify.endurance import (
    CycleRecord,
    MaximalRecord,
    messages_sha256,
    with_poison,
)
from efold.certify.report import (
    CheckResult,
    EnduranceReport,
    FixtureResult,
    MaximalReport,
    PriorStats,
    SizeStats,
)
from efold.certify.session import (
    CompactionEntry,
    Entry,
    EventEntry,
    SessionError,
    built_context,
    encode_line,
    read_session,
)
from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.checkpoint import CITATION_PATTERN, ReaderMessage, visible_text
from efold.folds.regime import kept_tail
from efold.folds.transcript import reader_message

SUMMARY_MAX_BYTES: Final = 32 * 1024
LATE_CYCLES: Final = 20
LATE_RANGE_MAX_BYTES: Final = 512
LATE_SLOPE_MAX_BYTES: Final = 16.0
MAXIMAL_MIN_BYTES: Final = 24 * 1024
MAX_FILE_BYTES: Final = 256 * 1024 * 1024  # what the controller reads of the child's files

CYCLE_CHECKS: Final = ("fold_ok", "folded", "goal", "constraint", "rare_fact", "files",
                       "open_errors", "sources", "citations", "closure", "round_trip",
                       "context", "summary_bytes", "prior_offered", "poison")
_FIRST: Final = 5  # failing cycles listed per check
_POISON: Final = re.compile(r"PRIOR_SUMMARY_POISON_991_\d{3}(?:-injected)?")


def read_bounded(path: Path) -> bytes:
    if not path.is_file():
        raise SessionError(Code.CERTIFY_SESSION_INVALID, f"the child wrote no {path.name}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SessionError(Code.CERTIFY_SESSION_INVALID, f"{path.name} is over 256 MiB")
    return path.read_bytes()


def read_cycles(path: Path, cycles: int) -> list[CycleRecord]:
    decoder = msgspec.json.Decoder(CycleRecord)
    try:
        records = [decoder.decode(line) for line in read_bounded(path).splitlines()]
    except msgspec.DecodeError as exc:
        raise SessionError(Code.CERTIFY_SESSION_INVALID, f"{path.name}: {exc}") from exc
    if [r.cycle for r in records] != list(range(1, cycles + 1)):
        raise SessionError(Code.CERTIFY_SESSION_INVALID,
                           f"{path.name} does not hold cycles 1..{cycles} in order")
    return records


def summary_size(messages: Sequence[ReaderMessage]) -> tuple[int | None, bool]:
    """UTF-8 bytes of the messages' visible text, and whether it is valid UTF-8 (a lone
    surrogate is not: its size is then None)."""
    try:
        return len(visible_text(list(messages)).encode("utf-8", "strict")), True
    except UnicodeEncodeError:
        return None, False


def closure_problem(messages: Sequence[ReaderMessage], source: Sequence[Event]) -> str | None:
    """Why ``messages`` break call/result closure, or None."""
    answered = {e.tool_call_id for e in source if e.role == "tool"}
    seen_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool" and message.tool_call_id not in seen_calls:
            return f"a result for {message.tool_call_id} comes before or without its call"
        for call in message.tool_calls or ():
            seen_calls.add(call.id)
            later = messages[index + 1:]
            if call.id in answered and not any(m.tool_call_id == call.id for m in later):
                return f"call {call.id} is kept without its result"
    return None


def late_growth(sizes: Sequence[int]) -> tuple[int, float]:
    """(range, least-squares slope per cycle) of ``sizes``, one per consecutive cycle."""
    n = len(sizes)
    mean_x = (n - 1) / 2
    mean_y = sum(sizes) / n
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(sizes))
    denominator = sum((x - mean_x) ** 2 for x in range(n))
    return max(sizes) - min(sizes), numerator / denominator


@dataclass
class _Tally:
    failed: dict[str, list[tuple[int, str]]] = field(
        default_factory=lambda: {name: [] for name in CYCLE_CHECKS})

    def require(self, name: str, cycle: int, ok: bool, why: str) -> bool:
        if not ok:
            self.failed[name].append((cycle, why))
        return ok

    def results(self) -> list[CheckResult]:
        return [CheckResult(name=name, passed=not fails, failed_cycles=len(fails),
                            first_failed=[c for c, _ in fails[:_FIRST]],
                            detail=f"cycle {fails[0][0]}: {fails[0][1]}" if fails else None)
                for name, fails in self.failed.items()]


@dataclass
class _Addresses:
    """What the source so far asks a fold to keep addressable (``fixture``)."""

    files: dict[str, str] = field(default_factory=dict)  # path -> its latest result's id
    open_errors: dict[str, str] = field(default_factory=dict)  # code -> raising result's id

    def add(self, unit: fixture.Unit) -> None:
        if unit.file is not None and unit.result_id is not None:
            self.files[unit.file] = unit.result_id
        if unit.raised is not None and unit.result_id is not None:
            self.open_errors[unit.raised] = unit.result_id
        if unit.resolved is not None:
            self.open_errors.pop(unit.resolved, None)

    def sources(self) -> list[str]:
        return ["u0000-owner", *self.files.values(), *self.open_errors.values()]


def _missing(needles: Iterable[str], text: str) -> list[str]:
    return [n for n in needles if n not in text]


class _Cursor:
    """Walks the session's entries in order, against the fixture."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.position = 0

    def take_events(self, expected: Sequence[Event]) -> None:
        got = [e.event for e in self.entries[self.position:self.position + len(expected)]
               if isinstance(e, EventEntry)]
        if got != list(expected):
            raise SessionError(Code.CERTIFY_SESSION_INVALID,
                               f"the session's events differ from the fixture at entry "
                               f"{self.position + 1}")
        self.position += len(expected)

    def take_compaction(self, cycle: int, injected: bool) -> CompactionEntry | None:
        if self.position < len(self.entries):
            entry = self.entries[self.position]
            if (isinstance(entry, CompactionEntry) and entry.cycle == cycle
                    and entry.injected == injected):
                self.position += 1
                return entry
        return None


def _content_checks(tally: _Tally, c: int, text: str, summary_text: str, kept_ids: set[str],
                    events: Sequence[Event], addresses: _Addresses) -> set[str]:
    """What a checkpoint must keep visible or addressable (the markers, ``files``,
    ``open_errors``, ``sources``, ``citations``); returns the records its summary cites."""
    for name, marker in fixture.MARKERS.items():
        tally.require(name, c, marker in text, f"{marker!r} is not visible")
    missing = _missing(addresses.files, text)
    tally.require("files", c, not missing, f"{len(missing)} files not named, e.g. {missing[:1]}")
    missing = _missing(addresses.open_errors, text)
    tally.require("open_errors", c, not missing, f"open errors not named: {missing[:3]}")
    cited = set(CITATION_PATTERN.findall(summary_text))
    missing = [s for s in addresses.sources() if s not in kept_ids and s not in cited]
    tally.require("sources", c, not missing,
                  f"{len(missing)} sources neither kept nor cited, e.g. {missing[:1]}")
    unknown = sorted(set(CITATION_PATTERN.findall(text)) - {e.id for e in events})
    tally.require("citations", c, not unknown, f"cited records that do not exist: {unknown[:3]}")
    return cited


def check_endurance(out: Path, derives_from_source: bool,
                    cycles: int = fixture.CYCLES) -> tuple[EnduranceReport, set[str]]:
    """Check the endurance files under ``out`` (module docstring); also the distinct
    record ids the summaries cited (the memory part expands them)."""
    raw = read_bounded(out / "session.jsonl")
    raw_lines = raw.splitlines(keepends=True)
    entries = read_session(raw)
    records = read_cycles(out / "cycles.jsonl", cycles)
    tally = _Tally()
    cursor = _Cursor(entries)
    events = fixture.seeded_events()
    addresses = _Addresses()
    for seeded in fixture.seed():
        addresses.add(seeded)
    cursor.take_events(events)
    latest: CompactionEntry | None = None
    context_after: list[ReaderMessage] | None = None  # the built context after a fold
    poisons: list[str] = []
    emitted: set[str] = set()
    observable = True  # every cycle's read of the prior was observed
    sizes: dict[int, int] = {}
    prior = {"offered": 0, "exactly": 0, "read": 0, "echo": 0}
    fixtures: dict[str, FixtureResult] = {}
    for record in records:
        c = record.cycle
        unit = fixture.cycle_unit(c)
        cursor.take_events(unit.events)
        events += unit.events
        addresses.add(unit)
        if context_after is not None:
            appended = context_after + [reader_message(e) for e in unit.events]
            tally.require("context", c, built_context(entries[:cursor.position]) == appended,
                          "after the append, the built context is not the stored summary, "
                          "the kept events and the new ones")
        injected = cursor.take_compaction(c, injected=True)
        shape = fixture.shape_of(c)
        if shape == "malformed_prior" and injected is None:
            fixtures[shape] = FixtureResult(shape=shape, cycle=c, status="not_run",
                                            detail="no stored summary to malform")
        if injected is not None:
            latest = injected
            poisons.append(injected.poison)
        if latest is not None:
            prior["offered"] += 1
            exact = (record.offered_cycle == latest.cycle
                     and record.offered_sha256 == messages_sha256(latest.messages))
            prior["exactly"] += exact
            tally.require("prior_offered", c, exact, "the offered summary is not the stored one")
        elif record.offered_sha256 is not None:
            tally.require("prior_offered", c, False, "a summary was offered before any was stored")
        if record.prior_read is None:
            observable = False
        else:
            prior["read"] += record.prior_read
        if not tally.require("fold_ok", c, record.messages is not None,
                             f"{record.error_code}: {record.error}"):
            context_after = None
            if shape != "normal":
                fixtures[shape] = FixtureResult(shape=shape, cycle=c, status="failed",
                                                detail=f"the fold failed ({record.error_code})")
            continue
        messages = record.messages or []
        kept = kept_tail(messages, events)
        summary = messages[: len(messages) - kept]
        tally.require("folded", c, bool(summary), "the checkpoint is the newest events verbatim")
        kept_ids = {e.id for e in events[len(events) - kept:]} if kept else set()
        text = visible_text(messages)
        emitted |= _content_checks(tally, c, text, visible_text(summary), kept_ids, events,
                                   addresses)
        problem = closure_problem(messages, events)
        tally.require("closure", c, problem is None, problem or "")
        if shape not in fixtures:  # a fixture is judged on its first cycle
            fixtures[shape] = FixtureResult(
                shape=shape, cycle=c, status="passed" if problem is None else "failed",
                detail=problem)
        echoed = sorted({p for p in _POISON.findall(text) if p in poisons})
        prior["echo"] += bool(echoed)
        tally.require("poison", c, not echoed,
                      f"echoes {echoed[0] if echoed else ''}, the marker of a stored summary")
        size, valid = summary_size(summary)
        tally.require("summary_bytes", c, valid and size is not None and size <= SUMMARY_MAX_BYTES,
                      "not valid UTF-8" if not valid else f"{size} bytes > {SUMMARY_MAX_BYTES}")
        stored = cursor.take_compaction(c, injected=False)
        if not summary:
            tally.require("round_trip", c, stored is None, "a summary was stored for no fold")
            context_after = None
            continue
        if size is not None:
            sizes[c] = size
        first_kept = events[-kept].id if kept else None
        line = raw_lines[cursor.position - 1] if stored is not None else b""
        expected_entry = CompactionEntry(
            id=f"fold-{c:03d}", parent=stored.parent if stored else None, cycle=c,
            messages=with_poison(summary, fixture.poison(c)), first_kept_id=first_kept,
            poison=fixture.poison(c))
        tally.require("round_trip", c, stored is not None and stored == expected_entry
                      and encode_line(stored) == line
                      and hashlib.sha256(line).hexdigest() == record.stored_line_sha256,
                      "the stored summary does not read back exactly as the fold returned it")
        if stored is None:
            context_after = None
            continue
        latest = stored
        poisons.append(stored.poison)
        context_after = built_context(entries[:cursor.position])
        expected_context = [*with_poison(summary, stored.poison), *messages[len(summary):]]
        tally.require("context", c, context_after == expected_context,
                      "the built context is not the stored summary then the kept events")
    if cursor.position != len(entries):
        raise SessionError(Code.CERTIFY_SESSION_INVALID,
                           f"the session has {len(entries) - cursor.position} unexpected entries")
    checks = tally.results()
    size_stats = _size_stats(sizes, cycles)
    fixture_results = [fixtures.get(shape, FixtureResult(shape=shape, cycle=None,
                                                         status="not_run"))
                       for shape in fixture.SHAPES]
    prior_stats = PriorStats(offered=prior["offered"], offered_exactly=prior["exactly"],
                             read_cycles=prior["read"] if observable else None,
                             echo_cycles=prior["echo"],
                             derives_from_source=derives_from_source)
    passed = (all(c.passed for c in checks) and size_stats.passed
              and all(f.status == "passed" for f in fixture_results))
    return EnduranceReport(cycles=cycles, passed=passed, checks=checks, sizes=size_stats,
                           prior=prior_stats, fixtures=fixture_results), emitted


def _size_stats(sizes: dict[int, int], cycles: int) -> SizeStats:
    late = [sizes.get(c) for c in range(cycles - LATE_CYCLES + 1, cycles + 1)]
    values = list(sizes.values())
    stored, top, final = len(sizes), max(values) if values else None, sizes.get(cycles)
    if any(s is None for s in late):
        return SizeStats(stored=stored, max_bytes=top, final_bytes=final,
                         late_range_bytes=None, late_slope_bytes_per_cycle=None,
                         passed=False, detail=f"not every one of the last {LATE_CYCLES} "
                                              "cycles stored a summary")
    spread, slope = late_growth([s for s in late if s is not None])
    ok = spread <= LATE_RANGE_MAX_BYTES and abs(slope) <= LATE_SLOPE_MAX_BYTES
    return SizeStats(stored=stored, max_bytes=top, final_bytes=final, late_range_bytes=spread,
                     late_slope_bytes_per_cycle=round(slope, 3), passed=ok,
                     detail=None if ok else f"range must be <= {LATE_RANGE_MAX_BYTES} B and "
                                            f"|slope| <= {LATE_SLOPE_MAX_BYTES:g} B/cycle")


def check_maximal(out: Path) -> MaximalReport:
    try:
        record = msgspec.json.decode(read_bounded(out / "maximal.json"), type=MaximalRecord)
    except msgspec.DecodeError as exc:
        raise SessionError(Code.CERTIFY_SESSION_INVALID, f"maximal.json: {exc}") from exc
    events = fixture.maximal_events()
    source_bytes = sum(len(e.content.encode()) for e in events)
    bounds = {"source_bytes": source_bytes, "min_bytes": MAXIMAL_MIN_BYTES,
              "max_bytes": SUMMARY_MAX_BYTES}
    if record.messages is None:
        return MaximalReport(**bounds, summary_bytes=None, utf8_valid=None, passed=False,
                             detail=f"the fold failed ({record.error_code})")
    kept = kept_tail(record.messages, events)
    size, valid = summary_size(record.messages[: len(record.messages) - kept])
    passed = valid and size is not None and MAXIMAL_MIN_BYTES <= size <= SUMMARY_MAX_BYTES
    detail = None if passed else ("not valid UTF-8" if not valid else "summary size out of bounds")
    return MaximalReport(**bounds, summary_bytes=size, utf8_valid=valid, passed=passed,
                         detail=detail)
