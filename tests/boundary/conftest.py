"""Fixtures for boundary/ tests: a small, valid case directory written for real.

``sidecar_data()`` is the sidecar of that case as a plain dict (camelCase keys, as in
the file); ``make_case(mutate=None, name=None)`` writes a case under ``case_root``
(``tmp_path/cases``): ``ef-boundary.yml`` from the dict after ``mutate(data)``, a
four-event efold trace ``session.jsonl`` (ids e0001..e0004), ``workspace/`` (a tiny
package with a passing test) and ``workspace.expected/``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from efold.corpus.codec import dump_trace
from efold.corpus.model import Event, Trace, TraceHeader

CASE_ID = "B01-test-constraint"
TEST_COMMAND = ["python", "-m", "pytest", "-q"]

WORKSPACE: dict[str, str] = {
    "src/shop/__init__.py": "",
    "src/shop/api.py": "def total(lines):\n    return sum(u * q for u, q in lines)\n",
    "src/shop/pricing.py": "BULK_THRESHOLD = 10\n",
    "tests/test_api.py": (
        "import sys\nsys.path.insert(0, 'src')\nfrom shop.api import total\n\n\n"
        "def test_total():\n    assert total([(2, 3)]) == 6\n"),
}
EXPECTED: dict[str, str] = {"src/shop/pricing.py": "BULK_THRESHOLD = 20\n"}


def sidecar_data() -> dict[str, Any]:
    """A valid sidecar for the case ``make_case`` writes (a fresh dict every call)."""
    return {
        "version": 1,
        "id": CASE_ID,
        "workload": "coding",
        "tier": "hard",
        "source": {"session": "session.jsonl", "format": "efold-trace", "boundary": "end",
                   "critical": ["e0001"]},
        "fold": {"mode": "leaf", "repeat": 1},
        "continuation": {"input": ["Raise the bulk threshold as agreed, then run the tests."],
                         "maxActions": 6},
        "tools": {"edit": True, "test": {"commands": [TEST_COMMAND], "timeoutSeconds": 60}},
        "oracle": {"success": [
            {"type": "tests-pass", "command": TEST_COMMAND},
            {"type": "forbidden-path-unchanged", "path": "src/shop/api.py"},
            {"type": "file-equals", "path": "src/shop/pricing.py",
             "expected": "src/shop/pricing.py"},
        ]},
        "behavior": {"duplicateRules": [{"family": "read"}, {"family": "test"}]},
        "recall": {"required": False, "answer": None},
        "classification": {"expectedCapability": ["constraint-retention"],
                           "failureSignatures": ["constraint-missing"]},
    }


def session_trace(trace_id: str = "b01-test-constraint") -> Trace:
    def event(number: int, role: str, content: str) -> Event:
        return Event(id=f"e{number:04d}", session=1, day=1, role=role,  # type: ignore[arg-type]
                     content=content)

    return Trace(
        header=TraceHeader(trace_id=trace_id, suite="boundary", family="coding",
                           fictional=True, title="a boundary test session", sessions=1),
        events=[
            event(1, "user", "Never edit src/shop/api.py: it is the public API."),
            event(2, "assistant", "Understood: src/shop/api.py stays as it is."),
            event(3, "user", "We settled on a bulk threshold of 20."),
            event(4, "assistant", "Noted: the bulk threshold is 20."),
        ],
    )


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def write_sidecar(case_dir: Path, data: dict[str, Any]) -> None:
    (case_dir / "ef-boundary.yml").write_text(yaml.safe_dump(data, sort_keys=False),
                                              encoding="utf-8")


MakeCase = Callable[..., Path]


@pytest.fixture
def case_root(tmp_path: Path) -> Path:
    root = tmp_path / "cases"
    root.mkdir()
    return root


@pytest.fixture
def make_case(case_root: Path) -> MakeCase:
    def make(mutate: Callable[[dict[str, Any]], None] | None = None,
             name: str | None = None) -> Path:
        data = sidecar_data()
        if mutate is not None:
            mutate(data)
        case_dir = case_root / (name or str(data.get("id", CASE_ID)))
        case_dir.mkdir()
        write_sidecar(case_dir, data)
        (case_dir / "session.jsonl").write_bytes(dump_trace(session_trace()))
        write_tree(case_dir / "workspace", WORKSPACE)
        write_tree(case_dir / "workspace.expected", EXPECTED)
        return case_dir

    return make
