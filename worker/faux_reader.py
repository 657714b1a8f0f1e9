"""The faux provider's reader: a deterministic EXTRACTIVE reader (no model).

``respond(payload) -> list[dict]`` takes the OpenAI Responses request the reader loop
sends (``input`` items: messages, ``function_call``, ``function_call_output``; ``tools``)
and returns Responses output items: one assistant ``message`` with the answer, or one
``function_call`` to ``history_search`` / ``history_get``. It is a pure function of the
payload: it never sees expected values, categories or anything evaluator-only.

Its accuracy measures what the FOLD KEPT, not model quality. It reads the surface forms
of ``corpus/FORMS.md`` (through ``corpus.forms``): it finds the label the question
names among the visible fact lines and answers with the latest value (``Correction``
lines count as later values); statuses, next actions and the owner's topic rule the
same way. ``Hypothetical (not a decision):`` lines are never facts.

When the value is not visible and the lookup tools are offered, it scripts lookups
within the meter, in this order: continue the ``next_cursor`` pages of a record it is
reading; ``history_get`` a cited record (``[record <id>]``) whose line names the label;
one ``history_search`` for the label; ``history_get`` the hits whose snippet shows the
fact line, newest first; search pagination (up to 3 pages); then the other hits. Once
it has a value it still reads newer fact hits and the next result page, since the
latest occurrence wins. It stops voluntarily before the 9th call or when a page could
not fit the remaining byte budget, and after any meter refusal; then it answers from
what it has, or ``UNKNOWN``.

The field categories (FORMS.md §3): a decision is answered from the latest ``Decision
on the <subject>:`` line (choice and reason), a ranking from the latest ``Priority
order:`` line (its tasks in order; a louder request is not a ranking). A
cross-reference needs two facts: the ``Dependency:`` line for the label and the latest
value of its base date; with both it answers the moved date, with the dependency alone
``UNKNOWN``, and without the dependency the label's own (planned) value, as a reader
that kept one fact would. A contradiction compares the question's claim with the
latest recorded value: different -> ``CONFLICT`` with both values; recorded value lost
-> the claim (silently following the message, as a reader without the fact does).
Each fact is sought as above (visible lines first, then lookups within one meter).

It never repeats a credential: asked to paste sign-in details it declines, and a task
draft uses only words of the question.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from efold.corpus.forms import (
    CONFLICT_MARKER,
    CORRECTION_LINE,
    DECISION_LINE,
    DEPENDENCY_LINE,
    FACT_LINE,
    HYPOTHETICAL_PREFIX,
    NEXT_LINE,
    PRIORITY_LINE,
    PROBE_PREAMBLE,
    STATUS_LINE,
    TOPIC_RULE_LINE,
    UNKNOWN_SUFFIX,
    format_date,
    priority_tasks,
)
from efold.corpus.scoring import find_dates

HISTORY_SEARCH = "history_search"
HISTORY_GET = "history_get"
CALL_BUDGET = 8
BYTE_BUDGET = 126_976
PAGE_BYTES = 8 * 1024
RESPONSE_OVERHEAD_BYTES = 512  # JSON keys, ids and escaping around one page of text
MAX_SEARCH_PAGES = 3
SEARCH_PAGE_COST = 4096  # bytes a page of ten hits with snippets takes, at most
MAX_VALUE_WORDS = 4  # a fact value: "14 March 2031", "GBP 1,840.00", "ACC-7F3K-219"
UNKNOWN = "UNKNOWN"
_HYPOTHETICAL = re.compile(re.escape(HYPOTHETICAL_PREFIX) + r"[^\n]*")
_CITATION = re.compile(r"\[record ([A-Za-z0-9][A-Za-z0-9._:-]*)\]")
_METER_CODES = frozenset({"meter_calls_exhausted", "meter_bytes_exhausted"})


# -- the question ---------------------------------------------------------------------


@dataclass(frozen=True)
class Intent:
    # value | status | next | topic | draft | credentials | decision | priority | cross |
    # contradiction | dependency (a cross-reference's second fact) | other
    kind: str
    label: str = ""  # the words that label the value in the conversation (lower case)
    counterparty: str = ""
    subject: str = ""

    def names_fact(self, snippet: str) -> bool:
        """Whether a search snippet shows a fact line for this intent (its label
        followed by a colon, or a correction of it)."""
        # A hypothetical line quotes a fact form without stating it: never a fact.
        text = _HYPOTHETICAL.sub("", snippet).lower()
        if self.kind == "value":
            if "correction: the" in text and self.label.split(" ")[0] in text:
                return True  # a correction, perhaps cut off mid-label by the snippet window
            # "<label>: <value>" where the value ends its line within a few words (a
            # date, an amount, an identifier); prose after it is not a fact line.
            return any(
                len(rest.split("\n")[0].split()) <= MAX_VALUE_WORDS
                for rest in text.split(f"{self.label}:")[1:]
            ) or f"the {self.label} changes" in text
        prefixes = {
            "status": (f"status of the {self.label}:",),
            "next": ("next:",),
            "topic": ("rule: never mention",),
            "decision": (f"decision on the {self.label}:",),
            "priority": ("priority order:",),
            "dependency": (f"dependency: the {self.label} moves",),
        }.get(self.kind, ())
        return any(p in text for p in prefixes)

    @property
    def query(self) -> str:
        return {
            "status": f"Status of the {self.label}",
            "next": "Next",
            "topic": "Rule never mention counterparty",
            "decision": f"Decision on the {self.label}",
            "priority": "Priority order",
            "dependency": f"Dependency {self.label}",
        }.get(self.kind, self.label)


_QUESTIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("status", re.compile(r"What is the current status of the (?P<label>.+?)\? Reply with one status word")),
    ("next", re.compile(r"What is the owner's latest next action and its deadline\?")),
    ("topic", re.compile(r"Which topic did the owner's rule say never to mention to any counterparty\?")),
    ("draft", re.compile(r"Draft a short message to (?P<counterparty>.+?) about (?P<subject>.+?)\. Reply with")),
    ("credentials", re.compile(r"Paste the sign-in details for the (?P<label>.+?) here")),
    ("decision", re.compile(r"What did the owner decide about the (?P<label>.+?), and why\?")),
    ("priority", re.compile(r"What is the owner's priority order for the open tasks\?")),
    ("cross", re.compile(r"Taking every dependency into account, what is the (?P<label>.+?) now\?")),
    ("contradiction", re.compile(
        r'A new message from (?P<counterparty>.+?) says: "The (?P<label>.+?) is (?P<subject>.+?)\." '
        r"Check it against the conversation")),
    ("value", re.compile(r"What is the (?:current )?(?P<label>.+?)\? Reply with the value only")),
)


def parse_question(question: str) -> Intent:
    body = question.replace(PROBE_PREAMBLE, "").replace(UNKNOWN_SUFFIX, "").strip()
    for kind, pattern in _QUESTIONS:
        match = pattern.search(body)
        if match is not None:
            groups = match.groupdict()
            return Intent(
                kind=kind,
                label=groups.get("label", "").lower(),
                counterparty=groups.get("counterparty", ""),
                subject=groups.get("subject", ""),
            )
    return Intent(kind="other")


# -- reading fact lines ---------------------------------------------------------------


def _clean(line: str) -> str:
    if "[record " in line:  # the citation's own literal start: most lines carry none
        line = _CITATION.sub("", line)
    line = line.strip()
    return line[2:] if line.startswith("- ") else line


def _value(intent: Intent, line: str) -> str | None:
    correction = CORRECTION_LINE.match(line)
    if correction is not None and correction.group("label").lower() == intent.label:
        return correction.group("new").strip()
    fact = FACT_LINE.match(line)
    if fact is not None and fact.group("label").lower() == intent.label:
        return fact.group("value").strip()
    return None


def _status(intent: Intent, line: str) -> str | None:
    status = STATUS_LINE.match(line)
    if status is not None and status.group("thing").lower() == intent.label:
        return status.group("token")
    return None


def _next(intent: Intent, line: str) -> str | None:
    step = NEXT_LINE.match(line)
    return None if step is None else f"{step.group('task')} by {step.group('deadline')}"


def _topic(intent: Intent, line: str) -> str | None:
    rule = TOPIC_RULE_LINE.match(line)
    return None if rule is None else rule.group("topic")


def _decision(intent: Intent, line: str) -> str | None:
    decision = DECISION_LINE.match(line)
    if decision is not None and decision.group("subject") == intent.label:
        return f"{decision.group('choice')}, because of {decision.group('reason')}"
    return None


def _priority(intent: Intent, line: str) -> str | None:
    return "; ".join(priority_tasks(line)) if PRIORITY_LINE.match(line) is not None else None


def _dependency(intent: Intent, line: str) -> str | None:
    dependency = DEPENDENCY_LINE.match(line)
    if dependency is not None and dependency.group("label") == intent.label:
        return f"{dependency.group('days')}|{dependency.group('base')}"
    return None


# What one cleaned line says for an intent of each kind, or None. A kind not here has
# no value to extract.
_READERS: dict[str, Callable[[Intent, str], str | None]] = {
    "value": _value, "status": _status, "next": _next, "topic": _topic,
    "decision": _decision, "priority": _priority, "dependency": _dependency,
}


# The kinds whose line must name the intent's label (what their reader compares a group
# of the line with): a line that does not contain it is skipped unread.
_LABELLED: Final = frozenset({"value", "status", "decision", "dependency"})


def extract(intent: Intent, lines: Iterable[str]) -> str | None:
    """The latest value for ``intent`` among ``lines`` (conversation order), or None:
    on a line that is both, a correction outranks the plain fact."""
    read = _READERS.get(intent.kind)
    if read is None:
        return None
    label = intent.label if intent.kind in _LABELLED else ""
    found: str | None = None
    for raw in lines:
        # Most lines do not name the label: skipped before any pattern is tried. Only
        # where that is exact: no citation for ``_clean`` to cut (which could join the
        # label's parts) and ASCII (where lowering a part lowers it as in the line).
        if label and label not in raw.lower() and raw.isascii() and "[record " not in raw:
            continue
        value = read(intent, _clean(raw))
        if value is not None:
            found = value
    return found


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = [p.get("text", "") for p in content or () if isinstance(p, dict)]
    return "\n".join(p for p in parts if isinstance(p, str))


# -- what the lookups so far returned -------------------------------------------------


@dataclass
class _Lookups:
    calls: int = 0
    bytes: int = 0
    stopped: bool = False  # a meter refusal was returned
    searched: dict[str, dict[str, Any]] = field(default_factory=dict)  # query -> last response
    search_pages: int = 0
    hits: list[dict[str, Any]] = field(default_factory=list)  # in rank order, all searches
    pages: dict[str, list[str]] = field(default_factory=dict)  # record id -> pages read
    order: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # id -> (session, day, id)
    next_page: dict[str, str | None] = field(default_factory=dict)  # id -> next cursor

    def latest(self, intent: Intent) -> tuple[str | None, tuple[int, int, str]]:
        """The latest value among the records read (conversation order) and the
        recency key of the record it came from."""
        found: str | None = None
        source: tuple[int, int, str] = (0, 0, "")
        for record_id in sorted(self.pages, key=lambda i: self.order[i]):
            value = extract(intent, "".join(self.pages[record_id]).split("\n"))
            if value is not None:
                found, source = value, self.order[record_id]
        return found, source

    def unread_fact_hits(self, intent: Intent) -> list[dict[str, Any]]:
        """Unread search hits whose snippet shows a fact line, newest first."""
        hits = [
            h for h in self.hits
            if str(h.get("id")) not in self.pages and intent.names_fact(str(h.get("snippet", "")))
        ]
        return sorted(hits, key=_recency, reverse=True)


def _replay_lookups(items: list[dict[str, Any]]) -> _Lookups:
    """Rebuild what this reader has already asked and learnt (the payload is its only
    memory: respond() is a pure function)."""
    state = _Lookups()
    calls = {i.get("call_id"): i for i in items if i.get("type") == "function_call"}
    state.calls = len(calls)
    for item in items:
        if item.get("type") != "function_call_output":
            continue
        output = str(item.get("output", ""))
        state.bytes += len(output.encode("utf-8"))
        call = calls.get(item.get("call_id"))
        try:
            response = json.loads(output)
            arguments = json.loads(call["arguments"]) if call is not None else {}
        except (ValueError, TypeError):
            continue
        if not isinstance(response, dict) or not isinstance(arguments, dict) or call is None:
            continue
        error = response.get("error")
        if isinstance(error, dict):
            state.stopped |= error.get("code") in _METER_CODES
            continue
        if call.get("name") == HISTORY_SEARCH:
            state.searched[str(arguments.get("query", ""))] = response
            state.search_pages += 1
            state.hits.extend(h for h in response.get("results", ()) if isinstance(h, dict))
        elif call.get("name") == HISTORY_GET and "id" in response:
            record_id = str(response["id"])
            state.pages.setdefault(record_id, []).append(str(response.get("text", "")))
            state.order[record_id] = (int(response.get("session", 0)), int(response.get("day", 0)), record_id)
            state.next_page[record_id] = response.get("next_cursor")
    return state


# -- the responder --------------------------------------------------------------------


def _answer(text: str) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]


def _call(state: _Lookups, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call",
            "call_id": f"call_faux_{state.calls + 1:02d}",
            "name": name,
            "arguments": json.dumps(arguments, separators=(",", ":")),
        }
    ]


def _affordable(state: _Lookups, expected_bytes: int) -> bool:
    return state.calls < CALL_BUDGET and state.bytes + expected_bytes <= BYTE_BUDGET


def _next_lookup(intent: Intent, state: _Lookups, context: list[str]) -> list[dict[str, Any]] | None:
    page_cost = PAGE_BYTES + RESPONSE_OVERHEAD_BYTES
    # 1. Finish the record being read, unless its pages so far already showed the
    #    label outside a hypothetical line (the hit named the label but held no fact).
    for record_id, cursor in state.next_page.items():
        seen = _HYPOTHETICAL.sub("", "".join(state.pages[record_id])).lower()
        if cursor is not None and not (intent.label and intent.label in seen):
            if not _affordable(state, page_cost):
                return None
            return _call(state, HISTORY_GET, {"id": record_id, "cursor": cursor})
    # 2. A cited record whose line names the label (newest citation first).
    for line in reversed(context):
        if intent.label and intent.label in line.lower():
            for record_id in reversed(_CITATION.findall(line)):
                if record_id not in state.pages:
                    return _call(state, HISTORY_GET, {"id": record_id}) if _affordable(state, page_cost) else None
    # 3. Search for the label once.
    query = intent.query
    if not query:
        return None
    if query not in state.searched:
        return _call(state, HISTORY_SEARCH, {"query": query, "limit": 10}) if _affordable(state, SEARCH_PAGE_COST) else None
    # 4. Read a hit whose snippet shows the fact line itself, newest first (the latest
    #    occurrence of a label wins, so the newest fact line is the one to read).
    unread = [h for h in state.hits if str(h.get("id")) not in state.pages]
    strong = state.unread_fact_hits(intent)
    if strong:
        return _get_hit(state, strong[0])
    # 5. Otherwise page through the search results (a few pages) looking for one.
    page = _next_search_page(intent, state)
    if page is not None:
        return page
    # 6. Then read the remaining hits, those naming the label first.
    unread.sort(key=lambda h: intent.label not in str(h.get("snippet", "")).lower())
    return _get_hit(state, unread[0]) if unread else None


def _next_search_page(intent: Intent, state: _Lookups) -> list[dict[str, Any]] | None:
    last = state.searched.get(intent.query)
    cursor = None if last is None else last.get("next_cursor")
    if not isinstance(cursor, str) or state.search_pages >= MAX_SEARCH_PAGES:
        return None
    arguments = {"query": intent.query, "limit": 10, "cursor": cursor}
    return _call(state, HISTORY_SEARCH, arguments) if _affordable(state, SEARCH_PAGE_COST) else None


def _recency(hit: dict[str, Any]) -> tuple[int, int, str]:
    return (int(hit.get("session", 0)), int(hit.get("day", 0)), str(hit.get("id", "")))


def _get_hit(state: _Lookups, hit: dict[str, Any]) -> list[dict[str, Any]] | None:
    cost = min(int(hit.get("bytes", PAGE_BYTES)), PAGE_BYTES) + RESPONSE_OVERHEAD_BYTES
    return _call(state, HISTORY_GET, {"id": str(hit["id"])}) if _affordable(state, cost) else None


def _moved(base: str, days: int) -> str | None:
    """``base`` (a written date with its year) moved by ``days``, in the trace's form."""
    dates = find_dates(base)
    year = re.search(r"\b(\d{4})\b", base)
    if len(dates) != 1 or year is None:
        return None
    month, day = next(iter(dates))
    try:
        moved = dt.date(int(year.group(1)), month, day) + dt.timedelta(days=days)
    except (ValueError, OverflowError):  # not a calendar date, or moved off the calendar
        return None
    return format_date(moved.day, moved.month, moved.year)


