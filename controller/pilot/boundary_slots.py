"""Judging a boundary slot: the case's oracles, evaluated by the controller.

A boundary slot runs like a question slot (a prep child folds the case's session, a
probe child restores the checkpoint), but its child is the ``boundary`` body: an agent
works on ``<slot_dir>/workspace`` and writes its work record (``boundary.work``). The
slot is judged here, in the controller, only **after that child has exited and been
contained**, so nothing of the agent can touch what is judged:

* the case is loaded again and must still have the registered digest
  (``boundary_case_changed`` otherwise, and nothing is judged);
* the work record must be the one the child's terminal named (``boundary_work_invalid``
  otherwise, and nothing is judged: no verdict rests on a claim that does not hold);
* every oracle of the case is evaluated (``boundary.oracles.evaluate_all``) on the final
  workspace, the fixture, the expected files, the action log and recall outputs of the
  work record, and the state the fold declared in its checkpoint; a ``tests-pass``
  oracle runs its command contained (``boundary.runner.run_contained``) in the final
  workspace.

The verdicts go into the receipt content-free (``protocol.records.BoundaryRecord``):
oracle types and verdicts, action families and argument hashes, how the loop ended, its
requests and tokens, the environment identity's digest. The work record itself stays in
the slot directory as evidence; reports never read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from efold.boundary.agent_loop import INSTRUCTIONS, workspace_tools
from efold.boundary.case import Case, load_case, needs_rationale
from efold.boundary.errors import BoundaryError
from efold.boundary.identity import RouteIdentity, environment_identity, identity_digest
from efold.boundary.oracles import DeclaredState, Evidence, evaluate_all, passed
from efold.boundary.runner import run_contained
from efold.boundary.work import read_work
from efold.errors import Code
from efold.folds.checkpoint import Checkpoint, folds_recorded
from efold.folds.declared import declared_state
from efold.folds.lookup import lookup_tool_schemas
from efold.protocol.records import ActionMark, BoundaryRecord, OracleVerdict
from efold.protocol.tasks import BoundaryTask, Route
from efold.worker.boundary_body import WORKSPACE_DIR


@dataclass(frozen=True)
class CheckpointFacts:
    """What judging needs of the checkpoint a boundary slot resumed from, read by the
    controller from the verified snapshot: whether it offers the history tools, the
    state its fold declared (None: none) and the folds its receipt records."""

    history_tools: bool
    state: DeclaredState | None
    folds: int


def checkpoint_facts(checkpoint: Checkpoint) -> CheckpointFacts:
    return CheckpointFacts(history_tools=bool(checkpoint.tools),
                           state=declared_state(checkpoint),
                           folds=folds_recorded(checkpoint.receipt))


def boundary_task(case: Case, route: Route) -> BoundaryTask:
    return BoundaryTask(case_dir=str(case.path), case_sha256=case.sha256, route=route)


def _not_judged(case: Case, code: Code) -> BoundaryRecord:
    return BoundaryRecord(case=case.id, case_version=case.version, passed=None,
                          recall_required=case.sidecar.recall.required,
                          rationale=needs_rationale(case),
                          repeat=case.sidecar.fold.repeat, code=code.value,
                          case_sha256=case.sha256)


def judge_boundary(case: Case, slot_dir: Path, work_sha256: str | None,
                   facts: CheckpointFacts, route: Route, *, real: bool) -> BoundaryRecord:
    """The slot's judgement (module docstring). Blocking: tests run here."""
    try:
        if load_case(case.path).sha256 != case.sha256:
            return _not_judged(case, Code.BOUNDARY_CASE_CHANGED)
    except BoundaryError:
        return _not_judged(case, Code.BOUNDARY_CASE_CHANGED)
    try:
        work = read_work(slot_dir, work_sha256)
    except BoundaryError as exc:
        return _not_judged(case, exc.code)
    sidecar = case.sidecar
    test = sidecar.tools.test
    timeout = float(test.timeout_seconds) if test is not None else 60.0

    def run_command(argv: list[str], cwd: Path) -> int:
        result = run_contained(argv, cwd, timeout_s=timeout)
        return -1 if result.exit_code is None else result.exit_code

    evidence = Evidence(workspace=slot_dir / WORKSPACE_DIR, fixture=case.workspace,
                        expected=case.expected, actions=work.actions,
                        recall_outputs=work.recall_outputs, state=facts.state)
    try:
        results = evaluate_all(sidecar.oracle.success, evidence, run_command)
    except BoundaryError as exc:  # an oracle path the final workspace makes unusable
        return _not_judged(case, exc.code)
    catalog = workspace_tools(edit=sidecar.tools.edit, test=test is not None) + (
        lookup_tool_schemas() if facts.history_tools else [])
    identity = environment_identity(
        case, tool_catalog=catalog, system_prompt=INSTRUCTIONS, real=real,
        route=RouteIdentity(provider=route.provider, model=route.model, api=route.api,
                            effort=route.effort))
    return BoundaryRecord(
        case=case.id, case_version=case.version, passed=passed(results),
        oracles=[OracleVerdict(type=r.type, verdict=r.verdict) for r in results],
        actions=[ActionMark(family=a.family, args_sha256=a.args_sha256,
                            duplicate=a.duplicate, duplicate_of=a.duplicate_of)
                 for a in work.actions],
        ending=work.ending, requests=work.requests, tokens=work.tokens,
        recall_required=sidecar.recall.required, rationale=needs_rationale(case),
        environment_sha256=identity_digest(identity), repeat=sidecar.fold.repeat,
        folds=facts.folds, case_sha256=case.sha256)
