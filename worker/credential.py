"""The child's end of the credential pipe (``--credential-fd K``): a provider credential.

Invariant: the controller writes the credential only after it accepted this child's
``Hello`` (the child had verified its parent and the run lease, and its digests were the
assignment's), then closes its end; the credential never touches argv, the environment,
a file or the journal. Here it is read once from the inherited descriptor, checked, and
kept in this process's memory only: nothing in this module writes it anywhere.

A body gets at it through ``credential()`` (or ``current().read()``): ``entry.run``
installs the pipe for the child's whole life (``inherited``); the value is the
credential, or None when the launch carried none. The read blocks until the controller
has written and closed its end, which it does before ``Welcome``: by the time a body
runs, the bytes are there.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from efold.errors import Code
from efold.registry.files import read_to_eof
from efold.worker.errors import WorkerError

MAX_CREDENTIAL_BYTES: Final = 8 * 1024
_FORBIDDEN: Final = frozenset(b"\0\r\n")


def credential_problem(data: bytes) -> str | None:
    """Why ``data`` is not an acceptable credential (None: it is). Shared with the
    controller, which refuses the same credentials before any launch."""
    if not data:
        return "is empty"
    if len(data) > MAX_CREDENTIAL_BYTES:
        return "is longer than 8 KiB"
    if not data.isascii():
        return "is not ASCII"
    if _FORBIDDEN.intersection(data):
        return "holds NUL, CR or LF"
    return None


class CredentialPipe:
    """The credential pipe of this child; ``fd=None``: the launch carried none."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._value: str | None = None
        self._error: WorkerError | None = None

    def read(self) -> str | None:
        """The credential (None without a pipe). The first call reads to EOF and closes
        the descriptor; later calls return the same value, or raise the same refusal
        (``worker_key_invalid``: unreadable, empty, too long, or not a valid credential)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self._value = self._decode(fd)
            except WorkerError as exc:
                self._error = exc
        if self._error is not None:
            raise self._error
        return self._value

    def close(self) -> None:
        """Close the descriptor if it was never read (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            _close_quietly(fd)

    @staticmethod
    def _decode(fd: int) -> str:
        try:
            data = read_to_eof(fd, MAX_CREDENTIAL_BYTES)
        except OSError as exc:
            raise WorkerError(Code.WORKER_KEY_INVALID, f"credential read errno {exc.errno}") from exc
        finally:
            _close_quietly(fd)
        if data is None:
            raise WorkerError(Code.WORKER_KEY_INVALID, "credential is longer than 8 KiB")
        problem = credential_problem(data)  # empty: the controller closed without writing
        if problem is not None:
            raise WorkerError(Code.WORKER_KEY_INVALID, f"credential {problem}")
        return data.decode("ascii")


_NONE: Final = CredentialPipe(None)
_current: CredentialPipe = _NONE


def current() -> CredentialPipe:
    """This child's credential pipe (one whose ``read()`` is None outside ``inherited``)."""
    return _current


def credential() -> str | None:
    """This child's credential: ``current().read()`` (None when the launch carried none;
    ``worker_key_invalid`` when the pipe held no valid credential)."""
    return _current.read()


@contextmanager
def inherited(fd: int | None) -> Iterator[CredentialPipe]:
    """Take over the inherited credential descriptor ``fd`` for the block: at once not
    inheritable (no grandchild gets it) and a pipe (``worker_usage`` otherwise); it is
    ``current()`` inside the block and closed, read or not, when the block ends."""
    global _current
    if fd is not None:
        try:
            os.set_inheritable(fd, False)
            is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
        except OSError as exc:
            raise WorkerError(Code.WORKER_USAGE, f"credential fd errno {exc.errno}") from exc
        if not is_pipe:
            _close_quietly(fd)
            raise WorkerError(Code.WORKER_USAGE, "credential fd is not a pipe")
    pipe = CredentialPipe(fd)
    _current = pipe
    try:
        yield pipe
    finally:
        pipe.close()
        _current = _NONE


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass  # already gone: nothing more to read either way
