"""Availability: can the reader reach a probe's expected value in this checkpoint?

Evaluator side and model-free (docs/architecture.md §7): it reads the probe's expected values, so it
runs in the controller or the evaluator, never in a reader's context. Per probe:

* ``not_applicable``: abstention and redaction probes (nothing to recall);
* ``present`` / ``superseded_present``: a *fact line* for the probe is visible in the
  checkpoint and holds an expected value (and a superseded value is visible too);
* ``recoverable``: not visible, but the reference lookup path reaches the value within
  a fresh meter (below);
* ``absent``: neither.

Fact lines follow ``corpus/FORMS.md``; a visible line is first stripped of a leading
``- `` bullet and of ``[record <id>]`` citations (how the pack and projection show
them). Which lines count, per category:

* tool_identifier, superseded_current: ``<Label>: <value>`` lines and
  ``Correction: the <label> changes from .. to ..`` lines for the probe's label;
  identifiers compare after normalisation (case, separators), other values literally
  (case-insensitive), as the trace writes them in one canonical form;
* commitment_status, artifact_status: ``Status of the <thing>: <TOKEN>`` lines whose
  ``status of the <thing>`` equals the probe's label;
* next_action: ``Next: <task> by <deadline>.`` lines holding every expected keyword;
* active_constraint: ``Rule: never ...`` lines holding the expected topic (recall) or,
  in task mode, every forbidden value across the visible rule lines;
* decision_reason: the ``Decision on the <subject>:`` line holding every expected
  keyword (a visible ``Rejected for the <subject>:`` line with a superseded reason key
  makes it ``superseded_present``);
* priority_order: a ``Priority order:`` line holding every task key;
* contradiction: as superseded_current (the recorded value under its label);
* cross_reference: every premise (a fact line, as written) must be reached: ``present``
  when each is visible, ``recoverable`` when each is visible or recoverable (its
  ``premise_events`` entry is the source of the reference path), ``absent`` otherwise:
  one retained fact is not enough.

The reference lookup path (reference "Frozen sizing policy"): the source record is
looked up in the arm's own sanitized store; if the checkpoint cites it, one
``history_get``, otherwise one ``history_search`` at limit 10 with the evaluator-only
source line as the query; then every ``next_cursor`` page. It succeeds when the source
was found, fully returned within the meter, and its concatenated pages equal the
retained record and hold an expected value. It never scans the store linearly.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from efold.corpus.forms import (
    CORRECTION_LINE,
    DECISION_LINE,
    FACT_LINE,
    NEXT_LINE,
    PRIORITY_LINE,
    REJECTED_LINE,
    RULE_LINE,
    STATUS_LINE,
)
from efold.corpus.model import Availability, Category, Probe
from efold.folds.checkpoint import (
    CITATION_PATTERN,
    HISTORY_GET,
    HISTORY_SEARCH,
    Checkpoint,
    cite,
    visible_text,
)
from efold.folds.lookup import MAX_SEARCH_LIMIT, LookupTool
from efold.folds.meter import Meter
from efold.folds.store import HistoryStore


class AvailabilityResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Content-free availability of one probe in one checkpoint."""

    probe_id: str
    availability: Availability
    path: Literal["visible", "get", "search"] | None  # how it was reached, if it was
    calls: int  # reference-path lookup calls spent (0 unless the path ran)
    bytes: int  # reference-path response bytes delivered


def _clean_line(line: str) -> str:
    line = CITATION_PATTERN.sub("", line).strip()
    return line[2:] if line.startswith("- ") else line


def fact_lines(text: str) -> list[str]:
    """Every line of ``text``, cleaned of bullets and citations."""
    return [_clean_line(line) for line in text.split("\n")]


FormKey = tuple[str, str | None]  # ("label", "dock code"), ("rule", None), ...


@functools.lru_cache(maxsize=1 << 16)
def _form(line: str) -> frozenset[FormKey]:
    """The form keys under which a cleaned line is a fact line, by the forms of
    ``corpus/FORMS.md`` (``_key`` of the probes it answers): read once per line."""
    keys: set[FormKey] = set()
    for pattern in (FACT_LINE, CORRECTION_LINE):  # "<Label>: v", "Correction: the <label>"
        found = pattern.match(line)
        if found is not None:
            keys.add(("label", found.group("label").lower()))
    status = STATUS_LINE.match(line)
    if status is not None:
        keys.add(("status", f"status of the {status.group('thing')}".lower()))
    decided = DECISION_LINE.match(line) or REJECTED_LINE.match(line)
    if decided is not None:
        keys.add(("decision", f"decision on the {decided.group('subject')}"))
    for name, pattern in (("next", NEXT_LINE), ("rule", RULE_LINE), ("priority", PRIORITY_LINE)):
        if pattern.match(line) is not None:
            keys.add((name, None))
    return frozenset(keys)


