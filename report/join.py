"""Check the plan and the receipts, and join every planned slot to its receipt.

This is the report's only boundary with the rest of efold: after it, every id is known
to be an opaque identifier (no path, no prose), every code a fixed code, every hash a
hex digest, and every receipt consistent with its planned slot and with itself. A
report built from anything else would either lie or leak, so any violation refuses the
whole report (``ReportError``) rather than skipping a row.

The controller's aggregate command already refuses duplicate, changed, unplanned and
unvisited receipts against the journal; this module re-checks what it can see without
the journal, because the report must be correct for any caller. Across receipts it
checks that one checkpoint is recorded with one size (the compression figures).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, TypeVar, get_args

import msgspec

from efold.boundary.actions import FAMILIES
from efold.boundary.agent_loop import Ending
from efold.boundary.oracles import ORACLE_TYPES as ORACLE_CLASSES
from efold.boundary.oracles import Verdict
from efold.corpus.model import Availability, Category, Outcome
from efold.errors import Code
from efold.guard.wire.failure import HTTP_FAILURE_CODES, kinds_for
from efold.protocol.records import (
    OPAQUE_ID,
    PLAN_VERSION,
    RECEIPT_VERSION,
    Exclusion,
    Plan,
    PlannedSlot,
    Receipt,
    SlotSpend,
    SlotStatus,
)
from efold.report.errors import ReportError

__all__ = ["METER_ABORT_CODES", "Observation", "check_id", "check_model", "join_receipts"]

# An opaque identifier: starts alphanumeric, then letters, digits and . _ : # + -.
# No slash, space or quote, so no path, sentence or markup can pass for an id.
_SHA256 = re.compile(r"[0-9a-f]{64}")
# The label of the all-categories rows; no planned category may take it.
RESERVED_CATEGORY = "all"
_FIXED_CODES = frozenset(code.value for code in Code)
_ADMITTED = frozenset({SlotStatus.COMPLETED, SlotStatus.INCOMPLETE, SlotStatus.INVALID})
# The codes a receipt's ``meter_abort`` may hold: the lookup meter's two abort causes.
METER_ABORT_CODES: frozenset[str] = frozenset(
    {Code.METER_CALLS_EXHAUSTED.value, Code.METER_BYTES_EXHAUSTED.value})


class Observation(msgspec.Struct, frozen=True):
    """One planned slot and, when it was visited, its checked receipt (with enum fields
    normalised)."""

    planned: PlannedSlot
    receipt: Receipt | None
    status: SlotStatus | None  # None: no receipt
    outcome: Outcome | None
    availability: Availability | None
    excluded: Exclusion | None
    # Invariant: only without a receipt; the journal recorded one that is now gone.
    receipt_copy_missing: bool = False

    @property
    def eligible(self) -> bool:
        """Planned eligible and not learned infeasible. Inventory feasibility is a fact
        the prep children establish after the plan is frozen: a slot found infeasible
        then is visited as ``skipped`` (code ``inventory_infeasible``), and leaves the
        eligible inventory like a slot the plan already knew to be infeasible."""
        return self.planned.eligible and self.status is not SlotStatus.SKIPPED

    @property
    def scored(self) -> bool:
        """Counts in ``exact``: completed, eligible, not excluded."""
        return (
            self.status is SlotStatus.COMPLETED
            and self.eligible
            and self.excluded is None
        )

    @property
    def failed_feasible(self) -> bool:
        """Counts as wrong in ``exactWithFailures``: eligible, not excluded, admitted but
        incomplete or invalid."""
        return (
            self.status in (SlotStatus.INCOMPLETE, SlotStatus.INVALID)
            and self.eligible
            and self.excluded is None
        )

    @property
    def correct(self) -> bool:
        return self.receipt is not None and self.receipt.correct is True


def _refuse(detail: str, code: Code = Code.REPORT_INPUT_INVALID) -> ReportError:
    return ReportError(code, detail)


def check_id(kind: str, value: object) -> None:
    if not isinstance(value, str) or OPAQUE_ID.fullmatch(value) is None:
        raise _refuse(f"{kind} is not an opaque identifier")


def check_model(kind: str, value: object) -> None:
    """A model id as the reports name it, ``provider/model``: the provider an opaque
    identifier, the model one to three of them joined by ``/`` (hub names such as
    ``meta-llama/Llama-3-8B`` have one); no space, quote or ``..``, so a model id can
    carry no sentence or relative path."""
    if not isinstance(value, str) or not 2 <= value.count("/") + 1 <= 4:
        raise _refuse(f"{kind} is not provider/model")
    provider, *model = value.split("/")
    check_id(f"{kind} provider", provider)
    for part in model:
        check_id(f"{kind} model", part)


def _check_sha256(kind: str, value: object) -> None:
    if not isinstance(value, str) or _SHA256.fullmatch(value) is None:
        raise _refuse(f"{kind} is not a lowercase hex sha256")


def _check_count(kind: str, value: object) -> None:
    # bool is an int subclass; a flag where a count belongs is a schema error.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _refuse(f"{kind} is not a non-negative integer")


def _check_plan(plan: Plan) -> None:
    if plan.version != PLAN_VERSION:
        raise _refuse("unsupported plan version")
    check_id("campaign", plan.campaign)
    _check_sha256("registration_sha256", plan.registration_sha256)
    _check_sha256("schedule_sha256", plan.schedule_sha256)
    for kind, count in (("cap_units", plan.cap_units), ("rmax_units", plan.rmax_units)):
        _check_count(kind, count)
    _check_count("repeats", plan.repeats)
    if plan.repeats < 1:
        raise _refuse("plan has no repeat")
    if not plan.roles or len(set(plan.roles)) != len(plan.roles):
        raise _refuse("plan roles are empty or repeated")
    for role in plan.roles:
        check_id("role", role)
    roles = set(plan.roles)
    # Invariant: a role is one arm with frozen settings, so it never changes arm.
    arm_of: dict[str, str] = {}
    slot_ids: set[str] = set()
    identities: set[tuple[str, str, str, str, int]] = set()
    repeats: set[int] = set()
    # Invariant: a probe has one category, whichever role or repeat asks it, so that a
    # paired contrast never pairs two categories.
    category_of: dict[tuple[str, str, str], str] = {}
    for slot in plan.slots:
        for kind in ("slot", "role", "arm", "suite", "trace_id", "probe_id", "category",
                     "checkpoint"):
            check_id(kind, getattr(slot, kind))
        _check_count("repeat", slot.repeat)
        if not isinstance(slot.eligible, bool):
            raise _refuse("slot eligibility is not a boolean")
        if slot.category == RESERVED_CATEGORY:
            raise _refuse("a planned category uses the reserved all-categories name")
        if slot.role not in roles:
            raise _refuse("slot role is not a planned role")
        if arm_of.setdefault(slot.role, slot.arm) != slot.arm:
            raise _refuse("one role is planned with two arms")
        if slot.slot in slot_ids:
            raise _refuse("plan repeats a slot id")
        slot_ids.add(slot.slot)
        identity = (slot.role, slot.suite, slot.trace_id, slot.probe_id, slot.repeat)
        if identity in identities:
            raise _refuse("plan repeats a role x trace x probe x repeat")
        identities.add(identity)
        probe = (slot.suite, slot.trace_id, slot.probe_id)
        if category_of.setdefault(probe, slot.category) != slot.category:
            raise _refuse("one probe is planned in two categories")
        repeats.add(slot.repeat)
    if set(arm_of) != roles:
        raise _refuse("a planned role has no slot")
    if len(repeats) > plan.repeats:
        raise _refuse("plan slots use more repeats than the plan declares")


_E = TypeVar("_E", SlotStatus, Outcome, Availability, Exclusion)


def _enum(kind: str, enum_type: type[_E], value: object) -> _E:
    if not isinstance(value, str):
        raise _refuse(f"{kind} is not a string")
    try:
        return enum_type(value)
    except ValueError as exc:
        raise _refuse(f"{kind} is not a known value") from exc


def _check_spend(spend: SlotSpend) -> None:
    for kind in ("requests", "admitted", "settled_units", "retained_units"):
        _check_count(f"spend.{kind}", getattr(spend, kind))
    for kind in ("input", "cache_read", "cache_write", "output", "reasoning"):
        _check_count(f"usage.{kind}", getattr(spend.usage, kind))
    if spend.admitted > spend.requests:
        raise _refuse("more admitted requests than requests")
    if not isinstance(spend.usage_known, bool):
        raise _refuse("usage_known is not a boolean")


def _check_size(receipt: Receipt) -> None:
    """A checkpoint size is both counts or neither, and only with the checkpoint it
    measures."""
    tokens, size = receipt.checkpoint_tokens, receipt.checkpoint_bytes
    if tokens is None and size is None:
        if receipt.transcript_tokens is not None or receipt.transcript_bytes is not None:
            raise _refuse("a receipt carries a transcript size without a checkpoint size")
        return
    if tokens is None or size is None:
        raise _refuse("a receipt carries one checkpoint size without the other")
    _check_count("checkpoint_tokens", tokens)
    _check_count("checkpoint_bytes", size)
    if receipt.checkpoint_sha256 is None:
        raise _refuse("a receipt carries a checkpoint size without a checkpoint")
    full_tokens, full_bytes = receipt.transcript_tokens, receipt.transcript_bytes
    if full_tokens is None and full_bytes is None:
        return
    if full_tokens is None or full_bytes is None:
        raise _refuse("a receipt carries one transcript size without the other")
    _check_count("transcript_tokens", full_tokens)
    _check_count("transcript_bytes", full_bytes)


def _check_sizes(observations: Iterable[Observation]) -> None:
    """Invariant: a checkpoint has one size. Every receipt of one role x trace x repeat
    (one checkpoint, ``PlannedSlot.checkpoint``), and every receipt naming one content
    digest, that carries a size carries the same one; else the compression figures
    would depend on which receipt was read first."""
    by_checkpoint: dict[tuple[str, str, str, int], tuple[int, int]] = {}
    by_digest: dict[str, tuple[int, int]] = {}
    for obs in observations:
        receipt = obs.receipt
        if receipt is None or receipt.checkpoint_tokens is None \
                or receipt.checkpoint_bytes is None or receipt.checkpoint_sha256 is None:
            continue
        size = (receipt.checkpoint_tokens, receipt.checkpoint_bytes)
        key = (obs.planned.role, obs.planned.suite, obs.planned.trace_id, obs.planned.repeat)
        if by_checkpoint.setdefault(key, size) != size \
                or by_digest.setdefault(receipt.checkpoint_sha256, size) != size:
            raise _refuse("one checkpoint is recorded with two sizes")


# The closed vocabularies a boundary record is made of.
ORACLE_TYPES: Final = frozenset(str(c.__struct_config__.tag) for c in ORACLE_CLASSES)
VERDICTS: Final = frozenset(get_args(Verdict))
ENDINGS: Final = frozenset(get_args(Ending))
ACTION_FAMILIES: Final = frozenset(FAMILIES)


def _check_http(receipt: Receipt) -> None:
    """A receipt's ``http``: only with a code a non-2xx answer ends a slot with, a
    status of three digits and a kind of the guard's closed set that status allows."""
    http = receipt.http
    if http is None:
        return
    if receipt.code not in {code.value for code in HTTP_FAILURE_CODES}:
        raise _refuse("receipt http without an http code")
    if not 100 <= http.status <= 999 or http.kind not in {k.value for k in kinds_for(http.status)}:
        raise _refuse("receipt http is not a status and a kind it allows")


