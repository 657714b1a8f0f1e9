"""Accuracy beside compression (19-B): checkpoint sizes per role, their compression
against the native role, and the cost per correct answer.

One hand-checked run (``report_figures_kit``: store, native, cold-rebuild; one trace, four
probes, two repeats) with sizes set per checkpoint, every expected number worked out in
the comments; the refusals that keep sizes consistent; documents written before these
fields; how the reports print them; and a real faux pilot whose receipts carry the sizes
of the snapshots its prep children left."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from report_figures_kit import RIGHT, WRONG, C, Run, figures_run

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, encode_registration
from efold.controller.pilot.evidence import visible_size
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.corpus.model import Outcome
from efold.errors import Code
from efold.folds.snapshot import read_checkpoint
from efold.protocol.records import Plan, Receipt, SlotSpend, SlotStatus
from efold.report import ReportError, build_results, decode_results, render_json
from efold.report.render_html import render_html
from efold.report.render_markdown import render_markdown
from efold.report.schema import Compression, CostPerCorrect, Results, RoleResult, SizeRatio
from efold.report.stats import nearest_rank
from efold.worker.prep import snapshot_path

# (tokens, bytes) per role and repeat. cold-rebuild's repeat 1 carries no size (its
# receipts were written without one), so it has one checkpoint and one pair.
SIZES: dict[tuple[str, int], tuple[int, int]] = {
    ("native", 0): (10_000, 40_000), ("native", 1): (12_000, 48_000),
    ("store", 0): (200, 800), ("store", 1): (300, 1_000),
    ("cold-rebuild", 0): (1_000, 4_000),
}


def _sized(receipts: list[Receipt], sizes: dict[tuple[str, int], tuple[int, int]]
           ) -> list[Receipt]:
    out = []
    for receipt in receipts:
        size = sizes.get((receipt.role, receipt.repeat))
        out.append(receipt if size is None else msgspec.structs.replace(
            receipt, checkpoint_tokens=size[0], checkpoint_bytes=size[1]))
    return out


@pytest.fixture
def run(plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> Run:
    plan, receipts = figures_run(plan_factory, receipt_factory)
    return plan, _sized(receipts, SIZES)


def _build(run: Run, **options: Any) -> Results:
    plan, receipts = run
    kwargs: dict[str, Any] = {"faux": True, "efold_version": "0.1.0"}
    kwargs.update(options)
    return build_results(plan, receipts, **kwargs)


def _role(results: Results, name: str) -> RoleResult:
    return next(role for role in results.results if role.role == name)


def test_checkpoint_sizes_count_each_checkpoint_once(run: Run) -> None:
    results = _build(run)
    native = _role(results, "native").compression
    # Seven native receipts, two checkpoints. Nearest-rank median of two values: rank
    # ceil(50 * 2 / 100) = 1, the smaller.
    assert native == Compression(checkpoints=2, tokens_median=10_000, tokens_sum=22_000,
                                 bytes_median=40_000, bytes_sum=88_000,
                                 versus_reference=None)  # it is the reference
    store = _role(results, "store").compression
    assert store is not None
    assert (store.checkpoints, store.tokens_median, store.tokens_sum, store.bytes_median,
            store.bytes_sum) == (2, 200, 500, 800, 1_800)
    cold = _role(results, "cold-rebuild").compression
    assert cold is not None
    assert (cold.checkpoints, cold.tokens_median, cold.tokens_sum) == (1, 1_000, 1_000)


def test_compression_against_native_paired_by_trace_and_repeat(run: Run) -> None:
    results = _build(run)
    store = _role(results, "store").compression
    assert store is not None and store.versus_reference is not None
    ratio = store.versus_reference
    # Pairs: repeat 0: 1 - 200/10,000 = 0.98, bytes 1 - 800/40,000 = 0.98; repeat 1:
    # 1 - 300/12,000 = 0.975, bytes 1 - 1,000/48,000 = 0.97916...; the nearest-rank median
    # of two is the smaller. Aggregate: 1 - 500/22,000 and 1 - 1,800/88,000.
    assert ratio.reference == "native" and ratio.pairs == 2
    assert ratio.tokens_median == pytest.approx(0.975, abs=1e-12)
    assert ratio.tokens_aggregate == pytest.approx(1 - 500 / 22_000, abs=1e-12)
    assert ratio.bytes_median == pytest.approx(1 - 1_000 / 48_000, abs=1e-12)
    assert ratio.bytes_aggregate == pytest.approx(1 - 1_800 / 88_000, abs=1e-12)
    cold = _role(results, "cold-rebuild").compression
    assert cold is not None and cold.versus_reference is not None
    # Only repeat 0 has both sizes: one pair, median and aggregate agree.
    assert cold.versus_reference.pairs == 1
    assert cold.versus_reference.tokens_median == pytest.approx(0.9, abs=1e-12)
    assert cold.versus_reference.tokens_aggregate == pytest.approx(0.9, abs=1e-12)
    assert cold.versus_reference.bytes_median == pytest.approx(0.9, abs=1e-12)


def test_a_pair_needs_a_positive_reference_size(run: Run) -> None:
    plan, receipts = run
    sizes = {**SIZES, ("native", 0): (0, 0)}  # an empty transcript has no ratio
    results = _build((plan, _sized(receipts, sizes)))
    store = _role(results, "store").compression
    assert store is not None and store.versus_reference is not None
    assert store.versus_reference.pairs == 1
    assert store.versus_reference.tokens_median == pytest.approx(0.975, abs=1e-12)
    cold = _role(results, "cold-rebuild").compression
    assert cold is not None and cold.versus_reference == SizeRatio(
        reference="native", pairs=0, tokens_median=None, tokens_aggregate=None,
        bytes_median=None, bytes_aggregate=None)


def test_a_larger_checkpoint_has_negative_compression(run: Run) -> None:
    plan, receipts = run
    results = _build((plan, _sized(receipts, {**SIZES, ("cold-rebuild", 0): (12_500, 40_000)})))
    cold = _role(results, "cold-rebuild").compression
    assert cold is not None and cold.versus_reference is not None
    assert cold.versus_reference.tokens_median == pytest.approx(-0.25, abs=1e-12)
    assert cold.versus_reference.bytes_median == 0.0
    assert "| \u221225.0% (aggregate \u221225.0%, 1 pair) | 0.0% (aggregate 0.0%, 1 pair) |" \
        in render_markdown(results)


def test_without_a_native_role_there_is_no_ratio(plan_factory: Callable[..., Plan],
                                                 receipt_factory: Callable[..., Receipt]
                                                 ) -> None:
    plan = plan_factory(["store", "cold-rebuild"], ["t1"], probes=2, repeats=1)
    receipts = [receipt_factory(s, C, outcome=RIGHT, checkpoint_tokens=100,
                                checkpoint_bytes=400) for s in plan.slots]
    results = build_results(plan, receipts, faux=True)
    for role in results.results:
        assert role.compression is not None and role.compression.versus_reference is None
        assert role.compression.checkpoints == 1
    md = render_markdown(results)
    assert "No role's arm is native, so there is no reference for compression." in md
    assert "| store | 2/2 = 100.0% | 1 | 100 | 400 | \u2014 | \u2014 |" in md


def test_the_ratio_medians_are_nearest_rank() -> None:
    # Three pairs: the middle one, never an average.
    assert nearest_rank([0.5, 0.9, 0.7], 50) == 0.7
    assert nearest_rank([0.5, 0.9], 50) == 0.5


# -- cost per correct answer -------------------------------------------------------------

def test_cost_per_correct_answer_is_exact_and_floored(run: Run) -> None:
    # Settled units per receipt (conftest): 1,000 + repeat for an admitted slot, 0 for
    # the lost and the unadmitted one. store: 3 x 1,000 + 3 x 1,001 = 6,003 units over
    # 4 correct answers (r0 p00, p02; r1 p00, p01): floor(1,500.75) = 1,500 units =
    # 0.00007500 USD. native: 4 x 1,000 + 3 x 1,001 = 7,003 over 4: 1,750.
    # cold-rebuild: 4 x 1,000 + 4 x 1,001 = 8,004, plus its summariser's 1,000 + 2,000
    # = 11,004 over 3 correct (r0 p02, p03; r1 p00): 3,668 units.
    spends = {"cold-rebuild.t1.r0": SlotSpend(requests=1, admitted=1, settled_units=1_000),
              "cold-rebuild.t1.r1": SlotSpend(requests=1, admitted=1, settled_units=2_000,
                                              retained_units=9_999)}
    results = _build(run, summariser_spends=spends)
    store = _role(results, "store").cost_per_correct
    assert store is not None
    assert store.settled is not None and store.summariser_settled is not None
    assert (store.correct, store.probe_settled.units, store.summariser_settled.units,
            store.settled.units) == (4, 6_003, 0, 6_003)
    assert store.per_correct is not None
    assert (store.per_correct.units, store.per_correct.usd) == (1_500, "0.00007500")
    native = _role(results, "native").cost_per_correct
    assert native is not None and native.per_correct is not None
    assert native.per_correct.units == 1_750
    cold = _role(results, "cold-rebuild").cost_per_correct
    assert cold is not None and cold.per_correct is not None
    assert cold.summariser_settled is not None and cold.summariser_settled.units == 3_000
    assert cold.settled is not None and cold.settled.units == 11_004  # retained: not a cost
    assert (cold.correct, cold.per_correct.units, cold.per_correct.usd) == (
        3, 3_668, "0.00018340")
    # The run's summariser line is the same spend, keyed or not.
    assert results.summariser_spend is not None
    assert results.summariser_spend.settled.units == 3_000
    assert results.summariser_spend.slots == 2


def test_exact_floor_boundary(plan_factory: Callable[..., Plan],
                              receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native"], ["t1"], probes=3, repeats=1)
    spend = SlotSpend(requests=1, admitted=1, settled_units=1)
    receipts = [receipt_factory(s, C, outcome=RIGHT if i < 2 else WRONG, spend=spend)
                for i, s in enumerate(plan.slots)]
    # 3 units over 2 correct: 1.5 -> 1 (floor, never rounded up).
    cost = build_results(plan, receipts, faux=True).results[0].cost_per_correct
    assert cost is not None and cost.per_correct is not None and cost.per_correct.units == 1
    even = [msgspec.structs.replace(r, spend=SlotSpend(requests=1, admitted=1,
                                                       settled_units=2 if i == 0 else 1))
            for i, r in enumerate(receipts)]
    # 4 units over 2 correct: exactly 2.
    cost = build_results(plan, even, faux=True).results[0].cost_per_correct
    assert cost is not None and cost.per_correct is not None and cost.per_correct.units == 2


def test_no_correct_answer_no_cost_per_correct(plan_factory: Callable[..., Plan],
                                               receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native", "store"], ["t1"], probes=2, repeats=1)
    receipts = [receipt_factory(s, C, outcome=WRONG if s.role == "store" else RIGHT,
                                checkpoint_tokens=10, checkpoint_bytes=40)
                for s in plan.slots]
    results = build_results(plan, receipts, faux=True)
    store = _role(results, "store").cost_per_correct
    assert store == CostPerCorrect(correct=0, probe_settled=store.probe_settled,
                                   summariser_settled=store.summariser_settled,
                                   settled=store.settled, per_correct=None)
    assert store.settled is not None and store.settled.units == 2_000
    assert "\u2014 (no correct answer)" in render_markdown(results)


def test_unkeyed_summariser_spend_cannot_be_split(run: Run) -> None:
    spend = SlotSpend(requests=1, admitted=1, settled_units=5)
    results = _build(run, summariser_spends=[spend])
    for role in results.results:
        cost = role.cost_per_correct
        assert cost is not None and cost.summariser_settled is None
        assert cost.settled is None and cost.per_correct is None
    assert results.summariser_spend is not None and results.summariser_spend.settled.units == 5
    # No summariser spend at all is zero for every role.
    none = _build(run)
    assert all(r.cost_per_correct is not None and r.cost_per_correct.summariser_settled
               is not None and r.cost_per_correct.summariser_settled.units == 0
               for r in none.results)
    assert none.summariser_spend is None


def test_summariser_spend_of_an_unplanned_checkpoint_refuses(run: Run) -> None:
    with pytest.raises(ReportError) as caught:
        _build(run, summariser_spends={"elsewhere.t9.r0": SlotSpend()})
    assert caught.value.code is Code.REPORT_INPUT_INVALID


# -- the report refuses sizes that contradict themselves ---------------------------------

@pytest.mark.parametrize("change", [
    {"checkpoint_tokens": 5},  # one size without the other
    {"checkpoint_bytes": 5},
    {"checkpoint_tokens": -1, "checkpoint_bytes": 4},
    {"checkpoint_tokens": True, "checkpoint_bytes": 4},
    {"checkpoint_tokens": 1, "checkpoint_bytes": 4, "checkpoint_sha256": None},
])
def test_inconsistent_sizes_refuse(plan_factory: Callable[..., Plan],
                                   receipt_factory: Callable[..., Receipt],
                                   change: dict[str, Any]) -> None:
    plan = plan_factory(["native"], ["t1"], probes=1, repeats=1)
    bad = msgspec.structs.replace(receipt_factory(plan.slots[0], C, outcome=RIGHT), **change)
    with pytest.raises(ReportError) as caught:
        build_results(plan, [bad], faux=True)
    assert caught.value.code is Code.REPORT_INPUT_INVALID


def test_one_checkpoint_with_two_sizes_refuses(run: Run) -> None:
    plan, receipts = run
    first = next(i for i, r in enumerate(receipts) if (r.role, r.repeat) == ("store", 0))
    changed = list(receipts)
    changed[first] = msgspec.structs.replace(receipts[first], checkpoint_tokens=201)
    with pytest.raises(ReportError) as caught:
        build_results(plan, changed, faux=True)
    assert caught.value.code is Code.REPORT_INPUT_INVALID
    # One content digest is one checkpoint: two roles naming it with two sizes refuse.
    native = next(i for i, r in enumerate(receipts) if r.role == "native")
    store = next(i for i, r in enumerate(receipts) if r.role == "store")
    shared = list(receipts)
    shared[store] = msgspec.structs.replace(
        receipts[store], checkpoint_sha256=receipts[native].checkpoint_sha256)
    with pytest.raises(ReportError) as caught:
        build_results(plan, shared, faux=True)
    assert caught.value.code is Code.REPORT_INPUT_INVALID
    build_results(plan, receipts, faux=True)  # as they were: consistent


def test_documents_and_receipts_written_before_these_fields_decode(run: Run) -> None:
    doc = msgspec.json.decode(render_json(_build(run)))
    for role in doc["results"]:
        del role["compression"], role["cost_per_correct"]
    old = decode_results(msgspec.json.encode(doc))
    assert all(r.compression is None and r.cost_per_correct is None for r in old.results)
    assert "## Accuracy and compression" not in render_markdown(old)
    plan, receipts = run
    bare = [msgspec.structs.replace(r, checkpoint_tokens=None, checkpoint_bytes=None)
            for r in receipts]
    results = build_results(plan, bare, faux=True)
    assert all(r.compression is None and r.cost_per_correct is not None
               for r in results.results)
    assert "Accuracy and compression" not in render_html(results)


# -- how the reports print them ----------------------------------------------------------

def test_the_table_sits_after_accuracy_with_separators_and_faux_money(run: Run) -> None:
    spends = {"cold-rebuild.t1.r0": SlotSpend(requests=1, admitted=1, settled_units=1_000),
              "cold-rebuild.t1.r1": SlotSpend(requests=1, admitted=1, settled_units=2_000)}
    results = _build(run, summariser_spends=spends)
    md = render_markdown(results)
    table = md.split("## Accuracy and compression", 1)[1].split("\n## ", 1)[0]
    assert md.index("## Accuracy and availability") < md.index("## Accuracy and compression")
    assert "| role | exact | checkpoints | tokens median | bytes median | compression " \
           "(tokens) | compression (bytes) | cost per correct faux units |" in table
    assert "| native | 4/7 = 57.1% | 2 | 10,000 | 40,000 | reference | reference | " \
           "0.0000875 (1,750 units) |" in table
    assert "| store | 4/6 = 66.7% | 2 | 200 | 800 | 97.5% (aggregate 97.7%, 2 pairs) | " \
           "97.9% (aggregate 98.0%, 2 pairs) | 0.000075 (1,500 units) |" in table
    assert "| cold-rebuild | 3/8 = 37.5% | 1 | 1,000 | 4,000 | 90.0% (aggregate 90.0%, " \
           "1 pair) | 90.0% (aggregate 90.0%, 1 pair) | 0.0001834 (3,668 units) |" in table
    assert "faux units, no money spent" in table
    assert "Compression is against native, the reference role" in table
    for word in ("checkpoints", "tokens median", "compression (tokens)", "reference",
                 "cost per correct faux units"):
        assert f"\n- `{word}`: " in table, word
    assert all("faux" in line for line in md.splitlines() if "USD" in line)
    page = render_html(results)
    section = page.split("<h2>Accuracy and compression</h2>", 1)[1].split("</details>", 1)[0]
    assert '<td class="r">10,000</td>' in section
    assert '<td class="r">97.5%<br><span class="sub">(aggregate 97.7%, 2 pairs)</span></td>' \
        in section
    assert "<abbr title=" in section and "faux units, no money spent" in section
    real = render_markdown(_build(run, faux=False, summariser_spends=spends))
    real_table = real.split("## Accuracy and compression", 1)[1].split("\n## ", 1)[0]
    assert "cost per correct USD" in real_table and "faux" not in real_table


def test_the_legend_names_no_role() -> None:
    import re

    from efold.folds.registry import BUILTIN_ARMS
    from efold.report.terms import COMPRESSION_TERMS, COST_PER_CORRECT

    names = set(BUILTIN_ARMS) | {"native", "store", "pack", "compaction", "ceiling"}
    words = re.compile(r"[a-z][a-z_-]+")
    for _, meaning in (*COMPRESSION_TERMS, ("", COST_PER_CORRECT)):
        assert not set(words.findall(meaning.lower())) & names, meaning


# -- end to end: a faux pilot's receipts carry the sizes of its snapshots ----------------

def test_a_faux_pilot_records_checkpoint_sizes_and_reports_compression(tmp_path: Path) -> None:
    text = ('name = "sizes"\nsuite = "original"\nroles = ["native", "cold-rebuild", "pack"]\n'
            'probe_limit = 2\nselection_seed = 7\nschedule_seed = 7\ncap_usd = "60.00"\n')
    reg = compute_registration(parse_campaign(text), text.encode())
    run = claim_run_dir(tmp_path / "run")
    out = run_pilot(reg, encode_registration(reg), run)
    assert out.stop_code is None
    by_key = {s.slot: s.checkpoint for s in out.plan.slots}
    sizes: dict[str, tuple[int, int]] = {}
    for receipt in out.receipts:
        key = by_key[receipt.slot]
        restored = read_checkpoint(snapshot_path(str(run / "checkpoints" / key)))
        counted = visible_size(restored.checkpoint.messages)
        # What the controller counted from the verified snapshot is what the fold's own
        # receipt counted, and what the slot's receipt carries.
        assert receipt.checkpoint_sha256 == restored.manifest.content_digest
        assert (receipt.checkpoint_tokens, receipt.checkpoint_bytes) == (
            counted.tokens, counted.bytes) == (restored.checkpoint.receipt.tokens_estimate,
                                               restored.checkpoint.receipt.visible_bytes)
        sizes[key] = (counted.tokens, counted.bytes)
        assert receipt.transcript_tokens is not None and receipt.transcript_bytes is not None
    results = decode_results((run / "results.json").read_bytes())
    arm_of = {s.checkpoint: (s.role, s.suite, s.trace_id, s.repeat) for s in out.plan.slots}
    native = {arm_of[k][1:]: v for k, v in sizes.items() if arm_of[k][0] == "native"}
    for role in results.results:
        mine = {arm_of[k][1:]: v for k, v in sizes.items() if arm_of[k][0] == role.role}
        compression = role.compression
        assert compression is not None and compression.checkpoints == len(mine)
        assert compression.tokens_sum == sum(t for t, _ in mine.values())
        assert compression.bytes_median == nearest_rank([b for _, b in mine.values()], 50)
        ratio = compression.versus_reference
        assert ratio is not None and ratio.against == "transcript" and ratio.pairs == len(mine)
        if role.role == "native":
            # The controller's count of the trace is exactly what the native arm shows.
            assert ratio.tokens_aggregate == ratio.bytes_aggregate == 0.0
            continue
        assert ratio.tokens_aggregate == pytest.approx(
            1 - sum(mine[k][0] for k in mine) / sum(native[k][0] for k in mine), abs=1e-12)
    cold = next(r for r in results.results if r.role == "cold-rebuild").compression
    assert cold is not None and cold.versus_reference is not None
    assert cold.versus_reference.tokens_aggregate is not None
    assert cold.versus_reference.tokens_aggregate > 0  # a cold rebuild keeps less
    summary = (run / "summary.md").read_text()
    assert "## Accuracy and compression" in summary


def test_without_a_native_checkpoint_the_transcript_is_the_reference(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    """The hard suite: the native arm is inventory-infeasible, so it has no checkpoint;
    every other role still compresses against the transcript its receipts carry."""
    plan = plan_factory(["native", "cold-rebuild"], ["t1", "t2"], probes=2, repeats=1)
    sizes = {"t1": (1_000, 4_000), "t2": (3_000, 12_000)}
    receipts = []
    for s in plan.slots:
        if s.role == "native":
            receipts.append(receipt_factory(s, SlotStatus.SKIPPED,
                                            code=Code.INVENTORY_INFEASIBLE))
            continue
        kept = (100, 400) if s.trace_id == "t1" else (600, 2_400)
        receipts.append(receipt_factory(
            s, SlotStatus.COMPLETED, outcome=Outcome.CORRECT, checkpoint_tokens=kept[0],
            checkpoint_bytes=kept[1], transcript_tokens=sizes[s.trace_id][0],
            transcript_bytes=sizes[s.trace_id][1]))
    results = build_results(plan, receipts, faux=True)
    cold = next(r for r in results.results if r.role == "cold-rebuild").compression
    assert cold is not None and cold.versus_reference is not None
    ratio = cold.versus_reference
    assert (ratio.reference, ratio.against, ratio.pairs) == ("transcript", "transcript", 2)
    assert ratio.tokens_median == pytest.approx(0.8)  # nearest rank of {0.9, 0.8}
    assert ratio.tokens_aggregate == pytest.approx(1 - 700 / 4_000)
    assert ratio.bytes_aggregate == pytest.approx(1 - 2_800 / 16_000)
    table = render_markdown(results)
    assert "against the full transcript at the boundary" in table
    # A transcript size without a checkpoint size, or one half of it, refuses.
    bad = msgspec.structs.replace(receipts[-1], transcript_bytes=None)
    with pytest.raises(ReportError):
        build_results(plan, [*receipts[:-1], bad], faux=True)
