"""The certification child: ``python -I -m efold.certify.child TARGET OUT``.

Started by ``efold-controller certify`` through the contained runner
(``boundary.runner.run_contained``: its own session and process group, a minimal
environment, swept when it exits), in a private temporary directory ``OUT``. ``TARGET``
is a ``Target`` (JSON): a built-in arm, an installed ``efold.folds`` entry point or an
external command, with the role's settings. It loads the fold (the only place its code
runs) and builds, under ``OUT``:

* the endurance cycles (``session.jsonl``, ``cycles.jsonl``) and the maximal source
  (``maximal.json``), by ``endurance``;
* checkpoint snapshots (``folds.snapshot``, each verified by the controller on read):
  ``endurance-final`` (the last endurance cycle's), ``memory`` (the 1,000-session
  source of ``memory``) and ``continuation-<task>`` (each ``continuation`` task);

and writes ``fold.json`` last: the fold's declaration and each snapshot's digest, or the
code the fold failed with. It decides nothing; the controller checks what it wrote.

Exit 0 when it wrote ``fold.json``; any other status means it did not finish.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from efold.certify.continuation import TASKS, task_events
from efold.certify.endurance import OVERHEAD_TOKENS, fold_once, run_endurance, run_maximal
from efold.certify.memory import MEMORY_ID, memory_events
from efold.corpus.model import Event
from efold.errors import EfoldError
from efold.folds.checkpoint import Checkpoint
from efold.folds.fold import Fold, TracePrefix
from efold.folds.registry import fold_for
from efold.folds.snapshot import write_checkpoint


class Target(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What to certify: the arm ``name`` (a built-in arm or an installed entry point),
    or, with ``command``, an external command named ``name`` (``timeout_seconds``,
    ``cwd`` and ``env`` as a campaign role gives them); ``settings`` reach every build."""

    name: str
    command: list[str] | None = None
    timeout_seconds: float | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    settings: dict[str, Any] | None = None


class Snapshot(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One checkpoint the child wrote (its snapshot digest), or why there is none."""

    digest: str | None = None
    error_code: str | None = None
    error: str | None = None


class FoldFacts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``fold.json``: what the child learnt of the fold."""

    name: str
    loaded: bool
    derives_from_source: bool = False  # the fold's own declaration
    error_code: str | None = None
    error: str | None = None
    snapshots: dict[str, Snapshot] = {}


def declares_source_only(fold: object) -> bool:
    """Whether a fold declares that it derives its output from the source events only
    (``derives_from_source = True``), never from ``TracePrefix.prior``."""
    return getattr(fold, "derives_from_source", False) is True


def _written(checkpoint: Checkpoint | None, out: Path, name: str,
             code: str | None = None, detail: str | None = None) -> Snapshot:
    if checkpoint is None:
        return Snapshot(error_code=code or "fold_plugin_failed", error=detail)
    try:
        return Snapshot(digest=write_checkpoint(checkpoint, out / name).digest)
    except EfoldError as exc:
        return Snapshot(error_code=exc.code.value, error=exc.detail)


def _built(fold: Fold, target: Target, trace_id: str, events: list[Event], out: Path,
           name: str) -> Snapshot:
    checkpoint, code, detail = fold_once(fold, TracePrefix(
        trace_id=trace_id, events=events, context_overhead_tokens=OVERHEAD_TOKENS,
        settings=dict(target.settings or {})))
    return _written(checkpoint, out, name, code, detail)


def load_fold(target: Target) -> Fold:
    """The fold ``target`` names; a command runs in this child's environment with the
    role's ``env`` added, as in a prep child."""
    if target.command is None:
        return fold_for(target.name)
    return fold_for(target.name, target.command, timeout_s=target.timeout_seconds,
                    env={**os.environ, **(target.env or {})}, cwd=target.cwd)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -I -m efold.certify.child TARGET OUT", file=sys.stderr)
        return 2
    target = msgspec.json.decode(Path(argv[0]).read_bytes(), type=Target)
    out = Path(argv[1])
    try:
        fold = load_fold(target)
    except EfoldError as exc:
        facts = FoldFacts(name=target.name, loaded=False, error_code=exc.code.value,
                          error=exc.detail)
    else:
        last = run_endurance(fold, out, settings=target.settings,
                             observable=target.command is None)
        snapshots = {"endurance-final": _written(last, out, "endurance-final")}
        run_maximal(fold, out, settings=target.settings)
        snapshots["memory"] = _built(fold, target, MEMORY_ID, memory_events(), out, "memory")
        for task in TASKS:
            snapshots[f"continuation-{task.id}"] = _built(
                fold, target, f"certify-{task.id}", task_events(task), out,
                f"continuation-{task.id}")
        facts = FoldFacts(name=target.name, loaded=True,
                          derives_from_source=declares_source_only(fold), snapshots=snapshots)
    (out / "fold.json").write_bytes(msgspec.json.encode(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
