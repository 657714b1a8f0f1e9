"""The probe body: restore the verified checkpoint, then run the reader loop.

One probe run (docs/architecture.md §8): the first request is the checkpoint plus the probe question;
every model request goes through the guard (admit → consume → one send → settle over
IPC to the controller's durable source); a ``function_call`` for a history tool is
served by the metered lookup tool and appended with its output; the first reply without
a tool call is the answer. At most ``max_requests`` rounds.

The faux provider is the extractive reader behind ``FauxTransport``: it sees exactly the
payload the guard admitted, so its answers measure what the fold kept, not model quality.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import msgspec

from efold.errors import Code
from efold.ipc.messages import HttpEvidence, JudgeReading, MeterReading, Terminal, TerminalStatus
from efold.protocol.assignment import Assignment
from efold.protocol.tasks import ProbeTask, Route
from efold.worker.errors import WorkerError
from efold.worker.route import reply_text
from efold.worker.session import ProbeSession
from efold.worker.verify import verify_digests

if TYPE_CHECKING:
    from efold.folds.checkpoint import Checkpoint
    from efold.folds.lookup import LookupTool
    from efold.guard.contract import Contract
    from efold.guard.request import GuardResult

def _task(assignment: Assignment) -> ProbeTask:
    task = assignment.task
    if not isinstance(task, ProbeTask):
        raise WorkerError(Code.WORKER_USAGE, "a probe child needs a probe task")
    return task


def verify_journaled_assignment(assignment: Assignment, snapshot_digest: str) -> None:
    """``lookup_cache_assignment_invalid`` unless the controller journaled exactly this
    slot's cache key and snapshot before the launch, and no other slot has the key: the
    child reads the acknowledgement from disk itself, not from the pipe alone."""
    from efold.errors import EfoldError
    from efold.worker.run_journal import run_journal

    try:
        journal = run_journal(assignment.run_dir)
        mine = journal.rows("assignments", "slot = ?", (assignment.slot,))
        same_key = journal.rows("assignments", "cache_key = ?", (assignment.cache_key,))
    except EfoldError as exc:
        raise WorkerError(Code.LOOKUP_CACHE_ASSIGNMENT_INVALID, exc.code.value) from exc
    if len(mine) != 1 or len(same_key) != 1 or mine[0]["kind"] != "probe" \
            or mine[0]["cache_key"] != assignment.cache_key \
            or mine[0]["snapshot_digest"] != snapshot_digest:
        raise WorkerError(Code.LOOKUP_CACHE_ASSIGNMENT_INVALID, "not the journaled assignment")


class ReaderProbe:
    """Registered as the ``reader`` probe body."""

    def __init__(self) -> None:
        self._restored: Any = None

    def restore(self, assignment: Assignment) -> str:
        """Verify the assigned snapshot and restore its checkpoint in this process's
        memory: the reader reads nothing else of it, so no copy is written to the slot
        directory (the pristine snapshot is the controller's, opened read-only)."""
        from efold.folds.errors import FoldError
        from efold.folds.snapshot import read_checkpoint

        verify_digests(assignment)
        snapshot = assignment.snapshot
        if snapshot is None:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, "no snapshot assigned")
        verify_journaled_assignment(assignment, snapshot.digest)
        try:
            self._restored = read_checkpoint(snapshot.path, expected_digest=snapshot.digest)
        except FoldError as exc:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, exc.code.value) from exc
        return str(self._restored.manifest.digest)

    def run(self, session: ProbeSession) -> Terminal:
        from efold.folds.meter import Meter
        from efold.guard import HISTORY_TOOLS
        from efold.worker.credential import credential
        from efold.worker.permit_client import SessionPermitSource
        from efold.worker.route import route_guard

        assignment = session.assignment
        task = _task(assignment)
        budgets = session.welcome.budgets
        restored = self._restored
        meter = Meter(call_budget=budgets.meter_calls, byte_budget=budgets.meter_bytes)
        lookup = restored.lookup_tool(meter)
        if assignment.cache_key is None:  # read_key_pipe refuses such a probe assignment
            raise WorkerError(Code.WORKER_KEY_INVALID, "a probe assignment without a cache key")
        source = SessionPermitSource(session)
        # Our own deadline per request: the controller's watchdog allows a margin beyond
        # it, so a slow request ends as our own abort (settled), not as a killed worker.
        guard = route_guard(task.route, source, run_id=assignment.slot,
                            deadline_s=session.welcome.deadlines.run_ms / 1000,
                            cache_key=assignment.cache_key, credential=credential(),
                            tools=HISTORY_TOOLS)
        payload = first_payload(restored.checkpoint, task, assignment.cache_key)
        rounds: list[dict[str, Any]] = []
        status: TerminalStatus = TerminalStatus.REFUSED
        code: Code | None = Code.LOOKUP_REQUEST_LIMIT
        answer = ""
        http: HttpEvidence | None = None
        for _ in range(budgets.max_requests + 1):  # the extra round meets the limit refusal
            result = guard.request(payload)
            rounds.append({"outcome": result.outcome.value,
                           "code": result.code.value if result.code else None})
            if not result.ok:
                status, code = terminal_of(result.outcome.value, source.stop_code or result.code)
                http = http_evidence(result)
                break
            calls = [i for i in result.output_items if i.get("type") == "function_call"]
            if not calls:
                answer = reply_text(result.output_items)
                if answer:
                    status, code = TerminalStatus.ANSWERED, None
                else:
                    status, code = TerminalStatus.FAILED, Code.LOOKUP_EMPTY_FINAL_OUTPUT
                break
            if lookup is None:
                status, code = TerminalStatus.FAILED, Code.LOOKUP_TOOLS_FORBIDDEN
                break
            outputs = [lookup.call(str(c.get("name")), str(c.get("arguments", ""))) for c in calls]
            append_round(payload, calls, outputs, api=task.route.api,
                         text=reply_text(result.output_items))
        meter_reading, witness = run_witness(lookup, {"rounds": rounds})
        judged = None
        if task.judge is not None and status is TerminalStatus.ANSWERED:
            judged = ask_judge_after(session, task, answer)
        return Terminal(status=status, code=code, answer=answer, meter=meter_reading,
                        witness=witness, judge=judged, http=http)


