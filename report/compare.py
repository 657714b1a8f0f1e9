"""Two runs side by side: what changed between them, and the paired contrasts per slot.

Pure: two ``Results`` (and, per run, the facts of its registration that ``Results``
does not carry: ``RegistrationFacts``) in, one ``Comparison`` out, and its two renderers
(``render_comparison_text``, ``render_comparison_json``). It opens no file.

Rules:
- Slots are paired by slot id (``r{repeat}.{role}.{trace}.{probe}``): the same trace,
  probe, role and repeat. Only slots in both plans are compared; the others are counted
  (``only_a``, ``only_b``). Two plans that share no slot id refuse
  (``compare_no_common_slots``): there is nothing to pair.
- A pair is scored when the slot is completed, eligible and not excluded in *both*
  runs (the ``exact`` rule of ``report.results`` applied to both sides). Accuracy of A
  and of B, the paired cells and the delta B - A are over scored pairs only; a slot
  scored in one run alone is a status change, never a pass or a failure.
- A flip is a scored pair whose correctness differs. A status change is a common slot
  whose status or exclusion differs. Both lists are complete here (the text renderer
  caps them, saying how many it left out).
- Everything is content-free: ids, digests, fixed codes, enum values and numbers, plus
  the two run labels the caller gave (the run directories as the operator named them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import msgspec

from efold.errors import Code
from efold.report.errors import ReportError
from efold.report.numbers import MINUS, count, signed, spend_line
from efold.report.schema import (
    Execution,
    Money,
    PairCounts,
    Proportion,
    Results,
    RunMoney,
    SlotRow,
    Verdict,
)
from efold.report.stats import paired_counts, proportion

__all__ = [
    "COMPARISON_SCHEMA", "Comparison", "RegistrationFacts", "compare_results",
    "render_comparison_json", "render_comparison_text",
]

COMPARISON_SCHEMA: Literal["comparison-v1"] = "comparison-v1"
TEXT_WIDTH = 100  # columns of the text rendering
TEXT_SLOT_CAP = 20  # slots listed per section in the text rendering
_COMPLETED = "completed"


class RegistrationFacts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a run's ``registration.json`` freezes beyond ``Results``: its digests by name
    (``corpus``, ``build``, ``catalog``, ``policy``, ``reader``, ``selection``,
    ``folds``), and the run's label (the run directory as the operator gave it)."""

    run: str
    digests: dict[str, str]


