"""The child's own checks before it speaks: its parent is the live controller named in
the assignment, that controller holds the run lease at the assigned epoch, and the run's
registration, plan and this child's own build hash to the digests it was assigned.

Both are POSIX observations, not kernel capabilities: they make a stale or misdirected
child refuse (a child whose controller died reads a different parent, a child launched
for an older epoch reads a different lease record), not a determined same-user attacker.
"""

from __future__ import annotations

import os

from efold.errors import Code
from efold.identity import is_same_process
from efold.protocol.assignment import Assignment
from efold.registry.errors import RegistryError
from efold.registry.lease import LeaseState, probe_lease
from efold.worker.errors import WorkerError


def verify_parent(assignment: Assignment) -> None:
    """``worker_parent_unverified`` unless our parent is the assigned controller, alive,
    with the recorded start time and boot id."""
    controller = assignment.controller
    if os.getppid() != controller.pid:
        raise WorkerError(Code.WORKER_PARENT_UNVERIFIED, "parent pid differs")
    if not is_same_process(controller):
        raise WorkerError(Code.WORKER_PARENT_UNVERIFIED, "parent start identity differs")
    # Re-read after the identity check: a parent that died in between leaves us
    # reparented, and getppid() then names someone else.
    if os.getppid() != controller.pid:
        raise WorkerError(Code.WORKER_PARENT_UNVERIFIED, "parent changed during the check")


def verify_lease(assignment: Assignment) -> None:
    """``worker_lease_not_live`` unless the run lease is held right now by the assigned
    controller at the assigned epoch."""
    try:
        status = probe_lease(assignment.run_dir)
    except RegistryError as exc:
        raise WorkerError(Code.WORKER_LEASE_NOT_LIVE, exc.code.value) from exc
    if status.state is not LeaseState.LIVE or status.holder is None:
        raise WorkerError(Code.WORKER_LEASE_NOT_LIVE, status.state.value)
    holder = status.holder
    if holder.identity() != assignment.controller or holder.epoch != assignment.epoch:
        raise WorkerError(Code.WORKER_LEASE_NOT_LIVE, "lease holder or epoch differs")


def _file_sha256(directory: str, name: str) -> str | None:
    """The file's sha256; ``None`` if it cannot be read (which matches no digest)."""
    from efold.digests import file_sha256

    try:
        return file_sha256(os.path.join(directory, name))
    except OSError:
        return None


def verify_digests(assignment: Assignment) -> None:
    """``worker_digest_mismatch`` unless ``registration.json`` and ``plan.json`` in the
    run directory, and the code this child runs, hash to the assigned digests: a child
    never works for a run, plan or build other than the one it was launched for."""
    from efold.digests import running_build_digest

    if _file_sha256(assignment.run_dir, "registration.json") != assignment.registration_digest:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "registration digest differs")
    if _file_sha256(assignment.run_dir, "plan.json") != assignment.plan_digest:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "plan digest differs")
    if running_build_digest() != assignment.build_digest:
        raise WorkerError(Code.WORKER_DIGEST_MISMATCH, "build digest differs")
