"""Action capture (docs/boundary.md §4): normalization, environment versions, duplicates."""

from __future__ import annotations

import hashlib
import json
import os
from fractions import Fraction
from pathlib import Path

import pytest

from efold.boundary.actions import (
    ABSENT,
    TIME_SENSITIVE,
    ActionLog,
    file_version,
    normalize_args,
    normalize_command,
    normalize_path,
    normalize_query,
    tree_entries,
    tree_version,
)
from efold.boundary.errors import BoundaryError
from efold.errors import Code


def _refused(fn: object, *args: object, **kwargs: object) -> BoundaryError:
    assert callable(fn)
    with pytest.raises(BoundaryError) as info:
        fn(*args, **kwargs)
    assert info.value.code is Code.BOUNDARY_ACTION_INVALID
    return info.value


# -- paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "canonical"), [
    ("b.py", "b.py"),
    ("./a/../b.py", "b.py"),
    ("src//shop/./api.py", "src/shop/api.py"),
    ("src/shop/", "src/shop"),
    ("a/b/../../c", "c"),
    (".", "."),
    ("./", "."),
    ("a/..", "."),
    ("..foo/bar", "..foo/bar"),  # a name that starts with dots is a name
    ("sp ace/ü.txt", "sp ace/ü.txt"),
])
def test_normalize_path_canonical(raw: str, canonical: str) -> None:
    assert normalize_path(raw) == canonical


@pytest.mark.parametrize(("raw", "why"), [
    ("..", "escapes"),
    ("../x.py", "escapes"),
    ("a/../../x.py", "escapes"),
    ("./a/b/../../../etc/passwd", "escapes"),
    ("/etc/passwd", "absolute"),
    ("/", "absolute"),
    ("a\x00b", "NUL"),
    ("a\\b.py", "backslash"),
    ("..\\x", "backslash"),
    ("", "empty"),
])
def test_normalize_path_refuses(raw: str, why: str) -> None:
    err = _refused(normalize_path, raw)
    assert why in err.detail
    assert err.detail.startswith("path: ")


def test_normalize_path_refuses_non_string_and_names_the_field() -> None:
    err = _refused(normalize_path, 3, field="args.path")
    assert err.detail.startswith("args.path: ")


def test_normalize_path_is_lexical_never_follows_symlinks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "deep" / "inner").mkdir(parents=True)
    (ws / "b.py").write_text("b")
    os.symlink("deep/inner", ws / "link")
    # Following the link, link/.. is deep/; lexically it is the root: the lexical form wins.
    assert normalize_path("link/../b.py", ws) == "b.py"
    assert normalize_path("link/x.py", ws) == "link/x.py"  # not rewritten to deep/inner/x.py


def test_normalize_path_refuses_a_symlink_out_of_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    os.symlink(outside, ws / "escape")
    os.symlink(outside / "secret.txt", ws / "leak.txt")
    assert normalize_path("escape/secret.txt") == "escape/secret.txt"  # no root: lexical only
    assert "symlink" in _refused(normalize_path, "escape/secret.txt", ws).detail
    _refused(normalize_path, "leak.txt", ws)
    _refused(normalize_path, "escape", ws)


