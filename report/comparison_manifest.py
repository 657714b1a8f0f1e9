"""A paired collection from files: a manifest names the runs, the two arms and the tasks.

``analyze --manifest FILE`` makes a comparison set (``report.comparison_set``) from run
directories the manifest names, so a comparison is reproducible from files alone: the
manifest (``efold-comparison-manifest-v1``, one JSON object, at most ``MAX_BYTES``,
decoded closed) binds

* ``arms``: the reference and the candidate, as the set names them;
* ``runs``: for each arm, the run directory (relative to the manifest's own directory,
  or absolute), the sha256 of that run's registration (a run that is not the registered
  one refuses) and the role in it whose slots stand for the arm. The two may be one run
  (two of its roles) or two runs made apart (two builds, two machines);
* ``tasks``: the tasks compared, each once, as the set spells them
  (``<trace_id>/<probe_id>`` for a question, the case's id for a boundary case);
* ``representative_task_set`` (the operator's attestation) and ``minimum_tasks``.

Each task is paired by repeat from the two roles' receipts (``comparison_export``: only
slots completed and scored count). A named task with no scored pair is left out and
counted, never filled in; a slot of a task the manifest does not name is not read. The
set's provenance carries the manifest's sha256, so the analysis names the exact files
it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Final, Literal

import msgspec

from efold.errors import Code
from efold.protocol.records import Receipt
from efold.report.comparison_export import comparison_run, scored
from efold.report.comparison_set import (
    MIN_TASKS,
    SCHEMA,
    ComparisonRun,
    ComparisonSet,
    Provenance,
    check_comparison,
)
from efold.report.errors import ReportError

MANIFEST_SCHEMA: Final = "efold-comparison-manifest-v1"
MAX_BYTES: Final = 1024 * 1024
MAX_TASKS: Final = 5_000

Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=160)]


class ManifestRun(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    arm: Name  # the arm of the set it stands for
    run: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]  # a run directory
    registration_sha256: Digest
    role: Name  # the role of that run whose slots are taken


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: Literal["efold-comparison-manifest-v1"]
    arms: Annotated[list[Name], msgspec.Meta(min_length=2, max_length=2)]
    runs: Annotated[list[ManifestRun], msgspec.Meta(min_length=2, max_length=2)]
    tasks: Annotated[list[Name], msgspec.Meta(min_length=1, max_length=MAX_TASKS)]
    representative_task_set: bool = False
    minimum_tasks: int = MIN_TASKS


def _invalid(detail: str) -> ReportError:
    return ReportError(Code.COMPARISON_INVALID, detail)


def decode_manifest(raw: bytes) -> Manifest:
    """The manifest in ``raw``, decoded closed and checked (module docstring)."""
    if len(raw) > MAX_BYTES:
        raise ReportError(Code.COMPARISON_TOO_LARGE,
                          f"the manifest is {len(raw)} bytes: at most {MAX_BYTES} are read")
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
    except msgspec.ValidationError as exc:
        raise _invalid(f"the manifest: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise _invalid(f"the manifest is not one JSON object: {exc}") from exc
    if len(set(manifest.arms)) != 2:
        raise _invalid("the manifest's arms are not two distinct names")
    if sorted(r.arm for r in manifest.runs) != sorted(manifest.arms):
        raise _invalid("the manifest needs one run entry per arm")
    if len(set(manifest.tasks)) != len(manifest.tasks):
        raise _invalid("the manifest names a task twice")
    return manifest


@dataclass(frozen=True)
class Collected:
    """The set, and what the manifest named that could not be paired."""

    data: ComparisonSet
    missing: list[str]  # named tasks without one scored pair (in manifest order)


def collect(manifest: Manifest, manifest_sha256: str,
            receipts: Sequence[Sequence[Receipt]], *, efold_version: str,
            models: Sequence[str], faux: bool | None) -> Collected:
    """The comparison set of ``manifest``, from each run entry's receipts
    (``receipts[i]`` for ``manifest.runs[i]``, read and verified by the caller)."""
    wanted = set(manifest.tasks)
    by_arm: dict[str, dict[tuple[str, int], ComparisonRun]] = {}
    for entry, found in zip(manifest.runs, receipts, strict=True):
        own = [r for r in found if r.role == entry.role]
        if not own:
            roles = sorted({r.role for r in found})
            raise _invalid(f"run {entry.run} has no role {entry.role!r} (its roles: "
                           f"{', '.join(roles)})")
        taken = by_arm.setdefault(entry.arm, {})
        for receipt in own:
            if not scored(receipt):
                continue
            run = msgspec.structs.replace(comparison_run(receipt), arm=entry.arm)
            if run.task in wanted:
                taken[(run.task, run.repeat)] = run
    reference, candidate = manifest.arms
    pairs = sorted(set(by_arm.get(reference, {})) & set(by_arm.get(candidate, {})))
    runs = [run for key in pairs for run in (by_arm[reference][key], by_arm[candidate][key])]
    paired = {task for task, _ in pairs}
    shared = {r.registration_sha256 for r in manifest.runs}
    data = ComparisonSet(
        schema=SCHEMA, arms=list(manifest.arms),
        representative_task_set=manifest.representative_task_set, runs=runs,
        minimum_tasks=manifest.minimum_tasks,
        provenance=Provenance(source="efold-manifest", efold_version=efold_version,
                              models=sorted(set(models))[:16],
                              registration_sha256=shared.pop() if len(shared) == 1 else None,
                              manifest_sha256=manifest_sha256, faux=faux))
    return Collected(check_comparison(data), [t for t in manifest.tasks if t not in paired])
