"""The continuation: an agent works on a workspace copy after the fold.

One run of a boundary case on one checkpoint (docs/boundary.md §6): the first request is
the checkpoint, then the continuation stimulus as the owner's message, with the
workspace tools the case allows (and the history tools when the arm offers them); every
function call is executed (a workspace tool on the copy, a history tool on the
checkpoint's store), captured as an ``ActionRecord`` with its environment versions, and
answered; the first reply without a call ends the run. At most ``maxActions`` calls are
executed: a reply asking for more ends the run as ``max_actions``.

Who answers a request is the caller's (``Send``): in a probe child the guard (admit,
one send, settle, under the cap); offline and in validation the faux agent directly.
A request that does not settle ends the run as ``not_settled``. The loop never judges:
the oracles do, afterwards, on what it returns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from efold.boundary.actions import ActionLog, ActionRecord, file_version, tree_version
from efold.boundary.oracles import RecallOutput
from efold.boundary.workspace import FAMILY_OF, TOOL_SCHEMAS, Workspace
from efold.corpus.forms import chars_to_tokens
from efold.folds.checkpoint import HISTORY_GET, HISTORY_SEARCH, Checkpoint
from efold.folds.lookup import LookupTool, lookup_tool_schemas
from efold.folds.request import RESPONSES_API, checkpoint_to_request, offer_tools

# What every boundary run tells the agent (its sha256 is the system prompt identity).
INSTRUCTIONS: Final = (
    "You are continuing work in a software workspace after a break. Use the tools to read, "
    "search and change files and to run the allowed test commands. Follow the owner's "
    "earlier instructions. When the work is finished, reply with a one-line summary.")
INSTRUCTIONS_SHA256: Final = hashlib.sha256(INSTRUCTIONS.encode()).hexdigest()

# ``send(payload)``: the reply's output items when the request settled, else None.
Send = Callable[[dict[str, Any]], "list[dict[str, Any]] | None"]
# ``append(payload, calls, outputs, text)``: one executed tool round, into the payload.
AppendRound = Callable[[dict[str, Any], "list[dict[str, Any]]", "list[str]", str], None]
# How a run ended: the agent answered (or replied with nothing: ``no_output``), asked
# for more than ``maxActions`` calls, or a request did not settle; ``request_limit``
# (set by a probe child, whose guard refuses a request past the campaign's
# ``budgets.max_requests``) is the last kind of ``not_settled``.
Ending = Literal["answered", "max_actions", "not_settled", "no_output", "request_limit"]


@dataclass
class AgentRun:
    """What a run did: its actions, the recall outputs, how it ended, its last text."""

    actions: list[ActionRecord]
    recall_outputs: list[RecallOutput] = field(default_factory=list)
    ending: Ending = "answered"
    final_text: str = ""
    requests: int = 0
    # Every token the agent spent after the fold (the chars/4 estimate of each request
    # it sent, re-sent context and re-reads included, and of each reply): tokens per
    # task, the figure the field asks for beside accuracy.
    input_tokens: int = 0
    output_tokens: int = 0


def workspace_tools(*, edit: bool, test: bool) -> list[dict[str, Any]]:
    """The workspace tool schemas a case offers: read and search always, edit/write and
    test as the case allows."""
    offered = {"read", "search"} | ({"edit"} if edit else set()) | ({"test"} if test else set())
    return [schema for schema in TOOL_SCHEMAS if FAMILY_OF[schema["name"]] in offered]


def agent_tools(checkpoint: Checkpoint, *, edit: bool, test: bool) -> list[dict[str, Any]]:
    """Every tool a run offers (Responses shape): the case's workspace tools, then the
    history tools when the checkpoint offers them."""
    return workspace_tools(edit=edit, test=test) + (
        lookup_tool_schemas() if checkpoint.tools else [])


def first_payload(checkpoint: Checkpoint, stimulus: list[str], *, model: str,
                  tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Round 1 on the Responses API (offline runs): the checkpoint, the stimulus, the
    workspace ``tools`` offered, and the history tools when the checkpoint offers them."""
    payload = checkpoint_to_request(checkpoint, "\n\n".join(stimulus), model=model,
                                    instructions=INSTRUCTIONS)
    payload.update(offer_tools(
        list(tools) + (lookup_tool_schemas() if checkpoint.tools else []), RESPONSES_API))
    return payload