def _check_boundary(receipt: Receipt) -> None:
    """A boundary record only on a boundary slot, and made of ids, fixed vocabularies,
    hashes and counts only (``protocol.records.BoundaryRecord``)."""
    record = receipt.boundary
    if record is None:
        return
    if receipt.category != Category.BOUNDARY.value:
        raise _refuse("a boundary record on a question slot")
    check_id("boundary case", record.case)
    _check_count("boundary case_version", record.case_version)
    for oracle in record.oracles:
        if oracle.type not in ORACLE_TYPES or oracle.verdict not in VERDICTS:
            raise _refuse("a boundary oracle verdict outside the closed union")
    for action in record.actions:
        if action.family not in ACTION_FAMILIES:
            raise _refuse("a boundary action family outside the closed list")
        _check_sha256("boundary action args_sha256", action.args_sha256)
        if action.duplicate_of is not None:
            _check_count("boundary action duplicate_of", action.duplicate_of)
    if record.ending is not None and record.ending not in ENDINGS:
        raise _refuse("a boundary ending outside the closed list")
    for kind in ("requests", "tokens"):
        _check_count(f"boundary {kind}", getattr(record, kind))
    if record.environment_sha256 is not None:
        _check_sha256("boundary environment_sha256", record.environment_sha256)
    if record.code is not None and record.code not in _FIXED_CODES:
        raise _refuse("boundary code is not a fixed code")