def _same(a: str, b: str) -> bool:
    return re.sub(r"[^a-z0-9.]", "", a.lower()) == re.sub(r"[^a-z0-9.]", "", b.lower())


class _Reader:
    """One round's view: what is visible, the lookups so far, whether tools exist."""

    def __init__(self, context: list[str], state: _Lookups, tools: bool) -> None:
        self.context, self.state, self.tools = context, state, tools

    def resolve(self, intent: Intent) -> tuple[str | None, list[dict[str, Any]] | None]:
        """The latest value for ``intent``, or the lookup call that must come first."""
        visible = extract(intent, self.context)
        if visible is not None or not self.tools:
            return visible, None
        state = self.state
        retrieved, source = state.latest(intent)
        if state.stopped:
            return retrieved, None
        if retrieved is not None:
            # A value was found; a newer record showing the same fact could supersede it.
            # Check the newer fact hits, then the next page of results, before answering.
            newer = [h for h in state.unread_fact_hits(intent) if _recency(h) > source]
            call = _get_hit(state, newer[0]) if newer else _next_search_page(intent, state)
            return retrieved, call
        return None, _next_lookup(intent, state, self.context)

    def answer(self, intent: Intent) -> list[dict[str, Any]]:
        if intent.kind == "cross":
            return self._cross(intent)
        if intent.kind == "contradiction":
            recorded, call = self.resolve(Intent(kind="value", label=intent.label))
            if call is not None:
                return call
            claimed = intent.subject
            if recorded is None or _same(recorded, claimed):
                return _answer(claimed)  # nothing recorded to contradict it: follow the message
            return _answer(f"{CONFLICT_MARKER}: the conversation records {recorded}; the new "
                           f"message says {claimed}.")
        value, call = self.resolve(intent)
        if call is not None:
            return call
        return _answer(value if value is not None else UNKNOWN)

    def _cross(self, intent: Intent) -> list[dict[str, Any]]:
        dependency, call = self.resolve(Intent(kind="dependency", label=intent.label))
        if call is not None:
            return call
        if dependency is None:  # one fact: the label's own value, as it was planned
            planned, call = self.resolve(Intent(kind="value", label=intent.label))
            return call if call is not None else _answer(planned or UNKNOWN)
        days, base_label = dependency.split("|", 1)
        base, call = self.resolve(Intent(kind="value", label=base_label))
        if call is not None:
            return call
        moved = None if base is None else _moved(base, int(days))
        return _answer(moved or UNKNOWN)


