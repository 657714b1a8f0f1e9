"""Trace, event and probe schemas (versioned msgspec Structs).

A trace file is JSONL: the first line is a ``TraceHeader``, every later line an ``Event``
shaped like an OpenAI chat message (``role``, ``content``, ``tool_calls``,
``tool_call_id``, ``name``) so that other tools can read it. Probes live in a separate,
evaluator-only file and never enter the reader projection. The surface forms a trace
writes its facts in are documented in ``corpus/FORMS.md``.
"""

from __future__ import annotations

import enum
import re
from typing import Final, Literal

import msgspec

TRACE_VERSION = 1
PROBE_VERSION = 1
# An opaque identifier, the only form of id a report accepts (``report.join.check_id``):
# it starts alphanumeric, then letters, digits and . _ : # + -, at most 200 characters;
# no slash, space or quote, so no path, sentence or markup passes for an id. The one
# definition of the rule: every trace and probe id the corpus hands on is one, the
# reports re-export it (``protocol.records.OPAQUE_ID``), and ``register`` applies it.
OPAQUE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:#+-]{0,199}")

# How a probe's values are compared by the scorer (see ``corpus/scoring.py``).
ValueKind = Literal["identifier", "date", "amount", "status", "text"]


class Category(enum.StrEnum):
    TOOL_IDENTIFIER = "tool_identifier"
    ACTIVE_CONSTRAINT = "active_constraint"
    SUPERSEDED_CURRENT = "superseded_current"
    COMMITMENT_STATUS = "commitment_status"
    ARTIFACT_STATUS = "artifact_status"
    NEXT_ACTION = "next_action"
    ABSTENTION = "abstention"
    REDACTION = "redaction"  # hard suite only
    # The categories the field asks (issue 19), hard suite and probe files only.
    DECISION_REASON = "decision_reason"
    PRIORITY_ORDER = "priority_order"
    CROSS_REFERENCE = "cross_reference"
    CONTRADICTION = "contradiction"
    # A boundary case's continuation (``efold.boundary``): judged by its oracles, never
    # scored from an answer. Reserved: a probe file may not use it.
    BOUNDARY = "boundary"


class Outcome(enum.StrEnum):
    CORRECT = "correct"
    STALE = "stale"
    CONFLICTED = "conflicted"
    ABSTAINED = "abstained"  # includes false abstention
    VIOLATION = "violation"
    FABRICATED = "fabricated"
    LEAKED = "leaked"


class Availability(enum.StrEnum):
    PRESENT = "present"  # expected value in the reader-visible checkpoint
    SUPERSEDED_PRESENT = "superseded_present"  # present, but a superseded value too
    RECOVERABLE = "recoverable"  # reachable by a reference lookup path within the meter
    ABSENT = "absent"
    NOT_APPLICABLE = "not_applicable"  # abstention / redaction: nothing to recall


class ToolSource(enum.StrEnum):
    """What kind of record a tool result is."""

    EMAIL = "email"
    CHAT = "chat"
    WEB = "web"
    DOCUMENT = "document"
    CALENDAR = "calendar"
    PARCEL = "parcel"
    WORKSPACE = "workspace"  # a file or a command's output in a boundary case's workspace


class TraceHeader(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="trace", tag_field="kind"):
    trace_id: str
    suite: str  # "original" | "hard" | "hard-distractors"
    family: str  # scenario family, e.g. "kiln"
    fictional: bool
    title: str
    sessions: int
    seed: int | None = None
    version: int = TRACE_VERSION


class FunctionCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    arguments: str  # JSON text, as in the OpenAI shape


class ToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, tag="message", tag_field="kind"):
    """One message of the conversation.

    ``id`` is stable across runs (record ids in the history store cite it). ``role`` is
    ``user`` (the owner), ``assistant`` or ``tool``. A tool result carries
    ``tool_call_id``, ``name`` (the tool) and ``source``. ``steer`` marks owner input
    delivered mid-turn, while a tool call was in flight.
    """

    id: str
    session: int
    day: int
    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    source: ToolSource | None = None
    steer: bool = False


TraceLine = TraceHeader | Event


class Probe(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """An evaluator-only question about the trace.

    Only ``question`` ever reaches a reader. Field use by category:
    - ``expected``: accepted current values (tool_identifier, superseded_current), the
      required terms (active_constraint recall), the accepted first status tokens
      (commitment_status, artifact_status), the keywords (next_action); empty for
      abstention and redaction.
    - ``superseded``: stale values (decoys, earlier dates/amounts).
    - ``forbidden``: patterns whose appearance is a violation (active_constraint task).
    - ``secret``: the string no 8-character run of which may appear (redaction).
    - ``source_event``: the event id holding the expected value (availability analysis);
      None when the value never came up.
    - ``label``: the surface label under which the value appears in the conversation
      (``corpus/FORMS.md``); for abstention, the label that never appears.
    - ``value_kind``: how values are compared (identifier, date, amount, status, text).

    The field categories (``corpus/FORMS.md`` §3-4):
    - decision_reason: ``expected`` the decision's keyword(s) and its recorded reason key
      (all must appear); ``superseded`` a rejected alternative's reason key(s).
    - priority_order: ``expected`` the task keys in the owner's order; ``superseded``
      the same keys in the order a later, louder request asked for.
    - cross_reference: ``expected`` the derived value; ``superseded`` what one fact
      alone gives; ``premises`` the facts (as written) it follows from, and
      ``premise_events`` the event holding each (availability needs every one).
    - contradiction: ``expected`` the recorded value; ``superseded`` the contradicting
      value the question's continuation message claims (and earlier values).
    """

    id: str
    trace_id: str
    category: Category
    question: str
    expected: list[str] = []
    superseded: list[str] = []
    forbidden: list[str] = []
    secret: str | None = None
    mode: Literal["recall", "task"] | None = None
    source_event: str | None = None
    label: str | None = None
    value_kind: ValueKind | None = None
    version: int = PROBE_VERSION
    # Invariant: empty unless cross_reference; ``premise_events`` is empty or as long as
    # ``premises`` (its i-th event holds the i-th premise).
    premises: list[str] = []
    premise_events: list[str] = []


class ProbeFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    trace_id: str
    probes: list[Probe]
    version: int = PROBE_VERSION


class Trace(msgspec.Struct, frozen=True):
    """A loaded trace: header plus events (in conversation order)."""

    header: TraceHeader
    events: list[Event]


class SuiteItem(msgspec.Struct, frozen=True):
    """One trace of a suite with its evaluator-only probes.

    Invariant: ``probes.trace_id == trace.header.trace_id``; only ``trace`` (through
    ``reader_projection``) and each probe's ``question`` ever reach a reader.
    """

    trace: Trace
    probes: ProbeFile
