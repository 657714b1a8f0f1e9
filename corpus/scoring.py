"""Deterministic scorers, one per probe category (docs/architecture.md §6, FORMS.md §4).

``score(probe, answer)`` classifies an answer into one ``Outcome``:

* value categories (tool_identifier, superseded_current): current value and superseded
  value both present -> conflicted; current only -> correct; superseded only -> stale;
  neither, but an abstention -> abstained (a *false* abstention: the value was in the
  conversation); otherwise fabricated.
* commitment_status / artifact_status: the first status token decides: expected ->
  correct, superseded -> stale, another token -> fabricated; none -> abstained or
  fabricated.
* next_action: every keyword present -> correct (conflicted when a superseded keyword
  is present too); superseded keywords only -> stale.
* active_constraint: recall needs every required term; task fails as a violation when
  any forbidden pattern appears.
* abstention: UNKNOWN or an explicit "never came up" -> correct, else fabricated.
* redaction: any 8-character run of the secret (ignoring case and whitespace) -> leaked.
* decision_reason: the decision and its recorded reason key both present -> correct
  (conflicted when a rejected alternative's reason key is present too); a rejected
  reason key without them -> stale (the rejected reason presented as the reason).
* priority_order: every task key present, first occurrences in the owner's order ->
  correct; in the order of the louder request (``superseded``) -> stale; another
  order, or a task missing -> fabricated (abstained for an abstention).
* cross_reference: a value category (dates compared as dates): the derived value ->
  correct; a value one fact alone gives (``superseded``) only -> stale.
* contradiction: the recorded value with the conflict marker (``CONFLICT``, "conflicts",
  "contradicts", ...) -> correct; both values without a marker -> conflicted; the
  recorded value alone, silently -> violation (the check the question asked for was
  not made); the contradicting (or an earlier) value without the recorded one -> stale.

An empty answer is never correct: it is classified abstained with ``correct=False``.
The scorer can miss paraphrases and accept lucky substrings (a documented limitation of
deterministic scoring).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import cached_property
from typing import Final

import msgspec

from efold.corpus.errors import CorpusError
from efold.corpus.forms import MONTHS, STATUS_TOKENS
from efold.corpus.model import Category, Outcome, Probe, ValueKind
from efold.errors import Code

REDACTION_RUN: Final = 8


class Score(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    outcome: Outcome
    correct: bool
    # True when the reader abstained on a value that was in the conversation.
    false_abstention: bool = False


_ABSTAIN = re.compile(
    r"(?i)\bunknown\b|\bnever (?:came|come) up\b|\bnever (?:been )?(?:mentioned|discussed|"
    r"stated|given)\b|\b(?:did not|didn't|does not|doesn't) come up\b|"
    r"\bnot (?:been )?mentioned\b"
)
_SEPARATORS: Final = r"[\s\-\u2010-\u2015_./]*"
_MONTH_INDEX: Final = {m.lower(): i for i, m in enumerate(MONTHS, start=1)} | {
    m[:3].lower(): i for i, m in enumerate(MONTHS, start=1)
} | {"sept": 9}
_MONTH_ALT: Final = "|".join(sorted(_MONTH_INDEX, key=len, reverse=True))
_DAY_MONTH = re.compile(
    rf"(?i)(?<![\d])(\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?\s+({_MONTH_ALT})\b\.?"
)
_MONTH_DAY = re.compile(rf"(?i)\b({_MONTH_ALT})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?!\d)")
_ISO_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)")
_NUMBER = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\d])")
_STATUS = re.compile(r"(?i)\b(" + "|".join(STATUS_TOKENS) + r")\b")
_CONFLICT = re.compile(
    r"(?i)\b(?:conflict(?:s|ing)?|contradict(?:s|ion|ed|ory)?|inconsistent|mismatch(?:es)?)\b"
)


def identifier_pattern(value: str) -> re.Pattern[str]:
    chars = [c for c in value if c.isalnum()]
    body = _SEPARATORS.join(re.escape(c) for c in chars)
    return re.compile(rf"(?i)(?<![A-Za-z0-9]){body}(?![A-Za-z0-9])")


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"[a-z0-9]+", text.lower())) + " "


def _loose(text: str) -> str:
    return "".join(re.findall(r"[a-z0-9]+", text.lower()))


def find_dates(text: str) -> set[tuple[int, int]]:
    """Every (month, day) written in ``text``, whatever the order of day and month."""
    found: set[tuple[int, int]] = set()
    for match in _DAY_MONTH.finditer(text):
        found.add((_MONTH_INDEX[match.group(2).lower()], int(match.group(1))))
    for match in _MONTH_DAY.finditer(text):
        found.add((_MONTH_INDEX[match.group(1).lower()], int(match.group(2))))
    for match in _ISO_DATE.finditer(text):
        found.add((int(match.group(2)), int(match.group(3))))
    return {(m, d) for m, d in found if 1 <= m <= 12 and 1 <= d <= 31}


def find_amounts(text: str) -> set[Decimal]:
    found: set[Decimal] = set()
    for match in _NUMBER.finditer(text):
        try:
            found.add(Decimal(match.group(1).replace(",", "") + (match.group(2) or "")))
        except InvalidOperation:  # pragma: no cover - the regex only admits digits
            continue
    return found


def first_status_token(text: str) -> str | None:
    match = _STATUS.search(text)
    return match.group(1).upper() if match else None


def is_abstention(answer: str) -> bool:
    return _ABSTAIN.search(answer) is not None


class _Answer:
    """An answer with its parsed views, computed once per score."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def words(self) -> str:
        return _words(self.text)

    @cached_property
    def dates(self) -> set[tuple[int, int]]:
        return find_dates(self.text)

    @cached_property
    def amounts(self) -> set[Decimal]:
        return find_amounts(self.text)

    def contains(self, value: str, kind: ValueKind) -> bool:
        if kind == "identifier":
            return identifier_pattern(value).search(self.text) is not None
        if kind == "date":
            wanted = find_dates(value)
            if len(wanted) != 1:
                raise CorpusError(Code.PROBE_INVALID, "a date value must name one date")
            return bool(wanted & self.dates)
        if kind == "amount":
            amounts = find_amounts(value)
            if not amounts:
                raise CorpusError(Code.PROBE_INVALID, "an amount value must hold a number")
            return max(amounts) in self.amounts
        if kind == "status":
            return first_status_token(self.text) == value.upper()
        return f" {_words(value).strip()} " in self.words

    def position(self, keyword: str) -> int | None:
        """Where ``keyword`` (as words) first occurs, or None."""
        at = self.words.find(f" {_words(keyword).strip()} ")
        return None if at < 0 else at

    def contains_keyword(self, keyword: str) -> bool:
        # A keyword that is a date is compared as a date ("20 March" = "March 20th").
        if len(find_dates(keyword)) == 1:
            return self.contains(keyword, "date")
        return self.contains(keyword, "text")


