"""The smoke record: proof that the configured-process smoke passed on a route.

``efold-controller smoke`` runs one slot per role of a registration on its configured
route through the complete controller/child flow (lease, authorization, prep, probe,
permits, settlement, containment, receipts) under its own small cap. When every slot
completed and nothing stopped the run, it publishes a record beside the run root (in
``<run root's parent>/.efold-smoke-v1/``, owner-only, one file per smoke run, never
rewritten). ``pilot --real`` refuses with ``lookup_pilot_real_route_unavailable`` unless
a passing record for the same registration and the same route is there: run the smoke
and the campaign under the same parent directory.

A record opens a paid route, so it is read as the other private records are (a private
directory; a regular, single-link, owner-only file of this user, no link followed) and
it is bound to efold's own smoke: it carries an HMAC-SHA256 under a per-user key kept
beside the real burn registry (``<pwd home>/.local/state/efold/smoke-mac-v1.key``,
owner-only, made by the first smoke). A record that is not private, does not decode,
is of another version or whose MAC does not verify (a hand-written or edited file)
refuses with ``smoke_record_invalid``, naming it: it is never skipped silently.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path
from typing import Final

import msgspec

from efold.controller.campaigns.profiles import route_of
from efold.controller.campaigns.registration import Registration
from efold.controller.errors import ControllerError
from efold.controller.pilot.pilot import PilotOutcome
from efold.digests import digest_of
from efold.errors import Code, EfoldError
from efold.protocol.records import SlotStatus
from efold.registry import make_private_dir, publish_exclusive
from efold.registry.burn import real_registry_root
from efold.registry.files import open_dir_nofollow, read_private, shared_dir_reason

SMOKE_DIR: Final = ".efold-smoke-v1"
SMOKE_VERSION: Final = 2  # 2: the record carries its MAC
SMOKE_KEY_NAME: Final = "smoke-mac-v1.key"
_KEY_BYTES: Final = 32
_MAC_DOMAIN: Final = b"efold-smoke-record-v2\0"
_MAX_RECORD_BYTES: Final = 16 * 1024


class SmokeRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    registration_sha256: str
    route_digest: str  # the reader's and summariser's routes (``route_digest``)
    run_dir: str
    slots: int
    completed: int
    passed: bool
    finished_at: int  # unix seconds
    mac: str = ""  # HMAC-SHA256 (hex) of the record with mac "", under the smoke key


def smoke_key_dir() -> str:
    """Beside the real burn registry, from the password database (never ``$HOME``)."""
    return os.path.dirname(real_registry_root())


def _smoke_key(*, create: bool) -> bytes:
    """The per-user smoke key (``create``: made now if missing, 0600, exclusively)."""
    directory = smoke_key_dir()
    if create:
        make_private_dir(directory, parents=True)
    for _ in range(2):
        try:
            key = read_private(directory, SMOKE_KEY_NAME, max_bytes=_KEY_BYTES,
                               owner_only=True)
        except EfoldError as exc:
            if exc.code is not Code.PRIVATE_FILE_MISSING or not create:
                raise ControllerError(Code.SMOKE_RECORD_INVALID,
                                      f"the smoke key {os.path.join(directory, SMOKE_KEY_NAME)}"
                                      f": {exc.code.value} ({exc.detail})") from exc
            try:
                publish_exclusive(directory, SMOKE_KEY_NAME, secrets.token_bytes(_KEY_BYTES))
            except EfoldError as raced:
                if raced.code is not Code.PUBLISH_TARGET_EXISTS:
                    raise
            continue  # read back what is there now (ours, or a concurrent smoke's)
        if len(key) != _KEY_BYTES:
            raise ControllerError(Code.SMOKE_RECORD_INVALID,
                                  f"the smoke key {os.path.join(directory, SMOKE_KEY_NAME)} "
                                  f"is not {_KEY_BYTES} bytes")
        return key
    raise ControllerError(Code.SMOKE_RECORD_INVALID, "the smoke key could not be made")


def _mac(record: SmokeRecord, key: bytes) -> str:
    body = msgspec.json.encode(msgspec.structs.replace(record, mac=""))
    return hmac.new(key, _MAC_DOMAIN + body, hashlib.sha256).hexdigest()


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
    record = msgspec.structs.replace(record, mac=_mac(record, _smoke_key(create=True)))
    directory = outcome.run_dir.absolute().parent / SMOKE_DIR
    make_private_dir(directory, parents=True)
    name = f"{registration_sha256}-{outcome.run_dir.name}.json"
    publish_exclusive(directory, name, msgspec.json.encode(record) + b"\n")
    return directory / name


def _read_record(directory: Path, name: str, key: bytes) -> SmokeRecord:
    """One record, read as a private file and verified, else ``smoke_record_invalid``."""
    where = directory / name

    def invalid(why: str) -> ControllerError:
        return ControllerError(Code.SMOKE_RECORD_INVALID,
                               f"{where}: {why}; remove it and run `efold-controller smoke`")

    try:
        data = read_private(directory, name, max_bytes=_MAX_RECORD_BYTES, owner_only=True)
        record = msgspec.json.decode(data, type=SmokeRecord)
    except EfoldError as exc:
        raise invalid(f"{exc.code.value} ({exc.detail})") from exc
    except msgspec.DecodeError as exc:
        raise invalid("not a smoke record") from exc
    if record.version != SMOKE_VERSION:
        raise invalid(f"version {record.version}, not {SMOKE_VERSION}")
    if not hmac.compare_digest(record.mac, _mac(record, key)):
        raise invalid("its MAC does not verify: not written by this user's efold smoke")
    return record


def require_smoke(reg: Registration, registration_sha256: str, run_dir: Path) -> SmokeRecord:
    """The passing smoke record a real run of ``reg`` in ``run_dir`` stands on, else
    ``lookup_pilot_real_route_unavailable`` saying what is missing;
    ``smoke_record_invalid`` if a record of this registration there is not a private,
    verified record of efold's smoke (see the module docstring)."""
    directory = run_dir.absolute().parent / SMOKE_DIR
    wanted = route_digest(reg)
    names: list[str] = []
    if os.path.lexists(directory):
        try:
            fd = open_dir_nofollow(directory)
            try:
                why = shared_dir_reason(os.fstat(fd))
                names = sorted(os.listdir(fd))
            finally:
                os.close(fd)
        except EfoldError as exc:
            raise ControllerError(Code.SMOKE_RECORD_INVALID,
                                  f"{directory}: {exc.code.value} ({exc.detail})") from exc
        if why is not None:
            raise ControllerError(Code.SMOKE_RECORD_INVALID, f"{directory}: directory {why}")
    ours = [n for n in names if n.startswith(registration_sha256 + "-")]
    key = _smoke_key(create=False) if ours else b""
    found = [r for r in (_read_record(directory, n, key) for n in ours)
             if r.registration_sha256 == registration_sha256 and r.route_digest == wanted]
    passing = [r for r in found if r.passed]
    if not passing:
        why = ("its smokes there did not pass" if found else "no smoke record there")
        raise ControllerError(
            Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
            f"run `efold-controller smoke` for this registration first ({why}: {directory})")
    return passing[-1]
