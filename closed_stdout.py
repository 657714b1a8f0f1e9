"""A closed standard output ends the output, never the command.

``efold-controller pilot ... | head -1`` closes the pipe after the first line. The next
write would raise ``BrokenPipeError``, and click answers that by exiting 1 without a
word, in the middle of whatever the command was doing: a run stopped between two
slots, with nothing said. Every command writes its results to files first and its
output is a courtesy, so once standard output is gone it is dropped (file descriptor 1
points at ``/dev/null``: nothing else dies of it either), the command goes on and ends
as it would have, and one line on standard error says the output stopped. A standard
stream closed before the command started (``>&-``, ``2>&-``) is ``/dev/null`` from the
start: the operator asked for no output there, and the command runs as it would.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

__all__ = ["tolerate_closed_stdout"]


class _ClosedPipeTolerant:
    """``stream`` until a write or flush finds its reader gone; then nothing."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._close()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._close()

    def _close(self) -> None:
        self._gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        try:
            sys.stderr.write("efold: standard output was closed; the rest of it is "
                             "dropped (the command goes on)\n")
        except OSError:
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def tolerate_closed_stdout() -> None:
    """Make this process's standard output drop what it cannot deliver (module
    docstring), and give a standard stream that was closed before the command started
    (``>&-``, ``2>&-``: Python then has None for it) ``/dev/null``, so that nothing
    writing to it dies of it. Once per process; a second call changes nothing."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:
            setattr(sys, name, _null_stream(fd))
    if not isinstance(sys.stdout, _ClosedPipeTolerant):
        sys.stdout = _ClosedPipeTolerant(sys.stdout)


def _null_stream(fd: int) -> TextIO:
    """A text stream on descriptor ``fd``, which is now ``/dev/null`` (it was closed)."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:  # a lower descriptor was free too
        os.dup2(null, fd)
        os.close(null)
    return open(fd, "w", encoding="utf-8", closefd=False)
