"""The continuation offline: the faux agent, the agent loop and the validity proof.

The faux agent decides only from the payload it is sent; the loop executes its calls on a
real workspace copy (real files, a real contained pytest run), captures the actions and
ends on an answer or a limit; ``ablation`` proves a case valid only when the history
decides its outcome, and refuses a case whose outcome does not change.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from efold.boundary.actions import ActionLog
from efold.boundary.agent_loop import INSTRUCTIONS, first_payload, run_agent, workspace_tools
from efold.boundary.case import load_case
from efold.boundary.faux_agent import FINAL_TEXT, FauxScript, faux_agent
from efold.boundary.validate import ablation, run_offline, without_critical, without_history
from efold.boundary.workspace import Workspace, copy_fixture
from efold.folds.arms import NativeFold
from efold.folds.checkpoint import HISTORY_GET, HISTORY_SEARCH
from efold.folds.fold import TracePrefix
from tests.boundary.conftest import TEST_COMMAND, MakeCase

EDIT_PRICING = {"tool": "workspace_edit", "arguments": {
    "path": "src/shop/pricing.py", "old": "BULK_THRESHOLD = 10", "new": "BULK_THRESHOLD = 20"}}
EDIT_API = {"tool": "workspace_edit", "arguments": {
    "path": "src/shop/api.py", "old": "sum(", "new": "0 + sum("}}
RUN = {"tool": "workspace_test", "arguments": {"command": TEST_COMMAND}}
BUNDLED = Path(__file__).resolve().parents[2] / "boundary" / "cases"
SCRIPT = {"recall": "bulk threshold",
          "plans": [{"when": "bulk threshold of 20", "actions": [EDIT_PRICING, RUN]},
                    {"actions": [EDIT_API, RUN]}]}


def with_script(data: dict[str, Any]) -> None:
    data["faux"] = SCRIPT
    data["source"]["critical"] = ["e0003"]  # "We settled on a bulk threshold of 20."


def payload(text: str, *, tools: list[str] | None = None) -> dict[str, Any]:
    return {"input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": text}]}],
            "tools": [{"type": "function", "name": n} for n in tools or []]}


def script() -> FauxScript:
    import msgspec

    return msgspec.convert(SCRIPT, FauxScript)


def test_the_faux_agent_takes_the_plan_whose_condition_it_sees() -> None:
    respond = faux_agent(script())
    [call] = respond(payload("Earlier: we settled on a BULK   threshold of 20.\nGo on."))
    assert call["type"] == "function_call" and call["name"] == "workspace_edit"
    assert json.loads(call["arguments"])["path"] == "src/shop/pricing.py"
    [naive] = respond(payload("Go on."))
    assert json.loads(naive["arguments"])["path"] == "src/shop/api.py"


def test_it_recalls_first_when_it_can_and_counts_done_actions() -> None:
    respond = faux_agent(script())
    asked = payload("Go on.", tools=[HISTORY_SEARCH, HISTORY_GET])
    [search] = respond(asked)
    assert search["name"] == HISTORY_SEARCH
    assert json.loads(search["arguments"]) == {"query": "bulk threshold"}
    asked["input"] += [search, {"type": "function_call_output", "call_id": search["call_id"],
                                "output": json.dumps({"results": [{"id": "e0003"}]})}]
    [get] = respond(asked)
    assert get["name"] == HISTORY_GET and json.loads(get["arguments"]) == {"id": "e0003"}
    asked["input"] += [get, {"type": "function_call_output", "call_id": get["call_id"],
                             "output": json.dumps({"id": "e0003", "session": 1,
                                                   "text": "a bulk threshold of 20"})}]
    [edit] = respond(asked)
    assert json.loads(edit["arguments"])["path"] == "src/shop/pricing.py"
    asked["input"] += [edit, {"type": "function_call_output", "call_id": edit["call_id"],
                              "output": "ok"}]
    [run] = respond(asked)
    assert run["name"] == "workspace_test"
    asked["input"] += [run, {"type": "function_call_output", "call_id": run["call_id"],
                             "output": "exit 0"}]
    [final] = respond(asked)
    assert final["type"] == "message" and final["content"][0]["text"] == FINAL_TEXT


def test_the_loop_runs_the_calls_on_the_copy_and_captures_them(make_case: MakeCase,
                                                               tmp_path: Path) -> None:
    case = load_case(make_case(with_script))
    checkpoint = NativeFold().build(TracePrefix(trace_id="t", events=case.prefix))
    root = tmp_path / "copy"
    copy_fixture(case.workspace, root)
    workspace = Workspace(root, allowed_commands=[TEST_COMMAND], timeout_s=60, edit=True)
    sent: list[dict[str, Any]] = []

    def send(request: dict[str, Any]) -> list[dict[str, Any]]:
        sent.append(json.loads(json.dumps(request)))
        return faux_agent(script())(request)

    request = first_payload(checkpoint, ["Raise it."], model="m",
                            tools=workspace_tools(edit=True, test=True))
    assert request["instructions"] == INSTRUCTIONS
    run = run_agent(send, request, workspace, None, ActionLog(["read", "test"]),
                    max_actions=6, store_version="none")
    assert run.ending == "answered" and run.final_text == FINAL_TEXT and run.requests == 3
    assert [(a.family, a.target) for a in run.actions] == [
        ("edit", "src/shop/pricing.py"), ("test", " ".join(TEST_COMMAND))]
    assert run.actions[0].before != run.actions[0].after  # the edit changed the file
    assert (root / "src/shop/pricing.py").read_text() == "BULK_THRESHOLD = 20\n"
    assert (case.workspace / "src/shop/pricing.py").read_text() == "BULK_THRESHOLD = 10\n"
    last = sent[-1]["input"]
    assert last[-1]["type"] == "function_call_output" and last[-1]["output"].startswith("exit 0")


def test_a_reply_asking_for_more_than_max_actions_ends_the_run(make_case: MakeCase,
                                                               tmp_path: Path) -> None:
    case = load_case(make_case(with_script))
    checkpoint = NativeFold().build(TracePrefix(trace_id="t", events=case.prefix))
    root = tmp_path / "copy"
    copy_fixture(case.workspace, root)
    workspace = Workspace(root, allowed_commands=[TEST_COMMAND], timeout_s=60, edit=True)
    request = first_payload(checkpoint, ["Go."], model="m", tools=workspace_tools(
        edit=True, test=True))
    run = run_agent(faux_agent(script()), request, workspace, None, ActionLog(),
                    max_actions=1, store_version="none")
    assert run.ending == "max_actions" and len(run.actions) == 1
    lost = run_agent(lambda _: None, first_payload(checkpoint, ["Go."], model="m", tools=[]),
                     workspace, None, ActionLog(), max_actions=6, store_version="none")
    assert lost.ending == "not_settled" and lost.actions == []


def test_a_store_arm_recalls_what_its_checkpoint_dropped() -> None:
    """The bundled B06: the coupon code came by email long before the boundary; the cold
    boundary drops it, the store arm looks it up and uses it."""
    case = load_case(BUNDLED / "B06-exact-identifier")
    cold = run_offline(case, case.prefix, "cold-rebuild")
    assert cold.passed is False and "SPRG-7Q4X-229" not in json.dumps(
        [a.args for a in cold.run.actions])
    store = run_offline(case, case.prefix, "store")
    assert store.run.actions[0].family == "recall"  # a search; its hits show the code
    assert any("SPRG-7Q4X-229" in o.text for o in store.run.recall_outputs)
    assert all(o.sessions == [1] for o in store.run.recall_outputs if o.sessions)
    assert store.passed is True


def test_ablation_proves_a_case_whose_history_decides(make_case: MakeCase) -> None:
    case = load_case(make_case(with_script))
    assert [e.id for e in without_critical(case)] == ["e0001", "e0002", "e0004"]
    assert len(without_history(case)) == 1
    proof = ablation(case)
    assert proof.full.passed is True
    assert proof.no_history.passed is False and proof.counterfactual.passed is False
    assert proof.problem is None


def test_ablation_refuses_a_case_that_passes_without_its_critical_fact(
        make_case: MakeCase) -> None:
    def naive_passes(data: dict[str, Any]) -> None:
        data["faux"] = {"plans": [{"actions": [EDIT_PRICING, RUN]}]}  # needs no history
        data["oracle"]["success"] = data["oracle"]["success"][:2]

    proof = ablation(load_case(make_case(naive_passes)))
    assert proof.full.passed is True
    assert proof.problem == "with the history removed the outcome does not change"


def test_ablation_refuses_a_critical_event_that_decides_nothing(make_case: MakeCase) -> None:
    def wrong_critical(data: dict[str, Any]) -> None:
        with_script(data)
        data["source"]["critical"] = ["e0001"]  # the api rule: not what the plan needs

    proof = ablation(load_case(make_case(wrong_critical)))
    assert proof.no_history.passed is False
    assert proof.problem == "with the critical events deleted the outcome does not change"


def test_validate_ablation_and_run_from_the_command_line(case_root: Path,
                                                         make_case: MakeCase) -> None:
    make_case(with_script)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "efold.controller", "boundary", *args],
                              capture_output=True, text=True, timeout=300)

    assert cli("lock", str(case_root)).returncode == 0
    done = cli("validate", "--ablation", str(case_root))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 valid and locked" in done.stdout
    ran = cli("run", "--faux", "--arms", "native,cold-rebuild", "--json", str(case_root))
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert {(r["arm"], r["passed"]) for r in result["runs"]} == {("native", True),
                                                                  ("cold-rebuild", True)}