class Side(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One run's identity and outcome, as compared."""

    run: str
    campaign: str
    registration_sha256: str
    schedule_sha256: str
    digests: dict[str, str]
    reader: str | None  # provider/model; null when the results had no registration
    reader_faux: bool
    repeats: int
    roles: list[str]  # in the plan's role order
    arms: dict[str, str]  # role -> its arm (fold), for the roles with results
    verdict: Verdict | None  # the run status's verdict; null without the journal
    stop: str | None
    execution: Execution
    # The whole run's money from its journal (``Results.money``: every caller, settled,
    # retained, open) and its cap; null for results written before the journal's money.
    money: RunMoney | None
    cap: Money
    # The registration's probe mode (``RunInfo.probe_mode``); null when unknown.
    probe_mode: str | None = None


class Changed(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which facts differ between A and B (true: they differ)."""

    registration: bool
    build: bool
    reader: bool
    campaign: bool
    schedule: bool
    repeats: bool
    roles: bool  # role names, their order, or a role's arm
    status: bool  # verdict or stop code
    digests: list[str]  # names of the registration digests that differ, sorted
    probe_mode: bool = False  # whether the lookup was offered differs (or is unknown)


class SlotCoverage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    common: int  # slot ids in both plans: the only ones compared
    only_a: int
    only_b: int


class SideBySide(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One role over one category (``category`` null: all of them).

    Invariant: ``accuracy_a`` and ``accuracy_b`` have ``paired.pairs`` trials, and their
    successes are ``both_correct + b`` and ``both_correct + c``; ``paired.b`` counts A
    right and B wrong, ``paired.c`` A wrong and B right (``PairCounts``, built by
    ``report.stats.paired_counts``, which also gives the delta's paired interval).
    """

    category: str | None
    common: int  # common slots of this role and category
    paired: PairCounts  # scored in both runs
    accuracy_a: Proportion
    accuracy_b: Proportion


class RoleComparison(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    role: str
    overall: SideBySide
    categories: list[SideBySide]  # in category order


class SlotContrast(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One common slot as A and B saw it."""

    slot: str
    role: str
    category: str
    status_a: str
    status_b: str
    correct_a: bool | None
    correct_b: bool | None
    excluded_a: str | None
    excluded_b: str | None


class Comparison(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["comparison-v1"]
    a: Side
    b: Side
    changed: Changed
    slots: SlotCoverage
    roles: list[RoleComparison]  # roles with a common slot: A's order, then B's
    a_right_b_wrong: list[SlotContrast]  # in A's schedule order
    a_wrong_b_right: list[SlotContrast]
    status_changed: list[SlotContrast]


def _side(results: Results, facts: RegistrationFacts) -> Side:
    status = results.status
    return Side(
        run=facts.run, campaign=results.campaign,
        registration_sha256=results.registration_sha256,
        schedule_sha256=results.schedule_sha256, digests=dict(facts.digests),
        reader=results.reader, reader_faux=results.reader_faux, repeats=results.repeats,
        roles=list(results.roles), arms={r.role: r.arm for r in results.results},
        verdict=status.verdict if status is not None else None,
        stop=status.stop if status is not None else None, execution=results.execution,
        money=results.money, cap=results.cap,
        probe_mode=None if results.run is None else results.run.probe_mode,
    )


def _changed(a: Side, b: Side) -> Changed:
    names = sorted(set(a.digests) | set(b.digests))
    return Changed(
        registration=a.registration_sha256 != b.registration_sha256,
        build=a.digests.get("build") != b.digests.get("build"),
        reader=(a.reader, a.reader_faux) != (b.reader, b.reader_faux),
        campaign=a.campaign != b.campaign,
        schedule=a.schedule_sha256 != b.schedule_sha256,
        repeats=a.repeats != b.repeats,
        roles=(a.roles, a.arms) != (b.roles, b.arms),
        status=(a.verdict, a.stop) != (b.verdict, b.stop),
        digests=[n for n in names if a.digests.get(n) != b.digests.get(n)],
        probe_mode=a.probe_mode != b.probe_mode,
    )


def _scored(row: SlotRow) -> bool:
    return (row.status == _COMPLETED and row.eligible and row.excluded is None
            and row.correct is not None)


def _contrast(a: SlotRow, b: SlotRow) -> SlotContrast:
    return SlotContrast(
        slot=a.slot, role=a.role, category=a.category, status_a=a.status, status_b=b.status,
        correct_a=a.correct, correct_b=b.correct, excluded_a=a.excluded, excluded_b=b.excluded,
    )


def _side_by_side(category: str | None, pairs: Sequence[tuple[SlotRow, SlotRow]]) -> SideBySide:
    scored = [(a.correct is True, b.correct is True) for a, b in pairs
              if _scored(a) and _scored(b)]
    counts = paired_counts(scored)
    return SideBySide(
        category=category, common=len(pairs), paired=counts,
        accuracy_a=proportion(counts.both_correct + counts.b, counts.pairs),
        accuracy_b=proportion(counts.both_correct + counts.c, counts.pairs),
    )


def _ordered(*groups: Iterable[str]) -> list[str]:
    out: list[str] = []
    for group in groups:
        out.extend(name for name in group if name not in out)
    return out


def compare_results(a: Results, b: Results, facts_a: RegistrationFacts,
                    facts_b: RegistrationFacts) -> Comparison:
    """Run A against run B (B - A). ``compare_no_common_slots`` when their plans share
    no slot id."""
    rows_b = {row.slot: row for row in b.slots}
    pairs = [(row, rows_b[row.slot]) for row in a.slots if row.slot in rows_b]
    if not pairs:
        raise ReportError(Code.COMPARE_NO_COMMON_SLOTS,
                          f"A plans {len(a.slots)} slots ({a.campaign}), B plans "
                          f"{len(b.slots)} ({b.campaign}): no slot id in common")
    side_a, side_b = _side(a, facts_a), _side(b, facts_b)
    roles = _ordered(a.roles, b.roles, (x.role for x, _ in pairs))
    categories = _ordered(a.categories, b.categories, (x.category for x, _ in pairs))
    compared: list[RoleComparison] = []
    for role in roles:
        mine = [p for p in pairs if p[0].role == role]
        if not mine:
            continue
        compared.append(RoleComparison(
            role=role, overall=_side_by_side(None, mine),
            categories=[_side_by_side(cat, [p for p in mine if p[0].category == cat])
                        for cat in categories if any(p[0].category == cat for p in mine)],
        ))
    scored = [(x, y) for x, y in pairs if _scored(x) and _scored(y)]
    return Comparison(
        schema=COMPARISON_SCHEMA, a=side_a, b=side_b, changed=_changed(side_a, side_b),
        slots=SlotCoverage(common=len(pairs), only_a=len(a.slots) - len(pairs),
                           only_b=len(b.slots) - len(pairs)),
        roles=compared,
        a_right_b_wrong=[_contrast(x, y) for x, y in scored if x.correct and not y.correct],
        a_wrong_b_right=[_contrast(x, y) for x, y in scored if not x.correct and y.correct],
        status_changed=[_contrast(x, y) for x, y in pairs
                        if (x.status, x.excluded) != (y.status, y.excluded)],
    )


def render_comparison_json(comparison: Comparison) -> bytes:
    """Canonical JSON: keys sorted at every level, no insignificant whitespace, UTF-8."""
    return msgspec.json.encode(comparison, order="sorted")


# -- text ---------------------------------------------------------------------------------

def _clip(line: str, width: int = TEXT_WIDTH) -> str:
    line = line.rstrip()
    return line if len(line) <= width else line[: width - 3] + "..."


def _status(side: Side) -> str:
    if side.verdict is None:
        return "unknown"
    return f"{side.verdict} ({side.stop})" if side.stop else side.verdict


def _roles(side: Side) -> str:
    """Role names, each followed by its arm when the arm has another name."""
    return ", ".join(role if side.arms.get(role, role) == role else f"{role} ({side.arms[role]})"
                     for role in side.roles)


def _fact(label: str, differs: bool, a: str, b: str) -> str:
    value = f"A {a}  B {b}" if differs else a
    return f"  {label:<15} {'differs' if differs else 'same':<8} {value}"


def _changes(c: Comparison) -> Iterator[str]:
    a, b, ch = c.a, c.b, c.changed
    yield "what changed"
    yield _fact("registration", ch.registration, a.registration_sha256[:12],
                b.registration_sha256[:12])
    yield _fact("build digest", ch.build, a.digests.get("build", "-")[:12],
                b.digests.get("build", "-")[:12])
    yield _fact("reader", ch.reader, (a.reader or "-") + (" (faux)" if a.reader_faux else ""),
                (b.reader or "-") + (" (faux)" if b.reader_faux else ""))
    yield _fact("campaign", ch.campaign, a.campaign, b.campaign)
    yield _fact("schedule", ch.schedule, a.schedule_sha256[:12], b.schedule_sha256[:12])
    yield _fact("repeats", ch.repeats, str(a.repeats), str(b.repeats))
    yield _fact("probe mode", ch.probe_mode, a.probe_mode or "unknown", b.probe_mode or "unknown")
    yield _fact("roles", ch.roles, _roles(a), _roles(b))
    yield _fact("status", ch.status, _status(a), _status(b))
    others = [n for n in ch.digests if n != "build"]
    yield f"  {'other digests':<15} {'differ' if others else 'same':<8} {', '.join(others)}"
    s = c.slots
    yield (f"  {'slots':<15} {count(s.common)} common (compared), {count(s.only_a)} only in A, "
           f"{count(s.only_b)} only in B")


def _percent(p: Proportion) -> str:
    if p.rate is None:
        return "-"
    return f"{count(p.successes)} ({100.0 * p.rate:.1f}%)"


_NAME = 22  # a role, or a category indented by two: longer names are cut with "..."
_ROW = ("{name:<22} {pairs:>6} {a:>15} {b:>15} {delta:>7} {both:>6} {aonly:>6} {bonly:>6} "
        "{none:>7}")


def _row(name: str, t: SideBySide) -> str:
    p = t.paired
    delta = "-" if p.delta_pp is None else f"{p.delta_pp:+.1f}"
    if len(name) > _NAME:
        name = name[: _NAME - 3] + "..."
    return _ROW.format(name=name, pairs=count(p.pairs), a=_percent(t.accuracy_a),
                       b=_percent(t.accuracy_b), delta=delta, both=count(p.both_correct),
                       aonly=count(p.b), bonly=count(p.c), none=count(p.both_wrong))


def _interval(p: PairCounts) -> str:
    """A role's paired interval, on the line under its row (the row has no room left):
    ``B-A 95% CI -3.1 to +27.0 pp`` starting under the A column."""
    if p.delta_pp is None:
        text = "- (no pairs)"
    elif p.delta_pp95 is None:
        text = "-"
    else:
        text = f"{_signed(p.delta_pp95.lower)} to {_signed(p.delta_pp95.upper)} pp"
    return f"{'':<{_NAME + 8}}B-A 95% CI {text}"


def _signed(value: float) -> str:
    return signed(value).replace(MINUS, "-")  # a terminal's minus is a hyphen


def _accuracy(c: Comparison) -> Iterator[str]:
    yield "accuracy over common slots scored in both runs (completed, eligible, not excluded)"
    yield _ROW.format(name="role / category", pairs="pairs", a="A right", b="B right",
                      delta="B-A pp", both="both", aonly="A only", bonly="B only",
                      none="neither")
    for role in c.roles:
        yield _row(role.role, role.overall)
        yield _interval(role.overall.paired)
        for tally in role.categories:
            yield _row("  " + (tally.category or ""), tally)
    yield "A only: A right and B wrong; B only: A wrong and B right (paired counts)"
    yield ("B-A 95% CI: Newcombe's hybrid score interval for paired proportions (method 10),")
    yield "  descriptive: not a significance claim"


def _slot_list(title: str, slots: Sequence[SlotContrast], cap: int,
               describe: bool) -> Iterator[str]:
    yield f"{title}: {count(len(slots))}"
    for s in slots[:cap]:
        if not describe:
            yield f"  {s.slot}"
            continue
        change = f"{_label(s.status_a, s.excluded_a)} -> {_label(s.status_b, s.excluded_b)}"
        if len(s.slot) + len(change) + 4 <= TEXT_WIDTH:
            yield f"  {s.slot}  {change}"
        else:  # a long slot id: the change on its own line, never clipped away
            yield f"  {s.slot}"
            yield f"      {change}"
    if len(slots) > cap:
        yield f"  ... and {count(len(slots) - cap)} more"


def _label(status: str, excluded: str | None) -> str:
    return status if excluded is None else f"{status} (excluded: {excluded})"


def _spend(side: Side) -> str:
    """A run's spend in the reports' one wording; said so when its results predate it."""
    if side.money is None:
        return "\u2014 (results written before the journal's money was reported)"
    return spend_line(side.money, side.cap, side.reader_faux)


def render_comparison_text(c: Comparison, cap: int = TEXT_SLOT_CAP) -> list[str]:
    """The comparison for a terminal: at most ``TEXT_WIDTH`` columns a line, and at most
    ``cap`` slots per list (the JSON rendering has them all)."""
    lines = [f"A: {c.a.run}", f"B: {c.b.run}", ""]
    lines += _changes(c)
    lines.append("")
    lines += _accuracy(c)
    lines.append("")
    lines += _slot_list("flipped, A right -> B wrong", c.a_right_b_wrong, cap, False)
    lines += _slot_list("flipped, A wrong -> B right", c.a_wrong_b_right, cap, False)
    lines += _slot_list("status changed", c.status_changed, cap, True)
    lines += ["", "spend (the journal's, every caller)", f"  A  {_spend(c.a)}",
              f"  B  {_spend(c.b)}"]
    return [_clip(line) for line in lines]
