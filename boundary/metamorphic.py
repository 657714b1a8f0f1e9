"""Metamorphic variants of a boundary case, and the check that its behaviour survives them
(docs/boundary.md §7.1; the protocol's "metamorphic variants").

A variant rewrites a case's pre-fold events (``Case.prefix``) in a way that must not
matter: the faux agent on the full history must still pass every oracle, and with the
critical events deleted it must still fail. Five kinds, one pure function each, every
choice drawn from a SplitMix64 stream seeded by the case id and the kind, so a case
always gets the same variants:

* ``extra-logs``: three to five irrelevant tool rounds (a read of a log file that has
  nothing to do with the task: disk usage, formatter, cache, backup, dependency audit),
  each a complete call and result, inserted between turns;
* ``rewording``: every owner or assistant message a paraphrase rule matches is said
  differently (fixed frames such as "X is unchanged since this morning", else
  contractions);
* ``duplicated-explanation``: the assistant explanation of most words (five or more)
  and one of the next three, each repeated verbatim at a later turn boundary;
* ``reordered-results``: the results of each assistant turn that made several tool calls
  at once are permuted (only within that block: a result still follows its call);
* ``larger-payloads``: up to three command outputs grow by 3-6 KB of unrelated runner
  diagnostics appended after their original text.

Rules every variant keeps (``variant_problems`` checks them, and ``check_variants``
refuses a variant that breaks one):

* a critical event (``source.critical``) is never altered, dropped or moved out of
  place, and neither is a *protected* event: one whose text (content, tool names,
  arguments, folded as the faux agent folds) holds a protected text, i.e. a faux plan's
  ``when``, the faux ``recall`` query, the required recall answer, or any oracle target
  (a path, an expected file, a text, a key or value, a tool, a test command as one
  line). Inserted or rewritten text holds no protected text either;
* every original event stays, in its order, except results permuted inside one
  multi-call block; inserted events get ids (and call ids) no event of the case's whole
  session has;
* an inserted run of events is complete (every call answered inside it, every result
  answering a call of it) and sits between turns: after the last event of a turn with
  no call pending, before an owner message that is no steer; inserted events take the
  session and day of the event before them;
* the variant passes the trace validation its original passes: the corpus schema rules
  (``corpus.validation``: message shapes, ids, one call per assistant event, call and
  result linkage, sessions counting up by one, days never back) for an efold-trace
  session, the imported-shape rules (``corpus.user_validation.trace_problems``) for an
  imported one; a variant never breaks a rule its original keeps.

A kind that cannot apply (no multi-call turn to reorder, no message a rule rewords, ...)
is a ``Variant`` with ``applicable`` False and the reason in ``note``, never a fake.

Checking a variant against these rules, and its behaviour on the arms, is
``boundary.variant_checks``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from efold.boundary.case import Case
from efold.boundary.faux_agent import _fold as fold_text
from efold.corpus.forms import TOOL_SOURCES
from efold.corpus.imports import SUITE as IMPORTED_SUITE
from efold.corpus.model import (
    Event,
    FunctionCall,
    ToolCall,
    ToolSource,
)
from efold.corpus.prng import SeededRandom

Kind = Literal["extra-logs", "rewording", "duplicated-explanation", "reordered-results",
               "larger-payloads"]
KINDS: Final[tuple[Kind, ...]] = ("extra-logs", "rewording", "duplicated-explanation",
                                  "reordered-results", "larger-payloads")
INSERTED_TOOL: Final = "workspace_read"  # the tool of an inserted irrelevant round
MIN_EXPLANATION_WORDS: Final = 5

# Oracle fields that are no text of the session: an action family ("test", "read") and
# the sessions a recall may return.
_NOT_TEXT: Final = frozenset({"family", "sessions"})


@dataclass(frozen=True)
class Variant:
    """One variant of a case. ``events`` replaces ``Case.prefix`` (empty when not
    ``applicable``); ``note`` says what changed, or why the kind does not apply;
    ``inserted`` and ``altered`` are the ids of new events and of original events whose
    bytes changed (a permuted result keeps its bytes and is in neither)."""

    name: str
    kind: Kind
    events: tuple[Event, ...]
    note: str
    applicable: bool = True
    inserted: tuple[str, ...] = ()
    altered: tuple[str, ...] = ()


Transform = Callable[[Case], Variant]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _not_applicable(kind: Kind, reason: str) -> Variant:
    return Variant(name=kind, kind=kind, events=(), note=reason, applicable=False)


# -- what a variant must leave alone --------------------------------------------------


def protected_texts(case: Case) -> tuple[str, ...]:
    """The folded texts no variant may alter or add: the faux plans' ``when`` texts, the
    faux recall query, the required recall answer and every oracle target (a command
    as one space-joined line)."""
    sidecar = case.sidecar
    found: list[str] = []
    if sidecar.faux is not None:
        found += [plan.when for plan in sidecar.faux.plans if plan.when]
        if sidecar.faux.recall:
            found.append(sidecar.faux.recall)
    if sidecar.recall.answer:
        found.append(sidecar.recall.answer)
    for oracle in sidecar.oracle.success:
        for name, value in msgspec.structs.asdict(oracle).items():
            if name in _NOT_TEXT:
                continue
            if isinstance(value, str):
                found.append(value)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                found.append(" ".join(value))
    return tuple(sorted({folded for text in found if (folded := fold_text(text))}))


def _leaves(value: object) -> Iterator[str]:
    """Every string in a decoded JSON value; a list of strings also as one line."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            yield " ".join(value)
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)


