"""The sidecar's closed schema and rules, and loading a case directory (docs/boundary.md §1-2)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from efold.boundary.case import (
    case_digest,
    load_case,
    load_cases,
    tree_digest,
)
from efold.boundary.errors import BoundaryError
from efold.boundary.sidecar import SOURCE_FORMATS, decode_sidecar, path_problem
from efold.corpus.import_formats import READERS
from efold.errors import Code
from tests.boundary.conftest import CASE_ID, MakeCase, sidecar_data, write_sidecar

ROOT = Path(__file__).resolve().parents[2]


def _encode(data: dict[str, Any]) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


def _refusal(data: bytes) -> BoundaryError:
    with pytest.raises(BoundaryError) as info:
        decode_sidecar(data, "ef-boundary.yml")
    assert info.value.code is Code.BOUNDARY_CASE_INVALID
    assert info.value.detail.startswith("ef-boundary.yml: ")
    return info.value


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``a.b[0].c`` (``None`` value with key ``-`` deletes)."""
    def mutate(data: dict[str, Any]) -> None:
        parts = re.findall(r"[^.\[\]]+", path)
        node: Any = data
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        last = parts[-1]
        if value == "-":
            del node[last]
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return mutate


def test_the_fixture_sidecar_and_the_docs_example_decode() -> None:
    sidecar = decode_sidecar(_encode(sidecar_data()))
    assert sidecar.id == CASE_ID and sidecar.continuation.max_actions == 6
    assert sidecar.tools.test is not None and sidecar.tools.test.timeout_seconds == 60
    doc = (ROOT / "docs" / "boundary.md").read_text(encoding="utf-8")
    example = re.search(r"```yaml\n(version: 1.*?)```", doc, re.S)
    assert example is not None
    documented = decode_sidecar(example.group(1).encode(), "docs/boundary.md")
    assert documented.id == "B01-explicit-api-constraint"
    assert documented.classification.expected_capability == ["constraint-retention"]


def test_defaults_of_the_optional_blocks() -> None:
    data = sidecar_data()
    for key in ("behavior", "recall"):
        del data[key]
    del data["fold"]["repeat"]
    del data["tools"]["edit"]
    sidecar = decode_sidecar(_encode(data))
    assert sidecar.fold.repeat == 1 and sidecar.tools.edit is False
    assert sidecar.behavior.duplicate_rules == [] and sidecar.recall.required is False
    assert sidecar.faux is None


