"""Oracle evaluation (docs/boundary.md §5) on real temp workspaces and real subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from efold.boundary.actions import ActionLog, ActionRecord
from efold.boundary.errors import BoundaryError
from efold.boundary.oracles import (
    ORACLE_TYPES,
    AnchorActive,
    ArtifactExists,
    DeclaredState,
    Evidence,
    FailureOpen,
    FailureRetired,
    FileChanged,
    FileEquals,
    FileUnchanged,
    ForbiddenPathUnchanged,
    NoCrossSessionRecall,
    ObligationOpen,
    Oracle,
    OracleResult,
    RecallContains,
    RecallOutput,
    StateKeyEquals,
    TestsPass,
    ToolActionAbsent,
    ToolActionPresent,
    evaluate,
    evaluate_all,
    passed,
)
from efold.errors import Code
from efold.folds import state as folds_state

CHECK = """\
import pathlib, sys
sys.exit(0 if "fast" in pathlib.Path("src/shop/price.py").read_text() else 1)
"""


def run(argv: list[str], cwd: Path) -> int:
    """A plain runner for the tests (the contained one belongs to the probe child)."""
    return subprocess.run(argv, cwd=cwd, timeout=30, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


@pytest.fixture
def case(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(fixture, final workspace, workspace.expected): the agent edited price.py, created
    notes.md, removed old.txt, left api.py alone."""
    fixture = tmp_path / "fixture"
    (fixture / "src" / "shop").mkdir(parents=True)
    (fixture / "src" / "shop" / "api.py").write_text("def api(): ...\n")
    (fixture / "src" / "shop" / "price.py").write_text("slow = 1\n")
    (fixture / "old.txt").write_text("old\n")
    (fixture / "check.py").write_text(CHECK)
    ws = tmp_path / "ws"
    shutil.copytree(fixture, ws)
    (ws / "src" / "shop" / "price.py").write_text("fast = 1\n")
    (ws / "notes.md").write_text("# Notes\nshortcut done\n")
    (ws / "old.txt").unlink()
    (ws / "src" / "shop" / "__pycache__").mkdir()
    (ws / "src" / "shop" / "__pycache__" / "api.cpython-311.pyc").write_bytes(b"\0")
    expected = tmp_path / "expected"
    (expected / "src" / "shop").mkdir(parents=True)
    (expected / "src" / "shop" / "price.py").write_text("fast = 1\n")
    (expected / "src" / "shop" / "api.py").write_text("def api(): changed\n")
    return fixture, ws, expected


def ev(case: tuple[Path, Path, Path], **kw: object) -> Evidence:
    fixture, ws, expected = case
    return Evidence(workspace=ws, fixture=fixture, expected=expected, **kw)  # type: ignore[arg-type]


def verdict(oracle: Oracle, evidence: Evidence) -> str:
    result = evaluate(oracle, evidence, run_command=run)
    assert result.type == type(oracle).__struct_config__.tag
    return result.verdict


# -- workspace oracles ----------------------------------------------------------------------


def test_tests_pass_runs_the_command_on_the_final_workspace(case: tuple[Path, Path, Path]) -> None:
    cmd = [sys.executable, "check.py"]
    result = evaluate(TestsPass(command=cmd), ev(case), run_command=run)
    assert (result.verdict, result.detail) == ("pass", "exit status 0")
    fixture, _, expected = case
    on_fixture = Evidence(workspace=fixture, fixture=fixture, expected=expected)
    result = evaluate(TestsPass(command=cmd), on_fixture, run_command=run)
    assert (result.verdict, result.detail) == ("fail", "exit status 1")
    seen: list[tuple[list[str], Path]] = []
    evaluate(TestsPass(command=["x"]), ev(case),
             run_command=lambda argv, cwd: seen.append((argv, cwd)) or 0)
    assert seen == [(["x"], case[1])]


def test_file_equals(case: tuple[Path, Path, Path]) -> None:
    assert verdict(FileEquals(path="./src/shop/price.py", expected="src/shop/price.py"),
                   ev(case)) == "pass"
    assert verdict(FileEquals(path="src/shop/api.py", expected="src/shop/api.py"),
                   ev(case)) == "fail"
    result = evaluate(FileEquals(path="old.txt", expected="src/shop/price.py"), ev(case),
                      run_command=run)
    assert (result.verdict, result.detail) == ("fail", "old.txt: absent")
    assert verdict(FileEquals(path="src", expected="src/shop/price.py"), ev(case)) == "fail"


