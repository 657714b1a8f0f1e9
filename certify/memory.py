"""Cross-session memory: 1,000 persisted sessions, a cold rare fact, and the store a fold
retains, read back only through the reader's own lookup tool.

**The source** (``memory_events``): sessions 1..``SESSIONS``, one day each, each an
owner turn, a ``grep`` call carrying its persisted reference (``op-<s>-grep``), its
result (the reference, then ``outcome: no matches`` or ``outcome: <n> matches``) and a
reply. Session ``FACT_SESSION`` (old) also states ``FACT``, found nowhere else.

**The checks** (``check_memory``, in the controller, over the snapshot the child wrote
for this source and for the last endurance cycle), each through
``LookupTool.call`` exactly as a reader calls it:

* ``coverage``: every eligible event (non-empty retained text) of every session is in
  the store, and every record agrees with a fresh normalization of the source
  (``retention.record_text``, session, day, role, kind): no record stale or foreign;
* ``cold``: the fact is not visible in the checkpoint (it is cold);
* ``hot_bound``: at most ``HOT_SESSIONS_MAX`` (8) sessions are still visible in the
  checkpoint, the hot ones (the report counts them); the rest must be cold;
* ``lexical_recall``: ``history_search`` for the fact's token finds exactly its record;
* ``structural_selection``: ``history_search`` for the cold operation's reference, then
  selecting by kind and persisted outcome, gives exactly its result, hydrated whole by
  ``history_get`` with the source's hash;
* ``negative_control``: a reference that does not exist finds nothing;
* ``expansion``: ``history_get`` on the fact's stable id gives the source text, hash
  for hash;
* ``endurance_expansion``: every distinct ``[record <id>]`` the 100 endurance summaries
  emitted expands, through the last endurance checkpoint's store, to its source event's
  normalized text.

It applies to a fold whose checkpoint offers a retained store; for any other it is
``not_applicable``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Final, Literal

import msgspec

from efold.certify.reading import search, whole_record
from efold.corpus.model import Event, FunctionCall, ToolCall, ToolSource
from efold.folds.checkpoint import visible_text
from efold.folds.lookup import LookupTool
from efold.folds.meter import Meter
from efold.folds.retention import record_kind, record_text
from efold.folds.snapshot import RestoredCheckpoint

SESSIONS: Final = 1_000
FACT_SESSION: Final = 17
FACT_TOKEN: Final = "COLDVAULT-0017"
FACT: Final = f"Cold fact: the archive vault phrase is ⟦ꙮ𝔉-{FACT_TOKEN}-ǅ⟧."
FACT_ID: Final = f"m{FACT_SESSION:04d}-owner"
OP_SESSION: Final = 23
NEGATIVE_REF: Final = "op-9999-grep"
HOT_SESSIONS_MAX: Final = 8
MEMORY_ID: Final = "certify-memory"
# The reader's meter, widened: certification reads every page it needs, and counts them.
_CALLS: Final = 1_000_000
_BYTES: Final = 1 << 40
_HITS: Final = 50  # search hits read per query


def op_ref(session: int) -> str:
    return f"op-{session:04d}-grep"


def outcome(session: int) -> str:
    return "no matches" if session % 5 == 3 else f"{session % 7 + 1} matches"


def memory_events() -> list[Event]:
    events: list[Event] = []
    for s in range(1, SESSIONS + 1):
        shard = f"shard-{s % 37:02d}"
        ask = f"Session {s}: run the nightly grep over {shard}."
        if s == FACT_SESSION:
            ask += f" {FACT}"
        arguments = json.dumps({"pattern": "ERR[0-9]+", "shard": shard, "ref": op_ref(s)})
        lines = [f"ref: {op_ref(s)}", f"outcome: {outcome(s)}"]
        if outcome(s) != "no matches":
            lines += [f"{shard}/log-{k}.txt: ERR{s * 13 + k}" for k in range(s % 7 + 1)]
        events += [
            Event(id=f"m{s:04d}-owner", session=s, day=s, role="user", content=ask),
            Event(id=f"m{s:04d}-call", session=s, day=s, role="assistant", content="",
                  tool_calls=[ToolCall(id=f"grep-{s}", function=FunctionCall("grep", arguments))]),
            Event(id=f"m{s:04d}-result", session=s, day=s, role="tool", content="\n".join(lines),
                  tool_call_id=f"grep-{s}", name="grep", source=ToolSource.DOCUMENT),
            Event(id=f"m{s:04d}-reply", session=s, day=s, role="assistant",
                  content=f"Session {s} done: {outcome(s)}."),
        ]
    return events


class MemoryCheck(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    passed: bool
    detail: str | None = None


class MemoryReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    status: Literal["checked", "not_applicable"]
    passed: bool
    checks: list[MemoryCheck] = []
    eligible_sessions: int = 0
    indexed_sessions: int = 0
    eligible_records: int = 0
    stale_records: int = 0  # records that disagree with the source, or are not in it
    hot_sessions: int = 0  # sessions still visible in the checkpoint
    emitted_addresses: int = 0  # distinct record ids the endurance summaries cited
    expanded_addresses: int = 0  # of those, expanded exactly
    store_bytes: int = 0  # the store's SQLite image
    source_bytes: int = 0  # the source's normalized text
    reason: str | None = None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _reader(restored: RestoredCheckpoint) -> LookupTool:
    """The reader's lookup tool over one restored store, with the widened meter."""
    tool = restored.lookup_tool(Meter(call_budget=_CALLS, byte_budget=_BYTES))
    assert tool is not None  # a store was restored
    return tool


