"""A non-2xx answer's evidence from the child's claim to the reports (issue 35): the
controller keeps a status and a kind only where the slot's own code says a non-2xx
answer ended it and the status allows the kind; the reports count them, refuse a
receipt whose ``http`` could not have been written, and never hold the server's words."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from efold.controller.pilot.evidence import Evidence
from efold.controller.pilot.judging import judge_slot
from efold.corpus import load_suite
from efold.corpus.model import Availability, Probe
from efold.errors import Code
from efold.guard.ledger import SlotLedger
from efold.ipc.messages import HttpEvidence, MeterReading, Terminal, TerminalStatus
from efold.protocol.records import HttpRecord, Plan, PlannedSlot, Receipt, SlotSpend, SlotStatus
from efold.report import ReportError, build_results, render_markdown

WORDS = "request exceeds the available context size"
CONTEXT = HttpEvidence(status=400, kind="context_exceeded", excerpt=WORDS)
LOST = SlotSpend(requests=1, admitted=1, retained_units=500)


@pytest.fixture(scope="module")
def probe() -> Probe:
    return load_suite("original")[0].probes.probes[0]


def _receipt_of(probe: Probe, http: HttpEvidence | None, ledger_code: Code,
                claimed: Code | None = None) -> Receipt:
    planned = PlannedSlot(slot="r1.native.t.p", role="native", arm="native", suite="original",
                          trace_id="t", probe_id=probe.id, category=probe.category.value,
                          repeat=1, eligible=True, checkpoint="r1.native.t")
    ledger = SlotLedger("r1.native.t.p", requests=1, admitted=1, lost=True,
                        terminal_code=ledger_code)
    terminal = Terminal(status=TerminalStatus.LOST, code=claimed or ledger_code, answer="",
                        meter=MeterReading(calls=0, bytes=0), witness="d" * 64, http=http)
    return judge_slot(planned, probe, ledger, terminal=terminal, failure=None,
                      evidence=Evidence(Availability.PRESENT, None, "c" * 64),
                      elapsed_ms=7).receipt


def test_the_receipt_keeps_the_status_and_kind_never_the_words(probe: Probe) -> None:
    receipt = _receipt_of(probe, CONTEXT, Code.LOOKUP_HTTP_STATUS)
    assert receipt.code == "lookup_http_status"
    assert receipt.http == HttpRecord(status=400, kind="context_exceeded")
    assert b"available context" not in msgspec.json.encode(receipt)


@pytest.mark.parametrize(("http", "code"), [
    (CONTEXT, Code.LOOKUP_STREAM_LOST),  # the slot did not end on an HTTP status
    (HttpEvidence(status=500, kind="context_exceeded"), Code.LOOKUP_HTTP_STATUS),
    (HttpEvidence(status=429, kind="server_error"), Code.LOOKUP_HTTP_STATUS),
    (HttpEvidence(status=400, kind="made_up"), Code.LOOKUP_HTTP_STATUS),
    (None, Code.LOOKUP_HTTP_STATUS),
])
def test_a_claim_the_slot_or_its_status_does_not_allow_is_not_kept(
        probe: Probe, http: HttpEvidence | None, code: Code) -> None:
    assert _receipt_of(probe, http, code).http is None


def test_a_redirect_keeps_its_kind(probe: Probe) -> None:
    receipt = _receipt_of(probe, HttpEvidence(status=307, kind="redirect"),
                          Code.LOOKUP_REDIRECT_FORBIDDEN)
    assert receipt.http == HttpRecord(status=307, kind="redirect")


def _run(plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt],
         *https: HttpRecord | None) -> tuple[Plan, list[Receipt]]:
    plan = plan_factory(["native", "store"], ["t1"], probes=len(https), repeats=1)
    native = [s for s in plan.slots if s.role == "native"]
    receipts = [receipt_factory(slot, SlotStatus.INCOMPLETE, spend=LOST,
                                code="lookup_http_status" if http else "lookup_stream_lost",
                                http=http)
                for slot, http in zip(native, https, strict=True)]
    return plan, receipts


def test_results_and_summary_count_them_by_status_and_kind(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    ctx, limit = HttpRecord(400, "context_exceeded"), HttpRecord(429, "rate_limited")
    plan, receipts = _run(plan_factory, receipt_factory, limit, ctx, None, ctx)
    results = build_results(plan, receipts, faux=False)
    native = next(r for r in results.results if r.role == "native")
    assert [(f.status, f.kind, f.slots) for f in native.http_failures] == [
        (400, "context_exceeded", 2), (429, "rate_limited", 1)]
    store = next(r for r in results.results if r.role == "store")
    assert store.http_failures == []
    rows = {row.slot: row for row in results.slots}
    assert [(rows[r.slot].http_status, rows[r.slot].http_kind) for r in receipts] == [
        (429, "rate_limited"), (400, "context_exceeded"), (None, None),
        (400, "context_exceeded")]
    summary = render_markdown(results)
    assert "HTTP failures" in summary
    assert "| native | 400 | context_exceeded | 2 |" in summary
    assert "| native | 429 | rate_limited | 1 |" in summary


def test_a_run_without_one_has_no_http_table(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    results = build_results(*_run(plan_factory, receipt_factory, None), faux=False)
    assert "HTTP failures" not in render_markdown(results)


@pytest.mark.parametrize(("code", "http"), [
    ("lookup_stream_lost", HttpRecord(400, "context_exceeded")),  # no HTTP code
    ("lookup_http_status", HttpRecord(500, "context_exceeded")),  # not for a 5xx
    ("lookup_http_status", HttpRecord(400, "Request exceeds the context")),  # words
    ("lookup_http_status", HttpRecord(99, "unexpected")),  # not a status
    ("lookup_http_status", HttpRecord(1000, "unexpected")),
])
def test_a_receipt_whose_http_could_not_have_been_written_refuses(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt],
        code: str, http: HttpRecord) -> None:
    plan, [receipt] = _run(plan_factory, receipt_factory, HttpRecord(400, "context_exceeded"))
    with pytest.raises(ReportError) as refused:
        build_results(plan, [msgspec.structs.replace(receipt, code=code, http=http)],
                      faux=False)
    assert refused.value.code is Code.REPORT_INPUT_INVALID


def test_the_boundaries_of_the_status_are_accepted(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    for status in (100, 999):
        plan, receipts = _run(plan_factory, receipt_factory, HttpRecord(status, "unexpected"))
        assert build_results(plan, receipts, faux=False).results


@pytest.mark.parametrize(("excerpt", "ok"), [
    ("x" * 200, True), ("x" * 201, False), ("caf\u00e9", False), ("tab\there", False),
])
def test_the_childs_claim_is_bounded_on_the_wire(excerpt: str, ok: bool) -> None:
    terminal = {"kind": "terminal", "status": "lost", "code": "lookup_http_status",
                "answer": "", "meter": {"calls": 0, "bytes": 0}, "witness": "d" * 64,
                "http": {"status": 400, "kind": "context_exceeded", "excerpt": excerpt}}
    data = msgspec.json.encode(terminal)
    if ok:
        assert msgspec.json.decode(data, type=Terminal).http == HttpEvidence(
            status=400, kind="context_exceeded", excerpt=excerpt)
    else:
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(data, type=Terminal)
