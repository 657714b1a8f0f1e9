"""A prep child whose task names a summariser model: real prep children (``run_prep``)
send their compaction summaries to a loopback chat server through the guard, under
permits the run's durable source grants on the checkpoint key, held to the
summariser's terms (its Rmax, prices and ``max_requests`` per checkpoint)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from efold_pilot_kit import small_registration
from loopback_chat import CATALOG, COMPLETION_TOKENS, PROMPT_TOKENS, REPLY, Server, serve_chat

from efold.controller.campaigns.profiles import (
    SummariserProfile,
    caller_terms,
    profile_entry,
    route_of,
)
from efold.controller.campaigns.registration import Registration
from efold.controller.pilot.prep_launch import PrepResult, run_prep
from efold.controller.pilot.preparation import checkpoints_of, prep_task
from efold.controller.rundirs.run_context import RunContext, SummariserRoute
from efold.controller.rundirs.run_setup import open_run
from efold.controller.rundirs.runroot import claim_run_dir, private_subdir
from efold.corpus import dump_trace, trace_digest
from efold.errors import Code
from efold.folds.model_summary import MODEL_SUMMARY_OPENING
from efold.guard.pricing import price_units
from efold.registry import publish_exclusive
from efold.registry.journal import JournalReader

SUMMARY = REPLY
CREDENTIAL = b"sk-loopback-test-0123456789"


@pytest.fixture
def server() -> Iterator[Server]:
    with serve_chat() as state:
        yield state


def _profile(tmp_path: Path, server: Server, max_requests: int) -> SummariserProfile:
    catalog = tmp_path / "catalog.toml"
    if not catalog.exists():
        catalog.write_bytes(CATALOG)
    return SummariserProfile(provider="local", model="tiny", api="chat",
                             base_url=server.base_url, effort=None, stream=False,
                             catalog=str(catalog), max_requests=max_requests)


def _run_one_prep(reg: Registration, raw: bytes, run: Path, summariser: SummariserRoute, *,
                  program: tuple[str, ...] | None = None) -> tuple[PrepResult, str]:
    """Open an admitting run of ``reg`` in ``run`` with ``summariser`` configured and run
    one real prep child for its first checkpoint, its task naming the summariser."""

    async def body() -> tuple[PrepResult, str]:
        async with open_run(reg, raw, run, admitting=True, program=program) as opened:
            ctx: RunContext = opened.ctx
            ctx.summariser = summariser
            key, first = next(iter(checkpoints_of(opened.plan, eligible_only=False).items()))
            trace = opened.items[first.trace_id].trace
            traces = private_subdir(run, "traces")
            publish_exclusive(traces, f"{first.trace_id}.jsonl", dump_trace(trace))
            role = next(r for r in reg.campaign.roles if r.name == first.role)
            task = msgspec.structs.replace(
                prep_task(role, trace_file=str(traces / f"{first.trace_id}.jsonl"),
                          trace_sha256=trace_digest(trace), registration=reg),
                summariser=summariser.route)
            private_subdir(run, "checkpoints")
            return await run_prep(ctx, key=key, task=task,
                                  slot_dir=private_subdir(run, "checkpoints", key)), key

    return anyio.run(body, backend="trio")


def _prepare(tmp_path: Path, server: Server, arm: str, *, max_requests: int = 2,
             credential: bytes | None = None, name: str = "run",
             ) -> tuple[PrepResult, list[dict[str, Any]], Path, str]:
    """Open an admitting run with the summariser configured, then run one real prep
    child for ``arm``'s first checkpoint with a task naming the summariser. Returns the
    result, the journal's holds, the run and the checkpoint key."""
    reg, raw = small_registration(roles=f'["{arm}"]')
    profile = _profile(tmp_path, server, max_requests)
    run = claim_run_dir(tmp_path / name)
    result, key = _run_one_prep(reg, raw, run, SummariserRoute(
        route_of(profile), caller_terms(profile, max_requests), credential=credential))
    with JournalReader(run) as journal:
        holds = journal.rows("holds")
    return result, holds, run, key


def _summaries(result: PrepResult) -> list[str]:
    assert result.restored is not None
    return [m.content for m in result.restored.checkpoint.messages
            if MODEL_SUMMARY_OPENING in (m.content or "")]