def test_file_equals_refuses_a_missing_expected_file(case: tuple[Path, Path, Path]) -> None:
    with pytest.raises(BoundaryError) as info:
        evaluate(FileEquals(path="a", expected="nothing.py"), ev(case), run_command=run)
    assert info.value.code is Code.BOUNDARY_CASE_INVALID
    fixture, ws, _ = case
    with pytest.raises(BoundaryError) as info:
        evaluate(FileEquals(path="a", expected="a"), Evidence(ws, fixture), run_command=run)
    assert info.value.code is Code.BOUNDARY_CASE_INVALID


def test_file_unchanged(case: tuple[Path, Path, Path]) -> None:
    assert verdict(FileUnchanged(path="src/shop/api.py"), ev(case)) == "pass"
    assert verdict(FileUnchanged(path="never/there.py"), ev(case)) == "pass"  # absent both
    for changed in ("src/shop/price.py", "notes.md", "old.txt"):
        assert verdict(FileUnchanged(path=changed), ev(case)) == "fail"


def test_file_changed(case: tuple[Path, Path, Path]) -> None:
    details = {}
    for path in ("src/shop/price.py", "notes.md", "old.txt"):
        result = evaluate(FileChanged(path=path), ev(case), run_command=run)
        assert result.verdict == "pass"
        details[path] = result.detail
    assert details == {"src/shop/price.py": "src/shop/price.py: bytes differ",
                       "notes.md": "notes.md: created", "old.txt": "old.txt: removed"}
    assert verdict(FileChanged(path="src/shop/api.py"), ev(case)) == "fail"
    assert verdict(FileChanged(path="never/there.py"), ev(case)) == "fail"


def test_forbidden_path_unchanged_file_and_directory(case: tuple[Path, Path, Path]) -> None:
    fixture, ws, _ = case
    assert verdict(ForbiddenPathUnchanged(path="src/shop/api.py"), ev(case)) == "pass"
    assert verdict(ForbiddenPathUnchanged(path="src/shop/price.py"), ev(case)) == "fail"
    # a directory: the __pycache__ the tests left is no change; an edit under it is
    (fixture / "vendor" / "lib").mkdir(parents=True)
    (fixture / "vendor" / "lib" / "x.py").write_text("x")
    shutil.copytree(fixture / "vendor", ws / "vendor")
    (ws / "vendor" / "lib" / "__pycache__").mkdir()
    assert verdict(ForbiddenPathUnchanged(path="vendor"), ev(case)) == "pass"
    (ws / "vendor" / "lib" / "new.py").write_text("added")
    result = evaluate(ForbiddenPathUnchanged(path="vendor/"), ev(case), run_command=run)
    assert (result.verdict, result.detail) == ("fail", "vendor: changed vendor/lib/new.py")
    (ws / "vendor" / "lib" / "new.py").unlink()
    (ws / "vendor" / "lib" / "x.py").unlink()  # removed
    assert verdict(ForbiddenPathUnchanged(path="vendor"), ev(case)) == "fail"
    shutil.rmtree(ws / "vendor")  # the whole directory removed
    assert verdict(ForbiddenPathUnchanged(path="vendor"), ev(case)) == "fail"
    assert verdict(ForbiddenPathUnchanged(path="src/shop"), ev(case)) == "fail"
    assert verdict(ForbiddenPathUnchanged(path="."), ev(case)) == "fail"


def test_artifact_exists(case: tuple[Path, Path, Path]) -> None:
    assert verdict(ArtifactExists(path="notes.md"), ev(case)) == "pass"
    assert verdict(ArtifactExists(path="notes.md", contains="shortcut done"), ev(case)) == "pass"
    result = evaluate(ArtifactExists(path="notes.md", contains="nope"), ev(case),
                      run_command=run)
    assert (result.verdict, result.detail) == ("fail", "notes.md: lacks the text")
    assert verdict(ArtifactExists(path="old.txt"), ev(case)) == "fail"
    assert verdict(ArtifactExists(path="src/shop"), ev(case)) == "fail"


@pytest.mark.parametrize("oracle", [
    FileUnchanged(path="../fixture/src/shop/api.py"),
    FileChanged(path="/etc/passwd"),
    ForbiddenPathUnchanged(path="src/../../x"),
    ArtifactExists(path="a\\b"),
    FileEquals(path="ok.py", expected="../ws/notes.md"),
])
def test_an_escaping_oracle_path_is_refused(case: tuple[Path, Path, Path],
                                            oracle: Oracle) -> None:
    with pytest.raises(BoundaryError) as info:
        evaluate(oracle, ev(case), run_command=run)
    assert info.value.code is Code.BOUNDARY_ACTION_INVALID