def append_responses_round(payload: dict[str, Any], calls: list[dict[str, Any]],
                           outputs: list[str], text: str) -> None:
    """Append one tool round to a Responses payload: each call, then its output."""
    del text  # a Responses reply's text item is not re-sent
    payload["input"].extend(_round_items(calls, outputs))


def run_agent(send: Send, payload: dict[str, Any], workspace: Workspace,
              lookup: LookupTool | None, log: ActionLog, *, max_actions: int,
              store_version: str, append: AppendRound = append_responses_round) -> AgentRun:
    """Run the loop (module docstring) from ``payload`` until an answer or a limit;
    ``append`` adds a tool round to the payload in its wire format."""
    run = AgentRun(actions=[])
    while True:
        run.input_tokens += _estimate(payload)
        items = send(payload)
        run.requests += 1
        if items is None:
            run.ending = "not_settled"
            break
        run.output_tokens += _estimate(items)
        calls = [i for i in items if i.get("type") == "function_call"]
        text = _text(items)
        if not calls:
            run.final_text = text
            run.ending = "answered" if text else "no_output"
            break
        if len(log.records) + len(calls) > max_actions:
            run.final_text = text
            run.ending = "max_actions"
            break
        outputs = [_execute(call, workspace, lookup, log, run, store_version)
                   for call in calls]
        append(payload, calls, outputs, text)
    run.actions = list(log.records)
    return run


def _estimate(value: Any) -> int:
    return chars_to_tokens(len(json.dumps(value, ensure_ascii=False)))


def _execute(call: dict[str, Any], workspace: Workspace, lookup: LookupTool | None,
             log: ActionLog, run: AgentRun, store_version: str) -> str:
    name = str(call.get("name"))
    arguments = str(call.get("arguments", ""))
    if name in (HISTORY_SEARCH, HISTORY_GET):
        args = _decoded(arguments)
        output = (lookup.call(name, arguments) if lookup is not None
                  else "error: no history tools in this run")
        log.record("recall", name, args, store_version, store_version)
        run.recall_outputs.append(RecallOutput(text=output, sessions=_sessions(output)))
        return output
    family = FAMILY_OF.get(name, "other")
    before = _version(family, workspace.root, _decoded(arguments))
    output, family, args = workspace.call(name, arguments)
    after = _version(family, workspace.root, args)
    log.record(family, name, args, before, after)
    return output


def _version(family: str, root: Path, args: dict[str, Any]) -> str | None:
    """The environment version an action of ``family`` depends on (docs §4)."""
    if family in ("read", "edit"):
        path = args.get("path")
        if not isinstance(path, str):
            return None
        target = (root / path).resolve()
        if not target.is_relative_to(root.resolve()):
            return None
        return file_version(target)
    if family in ("test", "build", "search"):
        return tree_version(root)
    return None


def _decoded(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": arguments}


def _sessions(output: str) -> list[int]:
    """The sessions of the records a history tool output names (a get's one record, a
    search's hits), in order, without repeats."""
    try:
        found = json.loads(output)
    except ValueError:
        return []
    records = found.get("results", [found]) if isinstance(found, dict) else []
    sessions: list[int] = []
    for record in records if isinstance(records, list) else []:
        session = record.get("session") if isinstance(record, dict) else None
        if isinstance(session, int) and not isinstance(session, bool) \
                and session not in sessions:
            sessions.append(session)
    return sessions


def _round_items(calls: list[dict[str, Any]], outputs: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for call, output in zip(calls, outputs, strict=True):
        out.append(call)
        out.append({"type": "function_call_output", "call_id": call.get("call_id"),
                    "output": output})
    return out


def _text(items: list[dict[str, Any]]) -> str:
    return "".join(str(p.get("text", "")) for i in items if i.get("type") == "message"
                   for p in i.get("content", ()) if isinstance(p, dict)).strip()
