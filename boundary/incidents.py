"""Compression incidents: one arm fails a case another arm passes (docs/boundary.md §8).

An incident is evidence for a person, never an input to any fold: nothing in efold reads
one to change a policy. Its category is one of the protocol's closed list, chosen
deterministically from the failing run (the first rule that applies):

1. a required-recall case whose failing run made no recall: ``recall_not_triggered``;
   one that recalled and still failed: ``recall_failed``;
2. a case whose expected capabilities include ``rationale`` (the reason behind an
   earlier decision is what the continuation needs, as X04's): ``missing_rationale``;
3. a failing ``forbidden-path-unchanged``, ``file-unchanged`` or ``tool-action-absent``
   oracle: ``authority_loss`` (a rule the owner set was not kept);
4. a failing ``tool-action-present`` oracle: ``missing_obligation``;
5. a failing ``file-equals`` or ``state-key-equals`` oracle: ``state_stale``;
6. a failing ``artifact-exists`` or ``recall-contains`` oracle: ``wrong_target``;
7. a failing ``tests-pass`` oracle: ``missing_evidence``;
8. a failing ``failure-open``/``failure-retired`` oracle: ``reopened_resolved_branch``;
9. a failing run with duplicate actions: ``duplicate_work``;
10. otherwise ``unknown``.

The evidence names the failing run's action indices (all of them: the run is short), the
oracles it failed, and the two checkpoints' content digests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from efold.boundary.actions import ActionRecord
from efold.boundary.oracles import OracleResult

IncidentCategory = Literal[
    "authority_loss", "state_stale", "missing_obligation", "missing_evidence",
    "missing_rationale", "recall_not_triggered", "recall_failed", "duplicate_work",
    "wrong_target", "reopened_resolved_branch", "unknown"]

_BY_ORACLE: Final[tuple[tuple[frozenset[str], IncidentCategory], ...]] = (
    (frozenset({"forbidden-path-unchanged", "file-unchanged", "tool-action-absent"}),
     "authority_loss"),
    (frozenset({"tool-action-present"}), "missing_obligation"),
    (frozenset({"file-equals", "state-key-equals"}), "state_stale"),
    (frozenset({"artifact-exists", "recall-contains"}), "wrong_target"),
    (frozenset({"tests-pass"}), "missing_evidence"),
    (frozenset({"failure-open", "failure-retired"}), "reopened_resolved_branch"),
)


class IncidentEvidence(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    actions: list[int]
    verifier_failures: list[str]
    relevant_checkpoint_ids: list[str]


class CompressionIncident(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One arm failed a case another passed (the protocol's record, in efold's terms:
    ``build`` is efold's build digest; ``model`` the route's model, None offline)."""

    version: int
    case_id: str
    case_version: int
    build: str
    model: str | None
    reference_arm: str
    failing_arm: str
    category: IncidentCategory
    evidence: IncidentEvidence


class JudgedRun(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One case on one arm as judged, content-free: what results and incidents are made
    of, whether it ran offline (``boundary run``) or in a campaign (a receipt)."""

    case: str
    case_version: int
    arm: str
    passed: bool | None  # every oracle passed; None: nothing failed, something n/a
    oracles: list[tuple[str, str]]  # (oracle type, verdict), in the case's order
    families: list[str]  # each action's family, in call order
    duplicates: list[bool]  # each action's duplicate flag, in call order
    ending: str
    tokens: int  # tokens per task (every token the agent spent after the fold)
    recall_required: bool
    checkpoint: str | None  # the content digest of the checkpoint it resumed from
    repeat: int = 1  # the case's ``fold.repeat``
    folds: int | None = None  # the folds that checkpoint's receipt records
    rationale: bool = False  # the case expects the ``rationale`` capability
    # Set: the run is not scored (``recall_answer_visible``); see ``boundary_results``.
    excluded: str | None = None

    @property
    def failed(self) -> list[str]:
        return [kind for kind, verdict in self.oracles if verdict == "fail"]


def category_of(failed: Sequence[str], families: Sequence[str], duplicates: Sequence[bool], *,
                recall_required: bool, rationale: bool = False) -> IncidentCategory:
    """The failing run's category (module docstring)."""
    if recall_required:
        return "recall_failed" if "recall" in families else "recall_not_triggered"
    if rationale:
        return "missing_rationale"
    failing = set(failed)
    for types, found in _BY_ORACLE:
        if failing & types:
            return found
    if any(duplicates):
        return "duplicate_work"
    return "unknown"


def category(results: Sequence[OracleResult], actions: Sequence[ActionRecord], *,
             recall_required: bool, rationale: bool = False) -> IncidentCategory:
    """``category_of`` a run's oracle results and action records."""
    return category_of([r.type for r in results if r.verdict == "fail"],
                       [a.family for a in actions], [a.duplicate for a in actions],
                       recall_required=recall_required, rationale=rationale)


def incident(reference: JudgedRun, failing: JudgedRun, *, build: str,
             model: str | None) -> CompressionIncident:
    """The incident of ``failing`` against ``reference`` on one case."""
    return CompressionIncident(
        version=1, case_id=failing.case, case_version=failing.case_version, build=build,
        model=model, reference_arm=reference.arm, failing_arm=failing.arm,
        category=category_of(failing.failed, failing.families, failing.duplicates,
                             recall_required=failing.recall_required,
                             rationale=failing.rationale),
        evidence=IncidentEvidence(
            actions=list(range(len(failing.families))), verifier_failures=failing.failed,
            relevant_checkpoint_ids=[c for c in (reference.checkpoint, failing.checkpoint)
                                     if c is not None]))
