"""Checkpoint snapshots: the directory the prep child writes and the probe child restores.

Layout (regular files only, owner-only modes, nothing else allowed)::

    <dir>/checkpoint.json   the Checkpoint without its store records (msgspec JSON)
    <dir>/store.sqlite      the retained store's SQLite image (store arms only)
    <dir>/manifest.json     SnapshotManifest: every other file's name, size and sha256,
                            the content digest, and the snapshot digest

Digests:

* ``content_digest``: sha256 of the canonical JSON of the *whole* checkpoint, store
  records included. It names what the reader sees, independently of SQLite's bytes.
* ``digest`` (the snapshot digest the prep child reports and the probe child checks):
  sha256 of the canonical JSON of the manifest body (format, arm, trace id, the file
  list with sizes and hashes, the content digest). Verifying it and every file hash
  proves the directory holds exactly what was written.

Writes are complete or absent per file: each file is created ``O_EXCL|O_NOFOLLOW``,
written, fsynced; ``manifest.json`` is written last and the directory fsynced, so a
directory without a manifest is an unfinished snapshot and never verifies.

Reads open the directory ``O_DIRECTORY|O_NOFOLLOW`` and every file relative to it with
``O_NOFOLLOW``; refuse anything that is not a regular file, has more than one link, is
not owned by this user, grants any group/other permission, exceeds the size limits,
is not listed, or changed (device/inode) between the listing and the read. The store
image is restored from the verified bytes into memory, so nothing can swap it after
verification. ``copy_snapshot`` verifies a snapshot and writes the verified bytes into
a probe child's private slot directory.

The snapshot tree is the manifest's ``files`` plus ``manifest.json`` itself (what a
``Prepared`` message or a preflight report counts).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from efold.errors import Code
from efold.folds.checkpoint import Checkpoint, RetainedStore
from efold.folds.errors import FoldError
from efold.folds.lookup import LookupTool
from efold.folds.meter import Meter
from efold.folds.store import HistoryStore, records_digest
from efold.registry.errors import RegistryError
from efold.registry.files import open_dir_nofollow, read_to_eof, write_all

SNAPSHOT_FORMAT: Final = "efold-checkpoint-v1"
CHECKPOINT_FILE = "checkpoint.json"
STORE_FILE = "store.sqlite"
MANIFEST_FILE = "manifest.json"
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_MANIFEST_BYTES = 64 * 1024


class SnapshotFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    bytes: int
    sha256: str


class _ManifestBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: Literal["efold-checkpoint-v1"]
    arm: str
    trace_id: str
    files: list[SnapshotFile]
    content_digest: str


class SnapshotManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: Literal["efold-checkpoint-v1"]
    arm: str
    trace_id: str
    files: list[SnapshotFile]
    content_digest: str
    digest: str

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)


@dataclass(frozen=True)
class RestoredCheckpoint:
    """A verified snapshot: the checkpoint and the store image it was restored from."""

    checkpoint: Checkpoint
    manifest: SnapshotManifest
    store_image: bytes | None
    checkpoint_bytes: bytes  # the verified checkpoint.json, as written

    def open_store(self) -> HistoryStore | None:
        return None if self.store_image is None else HistoryStore.from_bytes(self.store_image)

    def lookup_tool(self, meter: Meter | None = None) -> LookupTool | None:
        """A fresh lookup tool (fresh meter unless one is given), or None without a store."""
        store = self.open_store()
        return None if store is None else LookupTool(store, meter)


def content_digest(checkpoint: Checkpoint) -> str:
    """sha256 of the canonical JSON of the whole checkpoint (store records included)."""
    return hashlib.sha256(msgspec.json.encode(checkpoint)).hexdigest()


def _manifest_digest(body: _ManifestBody) -> str:
    return hashlib.sha256(msgspec.json.encode(body)).hexdigest()


def _sealed(body: _ManifestBody) -> SnapshotManifest:
    """The manifest of ``body``: its fields and the digest over them."""
    return SnapshotManifest(**msgspec.structs.asdict(body), digest=_manifest_digest(body))


def _body_of(manifest: SnapshotManifest) -> _ManifestBody:
    """What ``manifest``'s digest covers: every field but the digest."""
    fields = msgspec.structs.asdict(manifest)
    del fields["digest"]
    return _ManifestBody(**fields)


