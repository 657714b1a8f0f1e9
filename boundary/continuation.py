"""The offline continuation of a case: the faux agent works on a workspace copy from a
checkpoint (``boundary run`` and ``validate``, in this process or, for a case that
restarts, in the new process ``boundary.restart`` starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from efold.boundary.actions import ActionLog
from efold.boundary.agent_loop import AgentRun, first_payload, run_agent, workspace_tools
from efold.boundary.case import Case
from efold.boundary.errors import BoundaryError
from efold.boundary.faux_agent import faux_agent
from efold.boundary.workspace import Workspace
from efold.errors import Code
from efold.folds.checkpoint import Checkpoint
from efold.folds.lookup import LookupTool
from efold.folds.snapshot import content_digest
from efold.folds.store import HistoryStore

FAUX_MODEL: Final = "faux-extractive-v1"


def continuation_timeout(case: Case) -> float:
    """What one command of the case may take (its test tool's timeout)."""
    test = case.sidecar.tools.test
    return float(test.timeout_seconds) if test is not None else 60.0


def restart_bound(case: Case) -> float:
    """What a restarted continuation may take: every action a test run."""
    return continuation_timeout(case) * case.sidecar.continuation.max_actions


def continue_case(case: Case, checkpoint: Checkpoint, root: Path, *,
                  store: HistoryStore | None) -> AgentRun:
    """The continuation of ``case`` from ``checkpoint`` on the workspace copy ``root``,
    the faux agent answering (``store``: the checkpoint's history store, rebuilt)."""
    sidecar = case.sidecar
    if sidecar.faux is None:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{case.id}: no faux script ($.faux) to run it offline")
    test = sidecar.tools.test
    commands = [list(c) for c in test.commands] if test is not None else []
    workspace = Workspace(root, allowed_commands=commands, timeout_s=continuation_timeout(case),
                          edit=sidecar.tools.edit)
    lookup = LookupTool(store) if store is not None else None
    log = ActionLog((r.family for r in sidecar.behavior.duplicate_rules), workspace_root=root)
    payload = first_payload(checkpoint, list(sidecar.continuation.input), model=FAUX_MODEL,
                            tools=workspace_tools(edit=sidecar.tools.edit, test=bool(commands)))
    return run_agent(faux_agent(sidecar.faux), payload, workspace, lookup, log,
                     max_actions=sidecar.continuation.max_actions,
                     store_version=content_digest(checkpoint))
