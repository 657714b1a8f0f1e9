"""The checkpoint: what a fold hands the reader, and its content-free receipt.

A ``Checkpoint`` is the reader-visible state at the probe boundary: chat-shaped messages
(tool calls and results where the arm keeps them), the tools offered (none, or the two
history lookup tools), the retained store (if the arm keeps one), optionally the
structured state the fold returned (``folds.state``) and a ``FoldReceipt``.
It is built once per (role, trace, repeat) in the prep child, written to a snapshot
directory (``snapshot.py``) and restored, hash-verified, for every probe slot.

The receipt holds only counts, sizes, token estimates and evidence flags: never text,
never identifiers from the trace beyond event ids. Reports may print it.

Record citations: wherever a fold shows the reader a retained record (the cold
tool-history projection, the pack), it cites it as ``[record <event id>]``. That one
surface form is what lets a reader call ``history_get`` on a visible id, and what the
availability analysis looks for; ``cite`` and ``CITATION_PATTERN`` are its only spelling.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from efold.corpus.model import ToolCall
from efold.folds.opaque import OpaqueContext
from efold.folds.state import DeclaredState

CHECKPOINT_VERSION = 1

HISTORY_SEARCH = "history_search"
HISTORY_GET = "history_get"
LOOKUP_TOOLS: tuple[str, str] = (HISTORY_SEARCH, HISTORY_GET)

CITATION_PATTERN = re.compile(r"\[record ([A-Za-z0-9][A-Za-z0-9._:-]*)\]")


def cite(record_id: str) -> str:
    """The one reader-visible spelling of a reference to a retained record."""
    return f"[record {record_id}]"


class ReaderMessage(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One reader-visible message, in the OpenAI chat shape.

    ``role`` ``user`` is the owner (or a block a fold injected in the owner's channel,
    as the reference harness injects compaction summaries); ``tool`` is a tool result
    answering ``tool_call_id``.
    """

    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class HistoryRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One retained record of the history store. ``id`` is the trace event id (stable
    across runs), ``seq`` its position in the trace."""

    id: str
    seq: int
    role: Literal["user", "assistant", "tool"]
    kind: str  # "owner", "assistant", or the tool source ("email", "web", ...)
    session: int
    day: int
    text: str


class RetainedStore(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The records a store arm retains, after the privacy rule.

    # Invariant: no record's text contains a textual credential assignment; every tool
    # result that did is absent from ``records`` and counted in ``omitted_credential``.
    """

    records: list[HistoryRecord]
    omitted_credential: int


class ProjectionStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The cold boundary: the text-message window and the tool-history projection."""

    text_messages_available: int
    text_messages_kept: int
    tool_records_available: int
    tool_records_projected: int
    tool_records_dropped: int
    tool_records_truncated: int
    projected_bytes: int


class CompactionStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One compaction: when it fired, what it consumed and what it kept."""

    stage: Literal["mid_trace", "probe"]
    trigger_tokens: int
    tokens_before: int
    tokens_after: int
    summarised_messages: int
    kept_messages: int
    summary_tokens: int
    tool_results_cut: int  # results whose middle the summariser dropped
    summary_entries_elided: int  # entries dropped whole to fit the summary budget


class PackStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The deterministic pack: entries per section, omissions, size."""

    rules: int
    corrections: int
    identifiers: int
    commitments: int
    open_items: int
    omitted_for_budget: int
    tokens_estimate: int
    budget_tokens: int


class RebaseStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A root-mode case's rebase (``regime``): the leaf fold of the ``leaf_events`` older
    events (its checkpoint's content digest and the folds it records), and what the root
    fold was offered of it: ``prior_messages`` summary messages, and the first event its
    verbatim tail kept (None: it kept none)."""

    leaf_events: int
    leaf_checkpoint_sha256: str
    leaf_folds: int
    prior_messages: int
    first_kept_id: str | None


class SpanStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An ``oldest-safe-span`` case's fold (``regime``): the fold folded the
    ``folded_events`` oldest events; the ``kept_events`` after them, from
    ``first_kept_id``, follow its output verbatim."""

    folded_events: int
    kept_events: int
    first_kept_id: str


class LedgerStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The progressive ledger (``ledger.py``): how many extractions committed it, what
    each added (0: an analysis-only stage), the operations they consumed, and the
    entries the reader sees, after the budget; which extractor wrote it, the model's
    stages that degraded (``"pN: reason"``), the selected records no request had room
    for, and the records the selections held. The last four are never encoded at their
    defaults (``selected`` is None in receipts written before it)."""

    extractions: int
    added: list[int]
    operations: int
    entries: int
    omitted_for_budget: int
    tokens_estimate: int
    extractor: str = "deterministic"
    degraded: list[str] = []
    unoffered: int = 0
    selected: int | None = None  # the records the extractions' selections held


class StoreStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    records: int
    omitted_credential: int
    text_bytes: int
    records_digest: str  # sha256 of the canonical record list


class PressureEvidence(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The pressure an arm is designed to test (reference "Evidence checked per sample").

    ``measure`` names what was observed; ``met`` is ``observed >= threshold``. Pressure
    applies to long traces; on the original suite it is recorded, not required.
    """

    measure: str
    observed: int
    threshold: int
    met: bool


class BoundaryEvidence(msgspec.Struct, frozen=True, forbid_unknown_fields=True,
                       omit_defaults=True):
    """Whether the boundary the arm requires was observed for this trace (``native``
    requires none; a compaction arm whose compaction did not fire is unverified and its
    samples are ``boundary_unverified``). ``unsupported_calls``: the calls a proxy fold
    made that efold does not serve (``folds.capture``); any makes the boundary
    unverified and its samples ``fold_proxy_unsupported_call``."""

    # ``restart``: a restart, the cold boundary, then a compaction
    # (``arms.RestartSwitchCompactFold``): verified when its compaction fired.
    # ``ledger``: the cold boundary after the progressive ledger's extractions
    # (``arms.LedgerColdFold``): verified when all of them committed.
    kind: Literal["none", "cold_rebuild", "compaction", "external", "proxy", "restart",
                  "ledger"]
    verified: bool
    unsupported_calls: int = 0


class FoldReceipt(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Content-free account of one checkpoint build."""

    arm: str
    trace_id: str
    source_events: int
    source_tool_records: int
    source_tokens_estimate: int
    messages: int
    tool_calls: int
    tool_results: int
    visible_chars: int
    visible_bytes: int
    tokens_estimate: int
    tiktoken_tokens: int | None
    tiktoken_encoding: str | None
    tools_offered: list[str]
    boundary: BoundaryEvidence
    pressure: list[PressureEvidence]
    projection: ProjectionStats | None = None
    compactions: list[CompactionStats] = []
    pack: PackStats | None = None
    store: StoreStats | None = None
    version: int = CHECKPOINT_VERSION
    # ``ledger-cold`` only; UNSET is never encoded, so every other receipt has the bytes
    # (and its checkpoint the digests) it had before the field existed.
    ledger: LedgerStats | msgspec.UnsetType = msgspec.UNSET
    # A boundary case's regime (``regime``), never encoded when plain (UNSET), as above.
    rebase: RebaseStats | msgspec.UnsetType = msgspec.UNSET
    span: SpanStats | msgspec.UnsetType = msgspec.UNSET


def folds_recorded(receipt: FoldReceipt) -> int:
    """How many folds a checkpoint's receipt records: a compaction arm's compactions, one
    for any other fold whose boundary was crossed (a cold rebuild, an external command,
    a proxy), none for ``native`` or a fold whose boundary is unverified. A boundary
    case's ``fold.repeat`` is read against it (docs/boundary.md §10). A rebase
    (``RebaseStats``) adds its leaf fold's."""
    boundary = receipt.boundary
    leaf = 0 if receipt.rebase is msgspec.UNSET else receipt.rebase.leaf_folds
    if boundary.kind == "compaction":
        return leaf + len(receipt.compactions)
    return leaf + int(boundary.kind != "none" and boundary.verified)


class Checkpoint(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The reader-visible state at the probe boundary.

    # Invariant: ``store`` is not None exactly when ``tools`` offers the lookup tools.
    # Invariant: ``state`` is ``UNSET`` (the fold returned no state) or a
    # ``DeclaredState``; ``UNSET`` is never encoded, so a checkpoint without state has
    # exactly the bytes (and the content and snapshot digests) it had before the field
    # existed. Read the declared state through ``folds.declared.declared_state``, which
    # applies the rule for checkpoints that returned none.
    """

    arm: str
    trace_id: str
    messages: list[ReaderMessage]
    tools: list[str]
    receipt: FoldReceipt
    store: RetainedStore | None = None
    version: int = CHECKPOINT_VERSION
    # A provider compaction's items (``folds.opaque``), for their one reader only.
    opaque: OpaqueContext | None = None
    # The structured state the fold returned (``folds.state``); UNSET: none returned.
    state: DeclaredState | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.state is not msgspec.UNSET and not isinstance(self.state, DeclaredState):
            raise TypeError("Checkpoint.state must be a DeclaredState (or left unset)")


def visible_text(messages: list[ReaderMessage]) -> str:
    """All reader-visible text of a message list, in order (contents, tool-call names
    and arguments), one part per line. What availability searches."""
    parts: list[str] = []
    for message in messages:
        parts.append(message.content)
        for call in message.tool_calls or ():
            parts.append(f"{call.function.name} {call.function.arguments}")
    return "\n".join(parts)
