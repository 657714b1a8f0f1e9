"""The fold seam: what a fold receives, what it must return, and the receipt builder.

A fold turns the trace prefix at the probe boundary into a ``Checkpoint``. It receives
a ``TracePrefix``: the trace id and the reader projection of the events (never probes,
expected values or categories). Built-in arms, entry-point plugins and external-command
folds all meet here; ``checked`` is the one validation every checkpoint passes before
the prep child writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Protocol, runtime_checkable

import msgspec

from efold.corpus.forms import chars_to_tokens, message_chars
from efold.corpus.model import Event, Trace
from efold.corpus.projection import reader_projection
from efold.errors import Code
from efold.folds.checkpoint import (
    LOOKUP_TOOLS,
    BoundaryEvidence,
    Checkpoint,
    CompactionStats,
    FoldReceipt,
    PackStats,
    PressureEvidence,
    ProjectionStats,
    ReaderMessage,
    RetainedStore,
    StoreStats,
)
from efold.folds.errors import FoldError, PluginError
from efold.folds.store import records_digest
from efold.folds.tokens import exact_token_count, tiktoken_encoding_name


class PriorSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an earlier fold cycle stored: offered to the next cycle, never required.

    Only repeated folding sets it (``efold-controller certify``, whose endurance folds a
    growing session every cycle): ``messages`` are exactly the summary messages the
    previous cycle persisted (efold appends a cycle-unique marker to the last one) and
    ``first_kept_id`` the id of the first live event it kept verbatim (None: it kept
    none). A fold that derives its output from ``TracePrefix.events`` alone may ignore
    it; certification records whether it was read and whether its marker comes back.
    """

    cycle: Annotated[int, msgspec.Meta(ge=1)]
    messages: list[ReaderMessage]
    first_kept_id: str | None = None


