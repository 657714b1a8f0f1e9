"""The run's plain-text log, ``<run>/controller.log``: what the controller did, one line
per event, for an operator who reads a run afterwards (a CI job, a remote machine).

A line is ``<UTC time> <event> key=value ...``, e.g.
``2025-05-01T12:00:03.412Z slot slot=s0007 role=native status=completed ...``.

Invariant: content-free, like the receipts it summarises: times, event words, ids,
fixed codes and numbers only; never a prompt, an answer, a credential or a path (the
run directory is where the file is). Every value is reduced to ``_VALUE`` characters,
so nothing else can reach the file even by mistake.

Invariant: created only once the run is open (``RunLog.open``, at the run's first
progress event): until its authorization is consumed the run root must hold nothing but
the lease and the journal (``registry.burn``), so earlier lines wait in memory, and a
run refused before it opened leaves no log (its refusal is on stderr).

Invariant: owner-only (0600), created exclusively and never through a link; each line
is one ``write`` on an append-only descriptor, so a controller that dies leaves every
line before its death. The log is not a record: the journal and the receipts are. A
log that cannot be created or written therefore never stops a run: it stops, and says
why once (``failure``, reported as ``run_log_failed``).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Final

LOG_NAME: Final = "controller.log"
_FLAGS: Final = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
                 | os.O_CLOEXEC)
# What a value may hold: the characters of an opaque id (``protocol.records.OPAQUE_ID``:
# ids, checkpoint keys), which fixed codes and numbers use too; no slash, no space.
_VALUE: Final = re.compile(r"[^A-Za-z0-9._:#+-]")
_MAX_VALUE: Final = 200

LogValue = str | int | float | bool | None


def utc_stamp(now: float) -> str:
    """``now`` (unix seconds) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    whole = int(now)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + \
        f".{int((now - whole) * 1000):03d}Z"


def _value(value: LogValue) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return _VALUE.sub("?", str(value))[:_MAX_VALUE] or "-"


class RunLog:
    """The log of one run. Owned by the command that runs it (the single writer)."""

    def __init__(self, run: Path) -> None:
        self.path = run / LOG_NAME
        self._fd: int | None = None
        self._pending: list[bytes] | None = []  # None once opened (or given up)
        # Invariant: set once, by the first failure; nothing is written after it.
        self.failure: str | None = None

    def open(self) -> None:
        """Create the file (new, 0600, not through a link) and write what waited. Once;
        a failure is kept in ``failure``, never raised."""
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        try:
            fd = os.open(self.path, _FLAGS, 0o600)
        except OSError as exc:
            self.failure = f"{LOG_NAME}: {exc.strerror or exc.errno}"
            return
        self._fd = fd
        try:
            os.fchmod(fd, 0o600)  # exact mode whatever the umask
        except OSError as exc:
            self._fail(exc)
            return
        for data in pending:
            self._write(data)

    def write(self, event: str, **fields: LogValue) -> None:
        """One line: the time, ``event``, then ``fields`` in the order given."""
        parts = [utc_stamp(time.time()), _value(event)]
        parts += [f"{key}={_value(value)}" for key, value in fields.items()]
        data = (" ".join(parts) + "\n").encode()
        if self._pending is not None:
            self._pending.append(data)
        else:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            return
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.failure = f"{LOG_NAME}: {exc.strerror or exc.errno}"
        self.close()

    def close(self) -> None:
        """Close the file; lines still waiting (the run never opened) are dropped."""
        self._pending = None
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
