"""The cycle driver: runs in the contained certification child, never in the controller.

It builds the session of ``fixture`` in ``session.jsonl`` and folds it ``CYCLES`` times.
Each cycle appends one work unit, offers the fold the whole source so far
(``TracePrefix.events``) and the latest stored summary (``TracePrefix.prior``, exactly
as persisted), then splits the checkpoint the fold returned (``kept_tail``): its
longest suffix that is verbatim the newest live events is what it kept, the messages
before that are its summary. A non-empty summary is stored with the cycle's poison
appended. ``cycles.jsonl`` records, per cycle, what was offered (its sha256), whether
the fold read ``prior`` (observed on attribute access, never assumed), the checkpoint's
messages and tools, or the code the fold failed with. The controller checks all of it
afterwards (``checks``); nothing here decides a verdict.

Pressure: every cycle offers ``OVERHEAD_TOKENS`` of context overhead, so any trigger up
to the production ceiling (200,000 tokens) is met and a fold that folds under pressure
folds every cycle.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from efold.certify import fixture
from efold.certify.session import CompactionEntry, SessionWriter, SyncedAppend, encode_line
from efold.corpus.model import Event
from efold.errors import EfoldError
from efold.folds.checkpoint import Checkpoint, ReaderMessage
from efold.folds.fold import Fold, PriorSummary, TracePrefix
from efold.folds.regime import kept_tail

OVERHEAD_TOKENS: Final = 200_000
SESSION_ID: Final = "certify-endurance"
MAXIMAL_ID: Final = "certify-maximal"


class CycleRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One cycle as the child saw it (a line of ``cycles.jsonl``)."""

    cycle: int
    shape: fixture.Shape
    offered_cycle: int | None  # the stored summary offered (None: none yet)
    offered_sha256: str | None  # of the offered messages, canonical JSON
    prior_read: bool | None  # the fold read ``prefix.prior`` (observed); None: unobservable
    messages: list[ReaderMessage] | None  # the checkpoint's; None when the fold failed
    tools: list[str] = []
    error_code: str | None = None
    error: str | None = None
    stored_line_sha256: str | None = None  # the compaction line stored for this cycle


class MaximalRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source_bytes: int
    messages: list[ReaderMessage] | None
    kept: int = 0
    error_code: str | None = None
    error: str | None = None


_PRIOR_READS: set[int] = set()


class _ObservedPrefix(TracePrefix, frozen=True):
    """A ``TracePrefix`` that notes when a fold reads its ``prior``."""

    def __getattribute__(self, name: str) -> Any:
        if name == "prior":
            _PRIOR_READS.add(id(self))
        return super().__getattribute__(name)


def messages_sha256(messages: Sequence[ReaderMessage]) -> str:
    return hashlib.sha256(msgspec.json.encode(list(messages))).hexdigest()


def with_poison(messages: Sequence[ReaderMessage], marker: str) -> list[ReaderMessage]:
    """``messages`` with ``marker`` appended, on its own line, to the last one."""
    last = messages[-1]
    return [*messages[:-1], msgspec.structs.replace(last, content=f"{last.content}\n{marker}")]


def fold_once(fold: Fold, prefix: TracePrefix) -> tuple[Checkpoint | None, str | None, str | None]:
    """The checkpoint, or None and the code and detail the fold failed with."""
    try:
        return fold.build(prefix), None, None
    except EfoldError as exc:
        return None, exc.code.value, exc.detail
    except Exception as exc:  # a built-in's bug or a plugin's fault: recorded, not hidden
        return None, "fold_plugin_failed", f"{type(exc).__name__}: {exc}"


def _inject_malformed(writer: SessionWriter, latest: CompactionEntry, cycle: int,
                      events: Sequence[Event]) -> CompactionEntry:
    """The closure fixture's stored boundary: the latest summary again, with its first
    kept entry moved onto the newest tool result before this cycle's unit."""
    before = events[: len(events) - len(fixture.cycle_unit(cycle).events)]
    result = next(e for e in reversed(before) if e.role == "tool")
    stripped = [*latest.messages[:-1], msgspec.structs.replace(
        latest.messages[-1], content=latest.messages[-1].content.removesuffix(f"\n{latest.poison}"))]
    marker = fixture.poison(cycle, "-injected")
    return writer.append_compaction(entry_id=f"fold-{cycle:03d}-injected", cycle=cycle,
                                    messages=with_poison(stripped, marker),
                                    first_kept_id=result.id, poison=marker, injected=True)


