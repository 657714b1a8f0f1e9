"""The agent's workspace tools over a real copy: each tool, each refusal, a real pytest
run that passes and then fails after an edit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from efold.boundary.actions import ActionLog
from efold.boundary.errors import BoundaryError
from efold.boundary.workspace import (
    FAMILY_OF,
    MAX_SEARCH_HITS,
    TOOL_SCHEMAS,
    Workspace,
    copy_fixture,
    tool_schemas,
)
from efold.errors import Code

PYTEST = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]


@pytest.fixture
def fixture_dir(tmp_path: Path) -> Path:
    """A tiny package with a test: the fixture a case would ship."""
    src = tmp_path / "fixture"
    (src / "shop").mkdir(parents=True)
    (src / "shop" / "__init__.py").write_text("")
    (src / "shop" / "api.py").write_text(
        "def price(qty):\n    # Stable API: do not rename.\n    return qty * 3\n")
    (src / "tests").mkdir()
    (src / "tests" / "test_api.py").write_text(
        "from shop.api import price\n\n\ndef test_price():\n    assert price(2) == 6\n")
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "blob.bin").write_bytes(b"price\0\xff\xfe")
    return src


@pytest.fixture
def ws(fixture_dir: Path, tmp_path: Path) -> Workspace:
    copy_fixture(fixture_dir, tmp_path / "copy")
    return Workspace(tmp_path / "copy", allowed_commands=[PYTEST], timeout_s=60, edit=True)


def _call(ws: Workspace, name: str, **args: object) -> str:
    output, family, _ = ws.call(name, json.dumps(args))
    assert family == FAMILY_OF[name], output
    return output


# -- the copy ------------------------------------------------------------------------------


def test_copy_fixture_copies_files_and_modes(fixture_dir: Path, tmp_path: Path) -> None:
    copy_fixture(fixture_dir, tmp_path / "copy")
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix()
                    for p in (tmp_path / "copy").rglob("*"))
    assert copied == sorted(p.relative_to(fixture_dir).as_posix() for p in fixture_dir.rglob("*"))
    assert (tmp_path / "copy" / "shop" / "api.py").read_bytes() == (
        fixture_dir / "shop" / "api.py").read_bytes()
    assert os.access(tmp_path / "copy" / "run.sh", os.X_OK)


def test_copy_fixture_refuses_a_symlink(fixture_dir: Path, tmp_path: Path) -> None:
    (fixture_dir / "shop" / "link.py").symlink_to(fixture_dir / "shop" / "api.py")
    with pytest.raises(BoundaryError) as caught:
        copy_fixture(fixture_dir, tmp_path / "copy")
    assert caught.value.code is Code.BOUNDARY_CASE_INVALID
    assert "shop/link.py is a symlink" in caught.value.detail
    assert not (tmp_path / "copy").exists()


def test_copy_fixture_refuses_a_fifo_and_a_file_as_root(fixture_dir: Path,
                                                        tmp_path: Path) -> None:
    with pytest.raises(BoundaryError):
        copy_fixture(fixture_dir / "run.sh", tmp_path / "copy")
    os.mkfifo(fixture_dir / "pipe")
    with pytest.raises(BoundaryError, match="not a regular file"):
        copy_fixture(fixture_dir, tmp_path / "copy")


# -- read and search ------------------------------------------------------------------------


def test_read_whole_file_and_slices(ws: Workspace) -> None:
    assert _call(ws, "workspace_read", path="shop/api.py").startswith("def price(qty):\n")
    assert _call(ws, "workspace_read", path="./shop/../shop/api.py", offset=4, limit=5) == (
        "price\n[59 more characters: read again with offset=9]")
    assert _call(ws, "workspace_read", path="shop/__init__.py") == "(shop/__init__.py is empty)"
    assert "\ufffd" in _call(ws, "workspace_read", path="blob.bin")


def test_read_mistakes_are_answers(ws: Workspace) -> None:
    assert _call(ws, "workspace_read", path="missing.py") == "error: missing.py: no such file"
    assert _call(ws, "workspace_read", path="shop") == "error: shop: not a file"
    assert "past the end" in _call(ws, "workspace_read", path="shop/api.py", offset=10**6)
    output, family, args = ws.call("workspace_read", json.dumps({"path": "a", "limit": 0}))
    assert family == "other" and "invalid arguments" in output and "$.limit" in output
    assert args == {"path": "a", "limit": 0}


def test_search_lines_sorted_case_insensitive(ws: Workspace) -> None:
    assert _call(ws, "workspace_search", query="PRICE") == "\n".join([
        "shop/api.py:1: def price(qty):",
        "tests/test_api.py:1: from shop.api import price",
        "tests/test_api.py:4: def test_price():",
        "tests/test_api.py:5:     assert price(2) == 6",
    ])  # blob.bin is not text: not searched
    assert _call(ws, "workspace_search", query="stable api", path="shop") == (
        "shop/api.py:2:     # Stable API: do not rename.")
    assert _call(ws, "workspace_search", query="nowhere") == "no matches"
    assert _call(ws, "workspace_search", query="  ") == "error: the query is empty"


def test_search_caps_hits(ws: Workspace) -> None:
    (ws.root / "many.txt").write_text("hit\n" * (MAX_SEARCH_HITS + 7))
    lines = _call(ws, "workspace_search", query="hit", path="many.txt").splitlines()
    assert len(lines) == MAX_SEARCH_HITS + 1
    assert lines[0] == "many.txt:1: hit" and lines[-1].startswith("[7 more matches")


# -- write and edit -------------------------------------------------------------------------


def test_write_creates_parents(ws: Workspace) -> None:
    assert _call(ws, "workspace_write", path="docs/new/notes.md", content="é\n") == (
        "wrote docs/new/notes.md (3 bytes)")
    assert (ws.root / "docs" / "new" / "notes.md").read_text() == "é\n"
    assert _call(ws, "workspace_write", path="shop", content="x") == "error: shop: is a directory"


def test_edit_exactly_one_occurrence(ws: Workspace) -> None:
    assert _call(ws, "workspace_edit", path="shop/api.py", old="qty * 3",
                 new="qty * 4") == "edited shop/api.py"
    assert "return qty * 4" in (ws.root / "shop" / "api.py").read_text()
    assert _call(ws, "workspace_edit", path="shop/api.py", old="qty", new="n") == (
        "error: shop/api.py: `old` occurs 2 times; include more context so it occurs once")
    assert _call(ws, "workspace_edit", path="shop/api.py", old="absent", new="n") == (
        "error: shop/api.py: `old` does not occur in the file")
    assert _call(ws, "workspace_edit", path="nope.py", old="a", new="b") == (
        "error: nope.py: no such file")
    assert "not UTF-8" in _call(ws, "workspace_edit", path="blob.bin", old="price", new="x")


def test_editing_disabled_refuses_write_and_edit(fixture_dir: Path, tmp_path: Path) -> None:
    copy_fixture(fixture_dir, tmp_path / "copy")
    ws = Workspace(tmp_path / "copy", allowed_commands=[], timeout_s=5, edit=False)
    before = (ws.root / "shop" / "api.py").read_bytes()
    assert _call(ws, "workspace_write", path="shop/api.py", content="") == (
        "error: editing is not allowed in this workspace")
    assert _call(ws, "workspace_edit", path="shop/api.py", old="qty * 3", new="0") == (
        "error: editing is not allowed in this workspace")
    assert (ws.root / "shop" / "api.py").read_bytes() == before


# -- path refusals --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["../fixture/shop/api.py", "shop/../../x", "/etc/passwd",
                                  "shop\\api.py", ""])
def test_escapes_and_malformed_paths_are_refused(ws: Workspace, path: str) -> None:
    for name, extra in [("workspace_read", {}), ("workspace_write", {"content": "x"}),
                        ("workspace_edit", {"old": "a", "new": "b"}),
                        ("workspace_search", {"query": "price"})]:
        output, family, args = ws.call(name, json.dumps({"path": path, **extra}))
        assert output.startswith("error: ") and family == "other", (name, output)
        assert args["path"] == path
    assert not (ws.root.parent / "x").exists()


def test_a_symlink_planted_in_the_copy_is_not_followed_out(ws: Workspace,
                                                           tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("price secret\n")
    (ws.root / "leak.txt").symlink_to(secret)
    (ws.root / "out").symlink_to(tmp_path)
    (ws.root / "inner.py").symlink_to(ws.root / "shop" / "api.py")
    for path in ["leak.txt", "out/outside.txt"]:
        output = _call_other(ws, "workspace_read", path=path)
        assert "path outside the workspace" in output and "secret" not in output
        _call_other(ws, "workspace_write", path=path, content="overwritten")
    assert secret.read_text() == "price secret\n"
    assert "secret" not in _call(ws, "workspace_search", query="secret")
    # A symlink that stays inside the root is followed.
    assert _call(ws, "workspace_read", path="inner.py").startswith("def price")


def _call_other(ws: Workspace, name: str, **args: object) -> str:
    output, family, _ = ws.call(name, json.dumps(args))
    assert family == "other" and output.startswith("error: "), output
    return output


# -- dispatch -------------------------------------------------------------------------------


def test_call_bad_json_unknown_tool_wrong_arguments(ws: Workspace) -> None:
    assert ws.call("workspace_read", "{not json") == (
        "error: the arguments are not valid JSON", "other", {"arguments": "{not json"})
    assert ws.call("shell", '{"cmd": "ls"}') == ("error: unknown tool 'shell'", "other",
                                                {"cmd": "ls"})
    output, family, _ = ws.call("workspace_read", '["a"]')
    assert family == "other" and output == "error: the arguments must be a JSON object"
    output, family, _ = ws.call("workspace_read", '{"path": "a", "extra": 1}')
    assert family == "other" and "extra" in output


def test_call_fills_defaults_and_feeds_the_action_log(ws: Workspace) -> None:
    log = ActionLog(["read"], workspace_root=ws.root)
    for arguments in ['{"path": "shop/api.py"}', '{"path": "./shop/api.py", "offset": 0}']:
        _, family, args = ws.call("workspace_read", arguments)
        log.record(family, "workspace_read", args, "v1", "v1")
    assert args == {"path": "./shop/api.py", "offset": 0, "limit": 20000}
    assert [r.duplicate_of for r in log.records] == [None, 0]
    for name in FAMILY_OF:  # every refused call is still loggable
        _, family, args = ws.call(name, '{"path": "../x", "query": "q", "command": ["x"]}')
        log.record(family, name, args, None, None)


def test_schemas_name_every_tool() -> None:
    assert [s["name"] for s in TOOL_SCHEMAS] == list(FAMILY_OF)
    assert all(s["type"] == "function" and s["parameters"]["type"] == "object"
               for s in TOOL_SCHEMAS)
    copied = tool_schemas()
    copied[0]["name"] = "changed"
    assert TOOL_SCHEMAS[0]["name"] == "workspace_read"


# -- test -----------------------------------------------------------------------------------


def test_only_allowed_commands_run(ws: Workspace) -> None:
    output = _call(ws, "workspace_test", command=["python", "-c", "print('pwned')"])
    assert output == ("error: command not allowed; allowed commands: "
                      "python -m pytest -q -p no:cacheprovider")
    assert _call(ws, "workspace_test", command=["python", "-m", "pytest"]).startswith(
        "error: command not allowed")


def test_a_real_pytest_run_passes_then_fails_after_an_edit(ws: Workspace) -> None:
    passed = _call(ws, "workspace_test", command=PYTEST)
    assert passed.startswith("exit 0\n") and "1 passed" in passed
    assert _call(ws, "workspace_edit", path="shop/api.py", old="qty * 3",
                 new="qty * 5") == "edited shop/api.py"
    failed = _call(ws, "workspace_test", command=PYTEST)
    assert failed.startswith("exit 1\n") and "1 failed" in failed and "assert 10 == 6" in failed
    assert not list(ws.root.rglob("__pycache__"))  # PYTHONDONTWRITEBYTECODE in the runner


def test_a_hanging_test_is_timed_out(fixture_dir: Path, tmp_path: Path) -> None:
    copy_fixture(fixture_dir, tmp_path / "copy")
    (tmp_path / "copy" / "tests" / "test_api.py").write_text(
        "import time\n\n\ndef test_hang():\n    print('started', flush=True)\n"
        "    time.sleep(60)\n")
    # The test hangs for 60 s; the timeout leaves pytest time to start and print even
    # on a loaded machine (it failed there at 1.5 s, before "started" was printed).
    ws = Workspace(tmp_path / "copy", allowed_commands=[[*PYTEST, "-s"]], timeout_s=8.0,
                   edit=False)
    output = _call(ws, "workspace_test", command=[*PYTEST, "-s"])
    assert output.startswith("timed out\n") and "started" in output
