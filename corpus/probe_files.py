"""Probe files a user writes beside a trace: ``<trace_id>.probes.toml``,
``<trace_id>.probes.jsonl`` or the bundled ``<trace_id>.probes.json`` (a ``ProbeFile``).

TOML holds one ``[[probe]]`` table per probe; JSONL one probe object per line. Both take
the same closed set of keys (``USER_PROBE_FIELDS``): ``Probe``'s fields except
``trace_id`` and ``version`` (the file binds those), plus ``boundary``, the event after
which the trace is folded for the probe (absent: the trace's last event).

This module checks the *syntax* of a file: keys, types, enumerated values, non-empty
strings, unique probe ids. Every problem is collected, none stops the parse; a probe
with a problem is left out of ``ParsedProbes.probes``. Rules that need the trace or the
probe's category (a value for the category, a boundary that names an event, ...) are
``corpus.user_suite``'s. Invariants:

* ``UserProbe.probe.trace_id`` is the trace id the file is named after;
* ``UserProbe.line`` is the JSONL line, the line of the probe's ``[[probe]]`` header in
  TOML, or 1 for a JSON ``ProbeFile`` (one line); ``index`` counts probes from 1;
* every problem has code ``probe_invalid`` (``ParsedProbes.problems``).
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any, Final, get_args

import msgspec

from efold.corpus.codec import load_probes
from efold.corpus.errors import CorpusError
from efold.corpus.model import OPAQUE_ID, Category, Probe, ValueKind

TOML_SUFFIX: Final = ".probes.toml"
JSONL_SUFFIX: Final = ".probes.jsonl"
JSON_SUFFIX: Final = ".probes.json"
PROBE_FILE_SUFFIXES: Final = (TOML_SUFFIX, JSONL_SUFFIX, JSON_SUFFIX)

# Every trace and probe id the corpus hands on is an opaque id (``model.OPAQUE_ID``).
ID_PATTERN: Final = OPAQUE_ID

_STRING_FIELDS: Final = ("id", "category", "question", "secret", "mode", "source_event",
                         "label", "value_kind", "boundary")
_LIST_FIELDS: Final = ("expected", "superseded", "forbidden", "premises", "premise_events")
USER_PROBE_FIELDS: Final = frozenset((*_STRING_FIELDS, *_LIST_FIELDS))
_REQUIRED: Final = ("id", "category", "question")
_CHOICES: Final[dict[str, tuple[str, ...]]] = {
    # ``boundary`` is a case's continuation, never a probe file's (``user_validation``).
    "category": tuple(c.value for c in Category if c is not Category.BOUNDARY),
    "mode": ("recall", "task"),
    "value_kind": get_args(ValueKind),
}
_TOML_PROBE_HEADER: Final = re.compile(r"^\s*\[\[\s*probe\s*\]\]\s*(?:#.*)?$")
_TOML_ERROR_LINE: Final = re.compile(r"\(at line (\d+)")


class UserProbe(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One well-formed probe of a file, with where it was written and its boundary."""

    probe: Probe
    boundary: str | None  # an event id; None: the trace's last event
    line: int
    index: int