def _key(probe: Probe) -> FormKey | None:
    """The form key of ``probe``'s fact lines (the module docstring's rules per
    category); None: no line is (a category without fact lines)."""
    label = (probe.label or "").lower()
    category = probe.category
    if category in (Category.TOOL_IDENTIFIER, Category.SUPERSEDED_CURRENT, Category.CONTRADICTION):
        return ("label", label)
    if category in (Category.COMMITMENT_STATUS, Category.ARTIFACT_STATUS):
        return ("status", label)
    if category is Category.DECISION_REASON:
        return ("decision", label)
    if category is Category.NEXT_ACTION:
        return ("next", None)
    if category is Category.ACTIVE_CONSTRAINT:
        return ("rule", None)
    if category is Category.PRIORITY_ORDER:
        return ("priority", None)
    return None


class _Lines:
    """A text's cleaned lines, indexed by form key once: every probe of a checkpoint
    asks which of its lines are its fact lines."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = tuple(lines)
        self._by_key: dict[FormKey, list[str]] = {}
        for line in self.lines:
            for key in _form(line):
                self._by_key.setdefault(key, []).append(line)

    def relevant(self, probe: Probe) -> Sequence[str]:
        """The fact lines for ``probe``, in order (``_relevant`` of each line)."""
        if probe.label is None:
            return self.lines
        key = _key(probe)
        return self._by_key.get(key, []) if key is not None else []


@functools.lru_cache(maxsize=16)
def _visible_lines(text: str) -> _Lines:
    """A checkpoint's visible text, split and indexed once for all its probes."""
    return _Lines(fact_lines(text))


@functools.lru_cache(maxsize=1024)
def _identifier_regex(value: str) -> re.Pattern[str]:
    body = r"[\s\-_./]*".join(re.escape(c) for c in value if c.isalnum())
    return re.compile(rf"(?i)(?<![A-Za-z0-9]){body}(?![A-Za-z0-9])")


def _holds(line: str, value: str, kind: str | None) -> bool:
    if kind == "identifier":
        return _identifier_regex(value).search(line) is not None
    return value.lower() in line.lower()


def _relevant(line: str, probe: Probe) -> bool:
    """Whether ``line`` is a fact line for ``probe`` (see the module docstring). A
    probe without a label (a user's probe on an imported conversation, which follows no
    surface form) finds its value on any visible line."""
    return probe.label is None or _key(probe) in _form(line)


def _sought(probe: Probe) -> list[str]:
    if probe.category is Category.ACTIVE_CONSTRAINT and probe.mode == "task":
        return list(probe.forbidden)
    return list(probe.expected)


def _found(lines: _Lines, probe: Probe, values: Sequence[str]) -> bool:
    """Whether the relevant lines hold the values: all of them in one line for
    next-action keywords, all of them across rule lines for a constraint task, any one
    otherwise."""
    relevant = lines.relevant(probe)
    kind = probe.value_kind
    if not values:
        return False
    if probe.category in (Category.NEXT_ACTION, Category.DECISION_REASON,
                          Category.PRIORITY_ORDER):
        return any(all(_holds(line, v, kind) for v in values) for line in relevant)
    if probe.category is Category.ACTIVE_CONSTRAINT and probe.mode == "task":
        return all(any(_holds(line, v, kind) for line in relevant) for v in values)
    return any(_holds(line, v, kind) for line in relevant for v in values)


def _superseded_found(lines: _Lines, probe: Probe) -> bool:
    relevant = lines.relevant(probe)
    return any(_holds(line, v, probe.value_kind) for line in relevant for v in probe.superseded)


def _source_line(text: str, probe: Probe) -> str | None:
    """The evaluator-only query: the source record's line holding an expected value."""
    sought = _sought(probe)
    for raw, line in zip(text.split("\n"), fact_lines(text), strict=True):
        if _relevant(line, probe) and any(_holds(line, v, probe.value_kind) for v in sought):
            return raw
    return None


def _premise_line(text: str, premise: str) -> str | None:
    """The evaluator-only query for a premise: the record's line holding it."""
    for raw, line in zip(text.split("\n"), fact_lines(text), strict=True):
        if _holds_premise(line, premise):
            return raw
    return None


def _holds_premise(line: str, premise: str) -> bool:
    return " ".join(premise.lower().split()) in " ".join(line.lower().split())


def _premise_visible(lines: Sequence[str], premise: str) -> bool:
    return any(_holds_premise(line, premise) for line in lines)


def _recovered_premise(text: str, premise: str) -> bool:
    return _premise_visible(fact_lines(text), premise)


Query = Callable[[str], str | None]
Holds = Callable[[str], bool]