def surface(event: Event) -> str:
    """Everything of ``event`` a reader may see, folded: its content, and each call's
    tool name, arguments text and argument strings (a command list as one line)."""
    parts = [event.content]
    for call in event.tool_calls or ():
        parts += [call.function.name, call.function.arguments]
        try:
            parts += list(_leaves(json.loads(call.function.arguments)))
        except ValueError:
            pass
    return fold_text("\n".join(parts))


def holds_protected(text: str, protected: Sequence[str]) -> bool:
    return any(p in text for p in protected)


def frozen_events(case: Case) -> set[str]:
    """The ids of the events no variant may alter: critical and protected ones."""
    protected = protected_texts(case)
    return set(case.sidecar.source.critical) | {
        e.id for e in case.prefix if holds_protected(surface(e), protected)}


# -- structure: turns, pending calls, multi-call blocks ---------------------------------


def _pending_before(events: Sequence[Event]) -> list[int]:
    """For each index i, how many calls are unanswered before ``events[i]``; one more
    entry at the end: how many are unanswered after the last event."""
    pending: set[str] = set()
    counts: list[int] = []
    for event in events:
        counts.append(len(pending))
        if event.role == "tool" and event.tool_call_id is not None:
            pending.discard(event.tool_call_id)
        for call in event.tool_calls or ():
            pending.add(call.id)
    return [*counts, len(pending)]


def pending_after(events: Sequence[Event]) -> int:
    return _pending_before(events)[-1]


def turn_boundaries(events: Sequence[Event]) -> list[int]:
    """The indices ``i`` (1 <= i < len) where events may be inserted before
    ``events[i]``: no call is pending and ``events[i]`` is an owner message, no steer."""
    pending = _pending_before(events)
    return [i for i in range(1, len(events))
            if pending[i] == 0 and events[i].role == "user" and not events[i].steer]


def result_blocks(events: Sequence[Event]) -> list[tuple[int, int]]:
    """(start, end) of each block of results right after an assistant event with two or
    more calls: exactly one result per call, contiguous, nothing between."""
    blocks: list[tuple[int, int]] = []
    for i, event in enumerate(events):
        calls = event.tool_calls or []
        if len(calls) < 2:
            continue
        ids = {c.id for c in calls}
        end = i + 1 + len(calls)
        block = events[i + 1:end]
        if len(block) == len(calls) and all(
                e.role == "tool" and not e.steer for e in block) and {
                e.tool_call_id for e in block} == ids:
            blocks.append((i + 1, end))
    return blocks


class _Fresh:
    """Ids no event or call of the case's whole session has (the events after the
    boundary included), handed out in order: ``e`` + the next number past the highest
    numeric event id, and ``call_mNNNN``."""

    def __init__(self, case: Case) -> None:
        events = case.trace.events
        self._ids = {e.id for e in events}
        self._calls = {c.id for e in events for c in e.tool_calls or ()} | {
            e.tool_call_id for e in events if e.tool_call_id}
        numbers = [int(e.id[1:]) for e in events if re.fullmatch(r"e[0-9]+", e.id)]
        self._next_event = max(numbers, default=len(events)) + 1
        self._next_call = 1

    def event_id(self) -> str:
        while (candidate := f"e{self._next_event:04d}") in self._ids:
            self._next_event += 1
        self._ids.add(candidate)
        return candidate

    def call_id(self) -> str:
        while (candidate := f"call_m{self._next_call:04d}") in self._calls:
            self._next_call += 1
        self._calls.add(candidate)
        return candidate