def run_endurance(fold: Fold, out: Path, cycles: int = fixture.CYCLES, *,
                  settings: dict[str, Any] | None = None,
                  observable: bool = True) -> Checkpoint | None:
    """Fold the endurance session ``cycles`` times; write ``session.jsonl`` and
    ``cycles.jsonl`` under ``out`` (module docstring). ``settings`` reach every build as
    ``prefix.settings``; ``observable`` False (an external command, which receives its
    input whole) records ``prior_read`` as None. Returns the last checkpoint the fold
    built (None if it built none)."""
    writer = SessionWriter(out / "session.jsonl")
    log = SyncedAppend(out / "cycles.jsonl")
    try:
        events = fixture.seeded_events()
        writer.append_events(events)
        latest: CompactionEntry | None = None
        last: Checkpoint | None = None
        for cycle in range(1, cycles + 1):
            added = fixture.cycle_unit(cycle).events
            writer.append_events(added)
            events += added
            if fixture.shape_of(cycle) == "malformed_prior" and latest is not None:
                latest = _inject_malformed(writer, latest, cycle, events)
            prior: PriorSummary | msgspec.UnsetType = msgspec.UNSET
            if latest is not None:
                prior = PriorSummary(cycle=latest.cycle, messages=list(latest.messages),
                                     first_kept_id=latest.first_kept_id)
            prefix = _ObservedPrefix(trace_id=SESSION_ID, events=list(events),
                                     context_overhead_tokens=OVERHEAD_TOKENS,
                                     settings=dict(settings or {}), prior=prior)
            checkpoint, code, detail = fold_once(fold, prefix)
            last = checkpoint or last
            messages = None if checkpoint is None else list(checkpoint.messages)
            tools = [] if checkpoint is None else list(checkpoint.tools)
            read = id(prefix) in _PRIOR_READS
            _PRIOR_READS.discard(id(prefix))
            stored_sha: str | None = None
            if messages is not None:
                kept = kept_tail(messages, events)
                summary = messages[: len(messages) - kept]
                if summary:
                    marker = fixture.poison(cycle)
                    latest = writer.append_compaction(
                        entry_id=f"fold-{cycle:03d}", cycle=cycle,
                        messages=with_poison(summary, marker),
                        first_kept_id=events[-kept].id if kept else None, poison=marker)
                    stored_sha = hashlib.sha256(encode_line(latest)).hexdigest()
            log.append(msgspec.json.encode(CycleRecord(
                cycle=cycle, shape=fixture.shape_of(cycle),
                offered_cycle=None if prior is msgspec.UNSET else prior.cycle,
                offered_sha256=None if prior is msgspec.UNSET else messages_sha256(prior.messages),
                prior_read=read if observable else None, messages=messages, tools=tools,
                error_code=code, error=detail,
                stored_line_sha256=stored_sha)) + b"\n")
        return last
    finally:
        writer.close()
        log.close()


def run_maximal(fold: Fold, out: Path, *, settings: dict[str, Any] | None = None) -> None:
    """Fold the maximal source once; write ``maximal.json``."""
    events = fixture.maximal_events()
    source_bytes = sum(len(e.content.encode()) for e in events)
    prefix = TracePrefix(trace_id=MAXIMAL_ID, events=events,
                         context_overhead_tokens=OVERHEAD_TOKENS, settings=dict(settings or {}))
    checkpoint, code, detail = fold_once(fold, prefix)
    messages = None if checkpoint is None else list(checkpoint.messages)
    kept = 0 if messages is None else kept_tail(messages, events)
    record = MaximalRecord(source_bytes=source_bytes, messages=messages, kept=kept,
                           error_code=code, error=detail)
    with open(out / "maximal.json", "xb") as file:
        file.write(msgspec.json.encode(record))
        file.flush()
        os.fsync(file.fileno())
