"""The child's end of the key pipe: read it once, verify the assignment's shape.

The format is ``efold.protocol.assignment``: ``key (32 bytes) ‖ msgpack(Assignment)``.
"""

from __future__ import annotations

import os
from typing import Final

import msgspec

from efold.errors import Code
from efold.ipc.framing import KEY_SIZE
from efold.protocol.assignment import ASSIGNMENT_VERSION, MAX_KEY_PIPE_BYTES, Assignment
from efold.registry.files import read_to_eof
from efold.worker.errors import WorkerError

_DECODER: Final = msgspec.msgpack.Decoder(Assignment)


def read_key_pipe(fd: int) -> tuple[bytes, Assignment]:
    """Read the key pipe once to EOF, close it, and return (key, assignment).

    Refuses (``worker_key_invalid``) a pipe that cannot be read, is longer than
    ``MAX_KEY_PIPE_BYTES``, or does not hold a key and a valid assignment whose
    probe-only fields are present exactly for a probe.
    """
    try:
        data = read_to_eof(fd, MAX_KEY_PIPE_BYTES)
    except OSError as exc:
        raise WorkerError(Code.WORKER_KEY_INVALID, f"key pipe read errno {exc.errno}") from exc
    finally:
        try:
            os.close(fd)
        except OSError:
            pass  # already gone: nothing more to read either way
    if data is None:
        raise WorkerError(Code.WORKER_KEY_INVALID, "key pipe too long")
    if len(data) <= KEY_SIZE:
        raise WorkerError(Code.WORKER_KEY_INVALID, "key pipe too short")
    key, raw = data[:KEY_SIZE], data[KEY_SIZE:]
    try:
        assignment = _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise WorkerError(Code.WORKER_KEY_INVALID, "assignment does not decode") from exc
    if assignment.version != ASSIGNMENT_VERSION:
        raise WorkerError(Code.WORKER_KEY_INVALID, "unknown assignment version")
    probe = assignment.kind == "probe"
    if probe != (assignment.cache_key is not None) or probe != (assignment.snapshot is not None):
        raise WorkerError(Code.WORKER_KEY_INVALID, "probe-only fields do not match the kind")
    return key, assignment
