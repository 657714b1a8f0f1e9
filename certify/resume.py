"""The handoff simulator: ``python -I -m efold.certify.resume SNAPSHOT DIGEST WORKSPACE``.

A fresh process, started contained by ``certify``. It receives only a fold's checkpoint
(the snapshot, verified against DIGEST) and the workspace to change. It finds the edit
plan the way a resuming agent must: a ``CERT_TASK_V1`` line visible in the checkpoint,
or else behind a ``[record <id>]`` the checkpoint cites, expanded through the fold's own
lookup tool (``history_get``, every page). Newest citation first. It checks the plan's
sha256, then applies each operation exactly (``replace``: the old text occurs exactly
once; ``write``: a new file), inside the workspace only. Whatever it cannot find or
apply exactly, it refuses: exit 3 with the reason on stderr, nothing invented. On
success it writes ``resume.json`` beside the workspace (``ResumeClaim``) and exits 0.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import sys
from pathlib import Path

import msgspec

from efold.certify.continuation import PLAN_PREFIX, ResumeClaim
from efold.certify.reading import whole_record
from efold.errors import EfoldError
from efold.folds.checkpoint import CITATION_PATTERN, visible_text
from efold.folds.meter import Meter
from efold.folds.snapshot import RestoredCheckpoint, read_checkpoint


class Unavailable(Exception):
    """The plan, or one of its operations, is not available exactly."""


def _plan_in(text: str) -> str | None:
    return next((line for line in text.splitlines() if line.startswith(PLAN_PREFIX + " ")), None)


def _expand(restored: RestoredCheckpoint, record_id: str) -> str | None:
    tool = restored.lookup_tool(Meter(call_budget=64, byte_budget=1 << 24))
    return None if tool is None else whole_record(tool, record_id)


def find_plan(restored: RestoredCheckpoint) -> tuple[str, str | None, str]:
    """(how it was found, the expanded address or None, the plan line)."""
    text = visible_text(restored.checkpoint.messages)
    line = _plan_in(text)
    if line is not None:
        return "context", None, line
    for address in reversed(dict.fromkeys(CITATION_PATTERN.findall(text))):
        expanded = _expand(restored, address)
        if expanded is not None and (line := _plan_in(expanded)) is not None:
            return "expansion", address, line
    raise Unavailable("no plan is visible and no cited record expands to one")


def decode_plan(line: str) -> list[dict[str, str]]:
    parts = line.split(" ")
    if len(parts) != 4:
        raise Unavailable("the plan line is not whole")
    try:
        body = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Unavailable("the plan does not decode") from exc
    if hashlib.sha256(body).hexdigest() != parts[2]:
        raise Unavailable("the plan does not match its sha256")
    operations = json.loads(body)
    if not isinstance(operations, list):
        raise Unavailable("the plan holds no operation list")
    return operations


def _inside(workspace: Path, name: object) -> Path:
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/"):
        raise Unavailable(f"operation path {name!r} is not inside the workspace")
    return workspace / name


def apply(workspace: Path, operations: list[dict[str, str]]) -> None:
    for operation in operations:
        path = _inside(workspace, operation.get("path"))
        if operation.get("op") == "write" and isinstance(operation.get("content"), str):
            if path.exists():
                raise Unavailable(f"{operation['path']} exists already")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(operation["content"], encoding="utf-8")
        elif operation.get("op") == "replace" and isinstance(operation.get("old"), str) \
                and isinstance(operation.get("new"), str):
            text = path.read_text(encoding="utf-8") if path.is_file() else ""
            if text.count(operation["old"]) != 1:
                raise Unavailable(f"the text to replace in {operation['path']} is not there once")
            path.write_text(text.replace(operation["old"], operation["new"]), encoding="utf-8")
        else:
            raise Unavailable("an operation is not one this simulator knows exactly")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -I -m efold.certify.resume SNAPSHOT DIGEST WORKSPACE", file=sys.stderr)
        return 2
    snapshot, digest, workspace = Path(argv[0]), argv[1], Path(argv[2])
    try:
        restored = read_checkpoint(snapshot, expected_digest=digest)
        found_via, address, line = find_plan(restored)
        operations = decode_plan(line)
        apply(workspace, operations)
    except (Unavailable, EfoldError) as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return 3
    claim = ResumeClaim(found_via=found_via, address=address,
                        address_resolved=address is not None, operations=len(operations))
    (workspace.parent / "resume.json").write_bytes(msgspec.json.encode(claim))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
