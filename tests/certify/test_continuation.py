"""Continuation QA's two halves apart: the handoff simulator refuses what it cannot find
or apply exactly, and the oracle scores files, protected files and exit statuses. The
resume child and the task check scripts run as real contained processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from efold.certify.continuation import TASKS, plan_line, score, task_events, tree, write_files
from efold.certify.resume import Unavailable, apply, decode_plan
from efold.folds.fold import TracePrefix
from efold.folds.registry import get_fold
from efold.folds.snapshot import write_checkpoint

TASK = TASKS[0]


def test_the_plan_decodes_only_whole() -> None:
    line = plan_line(TASK)
    assert decode_plan(line) == TASK.operations
    with pytest.raises(Unavailable, match="not whole"):
        decode_plan(line.rsplit(" ", 1)[0])
    with pytest.raises(Unavailable, match=r"does not decode|sha256"):
        decode_plan(line[:201])
    header, body = line.rsplit(" ", 1)
    with pytest.raises(Unavailable, match="sha256"):
        decode_plan(f"{header} {body[:-8]}AAAAAAAA")


def test_an_operation_that_is_not_there_exactly_is_refused(tmp_path: Path) -> None:
    write_files(tmp_path, TASK.initial)
    with pytest.raises(Unavailable, match="not there once"):
        apply(tmp_path, [{"op": "replace", "path": "app/config.py", "old": "TIMEOUT = 99",
                          "new": "x"}])
    with pytest.raises(Unavailable, match="not inside"):
        apply(tmp_path, [{"op": "write", "path": "../escape.py", "content": ""}])
    with pytest.raises(Unavailable, match="exists already"):
        apply(tmp_path, [{"op": "write", "path": "README.md", "content": ""}])
    with pytest.raises(Unavailable, match="knows exactly"):
        apply(tmp_path, [{"op": "delete", "path": "README.md"}])
    assert tree(tmp_path) == {k: v.encode() for k, v in TASK.initial.items()}


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_the_oracle_scores_the_exact_final_files(tmp_path: Path, task: object) -> None:
    assert task in TASKS
    done = tmp_path / "done"
    write_files(done, task.expected)  # type: ignore[attr-defined]
    assert score(task, done, 0, None, None).passed  # type: ignore[arg-type]
    untouched = tmp_path / "untouched"
    write_files(untouched, task.initial)  # type: ignore[attr-defined]
    result = score(task, untouched, 0, None, None)  # type: ignore[arg-type]
    assert not result.passed and result.check_exit == 1 and result.protected_intact
    assert result.reason == "the final files differ"


def test_a_changed_protected_file_fails_even_with_the_right_edits(tmp_path: Path) -> None:
    write_files(tmp_path, TASK.expected)
    (tmp_path / "README.md").write_text("# edited\n")
    result = score(TASK, tmp_path, 0, None, None)
    assert not result.passed and not result.protected_intact


def _resume(tmp_path: Path, arm: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    checkpoint = get_fold(arm).build(TracePrefix(trace_id="t", events=task_events(TASK)))
    digest = write_checkpoint(checkpoint, tmp_path / "snapshot").digest
    workspace = tmp_path / "workspace"
    write_files(workspace, TASK.initial)
    done = subprocess.run([sys.executable, "-I", "-m", "efold.certify.resume",
                           str(tmp_path / "snapshot"), digest, str(workspace)],
                          capture_output=True, text=True, timeout=60)
    return done, workspace


def test_the_resume_child_applies_a_visible_plan(tmp_path: Path) -> None:
    done, workspace = _resume(tmp_path, "native")
    assert done.returncode == 0, done.stderr
    assert tree(workspace) == {k: v.encode() for k, v in TASK.expected.items()}
    assert (tmp_path / "resume.json").is_file()


def test_the_resume_child_refuses_rather_than_invents(tmp_path: Path) -> None:
    done, workspace = _resume(tmp_path, "cold-rebuild")
    assert done.returncode == 3
    assert done.stderr.startswith("unavailable: no plan is visible")
    assert tree(workspace) == {k: v.encode() for k, v in TASK.initial.items()}
    assert not (tmp_path / "resume.json").exists()


def test_the_resume_child_refuses_a_snapshot_that_is_not_the_one_named(tmp_path: Path) -> None:
    checkpoint = get_fold("native").build(TracePrefix(trace_id="t", events=task_events(TASK)))
    write_checkpoint(checkpoint, tmp_path / "snapshot")
    done = subprocess.run([sys.executable, "-I", "-m", "efold.certify.resume",
                           str(tmp_path / "snapshot"), "0" * 64, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "unavailable" in done.stderr
