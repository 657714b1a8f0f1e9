"""The smoke record: proof that the configured-process smoke passed on a route.

``efold-controller smoke`` runs one slot per role of a registration on its configured
route through the complete controller/child flow (lease, authorization, prep, probe,
permits, settlement, containment, receipts) under its own small cap. When every slot
completed and nothing stopped the run, it publishes a record beside the run root (in
``<run root's parent>/.efold-smoke-v1/``, owner-only, one file per smoke run, never
rewritten). ``pilot --real`` refuses with ``lookup_pilot_real_route_unavailable`` unless
a passing record for the same registration and the same route is there: run the smoke
and the campaign under the same parent directory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Final

import msgspec

from efold.controller.errors import ControllerError
from efold.controller.pilot import PilotOutcome
from efold.controller.profiles import route_of
from efold.controller.registration import Registration
from efold.digests import digest_of
from efold.errors import Code
from efold.protocol.records import SlotStatus
from efold.registry import make_private_dir, publish_exclusive

SMOKE_DIR: Final = ".efold-smoke-v1"
SMOKE_VERSION: Final = 1


class SmokeRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    registration_sha256: str
    route_digest: str  # the reader's and summariser's routes (``route_digest``)
    run_dir: str
    slots: int
    completed: int
    passed: bool
    finished_at: int  # unix seconds


def route_digest(reg: Registration) -> str:
    """What the smoke proved the flow on: the reader's route and the summariser's."""
    c = reg.campaign
    return digest_of([route_of(c.reader),
                      route_of(c.summariser) if c.summariser is not None else None])


def smoke_failures(outcome: PilotOutcome) -> list[str]:
    """Why a smoke did not pass (empty: it passed): a stop, an interruption, or a slot
    that did not complete, each named."""
    why = [f"{r.slot}: {r.status.value}" + (f" ({r.code})" if r.code else "")
           for r in outcome.receipts if r.status is not SlotStatus.COMPLETED]
    if outcome.stop_code is not None:
        why.insert(0, f"stopped: {outcome.stop_code.value}")
    if outcome.interrupted is not None:
        why.insert(0, "interrupted")
    if not outcome.receipts:
        why.append("no slot ran")
    return why


def record_smoke(reg: Registration, registration_sha256: str, outcome: PilotOutcome) -> Path:
    """Publish this smoke's record (passed or not) beside its run root."""
    passed = not smoke_failures(outcome)
    record = SmokeRecord(
        version=SMOKE_VERSION, registration_sha256=registration_sha256,
        route_digest=route_digest(reg), run_dir=str(outcome.run_dir.absolute()),
        slots=len(outcome.receipts),
        completed=sum(r.status is SlotStatus.COMPLETED for r in outcome.receipts),
        passed=passed, finished_at=int(time.time()),
    )
    directory = outcome.run_dir.absolute().parent / SMOKE_DIR
    make_private_dir(directory, parents=True)
    name = f"{registration_sha256}-{outcome.run_dir.name}.json"
    publish_exclusive(directory, name, msgspec.json.encode(record) + b"\n")
    return directory / name


def require_smoke(reg: Registration, registration_sha256: str, run_dir: Path) -> SmokeRecord:
    """The passing smoke record a real run of ``reg`` in ``run_dir`` stands on, else
    ``lookup_pilot_real_route_unavailable`` saying what is missing."""
    directory = run_dir.absolute().parent / SMOKE_DIR
    wanted = route_digest(reg)
    found: list[SmokeRecord] = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        names = []
    for name in names:
        if not name.startswith(registration_sha256 + "-"):
            continue
        try:
            record = msgspec.json.decode((directory / name).read_bytes(), type=SmokeRecord)
        except (OSError, msgspec.DecodeError):
            continue  # unreadable or not a record: proves nothing
        if record.registration_sha256 == registration_sha256 and record.route_digest == wanted:
            found.append(record)
    passing = [r for r in found if r.passed]
    if not passing:
        why = ("its smokes there did not pass" if found else "no smoke record there")
        raise ControllerError(
            Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
            f"run `efold-controller smoke` for this registration first ({why}: {directory})")
    return passing[-1]
