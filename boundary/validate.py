"""One offline run of a case, and the proof that a case is valid (docs/boundary.md §7).

``run_offline`` folds the case's session with a built-in arm in this process, copies the
workspace into a private directory, runs the continuation with the faux agent (the case's
``faux`` script) answering directly, and evaluates the oracles on the run and on the
checkpoint's declared state (``folds.declared.declared_state``: for a built-in arm, the
last ``handoff_state`` record its checkpoint keeps visible, or none). Built-in arms
only: a plugin or command fold runs only in a contained child, never here.
A case whose commands cannot run here (``boundary.runner_check``: the test runner is
not installed) refuses (``boundary_runner_unavailable``) before it is run, never judged.

``ablation`` runs it three times on the native arm, and a case is valid only when the
history decides the outcome:

* **full**: the whole pre-fold session; every oracle must pass;
* **no history**: the session replaced by one neutral owner message; some oracle must fail;
* **counterfactual**: the events of ``source.critical`` deleted (a deleted tool result
  takes its call with it); some oracle must fail.

Otherwise the case refuses (``boundary_case_invalid``), naming the run that did not
behave. Before any run, ``recall_problem`` refuses a required-recall case whose answer
is still on the surface of the cold boundary's checkpoint: no arm would need to recall it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec

from efold.boundary.agent_loop import AgentRun
from efold.boundary.case import Case
from efold.boundary.continuation import continuation_timeout, continue_case, restart_bound
from efold.boundary.errors import BoundaryError
from efold.boundary.oracles import Evidence, OracleResult, evaluate_all, passed
from efold.boundary.restart import Restarted, continue_restarted
from efold.boundary.runner import run_contained
from efold.boundary.runner_check import require_runners
from efold.boundary.workspace import copy_fixture
from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.checkpoint import folds_recorded
from efold.folds.declared import declared_state
from efold.folds.errors import FoldError
from efold.folds.fold import TracePrefix
from efold.folds.regime import fold_case
from efold.folds.registry import BUILTIN_ARMS
from efold.folds.snapshot import content_digest
from efold.folds.store import HistoryStore
from efold.protocol.regime import Regime

NO_HISTORY_TEXT: Final = "This is the start of our work together; there is no earlier history."

Variant = Literal["full", "no_history", "counterfactual"]


@dataclass(frozen=True)
class CaseOutcome:
    """One run of a case: what the agent did and what the oracles said."""

    arm: str
    run: AgentRun
    results: list[OracleResult]
    passed: bool | None
    checkpoint: str  # the content digest of the checkpoint the agent resumed from
    folds: int  # the folds its receipt records (``folds.checkpoint.folds_recorded``)
    # A required-recall case whose answer that checkpoint shows (``Case.shows_answer``):
    # the run is excluded (``recall_answer_visible``), never scored.
    answer_shown: bool = False
    # A case that restarts (``fold.restart``): the new process that ran the continuation.
    restarted: Restarted | None = None


@dataclass(frozen=True)
class Ablation:
    """The three runs of ``ablation`` and whether they prove the case valid."""

    full: CaseOutcome
    no_history: CaseOutcome
    counterfactual: CaseOutcome

    @property
    def problem(self) -> str | None:
        """Why the case is invalid, or None when it is valid."""
        if self.full.passed is not True:
            return "with the full history the faux agent does not pass every oracle"
        if self.no_history.passed is not False:
            return "with the history removed the outcome does not change"
        if self.counterfactual.passed is not False:
            return "with the critical events deleted the outcome does not change"
        return None


def run_offline(case: Case, events: list[Event], arm: str = "native", *,
                regime: Regime | None = None) -> CaseOutcome:
    """Fold ``events`` with the built-in ``arm`` in the case's regime (``regime``: another;
    the no-history run has no sessions to rebase), run the faux agent (in a new process
    when the case restarts: ``boundary.restart``), judge (module docstring). Everything
    it writes is in a temporary directory, removed after."""
    require_runners([case])  # a verdict of a check that cannot run is no verdict
    if arm not in BUILTIN_ARMS:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{arm!r} is not a built-in arm (offline runs use those only)")
    if case.sidecar.faux is None:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{case.id}: no faux script ($.faux) to run it offline")
    sidecar = case.sidecar
    try:
        chosen = sidecar.fold.regime if regime is None else regime
        checkpoint = fold_case(BUILTIN_ARMS[arm](),
                               TracePrefix(trace_id=case.trace.header.trace_id, events=events),
                               mode=chosen.mode, target=chosen.target)
    except FoldError as exc:
        raise BoundaryError(exc.code, f"{case.id}: {exc.detail}") from exc
    timeout = continuation_timeout(case)
    restarted: Restarted | None = None
    with tempfile.TemporaryDirectory(prefix="efold-boundary-") as tmp:
        root = Path(tmp) / "workspace"
        copy_fixture(case.workspace, root)
        if sidecar.fold.restart:
            run, restarted = continue_restarted(case.path, checkpoint, root,
                                                timeout_s=restart_bound(case))
        else:
            store = HistoryStore.build(checkpoint.store) if checkpoint.store is not None else None
            run = continue_case(case, checkpoint, root, store=store)
        evidence = Evidence(workspace=root, fixture=case.workspace, expected=case.expected,
                            actions=run.actions, recall_outputs=run.recall_outputs,
                            state=declared_state(checkpoint))

        def run_command(argv: list[str], cwd: Path) -> int:
            result = run_contained(argv, cwd, timeout_s=timeout)
            return -1 if result.exit_code is None else result.exit_code

        results = evaluate_all(sidecar.oracle.success, evidence, run_command)
    return CaseOutcome(arm=arm, run=run, results=results, passed=passed(results),
                       checkpoint=content_digest(checkpoint),
                       folds=folds_recorded(checkpoint.receipt),
                       answer_shown=case.shows_answer(checkpoint), restarted=restarted)


def without_history(case: Case) -> list[Event]:
    """The neutral one-message session of the no-history run."""
    first = case.prefix[0]
    return [Event(id="e0001", session=first.session, day=first.day, role="user",
                  content=NO_HISTORY_TEXT)]


def without_critical(case: Case) -> list[Event]:
    """The pre-fold events minus ``source.critical`` (a tool result with its call)."""
    critical = set(case.sidecar.source.critical)
    calls = {e.tool_call_id for e in case.prefix if e.id in critical and e.tool_call_id}
    kept: list[Event] = []
    for event in case.prefix:
        if event.id in critical:
            continue
        if event.tool_calls and calls:
            remaining = [c for c in event.tool_calls if c.id not in calls]
            if len(remaining) != len(event.tool_calls):
                if not remaining and not event.content:
                    continue
                event = msgspec.structs.replace(event, tool_calls=remaining or None)
        kept.append(event)
    return kept


def ablation(case: Case) -> Ablation:
    """The three runs (module docstring)."""
    if not case.sidecar.source.critical:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{case.id}: no critical events ($.source.critical) to delete")
    return Ablation(full=run_offline(case, case.prefix),
                    no_history=run_offline(case, without_history(case), regime=Regime()),
                    counterfactual=run_offline(case, without_critical(case)))


def require_recall_needed(cases: list[Case]) -> None:
    """Refuse (``boundary_case_invalid``) the first case ``recall_problem`` finds: before
    a run or a registration, so no request is paid for a case that cannot measure."""
    for case in cases:
        if (problem := recall_problem(case)) is not None:
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID, problem)


def recall_problem(case: Case) -> str | None:
    """Why a required-recall case is invalid before anything runs, or None: its answer
    is still on the surface of the cold boundary's checkpoint (``cold-rebuild``'s, the
    least a built-in fold that carries the work on shows), so no arm needs to recall
    it and the case cannot measure recall."""
    if not case.sidecar.recall.required:
        return None
    cold = BUILTIN_ARMS["cold-rebuild"]().build(
        TracePrefix(trace_id=case.trace.header.trace_id, events=case.prefix))
    if case.shows_answer(cold):
        return (f"{case.id}: the required recall answer ($.recall.answer) is visible in "
                "the cold boundary's checkpoint, so no arm needs to recall it")
    return None