def http_evidence(result: GuardResult) -> HttpEvidence | None:
    """What a non-2xx answer that ended the run says about why (None for any other
    end): the guard's reading, already sanitised (``guard.wire.failure``)."""
    failure = result.http_failure
    if failure is None:
        return None
    return HttpEvidence(status=failure.status, kind=failure.kind.value, excerpt=failure.excerpt)


def run_witness(lookup: LookupTool | None, doc: dict[str, Any]) -> tuple[MeterReading, str]:
    """The lookup meter's reading and the run's witness: the sha256 of ``doc`` (what
    the run did, content-free) with the meter's own witness added when it has one."""
    calls_made = bytes_used = 0
    abort_cause: Code | None = None
    if lookup is not None:
        w = lookup.witness()
        calls_made, bytes_used = w.calls, w.bytes
        abort_cause = None if w.abort_cause is None else Code(w.abort_cause)
        doc = {**doc, "meter": msgspec.to_builtins(w)}
    witness = hashlib.sha256(msgspec.json.encode(doc, order="sorted")).hexdigest()
    return MeterReading(calls=calls_made, bytes=bytes_used, abort_cause=abort_cause), witness


def ask_judge_after(session: ProbeSession, task: ProbeTask, answer: str) -> JudgeReading:
    """The judge's one request after the answer (``worker.judge``), on its own ledger
    key ``<slot>#judge`` under the same cap; its reading, content-free."""
    from efold.worker.credential import credential
    from efold.worker.judge import ask_judge, judge_guard, judge_run_id
    from efold.worker.permit_client import SessionPermitSource

    judge = task.judge
    assert judge is not None
    slot = session.assignment.slot
    source = SessionPermitSource(session, ledger_key=judge_run_id(slot))
    guard = judge_guard(judge.route, source, slot=slot,
                        deadline_s=session.welcome.deadlines.run_ms / 1000,
                        credential=credential())
    verdict = ask_judge(guard, judge.route, question=task.question, expected=judge.expected,
                        answer=answer, rubric=judge.rubric,
                        pass_threshold=judge.pass_threshold)
    return JudgeReading(scores=verdict.scores or {}, passed=verdict.passed,
                        code=source.stop_code or verdict.code)


