"""A real restart (a case's ``fold.restart``): the agent that resumes is a new process
that has only the durable state.

Offline (``boundary run``, ``validate``) a case is folded in this process. With
``fold.restart`` its continuation does not run here: ``continue_restarted``

1. writes the checkpoint as a snapshot (``folds.snapshot.write_checkpoint``: its files
   and manifest fsynced) into a private directory, and keeps only the manifest digest;
2. starts a new interpreter (``python -m efold.boundary.restart``) given the snapshot
   directory, that digest, the case directory and the workspace copy. The child
   restores the checkpoint from the snapshot alone (``read_checkpoint``: a snapshot that
   is not the one written refuses, ``checkpoint_digest_mismatch``), rebuilds its history
   store from the snapshot's store image, loads the case for its continuation (stimulus,
   tools, faux script), runs the continuation on the workspace and writes its work
   record (``work.write_work``), printing the record's sha256 as its only output;
3. reads the record back (``work.read_work``: checked against that sha256).

Nothing of the fold process reaches the agent but the snapshot's bytes: no object, no
cache, no open store. ``Restarted`` records what the new process resumed from (the
snapshot's digest) and that it was another process. A child that fails exits non-zero
and its last output line is the refusal, ``CODE: detail``; the parent raises it as
``boundary_restart_failed``. The child runs in its own session, with ``-P`` (it imports
the efold this process runs, never one in its working directory) and a fresh launch
marker every command it runs inherits: when it ends, however, its group and every
process carrying the marker are killed, so a command it left running (it was killed
mid-test, or timed out) does not outlive the run.

In a campaign every boundary slot already resumes this way: the fold runs in a prep
child, and the probe child that runs the continuation restores the published snapshot.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from efold.boundary.agent_loop import AgentRun
from efold.boundary.errors import BoundaryError
from efold.boundary.runner import LAUNCH_MARKER_VAR, sweep_marked
from efold.boundary.work import read_work, work_record, write_work
from efold.errors import Code, EfoldError
from efold.folds.checkpoint import Checkpoint
from efold.identity import start_time

SNAPSHOT_DIR: Final = "snapshot"
_GRACE_S: Final = 60.0  # the child's own start and fold restore, on top of its commands


@dataclass(frozen=True)
class Restarted:
    """What the resumed agent was: a process other than the fold's (``agent_pid``), that
    restored the snapshot with manifest digest ``snapshot_digest``."""

    snapshot_digest: str
    fold_pid: int
    agent_pid: int


def continue_restarted(case_dir: Path, checkpoint: Checkpoint, workspace: Path, *,
                       timeout_s: float) -> tuple[AgentRun, Restarted]:
    """Run the continuation in a new process from ``checkpoint``'s snapshot (module
    docstring); ``timeout_s`` bounds the child's own commands."""
    from efold.folds.snapshot import write_checkpoint

    with tempfile.TemporaryDirectory(prefix="efold-restart-") as tmp:
        snapshot = Path(tmp) / SNAPSHOT_DIR
        digest = write_checkpoint(checkpoint, snapshot).digest
        del checkpoint  # from here the agent has the snapshot's bytes only
        out = Path(tmp) / "out"
        out.mkdir(mode=0o700)
        # -P: the child imports the efold this process runs, never a directory named
        # efold in its working directory (which is the private temporary one anyway).
        argv = [sys.executable, "-P", "-m", "efold.boundary.restart", str(snapshot), digest,
                str(case_dir), str(workspace), str(out)]
        done = _run_marked(argv, Path(tmp), timeout_s + _GRACE_S)
        lines = done.stdout.decode("utf-8", "replace").split()
        if done.returncode != 0 or len(lines) != 2:
            said = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
            last = said.splitlines()[-1] if said else "no output"
            raise BoundaryError(Code.BOUNDARY_RESTART_FAILED,
                                f"the restarted agent exited {done.returncode}: {last}")
        agent_pid, sha256 = int(lines[0]), lines[1]
        record = read_work(out, sha256)
    run = AgentRun(actions=list(record.actions), recall_outputs=list(record.recall_outputs),
                   ending=record.ending,  # type: ignore[arg-type]  # read_work checked it
                   requests=record.requests, input_tokens=record.input_tokens,
                   output_tokens=record.output_tokens)
    return run, Restarted(snapshot_digest=digest, fold_pid=os.getpid(), agent_pid=agent_pid)


def _run_marked(argv: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[bytes]:
    """Run the child in its own session, carrying a fresh launch marker that every
    process it starts inherits (its contained commands too:
    ``runner.contained_environment``); however it ends (exit, a kill, ``timeout_s``),
    every process left with the marker is killed before this returns: nothing the new
    agent started outlives it."""
    marker = secrets.token_hex(16)
    env = {**os.environ, LAUNCH_MARKER_VAR: marker}
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    started = start_time(child.pid)
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise BoundaryError(Code.BOUNDARY_RESTART_FAILED,
                            f"the restarted agent ran past {timeout_s:.0f} s") from exc
    finally:
        child.kill()  # a no-op once it has exited and been reaped
        child.wait()
        sweep_marked(f"{LAUNCH_MARKER_VAR}={marker}", started)
    return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)


def _resume(snapshot: Path, digest: str, case_dir: Path, workspace: Path, out: Path) -> str:
    """The child's work: restore, continue, write the record; its sha256."""
    from efold.boundary.case import load_case
    from efold.boundary.continuation import continue_case
    from efold.folds.snapshot import read_checkpoint

    restored = read_checkpoint(snapshot, expected_digest=digest)
    case = load_case(case_dir)
    run = continue_case(case, restored.checkpoint, workspace, store=restored.open_store())
    return write_work(out, work_record(run))


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print("usage: python -m efold.boundary.restart SNAPSHOT DIGEST CASE WORKSPACE OUT",
              file=sys.stderr)
        return 2
    snapshot, digest, case_dir, workspace, out = argv
    try:
        sha256 = _resume(Path(snapshot), digest, Path(case_dir), Path(workspace), Path(out))
    except EfoldError as exc:
        print(f"{exc.code.value}: {exc.detail}", file=sys.stderr)
        return 1
    print(os.getpid(), sha256)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