@pytest.mark.parametrize(("mutation", "at", "why"), [
    # the closed schema (msgspec)
    (_set("extra", 1), "$", "unknown field `extra`"),
    (_set("source.extra", 1), "$.source", "unknown field `extra`"),
    (_set("continuation.maxActions", "six"), "$.continuation.maxActions", "Expected `int`"),
    (_set("oracle.success.1.type", "file-looks-fine"), "$.oracle.success[1].type", "Invalid"),
    (_set("oracle.success.1.pathx", "a"), "$.oracle.success[1]", "unknown field `pathx`"),
    (_set("behavior.duplicateRules.0.family", "lookup"), "$.behavior.duplicateRules[0].family",
     "Invalid enum value 'lookup'"),
    (_set("classification.expectedCapability.0", "telepathy"),
     "$.classification.expectedCapability[0]", "Invalid enum value 'telepathy'"),
    (_set("workload", "gaming"), "$.workload", "Invalid enum value"),
    (_set("tier", "-"), "$", "missing required field `tier`"),
    (_set("fold.mode", "branch"), "$.fold.mode", "Invalid enum value"),
    (_set("version", True), "$.version", "Expected `int`"),
    # the rules
    (_set("id", "B1-test"), "$.id", "two digits"),
    (_set("id", "B01-Test"), "$.id", "two digits"),
    (_set("id", "Q01-test"), "$.id", "two digits"),
    (_set("tier", "exploratory"), "$.tier", "an B case is 'hard'"),
    (_set("id", "X01-test"), "$.tier", "an X case is 'exploratory'"),
    (_set("version", 0), "$.version", "0 is outside >= 1"),
    (_set("continuation.maxActions", 0), "$.continuation.maxActions", "outside 1-64"),
    (_set("continuation.maxActions", 65), "$.continuation.maxActions", "outside 1-64"),
    (_set("fold.repeat", 9), "$.fold.repeat", "outside 1-8"),
    (_set("continuation.input", []), "$.continuation.input", "no stimulus"),
    (_set("continuation.input", ["go", "  "]), "$.continuation.input[1]", "empty message"),
    (_set("source.session", "../session.jsonl"), "$.source.session",
     "escapes the case directory"),
    (_set("source.session", "/tmp/session.jsonl"), "$.source.session", "absolute"),
    (_set("source.session", "./session.jsonl"), "$.source.session",
     "write 'session.jsonl'"),
    (_set("source.format", "csv"), "$.source.format", "unknown format 'csv'"),
    (_set("source.boundary", ""), "$.source.boundary", "give 'end'"),
    (_set("source.critical", ["e0001", "e0001"]), "$.source.critical[1]", "named twice"),
    (_set("tools.test.commands", []), "$.tools.test.commands", "no command"),
    (_set("tools.test.commands", [[]]), "$.tools.test.commands[0]", "an empty command"),
    (_set("tools.test.timeoutSeconds", 0), "$.tools.test.timeoutSeconds", "outside 1-600"),
    (_set("tools.test.timeoutSeconds", 601), "$.tools.test.timeoutSeconds", "outside 1-600"),
    (_set("oracle.success.0.command", ["pytest"]), "$.oracle.success[0].command",
     "not one of tools.test.commands"),
    (_set("tools.test", "-"), "$.oracle.success[0].command", "none: no tools.test"),
    (_set("oracle.success", []), "$.oracle.success", "no oracle"),
    (_set("oracle.success.1.path", "../outside.py"), "$.oracle.success[1].path",
     "escapes the workspace"),
    (_set("oracle.success.1.path", "src//shop/api.py"), "$.oracle.success[1].path",
     "write 'src/shop/api.py'"),
    (_set("oracle.success.1.path", "."), "$.oracle.success[1].path", "itself"),
    (_set("oracle.success.1.path", "src\\shop"), "$.oracle.success[1].path", "backslash"),
    (_set("oracle.success.2.expected", "../../etc/passwd"), "$.oracle.success[2].expected",
     "escapes workspace.expected/"),
    (_set("oracle.success.1", {"type": "tool-action-absent"}), "$.oracle.success[1]",
     "name a family, a tool or a target"),
    (_set("oracle.success.1", {"type": "tool-action-present", "family": "edit",
                               "target": "/etc/hosts"}),
     "$.oracle.success[1].target", "absolute"),
    (_set("oracle.success.1", {"type": "recall-contains", "text": ""}),
     "$.oracle.success[1].text", "an empty string"),
    (_set("oracle.success.1", {"type": "anchor-active", "stateKey": ""}),
     "$.oracle.success[1].stateKey", "an empty string"),
    (_set("oracle.success.1", {"type": "no-cross-session-recall", "sessions": []}),
     "$.oracle.success[1].sessions", "list the sessions"),
    (_set("oracle.success.1", {"type": "no-cross-session-recall", "sessions": [1, 0]}),
     "$.oracle.success[1].sessions[1]", "outside >= 1"),
    (_set("recall", {"required": True}), "$.recall.answer", "needs the exact answer"),
    (_set("classification.expectedCapability", []), "$.classification.expectedCapability",
     "at least one capability"),
    (_set("classification.failureSignatures", ["Constraint Missing"]),
     "$.classification.failureSignatures[0]", "not kebab-case"),
    (_set("faux", {"plans": []}), "$.faux.plans", "no plan"),
    (_set("faux", {"plans": [{"actions": []}, {"when": "x", "actions": []}]}),
     "$.faux.plans[0]", "must be the last one"),
    (_set("faux", {"plans": [{"actions": [{"tool": "workspace_read"}]}]}),
     "$.faux.plans[0].actions[0]", "missing required field `arguments`"),
])
def test_refusals_name_the_field(mutation: Callable[[dict[str, Any]], None], at: str,
                                 why: str) -> None:
    data = sidecar_data()
    mutation(data)
    refusal = _refusal(_encode(data))
    assert refusal.detail.endswith(f" - at `{at}`"), refusal.detail
    assert why in refusal.detail, refusal.detail
    assert "\n" not in refusal.detail


