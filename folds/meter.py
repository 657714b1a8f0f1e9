"""The lookup meter: a fresh, per-probe budget of calls and returned bytes.

Frozen policy (reference "Frozen sizing policy"): 8 dispatched calls and 126,976 UTF-8
bytes (124 KiB) per arm and probe, never pooled. A call is reserved *before* it is
dispatched; the exact UTF-8 bytes of its JSON response are charged *before* delivery.
A response that would cross the byte budget is withheld whole (never clipped) and the
lookup aborts with cause ``meter_bytes_exhausted``; a call beyond the call budget is
refused before dispatch and aborts it with ``meter_calls_exhausted``. After an abort
every later call is refused with the same cause; nothing more is dispatched or charged.

The witness is content-free: per call only the tool name, whether the response was a
result or an error object, its code and its byte length.
"""

from __future__ import annotations

import enum

import msgspec

from efold.errors import Code
from efold.folds.errors import FoldError

LOOKUP_CALL_BUDGET = 8
LOOKUP_BYTE_BUDGET = 126_976


class MeterState(enum.StrEnum):
    OPEN = "open"
    ABORTED = "aborted"


class MeterCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tool: str
    delivered: bool
    bytes: int  # the response's UTF-8 byte length (charged only when delivered)
    code: str | None = None  # the error object's code, or the abort cause if withheld


class MeterWitness(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    call_budget: int
    byte_budget: int
    calls: int  # dispatched calls
    bytes: int  # delivered bytes
    state: MeterState
    abort_cause: str | None
    refused_after_abort: int
    entries: list[MeterCall]


class Meter:
    """Calls and bytes of one probe's lookups. Not shared between probes or arms."""

    def __init__(
        self, *, call_budget: int = LOOKUP_CALL_BUDGET, byte_budget: int = LOOKUP_BYTE_BUDGET
    ) -> None:
        if call_budget < 0 or byte_budget < 0:
            raise ValueError("budgets are non-negative")
        self.call_budget = call_budget
        self.byte_budget = byte_budget
        # Invariant: calls <= call_budget and bytes <= byte_budget at every moment; a
        # charge that would break either aborts instead.
        self.calls = 0
        self.bytes = 0
        # Invariant: the meter is aborted exactly when ``abort_cause`` is set.
        self.abort_cause: Code | None = None
        self.refused_after_abort = 0
        self._entries: list[MeterCall] = []

    @property
    def state(self) -> MeterState:
        return MeterState.OPEN if self.abort_cause is None else MeterState.ABORTED

    @property
    def remaining_calls(self) -> int:
        return self.call_budget - self.calls

    @property
    def remaining_bytes(self) -> int:
        return self.byte_budget - self.bytes

    def reserve_call(self, tool: str) -> None:
        """Reserve one call before dispatch, or abort (calls) and raise."""
        if self.abort_cause is not None:
            self.refused_after_abort += 1
            raise FoldError(self.abort_cause, "the lookup has aborted")
        if self.calls >= self.call_budget:
            self._abort(Code.METER_CALLS_EXHAUSTED)
            self._entries.append(MeterCall(tool=tool, delivered=False, bytes=0, code=Code.METER_CALLS_EXHAUSTED))
            raise FoldError(Code.METER_CALLS_EXHAUSTED, f"call budget {self.call_budget} spent")
        self.calls += 1

    def deliver(self, tool: str, response: bytes, *, error_code: str | None = None) -> None:
        """Charge a reserved call's response before delivery, or withhold it whole,
        abort (bytes) and raise."""
        size = len(response)
        if self.bytes + size > self.byte_budget:
            self._abort(Code.METER_BYTES_EXHAUSTED)
            self._entries.append(
                MeterCall(tool=tool, delivered=False, bytes=size, code=Code.METER_BYTES_EXHAUSTED)
            )
            raise FoldError(
                Code.METER_BYTES_EXHAUSTED,
                f"response of {size} bytes withheld; {self.remaining_bytes} bytes left",
            )
        self.bytes += size
        self._entries.append(MeterCall(tool=tool, delivered=True, bytes=size, code=error_code))

    def _abort(self, cause: Code) -> None:
        self.abort_cause = cause

    def witness(self) -> MeterWitness:
        return MeterWitness(
            call_budget=self.call_budget,
            byte_budget=self.byte_budget,
            calls=self.calls,
            bytes=self.bytes,
            state=self.state,
            abort_cause=None if self.abort_cause is None else self.abort_cause.value,
            refused_after_abort=self.refused_after_abort,
            entries=list(self._entries),
        )
