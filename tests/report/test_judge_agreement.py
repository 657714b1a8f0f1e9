"""The judge beside the deterministic score (19-C): Cohen's kappa against worked
examples, its undefined cases, the per-role figures in ``results.json``, the judge's
own spend line, and the table after the accuracy table, never instead of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from efold.corpus.model import Outcome
from efold.errors import Code
from efold.protocol.records import (
    JudgeRecord,
    Plan,
    Receipt,
    SlotSpend,
    SlotStatus,
    TokenCounts,
)
from efold.report.errors import ReportError
from efold.report.judge import cohen_kappa
from efold.report.judge_table import JUDGE_TITLE, SHOWN_IDS
from efold.report.render_html import render_html
from efold.report.render_markdown import render_markdown
from efold.report.results import build_results

DIMS = ("accuracy", "completeness")
make_plan: Callable[..., Plan]
receipt: Callable[..., Receipt]


@pytest.fixture(autouse=True)
def _builders(plan_factory: Callable[..., Plan], receipt_factory: Callable[..., Receipt]
              ) -> None:
    """The report conftest's synthetic plan and receipt builders (importlib mode: a
    conftest is reached through its fixtures)."""
    global make_plan, receipt
    make_plan, receipt = plan_factory, receipt_factory
JUDGE_SPEND = SlotSpend(requests=1, admitted=1, settled_units=700,
                        usage=TokenCounts(input=300, output=20))


def table(both_pass: int, judge_only: int, exact_only: int, both_fail: int
          ) -> list[tuple[bool, bool]]:
    """(judge pass, deterministic correct) pairs of a 2x2 table."""
    return ([(True, True)] * both_pass + [(True, False)] * judge_only
            + [(False, True)] * exact_only + [(False, False)] * both_fail)


@pytest.mark.parametrize(("cells", "kappa"), [
    # n=50: p_o = 35/50 = 0.7; judge pass 25/50, exact 30/50: p_e = (25*30 + 25*20)/2500
    # = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4.
    ((20, 5, 10, 15), 0.4),
    # n=100 (the textbook table): p_o = 0.70, p_e = 0.5*0.6 + 0.5*0.4 = 0.5: 0.4 again;
    ((45, 5, 25, 25), 0.4),
    # perfect agreement with both classes present: 1; perfect disagreement: -1.
    ((3, 0, 0, 2), 1.0),
    ((0, 2, 2, 0), -1.0),
    # one rater constant, the other not: p_o = p_e, kappa 0 (defined).
    ((3, 2, 0, 0), 0.0),
    # n=10: p_o = 0.6; judge 6/10, exact 4/10: p_e = 0.24 + 0.24 = 0.48; 0.12 / 0.52.
    ((3, 3, 1, 3), round(0.12 / 0.52, 6)),
])
def test_kappa_matches_worked_examples(cells: tuple[int, int, int, int], kappa: float) -> None:
    assert cohen_kappa(table(*cells)) == pytest.approx(kappa, abs=1e-9)


@pytest.mark.parametrize("cells", [(0, 0, 0, 0), (4, 0, 0, 0), (0, 0, 0, 4)])
def test_kappa_is_undefined_without_pairs_or_with_one_class_throughout(
        cells: tuple[int, int, int, int]) -> None:
    assert cohen_kappa(table(*cells)) is None


def judged(r: Receipt, score: int | None, *, code: str | None = None) -> Receipt:
    record = (JudgeRecord(code=code, spend=JUDGE_SPEND) if score is None else
              JudgeRecord(scores=dict.fromkeys(DIMS, score), passed=score >= 3,
                          spend=JUDGE_SPEND))
    return msgspec.structs.replace(r, judge=record)


def run(judge_scores: dict[int, int | None]) -> Any:
    """Role ``native``: 8 slots, correct on the even ones; ``other``: no judge at all.
    ``judge_scores``: native slot index -> the judge's score (None: an invalid reply)."""
    plan = make_plan(["native", "other"], ["t1"], probes=8, repeats=1)
    receipts = []
    native = [s for s in plan.slots if s.role == "native"]
    for i, slot in enumerate(native):
        r = receipt(slot, SlotStatus.COMPLETED,
                    outcome=Outcome.CORRECT if i % 2 == 0 else Outcome.STALE)
        if i in judge_scores:
            score = judge_scores[i]
            r = judged(r, score, code=None if score is not None else "judge_reply_invalid")
        receipts.append(r)
    receipts += [receipt(s, SlotStatus.COMPLETED, outcome=Outcome.CORRECT)
                 for s in plan.slots if s.role == "other"]
    return plan, receipts, native