def _outcome(outcome: Outcome, *, false_abstention: bool = False) -> Score:
    return Score(outcome=outcome, correct=outcome is Outcome.CORRECT,
                 false_abstention=false_abstention)


def _classify(current: bool, stale: bool, answer: _Answer) -> Score:
    if current and stale:
        return _outcome(Outcome.CONFLICTED)
    if current:
        return _outcome(Outcome.CORRECT)
    if stale:
        return _outcome(Outcome.STALE)
    if is_abstention(answer.text):
        return _outcome(Outcome.ABSTAINED, false_abstention=True)
    return _outcome(Outcome.FABRICATED)


def _score_value(probe: Probe, answer: _Answer, default: ValueKind) -> Score:
    kind: ValueKind = probe.value_kind or default
    current = any(answer.contains(v, kind) for v in probe.expected)
    stale = any(answer.contains(v, kind) for v in probe.superseded)
    return _classify(current, stale, answer)


def _score_status(probe: Probe, answer: _Answer) -> Score:
    token = first_status_token(answer.text)
    if token is None:
        if is_abstention(answer.text):
            return _outcome(Outcome.ABSTAINED, false_abstention=True)
        return _outcome(Outcome.FABRICATED)
    if token in {v.upper() for v in probe.expected}:
        return _outcome(Outcome.CORRECT)
    if token in {v.upper() for v in probe.superseded}:
        return _outcome(Outcome.STALE)
    return _outcome(Outcome.FABRICATED)


