"""Preflight: only the prep children, in a private temporary root removed afterwards.

For every checkpoint the plan needs: run the real prep child, check the tree it left
(``controller.processes.tree``), verify and dry-restore its snapshot into a fresh directory, and
time both phases against the prep watchdog. The report has one entry per planned slot
(a slot is as preparable as its checkpoint). No authorization, no burn registry, no
probe and no model: this is a free feasibility check, not a prediction of a full run.

A slot whose checkpoint failed in its prep child may carry the child's ``cause``: the
fold's own code and detail (``prep_launch.PrepCause``), shown next to the controller's
``code`` and never deciding anything. ``on_restored`` (``fold check``) sees every
checkpoint that dry-restored, while it is in memory and before the root is removed.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import msgspec

from efold.controller.campaigns.campaign import prep_seconds
from efold.controller.campaigns.registration import Registration
from efold.controller.campaigns.stops import StopPolicy
from efold.controller.pilot.prep_launch import PrepCause
from efold.controller.pilot.preparation import Preparation, checkpoints_of, prepare_checkpoints
from efold.controller.rundirs.interrupt import Say, Signals, caught, interruptible, say
from efold.controller.rundirs.run_index import PRIVATE_ROOT_PREFIX, PRIVATE_RUN
from efold.controller.rundirs.run_setup import check_containment, open_run
from efold.controller.rundirs.runroot import claim_run_dir, private_subdir
from efold.controller.rundirs.suggest import suggest
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.folds import copy_snapshot
from efold.folds.snapshot import RestoredCheckpoint
from efold.isolation import Isolation

# Called with a checkpoint's key and its dry-restored snapshot (verified, read as data).
OnRestored = Callable[[str, RestoredCheckpoint], None]
OnPrepDir = Callable[[str, Path], None]  # (checkpoint, its prep slot directory)


class PreflightSlot(msgspec.Struct, frozen=True, omit_defaults=True):
    slot: str
    checkpoint: str
    eligible: bool  # admission eligibility from the plan (preparation is checked anyway)
    ok: bool  # the checkpoint prepared, passed the tree limits and dry-restored in time
    code: str | None
    # Round 1 of every probe asked of the checkpoint fits the input envelope; None when
    # it could not be prepared. False: the slot is inventory-infeasible (skipped).
    feasible: bool | None
    files: int
    bytes: int
    largest_bytes: int
    rejected: dict[str, int]
    prepare_ms: int
    restore_ms: int
    watchdog_ms: int
    # What the prep child says its fold failed with (a fold or corpus code and a short
    # detail): informational, omitted when it said nothing. ``code`` is the failure.
    cause: PrepCause | None = None
    isolation: Isolation | None = None  # how its fold ran, as its prep child reported


class PreflightReport(msgspec.Struct, frozen=True):
    registration_sha256: str
    ok: bool
    checkpoints: int
    slots: list[PreflightSlot]
    interrupted: int | None = None  # the signal (SIGINT/SIGTERM) that cut it short
    version: int = 3  # 2: per-slot feasibility, interruption; 3: a failed prep's cause

    def infeasible(self) -> set[str]:
        """Checkpoints whose prep child built them and whose first request never fits."""
        return {s.checkpoint for s in self.slots if s.feasible is False}


def _failed(checkpoint: str, code: Code, watchdog_ms: int) -> PreflightSlot:
    return PreflightSlot(
        slot="", checkpoint=checkpoint, eligible=True, ok=False, code=code.value,
        feasible=None, files=0,
        bytes=0, largest_bytes=0, rejected={}, prepare_ms=0, restore_ms=0,
        watchdog_ms=watchdog_ms,
    )


async def _preflight(reg: Registration, reg_bytes: bytes, root: Path,
                     program: Sequence[str] | None, on_restored: OnRestored | None,
                     on_prep_dir: OnPrepDir | None) -> PreflightReport:
    run = claim_run_dir(root / PRIVATE_RUN)
    with caught() as signals:
        return await _preflight_run(reg, reg_bytes, run, program, on_restored, on_prep_dir,
                                    signals)


async def _preflight_run(reg: Registration, reg_bytes: bytes, run: Path,
                         program: Sequence[str] | None, on_restored: OnRestored | None,
                         on_prep_dir: OnPrepDir | None, signals: Signals) -> PreflightReport:
    async with open_run(reg, reg_bytes, run, admitting=False, program=program) as opened:
        ctx, plan = opened.ctx, opened.plan
        private_subdir(run, "restore")
        # Every checkpoint of the plan: preparation feasibility is independent of
        # admission eligibility (a slot ineligible by plan is still prepared here).
        preps = await interruptible(ctx, lambda: prepare_checkpoints(
            ctx, plan, opened.items, reg, eligible_only=False, cases=opened.cases), signals)
        watchdog_ms = int(prep_seconds(reg.campaign) * 1000)
        results = {key: _checkpoint_result(run, key, preps.get(key), ctx.policy, watchdog_ms,
                                           on_restored)
                   for key in checkpoints_of(plan, eligible_only=False)}
        if on_prep_dir is not None:
            for key in results:
                on_prep_dir(key, run / "checkpoints" / key)
    slots = [msgspec.structs.replace(results[s.checkpoint], slot=s.slot, eligible=s.eligible)
             for s in plan.slots]
    return PreflightReport(
        registration_sha256=sha256_hex(reg_bytes), ok=all(x.ok for x in slots),
        checkpoints=len(results), slots=slots, interrupted=ctx.interrupted,
    )


def _checkpoint_result(run: Path, key: str, prep: Preparation | None, policy: StopPolicy,
                       watchdog_ms: int, on_restored: OnRestored | None) -> PreflightSlot:
    """One checkpoint's entry: its prep, then a dry restore of its snapshot, both timed
    against the prep watchdog (the slots of the checkpoint copy it)."""
    if prep is None:
        # Admission closed before this checkpoint (a containment stop: a prep child left
        # a process behind): it fails with that stop.
        return _failed(key, policy.stop_code or Code.LOOKUP_STOPPED, watchdog_ms)
    result = prep.result
    code = policy.stop_code or result.code
    restore_ms = 0
    restored: RestoredCheckpoint | None = None
    if code is None and result.snapshot is not None:
        started = time.monotonic()
        try:
            restored = copy_snapshot(result.snapshot.path, run / "restore" / key,
                                     expected_digest=result.snapshot.digest)
        except EfoldError:
            code = Code.LOOKUP_PREPARATION_INVALID
        restore_ms = int((time.monotonic() - started) * 1000)
    if code is None and result.elapsed_ms + restore_ms > watchdog_ms:
        code = Code.WORKER_TIMEOUT
    if code is None and restored is not None and on_restored is not None:
        on_restored(key, restored)
    tree = result.tree
    return PreflightSlot(
        slot="", checkpoint=key, eligible=True, ok=code is None,
        code=code.value if code else None, feasible=prep.feasible, files=tree.files,
        bytes=tree.bytes, largest_bytes=tree.largest,
        rejected=dict(sorted(tree.rejected.items())), prepare_ms=result.elapsed_ms,
        restore_ms=restore_ms, watchdog_ms=watchdog_ms,
        cause=result.cause if code is not None else None, isolation=result.isolation,
    )


def run_preflight(reg: Registration, reg_bytes: bytes, *,
                  program: Sequence[str] | None = None,
                  keep_root: list[Path] | None = None,
                  on_restored: OnRestored | None = None,
                  on_prep_dir: OnPrepDir | None = None,
                  tell: Say = say) -> PreflightReport:
    """Run preflight in a private temporary root, always removed afterwards.
    ``keep_root`` (tests) receives the root's path so its removal can be checked;
    ``on_restored`` sees each checkpoint that prepared and dry-restored in time;
    ``on_prep_dir`` sees every checkpoint's prep slot directory, prepared or not (a
    proxy fold's log is there), before the root is removed. ``tell`` gets one line
    naming the root first (default: stderr), after a warning line where the run will
    have no cgroup (``run_setup.check_containment``, which refuses where the campaign
    requires one)."""
    containment = check_containment(reg)  # refuses first where the campaign needs a cgroup
    if not containment.startswith("containment: cgroup"):
        tell(f"warning: {containment}")
    root = Path(tempfile.mkdtemp(prefix=PRIVATE_ROOT_PREFIX))
    if keep_root is not None:
        keep_root.append(root)
    # Said first: a command killed before its end cannot say it then, and a root left
    # behind is where ``recover``/``reap`` find what the kill left (they accept it).
    tell(f"private root {root} (removed at the end; if this command is killed first: "
         f"`{suggest('recover', root)}`, then `{suggest('reap', root)}`)")
    try:
        return anyio.run(lambda: _preflight(reg, reg_bytes, root, program, on_restored,
                                            on_prep_dir), backend="trio")
    finally:
        shutil.rmtree(root, ignore_errors=True)