def test_a_key_given_twice_refuses_with_its_path() -> None:
    text = _encode(sidecar_data()).decode().replace(
        "  maxActions: 6\n", "  maxActions: 6\n  maxActions: 64\n")
    refusal = _refusal(text.encode())
    assert refusal.detail.endswith("a key given twice - at `$.continuation.maxActions`")


@pytest.mark.parametrize("data", [b"version: [1\n", b"\xff\xfe\x00a", b"- 1\n- 2\n", b""])
def test_what_is_no_sidecar_refuses_on_one_line(data: bytes) -> None:
    refusal = _refusal(data)
    assert "\n" not in refusal.detail


def test_a_faux_script_decodes() -> None:
    data = sidecar_data()
    data["faux"] = {"recall": "public api", "plans": [
        {"when": "never edit src/shop/api.py", "actions": [
            {"tool": "workspace_test", "arguments": {"command": ["python", "-m", "pytest"]}}]},
        {"actions": []}]}
    sidecar = decode_sidecar(_encode(data))
    assert sidecar.faux is not None and sidecar.faux.plans[0].when == "never edit src/shop/api.py"


@pytest.mark.parametrize(("path", "ok"), [
    ("a.py", True), ("src/a.py", True), ("a/../b.py", False), ("./a", False), ("a/", False),
    ("", False), ("..", False), ("a\0b", False),
])
def test_path_problem(path: str, ok: bool) -> None:
    assert (path_problem(path) is None) is ok


def test_source_formats_are_the_corpus_importers_and_efold_trace() -> None:
    assert set(SOURCE_FORMATS) == {"efold-trace"} | set(READERS)


# -- the case directory ----------------------------------------------------------------------


def _case_refusal(path: Path) -> str:
    with pytest.raises(BoundaryError) as info:
        load_case(path)
    assert info.value.code is Code.BOUNDARY_CASE_INVALID
    return info.value.detail


def test_a_valid_case_loads(make_case: MakeCase) -> None:
    path = make_case()
    case = load_case(path)
    assert case.id == CASE_ID and case.version == 1
    assert case.boundary == 4 and [e.id for e in case.prefix] == ["e0001", "e0002", "e0003",
                                                                 "e0004"]
    assert case.workspace == path / "workspace" and case.expected == path / "workspace.expected"
    assert case.sha256 == case_digest(path)


def test_a_boundary_event_splits_the_session(make_case: MakeCase) -> None:
    case = load_case(make_case(_set("source.boundary", "e0003")))
    assert case.boundary == 2 and [e.id for e in case.prefix] == ["e0001", "e0002"]


@pytest.mark.parametrize(("mutation", "why"), [
    (_set("source.boundary", "e0099"), "names no event of session.jsonl - at `$.source.boundary`"),
    (_set("source.boundary", "e0001"), "leaves no event before it"),
    (_set("source.critical", ["e0004"]), None),
    (_set("source.session", "missing.jsonl"), "cannot read the session ($.source.session)"),
    (_set("oracle.success.2.expected", "src/other.py"),
     "workspace.expected/src/other.py is missing or not a regular file - at "
     "`$.oracle.success[2].expected`"),
])
def test_case_refusals(make_case: MakeCase, mutation: Callable[[dict[str, Any]], None],
                       why: str | None) -> None:
    if why is None:  # a critical event at or after the boundary
        path = make_case(lambda d: (mutation(d), _set("source.boundary", "e0004")(d)))
        why = "critical event 'e0004' is no event before the boundary - at " \
              "`$.source.critical[0]`"
    else:
        path = make_case(mutation)
    assert why in _case_refusal(path)


