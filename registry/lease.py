"""The run lease: one writer per run directory, and a way for anyone to tell whether it
is live.

The lease is ``flock(LOCK_EX)`` on ``<run>/.efold-lease``, opened ``O_CLOEXEC`` by the
controller and held until it releases or dies. The file holds a fixed-size JSON record
naming the holder (pid, start time, boot id, epoch) and whether it released.

Why flock and not POSIX ``fcntl`` locks (or a SQLite transaction, which uses them):
POSIX locks belong to the *process* and are dropped when it closes *any* descriptor on
the file, so one innocent ``open``/``close`` of the lease file anywhere in the
controller would silently end the lease. flock locks belong to the open file
description: only our own descriptor (or process death) releases them.

Who may act:

* ``acquire_lease`` creates the file if absent (0600), never deletes a file it did not
  create, and fails with ``LEASE_HELD`` while another process holds the lock.
* ``probe_lease`` works from any process (children included) and never writes.

The probe's own lock: to tell "held" from "not held", a probe takes a *shared*
non-blocking flock on a fresh descriptor, reads the record, and unlocks. Probes do not
block each other, but for those few microseconds an ``acquire_lease`` in another
process would see the file locked. ``acquire_lease`` therefore retries its exclusive
lock a bounded number of times (``_ACQUIRE_ATTEMPTS`` × ``_ACQUIRE_RETRY_S``) before
answering ``LEASE_HELD``; a real holder keeps the lock far longer than that.
"""

from __future__ import annotations

import enum
import fcntl
import os
import secrets
import time
from collections.abc import Callable
from types import TracebackType

import msgspec

from efold.errors import Code
from efold.identity import ProcessIdentity, current_identity
from efold.registry.errors import RegistryError
from efold.registry.files import (
    fsync_fd,
    open_dir_nofollow,
    shared_dir_reason,
    unsafe_file_reason,
)

__all__ = [
    "LEASE_NAME",
    "Lease",
    "LeaseHolder",
    "LeaseState",
    "LeaseStatus",
    "acquire_lease",
    "probe_lease",
]

LEASE_NAME = ".efold-lease"
RECORD_VERSION = 1
# The record is rewritten in place with one pwrite of this many bytes (padded), so a
# reader never sees a shorter file than a complete record.
_RECORD_SIZE = 512
# About 45 ms in all: far longer than a probe holds its shared lock (microseconds,
# unless the probing process is descheduled), far shorter than any real holder.
_ACQUIRE_ATTEMPTS = 10
_ACQUIRE_RETRY_S = 0.005
# A probe that finds the lock held reads the record without the lock; the holder may
# be rewriting it (set_epoch) at that moment, so an undecodable read is retried.
_PROBE_READ_ATTEMPTS = 3
_PROBE_RETRY_S = 0.002


class LeaseState(enum.StrEnum):
    LIVE = "live"  # the lock is held (holder named by the record)
    RELEASED = "released"  # the holder marked the lease released (it may still be unlocking)
    HOLDER_DEAD = "holder_dead"  # nobody holds the lock and the record was never released
    ABSENT = "absent"  # no lease file in the run directory


