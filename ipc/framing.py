"""Frames on the IPC stream: length, body, MAC. Pure: no I/O, no event loop.

A frame is::

    length (4 bytes, big-endian, body length only) | body (msgpack) | tag (32 bytes)

where ``tag = HMAC-SHA256(key, length ‖ body)`` with the per-slot key. The declared
length is checked against the maximum frame size *before* any of the body is read, so a
hostile length can never make the reader allocate more than the maximum.

What the MAC does and does not stop: it rejects frames from anyone who does not hold
the slot key (a stray writer on an inherited descriptor, a frame from another slot, a
corrupted or spliced stream). It does not stop a same-user process that can read the
child's or the controller's memory (ptrace, /proc/PID/mem): such a process can read the
key. Replays of a genuine frame are caught by the sequence number, not by the MAC.
"""

from __future__ import annotations

import hmac
from typing import NoReturn

from efold.ipc.errors import IpcBadMac, IpcEof, IpcFrameTooLarge, IpcTruncatedFrame

HEADER_SIZE = 4
TAG_SIZE = 32
KEY_SIZE = 32
DEFAULT_MAX_FRAME = 1 << 20  # 1 MiB of body
_MAX_ENCODABLE = (1 << 32) - 1


def _tag(key: bytes, header: bytes, body: bytes) -> bytes:
    return hmac.digest(key, header + body, "sha256")


def seal(key: bytes, body: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """The complete frame carrying ``body``. Refuses a body above ``max_frame``: the
    peer would refuse it anyway, so sending it is a local bug."""
    if len(body) > max_frame or len(body) > _MAX_ENCODABLE:
        raise IpcFrameTooLarge(f"outgoing body of {len(body)} bytes")
    header = len(body).to_bytes(HEADER_SIZE, "big")
    return header + body + _tag(key, header, body)


class FrameParser:
    """Incremental frame reader. The I/O shell asks ``want()`` how many bytes may be read
    next, reads at most that many, and ``feed``s them; a complete, authenticated body
    comes back from ``feed``. Never asks for more than the current frame needs, so
    nothing past a frame is ever read (lockstep has no pipelining)."""

    def __init__(self, key: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if len(key) != KEY_SIZE:
            raise ValueError("the IPC key is 32 bytes")
        self._key = key
        self._max_frame = max_frame
        # Invariant: while `_header` is None we are reading the 4-byte header into
        # `_buf`; once it is set, `_buf` holds part of the body + tag, and
        # `_need == declared length + TAG_SIZE <= max_frame + TAG_SIZE`.
        self._header: bytes | None = None
        self._buf = bytearray()
        self._need = HEADER_SIZE

    def want(self) -> int:
        """Bytes still missing from the current frame part (header, then body + tag)."""
        return self._need - len(self._buf)

    def at_boundary(self) -> bool:
        return self._header is None and not self._buf

    def feed(self, data: bytes) -> bytes | None:
        """Add bytes (at most ``want()``); returns the body once a frame is complete."""
        if len(data) > self.want():
            raise ValueError("fed more than want()")
        if self._header is None:
            self._buf += data
            if len(self._buf) < HEADER_SIZE:
                return None
            declared = int.from_bytes(self._buf, "big")
            if declared > self._max_frame:
                raise IpcFrameTooLarge(f"declared body of {declared} bytes")
            self._header = bytes(self._buf)
            self._buf = bytearray()
            self._need = declared + TAG_SIZE
            return None
        if self._buf or len(data) < self._need:
            self._buf += data
            if len(self._buf) < self._need:
                return None
            rest = bytes(self._buf)
        else:
            rest = data  # the usual case: the whole body and tag in one read, no copy
        header = self._header
        self._header = None
        self._buf = bytearray()
        self._need = HEADER_SIZE
        body = rest[:-TAG_SIZE]
        if not hmac.compare_digest(rest[-TAG_SIZE:], _tag(self._key, header, body)):
            raise IpcBadMac()
        return body

    def end_of_stream(self) -> NoReturn:
        """The stream ended: a clean EOF at a frame boundary, a truncated frame otherwise."""
        if self.at_boundary():
            raise IpcEof()
        raise IpcTruncatedFrame("end of stream inside a frame")
