"""The burn registry: an authorization id is consumed at most once, ever, per user.

Real registry: ``<pwd home>/.local/state/efold/consumed-v1/<key>/`` with the home taken
from the password database (never ``$HOME``); only an explicit ``registry_root``
argument (tests) moves it. Faux registry: ``<run root's parent>/.efold-faux-consumed-v1/``.
``key = sha256(domain || authorization id)``: renaming or reformatting the artifact
cannot make a second use of the same id. The raw artifact digest lives inside the
claim, not in the key.

Consumption order (each step durable before the next):

1. under the held lease, re-verify the artifact and its bindings; the run root must be
   the bound output root, owner-safe, writable by nobody else, and unused (nothing in
   it but the lease and the journal, each a private single-link regular file);
2. exclusive-create the registry entry directory: its existence alone burns the id
   (every registry ancestor's parent is fsynced, even if it already existed, and the
   entry's parent is fsynced before any marker is written);
3. publish ``authorization-consumed.json`` in the run root, then ``claim.json`` in the
   entry (``publish_exclusive``: complete or absent);
4. verify the pair before any child starts.

Invariant: an entry directory never goes away and is never rewritten. A partial pair
(entry without both markers, or markers that disagree) is permanently unusable: there is
no repair, replay or rollback. Recreating the run root does not undo a burn, and a
marker copied into a recreated root fails the run-root inode check.
"""

from __future__ import annotations

import enum
import hashlib
import os
import pwd
from collections.abc import Sequence

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from efold.errors import Code
from efold.registry.authorization import (
    AuthorizationBindings,
    AuthorizationDomain,
    verify_authorization,
)
from efold.registry.errors import RegistryError
from efold.registry.files import (
    check_owner_safe,
    fsync_dir,
    fsync_fd,
    make_private_dir,
    open_dir_nofollow,
    publish_exclusive,
    read_private,
    shared_dir_reason,
    unsafe_file_reason,
)
from efold.registry.journal import JOURNAL_NAME
from efold.registry.lease import LEASE_NAME, Lease, LeaseHolder, LeaseState, probe_lease

__all__ = [
    "CLAIM_NAME",
    "CONSUMED_MARKER",
    "FAUX_REGISTRY_NAME",
    "ConsumptionRecord",
    "RecordKind",
    "consume_authorization",
    "faux_registry_root",
    "real_registry_root",
    "registry_key",
    "verify_consumption",
]

CONSUMED_MARKER = "authorization-consumed.json"
CLAIM_NAME = "claim.json"
FAUX_REGISTRY_NAME = ".efold-faux-consumed-v1"
_REAL_REGISTRY_PARTS = (".local", "state", "efold", "consumed-v1")
RECORD_VERSION = 1
_MAX_RECORD_BYTES = 16 * 1024
# What a fresh run root may already hold at consumption: the lease (consumption needs
# it) and the journal (the claim binds the epoch, which the journal assigns).
_FRESH_RUN_ROOT = frozenset({
    LEASE_NAME, JOURNAL_NAME, f"{JOURNAL_NAME}-wal", f"{JOURNAL_NAME}-shm",
    f"{JOURNAL_NAME}-journal",
})


class RecordKind(enum.StrEnum):
    MARKER = "run-marker"  # authorization-consumed.json in the run root
    CLAIM = "registry-claim"  # claim.json in the registry entry


class ConsumptionRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One half of the pair. Both halves carry the same bindings; ``kind`` keeps one
    from standing in for the other."""

    version: int
    kind: RecordKind
    domain: AuthorizationDomain
    authorization_id: str
    artifact_sha256: str
    run_id: str
    run_root: str
    run_root_dev: int
    run_root_ino: int
    lease_dev: int
    lease_ino: int
    controller: LeaseHolder  # controller pid, start time, boot id and epoch


_decoder = msgspec.json.Decoder(ConsumptionRecord)


def registry_key(domain: AuthorizationDomain, authorization_id: str) -> str:
    return hashlib.sha256(domain.value.encode() + authorization_id.encode()).hexdigest()


def real_registry_root() -> str:
    """From the password database, never ``$HOME``: the environment cannot move it."""
    home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(home, *_REAL_REGISTRY_PARTS)


def faux_registry_root(run_root: str | os.PathLike[str]) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(os.fspath(run_root))),
                        FAUX_REGISTRY_NAME)


def _registry_root(
    domain: AuthorizationDomain, run_root: str, override: str | os.PathLike[str] | None
) -> str:
    if override is not None:
        return os.path.abspath(os.fspath(override))
    if domain is AuthorizationDomain.REAL:
        return real_registry_root()
    return faux_registry_root(run_root)


def _inside(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith(ancestor.rstrip("/") + "/")


def _refuse_shared_dir(st: os.stat_result, code: Code) -> None:
    """A directory holding trusted state (``shared_dir_reason``)."""
    why = shared_dir_reason(st)
    if why is not None:
        raise RegistryError(code, f"directory {why}")


def _refuse_unfresh_run_root(run_root: str) -> None:
    """``RUN_ROOT_IN_USE`` unless the run root holds nothing but the lease and the
    journal; ``PRIVATE_DIR_REFUSED`` if others may write in it; ``PATH_REFUSED`` if one
    of those names is not a private, single-link regular file of ours (a planted
    symlink or hard link: the journal or lease would have been opened through it)."""
    fd = open_dir_nofollow(run_root)
    try:
        _refuse_shared_dir(os.fstat(fd), Code.PRIVATE_DIR_REFUSED)
        names = os.listdir(fd)
        if not set(names) <= _FRESH_RUN_ROOT:
            raise RegistryError(Code.RUN_ROOT_IN_USE, "run root is not fresh")
        for name in names:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # a journal side file SQLite removed meanwhile
            if unsafe_file_reason(st) is not None:
                raise RegistryError(Code.PATH_REFUSED, "run root entry is not a private file")
    finally:
        os.close(fd)


def _prepare_registry(root: str) -> None:
    """Create the registry root privately and make every step of it durable: each
    component's parent is fsynced whether or not the component already existed (a
    crash may have left a created-but-unsynced name)."""
    prefix = "/"
    for part in [p for p in root.split("/") if p]:
        parent, prefix = prefix, os.path.join(prefix, part)
        if not os.path.lexists(prefix):
            make_private_dir(prefix)
        fsync_dir(parent)
    make_private_dir(root)  # refuses a symlinked, foreign or shared registry root
    check_owner_safe(root)


def _burn_entry(root: str, key: str) -> None:
    """Step 2: the entry's existence is the burn."""
    root_fd = open_dir_nofollow(root)
    try:
        try:
            os.mkdir(key, 0o700, dir_fd=root_fd)
        except FileExistsError as exc:
            fsync_fd(root_fd)  # whoever created it may not have synced it yet
            raise RegistryError(Code.AUTHORIZATION_CONSUMED, "authorization id already used") from exc
        fsync_fd(root_fd)
    finally:
        os.close(root_fd)


def consume_authorization(
    artifact: bytes,
    *,
    domain: AuthorizationDomain,
    trusted_keys: Sequence[Ed25519PublicKey],
    expected: AuthorizationBindings,
    account_id: str,
    lease: Lease,
    run_id: str,
    registry_root: str | os.PathLike[str] | None = None,
    now: float | None = None,
) -> ConsumptionRecord:
    """Burn the authorization for this run and return the verified pair's record.

    The run root is the lease's run directory; it must equal the bound output root.
    ``registry_root`` overrides the registry location (tests only; production passes
    nothing). Raises ``AUTHORIZATION_CONSUMED`` if the id was ever consumed before,
    ``RUN_ROOT_IN_USE`` if the run root holds anything but the lease and journal, the
    verification codes of ``verify_authorization``, and ``LEASE_NOT_HELD``."""
    lease.assert_held()
    verified = verify_authorization(artifact, domain=domain, trusted_keys=trusted_keys,
                                    expected=expected, account_id=account_id, now=now)
    run_root = lease.run_dir
    if verified.attestation.bindings.output_root != run_root:
        raise RegistryError(Code.AUTHORIZATION_BINDING_MISMATCH, "differs: output_root")
    check_owner_safe(run_root)
    _refuse_unfresh_run_root(run_root)
    root = _registry_root(domain, run_root, registry_root)
    if _inside(root, run_root) or _inside(run_root, root):
        raise RegistryError(Code.PATH_REFUSED, "registry and run root overlap")
    _prepare_registry(root)

    key = registry_key(domain, verified.authorization_id)
    lease.assert_held()
    _burn_entry(root, key)

    root_st = os.lstat(run_root)
    lease_dev, lease_ino = lease.file_identity
    record = ConsumptionRecord(
        version=RECORD_VERSION, kind=RecordKind.MARKER, domain=domain,
        authorization_id=verified.authorization_id,
        artifact_sha256=verified.artifact_sha256, run_id=run_id, run_root=run_root,
        run_root_dev=root_st.st_dev, run_root_ino=root_st.st_ino,
        lease_dev=lease_dev, lease_ino=lease_ino, controller=lease.holder,
    )
    publish_exclusive(run_root, CONSUMED_MARKER, msgspec.json.encode(record) + b"\n")
    claim = msgspec.structs.replace(record, kind=RecordKind.CLAIM)
    publish_exclusive(os.path.join(root, key), CLAIM_NAME, msgspec.json.encode(claim) + b"\n")
    return verify_consumption(run_root, domain=domain,
                              authorization_id=verified.authorization_id,
                              artifact_sha256=verified.artifact_sha256, run_id=run_id,
                              controller=lease.holder, registry_root=registry_root)