def test_a_summarising_prep_pays_for_each_summary_under_the_summarisers_terms(
        tmp_path: Path, server: Server) -> None:
    result, holds, _, key = _prepare(tmp_path, server, "compaction-2")
    assert result.code is None and result.snapshot is not None
    # Two compactions, two requests; the live summary is the model's text.
    assert len(server.requests) == 2
    summaries = _summaries(result)
    assert len(summaries) == 1 and SUMMARY in summaries[0]
    for request in server.requests:
        assert request["path"] == "/v1/chat/completions"
        body = request["body"]
        assert body["model"] == "tiny" and body["stream"] is False
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
    # One hold per request, on the checkpoint key, consumed and settled at exactly the
    # reported usage as the operator catalog prices it (no tier reported: x2).
    entry = profile_entry(_profile(tmp_path, server, 2))
    cost = price_units(entry, {"input": PROMPT_TOKENS, "output": COMPLETION_TOKENS}, None)
    terms = caller_terms(_profile(tmp_path, server, 2), 2)
    assert len(holds) == 2
    for hold in holds:
        assert hold["slot"] == key
        assert hold["state"] == "settled" and hold["outcome"] == "settled"
        assert hold["consumed_ns"] is not None and hold["body_digest"] == hold["payload_digest"]
        assert hold["hold_units"] == terms.rmax_units
        assert hold["settled_units"] == cost
        assert json.loads(hold["usage"]) == {"input": PROMPT_TOKENS, "output": COMPLETION_TOKENS}
    # Each summary request is a one-round run of its own (``worker.prep._SummaryRoute``).
    assert [h["round"] for h in holds] == [1, 1]
    assert sorted(h["request_id"] for h in holds) == [f"{key}-s1-r1", f"{key}-s2-r1"]


def test_the_credential_reaches_the_summariser_only_as_given(
        tmp_path: Path, server: Server) -> None:
    result, _, _, _ = _prepare(tmp_path, server, "compaction", name="bare")
    assert result.code is None
    assert [r["authorization"] for r in server.requests] == [None]
    server.requests.clear()
    result, _, _, _ = _prepare(tmp_path, server, "compaction", credential=CREDENTIAL,
                               name="keyed")
    assert result.code is None
    assert [r["authorization"] for r in server.requests] == [f"Bearer {CREDENTIAL.decode()}"]


def test_a_failed_summary_request_fails_the_prep_and_keeps_its_hold(
        tmp_path: Path, server: Server) -> None:
    server.status = 500
    result, holds, _, key = _prepare(tmp_path, server, "compaction")
    assert result.snapshot is None and result.code is Code.LOOKUP_HTTP_STATUS
    assert len(server.requests) == 1
    assert len(holds) == 1
    hold = holds[0]
    assert hold["slot"] == key and hold["state"] == "lost"
    assert hold["code"] == Code.LOOKUP_HTTP_STATUS.value and hold["settled_units"] is None


def test_an_arm_that_does_not_summarise_sends_nothing(
        tmp_path: Path, server: Server) -> None:
    result, holds, _, _ = _prepare(tmp_path, server, "native", credential=CREDENTIAL)
    assert result.code is None and result.snapshot is not None
    assert server.requests == [] and holds == []


def test_the_controller_holds_a_checkpoint_to_its_request_limit(
        tmp_path: Path, server: Server) -> None:
    result, holds, _, key = _prepare(tmp_path, server, "compaction-2", max_requests=1)
    assert result.snapshot is None and result.code is Code.LOOKUP_REQUEST_LIMIT
    # The first summary was sent and settled; the second was refused before any hold.
    assert len(server.requests) == 1
    assert [(h["slot"], h["state"]) for h in holds] == [(key, "settled")]


# -- children that break the rules (a program embedding the real entry point) -----------

CHILD = """
import os, sys
from efold.worker.entry import main
from efold.worker.prep import FoldPrep

MODE, RMAX = sys.argv[1], int(sys.argv[2])


class Body(FoldPrep):
    def run(self, assignment, welcome):
        session = self._session
        reply = session.admit(request_id=assignment.slot + "-r1", round=1,
                              payload_digest="0" * 64, rmax=RMAX)
        if MODE == "die-holding":
            os._exit(3)  # a hold granted, then gone without a word
        return super().run(assignment, welcome)


sys.exit(main(sys.argv[3:], body=Body()))
"""


