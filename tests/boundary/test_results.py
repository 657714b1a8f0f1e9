"""Boundary results per arm and compression incidents, from real offline runs of a small
case (the native arm sees the fact; an arm that drops it fails) and from hand-made
verdicts for every category rule."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pytest

from efold.boundary.actions import ActionRecord
from efold.boundary.case import load_case
from efold.boundary.incidents import category
from efold.boundary.oracles import OracleResult
from efold.boundary.validate import run_offline, without_history
from efold.report.boundary_results import boundary_results, judged_offline, judged_receipt
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
    (failed("tests-pass"), [action(0)], "rationale", "missing_rationale"),
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
                             recall: bool | str, expected: str) -> None:
    """``recall``: True for a required-recall case, "rationale" for a case expecting the
    rationale capability."""
    assert category(results, actions, recall_required=recall is True,
                    rationale=recall == "rationale") == expected


def test_every_category_in_the_closed_list_has_a_rule() -> None:
    from typing import get_args

    from efold.boundary.incidents import IncidentCategory

    said = {category(failed(*kinds), acts, recall_required=recall is True,
                     rationale=recall == "rationale")
            for kinds, acts, recall in [
                (("tests-pass",), [action(0, "recall")], True), (("tests-pass",), [], True),
                (("tests-pass",), [], "rationale"), (("file-unchanged",), [], False),
                (("tool-action-present",), [], False), (("state-key-equals",), [], False),
                (("recall-contains",), [], False), (("tests-pass",), [], False),
                (("failure-open",), [], False),
                (("x",), [action(0), action(1, duplicate=True)], False), (("x",), [], False)]}
    assert said == set(get_args(IncidentCategory))


def test_results_per_arm_and_an_incident_for_the_arm_that_lost(make_case: MakeCase) -> None:
    def scripted(data: dict[str, Any]) -> None:
        data["faux"] = SCRIPT
        data["source"]["critical"] = ["e0003"]

    case = load_case(make_case(scripted))
    native = run_offline(case, case.prefix, "native")
    blind = run_offline(case, without_history(case), "native")  # an arm that kept nothing
    assert native.passed is True and blind.passed is False
    blind = dataclasses.replace(blind, arm="blind")
    results = boundary_results([judged_offline(case, native), judged_offline(case, blind)],
                               ["native", "blind"], build="b" * 64)
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


def test_each_run_records_its_folds_against_the_cases_fold_repeat() -> None:
    """B08 is written for two successive folds (``fold.repeat: 2``): ``compaction``
    folds once, ``compaction-2`` twice, ``native`` never; the case-by-case table marks
    the runs whose checkpoint records fewer folds than the case asks for."""
    from efold.boundary.suite import bundled_cases_root
    from efold.report.boundary_table import _matrix

    case = load_case(bundled_cases_root() / "B08-repeated-leaf-folds")
    assert case.sidecar.fold.repeat == 2
    arms = ["native", "compaction", "compaction-2", "cold-rebuild"]
    outcomes = {arm: run_offline(case, case.prefix, arm) for arm in arms}
    assert {arm: o.folds for arm, o in outcomes.items()} == {
        "native": 0, "compaction": 1, "compaction-2": 2, "cold-rebuild": 1}
    results = boundary_results([judged_offline(case, o) for o in outcomes.values()], arms,
                               build="b" * 64)
    assert {r.arm: (r.repeat, r.folds) for r in results.runs} == {
        "native": (2, 0), "compaction": (2, 1), "compaction-2": (2, 2), "cold-rebuild": (2, 1)}
    table = _matrix(results)
    [row] = table.rows
    cells = dict(zip(table.headers[1:], row[1:], strict=True))
    assert cells["compaction-2"] == "pass" and cells["native"] == "pass"  # native never folds
    assert cells["compaction"].endswith("(1 of 2 folds)")
    assert cells["cold-rebuild"] == "FAIL (1 of 2 folds)"
    assert table.legend and "fold.repeat" in table.legend[0][1]


def test_an_excluded_slot_is_never_judged() -> None:
    from efold.protocol.records import BoundaryRecord, Exclusion, Receipt, SlotStatus

    record = BoundaryRecord(case="B01", case_version=1, passed=False, ending="final",
                            tokens=100, folds=0)
    receipt = Receipt(slot="s1", role="restart", arm="restart-switch-compact",
                      trace_id="B01", probe_id="B01", category="boundary", repeat=1,
                      status=SlotStatus.COMPLETED, boundary=record)
    judged = judged_receipt(receipt)
    assert judged is not None and judged.passed is False
    # Its boundary was not crossed: neither a pass nor a failure, and no incident.
    excluded = msgspec.structs.replace(receipt, excluded=Exclusion.BOUNDARY_UNVERIFIED)
    assert judged_receipt(excluded) is None