def append_round(payload: dict[str, Any], calls: list[dict[str, Any]], outputs: list[str], *,
                 api: str, text: str = "") -> None:
    """Append one tool round to the next request, in the route's wire format ``api``:
    the model's calls, then each call's output (Responses ``function_call`` /
    ``function_call_output`` items; Chat Completions one ``assistant`` message with
    ``tool_calls``, then one ``tool`` message per call; Messages one ``assistant``
    message of ``tool_use`` blocks, then one ``user`` message of ``tool_result``
    blocks)."""
    if api == "anthropic-messages":
        from efold.folds.request import tool_input

        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks.extend({"type": "tool_use", "id": c.get("call_id"), "name": c.get("name"),
                       "input": tool_input(str(c.get("arguments", "")))} for c in calls)
        payload["messages"].append({"role": "assistant", "content": blocks})
        payload["messages"].append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.get("call_id"), "content": output}
            for c, output in zip(calls, outputs, strict=True)]})
        return
    if api != "openai-chat":
        for call, output in zip(calls, outputs, strict=True):
            payload["input"].append(call)
            payload["input"].append(
                {"type": "function_call_output", "call_id": call.get("call_id"), "output": output})
        return
    payload["messages"].append({
        "role": "assistant", "content": text,
        "tool_calls": [{"id": c.get("call_id"), "type": "function",
                        "function": {"name": c.get("name"), "arguments": c.get("arguments", "")}}
                       for c in calls],
    })
    for call, output in zip(calls, outputs, strict=True):
        payload["messages"].append(
            {"role": "tool", "tool_call_id": call.get("call_id"), "content": output})


def probe_contract(task: ProbeTask, cache_key: str) -> Contract:
    """The frozen route of one probe run (the cache key is the slot's own)."""
    from efold.guard import HISTORY_TOOLS
    from efold.worker.route import route_contract, route_entry

    return route_contract(task.route, route_entry(task.route), cache_key=cache_key,
                          tools=HISTORY_TOOLS)


def first_payload(checkpoint: Checkpoint, task: ProbeTask, cache_key: str) -> dict[str, Any]:
    """Round 1 of a probe run, in the route's wire format: the checkpoint, the question,
    the contract's options (effort, the cache key on the Responses API)."""
    return route_payload(checkpoint, task.question, instructions=task.instructions,
                         route=task.route, cache_key=cache_key)


def route_payload(checkpoint: Checkpoint, question: str, *, instructions: str, route: Route,
                  cache_key: str) -> dict[str, Any]:
    """The first request on ``route``: ``checkpoint``, then ``question`` as the owner's
    message, under ``instructions``, with the route's options."""
    from efold.folds.request import (
        checkpoint_to_chat_request,
        checkpoint_to_messages_request,
        checkpoint_to_request,
    )
    from efold.worker.route import route_options

    if route.api == "anthropic-messages":
        payload = checkpoint_to_messages_request(checkpoint, question, model=route.model,
                                                 instructions=instructions)
        return {**payload, **route_options(route)}
    if route.api == "openai-chat":
        payload = checkpoint_to_chat_request(checkpoint, question, model=route.model,
                                             instructions=instructions, stream=route.stream)
        return {**payload, **route_options(route)}
    payload = checkpoint_to_request(checkpoint, question, model=route.model,
                                    instructions=instructions)
    return {**payload, **route_options(route), "prompt_cache_key": cache_key}


def terminal_of(outcome: str, code: Code | None) -> tuple[TerminalStatus, Code | None]:
    if outcome == "integrity_stop":
        return TerminalStatus.INTEGRITY_STOP, code
    if outcome in ("lost", "own_abort_after_send"):
        return TerminalStatus.LOST, code
    return TerminalStatus.REFUSED, code
