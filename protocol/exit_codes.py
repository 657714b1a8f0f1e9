"""The child's exit statuses: one fixed status per fixed code.

A child reports nothing on stderr (its stdio is /dev/null); its exit status is the one
thing the controller learns when it fails before or outside the lockstep channel. The
table is closed: a code not listed exits as ``worker_body_failed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from efold.errors import Code

EXIT_OK: Final = 0

EXIT_STATUS: Final[Mapping[Code, int]] = {
    Code.WORKER_USAGE: 64,
    Code.WORKER_KEY_INVALID: 65,
    Code.WORKER_PARENT_UNVERIFIED: 66,
    Code.WORKER_LEASE_NOT_LIVE: 67,
    Code.WORKER_DIGEST_MISMATCH: 68,
    Code.WORKER_SNAPSHOT_INVALID: 69,
    Code.WORKER_STOPPED: 70,
    Code.WORKER_BODY_FAILED: 71,
    Code.FOLD_ISOLATION_UNAVAILABLE: 72,
    # A prep child's summary or extraction request its own guard refused before any hold
    # (U_k over the route's envelope): the controller never saw it, so the status says.
    Code.NOT_ADMITTED_INPUT_ENVELOPE: 73,
    Code.IPC_EOF: 80,
    Code.IPC_TRUNCATED_FRAME: 81,
    Code.IPC_FRAME_TOO_LARGE: 82,
    Code.IPC_BAD_MAC: 83,
    Code.IPC_BAD_MESSAGE: 84,
    Code.IPC_BINDING_MISMATCH: 85,
    Code.IPC_SEQ_MISMATCH: 86,
    Code.IPC_OUT_OF_ORDER: 87,
    Code.IPC_TIMEOUT: 88,
    Code.IPC_CANCELLED: 89,
    Code.IPC_POISONED: 90,
}

_BY_STATUS: Final[Mapping[int, Code]] = {v: k for k, v in EXIT_STATUS.items()}


def exit_status_for(code: Code) -> int:
    return EXIT_STATUS.get(code, EXIT_STATUS[Code.WORKER_BODY_FAILED])


def code_for_exit_status(status: int) -> Code | None:
    """The fixed code a child's exit status stands for; None for 0, a signal death
    (negative status) or a status outside the table (e.g. the interpreter's own 1)."""
    return _BY_STATUS.get(status)
