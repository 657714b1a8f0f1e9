"""``certify(FOLD)``: run the certification children contained, then check what they wrote.

The fold's code runs only in the fold child (``certify.child``); each continuation task
resumes in a fresh resume child (``certify.resume``) from the fold's checkpoint alone.
Both are started by the contained runner (``boundary.runner.run_contained``: their own
session and process group, a minimal environment, nothing left alive when they exit or
time out) in a private temporary directory removed afterwards. This process never
imports the fold; it reads only files, snapshots verified against their digests and
the lookup tool efold itself serves over a fold's retained store. A built-in arm or an
installed entry point may be certified; the name is resolved without loading a plugin.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Final

import msgspec

from efold.boundary.runner import run_contained
from efold.certify.checks import check_endurance, check_maximal, read_bounded
from efold.certify.child import FoldFacts, Snapshot, Target
from efold.certify.continuation import TASKS, ResumeClaim, Task, TaskResult, score, write_files
from efold.certify.fixture import endurance_events
from efold.certify.memory import MemoryReport, check_memory
from efold.certify.report import REPORT_FORMAT, CertificationReport, ContinuationReport
from efold.errors import Code, EfoldError
from efold.folds.errors import FoldError
from efold.folds.registry import BUILTIN_ARMS, makes_opaque, plugin_arms
from efold.folds.snapshot import RestoredCheckpoint, read_checkpoint

DEFAULT_TIMEOUT_S: Final = 900.0
RESUME_TIMEOUT_S: Final = 120.0


class CertifyError(EfoldError):
    """The certification could not be made (a child did not finish, or its files do not
    read back); no verdict on the fold."""


def fold_kind(target: Target) -> str:
    """``external command``, ``built-in arm`` or ``installed entry point``;
    ``fold_unknown`` otherwise, and ``certify_not_applicable`` for a provider-compaction
    arm, whose summary is opaque provider items that no check can read."""
    name = target.name
    if target.command is not None:
        return "external command"
    if makes_opaque(name):
        raise CertifyError(Code.CERTIFY_NOT_APPLICABLE,
                           f"{name} keeps its summary as opaque provider items: certification "
                           "reads what a reader is shown, and this fold shows none of it")
    if name in BUILTIN_ARMS:
        return "built-in arm"
    if name in plugin_arms()[0]:
        return "installed entry point"
    raise FoldError(Code.FOLD_UNKNOWN, f"no built-in arm or installed entry point named {name!r}")


def _facts(out: Path) -> FoldFacts:
    try:
        return msgspec.json.decode(read_bounded(out / "fold.json"), type=FoldFacts)
    except msgspec.DecodeError as exc:
        raise CertifyError(Code.CERTIFY_SESSION_INVALID, f"fold.json: {exc}") from exc


def _restored(out: Path, name: str, snapshot: Snapshot | None) -> RestoredCheckpoint | None:
    if snapshot is None or snapshot.digest is None:
        return None
    return read_checkpoint(out / name, expected_digest=snapshot.digest)


def _memory(out: Path, facts: FoldFacts, emitted: set[str]) -> MemoryReport:
    snapshot = facts.snapshots.get("memory")
    restored = _restored(out, "memory", snapshot)
    if restored is None:
        code = None if snapshot is None else snapshot.error_code
        return MemoryReport(status="checked", passed=False,
                            reason=f"the fold built no checkpoint of the memory source ({code})")
    image = out / "memory" / "store.sqlite"
    return check_memory(restored, _restored(out, "endurance-final",
                                            facts.snapshots.get("endurance-final")),
                        emitted, endurance_events(),
                        image.stat().st_size if image.is_file() else 0)


def _resume(out: Path, task: Task, snapshot: Snapshot | None) -> TaskResult:
    home = out / f"resume-{task.id}"
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    write_files(workspace, task.initial)
    if snapshot is None or snapshot.digest is None:
        reason = f"the fold built no checkpoint ({None if snapshot is None else snapshot.error_code})"
        return score(task, workspace, None, None, reason)
    result = run_contained(["python", "-I", "-m", "efold.certify.resume",
                            str(out / f"continuation-{task.id}"), snapshot.digest,
                            str(workspace)], home, timeout_s=RESUME_TIMEOUT_S)
    claim: ResumeClaim | None = None
    if result.exit_code == 0:
        try:
            claim = msgspec.json.decode(read_bounded(home / "resume.json"), type=ResumeClaim)
        except msgspec.DecodeError as exc:
            raise CertifyError(Code.CERTIFY_SESSION_INVALID, f"resume.json: {exc}") from exc
    why: str | None = None
    if result.exit_code != 0:
        why = ("the resume child timed out" if result.timed_out
               else result.stdout.strip()[-300:] or f"the resume child exited {result.exit_code}")
    return score(task, workspace, result.exit_code, claim, why)


def certify(target: Target | str, *, timeout_s: float = DEFAULT_TIMEOUT_S
            ) -> CertificationReport:
    """Certify the fold ``target`` names (a ``Target``, or an arm's name; module
    docstring)."""
    if isinstance(target, str):
        target = Target(name=target)
    name = target.name
    kind = fold_kind(target)
    with tempfile.TemporaryDirectory(prefix="efold-certify-") as tmp:
        out = Path(tmp) / "out"
        out.mkdir(mode=0o700)
        spec = Path(tmp) / "target.json"
        spec.write_bytes(msgspec.json.encode(target))
        result = run_contained(["python", "-I", "-m", "efold.certify.child", str(spec), str(out)],
                               out, timeout_s=timeout_s)
        if result.timed_out or result.exit_code != 0 or not (out / "fold.json").is_file():
            status = "timed out" if result.timed_out else f"exit {result.exit_code}"
            raise CertifyError(Code.CERTIFY_CHILD_FAILED,
                               f"the certification child did not finish ({status}): "
                               f"{result.stdout[-2000:].strip()}")
        facts = _facts(out)
        if not facts.loaded:
            raise FoldError(Code(facts.error_code or Code.FOLD_PLUGIN_INVALID.value),
                            facts.error or f"{name} does not load")
        endurance, emitted = check_endurance(out, facts.derives_from_source)
        maximal = check_maximal(out)
        memory = _memory(out, facts, emitted)
        tasks = [_resume(out, task, facts.snapshots.get(f"continuation-{task.id}"))
                 for task in TASKS]
    failed = [c.name for c in endurance.checks if not c.passed]
    if not endurance.sizes.passed:
        failed.append("growth")
    failed += [f"fixture:{f.shape}" for f in endurance.fixtures if f.status != "passed"]
    if not maximal.passed:
        failed.append("maximal")
    if not memory.passed:
        failed += [f"memory:{c.name}" for c in memory.checks if not c.passed] or ["memory"]
    failed += [f"continuation:{t.task}" for t in tasks if not t.passed]
    return CertificationReport(
        format=REPORT_FORMAT, fold=name, kind=kind, passed=not failed, failed=failed,
        endurance=endurance, maximal=maximal, memory=memory,
        continuation=ContinuationReport(passed=all(t.passed for t in tasks), tasks=tasks))
