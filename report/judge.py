"""The optional judge beside the deterministic score (19-C): agreement, never the headline.

From the receipts' ``judge`` records (``protocol.records.JudgeRecord``) only: per role,
the judge's pass rate next to the deterministic exact over the same slots, the mean
score per rubric dimension, Cohen's kappa between judge pass/fail and deterministic
correct, and the slots where they disagree; and the judge's own spend line.

Invariant: the judge never changes ``correct``, ``exact`` or any headline figure; it is
read after them and reported beside them. A judge record that is not content-free
(a dimension that is not an id, a score outside 0-5, a code that is not a fixed code,
scores without pass/fail) refuses the report (``report_input_invalid``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from efold.errors import Code
from efold.protocol.records import JudgeRecord, SlotSpend
from efold.report.errors import ReportError
from efold.report.join import Observation, check_id
from efold.report.schema import JudgeAgreement
from efold.report.stats import proportion

__all__ = ["cohen_kappa", "judge_agreement", "judge_spends"]

_FIXED_CODES = frozenset(code.value for code in Code)
_SCORE_RANGE = range(0, 6)
_DECIMALS = 6


def cohen_kappa(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of two raters' pass/fail over ``pairs`` (exact rationals, then one
    rounding): ``(p_o - p_e) / (1 - p_e)``. None when undefined: no pair, or chance
    agreement is certain (both raters used one and the same class throughout)."""
    n = len(pairs)
    if n == 0:
        return None
    agree = sum(a == b for a, b in pairs)
    a_pass = sum(a for a, _ in pairs)
    b_pass = sum(b for _, b in pairs)
    p_o = Fraction(agree, n)
    p_e = Fraction(a_pass * b_pass + (n - a_pass) * (n - b_pass), n * n)
    if p_e == 1:
        return None
    return round(float((p_o - p_e) / (1 - p_e)), _DECIMALS)


def _check(record: JudgeRecord) -> None:
    for dim, score in record.scores.items():
        check_id("judge dimension", dim)
        if type(score) is not int or score not in _SCORE_RANGE:
            raise ReportError(Code.REPORT_INPUT_INVALID, "judge score is not an integer 0-5")
    if record.code is not None and record.code not in _FIXED_CODES:
        raise ReportError(Code.REPORT_INPUT_INVALID, "judge code is not a fixed code")
    # Exactly one of: scores with pass/fail, or a code saying why there are none.
    if bool(record.scores) != (record.passed is not None) or (
            bool(record.scores) == (record.code is not None)):
        raise ReportError(Code.REPORT_INPUT_INVALID,
                          "a judge record has scores with pass/fail, or a code")


def judge_agreement(observations: Sequence[Observation]) -> JudgeAgreement | None:
    """One role's judge figures (``report.schema.JudgeAgreement``), in the given
    (schedule) order; None when no receipt of the role carries a judge record."""
    judged: list[tuple[Observation, JudgeRecord]] = []
    codes: dict[str, int] = {}
    any_record = False
    for obs in observations:
        record = obs.receipt.judge if obs.receipt is not None else None
        if record is None:
            continue
        any_record = True
        _check(record)
        if record.passed is None:
            assert record.code is not None  # _check
            codes[record.code] = codes.get(record.code, 0) + 1
        else:
            judged.append((obs, record))
    if not any_record:
        return None
    dims: list[str] = []
    for _, record in judged:
        dims += [d for d in record.scores if d not in dims]
    mean_scores = {
        dim: round(sum(r.scores[dim] for _, r in judged if dim in r.scores)
                   / sum(dim in r.scores for _, r in judged), _DECIMALS)
        for dim in dims
    }
    both = [(obs.planned.slot, bool(record.passed), bool(obs.receipt and obs.receipt.correct))
            for obs, record in judged if obs.scored and obs.receipt is not None
            and obs.receipt.correct is not None]
    pairs = [(judge, exact) for _, judge, exact in both]
    counts = {
        "both_pass": sum(j and e for j, e in pairs),
        "both_fail": sum(not j and not e for j, e in pairs),
        "judge_only": sum(j and not e for j, e in pairs),
        "exact_only": sum(e and not j for j, e in pairs),
    }
    return JudgeAgreement(
        judged=len(judged), codes=codes, mean_scores=mean_scores, both=len(both),
        judge_pass=proportion(sum(j for j, _ in pairs), len(pairs)),
        exact=proportion(sum(e for _, e in pairs), len(pairs)),
        counts=counts, kappa=cohen_kappa(pairs),
        disagreeing=[slot for slot, judge, exact in both if judge != exact],
    )


def judge_spends(observations: Sequence[Observation]) -> list[SlotSpend]:
    """The judge's spend per slot that has a judge record (its own line)."""
    return [obs.receipt.judge.spend for obs in observations
            if obs.receipt is not None and obs.receipt.judge is not None]