def test_results_put_the_judge_beside_the_exact_with_its_agreement() -> None:
    # Judge: pass on 0, 1, 2, 4; fail on 3, 5, 6; slot 7 an invalid reply.
    plan, receipts, native = run({0: 5, 1: 4, 2: 5, 3: 0, 4: 3, 5: 2, 6: 1, 7: None})
    results = build_results(plan, receipts, faux=True, judge="faux/faux-extractive-v1")
    by_role = {r.role: r for r in results.results}
    assert by_role["other"].judge is None
    j = by_role["native"].judge
    assert j is not None
    # The headline is untouched: exact is still over every scored slot (4 of 8).
    assert by_role["native"].overall.exact.successes == 4
    assert by_role["native"].overall.exact.trials == 8
    assert (j.judged, j.both, j.codes) == (7, 7, {"judge_reply_invalid": 1})
    # Over the 7 slots both scored: det correct 0, 2, 4, 6; judge pass 0, 1, 2, 4.
    assert j.counts == {"both_pass": 3, "both_fail": 2, "judge_only": 1, "exact_only": 1}
    assert (j.judge_pass.successes, j.exact.successes) == (4, 4)
    assert j.disagreeing == [native[1].slot, native[6].slot]
    # p_o = 5/7, p_e = (4*4 + 3*3)/49 = 25/49: kappa = (35/49 - 25/49)/(24/49) = 10/24.
    assert j.kappa == pytest.approx(10 / 24, abs=1e-6)
    assert j.mean_scores == {d: pytest.approx(20 / 7, abs=1e-6) for d in DIMS}
    # The judge's spend is its own line (8 records), never in the run's probe spend.
    assert results.judge_spend is not None
    assert (results.judge_spend.slots, results.judge_spend.settled.units) == (8, 8 * 700)
    assert results.spend.settled.units == sum(r.spend.settled_units for r in receipts)
    assert results.judge == "faux/faux-extractive-v1"


def test_without_a_judge_the_results_carry_none() -> None:
    plan, receipts, _ = run({})
    results = build_results(plan, receipts, faux=True)
    assert all(r.judge is None for r in results.results)
    assert results.judge_spend is None and results.judge is None
    assert JUDGE_TITLE not in render_markdown(results)
    assert JUDGE_TITLE not in render_html(results)


def test_the_reports_show_the_judge_table_after_the_accuracy_table() -> None:
    plan, receipts, native = run({i: (5 if i % 2 else 0) for i in range(8)})  # all disagree
    results = build_results(plan, receipts, faux=True)
    j = next(r.judge for r in results.results if r.role == "native")
    assert j is not None and j.kappa == -1.0 and len(j.disagreeing) == 8
    md = render_markdown(results)
    assert f"## {JUDGE_TITLE}" in md
    first_table = md.index("\n## ")
    assert first_table < md.index(f"## {JUDGE_TITLE}")
    assert "-1.000" in md and native[7].slot in md
    assert "judge spend (its own line): 8 requests" in md
    assert JUDGE_TITLE in render_html(results)


def test_the_reports_list_the_first_20_disagreements_and_json_all() -> None:
    plan = make_plan(["native"], ["t1", "t2", "t3"], probes=9, repeats=1)
    receipts = [judged(receipt(s, SlotStatus.COMPLETED, outcome=Outcome.CORRECT), 0)
                for s in plan.slots]  # 27 slots, every one a disagreement
    results = build_results(plan, receipts, faux=True)
    j = results.results[0].judge
    assert j is not None and len(j.disagreeing) == 27
    # Each rater used one class, opposite ones: chance agreement 0, observed 0.
    assert j.kappa == 0.0
    md = render_markdown(results)
    assert plan.slots[SHOWN_IDS - 1].slot in md
    assert plan.slots[SHOWN_IDS].slot + " " not in md.split(f"## {JUDGE_TITLE}")[1]
    assert f"(+{27 - SHOWN_IDS})" in md


@pytest.mark.parametrize("record", [
    JudgeRecord(scores={"accuracy": 6}, passed=True),
    JudgeRecord(scores={"accuracy": -1}, passed=False),
    JudgeRecord(scores={"not an id": 3}, passed=True),
    JudgeRecord(scores={"accuracy": 3}),  # scores without pass/fail
    JudgeRecord(passed=True),  # pass/fail without scores
    JudgeRecord(),  # neither scores nor the code of why not
    JudgeRecord(code="a free-form sentence"),
    JudgeRecord(scores={"accuracy": 3}, passed=True, code=Code.JUDGE_REPLY_INVALID.value),
])
def test_a_judge_record_that_is_not_content_free_refuses_the_report(record: JudgeRecord) -> None:
    plan = make_plan(["native"], ["t1"], probes=1, repeats=1)
    r = msgspec.structs.replace(
        receipt(plan.slots[0], SlotStatus.COMPLETED, outcome=Outcome.CORRECT), judge=record)
    with pytest.raises(ReportError) as caught:
        build_results(plan, [r], faux=True)
    assert caught.value.code is Code.REPORT_INPUT_INVALID


def test_an_old_receipt_without_a_judge_keeps_its_bytes() -> None:
    plan = make_plan(["native"], ["t1"], probes=1, repeats=1)
    r = receipt(plan.slots[0], SlotStatus.COMPLETED, outcome=Outcome.CORRECT)
    assert b"judge" not in msgspec.json.encode(r)
    with_judge = judged(r, 5)
    assert msgspec.json.decode(msgspec.json.encode(with_judge), type=Receipt) == with_judge