def _rule_breaker(tmp_path: Path, server: Server, arm: str, mode: str
                  ) -> tuple[PrepResult, list[dict[str, Any]], list[dict[str, Any]], str]:
    """A prep child of ``arm`` that asks for a hold itself first (``mode``: then goes on,
    or dies holding it), with the summariser configured; the result, holds and stops."""
    script = tmp_path / "rule_breaker.py"
    script.write_text(CHILD)
    reg, raw = small_registration(roles=f'["{arm}"]')
    profile = _profile(tmp_path, server, 2)
    terms = caller_terms(profile, 2)
    run = claim_run_dir(tmp_path / f"run-{mode}")
    program = (sys.executable, "-I", str(script), mode, str(terms.rmax_units))
    result, key = _run_one_prep(reg, raw, run, SummariserRoute(route_of(profile), terms),
                                program=program)
    with JournalReader(run) as journal:
        return result, journal.rows("holds"), journal.rows("stops"), key


def test_a_prep_child_with_no_route_may_not_ask_for_a_hold(
        tmp_path: Path, server: Server) -> None:
    result, holds, stops, key = _rule_breaker(tmp_path, server, "native", "admit")
    assert result.snapshot is None and result.code is Code.LOOKUP_PREPARATION_FORBIDDEN
    assert holds == [] and server.requests == []
    assert [(s["code"], s["slot"], s["sticky"]) for s in stops] == [
        (Code.LOOKUP_PREPARATION_FORBIDDEN.value, key, 1)]


def test_a_summarising_prep_child_that_dies_holding_a_permit_loses_it(
        tmp_path: Path, server: Server) -> None:
    result, holds, _, key = _rule_breaker(tmp_path, server, "compaction", "die-holding")
    assert result.snapshot is None and result.code is not None
    assert [(h["slot"], h["state"], h["code"]) for h in holds] == [
        (key, "lost", result.code.value)]
    assert holds[0]["settled_units"] is None and server.requests == []


# -- the request itself ---------------------------------------------------------------


@pytest.mark.parametrize(("api", "stream", "effort"), [
    ("chat", False, None), ("chat", True, "low"), ("responses", True, None),
    ("responses", True, "high"),
])
def test_a_summary_request_passes_the_guards_allowlist_for_its_route(
        tmp_path: Path, server: Server, api: str, stream: bool, effort: str | None) -> None:
    from efold.folds.model_summary import summary_request
    from efold.guard.contract import WireApi
    from efold.guard.wire.formats import wire_format
    from efold.worker.prep import summary_payload
    from efold.worker.route import route_contract, route_entry

    profile = msgspec.structs.replace(_profile(tmp_path, server, 2), api=api, stream=stream,
                                      effort=effort)
    route = route_of(profile)
    messages = summary_request([], None).messages
    payload = summary_payload(route, messages)
    contract = route_contract(route, route_entry(route), cache_key=None, tools=())
    shape = wire_format(WireApi(route.api)).check(json.loads(json.dumps(payload)), contract,
                                                  first_request=True)
    assert shape.tools == 0
    if api == "chat":
        assert payload["messages"] == messages
    else:
        assert payload["instructions"] == messages[0]["content"]
        assert payload["input"] == [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": messages[1]["content"]}]}]


def test_the_offline_summariser_path_imports_neither_the_guard_nor_httpx() -> None:
    import subprocess

    code = (
        "import sys\n"
        "import efold.worker.entry, efold.worker.prep\n"
        "from efold.corpus import load_suite\n"
        "from efold.folds import TracePrefix\n"
        "from efold.folds.registry import fold_for\n"
        "from efold.protocol.tasks import PrepTask\n"
        "from efold.worker.prep import summariser_for\n"
        "task = PrepTask(arm='compaction-2', trace_file='x', trace_sha256='0' * 64)\n"
        "fold = fold_for(task.arm, None, summariser=summariser_for(task, None))\n"
        "fold.build(TracePrefix.of(load_suite('original', None)[0].trace))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['efold', 'guard']\n"
        "             or m == 'httpx' or m in ('efold.worker.route', 'efold.worker.permit_client',\n"
        "                                      'efold.folds.model_summary')))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