# -- writing ----------------------------------------------------------------------------


def _fsync(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:  # fatal, never retried (docs/architecture.md §4)
        raise FoldError(Code.FSYNC_FAILED, "fsync failed while writing a snapshot") from exc


def _write_new(dir_fd: int, name: str, data: bytes, *, sync: bool = True) -> SnapshotFile:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise FoldError(Code.CHECKPOINT_SNAPSHOT_INVALID, f"cannot create {name}") from exc
    try:
        write_all(fd, data)
        if sync:
            _fsync(fd)
    finally:
        os.close(fd)
    return SnapshotFile(name=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def _open_dir_nofollow(directory: str | os.PathLike[str]) -> int:
    """The snapshot directory, opened without following a link at ANY component of its
    path (a checkpoint directory swapped for a link after the prep is refused too)."""
    try:
        return open_dir_nofollow(directory)
    except RegistryError as exc:
        raise FoldError(Code.CHECKPOINT_SNAPSHOT_INVALID,
                        "the snapshot path is not a plain directory") from exc


def _open_empty_private_dir(directory: str | os.PathLike[str]) -> int:
    path = os.fspath(directory)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise FoldError(Code.CHECKPOINT_SNAPSHOT_INVALID, "cannot create the snapshot directory") from exc
    dir_fd = _open_dir_nofollow(path)
    info = os.fstat(dir_fd)
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or os.listdir(dir_fd):
        os.close(dir_fd)
        raise FoldError(
            Code.CHECKPOINT_SNAPSHOT_INVALID, "the snapshot directory must be new, private and empty"
        )
    return dir_fd


def write_checkpoint(checkpoint: Checkpoint, directory: str | os.PathLike[str]) -> SnapshotManifest:
    """Write ``checkpoint`` into ``directory`` (created 0700 if missing; must be empty).
    Returns the manifest, whose ``digest`` the prep child reports."""
    dir_fd = _open_empty_private_dir(directory)
    try:
        files: list[SnapshotFile] = []
        without_store = msgspec.structs.replace(checkpoint, store=None)
        files.append(_write_new(dir_fd, CHECKPOINT_FILE, msgspec.json.encode(without_store)))
        if checkpoint.store is not None:
            store = HistoryStore.build(checkpoint.store)
            try:
                image = store.to_bytes()
            finally:
                store.close()
            files.append(_write_new(dir_fd, STORE_FILE, image))
        manifest = _sealed(_ManifestBody(
            format=SNAPSHOT_FORMAT,
            arm=checkpoint.arm,
            trace_id=checkpoint.trace_id,
            files=files,
            content_digest=content_digest(checkpoint),
        ))
        _write_new(dir_fd, MANIFEST_FILE, msgspec.json.encode(manifest))
        _fsync(dir_fd)
        return manifest
    finally:
        os.close(dir_fd)


# -- reading ----------------------------------------------------------------------------


def _refuse(detail: str) -> FoldError:
    return FoldError(Code.CHECKPOINT_SNAPSHOT_INVALID, detail)


def _read_private(dir_fd: int, name: str, limit: int) -> bytes:
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise _refuse(f"{name} is missing") from exc
    if not stat.S_ISREG(before.st_mode):
        raise _refuse(f"{name} is not a regular file")
    if before.st_nlink != 1:
        raise _refuse(f"{name} has {before.st_nlink} links")
    if before.st_uid != os.getuid() or before.st_mode & 0o077:
        raise _refuse(f"{name} is not owner-only")
    if before.st_size > limit:
        raise _refuse(f"{name} exceeds {limit} bytes")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise _refuse(f"cannot open {name}") from exc
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise _refuse(f"{name} changed while being opened")
        data = read_to_eof(fd, limit)
        if data is None:
            raise _refuse(f"{name} grew past {limit} bytes")
        return data
    finally:
        os.close(fd)


def read_checkpoint(
    directory: str | os.PathLike[str], *, expected_digest: str | None = None
) -> RestoredCheckpoint:
    """Verify and restore a snapshot. ``expected_digest`` (the digest the prep child
    reported) is compared when given; a mismatch is ``checkpoint_digest_mismatch``."""
    dir_fd = _open_dir_nofollow(directory)
    try:
        info = os.fstat(dir_fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o022:
            raise _refuse("the snapshot directory is not private")
        try:
            manifest = msgspec.json.decode(
                _read_private(dir_fd, MANIFEST_FILE, MAX_MANIFEST_BYTES), type=SnapshotManifest
            )
        except msgspec.DecodeError as exc:
            raise _refuse("the manifest does not decode") from exc
        if _manifest_digest(_body_of(manifest)) != manifest.digest:
            raise _refuse("the manifest digest does not match its body")
        if expected_digest is not None and manifest.digest != expected_digest:
            raise FoldError(Code.CHECKPOINT_DIGEST_MISMATCH, "snapshot digest differs from the reported one")
        listed = {f.name for f in manifest.files}
        if [f.name for f in manifest.files] not in ([CHECKPOINT_FILE], [CHECKPOINT_FILE, STORE_FILE]):
            raise _refuse("unexpected file list in the manifest")
        if set(os.listdir(dir_fd)) != listed | {MANIFEST_FILE}:
            raise _refuse("the snapshot directory holds unlisted or missing entries")
        if manifest.total_bytes > MAX_TOTAL_BYTES:
            raise _refuse("the snapshot exceeds the total size limit")
        contents: dict[str, bytes] = {}
        for entry in manifest.files:
            data = _read_private(dir_fd, entry.name, MAX_FILE_BYTES)
            if len(data) != entry.bytes or hashlib.sha256(data).hexdigest() != entry.sha256:
                raise FoldError(Code.CHECKPOINT_DIGEST_MISMATCH, f"{entry.name} differs from the manifest")
            contents[entry.name] = data
    finally:
        os.close(dir_fd)
    return _restore(manifest, contents)


def copy_snapshot(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    expected_digest: str,
) -> RestoredCheckpoint:
    """Verify the snapshot at ``source`` and write the verified bytes into the new,
    private ``destination`` (a probe child's slot directory): the copy is exactly what
    was hashed, never a second read of the source."""
    restored = read_checkpoint(source, expected_digest=expected_digest)
    dir_fd = _open_empty_private_dir(destination)
    # The copy is a probe's scratch workspace, rebuilt from the pristine snapshot by any
    # later probe: it needs no fsync (the pristine snapshot is the durable one).
    try:
        _write_new(dir_fd, CHECKPOINT_FILE, restored.checkpoint_bytes, sync=False)
        if restored.store_image is not None:
            _write_new(dir_fd, STORE_FILE, restored.store_image, sync=False)
        _write_new(dir_fd, MANIFEST_FILE, msgspec.json.encode(restored.manifest), sync=False)
    finally:
        os.close(dir_fd)
    return restored


def _restore(manifest: SnapshotManifest, contents: dict[str, bytes]) -> RestoredCheckpoint:
    try:
        checkpoint = msgspec.json.decode(contents[CHECKPOINT_FILE], type=Checkpoint)
    except msgspec.DecodeError as exc:
        raise _refuse("checkpoint.json does not decode") from exc
    image = contents.get(STORE_FILE)
    if image is not None:
        store = HistoryStore.from_bytes(image)
        try:
            retained: RetainedStore = store.retained()
        finally:
            store.close()
        receipt_store = checkpoint.receipt.store
        if receipt_store is None or receipt_store.records_digest != records_digest(retained.records):
            raise FoldError(Code.CHECKPOINT_DIGEST_MISMATCH, "store records differ from the receipt")
        checkpoint = msgspec.structs.replace(checkpoint, store=retained)
    if content_digest(checkpoint) != manifest.content_digest:
        raise FoldError(Code.CHECKPOINT_DIGEST_MISMATCH, "checkpoint content differs from the manifest")
    if (manifest.arm, manifest.trace_id) != (checkpoint.arm, checkpoint.trace_id):
        raise _refuse("the manifest names another checkpoint")
    return RestoredCheckpoint(
        checkpoint=checkpoint,
        manifest=manifest,
        store_image=image,
        checkpoint_bytes=contents[CHECKPOINT_FILE],
    )