def _observe(planned: PlannedSlot, receipt: Receipt) -> Observation:
    if receipt.version != RECEIPT_VERSION:
        raise _refuse("unsupported receipt version")
    mine = (receipt.role, receipt.arm, receipt.trace_id, receipt.probe_id, receipt.category,
            receipt.repeat)
    theirs = (planned.role, planned.arm, planned.trace_id, planned.probe_id,
              planned.category, planned.repeat)
    if mine != theirs:
        raise _refuse("receipt does not match its planned slot", Code.RECEIPT_UNPLANNED)
    status = _enum("status", SlotStatus, receipt.status)
    outcome = None if receipt.outcome is None else _enum("outcome", Outcome, receipt.outcome)
    availability = (None if receipt.availability is None
                    else _enum("availability", Availability, receipt.availability))
    excluded = (None if receipt.excluded is None
                else _enum("excluded", Exclusion, receipt.excluded))
    if receipt.code is not None and receipt.code not in _FIXED_CODES:
        raise _refuse("receipt code is not a fixed code")
    for kind in ("answer_sha256", "checkpoint_sha256"):
        value = getattr(receipt, kind)
        if value is not None:
            _check_sha256(kind, value)
    _check_count("lookup_calls", receipt.lookup_calls)
    _check_count("lookup_bytes", receipt.lookup_bytes)
    _check_count("elapsed_ms", receipt.elapsed_ms)
    if receipt.meter_abort is not None and receipt.meter_abort not in METER_ABORT_CODES:
        raise _refuse("receipt meter_abort is not a meter code")
    _check_size(receipt)
    _check_spend(receipt.spend)
    _check_boundary(receipt)
    _check_http(receipt)
    if status is SlotStatus.COMPLETED:
        if outcome is None or not isinstance(receipt.correct, bool):
            raise _refuse("completed receipt without a scored outcome")
        # Invariant: `correct` and `outcome` never disagree, or the accuracy table and
        # the outcome table would describe different runs.
        if receipt.correct != (outcome is Outcome.CORRECT):
            raise _refuse("receipt correctness disagrees with its outcome")
    elif outcome is not None or receipt.correct is not None:
        raise _refuse("receipt scored a slot that did not complete")
    if not planned.eligible and status is not SlotStatus.SKIPPED:
        raise _refuse("an ineligible slot was visited as more than skipped")
    if status not in _ADMITTED and (
        receipt.spend.admitted or receipt.spend.settled_units or receipt.spend.retained_units
    ):
        raise _refuse("a slot that was never admitted carries admitted spend")
    return Observation(planned=planned, receipt=receipt, status=status, outcome=outcome,
                       availability=availability, excluded=excluded)


