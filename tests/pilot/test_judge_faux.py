"""The judge call (19-C) through the real guard, the faux judge and the run's durable
permit source over a real journal: the judge's request is admitted under the same cap
as the reader's, on its own ledger key ``<slot>#judge`` (its own spend line), its reply
is parsed strictly, and a cap too small for reader + judge refuses the judge with the
usual cap code before anything is sent.

The permit source here is the controller's ``DurablePermitSource`` (journal-backed);
``KeyedSource`` only forwards the guard's calls to it on one ledger key, as the
controller's ``serve_permits`` does for a child over IPC: it decides nothing itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.judge_profile import JudgeProfile, judge_terms
from efold.controller.campaigns.profiles import caller_terms, route_of
from efold.controller.rundirs.permits import DurablePermitSource
from efold.errors import Code
from efold.guard import Guard
from efold.guard.ledger import SettleKind
from efold.guard.permits import AdmitRequest, OutcomeKind, Permit, Refusal, Settlement, UsageRecord
from efold.guard.wire.faux import FauxTransport
from efold.protocol.tasks import Route
from efold.registry.journal import JournalReader, JournalWriter
from efold.registry.lease import acquire_lease
from efold.worker import judge as wj
from efold.worker.prep import summary_payload
from efold.worker.route import route_contract, route_entry

SLOT = "s0007"
JUDGE_KEY = SLOT + wj.JUDGE_RUN_SUFFIX
QUESTION = "Which van registration did the owner confirm?"
EXPECTED = ["VX-31 KLM"]


class KeyedSource:
    """The guard's permit protocol onto the durable source, on one ledger key."""

    def __init__(self, source: DurablePermitSource, key: str) -> None:
        self._source, self._key = source, key
        self.stop_code: Code | None = None

    def admit(self, request: AdmitRequest) -> Permit | Refusal:
        return self._source.admit(slot=self._key, request_id=request.request_id,
                                  round=request.round, payload_digest=request.payload_digest,
                                  rmax_units=request.rmax_units)

    def consume(self, permit: Permit, body_digest: str) -> None:
        self._source.consume(slot=self._key, permit_id=permit.permit_id,
                             body_digest=body_digest)

    def settle(self, permit: Permit, settlement: Settlement, usage: UsageRecord | None,
               tier: str | None) -> None:
        kind = SettleKind(settlement.kind.value)
        self._source.settle(slot=self._key, permit_id=permit.permit_id, kind=kind,
                            code=settlement.code,
                            usage=usage.counts() if usage is not None else None, tier=tier,
                            cost_claim=settlement.cost_units if kind is SettleKind.SETTLED
                            else None)

    def stop(self, code: Code) -> None:
        self.stop_code = self.stop_code or code
        self._source.stop(code)


@pytest.fixture
def judge_profile() -> JudgeProfile:
    campaign = parse_campaign('name = "j"\nsuite = "original"\nroles = ["native"]\n'
                              'cap_usd = "50"\n[judge]\nprovider = "faux"\n')
    assert campaign.judge is not None
    return campaign.judge


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    with acquire_lease(tmp_path) as lease:
        yield tmp_path, JournalWriter(tmp_path, lease)


def durable(journal: JournalWriter, judge: JudgeProfile, cap_units: int) -> DurablePermitSource:
    reader = caller_terms(judge, 10)  # the faux reader's route and prices
    source = DurablePermitSource(journal, epoch=1, cap_units=cap_units,
                                 rmax_units=reader.rmax_units, max_requests=10,
                                 price=reader.price)
    source.set_terms(JUDGE_KEY, judge_terms(judge))  # as the controller does per slot
    return source


def read(route: Route, source: DurablePermitSource, answer: str) -> int:
    """The reader's one request on the slot's own key (a scripted answer); its cost."""
    guard = Guard(route_contract(route, route_entry(route), cache_key=None, tools=()),
                  route_entry(route), KeyedSource(source, SLOT),
                  FauxTransport(lambda payload: [{"type": "message", "role": "assistant",
                                                   "content": [{"type": "output_text",
                                                                "text": answer}]}]),
                  run_id=SLOT)
    result = guard.request(summary_payload(route, [{"role": "user", "content": QUESTION}]))
    assert result.outcome is OutcomeKind.SETTLED and result.cost_units is not None
    return result.cost_units


def ask(profile: JudgeProfile, source: DurablePermitSource, answer: str,
        expected: list[str] = EXPECTED) -> wj.JudgeVerdict:
    keyed = KeyedSource(source, JUDGE_KEY)
    route = route_of(profile)
    guard = wj.judge_guard(route, keyed, slot=SLOT, deadline_s=30.0, credential=None)
    return wj.ask_judge(guard, route, question=QUESTION, expected=expected, answer=answer,
                        rubric=profile.rubric, pass_threshold=profile.pass_threshold,
                        stop_code=keyed.stop_code)


def test_the_faux_judge_scores_after_the_answer_on_its_own_ledger_line(
        judge_profile: JudgeProfile, run_dir: tuple[Path, JournalWriter]) -> None:
    path, journal = run_dir
    source = durable(journal, judge_profile, cap_units=2**40)
    route = route_of(judge_profile)
    reader_cost = read(route, source, "VX-31 KLM")
    verdict = ask(judge_profile, source, "The owner confirmed VX-31 KLM.")
    assert verdict == wj.JudgeVerdict(dict.fromkeys(judge_profile.rubric, 5), True, None)
    reader_line, judge_line = source.ledger(SLOT), source.ledger(JUDGE_KEY)
    assert (reader_line.admitted, judge_line.admitted) == (1, 1)
    assert judge_line.settled_units > 0 and judge_line.usage_known
    # Both under one cap: the run's total counts the reader and the judge.
    assert source.total_units == reader_cost + judge_line.settled_units
    assert reader_line.settled_units == reader_cost
    with JournalReader(path) as reader:
        holds = reader.rows("holds")
    assert sorted((h["slot"], h["request_id"], h["state"]) for h in holds) == [
        (SLOT, f"{SLOT}-r1", "settled"), (JUDGE_KEY, f"{JUDGE_KEY}-r1", "settled")]


