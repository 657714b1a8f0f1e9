"""The guard's order of operations, sticky state and single-send rule (faux transport)."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from typing import Any

import efold_guard_kit as kit
import msgspec
import pytest

from efold.errors import Code
from efold.guard import (
    AdmitRequest,
    FauxReply,
    GuardError,
    OutcomeKind,
    Permit,
    Refusal,
    WireRequest,
    assert_real_source,
    input_budget,
)
from efold.guard.permits import _SOURCE_METHODS, PermitSource, is_permit_source
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.transport import SendTicket, mint_ticket
from efold.guard.wire import RESPONSES


def test_settled_request_replaces_hold_with_cost() -> None:
    guard, source, transport = kit.faux_guard()
    result = guard.request(kit.responses_payload())
    assert result.ok and result.round == 1 and transport.sends == 1
    assert result.output_items == kit.ANSWER_ITEMS
    (record,) = source.records
    assert record.charged_units == result.cost_units < record.hold_units == 78_400_000
    assert source.calls == ["admit", "consume", "settle"]


def test_u_k_counts_body_prior_output_and_framing() -> None:
    guard, _, _ = kit.faux_guard()
    payload = kit.responses_payload()
    body = msgspec.json.encode(payload)
    shape = RESPONSES.check(payload, guard.contract, first_request=True)
    # 1 input item, 2 tools, 5 schema properties, instructions present.
    assert shape.framing() == 4096 + 256 + 2 * 1024 + 5 * 256 + 4096
    first = guard.request(payload)
    assert first.input_budget == len(body) + 0 + shape.framing()
    assert first.usage is not None
    second = guard.request(payload)
    assert second.input_budget == len(body) + first.usage.output + shape.framing()
    assert guard.prior_output_tokens == first.usage.output + second.usage.output  # type: ignore[union-attr]


def test_request_eleven_refuses_before_any_hold() -> None:
    guard, source, transport = kit.faux_guard()
    payload = kit.responses_payload()
    for n in range(1, 11):
        assert guard.request(payload).round == n
    result = guard.request(payload)
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND,
                                             Code.LOOKUP_REQUEST_LIMIT)
    assert source.calls.count("admit") == 10 and len(source.records) == 10
    assert transport.sends == 10 and source.stops == []


def test_over_envelope_payload_refuses_before_any_hold() -> None:
    guard, source, transport = kit.faux_guard()
    big = kit.responses_payload(question="x" * 272_000)
    result = guard.request(big)
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND,
                                             Code.NOT_ADMITTED_INPUT_ENVELOPE)
    assert result.input_budget is not None and result.input_budget > 272_000
    assert source.calls == [] and transport.sends == 0
    # A capacity refusal may continue: a smaller payload is still admitted.
    assert guard.request(kit.responses_payload()).ok


def test_envelope_boundary_is_strict() -> None:
    guard, _, _ = kit.faux_guard()
    payload = kit.responses_payload(question="")
    shape = RESPONSES.check(payload, guard.contract, first_request=True)
    base = input_budget(len(msgspec.json.encode(payload)), 0, shape)
    exact = kit.responses_payload(question="y" * (272_000 - base))
    over = kit.responses_payload(question="y" * (272_000 - base + 1))
    assert guard.request(over).code is Code.NOT_ADMITTED_INPUT_ENVELOPE
    result = guard.request(exact)
    assert result.input_budget == 272_000 and result.ok


def test_policy_violation_stops_without_hold_and_sticks() -> None:
    guard, source, transport = kit.faux_guard()
    result = guard.request(kit.responses_payload(previous_response_id="resp_0"))
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND,
                                             Code.LOOKUP_PAYLOAD_FORBIDDEN)
    assert source.stops == [Code.LOOKUP_PAYLOAD_FORBIDDEN] and source.records == []
    later = guard.request(kit.responses_payload())
    assert later.code is Code.LOOKUP_STOPPED and "admit" not in source.calls
    assert transport.sends == 0


@pytest.mark.parametrize(("options", "code"), [
    ({"fetch": None}, Code.LOOKUP_EXTERNAL_FETCH_FORBIDDEN),
    ({"transport": object()}, Code.LOOKUP_EXTERNAL_FETCH_FORBIDDEN),
    ({"headers": {"x-extra": "1"}}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"env": {"OPENAI_BASE_URL": "http://elsewhere"}}, Code.LOOKUP_OPTION_FORBIDDEN),
    ({"max_retries": 0}, Code.LOOKUP_RETRY_PROFILE_FORBIDDEN),
    ({"retry_profile": "outage"}, Code.LOOKUP_RETRY_PROFILE_FORBIDDEN),
    ({"temperature": 0}, Code.LOOKUP_OPTION_FORBIDDEN),
])
def test_caller_options_refuse(options: dict[str, Any], code: Code) -> None:
    guard, source, transport = kit.faux_guard()
    result = guard.request(kit.responses_payload(), options)
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND, code)
    assert source.records == [] and transport.sends == 0 and source.stops == [code]


def test_empty_headers_and_env_are_harmless() -> None:
    guard, _, _ = kit.faux_guard()
    assert guard.request(kit.responses_payload(), {"headers": {}, "env": {}}).ok


def test_loss_makes_the_probe_run_terminal_without_stopping() -> None:
    guard, source, _ = kit.faux_guard(lambda p: FauxReply(kit.ANSWER_ITEMS, usage=None))
    result = guard.request(kit.responses_payload())
    assert (result.outcome, result.code) == (OutcomeKind.LOST, Code.LOOKUP_MISSING_USAGE)
    assert result.output_items == []
    later = guard.request(kit.responses_payload())
    assert (later.outcome, later.code) == (OutcomeKind.REFUSED_PRE_SEND,
                                           Code.LOOKUP_SLOT_TERMINAL)
    assert source.calls == ["admit", "consume", "settle"] and source.stops == []


@pytest.mark.parametrize(("reply", "kind", "code"), [
    (FauxReply(kit.ANSWER_ITEMS, terminal="cut"), OutcomeKind.LOST, Code.LOOKUP_STREAM_LOST),
    (FauxReply(kit.ANSWER_ITEMS, terminal="failed"), OutcomeKind.LOST,
     Code.LOOKUP_RESPONSE_FAILED),
    (FauxReply(kit.ANSWER_ITEMS, terminal="error"), OutcomeKind.LOST,
     Code.LOOKUP_RESPONSE_FAILED),
    (FauxReply(kit.ANSWER_ITEMS, tier="turbo"), OutcomeKind.INTEGRITY_STOP,
     Code.LOOKUP_UNKNOWN_TIER),
    (FauxReply(kit.ANSWER_ITEMS, tier="turbo", terminal="failed"), OutcomeKind.INTEGRITY_STOP,
     Code.LOOKUP_UNKNOWN_TIER),
    (FauxReply(kit.ANSWER_ITEMS, usage={"input_tokens": 5, "output_tokens": "7"}),
     OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_INVALID_USAGE),
    (FauxReply(kit.ANSWER_ITEMS, usage={"input_tokens": 5}), OutcomeKind.INTEGRITY_STOP,
     Code.LOOKUP_INVALID_USAGE),
    (FauxReply(kit.ANSWER_ITEMS, usage={"input_tokens": -1, "output_tokens": 1}),
     OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_INVALID_USAGE),
    (FauxReply(kit.ANSWER_ITEMS, usage={"input_tokens": 400, "output_tokens": 3,
                                        "output_tokens_details": None}),
     OutcomeKind.SETTLED, None),
    (FauxReply(kit.ANSWER_ITEMS, tier="flex"), OutcomeKind.SETTLED, None),
    (FauxReply(kit.ANSWER_ITEMS, tier="priority"), OutcomeKind.SETTLED, None),
])
def test_scripted_faux_outcomes(reply: FauxReply, kind: OutcomeKind, code: Code | None) -> None:
    guard, source, _ = kit.faux_guard(lambda p: reply)
    result = guard.request(kit.responses_payload())
    assert (result.outcome, result.code) == (kind, code)
    assert source.records[0].settlement.kind is kind  # type: ignore[union-attr]


def test_tier_multipliers_scale_the_cost() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 100}
    costs = {}
    for tier in ("default", "flex", "priority", None):
        guard, _, _ = kit.faux_guard(lambda p, t=tier: FauxReply(kit.ANSWER_ITEMS, usage=usage,
                                                                 tier=t))
        costs[tier] = guard.request(kit.responses_payload()).cost_units
    # faux: 1000 * 40 + 100 * 200 = 60,000 units at x1.
    assert costs == {"default": 60_000, "flex": 30_000, "priority": 120_000, None: 120_000}


class _LyingSource(TestOnlyPermitSource):
    """Grants a permit whose hold differs from the guard's own Rmax (a source that
    reserved less, or more, than the registered worst case)."""

    __test__ = False

    def __init__(self, hold: int) -> None:
        super().__init__()
        self.hold = hold

    def admit(self, request: AdmitRequest) -> Permit | Refusal:
        granted = super().admit(request)
        assert isinstance(granted, Permit)
        return Permit(permit_id=granted.permit_id, hold_units=self.hold)


@pytest.mark.parametrize("hold", [1, 78_399_999, 78_400_001])
def test_a_hold_other_than_rmax_is_refused_before_the_send(hold: int) -> None:
    source = _LyingSource(hold)
    guard, _, transport = kit.faux_guard(source=source)
    result = guard.request(kit.responses_payload())
    assert (result.outcome, result.code, result.sent) == (
        OutcomeKind.INTEGRITY_STOP, Code.LOOKUP_HOLD_MISMATCH, False)
    assert transport.sends == 0 and "consume" not in source.calls
    assert guard.request(kit.responses_payload()).code is Code.LOOKUP_STOPPED


def test_a_hold_of_exactly_rmax_sends() -> None:
    guard, _, transport = kit.faux_guard(source=_LyingSource(78_400_000))
    assert guard.request(kit.responses_payload()).ok and transport.sends == 1


def test_body_changed_after_admission_never_sends() -> None:
    payload = kit.responses_payload()

    def mutate(request: AdmitRequest) -> None:
        payload["input"][0]["content"][0]["text"] += " (edited after admission)"

    guard, source, transport = kit.faux_guard(source=TestOnlyPermitSource(on_admit=mutate))
    result = guard.request(payload)
    assert (result.outcome, result.code) == (OutcomeKind.INTEGRITY_STOP,
                                             Code.LOOKUP_BODY_MISMATCH)
    assert transport.sends == 0 and "consume" not in source.calls
    assert source.records[0].charged_units == source.records[0].hold_units
    assert source.stops[0] is Code.LOOKUP_BODY_MISMATCH


def test_overlapping_calls_send_once_and_stop() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(payload: dict[str, Any]) -> list[dict[str, Any]]:
        entered.set()
        assert release.wait(10)
        return copy.deepcopy(kit.ANSWER_ITEMS)

    guard, source, transport = kit.faux_guard(slow)
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(guard.request(
        kit.responses_payload())))
    first.start()
    assert entered.wait(10)
    second = guard.request(kit.responses_payload())
    release.set()
    first.join(10)
    assert (second.outcome, second.code) == (OutcomeKind.INTEGRITY_STOP,
                                             Code.LOOKUP_SEND_REENTERED)
    assert transport.sends == 1 and len(source.records) == 1
    assert results[0].ok  # the request in flight settles normally
    # The stop was delivered after the in-flight exchange, never concurrently with it.
    assert source.calls == ["admit", "consume", "settle", "stop"]
    assert source.stops == [Code.LOOKUP_SEND_REENTERED]
    assert guard.request(kit.responses_payload()).code is Code.LOOKUP_STOPPED


def test_reentrant_call_from_the_responder_never_sends() -> None:
    inner: list[Any] = []
    holder: dict[str, Any] = {}

    def reenter(payload: dict[str, Any]) -> list[dict[str, Any]]:
        inner.append(holder["guard"].request(kit.responses_payload()))
        return copy.deepcopy(kit.ANSWER_ITEMS)

    guard, source, transport = kit.faux_guard(reenter)
    holder["guard"] = guard
    outer = guard.request(kit.responses_payload())
    assert inner[0].code is Code.LOOKUP_SEND_REENTERED and transport.sends == 1
    assert outer.ok and source.stops == [Code.LOOKUP_SEND_REENTERED]


def test_transport_refuses_a_send_without_a_guard_ticket() -> None:
    _, _, transport = kit.faux_guard()
    request = WireRequest(path="/responses", body=b"{}", stream=True, deadline_s=1.0)
    with pytest.raises(GuardError) as err:
        transport.open(object(), request)  # type: ignore[arg-type]
    assert err.value.code is Code.LOOKUP_UNGUARDED_DISPATCH
    with pytest.raises(GuardError) as forged:
        SendTicket(object(), "p1")
    assert forged.value.code is Code.LOOKUP_UNGUARDED_DISPATCH
    assert transport.sends == 0


def test_a_ticket_sends_once() -> None:
    _, _, transport = kit.faux_guard()
    ticket = mint_ticket("p1")
    body = msgspec.json.encode(kit.responses_payload())
    request = WireRequest(path="/responses", body=body, stream=True, deadline_s=1.0)
    transport.open(ticket, request)
    with pytest.raises(GuardError) as err:
        transport.open(ticket, request)  # a retry loop inside a transport
    assert err.value.code is Code.LOOKUP_SEND_REENTERED and transport.sends == 1


class _FailingSource(TestOnlyPermitSource):
    __test__ = False

    def __init__(self, fail: str) -> None:
        super().__init__()
        self.fail = fail

    def consume(self, permit: Permit, body_digest: str) -> None:
        if self.fail == "consume":
            raise GuardError(Code.IPC_EOF, "channel closed")
        super().consume(permit, body_digest)

    def settle(self, *args: Any) -> None:
        if self.fail == "settle":
            raise GuardError(Code.IPC_EOF, "channel closed")
        super().settle(*args)

    def stop(self, code: Code) -> None:
        if self.fail in ("stop", "settle"):
            raise GuardError(Code.IPC_EOF, "channel closed")
        super().stop(code)


def test_admitted_request_failing_before_send_is_lost() -> None:
    guard, source, transport = kit.faux_guard(source=_FailingSource("consume"))
    result = guard.request(kit.responses_payload())
    assert (result.outcome, result.code, result.sent) == (OutcomeKind.LOST, Code.IPC_EOF, False)
    assert transport.sends == 0 and source.records[0].settlement.kind is OutcomeKind.LOST  # type: ignore[union-attr]


def test_stop_failure_keeps_the_original_code() -> None:
    guard, _, _ = kit.faux_guard(lambda p: FauxReply(kit.ANSWER_ITEMS, tier="turbo"),
                                 source=_FailingSource("stop"))
    result = guard.request(kit.responses_payload())
    assert result.code is Code.LOOKUP_UNKNOWN_TIER
    assert result.stop_code is Code.LOOKUP_STOP_FAILED
    assert guard.stopped is Code.LOOKUP_UNKNOWN_TIER


def test_settle_failure_stops_admission() -> None:
    guard, source, _ = kit.faux_guard(source=_FailingSource("settle"))
    result = guard.request(kit.responses_payload())
    assert result.outcome is OutcomeKind.SETTLED
    assert (result.settle_code, result.stop_code) == (Code.LOOKUP_SETTLE_FAILED,
                                                     Code.LOOKUP_STOP_FAILED)
    assert guard.request(kit.responses_payload()).code is Code.LOOKUP_STOPPED
    assert source.calls.count("admit") == 1


def test_cap_refusal_has_no_hold_and_continues() -> None:
    # A cap that fits the first request but not a second after it: C = Rmax + c - 1,
    # where c is what the first request settles at.
    cost = kit.faux_guard()[0].request(kit.responses_payload()).cost_units
    assert cost is not None and cost > 0
    source = TestOnlyPermitSource(cap_units=78_400_000 + cost - 1)
    guard, _, _ = kit.faux_guard(source=source)
    assert guard.request(kit.responses_payload()).ok
    result = guard.request(kit.responses_payload())
    assert (result.outcome, result.code) == (OutcomeKind.REFUSED_PRE_SEND,
                                             Code.NOT_ADMITTED_CAP)
    assert len(source.records) == 1 and source.stops == [] and guard.stopped is None


def test_records_hold_no_body_response_or_credential() -> None:
    secret = "sk-live-SECRET-credential-0042"
    answer_text = "RESPONSE-TEXT-MARKER: the answer is Tuesday"
    question = "BODY-TEXT-MARKER: when does the parcel ship?"

    def responder(payload: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": answer_text}]},
                {"type": "function_call", "call_id": "c1", "name": "history_search",
                 "arguments": '{"query": "ARGS-MARKER"}'}]

    guard, source, _ = kit.faux_guard(responder)
    guard.request(kit.responses_payload(question=question + secret))
    guard.request(kit.responses_payload(question=question), {"headers": {"authorization": secret}})
    guard.request(kit.responses_payload(question=question))
    assert len(source.records) == 1 and source.stops  # the header option stopped the run
    dump = msgspec.json.encode([source.records, source.refusals, source.stops])
    for marker in (secret, answer_text, question, "ARGS-MARKER", "history_search",
                   "parcel", "Tuesday"):
        assert marker.encode() not in dump
    assert source.records[0].permit_id.encode() in dump  # real records, not empty


def test_assert_real_source_refuses_the_test_source() -> None:
    with pytest.raises(GuardError) as err:
        assert_real_source(TestOnlyPermitSource())
    assert err.value.code is Code.LOOKUP_TEST_ONLY_SOURCE

    class Forged:
        brand = "efold-guard-test-only-v1"
        test_only = False

        def admit(self, request: AdmitRequest) -> Refusal:
            return Refusal(code=Code.NOT_ADMITTED_CAP)

        def consume(self, permit: Permit, body_digest: str) -> None: ...
        def settle(self, *args: Any) -> None: ...
        def stop(self, code: Code) -> None: ...

    with pytest.raises(GuardError):
        assert_real_source(Forged())

    class Real(Forged):
        brand = "controller-durable-v1"

    assert_real_source(Real())
    with pytest.raises(GuardError) as not_source:
        assert_real_source(object())
    assert not_source.value.code is Code.LOOKUP_PERMIT_INVALID


def test_route_must_match_the_contract() -> None:
    from efold.guard import Guard, HttpTransport, bundled_catalog

    entry = bundled_catalog().entry("faux", kit.FAUX_MODEL)
    with pytest.raises(GuardError) as err:
        Guard(kit.faux_contract(), entry, TestOnlyPermitSource(),
              HttpTransport("http://127.0.0.1:9/v1"))
    assert err.value.code is Code.LOOKUP_ROUTE_MISMATCH
    with pytest.raises(GuardError):
        Guard(kit.faux_contract(), bundled_catalog().entry("openai", "gpt-5"),
              TestOnlyPermitSource(), kit.faux_guard()[2])
    with pytest.raises(GuardError):
        kit.faux_contract(input_envelope=300_000)


def test_faux_path_imports_no_httpx() -> None:
    code = (
        "import sys\n"
        "from efold.guard import Contract, FauxTransport, Guard,"
        " WireApi, FAUX_BASE_URL, bundled_catalog\n"
        "from efold.guard.testing import TestOnlyPermitSource\n"
        "c = Contract(provider='faux', model='faux-extractive-v1', api=WireApi.OPENAI_RESPONSES,"
        " base_url=FAUX_BASE_URL, effort=None)\n"
        "g = Guard(c, bundled_catalog().entry('faux', 'faux-extractive-v1'),"
        " TestOnlyPermitSource(), FauxTransport(lambda p: [{'type': 'message',"
        " 'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'ok'}]}]))\n"
        "r = g.request({'model': 'faux-extractive-v1', 'input': 'hi', 'stream': True})\n"
        "assert r.ok, r\n"
        "bad = [m for m in ('httpx', 'httpcore', 'trio', 'anyio', 'rich', 'click') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_permit_source_check_decides_as_the_protocols_runtime_check() -> None:
    class Whole:
        def admit(self, request: AdmitRequest) -> Refusal:
            return Refusal(code=Code.NOT_ADMITTED_CAP)

        def consume(self, permit: Permit, body_digest: str) -> None: ...
        def settle(self, *args: Any) -> None: ...
        def stop(self, code: Code) -> None: ...

    class NoStop:
        admit = Whole.admit
        consume = Whole.consume
        settle = Whole.settle

    class StopIsNone(Whole):
        stop = None  # type: ignore[assignment]

    assert _SOURCE_METHODS == ("admit", "consume", "settle", "stop")
    for candidate in (Whole(), NoStop(), StopIsNone(), object(), TestOnlyPermitSource(), None):
        assert is_permit_source(candidate) is isinstance(candidate, PermitSource), candidate