def _check_private_dir(directory: str) -> None:
    fd = open_dir_nofollow(directory)
    try:
        _refuse_shared_dir(os.fstat(fd), Code.PRIVATE_DIR_REFUSED)
    finally:
        os.close(fd)


def _read_record(directory: str, name: str, kind: RecordKind) -> ConsumptionRecord:
    try:
        _check_private_dir(directory)
        data = read_private(directory, name, max_bytes=_MAX_RECORD_BYTES)
        record = _decoder.decode(data)
    except RegistryError as exc:
        raise RegistryError(Code.AUTHORIZATION_CLAIM_INVALID, f"{kind.value}: {exc.code}") from exc
    except msgspec.DecodeError as exc:
        raise RegistryError(Code.AUTHORIZATION_CLAIM_INVALID, f"{kind.value}: malformed") from exc
    if record.version != RECORD_VERSION or record.kind is not kind:
        raise RegistryError(Code.AUTHORIZATION_CLAIM_INVALID, f"{kind.value}: wrong kind")
    return record


def _refuse(why: str) -> RegistryError:
    return RegistryError(Code.AUTHORIZATION_CLAIM_INVALID, why)


def verify_consumption(
    run_root: str | os.PathLike[str],
    *,
    domain: AuthorizationDomain,
    authorization_id: str,
    artifact_sha256: str,
    run_id: str,
    controller: LeaseHolder,
    registry_root: str | os.PathLike[str] | None = None,
) -> ConsumptionRecord:
    """Check the complete pair for this run from any process (the controller passes
    ``lease.holder``; a child passes the controller it was told about: its identity and
    epoch are compared, the token is read from the live lease): the lease is live and
    held by ``controller``; both records exist, are private, agree, and bind this
    authorization, artifact digest, run and this very lease acquisition; and the run
    root and lease file are still the inodes they name. ``AUTHORIZATION_CLAIM_INVALID``
    otherwise (a partial pair stays invalid forever). Returns the run-root marker."""
    root_path = os.path.abspath(os.fspath(run_root))
    status = probe_lease(root_path)
    live = status.holder
    if status.state is not LeaseState.LIVE or live is None:
        raise _refuse("run lease is not live")
    if (live.identity(), live.epoch) != (controller.identity(), controller.epoch):
        raise _refuse("run lease is held by another controller or epoch")
    marker = _read_record(root_path, CONSUMED_MARKER, RecordKind.MARKER)
    registry = _registry_root(domain, root_path, registry_root)
    entry = os.path.join(registry, registry_key(domain, authorization_id))
    try:
        _check_private_dir(registry)  # nobody else may swap the entry directory
    except RegistryError as exc:
        raise _refuse(f"registry root: {exc.code}") from exc
    claim = _read_record(entry, CLAIM_NAME, RecordKind.CLAIM)
    if msgspec.structs.replace(claim, kind=RecordKind.MARKER) != marker:
        raise _refuse("marker and claim disagree")
    wanted = (domain, authorization_id, artifact_sha256, run_id, root_path)
    found = (marker.domain, marker.authorization_id, marker.artifact_sha256,
             marker.run_id, marker.run_root)
    if wanted != found:
        raise _refuse("pair binds another authorization or run")
    # The full live holder, token included: the pair belongs to this very acquisition
    # of the lease, not to an earlier one in a recreated root (inodes get reused).
    if marker.controller != live:
        raise _refuse("pair belongs to another lease acquisition")
    try:
        root_st = os.lstat(root_path)
        lease_st = os.lstat(os.path.join(root_path, LEASE_NAME))
    except OSError as exc:
        raise _refuse("run root or lease file gone") from exc
    if (root_st.st_dev, root_st.st_ino) != (marker.run_root_dev, marker.run_root_ino):
        raise _refuse("run root is not the consumed one")
    if (lease_st.st_dev, lease_st.st_ino) != (marker.lease_dev, marker.lease_ino):
        raise _refuse("lease file is not the consumed one")
    return marker
