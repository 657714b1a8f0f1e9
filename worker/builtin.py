"""The built-in bodies: the smallest real work that takes the protocol end to end.

They exist so that launch, handshake, snapshot verification, ``Terminal``/``Prepared``
and ``DoneAck`` run for real before the reader and the fold preparation are plugged in
(``efold.worker.bodies`` registers them as ``builtin``). They make no model request.

* ``BuiltinPrep`` writes ``SNAPSHOT_FILE`` (a few deterministic bytes naming the slot)
  into its private slot directory and reports its digest and size.
* ``BuiltinProbe`` reads the assigned snapshot (regular file, no symlink, size-bounded),
  checks its digest, restores it into its own slot directory, re-reads the copy and
  sends that digest as the arrival digest; it then answers ``UNKNOWN``. Its witness is
  sha256 over a domain tag and the arrival digest.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Final

from efold.errors import Code
from efold.ipc.messages import MeterReading, Prepared, Terminal, TerminalStatus, Welcome
from efold.protocol.assignment import Assignment
from efold.registry.files import read_to_eof, write_all
from efold.worker.errors import WorkerError
from efold.worker.session import ProbeSession

SNAPSHOT_FILE: Final = "snapshot.bin"
RESTORED_FILE: Final = "snapshot.restored"
MAX_SNAPSHOT_BYTES: Final = 64 * 1024 * 1024  # the preflight tree limit per file
BUILTIN_ANSWER: Final = "UNKNOWN"
_WITNESS_DOMAIN: Final = b"efold-builtin-witness-v1\0"


def _read_private_file(path: str, limit: int) -> bytes:
    """Bytes of a regular file, refusing symlinks, extra links and oversized files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, f"open errno {exc.errno}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > limit:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, "not a single-link regular file")
        data = read_to_eof(fd, limit)
        if data is None:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, "snapshot grew past the limit")
        return data
    finally:
        os.close(fd)


def _write_new_file(path: str, data: bytes) -> None:
    """Create ``path`` exclusively (0600), write ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


class BuiltinProbe:
    """Probe skeleton: verified restore, then an answer without any model request."""

    def __init__(self) -> None:
        self._arrival: str | None = None

    def restore(self, assignment: Assignment) -> str:
        ref = assignment.snapshot
        if ref is None:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, "no snapshot assigned")
        data = _read_private_file(ref.path, MAX_SNAPSHOT_BYTES)
        if hashlib.sha256(data).hexdigest() != ref.digest:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, "snapshot digest differs")
        restored = os.path.join(assignment.slot_dir, RESTORED_FILE)
        try:
            _write_new_file(restored, data)
        except OSError as exc:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, f"restore errno {exc.errno}") from exc
        arrival = hashlib.sha256(_read_private_file(restored, MAX_SNAPSHOT_BYTES)).hexdigest()
        if arrival != ref.digest:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, "restored copy differs")
        self._arrival = arrival
        return arrival

    def run(self, session: ProbeSession) -> Terminal:
        if self._arrival is None:
            raise WorkerError(Code.WORKER_SNAPSHOT_INVALID, "run before restore")
        witness = hashlib.sha256(_WITNESS_DOMAIN + self._arrival.encode("ascii")).hexdigest()
        return Terminal(
            status=TerminalStatus.ANSWERED,
            code=None,
            answer=BUILTIN_ANSWER,
            meter=MeterReading(calls=0, bytes=0),
            witness=witness,
        )


class BuiltinPrep:
    """Prep skeleton: one small deterministic snapshot file in the slot directory."""

    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        data = f"efold builtin snapshot v1\nslot {assignment.slot}\n".encode("ascii")
        path = os.path.join(assignment.slot_dir, SNAPSHOT_FILE)
        try:
            _write_new_file(path, data)
        except OSError as exc:
            raise WorkerError(Code.WORKER_BODY_FAILED, f"write errno {exc.errno}") from exc
        return Prepared(
            snapshot_digest=hashlib.sha256(data).hexdigest(),
            files=1,
            bytes=len(data),
            rejected={},
        )
