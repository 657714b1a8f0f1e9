"""The lockstep messages (docs/architecture.md §3): one closed tagged union per direction.

Every message is a frozen msgspec Struct that forbids unknown fields, tagged by
``kind``. On the wire each one travels inside an *envelope* that carries its binding:
``epoch``, ``slot``, ``worker`` (pid, start time, boot id) and ``seq``. The channel
stamps the envelope on send and checks it on receipt, so no caller can forget or forge
a binding field; callers only ever build and match the payload messages below.

Probe protocol (child → controller ; controller → child)::

    Hello ; Welcome
    Ready
    per model request:  Admit ; Granted | Refused
                        Consume ; Consumed          (the child sends the request once)
                        Settle ; Settled
    Halt ; Halted                                   (the guard stops the run, at once)
    Terminal ; DoneAck                              (the child then exits 0)

Prep protocol (``efold-prep-v2``)::

    Hello ; Welcome
    { Admit ; Granted | Refused | Consume ; Consumed | Settle ; Settled | Halt ; Halted }*
                                                    (a summariser's requests, as above)
    Prepared ; DoneAck                              (the child then exits 0)

A prep child that sends no model request goes straight from ``Welcome`` to ``Prepared``.
The controller may answer any child message with ``Stop{code}``.

Payload fields are typed and bounded (digests are 64 lowercase hex characters, ids are
short printable strings, counts are non-negative ints): decoding is strict, so a value of
the wrong type or shape is ``ipc_bad_message``, never coerced. This module knows the
*shape* of the protocol, not what a slot, a hold or a digest means.
"""

from __future__ import annotations

import enum
from typing import Annotated, Final, Literal

import msgspec

from efold.errors import Code
from efold.identity import ProcessIdentity
from efold.isolation import Isolation

PROBE_PROTOCOL: Final = "efold-probe-v2"
PREP_PROTOCOL: Final = "efold-prep-v2"
ProtocolName = Literal["efold-probe-v2", "efold-prep-v2"]

Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
"""A sha256 hex digest."""
Token = Annotated[str, msgspec.Meta(pattern="^[\\x21-\\x7e]{1,128}$")]
"""An opaque printable-ASCII id (slot, request, permit)."""
CacheKey = Annotated[str, msgspec.Meta(pattern="^[\\x21-\\x7e]{1,64}$")]
"""The per-slot transport cache key: printable ASCII, at most 64 characters, never
truncated."""
Count = Annotated[int, msgspec.Meta(ge=0)]
Tier = Annotated[str, msgspec.Meta(pattern="^[\\x21-\\x7e]{1,64}$")]
"""A service tier as reported (printable ASCII): an unknown one must still reach the
controller, whose pricing refuses it with its own integrity code."""


class SettleOutcome(enum.StrEnum):
    """How an admitted request ended, as the child's guard saw it (docs/architecture.md §5)."""

    SETTLED = "settled"
    LOST = "lost"
    OWN_ABORT_AFTER_SEND = "own_abort_after_send"
    INTEGRITY_STOP = "integrity_stop"


class TerminalStatus(enum.StrEnum):
    """The child's claim about how its probe run ended. The controller decides the slot
    status from its own journal; this is evidence, not authority."""

    ANSWERED = "answered"  # a final answer was produced
    REFUSED = "refused"  # a pre-send refusal ended the run (``code`` says which)
    LOST = "lost"  # an admitted request was lost or aborted after send
    INTEGRITY_STOP = "integrity_stop"  # the guard took an integrity stop
    FAILED = "failed"  # no valid answer (e.g. empty final output); ``code`` says why


# -- small typed payload parts --------------------------------------------------------


class _Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class DeadlineGrant(_Part, frozen=True):
    """Time limits the controller grants a child, in milliseconds."""

    run_ms: Count  # from Welcome until the child's last message (Terminal / Prepared)
    exchange_ms: Count  # longest the child waits for any single reply


class BudgetGrant(_Part, frozen=True):
    max_requests: Count  # model requests per probe run
    meter_calls: Count  # history lookup calls per probe run
    meter_bytes: Count  # history lookup response bytes per probe run


class UsageReport(_Part, frozen=True, omit_defaults=True):
    """Raw usage counts as reported by the provider. An absent count stays absent
    (``None``): it is never read as zero."""

    input: Count | None = None
    output: Count | None = None
    cache_read: Count | None = None
    cache_write: Count | None = None
    reasoning: Count | None = None

    def present(self) -> dict[str, int]:
        """The counts that were reported, by name (absent ones left out)."""
        return {f: v for f in self.__struct_fields__ if (v := getattr(self, f)) is not None}


class MeterReading(_Part, frozen=True):
    """What the history lookup meter charged in this probe run, and the code it aborted
    with (``meter_calls_exhausted`` / ``meter_bytes_exhausted``; None: it never did).
    A claim like the rest of ``Terminal``: the controller keeps only a meter code."""

    calls: Count
    bytes: Count
    abort_cause: Code | None = None


