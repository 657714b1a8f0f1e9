"""The certification checks over files a cycle driver wrote: what they read back, what
they refuse, and hand-checked figures. The driver runs in this process here (on the
built-in ``compaction`` arm), so the files can be tampered with between the two."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from efold.certify.checks import (
    check_endurance,
    check_maximal,
    closure_problem,
    late_growth,
    summary_size,
)
from efold.certify.endurance import run_endurance, run_maximal
from efold.certify.fixture import cycle_unit, opening, seed
from efold.certify.session import (
    CompactionEntry,
    EventEntry,
    SessionError,
    encode_line,
    read_session,
)
from efold.corpus.model import Event, FunctionCall, ToolCall
from efold.errors import Code
from efold.folds.checkpoint import ReaderMessage
from efold.folds.regime import kept_tail
from efold.folds.registry import get_fold

CYCLES = 6


@pytest.fixture
def written(tmp_path: Path) -> Path:
    run_endurance(get_fold("compaction"), tmp_path, cycles=CYCLES)
    run_maximal(get_fold("compaction"), tmp_path)
    return tmp_path


def result(report: object, name: str) -> bool:
    return next(c.passed for c in report.checks if c.name == name)  # type: ignore[attr-defined]


def test_untouched_files_read_back_whole(written: Path) -> None:
    report, emitted = check_endurance(written, derives_from_source=True, cycles=CYCLES)
    assert emitted == set()  # compaction cites no record
    for name in ("fold_ok", "folded", "goal", "round_trip", "context", "prior_offered",
                 "poison", "citations"):
        assert result(report, name), name
    assert report.prior.offered == CYCLES - 1 == report.prior.offered_exactly
    entries = read_session((written / "session.jsonl").read_bytes())
    stored = [e for e in entries if isinstance(e, CompactionEntry)]
    assert [e.cycle for e in stored] == list(range(1, CYCLES + 1))
    assert all(e.messages[-1].content.endswith("\n" + e.poison) for e in stored)
    maximal = check_maximal(written)
    assert maximal.summary_bytes is not None and maximal.summary_bytes > maximal.max_bytes


def test_a_torn_line_is_refused(written: Path) -> None:
    session = written / "session.jsonl"
    session.write_bytes(session.read_bytes()[:-7])
    with pytest.raises(SessionError) as caught:
        check_endurance(written, derives_from_source=True, cycles=CYCLES)
    assert caught.value.code is Code.CERTIFY_SESSION_INVALID
    assert "torn" in caught.value.detail


def test_an_unlinked_line_is_refused() -> None:
    first = encode_line(EventEntry(id="a", parent=None, event=opening()[0]))
    stray = encode_line(EventEntry(id="b", parent="zzz", event=opening()[1]))
    assert len(read_session(first)) == 1
    with pytest.raises(SessionError, match="not linked"):
        read_session(first + stray)
    with pytest.raises(SessionError, match="line 1"):
        read_session(b'{"type": "mystery"}\n')


def test_a_changed_source_event_is_refused(written: Path) -> None:
    session = written / "session.jsonl"
    session.write_bytes(session.read_bytes().replace(b"zero downtime", b"some downtime", 1))
    with pytest.raises(SessionError, match="differ from the fixture"):
        check_endurance(written, derives_from_source=True, cycles=CYCLES)


def test_a_changed_stored_summary_fails_its_round_trip_and_the_next_offer(written: Path) -> None:
    session = written / "session.jsonl"
    lines = session.read_bytes().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if b'"cycle":3' in line)
    entry = msgspec.json.decode(lines[index], type=CompactionEntry)
    changed = msgspec.structs.replace(entry, messages=[
        ReaderMessage(role="user", content="a different summary\n" + entry.poison)])
    lines[index] = encode_line(changed)
    session.write_bytes(b"".join(lines))
    report, _ = check_endurance(written, derives_from_source=True, cycles=CYCLES)
    round_trip = next(c for c in report.checks if c.name == "round_trip")
    offered = next(c for c in report.checks if c.name == "prior_offered")
    assert round_trip.first_failed == [3]
    assert offered.first_failed == [4]


def test_a_missing_cycle_is_refused(written: Path) -> None:
    cycles = written / "cycles.jsonl"
    lines = cycles.read_bytes().splitlines(keepends=True)
    cycles.write_bytes(b"".join(lines[:2] + lines[3:]))
    with pytest.raises(SessionError, match="does not hold cycles"):
        check_endurance(written, derives_from_source=True, cycles=CYCLES)


def _event(eid: str, role: str, **extra: object) -> Event:
    return Event(id=eid, session=1, day=1, role=role, content="", **extra)  # type: ignore[arg-type]


def _call(call_id: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall("read_file", "{}"))


def test_closure_is_order_and_completeness() -> None:
    source = [_event("a", "assistant", tool_calls=[_call("c1")]),
              _event("r", "tool", tool_call_id="c1", name="read_file")]
    call = ReaderMessage(role="assistant", content="", tool_calls=[_call("c1")])
    answer = ReaderMessage(role="tool", content="", tool_call_id="c1")
    assert closure_problem([call, answer], source) is None
    assert "before or without its call" in (closure_problem([answer, call], source) or "")
    assert "without its result" in (closure_problem([call], source) or "")
    assert closure_problem([call], source[:1]) is None  # a result not yet in the source


def test_growth_figures_by_hand() -> None:
    assert late_growth([100] * 20) == (0, 0.0)
    spread, slope = late_growth([16 * x for x in range(20)])
    assert spread == 304 and slope == pytest.approx(16.0)
    assert late_growth([0, 10, 0, 10]) == (10, pytest.approx(2.0))


def test_summary_size_is_strict_utf8() -> None:
    assert summary_size([ReaderMessage(role="user", content="ꙮ𝔉")]) == (7, True)
    assert summary_size([ReaderMessage(role="user", content="bad \ud800")]) == (None, False)


def test_the_split_keeps_only_a_verbatim_suffix() -> None:
    events = [*opening(), *next(iter(seed())).events, *cycle_unit(1).events]
    from efold.folds.transcript import reader_message
    tail = [reader_message(e) for e in events[-3:]]
    summary = ReaderMessage(role="user", content="summary")
    assert kept_tail([summary, *tail], events) == 3
    assert kept_tail([summary], events) == 0
    assert kept_tail([*tail, summary], events) == 0