def _reference_path(
    checkpoint_text: str, source: str | None, store: HistoryStore, query_of: Query,
    holds: Holds, meter: Meter,
) -> tuple[bool, Literal["get", "search"]]:
    """The reference lookup path for one source record (module docstring), on ``meter``."""
    tool = LookupTool(store, meter)
    record = None if source is None else store.record(source)
    path: Literal["get", "search"] = "get"
    if source is None or record is None:
        return False, path
    if cite(source) not in checkpoint_text:
        path = "search"
        query = query_of(record.text)
        if query is None:
            return False, path
        found = msgspec.json.decode(
            tool.call(HISTORY_SEARCH, msgspec.json.encode({"query": query, "limit": MAX_SEARCH_LIMIT}).decode())
        )
        if not isinstance(found, dict) or source not in {hit.get("id") for hit in found.get("results", ())}:
            return False, path
    pages: list[str] = []
    arguments: dict[str, str] = {"id": source}
    while True:
        response = msgspec.json.decode(tool.call(HISTORY_GET, msgspec.json.encode(arguments).decode()))
        if not isinstance(response, dict) or "error" in response:
            return False, path
        pages.append(str(response["text"]))
        cursor = response.get("next_cursor")
        if cursor is None:
            break
        arguments = {"id": source, "cursor": str(cursor)}
    text = "".join(pages)
    return text == record.text and holds(text), path


def _cross_reference(checkpoint: Checkpoint, probe: Probe, store: HistoryStore | None) -> AvailabilityResult:
    """Every premise visible (present), or each visible or recoverable (recoverable)."""
    text = visible_text(checkpoint.messages)
    lines = _visible_lines(text).lines
    missing = [i for i, premise in enumerate(probe.premises) if not _premise_visible(lines, premise)]
    if not missing:
        return AvailabilityResult(probe.id, Availability.PRESENT, "visible", 0, 0)
    if checkpoint.store is None or not checkpoint.tools:
        return AvailabilityResult(probe.id, Availability.ABSENT, None, 0, 0)
    own = store is None
    opened = HistoryStore.build(checkpoint.store) if store is None else store
    meter = Meter()  # one fresh meter for the whole probe: the reader has one
    paths: list[Literal["get", "search"]] = []
    try:
        for i in missing:
            premise = probe.premises[i]
            source = probe.premise_events[i] if i < len(probe.premise_events) else None
            ok, path = _reference_path(
                text, source, opened, functools.partial(_premise_line, premise=premise),
                functools.partial(_recovered_premise, premise=premise), meter)
            if not ok:
                return AvailabilityResult(probe.id, Availability.ABSENT, None, meter.calls, meter.bytes)
            paths.append(path)
    finally:
        if own:
            opened.close()
    path = "search" if "search" in paths else "get"
    return AvailabilityResult(probe.id, Availability.RECOVERABLE, path, meter.calls, meter.bytes)


def probe_availability(
    checkpoint: Checkpoint, probe: Probe, *, store: HistoryStore | None = None
) -> AvailabilityResult:
    """Availability of one probe. ``store`` is the checkpoint's store, opened (pass it
    to analyse many probes without rebuilding the index); built here when omitted."""
    if probe.category is Category.CROSS_REFERENCE and probe.premises:
        return _cross_reference(checkpoint, probe, store)
    if probe.category in (Category.ABSTENTION, Category.REDACTION) or not _sought(probe):
        return AvailabilityResult(probe.id, Availability.NOT_APPLICABLE, None, 0, 0)
    text = visible_text(checkpoint.messages)
    lines = _visible_lines(text)
    if _found(lines, probe, _sought(probe)):
        # A priority order's superseded keys are its own tasks reordered: never "also visible".
        stale = probe.category is not Category.PRIORITY_ORDER and _superseded_found(lines, probe)
        state = Availability.SUPERSEDED_PRESENT if stale else Availability.PRESENT
        return AvailabilityResult(probe.id, state, "visible", 0, 0)
    if checkpoint.store is None or not checkpoint.tools:
        return AvailabilityResult(probe.id, Availability.ABSENT, None, 0, 0)
    own = store is None
    opened = HistoryStore.build(checkpoint.store) if store is None else store
    meter = Meter()
    try:
        ok, path = _reference_path(
            text, probe.source_event, opened, lambda record: _source_line(record, probe),
            lambda found: _found(_Lines(fact_lines(found)), probe, _sought(probe)), meter)
    finally:
        if own:
            opened.close()
    state = Availability.RECOVERABLE if ok else Availability.ABSENT
    return AvailabilityResult(probe.id, state, path if ok else None, meter.calls, meter.bytes)


def checkpoint_availability(checkpoint: Checkpoint, probes: Sequence[Probe]) -> list[AvailabilityResult]:
    """Availability of every probe, opening the checkpoint's store once."""
    store = None if checkpoint.store is None else HistoryStore.build(checkpoint.store)
    try:
        return [probe_availability(checkpoint, p, store=store) for p in probes]
    finally:
        if store is not None:
            store.close()
