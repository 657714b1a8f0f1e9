"""Run directories: always new, never reused (no resume).

Layout of a run::

    <run>/.efold-lease           the writer lease (flock)
    <run>/journal.sqlite         the journal
    <run>/registration.json      the registration the run executes (copied, hashed)
    <run>/plan.json              the plan (content-free)
    <run>/authorization-consumed.json
    <run>/traces/<id>.jsonl      reader-safe traces for the prep children (private)
    <run>/checkpoints/<key>/     prep slot dirs; the pristine snapshot in snapshot/
    <run>/slots/<slot>/          probe slot dirs (restored copies)
    <run>/receipts/<slot>.json   one content-free receipt per visited slot
    <run>/results.json, summary.md, report.html
"""

from __future__ import annotations

import errno
import os
import secrets
import time
from pathlib import Path

from efold.controller.errors import ControllerError
from efold.errors import Code

DEFAULT_RUNS_ROOT = "efold-runs"


def claim_run_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (0700) exclusively: an existing path, even empty, refuses."""
    run = Path(path).absolute()
    if run.parent != run and not run.parent.exists():
        from efold.registry import make_private_dir

        make_private_dir(run.parent, parents=True)
    try:
        os.mkdir(run, 0o700)
    except FileExistsError as exc:
        raise ControllerError(Code.RUN_ROOT_EXISTS, "run directories are never reused") from exc
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise ControllerError(Code.PATH_REFUSED, "parent directory missing") from exc
        raise
    return run


def new_run_dir(runs_root: str | os.PathLike[str], campaign: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return claim_run_dir(Path(runs_root) / f"{campaign}-{stamp}-{secrets.token_hex(3)}")


def private_subdir(run: Path, *parts: str) -> Path:
    path = run.joinpath(*parts)
    path.mkdir(mode=0o700, parents=True, exist_ok=False)
    return path
