"""The paired comparison analyzer: a reference arm against a candidate, over the same tasks.

From a checked ``ComparisonSet`` (``report.comparison_set``), deterministically, with no
model call:

* **the evidence gate**: the number of distinct tasks with a complete pair (both arms,
  same repeat) must reach ``minimum_tasks`` (at least 20); the verdict is
  ``comparison_ready`` only then, else ``insufficient_evidence``;
* **per arm**: full acceptance with its Wilson 95% interval, checks passed of checks,
  missed constraints and unsupported claims (sums of the measured runs), tokens and
  latency (nearest-rank medians), cost (the exact sum); each with the number of runs
  that did not measure it, never counted as zero;
* **paired**, candidate against reference on the same (task, repeat): wins, ties and
  losses on acceptance, checks, constraints, claims, tokens, cost and latency (a pair
  where either side is unmeasured is ``unknown``, not a tie), and the acceptance delta
  with Newcombe's paired interval (``report.stats.paired_counts``);
* **representativeness**: only what the set's ``representative_task_set`` attests, and
  reported as the operator's attestation; nothing here infers it;
* **the research protocol** (an ``efold-comparison-v2`` set), per arm over the runs
  that measured each: the compliance rates (first mutation after the plan, planning
  pruned, executor verified), the checklist count's median, the mean plan quality
  (with the rubrics that scored it), and the context-token medians; null where no run
  measured it.

Everything is descriptive, like every efold report: no significance or model-quality
claim. ``render_analysis_text`` is the human summary; the ``Analysis`` record is the JSON.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from efold.report.comparison_set import ComparisonRun, ComparisonSet, Provenance, cost_of
from efold.report.schema import PairCounts, Proportion
from efold.report.stats import nearest_rank, paired_counts, proportion

ANALYSIS_SCHEMA: Final = "efold-analysis-v1"
Verdict = Literal["comparison_ready", "insufficient_evidence"]


class ArmFigures(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One arm over its paired runs; ``*_unmeasured``: runs that did not measure it."""

    arm: str
    runs: int
    accepted: Proportion
    checks_passed: int
    checks_total: int
    missed_constraints: int
    missed_constraints_unmeasured: int
    unsupported_claims: int
    unsupported_claims_unmeasured: int
    tokens_median: int | None
    tokens_unmeasured: int
    cost_usd: str  # the exact sum over the runs that measured it
    cost_unmeasured: int
    latency_median_ms: int | None
    latency_unmeasured: int
    # Null unless some run of the arm measured a research-protocol field (v2).
    research: ResearchFigures | None = None


