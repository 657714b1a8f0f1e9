"""Evaluator-side evidence: what the controller knows about a slot that no child told it.

Computed from the checkpoint a prep child built and the controller verified, read as
data (no fold code runs here): for every probe asked of it, whether the expected value
is available to the reader (model-free, ``efold.folds.probe_availability``), the
exclusion its fold receipt shows (an unverified boundary, missing pressure on a long
trace, a degraded store), and the checkpoint's reader-visible size. Judging copies it
into the slot's receipt.

The size is counted here, from the verified messages, never read from the fold's own
receipt (a plugin or proxy fold writes that one): estimated tokens with the one chars/4
estimate every token bound in efold uses (``corpus.estimate_tokens``), and the UTF-8
bytes of the same text (message contents, tool-call names and arguments), as
``folds.fold.build_receipt`` counts ``visible_bytes``. The retained store is not part of
it: the reader sees a record only by looking it up (the receipt's ``lookup_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from efold.corpus import estimate_tokens
from efold.corpus.model import Availability, Probe, Trace
from efold.folds import TracePrefix, probe_availability
from efold.folds.arms import NATIVE_PRESSURE_MEASURE
from efold.folds.checkpoint import LedgerStats, ReaderMessage
from efold.folds.snapshot import RestoredCheckpoint
from efold.folds.transcript import reader_message, session_transcript
from efold.protocol.records import Exclusion, LedgerRecord

# Pressure is required on long traces only (reference: "On long traces, each sample
# must also show the pressure its arm is designed to test").
_PRESSURE_SUITES = frozenset({"hard", "hard-distractors"})


@dataclass(frozen=True)
class PressureCheck:
    """A checkpoint's input pressure (the native arm's): the chars/4 estimate its fold
    recorded and the floor a valid sample needs. ``provider``: the route's provider
    reports its own count of the input (local and real routes), and that count, of the
    slot's first request, decides (``judging``); the estimate stays the plan-time
    pre-check, reported beside it. ``required``: the suite requires pressure."""

    estimate: int
    threshold: int
    provider: bool
    required: bool


@dataclass(frozen=True)
class Evidence:
    """Evaluator-side facts about a slot, computed by the controller, never the child."""

    availability: Availability | None
    excluded: Exclusion | None
    checkpoint_sha256: str | None
    # The checkpoint's reader-visible size (``visible_size``); None without a checkpoint.
    checkpoint_tokens: int | None = None
    checkpoint_bytes: int | None = None
    # The full transcript's size (``transcript_size``): the reference of compression.
    transcript_tokens: int | None = None
    transcript_bytes: int | None = None
    pressure: PressureCheck | None = None  # the input pressure, when its arm has one
    ledger: LedgerRecord | None = None  # a ledger arm's account of its checkpoint


@dataclass(frozen=True)
class VisibleSize:
    """What the reader is handed: estimated tokens (chars/4) and UTF-8 bytes."""

    tokens: int
    bytes: int


def visible_size(messages: list[ReaderMessage]) -> VisibleSize:
    """The reader-visible size of a checkpoint's messages: their contents and every
    tool call's name and arguments (the text the chars/4 estimate counts)."""
    texts = [m.content for m in messages] + [
        c.function.name + c.function.arguments for m in messages for c in m.tool_calls or ()]
    return VisibleSize(tokens=estimate_tokens(messages),
                       bytes=sum(len(t.encode("utf-8")) for t in texts))


def transcript_size(trace: Trace) -> VisibleSize:
    """The reader-visible size of the whole trace at the boundary, rendered as the native
    arm hands it to the reader (every session's messages, tool calls and results): the
    reference every checkpoint's compression is measured against. Computed from the
    plan's trace with efold's own projection, never from a fold's output, so it exists
    also when the native arm itself is inventory-infeasible (the hard suite)."""
    events = TracePrefix.of(trace).events
    return visible_size([reader_message(e) for e in session_transcript(events)])


def ledger_record(stats: LedgerStats | msgspec.UnsetType) -> LedgerRecord | None:
    """What a slot's receipt keeps of its checkpoint's ledger account (None: no ledger)."""
    if isinstance(stats, msgspec.UnsetType):
        return None
    return LedgerRecord(extractor=stats.extractor, selected=stats.selected,
                        unoffered=stats.unoffered, degraded=list(stats.degraded))


def checkpoint_evidence(suite: str, restored: RestoredCheckpoint,
                        probes: list[Probe], transcript: VisibleSize | None = None, *,
                        provider_counts: bool = False) -> dict[str, Evidence]:
    """Evidence per probe id for one checkpoint: availability (model-free), the
    exclusions its fold receipt shows, and its reader-visible size. ``provider_counts``:
    the reader's provider reports usage (a local or real route), so the input pressure
    is left to its count (``PressureCheck``), not decided here on the estimate."""
    cp = restored.checkpoint
    size = visible_size(cp.messages)
    receipt = cp.receipt
    found = next((p for p in receipt.pressure if p.measure == NATIVE_PRESSURE_MEASURE), None)
    check = None if found is None else PressureCheck(
        found.observed, found.threshold, provider_counts, suite in _PRESSURE_SUITES)
    # The estimates this checkpoint is judged on now (the input's, when a provider
    # counts it, is judged per slot instead).
    estimated = [p for p in receipt.pressure if not (provider_counts and p is found)]
    excluded: Exclusion | None = None
    if receipt.boundary.unsupported_calls:
        excluded = Exclusion.PROXY_UNSUPPORTED_CALL
    elif not receipt.boundary.verified:
        excluded = Exclusion.BOUNDARY_UNVERIFIED
    elif suite in _PRESSURE_SUITES and not all(p.met for p in estimated):
        excluded = Exclusion.PRESSURE_UNVERIFIED
    elif cp.store is not None and (receipt.store is None or receipt.store.records == 0):
        excluded = Exclusion.STORE_DEGRADED
    store = restored.open_store()
    out: dict[str, Evidence] = {}
    try:
        for probe in probes:
            result = probe_availability(cp, probe, store=store)
            out[probe.id] = Evidence(Availability(result.availability.value), excluded,
                                     restored.manifest.content_digest,
                                     checkpoint_tokens=size.tokens,
                                     checkpoint_bytes=size.bytes,
                                     transcript_tokens=None if transcript is None
                                     else transcript.tokens,
                                     transcript_bytes=None if transcript is None
                                     else transcript.bytes, pressure=check,
                                     ledger=ledger_record(receipt.ledger))
    finally:
        if store is not None:
            store.close()
    return out
