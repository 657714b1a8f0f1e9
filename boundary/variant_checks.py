"""Whether a metamorphic variant keeps its case's rules and its critical behaviour.

``variant_problems`` checks a variant (``boundary.metamorphic``) against the rules every
variant keeps: critical and protected events untouched, every other original event in
order (results permuted only inside one multi-call block), inserted runs complete and
between turns with fresh ids, and the trace validation the original passes
(``trace_verdict``). ``check_variants`` then runs each applicable variant on the native
arm (it must pass) and minus its critical events (it must fail), and reports per arm
of a stability table whether the arm's pass/fail on the variant equals its pass/fail
on the original events: informational, never a refusal. ``require_stable`` refuses a
case whose variant broke a rule or changed the native verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from efold.boundary.case import Case
from efold.boundary.errors import BoundaryError
from efold.boundary.metamorphic import (
    TRANSFORMS,
    Transform,
    Variant,
    frozen_events,
    holds_protected,
    pending_after,
    protected_texts,
    result_blocks,
    surface,
    turn_boundaries,
    variants,
)
from efold.boundary.validate import run_offline, without_critical
from efold.corpus.errors import CorpusError
from efold.corpus.imports import SUITE as IMPORTED_SUITE
from efold.corpus.model import (
    Event,
    ProbeFile,
    SuiteItem,
    Trace,
)
from efold.corpus.shapes import SHAPES
from efold.corpus.user_validation import trace_problems
from efold.corpus.validation import _check_schema
from efold.errors import Code
from efold.folds.registry import BUILTIN_ARMS

# The arms of the stability table, by default.
STABILITY_ARMS: Final = ("native", "cold-rebuild", "compaction", "store", "pack")

# -- legality -------------------------------------------------------------------------


def trace_verdict(case: Case, events: Sequence[Event]) -> list[str]:
    """What the corpus trace validation says of ``events`` as the case's session: the
    imported-shape problems (all of them) for an imported session; for an efold trace
    the first schema rule broken (``corpus.validation``; its shape rules, counts and
    probes are a corpus suite's, not a case's), or nothing."""
    if not events:
        return ["the session has no events"]
    header = msgspec.structs.replace(case.trace.header, sessions=events[-1].session)
    if header.suite == IMPORTED_SUITE:
        return [p.detail for p in trace_problems(Trace(header=header, events=list(events)))]
    # The schema rules ask for a corpus suite name; the session's suite ("boundary") is
    # none, and nothing else of a suite is checked here.
    header = msgspec.structs.replace(header, suite=next(iter(SHAPES)))
    item = SuiteItem(trace=Trace(header=header, events=list(events)),
                     probes=ProbeFile(trace_id=header.trace_id, probes=[]))
    try:
        _check_schema(item)
    except CorpusError as exc:
        return [f"{exc.code.value}: {exc.detail}"]
    return []


def _canonical(events: Sequence[Event]) -> list[str]:
    """The ids in order, each multi-call result block sorted (its order is free)."""
    ids = [e.id for e in events]
    for start, end in result_blocks(events):
        ids[start:end] = sorted(ids[start:end])
    return ids


def _run_problems(original: Sequence[Event], variant: Sequence[Event],
                  new: set[str]) -> list[str]:
    """Each maximal run of inserted events: complete, and between turns."""
    problems: list[str] = []
    legal = set(turn_boundaries(original))
    position = {e.id: i for i, e in enumerate(original)}
    i = 0
    while i < len(variant):
        if variant[i].id not in new:
            i += 1
            continue
        j = i
        while j < len(variant) and variant[j].id in new:
            j += 1
        run = variant[i:j]
        following = position.get(variant[j].id) if j < len(variant) else None
        if following is None or following not in legal:
            problems.append(f"inserted {run[0].id}..{run[-1].id} is not between turns")
        calls = {c.id for e in run for c in e.tool_calls or ()}
        answered = [e.tool_call_id for e in run if e.role == "tool"]
        if sorted(calls) != sorted(a for a in answered if a is not None) or len(
                answered) != len(calls):
            problems.append(f"inserted {run[0].id}..{run[-1].id} is not complete call and "
                            "result pairs")
        if pending_after(run):
            problems.append(f"inserted {run[0].id}..{run[-1].id} leaves a call pending")
        i = j
    return problems


def variant_problems(case: Case, variant: Variant) -> list[str]:
    """Every rule of the module docstring ``variant`` breaks (empty: it is legal)."""
    if not variant.applicable:
        return []
    original, events = case.prefix, list(variant.events)
    problems: list[str] = []
    ids = [e.id for e in events]
    if len(set(ids)) != len(ids):
        problems.append("an event id repeats")
    before = {e.id: e for e in original}
    after = {e.id: e for e in events}
    encode = msgspec.json.encode
    for event_id in sorted(frozen_events(case)):
        if event_id not in after:
            problems.append(f"drops {event_id}, a critical or protected event")
        elif encode(after[event_id]) != encode(before[event_id]):
            problems.append(f"alters {event_id}, a critical or protected event")
    dropped = [e.id for e in original if e.id not in after and e.id not in frozen_events(case)]
    if dropped:
        problems.append(f"drops {len(dropped)} events (first {dropped[0]})")
    new = {e.id for e in events if e.id not in before}
    taken = {e.id for e in case.trace.events}
    if new & taken:
        problems.append(f"inserts an id the session already has ({sorted(new & taken)[0]})")
    old_calls = {c.id for e in case.trace.events for c in e.tool_calls or ()}
    reused = [c.id for e in events if e.id in new for c in e.tool_calls or ()
              if c.id in old_calls]
    if reused:
        problems.append(f"inserts a call id the session already has ({reused[0]})")
    protected = protected_texts(case)
    changed = [e for e in events if e.id in new or (
        e.id in before and encode(e) != encode(before[e.id]))]
    dirty = [e.id for e in changed if holds_protected(surface(e), protected)]
    if dirty:
        problems.append(f"{dirty[0]} holds a protected text in inserted or rewritten text")
    if _canonical([e for e in events if e.id in before]) != _canonical(
            [e for e in original if e.id in after]):
        problems.append("moves original events (only multi-call results may be permuted)")
    problems += _run_problems(original, events, new)
    was = trace_verdict(case, original)
    now = trace_verdict(case, events)
    if case.trace.header.suite == IMPORTED_SUITE:  # every problem listed: none may be new
        extra = [p for p in now if p not in was]
    else:  # the first problem only: the verdict must be the original's
        extra = [] if now == was else now or ["(passes where the original does not)"]
    problems += [f"trace validation: {p}" for p in extra]
    return problems


# -- the behavioural check --------------------------------------------------------------


@dataclass(frozen=True)
class VariantCheck:
    """One variant checked: its problems (legality, then outcome: empty when it keeps
    the case's behaviour), the native verdicts on it and minus its critical events, and
    per stability arm its verdict and whether that equals the arm's on the original."""

    variant: Variant
    problems: tuple[str, ...] = ()
    full: bool | None = None
    minus_critical: bool | None = None
    verdicts: dict[str, bool | None] = field(default_factory=dict)
    stable: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class VariantReport:
    """``check_variants`` of one case: the arms' verdicts on the original events and one
    check per variant."""

    case_id: str
    original: dict[str, bool | None]
    checks: list[VariantCheck]

    @property
    def problem(self) -> str | None:
        """The first variant that breaks the case, named, or None."""
        for check in self.checks:
            if check.problems:
                return f"variant {check.variant.name}: {'; '.join(check.problems)}"
        return None


def with_prefix(case: Case, events: Sequence[Event]) -> Case:
    """``case`` whose pre-fold events are ``events`` (the events after the boundary kept)."""
    trace = Trace(header=case.trace.header,
                  events=[*events, *case.trace.events[case.boundary:]])
    return msgspec.structs.replace(case, trace=trace, boundary=len(events))


def check_variants(case: Case, *, arms: Sequence[str] = STABILITY_ARMS,
                   transforms: Sequence[Transform] = TRANSFORMS) -> VariantReport:
    """Build the case's variants and check each (module docstring): a variant breaks the
    case when it breaks a rule, when the native arm does not pass on it, or when it
    still passes without the critical events. The stability table runs ``arms``."""
    for arm in arms:
        if arm not in BUILTIN_ARMS:
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                                f"{arm!r} is not a built-in arm (offline runs use those only)")
    original = {arm: run_offline(case, list(case.prefix), arm).passed for arm in arms}
    checks: list[VariantCheck] = []
    for variant in variants(case, transforms):
        if not variant.applicable:
            checks.append(VariantCheck(variant=variant))
            continue
        problems = variant_problems(case, variant)
        changed = with_prefix(case, variant.events)
        full = run_offline(changed, list(variant.events), "native").passed
        minus = run_offline(changed, without_critical(changed), "native").passed
        if full is not True:
            problems.append("with the full history the faux agent does not pass every oracle")
        if minus is not False:
            problems.append("with the critical events deleted the outcome does not change")
        verdicts = {arm: full if arm == "native" else
                    run_offline(changed, list(variant.events), arm).passed for arm in arms}
        checks.append(VariantCheck(
            variant=variant, problems=tuple(problems), full=full, minus_critical=minus,
            verdicts=verdicts,
            stable={arm: verdicts[arm] == original[arm] for arm in arms}))
    return VariantReport(case_id=case.id, original=original, checks=checks)


def require_stable(report: VariantReport) -> None:
    """Refuse (``boundary_case_invalid``, naming the variant) a case a variant breaks."""
    problem = report.problem
    if problem is not None:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID, f"{report.case_id}: {problem}")
