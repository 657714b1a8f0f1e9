"""The figures beside the counts in ``results.json``: run metadata, per-repeat spread,
paired deltas with Newcombe's interval, every role against native, tool use and latency.

One hand-checked run (every expected number worked out in the comments), the refusals
that keep the new inputs content-free, the receipt fields the controller fills from the
child's meter reading, and the decoding of documents written before these fields."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from report_figures_kit import (
    BYTES,
    CALLS,
    END_NS,
    RIGHT,
    START_NS,
    WRONG,
    C,
    Run,
    U,
    figures_run,
    run_facts,
)

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, encode_registration
from efold.controller.pilot.evidence import Evidence
from efold.controller.pilot.judging import judge_slot
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.corpus import load_suite
from efold.corpus.model import Availability
from efold.errors import Code
from efold.guard.ledger import SlotLedger
from efold.ipc.messages import MeterReading, Terminal, TerminalStatus
from efold.protocol.records import Plan, PlannedSlot, Receipt, SlotStatus
from efold.report import ReportError, build_results, decode_results, render_json
from efold.report.results import LOOKUP_ARMS
from efold.report.schema import Contrast, Results, RoleResult, Tally
from efold.report.stats import newcombe_paired_interval


@pytest.fixture
def run(plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> Run:
    return figures_run(plan_factory, receipt_factory)


def _build(run: Run, **options: Any) -> Results:
    plan, receipts = run
    kwargs: dict[str, Any] = {"faux": True, "efold_version": "0.1.0"}
    kwargs.update(options)
    return build_results(plan, receipts, **kwargs)


def _role(results: Results, name: str) -> RoleResult:
    return next(role for role in results.results if role.role == name)


def _category(tally_owner: RoleResult, category: str) -> Tally:
    return next(t for t in tally_owner.categories if t.category == category)


def _contrast(contrasts: list[Contrast], a: str, b: str) -> Contrast:
    return next(c for c in contrasts if (c.role_a, c.role_b) == (a, b))


def test_run_metadata(run: Run) -> None:
    results = _build(run, run_facts=run_facts(), reader="faux/faux-extractive-v1",
                     summarisers={"cold-rebuild": "openai/gpt-5-mini"})
    info = results.run
    assert info is not None
    assert info.efold_version == "0.1.0" and info.campaign == "synthetic"
    assert info.started_at == "2023-11-14T22:13:20.123Z"
    assert info.ended_at == "2023-11-14T22:14:25.555Z"
    assert info.duration_seconds == 65.432
    assert info.reader == "faux/faux-extractive-v1"
    assert info.summarisers == {"cold-rebuild": "openai/gpt-5-mini"}
    # Without journal facts: no times; without a version: this efold's own.
    bare = build_results(*run, faux=True)
    assert bare.run is not None
    assert (bare.run.started_at, bare.run.ended_at, bare.run.duration_seconds) == (
        None, None, None)
    import efold

    assert bare.run.efold_version == efold.__version__
    assert bare.run.summarisers == {} and bare.run.reader is None


@pytest.mark.parametrize("options", [
    {"reader": "faux"},  # not provider/model
    {"reader": "local/a/b/c/d"},  # a hub name has at most three model parts
    {"reader": "local/../etc"},
    {"reader": "local/tiny/"},
    {"reader": "local/tiny model"},
    {"reader": "/tiny"},
    {"summarisers": {"cold-rebuild": "openai/gpt 5"}},
    {"summarisers": {"nobody": "openai/gpt-5-mini"}},  # not a planned role
    {"efold_version": "1.0 beta"},
    {"run_facts": run_facts(ended_ns=None)},  # a start without an end
    {"run_facts": run_facts(started_ns=END_NS, ended_ns=START_NS)},  # ends before it starts
    {"run_facts": run_facts(started_ns=-1, ended_ns=START_NS)},
])
def test_metadata_that_could_carry_content_refuses(run: Run, options: dict[str, Any]) -> None:
    with pytest.raises(ReportError) as caught:
        _build(run, **options)
    assert caught.value.code is Code.REPORT_INPUT_INVALID


def test_per_repeat_rates_and_their_spread(run: Run) -> None:
    results = _build(run)
    native = _role(results, "native")
    assert [(s.repeat, s.correct, s.completed, s.rate) for s in native.overall.by_repeat] == [
        (0, 3, 4, 0.75), (1, 1, 3, pytest.approx(1 / 3))]
    spread = native.overall.repeat_spread
    assert spread is not None and spread.repeats == 2
    assert spread.mean == pytest.approx((3 / 4 + 1 / 3) / 2, abs=1e-15)
    assert spread.sd == pytest.approx((3 / 4 - 1 / 3) / math.sqrt(2), abs=1e-15)
    # store: 2/3 in both repeats (its incomplete and unadmitted slots are not scored).
    store = _role(results, "store").overall.repeat_spread
    assert store is not None
    assert (store.mean, store.sd) == (pytest.approx(2 / 3), 0.0)
    cold = _role(results, "cold-rebuild").overall.repeat_spread
    assert cold is not None
    assert cold.mean == pytest.approx(0.375) and cold.sd == pytest.approx(0.25 / math.sqrt(2))
    # Per category: tool_identifier has a rate in both repeats; commitment_status only in
    # repeat 0 (native r1 p03 is missing), so it has no spread.
    assert _category(native, "tool_identifier").repeat_spread.sd == 0.0  # type: ignore[union-attr]
    commitment = _category(native, "commitment_status")
    assert commitment.by_repeat[1].rate is None and commitment.repeat_spread is None


def test_single_repeat_has_no_spread(plan_factory: Callable[..., Plan],
                                     receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native"], ["t1"], probes=2, repeats=1)
    receipts = [receipt_factory(s, C, outcome=RIGHT) for s in plan.slots]
    results = build_results(plan, receipts, faux=True)
    overall = results.results[0].overall
    assert overall.repeat_spread is None and overall.by_repeat[0].rate == 1.0


def test_paired_deltas_carry_newcombe_intervals(run: Run) -> None:
    results = _build(run)
    # store (a) vs native (b), completed pairs: r0 p00 both right, r0 p01 both wrong, r0
    # p02 both right, r1 p00 both right, r1 p01 store right / native wrong (b), r1 p02
    # both wrong: 6 pairs, 3 both right, b = 1, c = 0, 2 both wrong; delta -16.67 pp.
    counts = _contrast(results.contrasts, "store", "native").overall.completed
    assert (counts.pairs, counts.both_correct, counts.b, counts.c, counts.both_wrong) == (
        6, 3, 1, 0, 2)
    assert counts.delta_pp == pytest.approx(-100 / 6)
    expected = newcombe_paired_interval(3, 0, 1, 2)  # native's margin first: b - a
    assert expected is not None and counts.delta_pp95 is not None
    assert counts.delta_pp95.lower == pytest.approx(100 * expected.lower, abs=1e-12)
    assert counts.delta_pp95.upper == pytest.approx(100 * expected.upper, abs=1e-12)
    assert counts.delta_pp95.lower < counts.delta_pp < counts.delta_pp95.upper
    # Every pair count of every contrast has its interval exactly when it has a delta.
    for contrast in results.contrasts:
        for tally in [contrast.overall, *contrast.categories]:
            for pc in (tally.completed, tally.with_failures):
                assert (pc.delta_pp95 is None) == (pc.delta_pp is None)
                if pc.delta_pp95 is not None and pc.delta_pp is not None:
                    assert pc.delta_pp95.lower <= pc.delta_pp <= pc.delta_pp95.upper


def test_every_role_against_native(run: Run) -> None:
    results = _build(run)
    assert [(c.role_a, c.role_b) for c in results.versus_native] == [
        ("native", "store"), ("native", "cold-rebuild")]
    # native comes after store in the plan: the view turns that contrast around.
    turned = results.versus_native[0]
    original = _contrast(results.contrasts, "store", "native")
    got, mirror = turned.overall.completed, original.overall.completed
    assert (got.b, got.c) == (mirror.c, mirror.b) and got.delta_pp == pytest.approx(100 / 6)
    assert got.delta_pp95 is not None and mirror.delta_pp95 is not None
    assert got.delta_pp95.lower == pytest.approx(-mirror.delta_pp95.upper, abs=1e-9)
    assert got.delta_pp95.upper == pytest.approx(-mirror.delta_pp95.lower, abs=1e-9)
    # with failures, store's incomplete r0 p03 counts as wrong against native's right.
    assert turned.overall.with_failures.b == 1 and turned.overall.with_failures.pairs == 7
    # Per category, each with its own interval: superseded_current (p02) is r0 both right,
    # r1 both wrong.
    superseded = next(t for t in turned.categories if t.category == "superseded_current")
    assert (superseded.completed.pairs, superseded.completed.delta_pp) == (2, 0.0)
    assert superseded.completed.delta_pp95 is not None
    # native before cold-rebuild: the very contrast of the contrasts list.
    assert results.versus_native[1] == _contrast(results.contrasts, "native", "cold-rebuild")


def test_no_native_role_no_view(plan_factory: Callable[..., Plan],
                                receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["store", "pack"], ["t1"], probes=1, repeats=1)
    results = build_results(plan, [receipt_factory(s, C, outcome=RIGHT) for s in plan.slots],
                            faux=True)
    assert results.versus_native == [] and len(results.contrasts) == 1


def test_tool_use(run: Run) -> None:
    results = _build(run)
    tools = _role(results, "store").tool_use
    assert tools is not None
    # Scored store slots: r0 p00 p01 p02, r1 p00 p01 p02; three made a lookup.
    assert (tools.completed, tools.with_lookup, tools.lookup_rate) == (6, 3, 0.5)
    assert (tools.exact_with_lookup.successes, tools.exact_with_lookup.trials) == (2, 3)
    assert (tools.exact_without_lookup.successes, tools.exact_without_lookup.trials) == (2, 3)
    # Calls and bytes of the scored slots only (the incomplete slot's 8 calls are not).
    assert (tools.lookup_calls, tools.bytes_read) == (4, 6000)
    assert tools.bytes_median == 2000  # nearest rank 2 of [1000, 2000, 3000]
    # Recoverable: r0 p00, r0 p01, r1 p00; recovered (looked up and right): p00 twice.
    assert (tools.recoverable, tools.recoveries) == (3, 2)
    # Meter aborts over admitted slots: r0 p01 (bytes, completed), r0 p03 (calls,
    # incomplete).
    assert tools.meter_exhausted == 2
    assert tools.meter_exhausted_by == {CALLS: 1, BYTES: 1}
    # Arms without the lookup tools that made no call report no tool use.
    assert _role(results, "native").tool_use is None
    assert _role(results, "cold-rebuild").tool_use is None


def test_lookup_arms_are_the_folds_own() -> None:
    assert LOOKUP_ARMS == {"native-lookup", "store", "store-compaction", "pack"}


def test_tool_use_of_a_role_that_looked_up_without_a_lookup_arm(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    """A plugin or proxy arm that offers the tools shows up by its calls."""
    plan = plan_factory(["my-fold", "pack"], ["t1"], probes=2, repeats=1)
    slots = {(s.role, s.probe_id[-3:]): s for s in plan.slots}
    receipts = [
        receipt_factory(slots["my-fold", "p00"], C, outcome=RIGHT, lookup_calls=1,
                        lookup_bytes=10),
        receipt_factory(slots["my-fold", "p01"], C, outcome=WRONG),
        receipt_factory(slots["pack", "p00"], C, outcome=RIGHT),
    ]
    results = build_results(plan, receipts, faux=True)
    mine = results.results[0].tool_use
    assert mine is not None and (mine.with_lookup, mine.bytes_median) == (1, 10)
    pack = results.results[1].tool_use  # offers lookup, never used it
    assert pack is not None
    assert (pack.completed, pack.with_lookup, pack.bytes_median, pack.meter_exhausted) == (
        1, 0, None, 0)
    assert pack.exact_with_lookup.rate is None and pack.exact_without_lookup.rate == 1.0


def test_latency(run: Run) -> None:
    results = _build(run)
    # store's admitted slots: 100 300 200 900 400 100 100 (the unadmitted one is not).
    store = _role(results, "store").latency
    assert store is not None
    assert (store.slots, store.median_ms, store.p95_ms) == (7, 200, 900)
    native = _role(results, "native").latency
    assert native is not None
    assert (native.slots, native.median_ms, native.p95_ms) == (7, 40, 70)
    # The run: 22 admitted slots; rank 11 is 30 ms, rank ceil(20.9) = 21 is 400 ms.
    assert results.latency is not None
    assert (results.latency.slots, results.latency.median_ms, results.latency.p95_ms) == (
        22, 30, 400)


def test_latency_leaves_out_slots_left_in_flight(run: Run) -> None:
    _, receipts = run
    stuck = next(r for r in receipts if (r.role, r.repeat, r.elapsed_ms) == ("store", 0, 900))
    results = _build(run, run_facts=run_facts(in_flight=[stuck.slot]))
    store = _role(results, "store").latency
    assert store is not None
    assert (store.slots, store.median_ms, store.p95_ms) == (6, 100, 400)


def test_no_admitted_slot_no_latency(plan_factory: Callable[..., Plan],
                                     receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native"], ["t1"], probes=1, repeats=1)
    results = build_results(plan, [receipt_factory(plan.slots[0], U,
                                                   code=Code.NOT_ADMITTED_CAP)], faux=True)
    latency = results.results[0].latency
    assert latency is not None and (latency.slots, latency.median_ms, latency.p95_ms) == (
        0, None, None)


@pytest.mark.parametrize("change", [
    {"lookup_bytes": -1},
    {"lookup_bytes": True},
    {"meter_abort": "lookup_worker_lost"},  # a fixed code, but not the meter's
    {"meter_abort": "out of bytes"},
])
def test_inconsistent_lookup_fields_refuse(run: Run, change: dict[str, Any]) -> None:
    plan, receipts = run
    bad = [msgspec.structs.replace(receipts[0], **change), *receipts[1:]]
    with pytest.raises(ReportError) as caught:
        build_results(plan, bad, faux=True)
    assert caught.value.code is Code.REPORT_INPUT_INVALID


def test_documents_and_receipts_written_before_these_fields_decode(run: Run) -> None:
    results = _build(run, run_facts=run_facts(), reader="faux/faux-extractive-v1")
    doc = msgspec.json.decode(render_json(results))
    for key in ("run", "latency", "versus_native"):
        del doc[key]
    for role in doc["results"]:
        del role["latency"], role["tool_use"]
        for tally in [role["overall"], *role["categories"]]:
            del tally["repeat_spread"]
            for split in tally["by_repeat"]:
                del split["rate"]
    for contrast in doc["contrasts"]:
        for tally in [contrast["overall"], *contrast["categories"]]:
            del tally["completed"]["delta_pp95"], tally["with_failures"]["delta_pp95"]
    old = decode_results(msgspec.json.encode(doc))
    assert old.run is None and old.latency is None and old.versus_native == []
    assert old.results[0].tool_use is None and old.results[0].latency is None
    assert old.results[0].overall.repeat_spread is None
    assert old.contrasts[0].overall.completed.delta_pp95 is None
    # An old receipt (no lookup_bytes, no meter_abort) decodes with their defaults, and a
    # receipt with defaults omits them.
    receipt = msgspec.json.decode(
        b'{"slot":"s0000","role":"store","arm":"store","trace_id":"t1",'
        b'"probe_id":"t1.p00","category":"tool_identifier","repeat":0,"status":"skipped"}',
        type=Receipt)
    assert (receipt.lookup_bytes, receipt.meter_abort) == (0, None)
    assert b"lookup_bytes" not in msgspec.json.encode(receipt)
    assert b"meter_abort" not in msgspec.json.encode(receipt)


# -- the receipt fields, from the child's meter reading (controller.judging) -------------

def _judge(meter: MeterReading | None) -> Receipt:
    probe = next(p for p in load_suite("original")[0].probes.probes
                 if p.category.value == "tool_identifier")
    planned = PlannedSlot(slot="r1.store.t.p", role="store", arm="store", suite="original",
                          trace_id="t", probe_id=probe.id, category=probe.category.value,
                          repeat=1, eligible=True, checkpoint="r1.store.t")
    terminal = None if meter is None else Terminal(
        status=TerminalStatus.ANSWERED, code=None, answer=f"It is {probe.expected[0]}.",
        meter=meter, witness="d" * 64)
    ledger = SlotLedger(planned.slot, requests=1, admitted=1)
    evidence = Evidence(Availability.RECOVERABLE, None, "c" * 64)
    return judge_slot(planned, probe, ledger, terminal=terminal, failure=None,
                      evidence=evidence, elapsed_ms=7).receipt


def test_receipt_copies_the_meter_reading() -> None:
    exhausted = _judge(MeterReading(calls=3, bytes=126_000,
                                    abort_cause=Code.METER_BYTES_EXHAUSTED))
    assert (exhausted.lookup_calls, exhausted.lookup_bytes, exhausted.meter_abort) == (
        3, 126_000, BYTES)
    calls = _judge(MeterReading(calls=8, bytes=10, abort_cause=Code.METER_CALLS_EXHAUSTED))
    assert calls.meter_abort == CALLS
    # Any other code the child names there is not a meter abort: not recorded.
    other = _judge(MeterReading(calls=1, bytes=10, abort_cause=Code.LOOKUP_WORKER_LOST))
    assert other.meter_abort is None and other.lookup_bytes == 10
    quiet = _judge(MeterReading(calls=0, bytes=0))
    assert (quiet.lookup_calls, quiet.lookup_bytes, quiet.meter_abort) == (0, 0, None)
    gone = _judge(None)  # no terminal: nothing to copy
    assert (gone.lookup_calls, gone.lookup_bytes, gone.meter_abort) == (0, 0, None)


# -- end to end: a faux pilot whose lookup meter runs out ---------------------------------

def test_a_faux_pilot_records_meter_aborts_and_reports_tool_use(tmp_path: Path) -> None:
    """Real children: with a one-call lookup budget, the extractive reader's second
    lookup is refused by the meter (it plans up to eight calls on its own), so the probe
    child's meter reading carries ``meter_calls_exhausted`` into the receipt."""
    text = ('name = "meter"\nsuite = "original"\nroles = ["native-lookup", "store"]\n'
            'probe_mode = "lookup-allowed-v1"\n'
            'probe_limit = 2\nselection_seed = 7\nschedule_seed = 7\ncap_usd = "60.00"\n'
            "[budgets]\nlookup_calls = 1\n")
    reg = compute_registration(parse_campaign(text), text.encode())
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, encode_registration(reg), run)
    assert out.stop_code is None
    looked = [r for r in out.receipts if r.lookup_calls > 0]
    assert looked and all(r.lookup_calls == 1 for r in looked)
    assert {r.role for r in looked} >= {"store"}
    assert all(r.lookup_bytes > 0 for r in looked)
    aborted = [r for r in out.receipts if r.meter_abort is not None]
    assert aborted and {r.meter_abort for r in aborted} == {CALLS}
    results = decode_results((run / "results.json").read_bytes())
    store = next(role for role in results.results if role.role == "store")
    assert store.tool_use is not None
    mine = [r for r in out.receipts if r.role == "store"]
    assert store.tool_use.meter_exhausted == sum(r.meter_abort is not None for r in mine)
    assert store.tool_use.meter_exhausted_by[CALLS] == store.tool_use.meter_exhausted > 0
    assert store.tool_use.with_lookup == sum(
        r.lookup_calls > 0 for r in mine if r.status is SlotStatus.COMPLETED)
    assert store.tool_use.bytes_read == sum(r.lookup_bytes for r in mine
                                            if r.status is SlotStatus.COMPLETED)
    assert [(c.role_a, c.role_b) for c in results.versus_native] == [("native-lookup", "store")]
    assert results.latency is not None and results.latency.slots == len(out.receipts)


def test_a_hub_model_name_is_a_model_id(run: Run) -> None:
    results = _build(run, reader="local/meta-llama/Llama-3-8B")
    assert results.run is not None and results.run.reader == "local/meta-llama/Llama-3-8B"
