"""Boundary results per arm and compression incidents, from real offline runs of a small
case (the native arm sees the fact; an arm that drops it fails) and from hand-made
verdicts for every category rule."""

from __future__ import annotations

from typing import Any

import pytest

from efold.boundary.actions import ActionRecord
from efold.boundary.case import load_case
from efold.boundary.incidents import category
from efold.boundary.oracles import OracleResult
from efold.boundary.validate import run_offline, without_history
from efold.report.boundary_results import boundary_results
from tests.boundary.conftest import TEST_COMMAND, MakeCase

SCRIPT = {"plans": [
    {"when": "bulk threshold of 20", "actions": [
        {"tool": "workspace_edit", "arguments": {"path": "src/shop/pricing.py",
                                                 "old": "BULK_THRESHOLD = 10",
                                                 "new": "BULK_THRESHOLD = 20"}},
        {"tool": "workspace_test", "arguments": {"command": TEST_COMMAND}}]},
    {"actions": [{"tool": "workspace_read", "arguments": {"path": "src/shop/pricing.py"}},
                 {"tool": "workspace_read", "arguments": {"path": "src/shop/pricing.py"}}]}]}


def action(index: int, family: str = "read", duplicate: bool = False) -> ActionRecord:
    return ActionRecord(index=index, family=family, tool="t", args="{}",  # type: ignore[arg-type]
                        args_sha256="0" * 64, duplicate=duplicate)


def failed(*types: str) -> list[OracleResult]:
    return [OracleResult(t, "fail", "x") for t in types] + [OracleResult("tests-pass", "pass", "")]


@pytest.mark.parametrize(("results", "actions", "recall", "expected"), [
    (failed("tests-pass"), [action(0, "recall")], True, "recall_failed"),
    (failed("tests-pass"), [action(0)], True, "recall_not_triggered"),
    (failed("forbidden-path-unchanged", "file-equals"), [], False, "authority_loss"),
    (failed("tool-action-absent"), [], False, "authority_loss"),
    (failed("tool-action-present"), [], False, "missing_obligation"),
    (failed("file-equals"), [], False, "state_stale"),
    (failed("artifact-exists"), [], False, "wrong_target"),
    (failed("tests-pass"), [], False, "missing_evidence"),
    (failed("failure-retired"), [], False, "reopened_resolved_branch"),
    (failed("no-cross-session-recall"), [action(0), action(1, duplicate=True)], False,
     "duplicate_work"),
    (failed("no-cross-session-recall"), [action(0)], False, "unknown"),
])
def test_every_category_rule(results: list[OracleResult], actions: list[ActionRecord],
                             recall: bool, expected: str) -> None:
    assert category(results, actions, recall_required=recall) == expected


def test_results_per_arm_and_an_incident_for_the_arm_that_lost(make_case: MakeCase) -> None:
    def scripted(data: dict[str, Any]) -> None:
        data["faux"] = SCRIPT
        data["source"]["critical"] = ["e0003"]

    case = load_case(make_case(scripted))
    native = run_offline(case, case.prefix, "native")
    blind = run_offline(case, without_history(case), "native")  # an arm that kept nothing
    assert native.passed is True and blind.passed is False
    outcomes = {(case.id, "native"): native, (case.id, "blind"): blind}
    results = boundary_results([case], ["native", "blind"], outcomes, build="b" * 64)
    assert results.cases == [f"{case.id}@1"] and results.reference_arm == "native"
    by_arm = {s.arm: s for s in results.arms}
    assert (by_arm["native"].passed.successes, by_arm["native"].passed.trials) == (1, 1)
    assert (by_arm["blind"].passed.successes, by_arm["blind"].passed.trials) == (0, 1)
    assert by_arm["blind"].duplicates == 1 and by_arm["blind"].duplicate_rate == 0.5
    assert by_arm["native"].recall_trigger is None  # no required-recall case
    # tokens per task: every request the agent sent after the fold and every reply
    native_tokens = native.run.input_tokens + native.run.output_tokens
    assert native.run.requests == 3 and native_tokens > native.run.input_tokens > 0
    assert by_arm["native"].tokens_per_task_median == native_tokens
    assert by_arm["native"].tokens_per_pass == native_tokens
    assert by_arm["blind"].tokens_per_pass is None  # no pass
    [contrast] = results.contrasts
    assert (contrast.counts.pairs, contrast.counts.b, contrast.counts.c) == (1, 1, 0)
    [found] = results.incidents
    assert (found.case_id, found.reference_arm, found.failing_arm) == (case.id, "native",
                                                                       "blind")
    assert found.category == "state_stale"  # it never edited: file-equals failed
    assert found.evidence.actions == [0, 1]
    assert found.evidence.relevant_checkpoint_ids == [native.checkpoint, blind.checkpoint]
