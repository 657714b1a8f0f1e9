"""The boundary probe body: an agent works on a workspace copy after the fold.

Registered as the ``boundary`` probe body (``worker.bodies``). It restores the verified
checkpoint exactly as the reader does (``ReaderProbe.restore``), then:

1. loads the case named by its ``BoundaryTask`` and checks its tree digest against the
   task's (``worker_digest_mismatch`` otherwise): nothing of a changed case is used;
2. copies the case's workspace fixture into ``<slot_dir>/workspace``, the only
   workspace this run touches;
3. runs the agent loop (``boundary.agent_loop``) on the route's wire format, every
   request through the guard (admit, consume, one send, settle) under the campaign's
   cap and ``budgets.max_requests``; the workspace tools the case allows and, when the
   checkpoint offers them, the metered history tools. On the faux route the model is
   the case's faux agent, which sees exactly the payload the guard admitted;
4. writes its work record (``boundary.work``) and names its sha256 in the ``Terminal``.

It judges nothing: the controller evaluates the case's oracles after this process has
exited (``controller.pilot.boundary_slots``). A run that ends by the agent (an answer, no
output, the action limit, the request limit) is ``answered``; a lost request, an
integrity stop or another refusal ends it as the reader's would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from efold.errors import Code
from efold.ipc.messages import Terminal, TerminalStatus
from efold.protocol.tasks import BoundaryTask
from efold.worker.errors import WorkerError
from efold.worker.reader import ReaderProbe, append_round, route_payload, run_witness, terminal_of
from efold.worker.session import ProbeSession

WORKSPACE_DIR = "workspace"


class BoundaryProbe(ReaderProbe):
    """Registered as the ``boundary`` probe body."""

    def run(self, session: ProbeSession) -> Terminal:
        from efold.boundary.actions import ActionLog
        from efold.boundary.agent_loop import INSTRUCTIONS, agent_tools, run_agent
        from efold.boundary.case import load_case
        from efold.boundary.errors import BoundaryError
        from efold.boundary.faux_agent import faux_agent
        from efold.boundary.work import work_record, write_work
        from efold.boundary.workspace import Workspace, copy_fixture
        from efold.folds.meter import Meter
        from efold.folds.request import offer_tools
        from efold.worker.credential import credential
        from efold.worker.permit_client import SessionPermitSource
        from efold.worker.route import FAUX_PROVIDER, route_guard

        assignment = session.assignment
        task = assignment.task
        if not isinstance(task, BoundaryTask) or assignment.cache_key is None:
            raise WorkerError(Code.WORKER_USAGE, "a boundary child needs a boundary task")
        try:
            case = load_case(Path(task.case_dir))
        except BoundaryError as exc:
            raise WorkerError(Code.WORKER_DIGEST_MISMATCH, exc.code.value) from exc
        if case.sha256 != task.case_sha256:
            raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "the case changed since registration")
        sidecar = case.sidecar
        root = Path(assignment.slot_dir) / WORKSPACE_DIR
        copy_fixture(case.workspace, root)
        test = sidecar.tools.test
        commands = [list(c) for c in test.commands] if test is not None else []
        workspace = Workspace(root, allowed_commands=commands, edit=sidecar.tools.edit,
                              timeout_s=float(test.timeout_seconds) if test else 60.0)
        restored = self._restored
        budgets = session.welcome.budgets
        lookup = restored.lookup_tool(Meter(call_budget=budgets.meter_calls,
                                            byte_budget=budgets.meter_bytes))
        route = task.route
        tools = agent_tools(restored.checkpoint, edit=sidecar.tools.edit, test=bool(commands))
        script = sidecar.faux
        if route.provider == FAUX_PROVIDER and script is None:
            raise WorkerError(Code.WORKER_USAGE, "the faux route needs the case's faux script")
        source = SessionPermitSource(session)
        guard = route_guard(route, source, run_id=assignment.slot,
                            deadline_s=session.welcome.deadlines.run_ms / 1000,
                            cache_key=assignment.cache_key, credential=credential(),
                            tools=[t["name"] for t in tools],
                            responder=faux_agent(script) if script is not None else None)
        payload = route_payload(restored.checkpoint, "\n\n".join(sidecar.continuation.input),
                                instructions=INSTRUCTIONS, route=route,
                                cache_key=assignment.cache_key)
        payload.update(offer_tools(tools, route.api))
        rounds: list[dict[str, Any]] = []
        ended: list[tuple[str, Code | None]] = []  # the request that did not settle

        def send(request: dict[str, Any]) -> list[dict[str, Any]] | None:
            result = guard.request(request)
            rounds.append({"outcome": result.outcome.value,
                           "code": result.code.value if result.code else None})
            if not result.ok:
                ended.append((result.outcome.value, source.stop_code or result.code))
                return None
            return list(result.output_items)

        run = run_agent(send, payload, workspace, lookup,
                        ActionLog((r.family for r in sidecar.behavior.duplicate_rules),
                                  workspace_root=root),
                        max_actions=sidecar.continuation.max_actions,
                        store_version=restored.manifest.content_digest,
                        append=lambda p, calls, outputs, text: append_round(
                            p, calls, outputs, api=route.api, text=text))
        status, code = TerminalStatus.ANSWERED, None
        if ended:
            outcome, why = ended[0]
            if outcome == "refused" and why is Code.LOOKUP_REQUEST_LIMIT:
                run.ending = "request_limit"  # the agent's budget ran out: its work stands
            else:
                status, code = terminal_of(outcome, why)
        work_sha256 = write_work(Path(assignment.slot_dir), work_record(run))
        meter, witness = run_witness(lookup, {"rounds": rounds, "work": work_sha256})
        return Terminal(status=status, code=code, answer=run.final_text, meter=meter,
                        witness=witness, work_sha256=work_sha256)
