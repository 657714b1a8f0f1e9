"""A run's receipt copies (``receipts/<slot>.json``) and restoring the ones a crash lost.

A receipt is journaled first, its bytes with their digest, then its copy is published
(``controller.pilot.receipts``). A controller killed in between leaves a slot the journal
calls done with no copy. The slot is never run again (it may have paid: running it again
would pay twice), so the copy is restored from the journal instead: ``recover`` names it
(the run is not reconciled while a copy it could restore is missing) and ``reap``, which
holds the run's lease, publishes it, byte for byte what the journal holds and only if
those bytes still match the journaled digest.

A journal written before receipts carried their bytes (version 3 and older) cannot
restore anything: its missing copies stay what ``aggregate`` reports as damage.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from efold.digests import sha256_hex
from efold.registry import publish_exclusive
from efold.registry.files import fsync_dir

RECEIPTS_DIR = "receipts"


def receipt_name(slot: str) -> str:
    return f"{slot}.json"


class LostCopy(msgspec.Struct, frozen=True):
    """A journaled receipt whose copy is absent and whose journaled bytes match its
    journaled digest: what ``restore_copies`` publishes."""

    slot: str
    body: bytes


def lost_copies(run_dir: str | os.PathLike[str],
                receipt_rows: Iterable[dict[str, Any]]) -> list[LostCopy]:
    """Of the journal's ``receipts`` rows, those whose copy is absent (no entry of any
    kind at its name) and that the journal can restore, in slot order."""
    directory = Path(run_dir) / RECEIPTS_DIR
    lost = []
    for row in receipt_rows:
        body = row.get("body")
        if not isinstance(body, bytes) or sha256_hex(body) != row["digest"]:
            continue  # nothing to restore from (an older journal), or not exactly
        if not os.path.lexists(directory / receipt_name(row["slot"])):
            lost.append(LostCopy(row["slot"], body))
    return sorted(lost, key=lambda copy: copy.slot)


def restore_copies(run_dir: str | os.PathLike[str], lost: list[LostCopy]) -> list[str]:
    """Publish each lost copy (exclusive: a name taken meanwhile is never replaced) and
    make the names durable with one directory fsync; the slots restored."""
    if not lost:
        return []
    directory = Path(run_dir) / RECEIPTS_DIR
    for copy in lost:
        publish_exclusive(directory, receipt_name(copy.slot), copy.body, sync_dir=False)
    fsync_dir(directory)
    return [copy.slot for copy in lost]