class JudgeReading(_Part, frozen=True, omit_defaults=True):
    """The judge's reading of the answer (19-C), content-free: a score per rubric
    dimension and pass/fail, or neither and the fixed code of why not. A claim, like the
    rest of ``Terminal``: the controller checks it against the judge's own ledger."""

    scores: dict[str, Count] = {}
    passed: bool | None = None
    code: Code | None = None


class HttpEvidence(_Part, frozen=True, omit_defaults=True):
    """The non-2xx answer that ended a probe run, as the child's guard read it
    (``guard.wire.failure``): its status, its kind (a name the controller checks against
    the guard's closed set for that status) and the server's words, sanitised there:
    printable ASCII, at most 200 characters. A claim, like the rest of ``Terminal``;
    the excerpt never reaches a receipt (only the owner-only answers artifact)."""

    status: Annotated[int, msgspec.Meta(ge=100, le=999)]
    kind: Annotated[str, msgspec.Meta(pattern="^[a-z_]{1,32}$")]
    excerpt: Annotated[str, msgspec.Meta(pattern="^[\\x20-\\x7e]{0,200}$")] = ""


# -- messages ---------------------------------------------------------------------------


class Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind"):
    """Base of every lockstep message (not itself on the wire)."""


# child -> controller


class Hello(Message, frozen=True, tag="hello"):
    protocol: ProtocolName
    registration_digest: Digest
    plan_digest: Digest
    build_digest: Digest
    cache_key: CacheKey | None  # None for a prep child


class Ready(Message, frozen=True, tag="ready"):
    arrival_digest: Digest  # digest of the snapshot as restored and verified


class Admit(Message, frozen=True, tag="admit"):
    request_id: Token
    round: Count
    payload_digest: Digest
    rmax: Count  # the reservation asked for, in money units


class Consume(Message, frozen=True, tag="consume"):
    permit_id: Token
    body_digest: Digest


class Settle(Message, frozen=True, tag="settle"):
    permit_id: Token
    outcome: SettleOutcome
    code: Code | None
    usage: UsageReport | None  # None: the provider reported no usage (never zero)
    tier: Tier | None  # raw service tier as reported; None when absent
    cost: Count | None  # the child's own priced cost claim, when it has one


class Halt(Message, frozen=True, tag="halt"):
    """The child's guard stops the whole run (a policy violation, an integrity outcome,
    a failed settle): its own message, so the controller closes admission at once
    rather than when the probe run ends. The code is a claim, checked by allowlist."""

    code: Code


class Terminal(Message, frozen=True, tag="terminal"):
    status: TerminalStatus
    code: Code | None
    answer: str
    meter: MeterReading
    witness: Digest
    judge: JudgeReading | None = None  # set only when the task names a judge
    # A boundary run's work record (the actions, recall outputs, how the loop ended),
    # written by the child as ``work.json`` in its slot directory: its sha256 here, the
    # file read and checked by the controller after the child has exited. None: none.
    work_sha256: Digest | None = None
    # Set when a non-2xx answer ended the run (issue 35); None otherwise.
    http: HttpEvidence | None = None


class Prepared(Message, frozen=True, tag="prepared"):
    snapshot_digest: Digest
    files: Count
    bytes: Count
    rejected: dict[str, Count]  # rejected-entry class -> count
    # How the fold code ran (network, writes; ``efold.isolation``): a claim of the child,
    # shown to the operator. None: the body did not say (it ran no foreign code).
    isolation: Isolation | None = None


# controller -> child


class Welcome(Message, frozen=True, tag="welcome"):
    deadlines: DeadlineGrant
    budgets: BudgetGrant


class Granted(Message, frozen=True, tag="permit"):
    permit_id: Token
    hold: Count


class Refused(Message, frozen=True, tag="refused"):
    code: Code


class Consumed(Message, frozen=True, tag="consumed"):
    pass


class Settled(Message, frozen=True, tag="settled"):
    pass


class Halted(Message, frozen=True, tag="halted"):
    """The stop is journaled: admission is closed for the rest of the run."""


class DoneAck(Message, frozen=True, tag="done_ack"):
    pass


class Stop(Message, frozen=True, tag="stop"):
    code: Code


ChildMessage = Hello | Ready | Admit | Consume | Settle | Halt | Terminal | Prepared
ControllerMessage = Welcome | Granted | Refused | Consumed | Settled | Halted | DoneAck | Stop

CHILD_KINDS: Final[frozenset[type[Message]]] = frozenset(
    {Hello, Ready, Admit, Consume, Settle, Halt, Terminal, Prepared}
)
CONTROLLER_KINDS: Final[frozenset[type[Message]]] = frozenset(
    {Welcome, Granted, Refused, Consumed, Settled, Halted, DoneAck, Stop}
)


# -- binding and envelopes ------------------------------------------------------------


class Binding(_Part, frozen=True):
    """What a channel is bound to for its whole life. Every envelope repeats it."""

    epoch: Count
    slot: Token
    worker: ProcessIdentity


class ChildEnvelope(_Part, frozen=True):
    epoch: int
    slot: str
    worker: ProcessIdentity
    seq: int
    msg: ChildMessage


class ControllerEnvelope(_Part, frozen=True):
    epoch: int
    slot: str
    worker: ProcessIdentity
    seq: int
    msg: ControllerMessage