def _rng(case: Case, kind: str) -> SeededRandom:
    digest = hashlib.sha256(f"efold-metamorphic:{case.id}:{kind}".encode()).digest()
    return SeededRandom(int.from_bytes(digest[:8], "big"))


def _insert(events: Sequence[Event], at: dict[int, list[Event]]) -> tuple[Event, ...]:
    """``events`` with ``at[i]`` inserted before ``events[i]``."""
    out: list[Event] = []
    for i, event in enumerate(events):
        out += at.get(i, [])
        out.append(event)
    return tuple(out)


def _tool_source(case: Case, name: str) -> ToolSource | None:
    """The ``source`` an inserted result carries: the form's for an efold trace, none for
    an imported one (as the importer writes them)."""
    return None if case.trace.header.suite == IMPORTED_SUITE else TOOL_SOURCES[name]


# -- irrelevant text --------------------------------------------------------------------

_PACKAGES: Final = ("colorama", "idna", "packaging", "pluggy", "iniconfig", "tomli",
                    "certifi", "urllib3", "charset-normalizer", "six")
_LOGS: Final = ("logs/disk-usage.txt", "logs/formatter.log", "logs/ci-cache.log",
                "logs/backup.log", "logs/dependency-audit.txt")


def _log_line(rng: SeededRandom, path: str, n: int) -> str:
    if path.endswith("disk-usage.txt"):
        return (f"{rng.between(3, 900)}M\t/var/cache/"
                f"{rng.choice(('pip', 'apt', 'fonts', 'man', 'ldconfig'))}-{n}")
    if path.endswith("formatter.log"):
        return (f"formatter pass {n}: {rng.between(5, 40)} files left unchanged, "
                f"0 reformatted ({rng.between(40, 400)} ms)")
    if path.endswith("ci-cache.log"):
        return (f"restored cache key deps-{rng.next_u64():016x}: "
                f"{rng.between(100, 5000)} entries, {rng.between(1, 900)} KB")
    if path.endswith("backup.log"):
        return (f"nightly backup {n}: {rng.between(1000, 90000)} objects copied to the "
                "archive bucket, 0 errors")
    return (f"{rng.choice(_PACKAGES)} {rng.between(1, 9)}.{rng.between(0, 30)}."
            f"{rng.between(0, 9)}: no known advisories")


def _irrelevant_log(rng: SeededRandom, path: str) -> str:
    return "\n".join(_log_line(rng, path, n) for n in range(1, rng.between(4, 9) + 1)) + "\n"


def _diagnostics(rng: SeededRandom, size: int) -> str:
    """About ``size`` bytes of runner diagnostics that say nothing about the work."""
    lines = ["-- runner diagnostics (unrelated to this change) --"]
    while sum(len(line) + 1 for line in lines) < size:
        lines.append(f"worker gw{rng.between(0, 7)}: heartbeat {rng.between(5, 900)} ms, "
                     f"rss {rng.between(30, 400)} MB, open files {rng.between(8, 64)}, "
                     f"gc gen2 {rng.between(0, 30)}")
    return "\n".join(lines) + "\n"


# -- the five transforms ----------------------------------------------------------------


def extra_logs(case: Case) -> Variant:
    """Insert three to five irrelevant tool rounds (a read of an unrelated log file) at
    distinct turn boundaries."""
    kind: Kind = "extra-logs"
    events = case.prefix
    points = turn_boundaries(events)
    if not points:
        return _not_applicable(kind, "no turn boundary to insert a tool round at")
    rng, fresh, protected = _rng(case, kind), _Fresh(case), protected_texts(case)
    chosen = sorted(rng.sample(points, min(len(points), rng.between(3, 5))))
    at: dict[int, list[Event]] = {}
    inserted: list[str] = []
    for index in chosen:
        path = rng.choice(_LOGS)
        arguments = json.dumps({"path": path}, sort_keys=True)
        output = _irrelevant_log(rng, path)
        if holds_protected(fold_text(f"{INSERTED_TOOL}\n{arguments}\n{path}\n{output}"), protected):
            continue
        before = events[index - 1]
        call_id = fresh.call_id()
        call = Event(id=fresh.event_id(), session=before.session, day=before.day,
                     role="assistant", content="", tool_calls=[ToolCall(
                         id=call_id, function=FunctionCall(name=INSERTED_TOOL,
                                                           arguments=arguments))])
        result = Event(id=fresh.event_id(), session=before.session, day=before.day,
                       role="tool", content=output, tool_call_id=call_id, name=INSERTED_TOOL,
                       source=_tool_source(case, INSERTED_TOOL))
        at[index] = [call, result]
        inserted += [call.id, result.id]
    if not at:
        return _not_applicable(kind, "every irrelevant round would hold a protected text")
    return Variant(name=kind, kind=kind, events=_insert(events, at), inserted=tuple(inserted),
                   note=f"{_count(len(at), 'irrelevant tool round')} inserted between turns")


