"""The content-free records a run produces: the plan (its slots) and one receipt per
visited slot. ``report/`` reads nothing else.

Invariant: nothing here holds a prompt, an answer, a credential or a path. Ids, hashes,
fixed codes and numbers only.
"""

from __future__ import annotations

import enum
from typing import Literal

import msgspec

# OPAQUE_ID: the only form of id a report accepts, defined once below both the corpus and
# the reports; ``register`` refuses a campaign whose ids would not be ones
# (``controller.campaigns.reportable``).
from efold.corpus.model import OPAQUE_ID as OPAQUE_ID
from efold.corpus.model import Availability, Outcome
from efold.digests import digest_of

PLAN_VERSION = 1
RECEIPT_VERSION = 1


class SlotStatus(enum.StrEnum):
    """Execution status of a visited slot (docs/architecture.md §9, aggregate)."""

    SKIPPED = "skipped"  # inventory-infeasible: never admitted, keeps its denominator
    UNADMITTED = "unadmitted"  # refused before its first hold
    COMPLETED = "completed"  # an answer was scored
    INCOMPLETE = "incomplete"  # admitted, then lost / aborted / capacity-refused later
    INVALID = "invalid"  # admitted, then an invalid terminal (e.g. empty final output)


class Exclusion(enum.StrEnum):
    BOUNDARY_UNVERIFIED = "boundary_unverified"
    PRESSURE_UNVERIFIED = "pressure_unverified"
    STORE_DEGRADED = "store_degraded"
    PROXY_UNSUPPORTED_CALL = "fold_proxy_unsupported_call"  # a proxy called what efold does not serve
    # A required-recall boundary case whose checkpoint shows its answer: nothing to recall.
    RECALL_ANSWER_VISIBLE = "recall_answer_visible"
    FAILED = "failed"


