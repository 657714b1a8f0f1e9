"""The generated sessions certification folds: deterministic, no randomness, no model.

**Endurance.** A seed history (``SEED_UNITS`` work units after an opening owner turn
that states the goal, the constraint and a pinned rare Unicode fact), then one more work
unit per cycle. A work unit is an owner turn naming one of ``FILES``, an assistant
``read_file`` call, its result (about 2.5 KB) and a short reply. Errors are raised and
resolved in the results themselves: ``ERROR E0000`` (in the seed) is never resolved;
unit ``u`` with ``u % 4 == 1`` raises ``ERROR E<u>``, resolved (``RESOLVED E<u>``) by
unit ``u + 2``. So at any point a few errors are open and every file has a latest
result: what a fold must keep addressable (``checks``).

**Closure fixtures.** Six cycles give their unit another shape (``SHAPE_AT``):
``compact_all`` (an owner turn and a reply, nothing in flight: a fold may keep
nothing), ``split_turn`` (three tool rounds and no reply yet: the cycle folds inside a
turn), ``parallel`` (two calls in one message, results delayed and in reverse order),
``reverse_order`` (a result recorded before its call), ``malformed_prior`` (a normal
unit, but the compaction offered to the fold was stored with its first kept entry on a
tool result) and ``normal``.

**Maximal source.** About 330 KiB of multibyte goals, instructions, paths, errors and
turns (``maximal_events``): folded once, it must yield a summary between 24 and 32 KiB.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from efold.corpus.model import Event, FunctionCall, ToolCall, ToolSource

GOAL: Final = "Goal: move the Kestrel billing ledger to schema v2 with zero downtime."
CONSTRAINT: Final = "Constraint: never rewrite or delete a row of audit_log."
RARE_FACT: Final = "Pinned fact: the escrow phrase is «ꙮ𝔉ǅ-Ⅻ-ſtraße»."
MARKERS: Final[dict[str, str]] = {"goal": GOAL, "constraint": CONSTRAINT, "rare_fact": RARE_FACT}

FILES: Final = tuple(f"src/ledger/{name}.py" for name in (
    "schema", "migrate", "audit", "writer", "reader", "backfill", "cutover", "verify",
    "locks", "batches", "metrics", "rollback",
))
SEED_UNITS: Final = 40
PERSISTENT_ERROR: Final = "E0000"
CYCLES: Final = 100

Shape = Literal["normal", "compact_all", "split_turn", "parallel", "reverse_order",
                "malformed_prior"]
SHAPES: Final[tuple[Shape, ...]] = ("normal", "compact_all", "split_turn", "parallel",
                                     "reverse_order", "malformed_prior")
# The cycle at which each closure fixture runs (every other cycle is ``normal``).
SHAPE_AT: Final[dict[int, Shape]] = {
    12: "compact_all", 27: "split_turn", 41: "parallel", 56: "reverse_order",
    70: "malformed_prior",
}


def shape_of(cycle: int) -> Shape:
    return SHAPE_AT.get(cycle, "normal")


def error_code(unit: int) -> str:
    return f"E{unit:04d}"


@dataclass(frozen=True)
class Unit:
    """One work unit's events and what it does to the addresses a fold must keep."""

    events: list[Event]
    file: str | None  # the file whose latest result this unit holds
    result_id: str | None  # that result's id
    raised: str | None  # the error code it raises
    resolved: str | None  # the error code it resolves


def _owner(eid: str, text: str, session: int = 1, day: int = 1) -> Event:
    return Event(id=eid, session=session, day=day, role="user", content=text)


def _reply(eid: str, text: str, session: int = 1, day: int = 1) -> Event:
    return Event(id=eid, session=session, day=day, role="assistant", content=text)


def _call(eid: str, call_id: str, path: str, session: int = 1, day: int = 1) -> Event:
    arguments = json.dumps({"path": path}, ensure_ascii=False)
    return Event(id=eid, session=session, day=day, role="assistant", content="",
                 tool_calls=[ToolCall(id=call_id, function=FunctionCall("read_file", arguments))])


def _result(eid: str, call_id: str, text: str, session: int = 1, day: int = 1) -> Event:
    return Event(id=eid, session=session, day=day, role="tool", content=text,
                 tool_call_id=call_id, name="read_file", source=ToolSource.DOCUMENT)


def _file_text(unit: int, path: str, raised: str | None, resolved: str | None) -> str:
    lines = [f"{path} (revision {unit})"]
    for row in range(40):
        if row == 17 and raised is not None:
            lines.append(f"ERROR {raised}: batch {unit * 7 % 301} failed its checksum in {path}")
        elif row == 23 and resolved is not None:
            lines.append(f"RESOLVED {resolved}")
        else:
            lines.append(f"{row:03d}    ledger_row_{(unit * 41 + row) % 997:03d} = apply(batch={row}, unit={unit})")
    return "\n".join(lines)