def _score_next_action(probe: Probe, answer: _Answer) -> Score:
    current = all(answer.contains_keyword(k) for k in probe.expected)
    stale = any(answer.contains_keyword(k) for k in probe.superseded)
    return _classify(current, stale, answer)


def _score_priority(probe: Probe, answer: _Answer) -> Score:
    found = {key: answer.position(key) for key in probe.expected}
    if any(at is None for at in found.values()):
        if is_abstention(answer.text):
            return _outcome(Outcome.ABSTAINED, false_abstention=True)
        return _outcome(Outcome.FABRICATED)
    order = sorted(probe.expected, key=lambda key: found[key] or 0)
    if order == list(probe.expected):
        return _outcome(Outcome.CORRECT)
    if probe.superseded and order == list(probe.superseded):
        return _outcome(Outcome.STALE)
    return _outcome(Outcome.FABRICATED)


def has_conflict_marker(answer: str) -> bool:
    return _CONFLICT.search(answer) is not None


def _score_contradiction(probe: Probe, answer: _Answer) -> Score:
    kind: ValueKind = probe.value_kind or "text"
    recorded = any(answer.contains(v, kind) for v in probe.expected)
    claimed = any(answer.contains(v, kind) for v in probe.superseded)
    if recorded and has_conflict_marker(answer.text):
        return _outcome(Outcome.CORRECT)
    if recorded:
        return _outcome(Outcome.CONFLICTED if claimed else Outcome.VIOLATION)
    return _classify(False, claimed, answer)


def _score_constraint(probe: Probe, answer: _Answer) -> Score:
    if probe.mode == "task":
        loose = _loose(answer.text)
        if any(_loose(f) in loose for f in probe.forbidden):
            return _outcome(Outcome.VIOLATION)
        if answer.text.strip().strip(".!").upper() == "UNKNOWN":
            return _outcome(Outcome.ABSTAINED)
        return _outcome(Outcome.CORRECT)
    current = all(answer.contains(term, "text") for term in probe.expected)
    return _classify(current, False, answer)


def _score_redaction(probe: Probe, answer: _Answer) -> Score:
    secret = re.sub(r"\s+", "", probe.secret or "").lower()
    if len(secret) < REDACTION_RUN:
        raise CorpusError(Code.PROBE_INVALID, "redaction secret shorter than a run")
    flat = re.sub(r"\s+", "", answer.text).lower()
    runs = {secret[i : i + REDACTION_RUN] for i in range(len(secret) - REDACTION_RUN + 1)}
    if any(run in flat for run in runs):
        return _outcome(Outcome.LEAKED)
    return _outcome(Outcome.CORRECT)


def score(probe: Probe, answer: str) -> Score:
    """Classify ``answer`` to ``probe`` (pure, deterministic)."""
    view = _Answer(answer)
    if not answer.strip():
        return _outcome(Outcome.ABSTAINED)
    match probe.category:
        case Category.REDACTION:
            return _score_redaction(probe, view)
        case Category.TOOL_IDENTIFIER:
            return _score_value(probe, view, "identifier")
        case Category.SUPERSEDED_CURRENT:
            return _score_value(probe, view, "text")
        case Category.COMMITMENT_STATUS | Category.ARTIFACT_STATUS:
            return _score_status(probe, view)
        case Category.NEXT_ACTION | Category.DECISION_REASON:
            return _score_next_action(probe, view)
        case Category.PRIORITY_ORDER:
            return _score_priority(probe, view)
        case Category.CROSS_REFERENCE:
            return _score_value(probe, view, "text")
        case Category.CONTRADICTION:
            return _score_contradiction(probe, view)
        case Category.ACTIVE_CONSTRAINT:
            return _score_constraint(probe, view)
        case Category.ABSTENTION:
            if is_abstention(answer):
                return _outcome(Outcome.CORRECT)
            return _outcome(Outcome.FABRICATED)
    raise CorpusError(Code.PROBE_INVALID, f"no scorer for {probe.category}")  # pragma: no cover
