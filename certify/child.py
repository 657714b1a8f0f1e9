"""The certification child: ``python -I -m efold.certify.child FOLD OUT``.

Started by ``efold-controller certify`` through the contained runner
(``boundary.runner.run_contained``: its own session and process group, a minimal
environment, swept when it exits), in a private temporary directory ``OUT``. It loads
the fold (a built-in arm or an installed ``efold.folds`` entry point: the only place its
code runs) and builds, under ``OUT``:

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

import sys
from pathlib import Path

import msgspec

from efold.certify.continuation import TASKS, task_events
from efold.certify.endurance import OVERHEAD_TOKENS, fold_once, run_endurance, run_maximal
from efold.certify.memory import MEMORY_ID, memory_events
from efold.corpus.model import Event
from efold.errors import EfoldError
from efold.folds.checkpoint import Checkpoint
from efold.folds.fold import Fold, TracePrefix
from efold.folds.registry import get_fold
from efold.folds.snapshot import write_checkpoint


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


def _built(fold: Fold, trace_id: str, events: list[Event], out: Path, name: str) -> Snapshot:
    checkpoint, code, detail = fold_once(fold, TracePrefix(
        trace_id=trace_id, events=events, context_overhead_tokens=OVERHEAD_TOKENS))
    return _written(checkpoint, out, name, code, detail)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -I -m efold.certify.child FOLD OUT", file=sys.stderr)
        return 2
    name, out = argv[0], Path(argv[1])
    try:
        fold = get_fold(name)
    except EfoldError as exc:
        facts = FoldFacts(name=name, loaded=False, error_code=exc.code.value, error=exc.detail)
    else:
        snapshots = {"endurance-final": _written(run_endurance(fold, out), out, "endurance-final")}
        run_maximal(fold, out)
        snapshots["memory"] = _built(fold, MEMORY_ID, memory_events(), out, "memory")
        for task in TASKS:
            snapshots[f"continuation-{task.id}"] = _built(
                fold, f"certify-{task.id}", task_events(task), out, f"continuation-{task.id}")
        facts = FoldFacts(name=name, loaded=True, derives_from_source=declares_source_only(fold),
                          snapshots=snapshots)
    (out / "fold.json").write_bytes(msgspec.json.encode(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
