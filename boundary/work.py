"""A boundary run's work record: what the child did, handed to the controller as a file.

The probe child of a boundary slot (``worker.boundary_body``) writes ``work.json`` into
its private slot directory when its agent loop ends: the action log, the recall outputs
(the texts the recall oracles read), how the loop ended, its requests and its token
estimates. Its ``Terminal`` names the file's sha256. The controller reads the file only
after the child has exited and been contained (``read_work``), refusing with
``boundary_work_invalid`` a file that is absent, not a regular file, larger than
``MAX_WORK_BYTES``, different from the digest the terminal named, or not a record.

Why a file: edit arguments carry file contents, so an action log can outgrow an IPC
frame; the digest in the terminal binds the file to the child's last word all the same.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

import msgspec

from efold.boundary.actions import ActionRecord
from efold.boundary.agent_loop import AgentRun
from efold.boundary.errors import BoundaryError
from efold.boundary.oracles import RecallOutput
from efold.digests import sha256_hex
from efold.errors import Code
from efold.registry.files import write_all

WORK_NAME: Final = "work.json"
WORK_VERSION: Final = 1
MAX_WORK_BYTES: Final = 32 * 1024 * 1024


class WorkRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    actions: list[ActionRecord]
    recall_outputs: list[RecallOutput]
    ending: str
    requests: int
    input_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        """Tokens per task: every token the agent spent after the fold (estimates)."""
        return self.input_tokens + self.output_tokens


def work_record(run: AgentRun) -> WorkRecord:
    return WorkRecord(version=WORK_VERSION, actions=list(run.actions),
                      recall_outputs=list(run.recall_outputs), ending=run.ending,
                      requests=run.requests, input_tokens=run.input_tokens,
                      output_tokens=run.output_tokens)


def write_work(slot_dir: Path, record: WorkRecord) -> str:
    """Write ``slot_dir/work.json`` whole (created new, fsynced); its sha256."""
    data = msgspec.json.encode(record)
    fd = os.open(Path(slot_dir) / WORK_NAME,
                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return sha256_hex(data)


def _invalid(detail: str) -> BoundaryError:
    return BoundaryError(Code.BOUNDARY_WORK_INVALID, detail)


def read_work(slot_dir: Path, sha256: str | None) -> WorkRecord:
    """The record the child wrote, checked against the digest its terminal named
    (module docstring)."""
    if sha256 is None:
        raise _invalid("the child's terminal names no work record")
    try:
        fd = os.open(Path(slot_dir) / WORK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise _invalid(f"{WORK_NAME}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _invalid(f"{WORK_NAME} is not a regular file")
        if info.st_size > MAX_WORK_BYTES:
            raise _invalid(f"{WORK_NAME} is larger than {MAX_WORK_BYTES} bytes")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_WORK_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_WORK_BYTES:
        raise _invalid(f"{WORK_NAME} is larger than {MAX_WORK_BYTES} bytes")
    if sha256_hex(data) != sha256:
        raise _invalid(f"{WORK_NAME} differs from the digest the child's terminal named")
    try:
        record = msgspec.json.decode(data, type=WorkRecord)
    except msgspec.DecodeError as exc:
        raise _invalid(f"{WORK_NAME} is not a work record: {exc}") from exc
    if record.version != WORK_VERSION:
        raise _invalid(f"{WORK_NAME}: unknown version {record.version}")
    return record