def test_a_symlink_out_of_the_workspace_is_refused(case: tuple[Path, Path, Path],
                                                   tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    os.symlink(tmp_path / "secret.txt", case[1] / "leak.txt")
    with pytest.raises(BoundaryError):
        evaluate(ArtifactExists(path="leak.txt"), ev(case), run_command=run)


# -- state oracles --------------------------------------------------------------------------

STATE = DeclaredState(
    keys={"api": "frozen", "shortcut": "pending"}, anchors=["api"],
    failures={"F1": "open", "F2": "retired"}, obligations={"O1": "open", "O2": "done"})


@pytest.mark.parametrize(("oracle", "expected"), [
    (StateKeyEquals(key="api", value="frozen"), "pass"),
    (StateKeyEquals(key="api", value="open"), "fail"),
    (StateKeyEquals(key="nope", value="frozen"), "fail"),
    (AnchorActive(state_key="api"), "pass"),
    (AnchorActive(state_key="shortcut"), "fail"),
    (FailureOpen(failure="F1"), "pass"),
    (FailureOpen(failure="F2"), "fail"),
    (FailureOpen(failure="F9"), "fail"),
    (FailureRetired(failure="F2"), "pass"),
    (FailureRetired(failure="F1"), "fail"),
    (ObligationOpen(obligation="O1"), "pass"),
    (ObligationOpen(obligation="O2"), "fail"),
    (ObligationOpen(obligation="O9"), "fail"),
])
def test_state_oracles(case: tuple[Path, Path, Path], oracle: Oracle, expected: str) -> None:
    assert verdict(oracle, ev(case, state=STATE)) == expected
    result = evaluate(oracle, ev(case), run_command=run)  # the fold declares no state
    assert result.verdict == "not_applicable"


def test_declared_state_decodes_closed() -> None:
    raw = b'{"keys":{"a":"b"},"anchors":["a"],"failures":{"F":"open"},"obligations":{}}'
    assert msgspec.json.decode(raw, type=DeclaredState).anchors == ["a"]
    assert msgspec.json.decode(b"{}", type=DeclaredState) == DeclaredState()
    for bad in (b'{"failures":{"F":"closed"}}', b'{"obligations":{"O":"retired"}}',
                b'{"extra":1}'):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(bad, type=DeclaredState)


# -- recall oracles -------------------------------------------------------------------------


def test_recall_contains(case: tuple[Path, Path, Path]) -> None:
    outs = [RecallOutput("nothing here", [1]), RecallOutput("use the FAST-7 path", [2])]
    assert verdict(RecallContains(text="FAST-7"), ev(case, recall_outputs=outs)) == "pass"
    assert verdict(RecallContains(text="fast-7"), ev(case, recall_outputs=outs)) == "fail"
    assert verdict(RecallContains(text="FAST-7"), ev(case)) == "fail"  # no recall at all


def test_no_cross_session_recall(case: tuple[Path, Path, Path]) -> None:
    outs = [RecallOutput("a", [1]), RecallOutput("b", [1, 2]), RecallOutput("c", [])]
    assert verdict(NoCrossSessionRecall(sessions=[1, 2]), ev(case, recall_outputs=outs)) == "pass"
    result = evaluate(NoCrossSessionRecall(sessions=[1]), ev(case, recall_outputs=outs),
                      run_command=run)
    assert (result.verdict, result.detail) == ("fail", "sessions outside the list: [2]")
    assert verdict(NoCrossSessionRecall(sessions=[1]), ev(case)) == "pass"  # nothing recalled


# -- action oracles -------------------------------------------------------------------------


def _actions() -> list[ActionRecord]:
    log = ActionLog(["read"])
    log.record("read", "read_file", {"path": "src/shop/api.py"}, "v", "v")
    log.record("edit", "write_file", {"path": "./src/shop/price.py", "content": "x"}, "v", "w")
    log.record("test", "run_tests", {"command": ["python", "-m", "pytest", "-q"]}, "t", "t")
    log.record("search", "search", {"query": "Shortcut", "page": 2}, "t", "t")
    log.record("recall", "history_get", {"id": "r-7", "cursor": "c"}, "s", "s")
    return log.records


@pytest.mark.parametrize(("fields", "present"), [
    ({}, True),
    ({"family": "edit"}, True),
    ({"family": "delegate"}, False),
    ({"tool": "write_file"}, True),
    ({"tool": "rm"}, False),
    ({"family": "edit", "target": "src/shop/price.py"}, True),
    ({"family": "edit", "target": "src/./shop/price.py"}, True),  # normalized like actions
    ({"family": "edit", "target": "src/shop/api.py"}, False),
    ({"family": "read", "target": "src/shop/api.py"}, True),
    ({"target": "src/shop/api.py"}, True),  # any family
    ({"tool": "write_file", "target": "src/shop/api.py"}, False),  # every field must match
    ({"family": "test", "target": "python  -m pytest -q"}, True),
    ({"family": "test", "target": "python -m pytest"}, False),
    ({"family": "search", "target": "  SHORTCUT "}, True),
    ({"family": "recall", "target": "r-7"}, True),
    ({"family": "recall", "target": "r-8"}, False),
])
def test_tool_action_present_and_absent(case: tuple[Path, Path, Path],
                                        fields: dict[str, str], present: bool) -> None:
    evidence = ev(case, actions=_actions())
    assert verdict(ToolActionPresent(**fields), evidence) == ("pass" if present else "fail")  # type: ignore[arg-type]
    assert verdict(ToolActionAbsent(**fields), evidence) == ("fail" if present else "pass")  # type: ignore[arg-type]


def test_tool_action_on_an_empty_log(case: tuple[Path, Path, Path]) -> None:
    assert verdict(ToolActionAbsent(), ev(case)) == "pass"
    assert verdict(ToolActionPresent(), ev(case)) == "fail"


def test_tool_action_refuses_an_escaping_target(case: tuple[Path, Path, Path]) -> None:
    with pytest.raises(BoundaryError):
        evaluate(ToolActionAbsent(family="edit", target="../outside.py"), ev(case),
                 run_command=run)


# -- all oracles, the case verdict -------------------------------------------------------------


def test_every_oracle_type_is_covered_and_decodes_from_the_sidecar_shape() -> None:
    raw = [
        {"type": "tests-pass", "command": ["python", "-m", "pytest"]},
        {"type": "file-equals", "path": "a", "expected": "a"},
        {"type": "file-unchanged", "path": "a"},
        {"type": "file-changed", "path": "a"},
        {"type": "forbidden-path-unchanged", "path": "a"},
        {"type": "artifact-exists", "path": "a", "contains": "x"},
        {"type": "state-key-equals", "key": "k", "value": "v"},
        {"type": "anchor-active", "stateKey": "k"},
        {"type": "failure-open", "failure": "f"},
        {"type": "failure-retired", "failure": "f"},
        {"type": "obligation-open", "obligation": "o"},
        {"type": "recall-contains", "text": "t"},
        {"type": "no-cross-session-recall", "sessions": [1]},
        {"type": "tool-action-absent", "family": "edit"},
        {"type": "tool-action-present", "tool": "t", "target": "a"},
    ]
    decoded = msgspec.convert(raw, list[Oracle])
    assert {type(o) for o in decoded} == set(ORACLE_TYPES)


def test_evaluate_all_and_passed(case: tuple[Path, Path, Path]) -> None:
    oracles: list[Oracle] = [
        TestsPass(command=[sys.executable, "check.py"]),
        FileUnchanged(path="src/shop/api.py"),
        ToolActionAbsent(family="edit", target="src/shop/api.py"),
    ]
    results = evaluate_all(oracles, ev(case, actions=_actions()), run)
    assert [r.type for r in results] == ["tests-pass", "file-unchanged", "tool-action-absent"]
    assert passed(results) is True
    with_state = [*oracles, AnchorActive(state_key="api")]
    assert passed(evaluate_all(with_state, ev(case), run)) is None  # n/a, counted apart
    assert passed(evaluate_all(with_state, ev(case, state=STATE), run)) is True
    failing = [*with_state, FileChanged(path="src/shop/api.py")]
    assert passed(evaluate_all(failing, ev(case), run)) is False  # a fail beats n/a
    assert passed([]) is True
    assert passed([OracleResult("x", "not_applicable")]) is None


def test_declared_state_is_the_folds_layer_type() -> None:
    """The oracles read the type the folds layer declares (``efold.folds.state``)."""
    assert DeclaredState is folds_state.DeclaredState
