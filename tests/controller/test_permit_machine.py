"""A hypothesis state machine over the permit protocol: admit / consume / settle /
stop / abandon with arbitrary (including hostile) usage, tiers, cost claims and
outcomes, against the real durable source over a real journal (lease held, fsynced).

After every step: T <= C; the in-memory total equals the sum the journal implies;
nothing is admitted after a sticky stop; every permit is closed at most once (a second
close is a named integrity error); no exception escapes but the named ones. At the end
every open permit is abandoned and every permit is closed exactly once.

Budget: a bounded run under every ``pytest`` (the CI budget below). The long run that
the closing figures quote is::

    EFOLD_LONG_PROPERTIES=10000 TMPDIR=/dev/shm python -m pytest -q \
        tests/controller/test_permit_machine.py -p no:randomly
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from efold.controller.rundirs.permits import DurablePermitSource
from efold.errors import Code
from efold.guard.catalog import bundled_catalog
from efold.guard.ledger import PermitIntegrityError, SettleKind
from efold.guard.permits import Permit, Refusal
from efold.guard.pricing import price_units, rmax_units
from efold.registry.journal import JournalReader, JournalWriter
from efold.registry.lease import acquire_lease

ENTRY = bundled_catalog().entry("faux", "faux-extractive-v1")
RMAX = rmax_units(ENTRY)
DIGEST = "d" * 64
SLOTS = ("s1", "s2", "s3")

_LONG = int(os.environ.get("EFOLD_LONG_PROPERTIES", "0"))

hostile_count = st.one_of(
    st.integers(min_value=0, max_value=300_000),
    st.integers(min_value=-(2**64), max_value=2**80),
    st.sampled_from([2**53 - 1, 2**53, 2**58, 2**64 - 1, 272_000, 272_001, 128_000, 128_001]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
usages = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["input", "output", "cache_read", "cache_write",
                                     "reasoning", "images"]), hostile_count, max_size=6),
    st.fixed_dictionaries({"input": st.integers(1, 272_000),
                           "output": st.integers(0, 128_000)}),
)
tiers = st.sampled_from(["default", "flex", "priority", None, "turbo", "auto"])
claims = st.one_of(st.none(), st.integers(min_value=-2 * RMAX, max_value=2 * RMAX))
# Codes a child might send with a settlement, allowlisted or not.
child_codes = st.sampled_from([None, Code.LOOKUP_STREAM_LOST, Code.LOOKUP_INVALID_USAGE,
                               Code.UNRECONCILED_CONTAINMENT, Code.NOT_ADMITTED_CAP,
                               Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE])


def _price(counts: Mapping[str, int], tier: str | None) -> int:
    return price_units(ENTRY, counts, tier)


def _journal_total(rows: list[dict[str, Any]]) -> int:
    return sum(r["settled_units"] if r["state"] == "settled"
               else r["hold_units"] if r["state"] in ("active", "consumed")
               else max(r["hold_units"], r["partial_units"] or 0) for r in rows)


class PermitMachine(RuleBasedStateMachine):
    permits = Bundle("permits")

    def __init__(self) -> None:
        super().__init__()
        self._stack = ExitStack()
        self.run = Path(tempfile.mkdtemp(prefix="efold-machine-"))
        self._stack.callback(shutil.rmtree, self.run, True)
        lease = self._stack.enter_context(acquire_lease(self.run))
        self.journal = JournalWriter(self.run, lease)
        self._stack.callback(self.journal.close)
        self.source: DurablePermitSource | None = None
        self.closed: set[str] = set()  # permits the model knows are closed
        self.granted: dict[str, str] = {}  # permit id -> slot

    @initialize(cap_multiple=st.integers(1, 4),
                extra=st.sampled_from([0, 0, 1, RMAX - 1]) | st.integers(0, RMAX - 1))
    def open_source(self, cap_multiple: int, extra: int) -> None:
        self.source = DurablePermitSource(self.journal, epoch=1,
                                          cap_units=cap_multiple * RMAX + extra,
                                          rmax_units=RMAX, max_requests=3, price=_price)

    @rule(target=permits, slot=st.sampled_from(SLOTS))
    def admit(self, slot: str) -> Any:
        src = self.source
        assert src is not None
        before, sticky = src.total_units, src.sticky_code
        answer = src.admit(slot=slot, request_id=f"q{len(self.granted)}", round=1,
                           payload_digest=DIGEST, rmax_units=RMAX)
        if sticky is not None:
            assert answer == Refusal(code=Code.LOOKUP_STOPPED)
        if isinstance(answer, Refusal):
            if answer.code is Code.NOT_ADMITTED_CAP:
                assert before + RMAX > src.cap_units
            assert src.total_units == before
            return None
        assert isinstance(answer, Permit) and answer.hold_units == RMAX
        assert before + RMAX <= src.cap_units
        self.granted[answer.permit_id] = slot
        return answer.permit_id

    @rule(permit=permits, honest=st.booleans())
    def consume(self, permit: str | None, honest: bool) -> None:
        src = self.source
        if permit is None or src is None:
            return
        try:
            src.consume(slot=self.granted[permit], permit_id=permit,
                        body_digest=DIGEST if honest else "e" * 64)
        except PermitIntegrityError as exc:
            assert exc.code in (Code.LOOKUP_PERMIT_INVALID, Code.LOOKUP_BODY_MISMATCH)
            assert src.sticky_code is not None

    @rule(permit=consumes(permits), kind=st.sampled_from(list(SettleKind)), usage=usages,
          tier=tiers, claim=claims, code=child_codes, foreign=st.booleans())
    def settle(self, permit: str | None, kind: SettleKind, usage: dict[str, Any] | None,
               tier: str | None, claim: int | None, code: Code | None, foreign: bool) -> None:
        src = self.source
        if permit is None or src is None:
            return
        slot = self.granted[permit]
        if foreign:
            slot = next(s for s in SLOTS if s != slot)
        try:
            src.settle(slot=slot, permit_id=permit, kind=kind, code=code, usage=usage,
                       tier=tier, cost_claim=claim)
        except PermitIntegrityError as exc:
            assert exc.code in (Code.LOOKUP_PERMIT_INVALID, Code.LOOKUP_UNGUARDED_DISPATCH)
            assert src.sticky_code is not None
            if exc.code is Code.LOOKUP_PERMIT_INVALID:
                assert foreign or permit in self.closed
            return
        assert permit not in self.closed, "a permit was closed twice"
        assert not foreign, "a foreign slot closed a permit"
        self.closed.add(permit)

    @rule(code=st.sampled_from([Code.LOOKUP_REPEATED_LOSS, Code.UNRECONCILED_CONTAINMENT]))
    def stop(self, code: Code) -> None:
        assert self.source is not None
        self.source.stop(code)
        assert self.source.sticky_code is not None

    @rule(slot=st.sampled_from(SLOTS))
    def abandon(self, slot: str) -> None:
        assert self.source is not None
        opened = set(self.source.open_permits(slot))
        assert self.source.abandon_slot(slot, Code.LOOKUP_WORKER_LOST) == len(opened)
        assert not opened & self.closed
        self.closed |= opened

    @invariant()
    def money_is_bounded_and_journaled(self) -> None:
        src = self.source
        if src is None:
            return
        assert src.total_units <= src.cap_units
        with JournalReader(self.run) as reader:
            rows = reader.rows("holds")
        assert _journal_total(rows) == src.total_units
        closed_rows = {r["permit_id"] for r in rows if r["state"] not in ("active", "consumed")}
        assert closed_rows == self.closed

    def teardown(self) -> None:
        try:
            if self.source is not None:
                for slot in SLOTS:
                    self.abandon(slot)
                assert self.source.open_permits() == []
                self.money_is_bounded_and_journaled()
        finally:
            self._stack.close()


PermitMachine.TestCase.settings = settings(
    max_examples=_LONG or 40, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_permit_machine = PermitMachine.TestCase