class TracePrefix(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The reader-visible trace up to the boundary: what every fold receives.

    ``context_overhead_tokens`` is the chars/4 estimate of what the reader's harness
    adds to every request besides the conversation (the role's instructions and tool
    schemas). Compaction triggers and pressure estimates count it, as the reference
    harness's estimate covers the whole request; 0 means "the conversation only".
    """

    trace_id: str
    events: list[Event]
    context_overhead_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    # The campaign role's ``settings`` table, as parsed (empty when none): a plugin's
    # own configuration, frozen into the registration. Built-in arms take none.
    settings: dict[str, Any] = {}
    # The previous cycle's stored summary, when folds repeat (``PriorSummary``); UNSET
    # everywhere else, and never encoded then.
    prior: PriorSummary | msgspec.UnsetType = msgspec.UNSET

    @classmethod
    def of(cls, trace: Trace, *, context_overhead_tokens: int = 0,
           settings: dict[str, Any] | None = None) -> TracePrefix:
        """The whole trace, through the corpus's reader projection."""
        if context_overhead_tokens < 0:
            raise FoldError(Code.FOLD_INPUT_INVALID, "context overhead must be non-negative")
        return cls(
            trace_id=trace.header.trace_id,
            events=reader_projection(trace),
            context_overhead_tokens=context_overhead_tokens,
            settings=dict(settings or {}),
        )


@runtime_checkable
class Fold(Protocol):
    """A fold arm. ``name`` is its registry name; ``build`` must be deterministic.

    Optional: a class attribute ``derives_from_source = True`` declares that ``build``
    derives its output from ``prefix.events`` alone, never from ``prefix.prior``;
    certification (``efold-controller certify``) then fails the fold if a previous
    summary's marker comes back in its output. Every built-in arm declares it.
    """

    @property
    def name(self) -> str: ...

    def build(self, prefix: TracePrefix) -> Checkpoint: ...


def pressure(measure: str, observed: int, threshold: int) -> PressureEvidence:
    return PressureEvidence(
        measure=measure, observed=observed, threshold=threshold, met=observed >= threshold
    )


def store_stats(retained: RetainedStore) -> StoreStats:
    return StoreStats(
        records=len(retained.records),
        omitted_credential=retained.omitted_credential,
        text_bytes=sum(len(r.text.encode("utf-8")) for r in retained.records),
        records_digest=records_digest(retained.records),
    )


def build_receipt(
    *,
    arm: str,
    prefix: TracePrefix,
    messages: Sequence[ReaderMessage],
    tools: Sequence[str],
    boundary: BoundaryEvidence,
    pressure: Sequence[PressureEvidence],
    projection: ProjectionStats | None = None,
    compactions: Sequence[CompactionStats] = (),
    pack: PackStats | None = None,
    store: RetainedStore | None = None,
) -> FoldReceipt:
    """The content-free receipt of a checkpoint (counts, sizes, estimates, evidence)."""
    source_chars = sum(
        len(e.content) + sum(len(c.function.name) + len(c.function.arguments) for c in e.tool_calls or ())
        for e in prefix.events
    )
    visible_chars = sum(message_chars(m) for m in messages)
    texts = [m.content for m in messages] + [
        c.function.name + c.function.arguments for m in messages for c in m.tool_calls or ()
    ]
    return FoldReceipt(
        arm=arm,
        trace_id=prefix.trace_id,
        source_events=len(prefix.events),
        source_tool_records=sum(1 for e in prefix.events if e.role == "tool"),
        source_tokens_estimate=chars_to_tokens(source_chars),
        messages=len(messages),
        tool_calls=sum(len(m.tool_calls or ()) for m in messages),
        tool_results=sum(1 for m in messages if m.role == "tool"),
        visible_chars=visible_chars,
        visible_bytes=sum(len(t.encode("utf-8")) for t in texts),
        tokens_estimate=chars_to_tokens(visible_chars),
        tiktoken_tokens=exact_token_count(texts),
        tiktoken_encoding=tiktoken_encoding_name(),
        tools_offered=list(tools),
        boundary=boundary,
        pressure=list(pressure),
        projection=projection,
        compactions=list(compactions),
        pack=pack,
        store=None if store is None else store_stats(store),
    )


def build_checkpoint(
    arm: str, prefix: TracePrefix, messages: list[ReaderMessage], tools: list[str],
    boundary: BoundaryEvidence, pressure: Sequence[PressureEvidence], *,
    store: RetainedStore | None = None, projection: ProjectionStats | None = None,
    compactions: Sequence[CompactionStats] = (), pack: PackStats | None = None,
) -> Checkpoint:
    """A checkpoint of ``messages``, ``tools`` and ``store``, with the receipt
    (``build_receipt``) of exactly those."""
    receipt = build_receipt(arm=arm, prefix=prefix, messages=messages, tools=tools,
                            boundary=boundary, pressure=pressure, projection=projection,
                            compactions=compactions, pack=pack, store=store)
    return Checkpoint(arm=arm, trace_id=prefix.trace_id, messages=messages, tools=tools,
                      receipt=receipt, store=store)


def checked(checkpoint: object, name: str, prefix: TracePrefix) -> Checkpoint:
    """Validate a checkpoint a fold returned, or raise ``fold_plugin_invalid``.

    Checks the type, the arm name and trace id, the tool offer (none, or exactly the
    two lookup tools, with a store exactly when they are offered), tool results that
    answer a visible call, and a receipt that agrees with the messages.
    """
    if not isinstance(checkpoint, Checkpoint):
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: build did not return a Checkpoint")
    if checkpoint.arm != name or checkpoint.receipt.arm != name:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: checkpoint names another arm")
    if checkpoint.trace_id != prefix.trace_id or checkpoint.receipt.trace_id != prefix.trace_id:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: checkpoint names another trace")
    if checkpoint.tools not in ([], list(LOOKUP_TOOLS)):
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: tools must be none or both lookup tools")
    if (checkpoint.store is not None) != bool(checkpoint.tools):
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: a store goes with the lookup tools")
    calls: set[str] = set()
    for message in checkpoint.messages:
        for call in message.tool_calls or ():
            calls.add(call.id)
        if message.role == "tool" and message.tool_call_id not in calls:
            raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: a tool result answers no visible call")
    if checkpoint.receipt.messages != len(checkpoint.messages) or checkpoint.receipt.tools_offered != checkpoint.tools:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: the receipt disagrees with the checkpoint")
    return checkpoint
