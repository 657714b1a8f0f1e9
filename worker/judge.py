"""The optional judge (a campaign's ``[judge]``): one guarded model call per answer.

After the reader's answer, the judge model is asked to score it on the rubric's
dimensions, given the probe question, the expected value(s) and the answer. The judge
is *never the headline*: the deterministic score stays the slot's score; the judge's
figures sit beside it (``report.judge``).

Invariants:
- Every judge request goes through a ``Guard`` on the judge's own route with the run
  id ``<slot>#judge`` (``judge_run_id``): its requests carry that prefix in their
  request ids, so the controller admits them on their own ledger key, under the same
  cap, and reports them as their own spend line. Nothing here sends outside the guard.
- The instructions are the fixed template ``JUDGE_INSTRUCTIONS``, shipped here; its
  sha256 (``template_sha256``) is bound into the registration's reader digest.
- A reply is parsed strictly (``parse_scores``): exactly one JSON object whose keys are
  exactly the rubric's dimensions, each an integer 0-5 (a boolean is not an integer).
  Anything else is ``judge_reply_invalid``: counted, never guessed or repaired.
- What leaves this module (``JudgeVerdict``) is numbers and fixed codes only.

The faux judge (``faux_judge``) is a mechanics check, not a judge: a deterministic
function of the expected values and the answer inside the payload it was sent, so that
the agreement figures of a faux run are computable and reproducible.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from efold.errors import Code
from efold.protocol.tasks import Route

if TYPE_CHECKING:
    from efold.guard.request import Guard

JUDGE_TEMPLATE_VERSION: Final = "efold-judge-v1"
SCORE_MIN: Final = 0
SCORE_MAX: Final = 5
# The six dimensions the field's judge scores (Factory Research, December 2025).
DEFAULT_RUBRIC: Final = ("accuracy", "context_awareness", "artifact_trail", "completeness",
                         "continuity", "instruction_following")
JUDGE_RUN_SUFFIX: Final = "#judge"

JUDGE_INSTRUCTIONS: Final = (
    f"[{JUDGE_TEMPLATE_VERSION}] You grade one answer an assistant gave after its "
    "conversation was compacted. The user message is a JSON object with the question, the "
    "expected value(s) (an empty list: the right answer is that the value never came up, "
    "UNKNOWN), the assistant's answer, and the rubric: the dimensions to score. Score each "
    f"dimension with an integer from {SCORE_MIN} (wrong or absent) to {SCORE_MAX} "
    "(fully right). Reply with exactly one JSON object mapping every rubric dimension to "
    "its integer score, and nothing else: no prose, no code fence, no other key."
)


def template_sha256() -> str:
    """The sha256 of the judge template (the registration binds it)."""
    return hashlib.sha256(JUDGE_INSTRUCTIONS.encode()).hexdigest()


def judge_run_id(slot: str) -> str:
    """The judge guard's run id: its request ids are ``<slot>#judge-r<round>``."""
    return slot + JUDGE_RUN_SUFFIX


@dataclass(frozen=True)
class JudgeVerdict:
    """The judge's reading of one answer, content-free. ``scores`` and ``passed`` are
    None when the judge scored nothing (``code`` says why: the request's refusal, loss
    or stop, or ``judge_reply_invalid``)."""

    scores: dict[str, int] | None
    passed: bool | None
    code: Code | None


def judge_document(question: str, expected: Sequence[str], answer: str,
                   rubric: Sequence[str]) -> str:
    """The user message of a judge request: one JSON object, keys sorted."""
    return json.dumps({"question": question, "expected": list(expected), "answer": answer,
                       "rubric": list(rubric)}, sort_keys=True, ensure_ascii=False)


def judge_payload(route: Route, question: str, expected: Sequence[str], answer: str,
                  rubric: Sequence[str]) -> dict[str, Any]:
    """One judge request in the route's wire format (the summariser's shapes: the
    template as the system text, the document as the one user message; no tools)."""
    from efold.worker.prep import summary_payload

    return summary_payload(route, [
        {"role": "system", "content": JUDGE_INSTRUCTIONS},
        {"role": "user", "content": judge_document(question, expected, answer, rubric)},
    ])