class PlannedSlot(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    slot: str  # opaque id, e.g. "s0007"
    role: str
    arm: str
    suite: str
    trace_id: str
    probe_id: str
    category: str
    repeat: int
    eligible: bool  # inventory-feasible; an ineligible slot is skipped, never admitted
    checkpoint: str  # checkpoint key: role × trace × repeat


class TokenCounts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0


class SlotSpend(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Money in integer units (1 unit = 5e-8 USD)."""

    requests: int = 0
    admitted: int = 0
    settled_units: int = 0
    retained_units: int = 0  # holds kept as lost / integrity (max with known partial)
    usage: TokenCounts = TokenCounts()
    usage_known: bool = True  # False once any request's usage went missing


class JudgeRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The optional judge's reading of one answered slot (19-C), content-free: a score
    per rubric dimension (integers 0-5) and pass/fail, or neither with the fixed
    ``code`` of why it scored nothing (``judge_reply_invalid``, a refusal, a loss);
    ``spend`` is the judge's own line (its ledger key ``<slot>#judge``), never in the
    receipt's ``spend``. It never replaces the deterministic ``correct``."""

    scores: dict[str, int] = {}
    passed: bool | None = None
    code: str | None = None
    spend: SlotSpend = SlotSpend()


class OracleVerdict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One oracle of a boundary case, as the controller evaluated it: its type tag and
    ``pass``, ``fail`` or ``not_applicable`` (never its detail, which names files)."""

    type: str
    verdict: str


class ActionMark(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One action of a boundary run, content-free: its family, the hash of its
    normalized arguments, and whether it repeated earlier work (and which)."""

    family: str
    args_sha256: str
    duplicate: bool = False
    duplicate_of: int | None = None


class BoundaryRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A boundary slot's judgement (``controller.pilot.boundary_slots``): the case's id and version,
    every oracle's verdict in the case's order, ``passed`` (every oracle passed; None
    when none failed and one was not applicable, or when nothing was judged), the
    actions in call order, how the agent loop ended, its requests and tokens (the
    chars/4 estimate of every request and reply: tokens per task), whether the case
    needs recall, and the environment identity's digest. ``repeat`` is the case's
    ``fold.repeat`` and ``folds`` the folds the resumed checkpoint's receipt records
    (``folds.checkpoint.folds_recorded``; None when nothing was judged). ``code``: why
    the slot could not be judged (its work record missing or invalid, the case changed),
    with no verdicts."""

    case: str  # the case's id (its sidecar's)
    case_version: int
    passed: bool | None
    oracles: list[OracleVerdict] = []
    actions: list[ActionMark] = []
    ending: str | None = None
    requests: int = 0
    tokens: int = 0
    recall_required: bool = False
    rationale: bool = False  # the case expects the ``rationale`` capability
    environment_sha256: str | None = None
    repeat: int = 1
    folds: int | None = None
    code: str | None = None
    # The case's tree digest (``boundary.case.case_digest``) as judged; None in receipts
    # written before it was recorded.
    case_sha256: str | None = None


class HttpRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The non-2xx answer that ended a slot (issue 35): its status and its kind, a value
    of the guard's closed set (``HttpFailureKind``) that the status allows. Never the
    server's words: they may hold request content (docs/reliability.md)."""

    status: int
    kind: str


class LedgerRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A ledger arm's checkpoint as its fold receipt accounts it (``folds.ledger``):
    which extractor wrote it (``model``: the summariser model; ``deterministic``), the
    records its three selections held (None: not recorded), those no request had room
    for, and its degraded stages (``"pN: reason"``)."""

    extractor: str
    selected: int | None = None
    unoffered: int = 0
    degraded: list[str] = []


class Receipt(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One visited slot, content-free. Written once, fsynced, digest journaled."""

    slot: str
    role: str
    arm: str
    trace_id: str
    probe_id: str
    category: str
    repeat: int
    status: SlotStatus
    code: str | None = None  # fixed code of a refusal / stop / loss
    outcome: Outcome | None = None  # only when completed
    correct: bool | None = None
    availability: Availability | None = None
    excluded: Exclusion | None = None
    spend: SlotSpend = SlotSpend()
    lookup_calls: int = 0
    answer_sha256: str | None = None
    checkpoint_sha256: str | None = None
    elapsed_ms: int = 0
    version: int = RECEIPT_VERSION
    # Defaulted (and omitted when default), so receipts written before them still
    # decode: the bytes the lookup meter delivered, and the fixed code the meter aborted
    # with (``meter_calls_exhausted`` / ``meter_bytes_exhausted``; null: it never did).
    lookup_bytes: int = 0
    meter_abort: str | None = None
    # Defaulted (19-B): the reader-visible size of the checkpoint the slot read, as the
    # controller counted it from the verified messages (``controller.pilot.evidence``):
    # chars/4 estimated tokens and UTF-8 bytes. Null when the slot read no checkpoint.
    checkpoint_tokens: int | None = None
    checkpoint_bytes: int | None = None
    # The full transcript at the boundary (what the native arm shows), the same measure,
    # counted by the controller from the trace: the reference of compression.
    transcript_tokens: int | None = None
    transcript_bytes: int | None = None
    # Defaulted (19-C): the judge's reading, when the campaign has a ``[judge]`` and
    # the slot was answered; null (omitted) otherwise.
    judge: JudgeRecord | None = None
    # Defaulted (issue 15): a boundary slot's judgement; null (omitted) for a question.
    boundary: BoundaryRecord | None = None
    # Defaulted (issue 35): why a provider refused the request that ended the slot, when
    # a non-2xx answer did (code ``lookup_http_status`` / ``lookup_redirect_forbidden``).
    http: HttpRecord | None = None
    # Defaulted (issue 40): the input pressure of an arm that has one (the native arm's),
    # side by side: the chars/4 estimate its fold recorded (the plan-time pre-check) and,
    # on a local or real route, the input tokens the provider reported for the slot's
    # first request, which decides ``pressure_unverified`` there (null: not reported).
    pressure_estimate_tokens: int | None = None
    pressure_measured_tokens: int | None = None
    # Defaulted (issue 40): a ledger arm's checkpoint, as its fold receipt accounts it.
    ledger: LedgerRecord | None = None


class ShardMark(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which shard of which cluster run a plan is: ``index`` of ``count`` (from 1), in
    the cluster run ``cluster`` (its directory's name)."""

    cluster: str
    index: int
    count: int


class ChainLink(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A continuation (``controller.rundirs.chain``): this run is link ``index`` of a
    chain (its first run is link 1) and continues the run at ``previous`` (an absolute
    path), whose journal read ``previous_journal_sha256`` when this link was planned
    (``registry.journal.journal_digest``). The previous run's journal names this run
    back (its ``continued_by`` meta value), so a chain has no branches."""

    index: int
    previous: str
    previous_journal_sha256: str


class Plan(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    registration_sha256: str
    campaign: str
    roles: list[str]
    repeats: int
    cap_units: int
    rmax_units: int
    slots: list[PlannedSlot]  # in schedule order
    schedule_sha256: str  # ``schedule_digest(slots, smoke)``
    version: int = PLAN_VERSION
    smoke: bool = False  # the configured-process smoke of a registration (one slot per role)
    # A cluster run's shard (``controller.campaigns.shards``): its slots are the whole plan's slots
    # of the shard's checkpoints, its cap the shard's part of the campaign's cap. Null
    # for a one-machine run.
    shard: ShardMark | None = None
    # A continuation's link to the run it continues; null for a chain's first run.
    link: ChainLink | None = None
    # A part of the schedule chosen on purpose (``pilot --slots A:B`` or ``--chunk K/N``,
    # as given): its slots are that part's, of those still to run. Null: all of them.
    part: str | None = None

    def schedule_matches(self) -> bool:
        return self.schedule_sha256 == schedule_digest(
            [s.slot for s in self.slots], smoke=self.smoke, shard=self.shard,
            link=self.link, part=self.part)


def schedule_digest(slot_ids: list[str], *, smoke: bool = False,
                    shard: ShardMark | None = None, link: ChainLink | None = None,
                    part: str | None = None) -> str:
    """The digest an authorization binds: the slot ids in schedule order, marked when
    they are a smoke's, so that a smoke's authorization can never be consumed by a
    campaign run (or the reverse), even when the smoke has every slot of the plan, and
    marked with the shard of a cluster run, so that a shard's authorization binds that
    one shard of that one cluster run, and with a continuation's link and chosen part,
    so that a continuation's authorization can never run the whole campaign, another
    continuation or another part (nor the reverse)."""
    marked: list[object] = list(slot_ids)
    if part is not None:
        marked = ["part", part, *marked]
    if link is not None:
        marked = ["link", link.index, link.previous, link.previous_journal_sha256, *marked]
    if shard is not None:
        marked = ["shard", shard.cluster, shard.index, shard.count, *marked]
    return digest_of(["smoke", *marked] if smoke else marked)


class DesignRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A declared comparison as registered (``controller.campaigns.design``): the base's
    and the treatment's digests (a build: its tree's manifest digest; guidance: the
    sha256 of the file's bytes) and the paths the builds differ in (empty for
    guidance)."""

    base: str
    treatment: str
    differs: Literal["build", "guidance"]
    base_sha256: str
    treatment_sha256: str
    changed: list[str]
