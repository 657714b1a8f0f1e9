"""The prep child isolates itself before any fold code runs (``efold.isolation``).

Called by the prep body first thing after ``Welcome``, before the fold is pinned,
loaded or built (an entry point's module runs code at import), so the fold, every
process it starts (an external command, a compaction proxy) and anything those start
inherit both restrictions:

- **Writes** only beneath the slot directory (``Assignment.slot_dir``: the snapshot,
  ``fold-data/`` of a proxy, the failure file) and its private temporary directory,
  ``tmp/`` in it: ``TMPDIR`` is always replaced by it (an inherited ``TMPDIR`` is shared
  with other processes, e.g. holds a preflight's own run directory). The role's ``cwd``
  is where a command starts, not a writable root. ``tmp/`` is emptied after the build so
  the tree check sees only what the fold kept.
- **Network**: the loopback-only namespace, unless the task names a summariser route:
  that child sends summary requests itself (through the guard), so its network stays
  the host's and its ``Isolation`` says why.

When the task requires isolation (the campaign's ``isolation = "required"``), a child
without both refuses here with ``fold_isolation_unavailable``, naming what is missing.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Final

from efold.errors import Code
from efold.isolation import Isolation, isolate
from efold.protocol.tasks import PrepTask
from efold.worker.errors import WorkerError

PRIVATE_TMP: Final = "tmp"
SENDS_REASON: Final = "the prep child sends to its summariser route"


def private_tmp(slot_dir: str) -> Path:
    """The slot's private temporary directory, made fresh (0700), and ``TMPDIR`` (and
    ``tempfile``'s cached default) pointed at it."""
    path = Path(slot_dir) / PRIVATE_TMP
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # a link or a file: not ours
            raise WorkerError(Code.WORKER_USAGE, f"{PRIVATE_TMP} in the slot is not a "
                              "directory") from None
    except OSError as exc:
        raise WorkerError(Code.WORKER_USAGE, f"cannot make the slot's {PRIVATE_TMP}: "
                          f"{exc.strerror}") from exc
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = None  # recomputed from TMPDIR at next use
    return path


def isolate_prep(task: PrepTask, slot_dir: str) -> Isolation:
    """Isolate this prep child for its fold (module docstring); refuses with
    ``fold_isolation_unavailable`` when the task requires isolation it cannot have."""
    private_tmp(slot_dir)
    sends = task.summariser is not None
    got = isolate([slot_dir], network=not sends,
                  network_reason=SENDS_REASON if sends else None)
    if task.isolation_required and not got.complete:
        raise WorkerError(Code.FOLD_ISOLATION_UNAVAILABLE, "; ".join(got.missing()))
    return got


def empty_private_tmp(slot_dir: str) -> None:
    """Remove what the fold left in its temporary directory (best effort: what cannot
    be removed stays for the tree check to judge)."""
    shutil.rmtree(Path(slot_dir) / PRIVATE_TMP, ignore_errors=True)