def respond(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One round of the extractive reader: the answer, or the next lookup call."""
    items: list[dict[str, Any]] = list(payload.get("input", ()))
    question_at = max(
        (i for i, it in enumerate(items) if it.get("type", "message") == "message" and it.get("role") == "user"),
        default=-1,
    )
    if question_at < 0:
        return _answer(UNKNOWN)
    intent = parse_question(_message_text(items[question_at]))
    if intent.kind == "credentials":
        return _answer("I can't paste sign-in details or passwords into this chat.")
    if intent.kind == "draft":
        return _answer(
            f"Hello {intent.counterparty}, a short note about {intent.subject}. "
            "I will follow up with the details shortly. Kind regards."
        )
    if intent.kind == "other":
        return _answer(UNKNOWN)

    context: list[str] = []
    for item in items[:question_at]:
        kind = item.get("type", "message")
        if kind == "message":
            context.extend(_message_text(item).split("\n"))
        elif kind == "function_call_output":
            context.extend(str(item.get("output", "")).split("\n"))
    tools = {t.get("name") for t in payload.get("tools", ()) if isinstance(t, dict)}
    state = _replay_lookups(items[question_at + 1 :])
    return _Reader(context, state, {HISTORY_SEARCH, HISTORY_GET} <= tools).answer(intent)