class FileProblem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A ``probe_invalid`` problem at ``line`` of the file; ``detail`` names the probe
    (``probe[3].expectd: unknown field``) when there is one."""

    line: int
    detail: str


class ParsedProbes(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    probes: list[UserProbe]
    problems: list[FileProblem]


def probe_file_trace_id(name: str) -> str | None:
    """The trace id a probe-file name binds (``t.probes.toml`` -> ``t``), or None."""
    for suffix in PROBE_FILE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def toml_probe_lines(text: str) -> list[int]:
    """The 1-based line of every ``[[probe]]`` header, in order (tomllib gives none).

    A header-like line inside a multi-line string would count too: a documented
    limitation, which can only shift a reported line."""
    return [n for n, line in enumerate(text.split("\n"), start=1)
            if _TOML_PROBE_HEADER.match(line)]


def _check_value(where: str, key: str, value: object) -> str | None:
    """The problem with ``value`` for ``key``, or None."""
    if key in _LIST_FIELDS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"{where}.{key}: expected a list of strings"
        if any(not v.strip() for v in value):
            return f"{where}.{key}: empty string in the list"
        return None
    if not isinstance(value, str):
        return f"{where}.{key}: expected a string, got {type(value).__name__}"
    if not value.strip():
        return f"{where}.{key}: empty string"
    choices = _CHOICES.get(key)
    if choices is not None and value not in choices:
        return f"{where}.{key}: unknown {key} {value!r} (one of {', '.join(choices)})"
    if key == "id" and ID_PATTERN.fullmatch(value) is None:
        return f"{where}.id: {value!r} is not an id ({ID_PATTERN.pattern})"
    return None


def _probe(trace_id: str, fields: dict[str, Any]) -> Probe:
    """A ``Probe`` of checked fields (``boundary`` left out)."""
    kwargs = {k: v for k, v in fields.items() if k != "boundary"}
    kwargs["category"] = Category(kwargs["category"])
    return Probe(trace_id=trace_id, **kwargs)


def _table(
    trace_id: str, raw: object, index: int, line: int, problems: list[FileProblem]
) -> UserProbe | None:
    """Check one probe table/object; append its problems; the probe when it has none."""
    where = f"probe[{index}]"
    if not isinstance(raw, dict):
        problems.append(FileProblem(line, f"{where}: expected a table of probe fields"))
        return None
    found = [FileProblem(line, f"{where}.{k}: unknown field")
             for k in raw if k not in USER_PROBE_FIELDS]
    found += [FileProblem(line, f"{where}: missing field {k!r}") for k in _REQUIRED if k not in raw]
    found += [FileProblem(line, p) for k, v in raw.items() if k in USER_PROBE_FIELDS
              if (p := _check_value(where, k, v)) is not None]
    problems.extend(found)
    if found:
        return None
    return UserProbe(probe=_probe(trace_id, raw), boundary=raw.get("boundary"),
                     line=line, index=index)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"repeated key {repeated[0]!r}")
    return dict(pairs)


def _parse_jsonl(trace_id: str, text: str, problems: list[FileProblem]) -> list[UserProbe]:
    if text and not text.endswith("\n"):
        problems.append(FileProblem(text.count("\n") + 1, "the last line lacks its newline"))
    probes: list[UserProbe] = []
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            problems.append(FileProblem(number, f"probe[{number}]: blank line"))
            continue
        try:
            raw = json.loads(line, object_pairs_hook=_no_duplicates,
                             parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            problems.append(FileProblem(number, f"probe[{number}]: not JSON: {exc}"))
            continue
        probe = _table(trace_id, raw, number, number, problems)
        if probe is not None:
            probes.append(probe)
    return probes


def _parse_toml(trace_id: str, text: str, problems: list[FileProblem]) -> list[UserProbe]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = _TOML_ERROR_LINE.search(str(exc))
        problems.append(FileProblem(int(at.group(1)) if at else 1, f"not TOML: {exc}"))
        return []
    for key in document:
        if key != "probe":
            problems.append(FileProblem(_key_line(text, key), f"{key}: unknown field"))
    tables = document.get("probe", [])
    if not isinstance(tables, list):
        problems.append(FileProblem(_key_line(text, "probe"), "probe: must be [[probe]] tables"))
        return []
    lines = toml_probe_lines(text)
    probes: list[UserProbe] = []
    for index, raw in enumerate(tables, start=1):
        line = lines[index - 1] if index <= len(lines) else 1
        probe = _table(trace_id, raw, index, line, problems)
        if probe is not None:
            probes.append(probe)
    return probes


def _key_line(text: str, key: str) -> int:
    """The first line that starts with ``key`` (a top-level key or table), else 1."""
    pattern = re.compile(rf"^\s*\[*\s*{re.escape(key)}\b")
    for number, line in enumerate(text.split("\n"), start=1):
        if pattern.match(line):
            return number
    return 1


def _parse_json(trace_id: str, data: bytes, problems: list[FileProblem]) -> list[UserProbe]:
    try:
        probe_file = load_probes(data)
    except CorpusError as exc:
        problems.append(FileProblem(1, exc.detail))
        return []
    if probe_file.trace_id != trace_id:
        problems.append(FileProblem(1, f"trace_id {probe_file.trace_id!r} is not {trace_id!r}"))
        return []
    return [UserProbe(probe=p, boundary=None, line=1, index=n)
            for n, p in enumerate(probe_file.probes, start=1)]


def _duplicate_ids(probes: list[UserProbe], problems: list[FileProblem]) -> list[UserProbe]:
    first: dict[str, UserProbe] = {}
    kept: list[UserProbe] = []
    for entry in probes:
        earlier = first.setdefault(entry.probe.id, entry)
        if earlier is entry:
            kept.append(entry)
        else:
            problems.append(FileProblem(entry.line, f"probe[{entry.index}].id: duplicate id "
                                        f"{entry.probe.id!r} (also probe[{earlier.index}])"))
    return kept


def parse_probe_file(name: str, data: bytes) -> ParsedProbes:
    """Parse the probe file called ``name`` (its suffix picks the format; its stem is
    the trace id), collecting every problem (see the module docstring)."""
    trace_id = probe_file_trace_id(name)
    if trace_id is None:
        return ParsedProbes([], [FileProblem(1, f"{name}: not a probe-file name "
                                             f"({', '.join(PROBE_FILE_SUFFIXES)})")])
    problems: list[FileProblem] = []
    if name.endswith(JSON_SUFFIX):
        probes = _parse_json(trace_id, data, problems)
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return ParsedProbes([], [FileProblem(1, f"not UTF-8: {exc}")])
        parse = _parse_toml if name.endswith(TOML_SUFFIX) else _parse_jsonl
        probes = parse(trace_id, text, problems)
    probes = _duplicate_ids(probes, problems)
    if not probes and not problems:
        problems.append(FileProblem(1, "the file holds no probes"))
    return ParsedProbes(probes=probes, problems=sorted(problems, key=lambda p: p.line))