def parse_scores(text: str, rubric: Sequence[str]) -> dict[str, int] | None:
    """The judge's scores, or None when ``text`` is not exactly the score object."""
    try:
        value = msgspec.json.decode(text.encode())
    except msgspec.DecodeError:
        return None
    if not isinstance(value, dict) or set(value) != set(rubric) or len(value) != len(rubric):
        return None
    scores: dict[str, int] = {}
    for dim in rubric:
        score = value[dim]
        if type(score) is not int or not SCORE_MIN <= score <= SCORE_MAX:
            return None
        scores[dim] = score
    return scores


def passes(scores: dict[str, int], pass_threshold: int) -> bool:
    """Pass: the mean score is at least ``pass_threshold`` (exact: sum >= t * n)."""
    return sum(scores.values()) >= pass_threshold * len(scores)


def ask_judge(guard: Guard, route: Route, *, question: str, expected: Sequence[str],
              answer: str, rubric: Sequence[str], pass_threshold: int,
              stop_code: Code | None = None) -> JudgeVerdict:
    """Send one judge request through ``guard`` and read its reply strictly.
    ``stop_code``: what the permit source recorded when the guard stopped, if known."""
    from efold.worker.route import reply_text

    result = guard.request(judge_payload(route, question, expected, answer, rubric))
    if not result.ok:
        return JudgeVerdict(None, None, stop_code or result.code or Code.LOOKUP_STOPPED)
    scores = parse_scores(reply_text(result.output_items), rubric)
    if scores is None:
        return JudgeVerdict(None, None, Code.JUDGE_REPLY_INVALID)
    return JudgeVerdict(scores, passes(scores, pass_threshold), None)


def judge_transport(route: Route, credential: str | None) -> Any:
    """The faux judge offline, else HTTP to the judge's endpoint."""
    if route.provider == "faux":
        from efold.guard.wire.faux import FauxTransport

        return FauxTransport(faux_judge)
    from efold.guard.wire.http import HttpTransport

    return HttpTransport(route.base_url, credential=credential)


def judge_guard(route: Route, source: object, *, slot: str, deadline_s: float,
                credential: str | None) -> Guard:
    """The guard every judge request of ``slot`` goes through (a real permit source
    only; no tools, no cache key)."""
    from efold.guard import Guard, assert_real_source
    from efold.worker.route import route_contract, route_entry

    assert_real_source(source)
    entry = route_entry(route)
    contract = route_contract(route, entry, cache_key=None, tools=())
    return Guard(contract, entry, source, judge_transport(route, credential),  # type: ignore[arg-type]
                 run_id=judge_run_id(slot), deadline_s=deadline_s)


# -- the faux judge -------------------------------------------------------------------

_SPACE = re.compile(r"\s+")
_PARTIAL: Final = 2  # some, not all, expected values appear


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text.casefold()).strip()


def _user_text(payload: dict[str, Any]) -> str:
    for item in payload.get("input", ()):
        if isinstance(item, dict) and item.get("role") == "user":
            return "".join(str(p.get("text", "")) for p in item.get("content", ())
                           if isinstance(p, dict))
    return ""


def faux_score(expected: Sequence[str], answer: str) -> int:
    """Every expected value in the answer (case and spacing folded): 5; some: 2;
    none: 0. No expected value: 5 when the answer says UNKNOWN, else 0."""
    seen = _norm(answer)
    if not expected:
        return SCORE_MAX if "unknown" in seen else SCORE_MIN
    hits = sum(_norm(value) in seen for value in expected)
    return SCORE_MAX if hits == len(expected) else _PARTIAL if hits else SCORE_MIN


def faux_judge(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The faux provider's judge: the same score on every rubric dimension
    (``faux_score``), as the one JSON object a judge must reply with. A payload that
    is not a judge document gets an empty object (``judge_reply_invalid``)."""
    try:
        doc = json.loads(_user_text(payload))
        expected = [str(v) for v in doc["expected"]]
        rubric = [str(d) for d in doc["rubric"]]
        answer = str(doc["answer"])
    except (ValueError, KeyError, TypeError):
        expected, rubric, answer = [], [], ""
    score = faux_score(expected, answer)
    text = json.dumps({dim: score for dim in rubric}, sort_keys=True)
    return [{"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": text}]}]
