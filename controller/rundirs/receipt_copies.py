"""A run's receipt copies (``receipts/<slot>.json``) and restoring the ones that are gone.

A receipt is journaled first, its bytes with their digest, then its copy is published
(``controller.pilot.receipts``). A controller killed in between leaves a slot the journal
calls done with no copy. The slot is never run again (it may have paid: running it again
would pay twice), so the copy is restored from the journal instead: ``recover`` names it
(the run is not reconciled while a copy it could restore is missing), a continuation
refuses until then, and ``reap``, which holds the run's lease, publishes it, byte for byte
what the journal holds and only if those bytes still match the journaled digest. A copy
removed by hand is restored the same way.

Only what is certainly missing counts: a name that is absent from a ``receipts/`` that is
a real, readable directory. A copy that is there but damaged (unreadable, replaced, not
a file) is left as it is, for ``aggregate`` to report; so is every copy of a journal
written before receipts carried their bytes (version 3 and older).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from efold.digests import sha256_hex
from efold.errors import EfoldError
from efold.registry import publish_exclusive
from efold.registry.errors import RegistryError
from efold.registry.files import fsync_dir

RECEIPTS_DIR = "receipts"
_NAME_MAX = 255  # bytes of one path component (Linux)


def receipt_name(slot: str) -> str:
    return f"{slot}.json"


class LostCopy(msgspec.Struct, frozen=True):
    """A journaled receipt whose copy is missing and whose journaled bytes match its
    journaled digest: what ``restore_copies`` publishes."""

    slot: str
    body: bytes


def lost_copies(run_dir: str | os.PathLike[str],
                receipt_rows: Iterable[dict[str, Any]]) -> list[LostCopy]:
    """Of the journal's ``receipts`` rows, those whose copy is certainly missing (module
    docstring) and that the journal can restore exactly, in slot order."""
    directory = Path(run_dir) / RECEIPTS_DIR
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return []
    except OSError:
        return []
    lost = []
    for row in receipt_rows:
        body, name = row.get("body"), receipt_name(row["slot"])
        if not isinstance(body, bytes) or sha256_hex(body) != row["digest"] \
                or not _single_component(name):
            continue  # nothing to restore from, or not exactly, or to nowhere
        try:
            os.lstat(directory / name)
        except FileNotFoundError:
            lost.append(LostCopy(row["slot"], body))
        except OSError:
            continue  # not readable here: not known to be missing
    return sorted(lost, key=lambda copy: copy.slot)


def _single_component(name: str) -> bool:
    return "/" not in name and "\0" not in name and name not in (".", "..") \
        and len(os.fsencode(name)) <= _NAME_MAX


def restore_copies(run_dir: str | os.PathLike[str], lost: list[LostCopy]) -> list[str]:
    """Publish each lost copy (exclusive: a name taken meanwhile is never replaced) and
    make the names durable with one directory fsync, also when one fails (its refusal
    then names the slots restored before it); the slots restored."""
    directory = Path(run_dir) / RECEIPTS_DIR
    restored: list[str] = []
    try:
        for copy in lost:
            publish_exclusive(directory, receipt_name(copy.slot), copy.body, sync_dir=False)
            restored.append(copy.slot)
    except EfoldError as exc:
        if restored:
            raise RegistryError(exc.code, f"{exc.detail} (restored before it: "
                                f"{', '.join(restored)})") from exc
        raise
    finally:
        if restored:
            fsync_dir(directory)
    return restored
