"""The bundled boundary cases (``boundary/cases/``, docs/boundary.md §8).

The whole corpus is checked structurally (cheap): it loads, the lock holds, the ids,
tiers and capabilities are the listed ones, the builder writes exactly the committed
bytes, every critical event carries the wording its first faux plan keys on and no other
event does, every hard case has a file or action oracle, the cold boundary loses the
critical fact, and the required-recall answers are out of the store arm's checkpoint but
reachable by the faux recall, and B12's state is declared only by the arm that keeps its
handoff record. The full validity proof (``--ablation``, about 10 s a case) runs for
three representative cases only (B12, the state oracles, among them);
``efold-controller boundary validate --ablation`` proves all of them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from efold.boundary.case import Case, case_digest, load_cases
from efold.boundary.lock import lock_problems
from efold.boundary.oracles import (
    ArtifactExists,
    FileChanged,
    FileEquals,
    FileUnchanged,
    ForbiddenPathUnchanged,
    ToolActionAbsent,
    ToolActionPresent,
)
from efold.boundary.validate import ablation, run_offline
from efold.corpus.model import Event
from efold.folds.checkpoint import visible_text
from efold.folds.declared import declared_state
from efold.folds.fold import TracePrefix
from efold.folds.registry import BUILTIN_ARMS

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "boundary" / "cases"
BUILDER = REPO / "scripts" / "build_boundary_cases.py"

# id -> (tier, expected capabilities)
EXPECTED: dict[str, tuple[str, list[str]]] = {
    "B01-explicit-api-constraint": ("hard", ["constraint-retention"]),
    "B02-supersession": ("hard", ["current-state"]),
    "B03-evidence-over-narrative": ("hard", ["empirical-authority"]),
    "B04-failure-verified": ("hard", ["failure-lifecycle"]),
    "B05-pending-obligation": ("hard", ["obligation-continuity"]),
    "B06-exact-identifier": ("hard", ["exact-recoverability"]),
    "B07-tool-transaction": ("hard", ["structural-legality"]),
    "B08-repeated-leaf-folds": ("hard", ["constraint-retention", "fold-frontier"]),
    "B09-root-rebase-old-value": ("hard", ["root-rebase"]),
    "B10-session-isolation": ("hard", ["session-isolation"]),
    "B11-restart": ("hard", ["state-handoff"]),
    "B12-state-only-checkpoint": ("hard", ["state-handoff"]),
    "X01-rejected-approach": ("exploratory", ["rejected-approach"]),
    "X02-uncertainty": ("exploratory", ["uncertainty"]),
    "X03-causal-dependency": ("exploratory", ["causal-dependency"]),
    "X04-long-distance-rationale": ("exploratory", ["rationale"]),
    "X05-search-evidence": ("exploratory", ["search-evidence"]),
    "X06-child-handoff": ("exploratory", ["child-handoff"]),
    "X07-required-recall-ticket": ("exploratory", ["durable-recall"]),
    "X08-required-recall-commit": ("exploratory", ["durable-recall"]),
    "X09-resume-rename-timeout": ("exploratory", ["exact-recoverability"]),
    "X10-resume-add-clamp": ("exploratory", ["exact-recoverability"]),
}
# Locked at v1 before the size rule; every later session stays under it.
OVERSIZED_LEGACY = {"B02-supersession"}
MAX_SESSION_BYTES = 60 * 1024
FILE_OR_ACTION = (FileEquals, FileUnchanged, FileChanged, ForbiddenPathUnchanged,
                  ArtifactExists, ToolActionAbsent, ToolActionPresent)


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    return {case.id: case for case in load_cases(BUNDLED)}


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def _texts(event: Event) -> str:
    """What a reader can see of an event: its content and its tool calls."""
    calls = [f"{c.function.name} {c.function.arguments}" for c in event.tool_calls or ()]
    return "\n".join([event.content, *calls])


def _checkpoint_text(case: Case, arm: str) -> str:
    checkpoint = BUILTIN_ARMS[arm]().build(
        TracePrefix(trace_id=case.trace.header.trace_id, events=case.prefix))
    return visible_text(checkpoint.messages)


def test_the_bundled_root_loads_and_the_lock_holds(cases: dict[str, Case]) -> None:
    assert lock_problems(BUNDLED, list(cases.values())) == []
    assert sorted(cases) == sorted(EXPECTED)


def test_ids_tiers_and_capabilities_are_the_listed_ones(cases: dict[str, Case]) -> None:
    found = {case_id: (c.sidecar.tier, list(c.sidecar.classification.expected_capability))
             for case_id, c in cases.items()}
    assert found == EXPECTED
    # B11 v2: the same case, now a real restart (fold.restart)
    assert {i: c.version for i, c in cases.items() if c.version != 1} == {"B11-restart": 2}


def test_the_builder_writes_exactly_the_committed_cases(tmp_path: Path,
                                                        cases: dict[str, Case]) -> None:
    done = subprocess.run([sys.executable, str(BUILDER), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    built = sorted(p.name for p in tmp_path.iterdir())
    assert built == sorted(cases)
    for case_id, case in cases.items():
        assert case_digest(tmp_path / case_id) == case.sha256, case_id


@pytest.mark.parametrize("case_id", sorted(EXPECTED))
def test_structure(cases: dict[str, Case], case_id: str) -> None:
    case = cases[case_id]
    sidecar = case.sidecar
    assert sidecar.faux is not None
    plans = sidecar.faux.plans
    assert plans[-1].when is None and all(p.when for p in plans[:-1])
    assert sidecar.faux.recall
    # The critical events exist before the boundary, and only they carry the wording
    # the informed plan keys on: deleting them is what the counterfactual run tests.
    critical = set(sidecar.source.critical)
    assert critical
    prefix_ids = {e.id for e in case.prefix}
    assert critical <= prefix_ids
    when = _fold(plans[0].when or "")
    carriers = {e.id for e in case.prefix if when in _fold(_texts(e))}
    assert carriers and carriers <= critical, carriers
    if sidecar.tier == "hard":
        assert any(isinstance(o, FILE_OR_ACTION) for o in sidecar.oracle.success)
    if case_id not in OVERSIZED_LEGACY:
        assert (case.path / sidecar.source.session).stat().st_size < MAX_SESSION_BYTES
    # The stretch after the critical fact does its job: the cold boundary loses it, and
    # the compaction arm actually folds.
    assert when not in _fold(_checkpoint_text(case, "cold-rebuild"))
    compacted = BUILTIN_ARMS["compaction"]().build(
        TracePrefix(trace_id=case.trace.header.trace_id, events=case.prefix))
    assert compacted.receipt.boundary.verified


def test_b08_folds_twice_and_b09_is_a_root_fold(cases: dict[str, Case]) -> None:
    b08 = cases["B08-repeated-leaf-folds"]
    assert (b08.sidecar.fold.mode, b08.sidecar.fold.repeat) == ("leaf", 2)
    assert len({e.session for e in b08.prefix}) == 3
    twice = BUILTIN_ARMS["compaction-2"]().build(
        TracePrefix(trace_id=b08.trace.header.trace_id, events=b08.prefix))
    assert len(twice.receipt.compactions) == 2
    b09 = cases["B09-root-rebase-old-value"]
    assert b09.sidecar.fold.mode == "root"
    assert len({e.session for e in b09.prefix}) == 5
    critical = {e.id: e.session for e in b09.prefix}[b09.sidecar.source.critical[0]]
    assert critical == 1


@pytest.mark.parametrize("case_id", ["X07-required-recall-ticket",
                                     "X08-required-recall-commit"])
def test_a_required_answer_is_recalled_not_shown(cases: dict[str, Case],
                                                  case_id: str) -> None:
    case = cases[case_id]
    answer = case.sidecar.recall.answer
    assert case.sidecar.recall.required and answer
    assert answer not in _checkpoint_text(case, "store")
    outcome = run_offline(case, case.prefix, "store")
    assert outcome.passed is True, outcome.results
    assert any(answer in out.text for out in outcome.run.recall_outputs)
    assert outcome.run.actions[0].family == "recall"


def test_b12_only_a_checkpoint_that_keeps_the_handoff_record_declares_its_state(
        cases: dict[str, Case]) -> None:
    """B12's critical fact is a machine handoff record and nothing else: no reply
    restates it. native declares it (and passes every oracle); cold-rebuild declares
    nothing and fails; compaction's summary quotes the record, so the faux agent gets
    the workspace right, but a quote declares no state: its state oracles are
    not_applicable and the run is never counted as a pass."""
    case = cases["B12-state-only-checkpoint"]
    (critical,) = case.sidecar.source.critical
    record = next(e for e in case.prefix if e.id == critical)
    assert record.role == "tool" and record.name == "handoff_state"
    state_types = {"state-key-equals", "anchor-active", "obligation-open"}
    prefix = TracePrefix(trace_id=case.trace.header.trace_id, events=case.prefix)
    native = declared_state(BUILTIN_ARMS["native"]().build(prefix))
    assert native is not None and native.keys["release/version"] == "0.4.1"
    for arm in ("cold-rebuild", "compaction", "store", "pack"):
        assert declared_state(BUILTIN_ARMS[arm]().build(prefix)) is None, arm
    compaction = run_offline(case, case.prefix, "compaction")
    assert compaction.passed is None
    assert {r.type for r in compaction.results if r.verdict == "not_applicable"} == state_types
    assert all(r.verdict == "pass" for r in compaction.results if r.type not in state_types)
    cold = run_offline(case, case.prefix, "cold-rebuild")
    assert cold.passed is False


@pytest.mark.parametrize("case_id", ["B03-evidence-over-narrative", "B07-tool-transaction",
                                     "B12-state-only-checkpoint"])
def test_ablation_proves_representative_cases(cases: dict[str, Case], case_id: str) -> None:
    proof = ablation(cases[case_id])
    assert proof.problem is None
    assert proof.full.passed is True
    assert proof.no_history.passed is False and proof.counterfactual.passed is False


def test_only_runs_that_needed_recall_count_in_the_trigger_rate(cases: dict[str, Case]) -> None:
    """X07's answer is in native's checkpoint, so native's run is excluded
    (``recall_answer_visible``: never scored, not in the Recall Trigger Rate); store's
    and cold-rebuild's checkpoints lack it: store recalled, cold-rebuild did not. As the
    reference, native's run still stands: cold-rebuild lost what it had."""
    from efold.report.boundary_results import boundary_results, judged_offline
    from efold.report.schema import ExcludedRun

    case = cases["X07-required-recall-ticket"]
    arms = ["native", "store", "cold-rebuild"]
    runs = [judged_offline(case, run_offline(case, case.prefix, arm)) for arm in arms]
    assert [r.excluded for r in runs] == ["recall_answer_visible", None, None]
    results = boundary_results(runs, arms, build="b")
    by_arm = {s.arm: s for s in results.arms}
    assert by_arm["native"].recall_trigger is None and by_arm["native"].passed.trials == 0
    assert by_arm["store"].recall_trigger is not None
    assert (by_arm["store"].recall_trigger.successes, by_arm["store"].recall_trigger.trials) \
        == (1, 1)
    assert by_arm["cold-rebuild"].recall_trigger is not None
    assert by_arm["cold-rebuild"].recall_trigger.successes == 0
    assert [(r.case, r.arm) for r in results.runs] == [(case.id, "store"),
                                                       (case.id, "cold-rebuild")]
    assert results.excluded == [ExcludedRun(case=case.id, case_version=case.version,
                                            arm="native", excluded="recall_answer_visible")]
    assert results.cases == [f"{case.id}@{case.version}"]
    assert [(i.failing_arm, i.category) for i in results.incidents] == [
        ("cold-rebuild", "recall_not_triggered")]


def test_x04_a_lost_rationale_is_missing_rationale(cases: dict[str, Case]) -> None:
    """X04 expects the rationale capability: the incident of the arm that fails it is
    ``missing_rationale``, whatever oracle it failed."""
    from efold.report.boundary_results import boundary_results, judged_offline

    case = cases["X04-long-distance-rationale"]
    runs = [judged_offline(case, run_offline(case, case.prefix, arm))
            for arm in ("native", "cold-rebuild")]
    results = boundary_results(runs, ["native", "cold-rebuild"], build="b")
    assert [(i.failing_arm, i.category) for i in results.incidents] == [
        ("cold-rebuild", "missing_rationale")]
