"""Input files: how efold reads a file an operator names (a campaign, a catalog, a
registration, a suite directory's traces and probes, a transcript to import).

One rule, in ``read_input``: the name must be a **regular file** (a device, a FIFO, a
socket or a directory refuses with ``input_file_not_regular``, without reading, so that
``/dev/zero`` or a named pipe can never hang a command or fill its memory), no larger
than its kind's bound (``input_file_too_large``, refused from the size before a byte is
read, and again if the file grows while it is read: never more than ``limit + 1`` bytes
are read). A name that cannot be opened is ``input_file_unreadable``; a caller with a
code of its own for that (``campaign_not_found``...) maps it.

A symbolic link is followed (an operator may keep a campaign or a catalog where they
like); what is checked is what the name leads to, first with ``stat`` (so a device is
never opened), then the opened descriptor with ``fstat`` (so a name swapped in between
is caught). The open is ``O_NONBLOCK``: a FIFO swapped in after the ``stat`` opens at
once, and ``fstat`` refuses it. These are *inputs*, not trusted state: the private
files efold itself wrote are read by ``registry.files.read_private``, which refuses
links and foreign owners too.

The bounds, per kind (docs/reliability.md, "Input files"), are the ``*_LIMIT`` names.
"""

from __future__ import annotations

import os
import stat
from typing import Final

from efold.errors import Code, EfoldError

MIB: Final = 1024 * 1024
# A campaign file: roles, profiles and instructions (the largest bundled one is ~2 KiB).
CAMPAIGN_LIMIT: Final = 1 * MIB
# An operator catalog: prices of models (the bundled one is ~4 KiB).
CATALOG_LIMIT: Final = 1 * MIB
# registration.json: the parsed campaign plus the selected trace and probe ids.
REGISTRATION_LIMIT: Final = 16 * MIB
# A suite directory's trace file (a hard trace is ~1 MiB; tool results of 64 KiB each).
TRACE_LIMIT: Final = 64 * MIB
# A suite directory's probe file.
PROBES_LIMIT: Final = 8 * MIB
# A transcript given to ``corpus import`` (decoded, it takes a few times its size).
TRANSCRIPT_LIMIT: Final = 64 * MIB
# A boundary case's ``ef-boundary.yml``, and the cases root's ``boundary.lock``. (A
# case's session is a transcript: ``TRANSCRIPT_LIMIT``.)
SIDECAR_LIMIT: Final = 1 * MIB
LOCK_LIMIT: Final = 1 * MIB

_READ_FLAGS: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_CHUNK: Final = 1 << 20


class InputFileError(EfoldError):
    """An input file that is not a regular file, is larger than its bound, or cannot be
    read (``.code`` says which)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _refuse_unfit(st: os.stat_result, what: str, name: str, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(Code.INPUT_FILE_NOT_REGULAR,
                             f"{what} {name!r} is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise InputFileError(Code.INPUT_FILE_TOO_LARGE,
                             f"{what} {name!r} is {st.st_size} bytes, over its bound of "
                             f"{limit} bytes")


def read_bounded(fd: int, limit: int) -> bytes | None:
    """Everything left to read from ``fd`` up to EOF, or ``None`` as soon as more than
    ``limit`` bytes arrive (it never reads more than ``limit + 1``). OSError propagates;
    the caller maps both to its own code."""
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, min(_CHUNK, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None
    return b"".join(chunks)


def read_input(path: str | os.PathLike[str], *, what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (``what`` names it in a refusal: "campaign",
    "catalog"...), at most ``limit`` of them. Refuses with ``input_file_not_regular``,
    ``input_file_too_large`` or ``input_file_unreadable`` (``InputFileError``)."""
    name = os.fspath(path)
    try:
        _refuse_unfit(os.stat(name), what, name, limit)  # a device is never opened
        fd = os.open(name, _READ_FLAGS)
    except OSError as exc:
        raise InputFileError(Code.INPUT_FILE_UNREADABLE,
                             f"cannot read {what} {name!r}: {exc.strerror}") from exc
    try:
        _refuse_unfit(os.fstat(fd), what, name, limit)  # what was opened, not the name
        data = read_bounded(fd, limit)
    except OSError as exc:
        raise InputFileError(Code.INPUT_FILE_UNREADABLE,
                             f"cannot read {what} {name!r}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if data is None:
        raise InputFileError(Code.INPUT_FILE_TOO_LARGE,
                             f"{what} {name!r} grew past its bound of {limit} bytes")
    return data
