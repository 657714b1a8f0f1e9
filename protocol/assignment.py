"""What a child is told to do, and how it learns it: the key pipe.

The controller writes ``key (32 bytes) ‖ msgpack(Assignment)`` into a fresh pipe, closes
the write end and passes the read end to the child (``--key-fd``). The child reads it
once to EOF (``efold.worker.key_pipe``), closes it, and from then on trusts only what it
can verify: the assignment names the controller, the run and the digests the child must check before ``Ready``.

Invariant: the key never leaves this pipe and the two processes' memory. It is not in
the assignment struct (which may be logged or journaled), on argv, or in the
environment.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from efold.identity import ProcessIdentity
from efold.ipc.framing import KEY_SIZE
from efold.ipc.messages import PREP_PROTOCOL, PROBE_PROTOCOL, CacheKey, Digest, ProtocolName
from efold.protocol.tasks import Task

ASSIGNMENT_VERSION: Final = 1
# The pipe holds one small record; anything longer is refused unread past this bound.
MAX_KEY_PIPE_BYTES: Final = 64 * 1024

WorkerKind = Literal["prep", "probe"]
BodyName = Annotated[str, msgspec.Meta(pattern="^[a-z][a-z0-9_\\-]{0,63}$")]


class SnapshotRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A prepared snapshot a probe child restores: where it is and what it must hash to."""

    path: str
    digest: Digest


class Assignment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything a child needs before it says Hello. Built by the controller per launch."""

    version: int
    kind: WorkerKind
    body: BodyName  # which registered body runs (efold.worker.bodies)
    run_dir: str
    slot_dir: str  # private (0700) directory made for this launch; the only place it writes
    epoch: int
    slot: str
    controller: ProcessIdentity  # the child's parent; verified before Hello
    registration_digest: Digest
    plan_digest: Digest
    build_digest: Digest
    cache_key: CacheKey | None  # probe only
    snapshot: SnapshotRef | None  # probe only
    hello_timeout_ms: int  # longest wait for Welcome (Welcome then grants the deadlines)
    task: Task | None = None  # what the body does (efold.protocol.tasks); None: builtin bodies

    @property
    def protocol(self) -> ProtocolName:
        return PROBE_PROTOCOL if self.kind == "probe" else PREP_PROTOCOL


_ENCODER = msgspec.msgpack.Encoder()


def encode_key_pipe(key: bytes, assignment: Assignment) -> bytes:
    """The bytes the controller writes into the key pipe."""
    if len(key) != KEY_SIZE:
        raise ValueError("the IPC key is 32 bytes")
    data = key + _ENCODER.encode(assignment)
    if len(data) > MAX_KEY_PIPE_BYTES:
        raise ValueError("assignment too large for the key pipe")
    return data
