"""Boundary-case results per arm: pass rates, actions, recall, contrasts, incidents.

From the judged runs of a set of cases on a set of arms (``boundary.incidents.JudgedRun``:
an offline run's ``judged_offline``, a campaign receipt's ``judged_receipt``),
content-free like every report:

* per case and arm: each oracle's verdict, each action's family, how the run ended;
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

from collections.abc import Sequence

from efold.boundary.case import Case, needs_rationale
from efold.boundary.incidents import JudgedRun, incident
from efold.boundary.validate import CaseOutcome
from efold.corpus.model import Category
from efold.folds.probe_modes import NATIVE_ARMS
from efold.protocol.records import Exclusion, Receipt
from efold.report.schema import ArmContrast, ArmSummary, BoundaryResults, ExcludedRun, RunRow
from efold.report.stats import nearest_rank, paired_counts, proportion


def judged_offline(case: Case, outcome: CaseOutcome) -> JudgedRun:
    """An offline run (``boundary run``) as a judged run; excluded
    (``recall_answer_visible``) when it is a required-recall case whose checkpoint
    shows the answer, as a campaign's slot is."""
    return JudgedRun(
        case=case.id, case_version=case.version, arm=outcome.arm, passed=outcome.passed,
        oracles=[(r.type, r.verdict) for r in outcome.results],
        families=[a.family for a in outcome.run.actions],
        duplicates=[a.duplicate for a in outcome.run.actions], ending=outcome.run.ending,
        tokens=outcome.run.input_tokens + outcome.run.output_tokens,
        recall_required=case.sidecar.recall.required, checkpoint=outcome.checkpoint,
        rationale=needs_rationale(case),
        repeat=case.sidecar.fold.repeat, folds=outcome.folds,
        excluded=Exclusion.RECALL_ANSWER_VISIBLE.value if outcome.answer_shown else None)


def judged_receipt(receipt: Receipt) -> JudgedRun | None:
    """A campaign's boundary slot as a judged run (its role is the arm); None when the
    slot was not judged (never completed, its work record did not hold, or it is
    excluded for its checkpoint: an excluded slot is never scored as a pass or a
    failure). A required-recall slot whose checkpoint showed the answer is judged and
    marked excluded (``boundary_results`` scores it nowhere, and lets it stand only as
    the reference of its case)."""
    record = receipt.boundary
    if record is None or record.code is not None or record.ending is None \
            or receipt.excluded not in (None, Exclusion.RECALL_ANSWER_VISIBLE):
        return None
    return JudgedRun(
        case=record.case, case_version=record.case_version,
        arm=receipt.role, passed=record.passed,
        oracles=[(o.type, o.verdict) for o in record.oracles],
        families=[a.family for a in record.actions],
        duplicates=[a.duplicate for a in record.actions], ending=record.ending,
        tokens=record.tokens, recall_required=record.recall_required,
        rationale=record.rationale,
        checkpoint=receipt.checkpoint_sha256, repeat=record.repeat, folds=record.folds,
        excluded=None if receipt.excluded is None else receipt.excluded.value)


def _summary(arm: str, runs: Sequence[JudgedRun]) -> ArmSummary:
    judged = [r for r in runs if r.passed is not None]
    families = [f for r in runs for f in r.families]
    duplicates = sum(d for r in runs for d in r.duplicates)
    needed = [r for r in runs if r.recall_required]
    triggered = sum("recall" in r.families for r in needed)
    tokens = [r.tokens for r in runs]
    passes = sum(r.passed is True for r in judged)
    return ArmSummary(
        arm=arm, passed=proportion(passes, len(judged)),
        tokens_per_task_median=nearest_rank(tokens, 50) if tokens else None,
        tokens_per_pass=-(-sum(tokens) // passes) if passes else None,
        not_applicable=len(runs) - len(judged), actions=len(families), duplicates=duplicates,
        duplicate_rate=duplicates / len(families) if families else None,
        recall_trigger=proportion(triggered, len(needed)) if needed else None)


def campaign_boundary(roles: Sequence[str], arms: Sequence[str], receipts: Sequence[Receipt],
                      *, build: str, model: str | None) -> BoundaryResults | None:
    """A campaign's boundary results (its roles are the arms compared), or None when it
    ran no boundary case. The reference is the first role whose arm is ``native`` or
    ``native-lookup`` (``folds.probe_modes.NATIVE_ARMS``), else the first role."""
    if not any(r.category == Category.BOUNDARY.value for r in receipts):
        return None
    order = list(roles)
    native = [role for role, arm in zip(roles, arms, strict=True) if arm in NATIVE_ARMS]
    if native:
        order.remove(native[0])
        order.insert(0, native[0])
    judged = [j for r in receipts if (j := judged_receipt(r)) is not None]
    return boundary_results(judged, order, build=build, model=model)


def boundary_results(runs: Sequence[JudgedRun], arms: Sequence[str], *, build: str,
                     model: str | None = None) -> BoundaryResults:
    """The results of ``runs`` (at most one per case and arm; a case may lack an arm
    whose slot was never judged); the first arm is the reference of the contrasts and
    the incidents, which pair only cases judged on both arms.

    An excluded run (``JudgedRun.excluded``) is in no row, summary or rate and never a
    compared arm's side of a pair; it is listed under ``excluded``. The reference's own
    run still stands as its case's reference: on a required-recall case the reference
    (the full history) shows the answer by construction, and an arm that then fails has
    lost what the reference had (its incident is ``recall_not_triggered`` or
    ``recall_failed``)."""
    reference = arms[0]
    cases: dict[str, int] = {}
    by_key: dict[tuple[str, str], JudgedRun] = {}
    references: dict[str, JudgedRun] = {}
    for run in sorted(runs, key=lambda r: r.case):
        cases.setdefault(run.case, run.case_version)
        if run.arm == reference:
            references[run.case] = run
        if run.excluded is None:
            by_key[(run.case, run.arm)] = run
    scored = [r for r in runs if r.excluded is None]
    contrasts = []
    incidents = []
    for arm in arms[1:]:
        pairs = []
        for case in cases:
            base, other = references.get(case), by_key.get((case, arm))
            if base is None or other is None or base.passed is None or other.passed is None:
                continue
            pairs.append((base.passed, other.passed))
            if base.passed and not other.passed:
                incidents.append(incident(base, other, build=build, model=model))
        contrasts.append(ArmContrast(reference=reference, arm=arm, counts=paired_counts(pairs)))
    incidents.sort(key=lambda i: (list(cases).index(i.case_id), arms.index(i.failing_arm)))
    rows = [RunRow(case=r.case, arm=r.arm, passed=r.passed, oracles=r.oracles,
                   actions=r.families, duplicates=sum(r.duplicates), ending=r.ending,
                   tokens=r.tokens, repeat=r.repeat, folds=r.folds)
            for case in cases for arm in arms if (r := by_key.get((case, arm))) is not None]
    return BoundaryResults(
        cases=[f"{case}@{cases[case]}" for case in cases],
        reference_arm=reference, runs=rows,
        arms=[_summary(arm, [r for r in scored if r.arm == arm]) for arm in arms],
        contrasts=contrasts, incidents=incidents,
        excluded=[ExcludedRun(case=r.case, case_version=r.case_version, arm=r.arm,
                              excluded=r.excluded)
                  for r in sorted(runs, key=lambda r: (r.case, arms.index(r.arm)))
                  if r.excluded is not None])