def join_receipts(plan: Plan, receipts: Iterable[Receipt],
                  receipt_copies_missing: Iterable[str] = ()) -> list[Observation]:
    """Every planned slot, in schedule order, with its receipt if it has one.

    ``receipt_copies_missing``: slots the journal recorded a receipt for whose file is
    gone. Each must be a planned slot without a receipt, named once.

    Refuses (``ReportError``): an inconsistent plan, a receipt for a slot the plan does
    not hold or whose identity differs from it (``receipt_unplanned``), two receipts for
    one slot (``receipt_duplicate``), and any receipt that contradicts itself, or a
    checkpoint recorded with two sizes (``report_input_invalid``).
    """
    _check_plan(plan)
    planned = {slot.slot: slot for slot in plan.slots}
    by_slot: dict[str, Observation] = {}
    for receipt in receipts:
        slot_id = receipt.slot
        if not isinstance(slot_id, str) or slot_id not in planned:
            raise _refuse("receipt for a slot the plan does not hold", Code.RECEIPT_UNPLANNED)
        if slot_id in by_slot:
            raise _refuse("two receipts for one slot", Code.RECEIPT_DUPLICATE)
        by_slot[slot_id] = _observe(planned[slot_id], receipt)
    gone: set[str] = set()
    for slot_id in receipt_copies_missing:
        if not isinstance(slot_id, str) or slot_id not in planned:
            raise _refuse("a missing receipt copy for an unplanned slot",
                          Code.RECEIPT_UNPLANNED)
        if slot_id in by_slot or slot_id in gone:
            raise _refuse("a receipt copy is both present and missing, or missing twice")
        gone.add(slot_id)
    _check_sizes(by_slot.values())
    return [
        by_slot.get(slot.slot)
        or Observation(planned=slot, receipt=None, status=None, outcome=None,
                       availability=None, excluded=None,
                       receipt_copy_missing=slot.slot in gone)
        for slot in plan.slots
    ]