class LeaseHolder(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pid: int
    start_time: int
    boot_id: str
    epoch: int
    # Random per acquisition. Inode numbers are reused at once on ext4, so a run root
    # deleted and recreated (with a new lease file) can carry the same (st_dev, st_ino)
    # as before; the token still differs, which is what lets a consumption claim tell
    # "this acquisition" from "an earlier one" (burn.verify_consumption). Compare
    # holders by ``identity()`` and ``epoch`` when the token is not known.
    token: str = ""

    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(pid=self.pid, start_time=self.start_time, boot_id=self.boot_id)


class LeaseStatus(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    state: LeaseState
    # None when there is no file, or the record could not be read (e.g. a holder that
    # died between creating the file and writing its record).
    holder: LeaseHolder | None


class _LeaseRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    released: bool
    holder: LeaseHolder


_decoder = msgspec.json.Decoder(_LeaseRecord)


def _encode_record(record: _LeaseRecord) -> bytes:
    raw = msgspec.json.encode(record)
    if len(raw) >= _RECORD_SIZE:
        raise ValueError("lease record too large")  # only a boot id of absurd length
    return raw + b" " * (_RECORD_SIZE - 1 - len(raw)) + b"\n"


def _write_record(fd: int, record: _LeaseRecord) -> None:
    data = _encode_record(record)
    try:
        written = os.pwrite(fd, data, 0)
    except OSError as exc:
        raise RegistryError(Code.LEASE_FILE_INVALID, f"record write: errno {exc.errno}") from exc
    if written != len(data):
        raise RegistryError(Code.LEASE_FILE_INVALID, "short record write")
    fsync_fd(fd)


def _read_record(fd: int) -> _LeaseRecord | None:
    data = os.pread(fd, _RECORD_SIZE + 1, 0)
    try:
        record = _decoder.decode(data.rstrip())
    except msgspec.DecodeError:  # ValidationError is a subclass
        return None
    return record if record.version == RECORD_VERSION else None


def _refuse_unsafe_lease_file(st: os.stat_result) -> None:
    why = unsafe_file_reason(st)
    if why is not None:
        raise RegistryError(Code.LEASE_FILE_INVALID, why)


def _refuse_shared_run_dir(st: os.stat_result) -> None:
    why = shared_dir_reason(st)
    if why is not None:
        raise RegistryError(Code.PRIVATE_DIR_REFUSED, f"run directory {why}")


class Lease:
    """The held run lease. Owns the locked descriptor; pass it to whatever must only
    run under the lease (``JournalWriter``, authorization consumption) and call
    ``release`` (or leave the ``with`` block) at shutdown. Not thread-safe: the
    controller uses it from one thread."""

    run_dir: str
    holder: LeaseHolder

    def __init__(
        self, run_dir: str, fd: int, holder: LeaseHolder, file_identity: tuple[int, int]
    ) -> None:
        self.run_dir = run_dir
        self.holder = holder
        # Invariant: while _fd is not None this process holds flock(LOCK_EX) through
        # _fd on the inode _file_identity, which run_dir/.efold-lease names.
        self._fd: int | None = fd
        self._file_identity = file_identity

    @property
    def path(self) -> str:
        return os.path.join(self.run_dir, LEASE_NAME)

    @property
    def file_identity(self) -> tuple[int, int]:
        """(st_dev, st_ino) of the lease file; claims bind it."""
        return self._file_identity

    def assert_held(self) -> None:
        """``LEASE_NOT_HELD`` unless this process still holds this lease: not released,
        not a forked copy, the descriptor still ours, and the name still our file."""
        if self._fd is None:
            raise RegistryError(Code.LEASE_NOT_HELD, "lease released")
        if os.getpid() != self.holder.pid:
            raise RegistryError(Code.LEASE_NOT_HELD, "not the holder process")
        fd = self._fd
        self._check_ours(lambda: os.fstat(fd), "lease descriptor gone", "lease descriptor replaced")
        self._check_ours(lambda: os.lstat(self.path), "lease file removed", "lease file replaced")

    def _check_ours(self, read: Callable[[], os.stat_result], gone: str, replaced: str) -> None:
        """``LEASE_NOT_HELD`` (``gone``, ``replaced``) unless ``read`` stats our lease file."""
        try:
            st = read()
        except OSError as exc:
            raise RegistryError(Code.LEASE_NOT_HELD, gone) from exc
        if (st.st_dev, st.st_ino) != self._file_identity:
            raise RegistryError(Code.LEASE_NOT_HELD, replaced)

    def set_epoch(self, epoch: int) -> None:
        """Record the controller epoch (from the journal) in the holder record."""
        self.assert_held()
        if self._fd is None:
            raise RegistryError(Code.LEASE_NOT_HELD, "lease released")
        holder = msgspec.structs.replace(self.holder, epoch=epoch)
        _write_record(self._fd, _LeaseRecord(RECORD_VERSION, released=False, holder=holder))
        self.holder = holder

    def release(self) -> None:
        """Mark the lease released in the file, then unlock. Idempotent. If the release
        mark cannot be written, the lock is still dropped and the error raised (the file
        then reads as holder-dead, which is just as safe)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if os.getpid() != self.holder.pid:
            # A forked copy shares the open file description: unlocking here would
            # end the parent's lease. Only drop our reference.
            os.close(fd)
            return
        try:
            _write_record(fd, _LeaseRecord(RECORD_VERSION, released=True, holder=self.holder))
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _lock_exclusive(fd: int) -> None:
    for attempt in range(_ACQUIRE_ATTEMPTS):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt + 1 < _ACQUIRE_ATTEMPTS:
                time.sleep(_ACQUIRE_RETRY_S)
    raise RegistryError(Code.LEASE_HELD, "another process holds the run lease")


def acquire_lease(run_dir: str | os.PathLike[str], *, epoch: int = 0) -> Lease:
    """Take the run lease of ``run_dir`` for this process. ``LEASE_HELD`` while another
    process holds it; ``PATH_REFUSED`` if the run directory path holds a symlink;
    ``PRIVATE_DIR_REFUSED`` if the run directory is not ours or is group/other-writable
    (sticky or not: anyone who may create names in it could plant the journal, a slot
    or a receipt directory as a link); ``LEASE_FILE_INVALID`` if the lease name is not
    a private regular file."""
    absolute = os.path.abspath(os.fspath(run_dir))
    dir_fd = open_dir_nofollow(absolute)
    try:
        _refuse_shared_run_dir(os.fstat(dir_fd))
        return _acquire_in(absolute, dir_fd, epoch)
    finally:
        os.close(dir_fd)


def _acquire_in(run_dir: str, dir_fd: int, epoch: int) -> Lease:
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(LEASE_NAME, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
        created = True
    except FileExistsError:
        try:
            fd = os.open(LEASE_NAME, flags | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            raise RegistryError(Code.LEASE_FILE_INVALID, f"open: errno {exc.errno}") from exc
        created = False
    except OSError as exc:
        raise RegistryError(Code.LEASE_FILE_INVALID, f"create: errno {exc.errno}") from exc
    locked = False
    try:
        if created:
            os.fchmod(fd, 0o600)
        opened = os.fstat(fd)
        _refuse_unsafe_lease_file(opened)
        _lock_exclusive(fd)
        locked = True
        identity = (opened.st_dev, opened.st_ino)
        # Between our open and our lock, the name may have been pointed elsewhere (a
        # failed acquirer removing its own file): a lock on an unnamed inode is no lease.
        named = os.stat(LEASE_NAME, dir_fd=dir_fd, follow_symlinks=False)
        if (named.st_dev, named.st_ino) != identity:
            raise RegistryError(Code.LEASE_HELD, "lease file replaced during acquire")
        me = current_identity()
        holder = LeaseHolder(pid=me.pid, start_time=me.start_time, boot_id=me.boot_id,
                             epoch=epoch, token=secrets.token_hex(16))
        _write_record(fd, _LeaseRecord(RECORD_VERSION, released=False, holder=holder))
        if created:
            fsync_fd(dir_fd)  # the lease file's name is durable before anyone relies on it
        return Lease(run_dir, fd, holder, identity)
    except BaseException:
        # Remove only a file we created, only while we hold its lock (nobody else can
        # be its holder), and only if the name still means our inode.
        if created and locked:
            try:
                named = os.stat(LEASE_NAME, dir_fd=dir_fd, follow_symlinks=False)
                st = os.fstat(fd)
                if (named.st_dev, named.st_ino) == (st.st_dev, st.st_ino):
                    os.unlink(LEASE_NAME, dir_fd=dir_fd)
            except OSError:
                pass
        os.close(fd)
        raise


def probe_lease(run_dir: str | os.PathLike[str]) -> LeaseStatus:
    """Tell live / released / holder-dead / absent from any process, without writing.
    See the module docstring for the brief shared lock the probe itself takes.
    ``PATH_REFUSED`` if the run directory path holds a symlink; ``LEASE_FILE_INVALID``
    if the lease name is not a private, single-link regular file (a record anyone else
    could have written is no evidence of a holder)."""
    dir_fd = open_dir_nofollow(os.path.abspath(os.fspath(run_dir)))
    try:
        fd = os.open(LEASE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        return LeaseStatus(state=LeaseState.ABSENT, holder=None)
    except OSError as exc:
        raise RegistryError(Code.LEASE_FILE_INVALID, f"open: errno {exc.errno}") from exc
    finally:
        os.close(dir_fd)
    try:
        _refuse_unsafe_lease_file(os.fstat(fd))
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _status_of_locked(fd)
        try:
            record = _read_record(fd)  # under our shared lock: no holder is writing
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    if record is None:
        return LeaseStatus(state=LeaseState.HOLDER_DEAD, holder=None)
    if record.released:
        return LeaseStatus(state=LeaseState.RELEASED, holder=record.holder)
    # Not locked and never released: the holder died without releasing (the usual
    # case; flock dies with the process) or, still alive, lost its descriptor. Either
    # way nobody holds the lease, so it is not LIVE whatever is_same_process says.
    return LeaseStatus(state=LeaseState.HOLDER_DEAD, holder=record.holder)


def _status_of_locked(fd: int) -> LeaseStatus:
    for attempt in range(_PROBE_READ_ATTEMPTS):
        record = _read_record(fd)
        if record is not None:
            if record.released:  # the holder is between marking and unlocking
                return LeaseStatus(state=LeaseState.RELEASED, holder=record.holder)
            return LeaseStatus(state=LeaseState.LIVE, holder=record.holder)
        if attempt + 1 < _PROBE_READ_ATTEMPTS:
            time.sleep(_PROBE_RETRY_S)
    return LeaseStatus(state=LeaseState.LIVE, holder=None)