@pytest.mark.parametrize(("answer", "expected", "score", "passed"), [
    ("vx-31  klm", EXPECTED, 5, True),  # case and spacing folded
    ("VX-31 KLM and 14 March", ["VX-31 KLM", "15 March"], 2, False),  # some
    ("I think it was VX-13", EXPECTED, 0, False),  # none
    ("UNKNOWN", [], 5, True),  # abstention: nothing expected
    ("It was VX-31 KLM", [], 0, False),
])
def test_the_faux_judge_is_a_deterministic_function_of_answer_and_expected(
        judge_profile: JudgeProfile, run_dir: tuple[Path, JournalWriter], answer: str,
        expected: list[str], score: int, passed: bool) -> None:
    _, journal = run_dir
    verdict = ask(judge_profile, durable(journal, judge_profile, 2**40), answer, expected)
    assert verdict.scores == dict.fromkeys(judge_profile.rubric, score)
    assert verdict.passed is passed and verdict.code is None


@pytest.mark.parametrize("reply", [
    "not json",
    '{"accuracy": 5}',  # missing dimensions
    '{"accuracy": 5, "completeness": 6}',  # out of range
    '{"accuracy": -1, "completeness": 0}',
    '{"accuracy": 5, "completeness": 5, "tone": 5}',  # an extra key
    '{"accuracy": true, "completeness": 5}',  # a boolean is not a score
    '{"accuracy": 5.0, "completeness": 5}',
    '{"accuracy": "5", "completeness": 5}',
    '```json\n{"accuracy": 5, "completeness": 5}\n```',  # no code fence
    '[5, 5]',
    '{"accuracy": 5, "completeness": 5} trailing',
    "",
])
def test_a_reply_that_is_not_the_strict_score_object_is_invalid(
        run_dir: tuple[Path, JournalWriter], reply: str, judge_profile: JudgeProfile) -> None:
    _, journal = run_dir
    rubric = ["accuracy", "completeness"]
    assert wj.parse_scores(reply, rubric) is None
    # Through the guard: the request settles (it was paid for), the verdict is invalid.
    profile = JudgeProfile(rubric=rubric)
    source = durable(journal, profile, 2**40)
    route = route_of(profile)
    scripted = FauxTransport(lambda payload: [{"type": "message", "role": "assistant",
                                               "content": [{"type": "output_text",
                                                            "text": reply}]}])
    guard = Guard(route_contract(route, route_entry(route), cache_key=None, tools=()),
                  route_entry(route), KeyedSource(source, JUDGE_KEY), scripted,
                  run_id=wj.judge_run_id(SLOT))
    verdict = wj.ask_judge(guard, route, question=QUESTION, expected=EXPECTED, answer="x",
                           rubric=rubric, pass_threshold=3)
    assert verdict == wj.JudgeVerdict(None, None, Code.JUDGE_REPLY_INVALID)
    assert source.ledger(JUDGE_KEY).settled_units > 0  # counted, never guessed


def test_the_strict_parser_accepts_exactly_the_score_object() -> None:
    assert wj.parse_scores('{"completeness": 0, "accuracy": 5}',
                           ["accuracy", "completeness"]) == {"accuracy": 5, "completeness": 0}


@pytest.mark.parametrize(("total", "threshold", "passed"), [(6, 3, True), (5, 3, False),
                                                            (10, 5, True), (9, 5, False)])
def test_pass_is_the_mean_at_the_exact_threshold(total: int, threshold: int,
                                                 passed: bool) -> None:
    scores = {"a": total // 2, "b": total - total // 2}
    assert wj.passes(scores, threshold) is passed


@pytest.mark.parametrize(("slack", "admitted"), [(0, True), (-1, False)])
def test_a_cap_too_small_for_reader_and_judge_refuses_the_judge_with_the_cap_code(
        judge_profile: JudgeProfile, run_dir: tuple[Path, JournalWriter], slack: int,
        admitted: bool) -> None:
    _, journal = run_dir
    route = route_of(judge_profile)
    judge_rmax = judge_terms(judge_profile).rmax_units
    reader_rmax = caller_terms(judge_profile, 10).rmax_units
    # Room for the reader's hold; after it settles, exactly one judge Rmax (or a unit
    # less) remains under the cap.
    probe = durable(journal, judge_profile, 2**40)
    reader_cost = read(route, probe, "VX-31 KLM")
    source = durable(journal, judge_profile, max(reader_rmax, reader_cost + judge_rmax + slack))
    assert read(route, source, "VX-31 KLM") == reader_cost
    verdict = ask(judge_profile, source, "VX-31 KLM")
    line = source.ledger(JUDGE_KEY)
    if admitted:
        assert verdict.passed is True and line.admitted == 1
    else:
        assert verdict == wj.JudgeVerdict(None, None, Code.NOT_ADMITTED_CAP)
        assert (line.requests, line.admitted, line.settled_units) == (1, 0, 0)
        assert source.total_units == reader_cost  # nothing held, nothing sent