def test_a_session_that_is_no_trace_refuses(make_case: MakeCase) -> None:
    path = make_case()
    (path / "session.jsonl").write_text('{"kind": "message"}\n')
    assert "not a session in format 'efold-trace' (trace_schema_invalid" in _case_refusal(path)


def test_an_imported_session_loads(make_case: MakeCase) -> None:
    path = make_case(_set("source.format", "openai-chat"))
    (path / "session.jsonl").write_text(json.dumps([
        {"role": "user", "content": "Never edit src/shop/api.py."},
        {"role": "assistant", "content": "Understood."},
    ]))
    case = load_case(path)
    assert [e.role for e in case.trace.events] == ["user", "assistant"]
    assert case.trace.header.trace_id == "b01-test-constraint"


def test_missing_workspace_and_sidecar_refuse(make_case: MakeCase, tmp_path: Path) -> None:
    path = make_case()
    (path / "workspace").rename(tmp_path / "aside")
    assert "missing (a case holds its fixture in workspace/)" in _case_refusal(path)
    (path / "ef-boundary.yml").unlink()
    assert "ef-boundary.yml: missing" in _case_refusal(path)


def test_a_symlink_or_fifo_in_the_case_refuses(make_case: MakeCase) -> None:
    path = make_case()
    link = path / "workspace" / "src" / "link.py"
    link.symlink_to(path / "workspace" / "src" / "shop" / "api.py")
    assert "workspace/src/link.py: a symlink" in _case_refusal(path)
    link.unlink()
    os.mkfifo(path / "workspace.expected" / "pipe")
    assert "workspace.expected/pipe: not a regular file or directory" in _case_refusal(path)


def test_the_digest_covers_paths_and_bytes_not_caches(make_case: MakeCase) -> None:
    path = make_case()
    before = case_digest(path)
    (path / "workspace" / "__pycache__").mkdir()
    (path / "workspace" / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"\0")
    (path / "workspace" / ".pytest_cache" / "v").mkdir(parents=True)
    (path / "workspace" / "src" / "shop" / "api.cpython-312.pyc").write_bytes(b"\0")
    assert case_digest(path) == before
    api = path / "workspace" / "src" / "shop" / "api.py"
    api.write_text(api.read_text() + "# edited\n")
    edited = case_digest(path)
    assert edited != before
    api.rename(api.with_name("api2.py"))
    assert case_digest(path) not in (before, edited)
    assert tree_digest(path / "workspace") != tree_digest(path / "workspace.expected")


def test_load_cases_sorts_by_id_and_refuses_duplicates(make_case: MakeCase,
                                                       case_root: Path) -> None:
    make_case(_set("id", "B02-later"), name="a-dir")
    make_case(name="b-dir")
    (case_root / "not-a-case").mkdir()
    (case_root / "notes.txt").write_text("not a case")
    assert [c.id for c in load_cases(case_root)] == [CASE_ID, "B02-later"]
    dup = make_case(name="c-dir")
    with pytest.raises(BoundaryError) as info:
        load_cases(case_root)
    assert info.value.code is Code.BOUNDARY_CASE_INVALID
    assert f"both have id {CASE_ID!r}" in info.value.detail
    write_sidecar(dup, {**sidecar_data(), "id": "B00-first"})
    assert [c.id for c in load_cases(case_root)] == ["B00-first", CASE_ID, "B02-later"]