# Paraphrases of whole messages (a full match); ``\1`` keeps the captured part.
_FRAMES: Final[tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]] = tuple(
    (re.compile(pattern), alternatives) for pattern, alternatives in (
        (r"All green \(run (\d+) of the day\)\.",
         (r"Everything passed (run \1 of the day).", r"The suite is green: run \1 today.")),
        (r"(\S+) is unchanged since this morning\.",
         (r"No change to \1 since this morning.", r"\1 has not changed since this morning.")),
        (r"Let's make sure everything is still green\.",
         ("Let's check that everything still passes.", "Make sure the suite still passes.")),
        (r"Re-run the tests\.", ("Run the tests again.", "Another test run, please.")),
        (r"Quick test run, please\.",
         ("Please run the tests quickly.", "A quick run of the tests, please.")),
        (r"Run the suite once more\.",
         ("Once more, run the suite.", "Please run the whole suite again.")),
        (r"Open (\S+) for a moment\.", (r"Open \1 briefly.", r"Could you open \1 for a second?")),
        (r"What does (\S+) look like right now\?",
         (r"Show me the current \1.", r"How does \1 look at the moment?")),
        (r"Let's look at (\S+) again\.",
         (r"Let's have another look at \1.", r"Look at \1 once more.")),
        (r"Show me (\S+), I want to check something\.",
         (r"I want to check something: show me \1.", r"Please show me \1; I need to check it.")),
        (r"Ready\.", ("Ready when you are.",)),
        (r"Green\.", ("All passing.",)),
        (r"Green again\.", ("Passing again.",)),
        (r"Still green\.", ("Still passing.",)),
        (r"Noted\.", ("Got it.",)),
        (r"OK\.", ("Okay.",)),
        (r"Will do\.", ("I will do that.",)),
    ))
# Otherwise, contractions one way or the other, all in one pass (word-bounded, exact case).
_CONTRACTIONS: Final = {"I will": "I'll", "I'll": "I will", "do not": "don't",
                        "don't": "do not", "It is": "It's", "it is": "it's",
                        "is not": "isn't", "cannot": "can't", "Let's": "Let us",
                        "That is": "That's", "we will": "we'll"}
_CONTRACTION: Final = re.compile(
    r"(?<![\w'])(" + "|".join(map(re.escape, sorted(_CONTRACTIONS, key=len, reverse=True)))
    + r")(?![\w'])")


def reword(text: str, rng: SeededRandom) -> str:
    """``text`` said differently: the first frame that matches it whole, else every
    contraction swapped; ``text`` itself when no rule applies."""
    stripped = text.strip()
    for pattern, alternatives in _FRAMES:
        match = pattern.fullmatch(stripped)
        if match is not None:
            return match.expand(rng.choice(alternatives))
    return _CONTRACTION.sub(lambda m: _CONTRACTIONS[m.group(1)], text)


def _prose(event: Event) -> bool:
    """An owner message (no steer) or an assistant reply without calls."""
    return (event.role == "user" and not event.steer) or (
        event.role == "assistant" and not event.tool_calls and bool(event.content))


def rewording(case: Case) -> Variant:
    """Say every owner and assistant message a paraphrase rule matches differently,
    except critical and protected ones."""
    kind: Kind = "rewording"
    rng, frozen, protected = _rng(case, kind), frozen_events(case), protected_texts(case)
    out: list[Event] = []
    altered: list[str] = []
    for event in case.prefix:
        if _prose(event) and event.id not in frozen:
            new = reword(event.content, rng)
            if new.strip() and new != event.content and not holds_protected(fold_text(new), protected):
                event = msgspec.structs.replace(event, content=new)
                altered.append(event.id)
        out.append(event)
    if not altered:
        return _not_applicable(kind, "no owner or assistant message outside the protected "
                                     "ones matches a paraphrase rule")
    return Variant(name=kind, kind=kind, events=tuple(out), altered=tuple(altered),
                   note=f"{_count(len(altered), 'message')} reworded")