def test_normalize_path_refuses_a_symlink_loop(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink("loop", ws / "loop")
    _refused(normalize_path, "loop/x", ws)


# -- queries, commands, per-family arguments ----------------------------------------------


@pytest.mark.parametrize(("raw", "canonical"), [
    ("  Faster   Shortcut\n", "faster shortcut"),
    ("API\tconstraint", "api constraint"),
    ("already normal", "already normal"),
    ("   ", ""),
])
def test_normalize_query(raw: str, canonical: str) -> None:
    assert normalize_query(raw) == canonical


def test_normalize_query_refuses_non_string() -> None:
    _refused(normalize_query, ["a"])


def test_normalize_command_joins_argv() -> None:
    assert normalize_command(["python", "-m", "pytest", "-q"]) == "python -m pytest -q"
    assert normalize_command("python   -m\tpytest") == "python -m pytest"
    _refused(normalize_command, [])
    _refused(normalize_command, ["python", 3])


@pytest.mark.parametrize("family", ["read", "edit"])
def test_read_edit_args_take_the_canonical_path(family: str) -> None:
    target, args = normalize_args(family, "t", {"path": "./src/../api.py", "new": "x"})  # type: ignore[arg-type]
    assert target == "api.py"
    assert args == {"path": "api.py", "new": "x"}
    assert _refused(normalize_args, family, "t", {"path": "../x"}).detail.startswith("args.path")
    assert "needs 'path'" in _refused(normalize_args, family, "t", {}).detail


def test_search_args_normalize_the_query_and_drop_pagination() -> None:
    target, args = normalize_args("search", "search", {
        "query": " Shortcut  API ", "scope": "workspace", "cursor": "c1", "page": 2,
        "offset": 40, "limit": 20})
    assert target == "shortcut api"
    assert args == {"query": "shortcut api", "scope": "workspace"}
    _, other_page = normalize_args("search", "search", {
        "query": "shortcut api", "scope": "workspace", "page": 3})
    assert other_page == args


@pytest.mark.parametrize("family", ["test", "build"])
def test_test_build_args_join_the_argv(family: str) -> None:
    target, args = normalize_args(family, "run", {"command": ["python", "-m", "pytest"]})  # type: ignore[arg-type]
    assert target == "python -m pytest"
    assert args == {"command": "python -m pytest"}
    target, args = normalize_args(family, "run", {"argv": ["make", "all"]})  # type: ignore[arg-type]
    assert (target, args) == ("make all", {"argv": "make all"})


def test_recall_args_keep_id_depth_offset_drop_cursor() -> None:
    target, args = normalize_args("recall", "history_get",
                                  {"id": "r-12", "depth": 2, "offset": 1, "cursor": "opaque"})
    assert target == "r-12"
    assert args == {"id": "r-12", "depth": 2, "offset": 1}
    target, args = normalize_args("recall", "history_search",
                                  {"query": "  The SHORTCUT ", "limit": 5, "cursor": "x"})
    assert target == "the shortcut"
    assert args == {"query": "the shortcut", "limit": 5}
    _refused(normalize_args, "recall", "history_get", {"id": ""})
    _refused(normalize_args, "recall", "history_get", {"depth": 1})


@pytest.mark.parametrize("family", ["delegate", "other"])
def test_delegate_other_args_as_given(family: str) -> None:
    given = {"Task": "  Keep  Spacing ", "cursor": "kept", "n": [1, 2]}
    target, args = normalize_args(family, "x", given)  # type: ignore[arg-type]
    assert target is None
    assert args == given


def test_unknown_family_and_bad_args_refused() -> None:
    _refused(normalize_args, "write", "t", {"path": "a"})
    _refused(normalize_args, "read", "t", ["path"])
    _refused(normalize_args, "read", "t", {1: "a"})


# -- environment versions -------------------------------------------------------------------


def test_file_version(tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    assert file_version(f) == ABSENT
    assert file_version(tmp_path / "a.py" / "below") == ABSENT
    f.write_bytes(b"x = 1\n")
    assert file_version(f) == hashlib.sha256(b"x = 1\n").hexdigest()
    (f.parent / "sub").mkdir()
    assert file_version(f.parent / "sub") == tree_version(f.parent / "sub")


def test_tree_version_covers_paths_and_bytes_not_caches(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a")
    (ws / "b.txt").write_text("b")
    v0 = tree_version(ws)
    assert set(tree_entries(ws)) == {"b.txt", "src/a.py"}
    for cache in ("__pycache__", ".pytest_cache", "src/__pycache__"):
        (ws / cache).mkdir()
        (ws / cache / "x").write_text("cache")
    (ws / "src" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert tree_version(ws) == v0
    (ws / "src" / "a.py").write_text("A")
    v1 = tree_version(ws)
    assert v1 != v0
    (ws / "src" / "a.py").write_text("a")
    assert tree_version(ws) == v0
    (ws / "src" / "a.py").rename(ws / "src" / "c.py")  # same bytes, another path
    assert tree_version(ws) != v0
    assert tree_version(tmp_path / "missing") == ABSENT


def test_tree_version_counts_a_symlink_by_its_text(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.txt").write_text("1")
    os.symlink(outside, ws / "dirlink")
    os.symlink("nowhere", ws / "dangling")
    entries = tree_entries(ws)
    assert set(entries) == {"dirlink", "dangling"}  # never descends the linked directory
    v = tree_version(ws)
    (outside / "big.txt").write_text("2")
    assert tree_version(ws) == v


# -- the log and duplicates -------------------------------------------------------------------


def test_record_assigns_index_and_canonical_args() -> None:
    log = ActionLog(["read"])
    rec = log.record("read", "read_file", {"path": "./src/../a.py", "b": [1, "é"]}, "v0", "v0")
    assert rec.index == 0
    assert rec.target == "a.py"
    assert rec.args == '{"b":[1,"é"],"path":"a.py"}'
    assert rec.args == json.dumps(json.loads(rec.args), sort_keys=True, separators=(",", ":"),
                                  ensure_ascii=False)
    assert rec.args_sha256 == hashlib.sha256(rec.args.encode()).hexdigest()
    assert (rec.before, rec.after, rec.duplicate, rec.duplicate_of) == ("v0", "v0", False, None)
    assert log.record("search", "grep", {"query": "x"}, "t", "t").index == 1
    assert [r.index for r in log.records] == [0, 1]


def test_same_call_same_environment_is_a_duplicate_of_the_first() -> None:
    log = ActionLog(["read", "test"])
    first = log.record("read", "read_file", {"path": "a.py"}, "v1", "v1")
    second = log.record("read", "read_file", {"path": "./a.py"}, "v1", "v1")  # same normalized
    third = log.record("read", "read_file", {"path": "a.py"}, "v1", "v1")
    assert not first.duplicate
    assert (second.duplicate, second.duplicate_of) == (True, 0)
    assert (third.duplicate, third.duplicate_of) == (True, 0)  # the first occurrence wins
    assert log.duplicate_rate() == Fraction(2, 3)


def test_changed_environment_is_not_a_duplicate() -> None:
    log = ActionLog(["read", "test"])
    log.record("read", "read_file", {"path": "a.py"}, "v1", "v1")
    log.record("edit", "edit_file", {"path": "a.py", "new": "x"}, "v1", "v2")
    reread = log.record("read", "read_file", {"path": "a.py"}, "v2", "v2")
    assert not reread.duplicate  # re-reading after the edit is not duplicate work
    again = log.record("read", "read_file", {"path": "a.py"}, "v2", "v2")
    assert again.duplicate_of == 2
    log.record("test", "run_tests", {"command": ["pytest"]}, "t1", "t1")
    assert not log.record("test", "run_tests", {"command": ["pytest"]}, "t2", "t2").duplicate
    assert log.duplicate_rate() == Fraction(1, 6)


def test_differing_tool_target_or_args_is_not_a_duplicate() -> None:
    log = ActionLog(["read", "search"])
    log.record("read", "read_file", {"path": "a.py"}, "v", "v")
    assert not log.record("read", "cat", {"path": "a.py"}, "v", "v").duplicate
    assert not log.record("read", "read_file", {"path": "b.py"}, "v", "v").duplicate
    assert not log.record("read", "read_file", {"path": "a.py", "lines": 5}, "v", "v").duplicate
    log.record("search", "grep", {"query": "Foo", "scope": "src"}, "t", "t")
    assert not log.record("search", "grep", {"query": "foo", "scope": "tests"}, "t", "t").duplicate
    # pagination does not make a search new work
    assert log.record("search", "grep", {"query": " FOO ", "scope": "src", "page": 2},
                      "t", "t").duplicate_of == 4


def test_families_not_in_the_rules_are_never_duplicates() -> None:
    log = ActionLog(["read"])
    for _ in range(3):
        log.record("test", "run_tests", {"command": ["pytest"]}, "t", "t")
        log.record("delegate", "agent", {"task": "x"}, "d", "d")
    assert not any(r.duplicate for r in log.records)
    assert log.duplicate_rate() == 0
    assert ActionLog().duplicate_rate() == 0  # no rules, no actions


def test_unproven_versions_never_match() -> None:
    log = ActionLog(["search", "read"])
    log.record("search", "web", {"query": "x"}, TIME_SENSITIVE, TIME_SENSITIVE)
    assert not log.record("search", "web", {"query": "x"}, TIME_SENSITIVE, TIME_SENSITIVE).duplicate
    log.record("read", "read_file", {"path": "a"}, None, None)
    assert not log.record("read", "read_file", {"path": "a"}, None, None).duplicate


def test_an_agents_bad_call_is_recorded_as_given() -> None:
    log = ActionLog(["read"])
    rec = log.record("read", "read_file", {"path": "../../etc/passwd"}, None, None)
    assert rec.target is None
    assert rec.args == '{"path":"../../etc/passwd"}'
    assert log.record("read", "read_file", {"arguments": "{not json"}, "v", "v").target is None


def test_log_refuses_what_is_no_call() -> None:
    _refused(ActionLog, ["read", "write"])
    log = ActionLog()
    _refused(log.record, "write", "t", {}, None, None)
    _refused(log.record, "read", "", {"path": "a"}, None, None)
    _refused(log.record, "other", "t", {"x": object()}, None, None)  # not JSON
    assert log.records == []
