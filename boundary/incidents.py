"""Compression incidents: one arm fails a case another arm passes (docs/boundary.md §8).

An incident is evidence for a person, never an input to any fold: nothing in efold reads
one to change a policy. Its category is one of the protocol's closed list, chosen
deterministically from the failing run (the first rule that applies):

1. a required-recall case whose failing run made no recall: ``recall_not_triggered``;
   one that recalled and still failed: ``recall_failed``;
2. a failing ``forbidden-path-unchanged``, ``file-unchanged`` or ``tool-action-absent``
   oracle: ``authority_loss`` (a rule the owner set was not kept);
3. a failing ``tool-action-present`` oracle: ``missing_obligation``;
4. a failing ``file-equals`` or ``state-key-equals`` oracle: ``state_stale``;
5. a failing ``artifact-exists`` or ``recall-contains`` oracle: ``wrong_target``;
6. a failing ``tests-pass`` oracle: ``missing_evidence``;
7. a failing ``failure-open``/``failure-retired`` oracle: ``reopened_resolved_branch``;
8. a failing run with duplicate actions: ``duplicate_work``;
9. otherwise ``unknown``.

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


def category(results: Sequence[OracleResult], actions: Sequence[ActionRecord], *,
             recall_required: bool) -> IncidentCategory:
    """The failing run's category (module docstring)."""
    if recall_required:
        recalled = any(a.family == "recall" for a in actions)
        return "recall_failed" if recalled else "recall_not_triggered"
    failed = {r.type for r in results if r.verdict == "fail"}
    for types, found in _BY_ORACLE:
        if failed & types:
            return found
    if any(a.duplicate for a in actions):
        return "duplicate_work"
    return "unknown"


def incident(*, case_id: str, case_version: int, build: str, model: str | None,
             reference_arm: str, failing_arm: str, results: Sequence[OracleResult],
             actions: Sequence[ActionRecord], recall_required: bool,
             checkpoints: Sequence[str]) -> CompressionIncident:
    """The incident of ``failing_arm`` against ``reference_arm`` on one case."""
    return CompressionIncident(
        version=1, case_id=case_id, case_version=case_version, build=build, model=model,
        reference_arm=reference_arm, failing_arm=failing_arm,
        category=category(results, actions, recall_required=recall_required),
        evidence=IncidentEvidence(
            actions=[a.index for a in actions],
            verifier_failures=[r.type for r in results if r.verdict == "fail"],
            relevant_checkpoint_ids=list(checkpoints)))