class RubricQuality(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The plan quality one rubric gave: the mean over the runs it scored (rounded to 6
    places). Two rubrics' scores are never averaged together."""

    rubric: str
    runs: int
    mean: str


class ResearchFigures(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One arm's research-protocol fields over the runs that measured each (a
    compliance rate: runs where it held / runs that measured it)."""

    first_mutation_boundary: Proportion | None
    planning_pruned: Proportion | None
    executor_verified: Proportion | None
    checklist_count_median: int | None
    plan_quality: list[RubricQuality]  # per rubric, sorted by rubric; empty: none scored
    request_context_tokens_median: int | None
    parent_context_tokens_median: int | None


class PairedMetric(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The candidate against the reference on one metric, pair by pair: ``wins`` the
    candidate did better, ``losses`` worse, ``unknown`` either side unmeasured."""

    metric: str
    better: Literal["higher", "lower"]
    wins: int
    ties: int
    losses: int
    unknown: int


class Analysis(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: str
    reference: str
    candidate: str
    verdict: Verdict
    paired_tasks: int  # distinct tasks with a complete pair
    pairs: int  # (task, repeat) pairs
    minimum_tasks: int
    representative_task_set: bool  # the operator's attestation, as given
    provenance: Provenance
    arms: list[ArmFigures]  # reference, then candidate
    acceptance: PairCounts  # a = reference, b = candidate
    paired: list[PairedMetric]


@dataclass(frozen=True)
class _Metric:
    name: str
    better: Literal["higher", "lower"]
    value: Callable[[ComparisonRun], decimal.Decimal | None]


def _checks(run: ComparisonRun) -> decimal.Decimal | None:
    if run.checks_total == 0:
        return None
    return decimal.Decimal(run.checks_passed) / decimal.Decimal(run.checks_total)


def _number(read: Callable[[ComparisonRun], int | None]
            ) -> Callable[[ComparisonRun], decimal.Decimal | None]:
    def value(run: ComparisonRun) -> decimal.Decimal | None:
        found = read(run)
        return None if found is None else decimal.Decimal(found)
    return value


METRICS: Final = (
    _Metric("acceptance", "higher", lambda r: decimal.Decimal(int(r.accepted))),
    _Metric("checks", "higher", _checks),
    _Metric("constraints_missed", "lower", _number(lambda r: r.missed_constraints)),
    _Metric("unsupported_claims", "lower", _number(lambda r: r.unsupported_claims)),
    _Metric("tokens", "lower", _number(lambda r: r.tokens)),
    _Metric("cost_usd", "lower", cost_of),
    _Metric("latency_ms", "lower", _number(lambda r: r.latency_ms)),
)


def _paired(metric: _Metric, pairs: Sequence[tuple[ComparisonRun, ComparisonRun]]
            ) -> PairedMetric:
    wins = ties = losses = unknown = 0
    for reference, candidate in pairs:
        a, b = metric.value(reference), metric.value(candidate)
        if a is None or b is None:
            unknown += 1
        elif a == b:
            ties += 1
        elif (b > a) == (metric.better == "higher"):
            wins += 1
        else:
            losses += 1
    return PairedMetric(metric=metric.name, better=metric.better, wins=wins, ties=ties,
                        losses=losses, unknown=unknown)


def _median(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return nearest_rank(known, 50) if known else None


def _arm(arm: str, runs: Sequence[ComparisonRun]) -> ArmFigures:
    def measured(values: Sequence[int | None]) -> tuple[int, int]:
        return sum(v for v in values if v is not None), sum(v is None for v in values)

    constraints, constraints_unmeasured = measured([r.missed_constraints for r in runs])
    claims, claims_unmeasured = measured([r.unsupported_claims for r in runs])
    costs = [cost_of(r) for r in runs]
    total = sum((c for c in costs if c is not None), decimal.Decimal(0))
    return ArmFigures(
        arm=arm, runs=len(runs), accepted=proportion(sum(r.accepted for r in runs), len(runs)),
        checks_passed=sum(r.checks_passed for r in runs),
        checks_total=sum(r.checks_total for r in runs),
        missed_constraints=constraints, missed_constraints_unmeasured=constraints_unmeasured,
        unsupported_claims=claims, unsupported_claims_unmeasured=claims_unmeasured,
        tokens_median=_median([r.tokens for r in runs]),
        tokens_unmeasured=sum(r.tokens is None for r in runs),
        cost_usd=format(total.normalize(), "f") if total else "0",
        cost_unmeasured=sum(c is None for c in costs),
        latency_median_ms=_median([r.latency_ms for r in runs]),
        latency_unmeasured=sum(r.latency_ms is None for r in runs),
        research=_research(runs))


def _rate(values: Sequence[bool | None]) -> Proportion | None:
    known = [v for v in values if v is not None]
    return proportion(sum(known), len(known)) if known else None


def _research(runs: Sequence[ComparisonRun]) -> ResearchFigures | None:
    if not any(r.research_fields() for r in runs):
        return None
    by_rubric: dict[str, list[decimal.Decimal]] = {}
    for r in runs:
        if r.plan_quality is not None and r.plan_quality_rubric is not None:
            by_rubric.setdefault(r.plan_quality_rubric, []).append(decimal.Decimal(r.plan_quality))
    quality = [RubricQuality(rubric=rubric, runs=len(scores), mean=format(
        (sum(scores, decimal.Decimal(0)) / len(scores)).quantize(decimal.Decimal("0.000001"))
        .normalize(), "f")) for rubric, scores in sorted(by_rubric.items())]
    return ResearchFigures(
        first_mutation_boundary=_rate([r.first_mutation_boundary for r in runs]),
        planning_pruned=_rate([r.planning_pruned for r in runs]),
        executor_verified=_rate([r.executor_verified for r in runs]),
        checklist_count_median=_median([r.checklist_count for r in runs]),
        plan_quality=quality,
        request_context_tokens_median=_median([r.request_context_tokens for r in runs]),
        parent_context_tokens_median=_median([r.parent_context_tokens for r in runs]))


def analyze(data: ComparisonSet) -> Analysis:
    """The analysis of a checked set (module docstring)."""
    by_key = {(r.task, r.repeat, r.arm): r for r in data.runs}
    keys = sorted({(r.task, r.repeat) for r in data.runs})
    pairs = [(by_key[(t, n, data.reference)], by_key[(t, n, data.candidate)]) for t, n in keys]
    tasks = len({t for t, _ in keys})
    gate = tasks >= data.minimum_tasks
    return Analysis(
        schema=ANALYSIS_SCHEMA, reference=data.reference, candidate=data.candidate,
        verdict="comparison_ready" if gate else "insufficient_evidence",
        paired_tasks=tasks, pairs=len(pairs), minimum_tasks=data.minimum_tasks,
        representative_task_set=data.representative_task_set, provenance=data.provenance,
        arms=[_arm(data.reference, [a for a, _ in pairs]),
              _arm(data.candidate, [b for _, b in pairs])],
        acceptance=paired_counts((a.accepted, b.accepted) for a, b in pairs),
        paired=[_paired(m, pairs) for m in METRICS])


def _percent(p: Proportion) -> str:
    if p.rate is None or p.wilson95 is None:
        return f"{p.successes}/{p.trials}"
    ci = p.wilson95
    return f"{p.successes}/{p.trials} = {p.rate:.1%} (95% CI {ci.lower:.1%}-{ci.upper:.1%})"


def _tokens(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _unmeasured(n: int) -> str:
    return f" ({n} unmeasured)" if n else ""


def render_analysis_text(a: Analysis) -> str:
    """The human summary: the verdict and the gate first, then each arm, then the pairs."""
    money = "faux units" if a.provenance.faux else "USD"
    lines = [
        f"verdict: {a.verdict} ({a.paired_tasks} paired tasks, {a.pairs} pairs; the "
        f"evidence gate is {a.minimum_tasks} paired tasks"
        + (")" if a.verdict == "comparison_ready" else ": not met)"),
        f"{a.candidate} (candidate) against {a.reference} (reference)",
        "representative task set: " + ("attested by the operator (not verified by efold)"
                                       if a.representative_task_set else "not attested"),
    ]
    for f in a.arms:
        lines.append(
            f"{f.arm}: accepted {_percent(f.accepted)}; checks {f.checks_passed}/"
            f"{f.checks_total}; missed constraints {f.missed_constraints}"
            f"{_unmeasured(f.missed_constraints_unmeasured)}; unsupported claims "
            f"{f.unsupported_claims}{_unmeasured(f.unsupported_claims_unmeasured)}; tokens "
            f"median {'-' if f.tokens_median is None else f'{f.tokens_median:,}'}"
            f"{_unmeasured(f.tokens_unmeasured)}; cost {f.cost_usd} {money}"
            f"{_unmeasured(f.cost_unmeasured)}; latency median "
            f"{'-' if f.latency_median_ms is None else f'{f.latency_median_ms:,} ms'}"
            f"{_unmeasured(f.latency_unmeasured)}")
        if (r := f.research) is not None:
            rates = "; ".join(f"{name} {_percent(p)}" for name, p in (
                ("first mutation after the plan", r.first_mutation_boundary),
                ("planning pruned", r.planning_pruned),
                ("executor verified", r.executor_verified)) if p is not None)
            lines.append(
                f"  research protocol: {rates or 'no compliance measured'}; checklist "
                f"median {'-' if r.checklist_count_median is None else r.checklist_count_median}"
                "; plan quality "
                + (", ".join(f"{q.mean} mean over {q.runs} runs ({q.rubric})"
                             for q in r.plan_quality) or "-")
                + f"; context tokens median {_tokens(r.request_context_tokens_median)} "
                  f"request, {_tokens(r.parent_context_tokens_median)} parent")
    c = a.acceptance
    delta = "-" if c.delta_pp is None or c.delta_pp95 is None else (
        f"{c.delta_pp:+.1f} pp (95% CI {c.delta_pp95.lower:+.1f} to {c.delta_pp95.upper:+.1f})")
    lines.append(f"acceptance, paired: {delta}; only {a.reference} accepted {c.b}, only "
                 f"{a.candidate} accepted {c.c}, both {c.both_correct}, neither {c.both_wrong}")
    lines.append(f"paired, {a.candidate} against {a.reference} (wins / ties / losses / unknown):")
    for m in a.paired:
        lines.append(f"  {m.metric:<19} {m.wins:>5} / {m.ties:>5} / {m.losses:>5} / "
                     f"{m.unknown:>5}  ({m.better} is better)")
    lines.append("descriptive only: no significance or model-quality claim.")
    return "\n".join(lines) + "\n"
