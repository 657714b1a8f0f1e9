"""Continuation QA: two small repositories, a folded session that planned the work, a
fresh process that resumes from the checkpoint alone, and an oracle outside both.

Each ``Task`` has initial files, the exact expected final files, files that must stay
byte-identical (``protected``; the oracle script among them) and an edit plan. The plan
reaches the session only as one tool result (``plan_read``) holding a ``CERT_TASK_V1``
line: the task id, the sha256 of the operations and the operations as base64 JSON. Many
work units follow it, so a fold must carry it across the boundary: kept visible, or
behind a cited ``[record <id>]`` the fold's lookup tool expands.

The resume child (``certify.resume``) gets only the snapshot of the fold's checkpoint
and a copy of the initial files: never the session, the task or its expected files. The
oracle (``score``) then scores the final files exactly, the protected files byte for
byte, the resume child's exit status and the task's own check script, run contained.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from efold.boundary.runner import run_contained
from efold.certify import fixture
from efold.corpus.model import Event, FunctionCall, ToolCall, ToolSource

PLAN_PREFIX: Final = "CERT_TASK_V1"
FILLER_UNITS: Final = 45


@dataclass(frozen=True)
class Task:
    id: str
    goal: str
    initial: dict[str, str]
    expected: dict[str, str]  # every file after the task, protected ones included
    protected: tuple[str, ...]
    operations: list[dict[str, str]]


_CHECK_A = '''import pathlib, sys
config = pathlib.Path("app/config.py").read_text()
main = pathlib.Path("app/main.py").read_text()
ok = "TIMEOUT_SECONDS = 45" in config and "TIMEOUT =" not in config and "config.TIMEOUT_SECONDS" in main
sys.exit(0 if ok and pathlib.Path("app/limits.py").is_file() else 1)
'''

# Files long enough that a summary which keeps a result's head and tail cannot carry the
# plan whole: the plan line is one line of several KiB.
_LIMITS = "".join(f"LIMIT_{n:02d} = {n * 37 % 1000}  # shard {n}: per the cutover plan\n"
                  for n in range(60))
_TESTS = "from calc.ops import clamp\n" + "".join(
    f"\n\ndef test_clamp_{n}():\n    assert clamp({n * 3 - 40}, -20, 20) == "
    f"{max(-20, min(20, n * 3 - 40))}\n" for n in range(30))

_CHECK_B = '''import sys
sys.path.insert(0, ".")
from calc.ops import add, clamp
sys.exit(0 if add(2, 3) == 5 and clamp(12, 0, 10) == 10 and clamp(-1, 0, 10) == 0 else 1)
'''

TASKS: Final[tuple[Task, ...]] = (
    Task(
        id="rename-timeout",
        goal="Rename the TIMEOUT setting to TIMEOUT_SECONDS, raise it to 45, and add the "
             "limits module, exactly as the plan document says.",
        initial={"app/config.py": "TIMEOUT = 30\nRETRIES = 3\n",
                 "app/main.py": "from app import config\n\n\ndef wait():\n    return config.TIMEOUT\n",
                 "README.md": "# service\n\nDo not edit: generated. ǅ\n",
                 "check.py": _CHECK_A},
        expected={"app/config.py": "TIMEOUT_SECONDS = 45\nRETRIES = 3\n",
                  "app/main.py": "from app import config\n\n\ndef wait():\n    return config.TIMEOUT_SECONDS\n",
                  "app/limits.py": _LIMITS,
                  "README.md": "# service\n\nDo not edit: generated. ǅ\n",
                  "check.py": _CHECK_A},
        protected=("README.md", "check.py"),
        operations=[
            {"op": "replace", "path": "app/config.py", "old": "TIMEOUT = 30", "new": "TIMEOUT_SECONDS = 45"},
            {"op": "replace", "path": "app/main.py", "old": "config.TIMEOUT\n", "new": "config.TIMEOUT_SECONDS\n"},
            {"op": "write", "path": "app/limits.py", "content": _LIMITS},
        ],
    ),
    Task(
        id="add-clamp",
        goal="Add the clamp function to calc/ops.py and its test, exactly as the plan "
             "document says.",
        initial={"calc/__init__.py": "",
                 "calc/ops.py": "def add(a, b):\n    return a + b\n",
                 "LICENSE": "Copyright «efold» — all rights reserved.\n",
                 "check.py": _CHECK_B},
        expected={"calc/__init__.py": "",
                  "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef clamp(x, low, high):\n"
                                 "    return max(low, min(high, x))\n",
                  "calc/test_ops.py": _TESTS,
                  "LICENSE": "Copyright «efold» — all rights reserved.\n",
                  "check.py": _CHECK_B},
        protected=("LICENSE", "check.py"),
        operations=[
            {"op": "replace", "path": "calc/ops.py", "old": "    return a + b\n",
             "new": "    return a + b\n\n\ndef clamp(x, low, high):\n    return max(low, min(high, x))\n"},
            {"op": "write", "path": "calc/test_ops.py", "content": _TESTS},
        ],
    ),
)


def plan_line(task: Task) -> str:
    body = json.dumps(task.operations, ensure_ascii=False, sort_keys=True).encode("utf-8")
    digest = hashlib.sha256(body).hexdigest()
    return f"{PLAN_PREFIX} {task.id} {digest} {base64.b64encode(body).decode()}"


def task_events(task: Task) -> list[Event]:
    """The session of ``task``: the goal in prose, the plan read once, then work."""
    events = [
        Event(id="c0000-owner", session=1, day=1, role="user",
              content=f"{task.goal} The plan document is plans/{task.id}.plan."),
        Event(id="c0000-call", session=1, day=1, role="assistant", content="",
              tool_calls=[ToolCall(id="plan-1", function=FunctionCall(
                  "plan_read", json.dumps({"path": f"plans/{task.id}.plan"})))]),
        Event(id="c0000-plan", session=1, day=1, role="tool", tool_call_id="plan-1",
              name="plan_read", source=ToolSource.DOCUMENT,
              content=f"plans/{task.id}.plan\n{plan_line(task)}\nend of plan"),
        Event(id="c0000-reply", session=1, day=1, role="assistant",
              content="Plan read; I will apply it after the survey."),
    ]
    for number in range(1, FILLER_UNITS + 1):
        events += fixture.unit(number).events
    events.append(Event(id="c9999-owner", session=1, day=1, role="user",
                        content="Resume and complete the task."))
    return events


def write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


class TaskResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One task as the oracle scored it."""

    task: str
    passed: bool
    resume_exit: int | None  # the resume child's status (None: it timed out)
    found_via: str | None  # "context" or "expansion" (the resume child's claim)
    address: str | None  # the record it expanded, when it did
    address_resolved: bool  # the expanded record answered with that id and held the plan
    files_exact: bool
    protected_intact: bool
    check_exit: int | None
    reason: str | None = None


class ResumeClaim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``resume.json``: what the resume child says it did (scored, never trusted)."""

    found_via: str
    address: str | None
    address_resolved: bool
    operations: int


def score(task: Task, workspace: Path, resume_exit: int | None, claim: ResumeClaim | None,
          reason: str | None) -> TaskResult:
    """The oracle: exact files, protected files, exit statuses (module docstring)."""
    final = tree(workspace)
    expected = {name: text.encode() for name, text in task.expected.items()}
    files_exact = final == expected
    protected = all(final.get(p) == task.initial[p].encode() for p in task.protected)
    check = run_contained(["python", "-I", "check.py"], workspace, timeout_s=60)
    passed = resume_exit == 0 and files_exact and protected and check.exit_code == 0
    if not passed and reason is None:
        reason = ("the final files differ" if not files_exact else
                  "a protected file changed" if not protected else "the check script failed")
    return TaskResult(task=task.id, passed=passed, resume_exit=resume_exit,
                      found_via=None if claim is None else claim.found_via,
                      address=None if claim is None else claim.address,
                      address_resolved=claim is not None and claim.address_resolved,
                      files_exact=files_exact, protected_intact=protected,
                      check_exit=check.exit_code, reason=None if passed else reason)