def duplicated_explanation(case: Case) -> Variant:
    """Repeat two assistant explanations (five words or more, not critical, not
    protected, distinct texts: the one of most words and one of the next three)
    verbatim, each at a later turn boundary."""
    kind: Kind = "duplicated-explanation"
    events = case.prefix
    rng, fresh, frozen = _rng(case, kind), _Fresh(case), frozen_events(case)
    points = turn_boundaries(events)
    candidates = [
        i for i, e in enumerate(events)
        if e.role == "assistant" and not e.tool_calls and e.id not in frozen
        and len(e.content.split()) >= MIN_EXPLANATION_WORDS and any(p > i for p in points)]
    if not candidates:
        return _not_applicable(kind, "no assistant explanation outside the protected ones "
                                     "with a turn boundary after it")
    distinct: dict[str, int] = {}  # content -> its first event, most words first
    for i in sorted(candidates, key=lambda i: (-len(events[i].content.split()), i)):
        distinct.setdefault(events[i].content, i)
    ranked = list(distinct.values())
    chosen = ranked[:1] + rng.sample(ranked[1:4], min(len(ranked) - 1, 1))
    at: dict[int, list[Event]] = {}
    inserted: list[str] = []
    for i in sorted(chosen):
        later = [p for p in points if p > i]
        index = rng.choice(later)
        before = events[index - 1]
        copy = Event(id=fresh.event_id(), session=before.session, day=before.day,
                     role="assistant", content=events[i].content)
        at.setdefault(index, []).append(copy)
        inserted.append(copy.id)
    return Variant(name=kind, kind=kind, events=_insert(events, at), inserted=tuple(inserted),
                   note=f"{_count(len(inserted), 'explanation')} repeated at a later "
                        "turn boundary")


def reordered_results(case: Case) -> Variant:
    """Permute the results of every assistant turn that made several calls at once
    (never a block holding a critical or protected event)."""
    kind: Kind = "reordered-results"
    events = list(case.prefix)
    rng, frozen = _rng(case, kind), frozen_events(case)
    blocks = [(s, e) for s, e in result_blocks(events)
              if not any(ev.id in frozen for ev in events[s - 1:e])]
    if not blocks:
        return _not_applicable(kind, "no assistant turn with several tool calls (outside "
                                     "the protected ones) whose results could be reordered")
    for start, end in blocks:
        block = events[start:end]
        order = rng.shuffled(range(len(block)))
        if order == sorted(order):
            order = order[1:] + order[:1]
        events[start:end] = [block[k] for k in order]
    return Variant(name=kind, kind=kind, events=tuple(events),
                   note=f"the results of {_count(len(blocks), 'multi-call turn')} reordered")


def _command_call(event: Event) -> bool:
    """A call whose arguments name a command (its result is that command's output)."""
    for call in event.tool_calls or ():
        try:
            arguments = json.loads(call.function.arguments)
        except ValueError:
            continue
        if isinstance(arguments, dict) and ({"command", "cmd"} & arguments.keys()):
            return True
    return False


def larger_payloads(case: Case) -> Variant:
    """Append 3-6 KB of unrelated runner diagnostics to up to three command outputs
    (the result neither critical nor protected, its call not critical; the call itself
    is never changed)."""
    kind: Kind = "larger-payloads"
    events = list(case.prefix)
    rng, frozen = _rng(case, kind), frozen_events(case)
    calls = {c.id: e for e in events for c in e.tool_calls or ()}
    critical = set(case.sidecar.source.critical)
    candidates = [
        i for i, e in enumerate(events)
        if e.role == "tool" and e.id not in frozen and e.tool_call_id in calls
        and calls[e.tool_call_id].id not in critical and _command_call(calls[e.tool_call_id])]
    if not candidates:
        return _not_applicable(kind, "no command output outside the protected ones")
    altered: list[str] = []
    for i in sorted(rng.sample(candidates, min(len(candidates), 3))):
        event = events[i]
        tail = _diagnostics(rng, rng.between(3000, 6000))
        joiner = "" if event.content.endswith("\n") or not event.content else "\n"
        events[i] = msgspec.structs.replace(event, content=event.content + joiner + tail)
        altered.append(event.id)
    grown = sum(len(events[i].content) - len(case.prefix[i].content)
                for i in range(len(events)) if events[i].id in altered)
    return Variant(name=kind, kind=kind, events=tuple(events), altered=tuple(altered),
                   note=f"{_count(len(altered), 'command output')} grown by {grown:,} "
                        "characters")


TRANSFORMS: Final[tuple[Transform, ...]] = (extra_logs, rewording, duplicated_explanation,
                                            reordered_results, larger_payloads)


def variants(case: Case, transforms: Sequence[Transform] = TRANSFORMS) -> list[Variant]:
    """One variant per transform, in order (a kind that cannot apply says so)."""
    return [transform(case) for transform in transforms]