def opening() -> list[Event]:
    """The first owner turn (goal, constraint, rare fact) and the assistant's reply."""
    return [
        _owner("u0000-owner", f"{GOAL}\n{CONSTRAINT}\n{RARE_FACT}\nWork file by file; "
               "report every error you find."),
        _reply("u0000-reply", "Understood: schema v2, zero downtime, audit_log untouched."),
    ]


def unit(number: int, shape: Shape = "normal") -> Unit:
    """Work unit ``number`` (1-based across seed and cycles) in ``shape``."""
    prefix = f"u{number:04d}"
    path = FILES[number % len(FILES)]
    raised = error_code(number) if number % 4 == 1 else None
    if number == 1:
        raised = PERSISTENT_ERROR
    resolved = error_code(number - 2) if number % 4 == 3 and number > 3 else None
    text = _file_text(number, path, raised, resolved)
    ask = _owner(f"{prefix}-owner", f"Unit {number}: continue with {path} and report what you find.")
    done = _reply(f"{prefix}-reply", f"Read {path} (revision {number}).")
    call = _call(f"{prefix}-call", f"call-{number}", path)
    result = _result(f"{prefix}-result", f"call-{number}", text)
    if shape == "compact_all":
        return Unit([ask, _reply(f"{prefix}-reply", "Nothing to read this time.")], None, None,
                    None, None)
    if shape == "split_turn":
        events = [ask]
        for step, extra in enumerate(("a", "b"), start=1):
            other = FILES[(number + step) % len(FILES)]
            events += [_call(f"{prefix}-call{extra}", f"call-{number}{extra}", other),
                       _result(f"{prefix}-result{extra}", f"call-{number}{extra}",
                               _file_text(number, other, None, None))]
        return Unit([*events, call, result], path, result.id, raised, resolved)
    if shape == "parallel":
        other = FILES[(number + 1) % len(FILES)]
        both = Event(id=f"{prefix}-call", session=1, day=1, role="assistant", content="",
                     tool_calls=[*(call.tool_calls or ()), ToolCall(
                         id=f"call-{number}b", function=FunctionCall(
                             "read_file", json.dumps({"path": other})))])
        late = _result(f"{prefix}-resultb", f"call-{number}b", _file_text(number, other, None, None))
        return Unit([ask, both, late, result, done], path, result.id, raised, resolved)
    if shape == "reverse_order":
        return Unit([ask, result, call, done], path, result.id, raised, resolved)
    return Unit([ask, call, result, done], path, result.id, raised, resolved)


def seed() -> Iterator[Unit]:
    """The seed history, unit by unit (the opening is ``opening()``)."""
    for number in range(1, SEED_UNITS + 1):
        yield unit(number)


def cycle_unit(cycle: int) -> Unit:
    return unit(SEED_UNITS + cycle, shape_of(cycle))


def seeded_events() -> list[Event]:
    """The session before cycle 1: the opening and the seed units."""
    events = opening()
    for seeded in seed():
        events += seeded.events
    return events


def endurance_events(cycles: int = CYCLES) -> list[Event]:
    """The whole source after ``cycles`` cycles."""
    events = seeded_events()
    for cycle in range(1, cycles + 1):
        events += cycle_unit(cycle).events
    return events


def poison(cycle: int, tag: str = "") -> str:
    """The cycle-unique marker appended to the summary stored at ``cycle``."""
    return f"PRIOR_SUMMARY_POISON_991_{cycle:03d}{tag}"


# --- the maximal source -------------------------------------------------------------

MAXIMAL_TARGET_BYTES: Final = 330 * 1024
_MAXIMAL_GOAL: Final = ("目標: 請求台帳をスキーマ v2 へ移行する — ダウンタイムなし; "
                        "制約: audit_log の行は決して書き換えない; 固定事実: «ꙮ𝔉ǅ-Ⅻ»")


def maximal_events() -> list[Event]:
    """About ``MAXIMAL_TARGET_BYTES`` of multibyte session (UTF-8 bytes of content)."""
    events = [_owner("m0000-owner", _MAXIMAL_GOAL)]
    size = len(_MAXIMAL_GOAL.encode())
    number = 0
    while size < MAXIMAL_TARGET_BYTES:
        number += 1
        path = f"src/台帳/ꙮ_{number % 23:02d}_モジュール.py"
        ask = f"作業 {number}: {path} を確認し、見つけたエラーを報告してください。"
        rows = [f"{path} (版 {number})"]
        rows += [f"{row:03d} 行_{(number * 13 + row) % 997:03d} = 適用(束={row}) ✓ — ǅ𝔉"
                 for row in range(24)]
        rows.insert(9, f"エラー X{number:04d}: 束 {number % 89} のチェックサム不一致 — {path}")
        text = "\n".join(rows)
        reply = f"{path} を読みました (版 {number}); エラー X{number:04d} を記録。"
        prefix = f"m{number:04d}"
        events += [_owner(f"{prefix}-owner", ask), _call(f"{prefix}-call", f"mcall-{number}", path),
                   _result(f"{prefix}-result", f"mcall-{number}", text),
                   _reply(f"{prefix}-reply", reply)]
        size += sum(len(t.encode()) for t in (ask, path, text, reply))
    return events