# What shows a session in view: its owner turn and reply ("Session N: ...", "Session N
# done: ..."), however punctuated, or its persisted operation reference (op-NNNN-grep),
# which its call and its result carry.
_HOT: Final = re.compile(r"\bSession (\d+)\b|\bop-(\d{4})-grep\b")


def not_applicable(reason: str) -> MemoryReport:
    return MemoryReport(status="not_applicable", passed=True, reason=reason)


def _coverage(restored: RestoredCheckpoint, source: Sequence[Event]
              ) -> tuple[MemoryCheck, int, int, int, int]:
    """The coverage check, and eligible/indexed sessions, eligible and stale records."""
    assert restored.checkpoint.store is not None
    eligible = {e.id: e for e in source if record_text(e).strip()}
    stale = 0
    agreeing: set[str] = set()
    for record in restored.checkpoint.store.records:
        event = eligible.get(record.id)
        if event is None or (record.text, record.session, record.day, record.role,
                             record.kind) != (record_text(event), event.session, event.day,
                                              event.role, record_kind(event)):
            stale += 1
        else:
            agreeing.add(record.id)
    sessions = {e.session for e in eligible.values()}
    missing_sessions = {e.session for e in eligible.values() if e.id not in agreeing}
    indexed = len(sessions - missing_sessions)
    ok = not stale and indexed == len(sessions) == SESSIONS
    detail = None if ok else (f"{len(sessions) - indexed} of {len(sessions)} sessions not "
                              f"indexed whole; {stale} records stale or foreign")
    return (MemoryCheck(name="coverage", passed=ok, detail=detail), len(sessions), indexed,
            len(eligible), stale)


def check_memory(restored: RestoredCheckpoint, endurance: RestoredCheckpoint | None,
                 emitted: Iterable[str], endurance_events: Sequence[Event],
                 store_bytes: int) -> MemoryReport:
    """Check the memory checkpoint (module docstring)."""
    if restored.checkpoint.store is None:
        return not_applicable("the fold offers no retained store")
    source = memory_events()
    by_id = {e.id: e for e in source}
    checks: list[MemoryCheck] = []
    coverage, sessions, indexed, eligible, stale = _coverage(restored, source)
    checks.append(coverage)
    visible = visible_text(restored.checkpoint.messages)
    hot = len({int(a or b) for a, b in _HOT.findall(visible)} & set(range(1, SESSIONS + 1)))
    checks.append(MemoryCheck(name="cold", passed=FACT not in visible,
                              detail=None if FACT not in visible else
                              "the fact is visible: recall is not exercised"))
    checks.append(MemoryCheck(name="hot_bound", passed=hot <= HOT_SESSIONS_MAX,
                              detail=None if hot <= HOT_SESSIONS_MAX else
                              f"{hot} sessions visible, more than {HOT_SESSIONS_MAX}"))
    reader = _reader(restored)
    hits = [h["id"] for h in search(reader, FACT_TOKEN, at_most=_HITS)]
    checks.append(MemoryCheck(name="lexical_recall", passed=hits == [FACT_ID],
                              detail=None if hits == [FACT_ID] else f"found {hits[:3]}"))
    ref, result_id = op_ref(OP_SESSION), f"m{OP_SESSION:04d}-result"
    selected = []
    for hit in search(reader, ref, at_most=_HITS):
        if hit["kind"] != "document":
            continue
        text = whole_record(reader, str(hit["id"]))
        if text is not None and text.splitlines()[:2] == [f"ref: {ref}", "outcome: no matches"]:
            selected.append((hit["id"], text))
    source_text = record_text(by_id[result_id])
    ok = [i for i, _ in selected] == [result_id] and _sha(selected[0][1]) == _sha(source_text)
    checks.append(MemoryCheck(name="structural_selection", passed=ok,
                              detail=None if ok else f"selected {[i for i, _ in selected][:3]}"))
    negative = search(reader, NEGATIVE_REF, at_most=_HITS)
    checks.append(MemoryCheck(name="negative_control", passed=not negative,
                              detail=None if not negative else f"{len(negative)} results"))
    expanded = whole_record(reader, FACT_ID)
    ok = expanded is not None and _sha(expanded) == _sha(record_text(by_id[FACT_ID]))
    checks.append(MemoryCheck(name="expansion", passed=ok,
                              detail=None if ok else "the fact's record does not expand exactly"))
    addresses = sorted(set(emitted))
    done = 0
    if addresses:
        if endurance is None or endurance.checkpoint.store is None:
            checks.append(MemoryCheck(name="endurance_expansion", passed=False,
                                      detail="the last endurance checkpoint offers no store"))
        else:
            events = {e.id: e for e in endurance_events}
            expander = _reader(endurance)
            for address in addresses:
                text = whole_record(expander, address)
                event = events.get(address)
                done += (text is not None and event is not None
                         and _sha(text) == _sha(record_text(event)))
            checks.append(MemoryCheck(
                name="endurance_expansion", passed=done == len(addresses),
                detail=None if done == len(addresses) else
                f"{len(addresses) - done} of {len(addresses)} cited records do not expand"))
    else:
        checks.append(MemoryCheck(name="endurance_expansion", passed=False,
                                  detail="the endurance summaries cited no record"))
    return MemoryReport(
        status="checked", passed=all(c.passed for c in checks), checks=checks,
        eligible_sessions=sessions, indexed_sessions=indexed, eligible_records=eligible,
        stale_records=stale, hot_sessions=hot, emitted_addresses=len(addresses),
        expanded_addresses=done, store_bytes=store_bytes,
        source_bytes=sum(len(record_text(e).encode()) for e in source))
