"""Boundary-case results per arm: pass rates, actions, recall, contrasts, incidents.

From the runs of a set of cases on a set of arms (``boundary.validate.CaseOutcome``,
one per case and arm), content-free like every report:

* per case and arm: each oracle's verdict, each action (family and target), how the
  run ended;
* per arm: cases passed (every oracle passed) out of cases judged, with the Wilson 95%
  interval (a run with a ``not_applicable`` verdict and no failure is counted apart,
  never as a pass); actions, duplicate actions and the duplicate-action rate; on
  required-recall cases, the Recall Trigger Rate (runs that recalled / runs that needed
  to); tokens per task (every token the agent spent after the fold: the median per run,
  and the total over the passes);
* paired contrasts of every arm against the reference arm over the same cases
  (``report.stats.paired_counts``: the discordant cells and the delta with Newcombe's
  interval; descriptive only);
* incidents: for every case the reference arm passes and another arm fails, a
  ``CompressionIncident`` (``boundary.incidents``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from efold.boundary.case import Case
from efold.boundary.incidents import CompressionIncident, incident
from efold.boundary.validate import CaseOutcome
from efold.report.schema import PairCounts, Proportion
from efold.report.stats import nearest_rank, paired_counts, proportion


class RunRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One case on one arm: each oracle's verdict, each action, how the run ended."""

    case: str
    arm: str
    passed: bool | None
    oracles: list[tuple[str, str]]  # (oracle type, verdict), in the case's order
    actions: list[tuple[str, str | None]]  # (family, normalized target), in call order
    duplicates: int
    ending: str
    tokens: int  # every token the agent spent after the fold (input + output estimates)


class ArmSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    arm: str
    passed: Proportion  # cases passing every oracle / cases judged (pass or fail)
    not_applicable: int  # cases with a not_applicable verdict and no failure
    actions: int
    duplicates: int
    duplicate_rate: float | None  # duplicates / actions; null without an action
    recall_trigger: Proportion | None  # on required-recall cases; null without one
    # Tokens per task (every token the agent spent after the fold, re-sent context and
    # re-reads included): the nearest-rank median per run, and all of them over the
    # passes (null without a pass).
    tokens_per_task_median: int | None
    tokens_per_pass: int | None


class ArmContrast(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reference: str
    arm: str
    counts: PairCounts  # b: reference passed and arm failed; c: the reverse


class BoundaryResults(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cases: list[str]  # "id@version", in order
    reference_arm: str
    runs: list[RunRow]  # case by case, arm by arm
    arms: list[ArmSummary]
    contrasts: list[ArmContrast]
    incidents: list[CompressionIncident]


Outcomes = Mapping[tuple[str, str], CaseOutcome]  # (case id, arm) -> its run


def _summary(arm: str, cases: Sequence[Case], outcomes: Outcomes) -> ArmSummary:
    runs = [(case, outcomes[(case.id, arm)]) for case in cases]
    judged = [o for _, o in runs if o.passed is not None]
    actions = [a for _, o in runs for a in o.run.actions]
    duplicates = sum(a.duplicate for a in actions)
    needed = [o for case, o in runs if case.sidecar.recall.required]
    triggered = sum(any(a.family == "recall" for a in o.run.actions) for o in needed)
    tokens = [o.run.input_tokens + o.run.output_tokens for _, o in runs]
    passes = sum(o.passed is True for o in judged)
    return ArmSummary(
        arm=arm, passed=proportion(passes, len(judged)),
        tokens_per_task_median=nearest_rank(tokens, 50),
        tokens_per_pass=-(-sum(tokens) // passes) if passes else None,
        not_applicable=len(runs) - len(judged), actions=len(actions), duplicates=duplicates,
        duplicate_rate=duplicates / len(actions) if actions else None,
        recall_trigger=proportion(triggered, len(needed)) if needed else None)


def boundary_results(cases: Sequence[Case], arms: Sequence[str], outcomes: Outcomes, *,
                     build: str, model: str | None = None) -> BoundaryResults:
    """The results of ``outcomes`` (every case on every arm); the first arm is the
    reference of the contrasts and the incidents."""
    reference = arms[0]
    contrasts = []
    for arm in arms[1:]:
        pairs = [(outcomes[(c.id, reference)].passed is True, outcomes[(c.id, arm)].passed is True)
                 for c in cases if outcomes[(c.id, reference)].passed is not None
                 and outcomes[(c.id, arm)].passed is not None]
        contrasts.append(ArmContrast(reference=reference, arm=arm, counts=paired_counts(pairs)))
    incidents = []
    for case in cases:
        base = outcomes[(case.id, reference)]
        for arm in arms[1:]:
            failing = outcomes[(case.id, arm)]
            if base.passed is True and failing.passed is False:
                incidents.append(incident(
                    case_id=case.id, case_version=case.version, build=build, model=model,
                    reference_arm=reference, failing_arm=arm, results=failing.results,
                    actions=failing.run.actions,
                    recall_required=case.sidecar.recall.required,
                    checkpoints=[base.checkpoint, failing.checkpoint]))
    runs = [RunRow(case=c.id, arm=arm, passed=o.passed,
                   oracles=[(r.type, r.verdict) for r in o.results],
                   actions=[(a.family, a.target) for a in o.run.actions],
                   duplicates=sum(a.duplicate for a in o.run.actions), ending=o.run.ending,
                   tokens=o.run.input_tokens + o.run.output_tokens)
            for c in cases for arm in arms for o in (outcomes[(c.id, arm)],)]
    return BoundaryResults(
        cases=[f"{c.id}@{c.version}" for c in cases], reference_arm=reference, runs=runs,
        arms=[_summary(arm, cases, outcomes) for arm in arms], contrasts=contrasts,
        incidents=incidents)
