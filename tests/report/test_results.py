"""build_results: counting rules on a hand-checked run, invariants on random runs, and
refusal of inconsistent or content-bearing inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from efold.corpus.model import Availability, Outcome
from efold.errors import Code
from efold.protocol.records import Exclusion, Plan, Receipt, SlotSpend, SlotStatus
from efold.report import FAUX_NOTE, ReportError, build_results, money
from efold.report.schema import Results, RoleResult, Tally

C, INC, V, U, K = (SlotStatus.COMPLETED, SlotStatus.INCOMPLETE, SlotStatus.INVALID,
                   SlotStatus.UNADMITTED, SlotStatus.SKIPPED)
LOST = SlotSpend(requests=1, admitted=1, retained_units=78_400_000, usage_known=False)


@pytest.fixture
def hand_run(plan_factory: Callable[..., Plan],
             receipt_factory: Callable[..., Receipt]) -> tuple[Plan, list[Receipt]]:
    """native and store, one trace, four probes, two repeats (see the module tests)."""
    plan = plan_factory(["native", "store"], ["t1"], probes=4, repeats=2)
    slot = {(s.role, s.repeat, s.probe_id[-3:]): s for s in plan.slots}
    r = receipt_factory
    receipts = [
        r(slot["native", 0, "p00"], C, outcome=Outcome.CORRECT),
        r(slot["store", 0, "p00"], C, outcome=Outcome.CORRECT,
          availability=Availability.RECOVERABLE),
        r(slot["native", 0, "p01"], C, outcome=Outcome.STALE),
        r(slot["store", 0, "p01"], C, outcome=Outcome.CORRECT),
        r(slot["native", 0, "p02"], INC, code=Code.LOOKUP_WORKER_LOST, spend=LOST),
        r(slot["store", 0, "p02"], C, outcome=Outcome.VIOLATION,
          excluded=Exclusion.STORE_DEGRADED),
        r(slot["native", 0, "p03"], U, code=Code.NOT_ADMITTED_CAP),
        r(slot["store", 0, "p03"], U, code=Code.NOT_ADMITTED_CAP),
        r(slot["native", 1, "p00"], C, outcome=Outcome.ABSTAINED),
        r(slot["store", 1, "p00"], C, outcome=Outcome.CORRECT),
        r(slot["native", 1, "p01"], V, code=Code.LOOKUP_EMPTY_FINAL_OUTPUT, availability=None),
        r(slot["store", 1, "p01"], C, outcome=Outcome.FABRICATED),
        # native r1 p02 and both r1 p03 are missing: no receipt.
        r(slot["store", 1, "p02"], C, outcome=Outcome.CORRECT),
    ]
    return plan, receipts


def _role(results: Results, name: str) -> RoleResult:
    return next(role for role in results.results if role.role == name)


def _category(role: RoleResult, category: str) -> Tally:
    return next(t for t in role.categories if t.category == category)


def test_hand_checked_counts(hand_run: tuple[Plan, list[Receipt]]) -> None:
    results = build_results(*hand_run, faux=True)
    native, store = _role(results, "native"), _role(results, "store")

    n = native.overall
    assert (n.exact.successes, n.exact.trials) == (1, 3)
    assert (n.exact_with_failures.successes, n.exact_with_failures.trials) == (1, 5)
    assert n.failed_feasible == 2
    e = n.execution
    assert (e.planned, e.eligible, e.visited, e.skipped, e.unadmitted, e.admitted,
            e.completed, e.incomplete, e.invalid, e.missing) == (8, 8, 6, 0, 1, 5, 3, 1, 1, 2)
    assert n.outcomes == {"correct": 1, "stale": 1, "conflicted": 0, "abstained": 1,
                          "violation": 0, "fabricated": 0, "leaked": 0}
    assert n.availability["present"] == 5 and n.availability_unknown == 1
    assert n.flip is not None and (n.flip.comparable, n.flip.flipped) == (1, 1)
    assert [(s.repeat, s.correct, s.completed) for s in n.by_repeat] == [(0, 1, 2), (1, 0, 1)]
    assert native.codes == {"lookup_worker_lost": 1, "lookup_empty_final_output": 1,
                            "not_admitted_cap": 1}
    tool = _category(native, "tool_identifier")
    assert (tool.exact.successes, tool.exact.trials) == (1, 2)

    s = store.overall
    assert (s.exact.successes, s.exact.trials) == (4, 5)
    assert (s.exact_with_failures.successes, s.exact_with_failures.trials) == (4, 5)
    assert s.excluded["store_degraded"] == 1 and sum(s.excluded.values()) == 1
    assert s.outcomes["violation"] == 0  # the excluded violation is never scored
    assert (s.execution.visited, s.execution.admitted, s.execution.missing) == (7, 6, 1)
    assert s.availability == {"present": 5, "superseded_present": 0, "recoverable": 1,
                              "absent": 0, "not_applicable": 0}
    assert s.flip is not None and (s.flip.comparable, s.flip.flipped, s.flip.rate) == (2, 1, 0.5)

    (contrast,) = results.contrasts
    assert (contrast.role_a, contrast.role_b) == ("native", "store")
    assert (contrast.overall.planned_pairs, contrast.overall.eligible_pairs) == (8, 8)
    done = contrast.overall.completed
    assert (done.pairs, done.both_correct, done.b, done.c, done.both_wrong) == (3, 1, 0, 2, 0)
    assert done.delta_pp == pytest.approx(200 / 3)
    failing = contrast.overall.with_failures
    assert (failing.pairs, failing.both_correct, failing.b, failing.c,
            failing.both_wrong) == (4, 1, 0, 2, 1)
    assert failing.delta_pp == pytest.approx(50.0)

    spend = native.spend
    assert spend.settled == money(4002) and spend.retained == money(78_400_000)
    assert spend.total.usd == "3.92020010" and spend.total.units == 78_404_002
    assert spend.usage_known is False and spend.usage_unknown_slots == 1
    assert spend.tokens.input == 4 * 1200  # a lower bound: one slot's usage is unknown
    assert results.spend.usage_known is False
    assert results.notes[0] == FAUX_NOTE
    assert [row.status for row in results.slots if row.role == "native"] == [
        "completed", "completed", "incomplete", "unadmitted", "completed", "invalid",
        "missing", "missing"]
    assert results.execution.planned == 16 and results.execution.missing == 3


def test_faux_note_only_for_the_faux_reader(hand_run: tuple[Plan, list[Receipt]]) -> None:
    assert FAUX_NOTE not in build_results(*hand_run, faux=False).notes


def test_single_repeat_has_no_flip_rate(plan_factory: Callable[..., Plan],
                                        receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native", "pack"], ["t1"], probes=2, repeats=1)
    receipts = [receipt_factory(s, C, outcome=Outcome.CORRECT) for s in plan.slots]
    results = build_results(plan, receipts, faux=True)
    for role in results.results:
        assert role.overall.flip is None
        assert all(t.flip is None for t in role.categories)
        assert role.spend.usage_known is True
    assert results.spend.tokens.input == 4 * 1200


def test_skipped_slots_leave_both_denominators(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native", "store"], ["t1", "t2"], probes=1, repeats=1,
                        ineligible=lambda role, trace: role == "native" and trace == "t2")
    receipts = [receipt_factory(s, C, outcome=Outcome.CORRECT) if s.eligible
                else receipt_factory(s, K, code=Code.INVENTORY_INFEASIBLE, availability=None)
                for s in plan.slots]
    native = _role(build_results(plan, receipts, faux=True), "native").overall
    assert (native.exact.trials, native.exact_with_failures.trials) == (1, 1)
    assert (native.execution.planned, native.execution.eligible,
            native.execution.skipped) == (2, 1, 1)


def test_money_is_exact() -> None:
    assert money(0).usd == "0.00000000"
    assert money(1).usd == "0.00000005"
    assert money(78_400_000).usd == "3.92000000"
    assert money(500_000_000).usd == "25.00000000"
    assert money(10**30 + 3).usd == "50000000000000000000000.00000015"
    with pytest.raises(ValueError):
        money(-1)


def _replace(receipt: Receipt, **changes: Any) -> Receipt:
    return msgspec.structs.replace(receipt, **changes)


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda rs: [*rs, rs[0]], Code.RECEIPT_DUPLICATE),
        (lambda rs: [_replace(rs[0], slot="s9999"), *rs[1:]], Code.RECEIPT_UNPLANNED),
        (lambda rs: [_replace(rs[0], probe_id="t1.p03"), *rs[1:]], Code.RECEIPT_UNPLANNED),
        (lambda rs: [_replace(rs[0], role="store"), *rs[1:]], Code.RECEIPT_UNPLANNED),
        (lambda rs: [_replace(rs[0], code="worker crashed at /home/x"), *rs[1:]],
         Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[0], correct=False), *rs[1:]], Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[0], outcome=None, correct=None), *rs[1:]],
         Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[4], outcome=Outcome.CORRECT, correct=True), *rs[5:]],
         Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[0], status="done"), *rs[1:]], Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[0], answer_sha256="not-a-hash"), *rs[1:]],
         Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[6], spend=SlotSpend(requests=1, admitted=1, settled_units=5)),
                     *rs[7:]], Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[0], spend=SlotSpend(requests=1, admitted=2)), *rs[1:]],
         Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[0], spend=SlotSpend(settled_units=-1)), *rs[1:]],
         Code.REPORT_INPUT_INVALID),
        (lambda rs: [_replace(rs[0], version=2), *rs[1:]], Code.REPORT_INPUT_INVALID),
    ],
)
def test_inconsistent_receipts_refuse(hand_run: tuple[Plan, list[Receipt]],
                                      mutate: Callable[[list[Receipt]], list[Receipt]],
                                      code: Code) -> None:
    plan, receipts = hand_run
    with pytest.raises(ReportError) as refused:
        build_results(plan, mutate(receipts), faux=True)
    assert refused.value.code is code


@pytest.mark.parametrize(
    "bad_id",
    ["/home/user/run/trace", "What did the owner say?", "a b", "", "x" * 201, "-leading",
     "t1\nsecret", "https://example.org", "key=value"],
)
@pytest.mark.parametrize("field", ["trace_id", "probe_id", "role", "category", "campaign"])
def test_ids_that_could_carry_content_refuse(plan_factory: Callable[..., Plan],
                                             field: str, bad_id: str) -> None:
    plan = plan_factory(["native"], ["t1"], probes=1, repeats=1)
    if field == "campaign":
        plan = msgspec.structs.replace(plan, campaign=bad_id)
    elif field == "role":
        slots = [msgspec.structs.replace(s, role=bad_id) for s in plan.slots]
        plan = msgspec.structs.replace(plan, roles=[bad_id], slots=slots)
    else:
        slots = [msgspec.structs.replace(s, **{field: bad_id}) for s in plan.slots]
        plan = msgspec.structs.replace(plan, slots=slots)
    with pytest.raises(ReportError) as refused:
        build_results(plan, [], faux=True)
    assert refused.value.code is Code.REPORT_INPUT_INVALID


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: msgspec.structs.replace(p, registration_sha256="ab" * 31),
        lambda p: msgspec.structs.replace(p, roles=[*p.roles, "pack"]),  # role without slot
        lambda p: msgspec.structs.replace(p, roles=["native", "native"]),
        lambda p: msgspec.structs.replace(p, repeats=0),
        lambda p: msgspec.structs.replace(p, slots=[*p.slots, p.slots[0]]),
        lambda p: msgspec.structs.replace(p, slots=[
            msgspec.structs.replace(p.slots[0], arm="store"), *p.slots[1:]]),
        lambda p: msgspec.structs.replace(p, slots=[
            msgspec.structs.replace(p.slots[0], category="abstention"), *p.slots[1:]]),
        lambda p: msgspec.structs.replace(p, slots=[
            msgspec.structs.replace(p.slots[0], category="all"), *p.slots[1:]]),
        lambda p: msgspec.structs.replace(p, slots=[
            msgspec.structs.replace(p.slots[0], repeat=-1), *p.slots[1:]]),
        lambda p: msgspec.structs.replace(p, repeats=1),  # slots use two repeats
    ],
)
def test_inconsistent_plans_refuse(hand_run: tuple[Plan, list[Receipt]],
                                   mutate: Callable[[Plan], Plan]) -> None:
    plan, _ = hand_run
    with pytest.raises(ReportError) as refused:
        build_results(mutate(plan), [], faux=True)
    assert refused.value.code is Code.REPORT_INPUT_INVALID


def test_visiting_an_ineligible_slot_refuses(
        plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]) -> None:
    plan = plan_factory(["native"], ["t1"], probes=1, repeats=1,
                        ineligible=lambda role, trace: True)
    with pytest.raises(ReportError) as refused:
        build_results(plan, [receipt_factory(plan.slots[0], U)], faux=True)
    assert refused.value.code is Code.REPORT_INPUT_INVALID


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=1, max_value=3))
def test_invariants_on_random_runs(run_factory: Callable[..., tuple[Plan, list[Receipt]]],
                                   seed: int, repeats: int) -> None:
    plan, receipts = run_factory(seed, repeats=repeats)
    results = build_results(plan, receipts, faux=True)
    total = results.execution
    assert total.planned == len(plan.slots)
    assert total.visited == len(receipts)
    assert total.visited == total.skipped + total.unadmitted + total.admitted
    assert total.admitted == total.completed + total.incomplete + total.invalid
    assert total.missing == sum(s.eligible for s in plan.slots) - sum(
        1 for r in receipts if r.status is not SlotStatus.SKIPPED)
    for role in results.results:
        tallies = role.categories
        overall = role.overall
        for field in ("planned", "eligible", "visited", "admitted", "missing"):
            assert getattr(overall.execution, field) == sum(
                getattr(t.execution, field) for t in tallies)
        assert overall.exact.trials == sum(t.exact.trials for t in tallies)
        assert overall.exact.successes == sum(t.exact.successes for t in tallies)
        assert overall.exact_with_failures.trials == (
            overall.exact.trials + overall.failed_feasible)
        assert sum(overall.outcomes.values()) == overall.exact.trials
        assert overall.outcomes["correct"] == overall.exact.successes
        assert sum(s.completed for s in overall.by_repeat) == overall.exact.trials
        if repeats == 1:
            assert overall.flip is None
        else:
            assert overall.flip is not None and overall.flip.flipped <= overall.flip.comparable
        role_receipts = [r for r in receipts if r.role == role.role]
        assert role.spend.total.units == sum(
            r.spend.settled_units + r.spend.retained_units for r in role_receipts)
        assert role.spend.usage_known == all(r.spend.usage_known for r in role_receipts)
    assert len(results.contrasts) == 3
    for contrast in results.contrasts:
        for tally in [contrast.overall, *contrast.categories]:
            for counts in (tally.completed, tally.with_failures):
                assert counts.both_correct + counts.b + counts.c + counts.both_wrong == (
                    counts.pairs)
            assert tally.completed.pairs <= tally.with_failures.pairs <= tally.eligible_pairs
            assert tally.eligible_pairs <= tally.planned_pairs


def test_journaled_receipts_whose_file_is_gone(hand_run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = hand_run
    gone = next(s.slot for s in plan.slots
                if (s.role, s.repeat, s.probe_id) == ("native", 1, "t1.p02"))
    results = build_results(plan, receipts, faux=True, receipt_copies_missing=[gone])
    native = _role(results, "native").overall.execution
    # the gone copy is not "missing" (never visited): the journal says it was visited
    assert (native.receipt_copies_missing, native.missing, native.visited) == (1, 1, 6)
    assert results.execution.receipt_copies_missing == 1
    assert next(row.status for row in results.slots if row.slot == gone) == "receipt_missing"

    present = receipts[0].slot
    for copies, code in (([present], Code.REPORT_INPUT_INVALID),
                         ([gone, gone], Code.REPORT_INPUT_INVALID),
                         (["s9999"], Code.RECEIPT_UNPLANNED)):
        with pytest.raises(ReportError) as refused:
            build_results(plan, receipts, faux=True, receipt_copies_missing=copies)
        assert refused.value.code is code
