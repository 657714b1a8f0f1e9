"""The child's permit source reads its hold back from the journal before it lets a
request go out, and its guard is refused a test-only source on every route."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from efold.errors import Code
from efold.guard import GuardError, Permit, bundled_catalog
from efold.guard.testing import TestOnlyPermitSource
from efold.protocol.tasks import Route
from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease
from efold.worker.permit_client import SessionPermitSource
from efold.worker.route import route_guard

RMAX = 78_400_000
DIGEST = "d" * 64


class _Session:
    """The two things the permit source uses: the assignment and the consume exchange."""

    def __init__(self, run_dir: Path, slot: str = "s1", epoch: int = 1) -> None:
        self.assignment = SimpleNamespace(run_dir=str(run_dir), slot=slot, epoch=epoch)
        self.consumed: list[str] = []
        self.halted: list[Code] = []

    def consume(self, *, permit_id: str, body_digest: str) -> None:
        self.consumed.append(permit_id)

    def halt(self, code: Code) -> None:
        self.halted.append(code)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[JournalWriter]:
    with acquire_lease(tmp_path) as lease:
        writer = JournalWriter(tmp_path, lease)
        writer.record_hold(permit_id="p1", epoch=1, slot="s1", request_id="q1", round=1,
                           payload_digest=DIGEST, hold_units=RMAX)
        yield writer
        writer.close()


def _source(session: _Session) -> SessionPermitSource:
    return SessionPermitSource(session)  # type: ignore[arg-type]


def test_a_journaled_hold_is_consumed(tmp_path: Path, journal: JournalWriter) -> None:
    session = _Session(tmp_path)
    _source(session).consume(Permit(permit_id="p1", hold_units=RMAX), DIGEST)
    assert session.consumed == ["p1"]


@pytest.mark.parametrize(("permit", "digest", "session_changes"), [
    (Permit(permit_id="p-unknown", hold_units=RMAX), DIGEST, {}),  # never journaled
    (Permit(permit_id="p1", hold_units=RMAX - 1), DIGEST, {}),  # another amount
    (Permit(permit_id="p1", hold_units=RMAX), "e" * 64, {}),  # another body
    (Permit(permit_id="p1", hold_units=RMAX), DIGEST, {"slot": "s2"}),  # another slot
    (Permit(permit_id="p1", hold_units=RMAX), DIGEST, {"epoch": 2}),  # another epoch
])
def test_a_hold_that_is_not_the_journaled_one_never_goes_out(
        tmp_path: Path, journal: JournalWriter, permit: Permit, digest: str,
        session_changes: dict[str, Any]) -> None:
    session = _Session(tmp_path, **session_changes)
    with pytest.raises(GuardError) as err:
        _source(session).consume(permit, digest)
    assert err.value.code is Code.LOOKUP_HOLD_UNVERIFIED and session.consumed == []


def test_a_hold_already_consumed_is_not_active(tmp_path: Path, journal: JournalWriter) -> None:
    journal.record_consumption("p1", DIGEST)
    session = _Session(tmp_path)
    with pytest.raises(GuardError) as err:
        _source(session).consume(Permit(permit_id="p1", hold_units=RMAX), DIGEST)
    assert err.value.code is Code.LOOKUP_HOLD_UNVERIFIED and session.consumed == []


def test_a_missing_journal_is_unverified(tmp_path: Path) -> None:
    session = _Session(tmp_path / "elsewhere")
    with pytest.raises(GuardError) as err:
        _source(session).consume(Permit(permit_id="p1", hold_units=RMAX), DIGEST)
    assert err.value.code is Code.LOOKUP_HOLD_UNVERIFIED


def test_a_guard_stop_is_its_own_exchange(tmp_path: Path) -> None:
    session = _Session(tmp_path)
    source = _source(session)
    source.stop(Code.LOOKUP_PAYLOAD_FORBIDDEN)
    assert session.halted == [Code.LOOKUP_PAYLOAD_FORBIDDEN]
    assert source.stop_code is Code.LOOKUP_PAYLOAD_FORBIDDEN


def test_the_route_guard_refuses_a_test_only_source(tmp_path: Path) -> None:
    route = Route(provider="faux", model="faux-extractive-v1", api="openai-responses",
                  base_url="faux://local", effort="low", stream=True, catalog_file=None,
                  catalog_sha256=bundled_catalog().digest)
    with pytest.raises(GuardError) as err:
        route_guard(route, TestOnlyPermitSource(), run_id="s1", deadline_s=1.0,
                    cache_key="k", credential=None)
    assert err.value.code is Code.LOOKUP_TEST_ONLY_SOURCE
    guard = route_guard(route, _source(_Session(tmp_path)), run_id="s1", deadline_s=1.0,
                        cache_key="k", credential=None)
    assert (guard.contract.model, guard.contract.prompt_cache_key) == ("faux-extractive-v1", "k")
