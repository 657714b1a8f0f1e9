"""The controller's side of one child's credential pipe: the only way a credential
reaches a child (``efold.worker.credential`` is the other side)."""

from __future__ import annotations

import os

from efold.controller.errors import ControllerError
from efold.errors import Code
from efold.worker.credential import credential_problem


class CredentialHandoff:
    """The controller's side of one child's credential pipe (``--credential-fd``).

    Invariant: the credential is written only after the child's ``Hello`` was accepted
    (``WorkerHandle.accept_hello``: the child verified its parent and the run lease, and
    its digests are the assignment's), and before ``Welcome``; it never touches argv,
    the environment, a file or the journal. Both ends are closed on every path, the
    write end once: after the write (``deliver``) or without it (``discard``: the
    child, if any, reads EOF)."""

    def __init__(self, credential: bytes) -> None:
        problem = credential_problem(credential)
        if problem is not None:
            raise ControllerError(Code.CAMPAIGN_INVALID, f"credential {problem}")
        self._credential: bytes | None = credential
        self.read_fd: int | None
        self._write_fd: int | None
        # Both O_CLOEXEC; pass_fds makes the read end inherit. Never blocks the loop: at
        # most 8 KiB into an empty pipe, all at once or a launch failure.
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self.delivered = False  # whether the credential was written (tests read it)

    def close_read_end(self) -> None:
        """After the spawn: the child holds its own copy."""
        if self.read_fd is not None:
            fd, self.read_fd = self.read_fd, None
            os.close(fd)

    def deliver(self) -> None:
        """Write the credential and close the write end (``launch_failed`` if it does not
        go in whole: the child is gone or stopped reading)."""
        fd, data = self._write_fd, self._credential
        if fd is None or data is None:
            return  # already delivered or discarded
        self._write_fd = self._credential = None
        try:
            written = os.write(fd, data)
        except OSError as exc:
            raise ControllerError(Code.LAUNCH_FAILED, f"credential pipe errno {exc.errno}") from exc
        finally:
            os.close(fd)
        if written != len(data):
            raise ControllerError(Code.LAUNCH_FAILED, "credential pipe full")
        self.delivered = True

    def discard(self) -> None:
        """Close whatever is still open without writing (idempotent)."""
        self._credential = None
        self.close_read_end()
        if self._write_fd is not None:
            fd, self._write_fd = self._write_fd, None
            os.close(fd)
