"""``efold-controller corpus import``: real transcripts (five formats) become traces.

Fixtures under ``data/imports/`` follow the formats as their sources define them (see
the docstrings of ``efold.corpus.import_openai``, ``import_anthropic`` and
``import_agents``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from efold.controller.cli import main
from efold.controller.commands._corpus_import import import_file
from efold.corpus.codec import dump_trace, load_trace
from efold.corpus.credentials import contains_credential_assignment, credential_value_spans
from efold.corpus.import_agents import read_codex
from efold.corpus.import_openai import read_openai_chat
from efold.corpus.imports import (
    REDACTED,
    Imported,
    Message,
    Origin,
    Transcript,
    to_trace,
    trace_id_for,
)
from efold.corpus.imports import redact_arguments as _redact_arguments
from efold.corpus.imports import redact_text as _redact_text
from efold.corpus.model import Trace
from efold.errors import Code, EfoldError
from efold.folds.fold import TracePrefix
from efold.folds.registry import get_fold

DATA = Path(__file__).parent / "data" / "imports"
CLAUDE = DATA / "7f3c2a10-5b8e-4d21-9c4e-0a1b2c3d4e5f.jsonl"
CODEX = DATA / "rollout-2025-10-29T00-59-38-019a2d7a-41c4-78b1-b7cc-a45d62a89cd5.jsonl"
CODEX_OLD = DATA / "rollout-2025-05-07T17-24-21-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl"
FIXTURES = [
    ("openai-chat", DATA / "openai-request.json"),
    ("openai-chat", DATA / "openai-chat.jsonl"),
    ("anthropic", DATA / "anthropic-request.json"),
    ("claude-code", CLAUDE),
    ("codex", CODEX),
    ("codex", CODEX_OLD),
    ("pi", DATA / "pi-session.jsonl"),
]
ARMS = ("native", "cold-rebuild", "compaction", "compaction-2", "store", "pack")


def redact_text(text: str) -> tuple[str, int]:
    return _redact_text(text)


def redact_arguments(arguments: str) -> tuple[str, int]:
    return _redact_arguments(arguments)


def trace_of(transcript: Transcript, name: str = "t") -> Imported:
    return to_trace(transcript, trace_id=name, family="f", title=name, name=name)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["corpus", "import", *args])
    return result.exit_code, result.stdout, result.stderr


def shape(trace: Trace) -> list[tuple[str, str, list[str], str | None, str | None]]:
    """(role, content, call names, tool_call_id, name) of every event."""
    return [(e.role, e.content, [c.function.name for c in e.tool_calls or ()], e.tool_call_id, e.name)
            for e in trace.events]


def refusal(tmp_path: Path, fmt: str, file_name: str, text: str) -> str:
    """The detail of the refusal importing ``text``; nothing may be written."""
    path = tmp_path / file_name
    path.write_text(text)
    with pytest.raises(EfoldError) as caught:
        import_file(fmt, path)
    assert caught.value.code is Code.CORPUS_IMPORT_INVALID
    return caught.value.detail


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


# --- invariants every import keeps ----------------------------------------------------


@pytest.mark.parametrize(("fmt", "path"), FIXTURES, ids=lambda v: getattr(v, "name", v))
def test_every_fixture_imports_into_a_well_formed_trace(fmt: str, path: Path) -> None:
    item = import_file(fmt, path)
    header, events = item.trace.header, item.trace.events
    assert (header.suite, header.family, header.fictional, header.title, header.seed) == \
        ("imported", fmt, False, path.name, None)
    assert header.trace_id == trace_id_for(path.stem)
    assert [e.id for e in events] == [f"e{n:04d}" for n in range(1, len(events) + 1)]
    assert header.sessions == events[-1].session
    calls: dict[str, str] = {}
    for previous, event in zip([None, *events], events, strict=False):
        assert not event.steer and isinstance(event.content, str)
        if previous is not None:
            assert event.session >= previous.session and event.day >= previous.day
        for call in event.tool_calls or ():
            assert event.role == "assistant" and call.id not in calls
            json.loads(call.function.arguments)
            calls[call.id] = call.function.name
        if event.role == "tool":
            assert event.source is None and event.name == calls[event.tool_call_id or ""]
    assert sorted(calls) == sorted(e.tool_call_id or "" for e in events if e.role == "tool")
    # The bytes written round-trip through the strict loader.
    assert load_trace(dump_trace(item.trace)) == item.trace


@pytest.mark.parametrize(("fmt", "path"), FIXTURES, ids=lambda v: getattr(v, "name", v))
def test_every_fixture_satisfies_the_user_suite_loaders_imported_shape(fmt: str, path: Path) -> None:
    user_suite = pytest.importorskip("efold.corpus.user_validation")
    assert user_suite.trace_problems(import_file(fmt, path).trace) == []


def test_whitespace_only_messages_are_dropped_and_nameless_calls_refuse(tmp_path: Path) -> None:
    rows = [{"role": "user", "content": "go"}, {"role": "user", "content": " \n"},
            {"role": "assistant", "content": "  "}, {"role": "assistant", "content": "done"}]
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    item = import_file("openai-chat", path)
    assert len(item.trace.events) == 2
    assert item.dropped == {"empty assistant message": 1, "empty user message": 1}
    call = {"id": "c", "type": "function", "function": {"name": " ", "arguments": "{}"}}
    detail = refusal(tmp_path, "openai-chat", "n.json",
                     json.dumps([{"role": "user", "content": "a"},
                                 {"role": "assistant", "tool_calls": [call]}]))
    assert detail == "n.json:1: [1]: a tool call without an id or a name"


@pytest.mark.parametrize(("fmt", "path"), FIXTURES, ids=lambda v: getattr(v, "name", v))
def test_every_builtin_fold_arm_builds_an_imported_trace(fmt: str, path: Path) -> None:
    prefix = TracePrefix.of(import_file(fmt, path).trace)
    for arm in ARMS:
        assert get_fold(arm).build(prefix).messages, arm


def test_fold_arms_build_a_large_import_with_parallel_calls_past_the_compaction_trigger() -> None:
    messages: list[dict[str, Any]] = []
    for i in range(60):
        messages.append({"role": "user", "content": f"Turn {i}: check module m{i}."})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}a", "type": "function",
             "function": {"name": "read", "arguments": json.dumps({"path": f"m{i}.py"})}},
            {"id": f"c{i}b", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}a", "content": "code line\n" * 120})
        if i % 3:  # every third grep call stays unanswered
            messages.append({"role": "tool", "tool_call_id": f"c{i}b", "content": "match " * 50})
        messages.append({"role": "assistant", "content": f"Module m{i} is fine."})
    transcript = read_openai_chat(json.dumps(messages).encode(), "big.json")
    item = trace_of(transcript, "big")
    assert item.tool_calls == 100 and item.unanswered_calls == 20  # unanswered: dropped
    assert item.dropped == {"tool call without result": 20}
    prefix = TracePrefix.of(item.trace)
    compacted = get_fold("compaction").build(prefix)
    assert len(compacted.messages) < len(item.trace.events)  # the trigger was passed
    for arm in ARMS:
        get_fold(arm).build(prefix)


# --- each format ------------------------------------------------------------------------


def test_openai_request_body_keeps_parallel_calls_together_and_looks_up_tool_names() -> None:
    item = import_file("openai-chat", DATA / "openai-request.json")
    assert shape(item.trace) == [
        ("user", f"Check CI for the release branch and the open PRs. The staging API key is "
                 f"{REDACTED}, keep it out of logs.", [], None, None),
        ("assistant", "", ["ci_status", "list_prs"], None, None),
        ("tool", "release/2.4: 41 passed, 1 failed (test_upload_retry)", [], "call_Vx1", "ci_status"),
        ("tool", "#812 Fix upload retry\n#815 Bump msgspec", [], "call_Vx2", "list_prs"),
        ("assistant", "CI on release/2.4 has one failure: test_upload_retry. PR #812 fixes it.",
         [], None, None),
        ("user", "Here is the failing screenshot.\n[image]", [], None, None),
        # call_Vx3 has no result: dropped, the text stays
        ("assistant", "Thanks, that matches the retry timeout.", [], None, None),
    ]
    assert item.dropped == {"developer message": 1, "system message": 1,
                            "tool call without result": 1}
    assert (item.tool_calls, item.unanswered_calls, item.redactions) == (2, 1, 2)
    assert item.trace.events[1].tool_calls is not None
    assert item.trace.events[1].tool_calls[1].function.arguments == \
        '{"state":"open","token":"[redacted]"}'


def test_openai_jsonl_keeps_tool_results_verbatim_even_with_a_credential() -> None:
    item = import_file("openai-chat", DATA / "openai-chat.jsonl")
    result = item.trace.events[2]
    assert result.role == "tool" and "Temporary password: Qz7-29xk" in result.content
    assert item.redactions == 0 and item.dropped == {"system message": 1}


def test_anthropic_tool_results_precede_the_user_text_and_thinking_is_dropped() -> None:
    item = import_file("anthropic", DATA / "anthropic-request.json")
    assert shape(item.trace)[1:5] == [
        ("assistant", "Let me run the tests and read the Makefile.", ["bash", "read_file"], None, None),
        ("tool", "[error] make: *** [test] Error 2", [], "toolu_01A", "bash"),
        ("tool", "test:\n\tpytest -x", [], "toolu_01B", "read_file"),
        ("user", "Also see the screenshot.\n[image]", [], None, None),
    ]
    assert item.trace.events[6].content == "[document]\nHere is the CI log."
    calls = item.trace.events[1].tool_calls or []
    assert calls[0].function.arguments == '{"command":"make test"}'
    assert item.dropped == {"redacted_thinking block": 1, "system prompt": 1, "thinking block": 1}
    assert item.trace.events[0].content.startswith("Why does `make test` fail? My sudo password is "
                                                   f"{REDACTED},")


def test_claude_code_merges_split_assistant_lines_and_places_sessions_by_timestamp() -> None:
    item = import_file("claude-code", CLAUDE)
    events = item.trace.events
    assert shape(item.trace)[1] == ("assistant", "I'll look at the test and its recent runs.",
                                    ["Read", "Bash"], None, None)
    assert [(e.session, e.day) for e in events] == \
        [(1, 1)] * 5 + [(2, 1)] * 6 + [(3, 2)]  # 8.5 h gap; then the next UTC day
    assert item.trace.header.sessions == 3
    assert events[9].content == "[error] Exit code 1\nfailed: connection refused"
    assert all("subagent" not in e.content and "/clear" not in e.content for e in events)
    assert item.dropped == {"meta line": 1, "sidechain line": 1, "summary line": 1,
                            "system line": 1, "thinking block": 1, "tool call without result": 1}
    # The session ends on a call whose result never came: the call (and its event) goes.
    assert (item.tool_calls, item.unanswered_calls, item.redactions) == (4, 1, 1)
    assert events[-1].content == "Server is up now, try again."
    assert f"token={REDACTED} is in .env" in events[0].content


def test_codex_rollout_attaches_calls_to_the_assistant_turn_and_skips_duplicates() -> None:
    item = import_file("codex", CODEX)
    got = shape(item.trace)
    assert [r for r, *_ in got] == ["user", "user", "assistant", "tool", "tool", "assistant", "tool",
                                    "assistant", "user"]  # call_kF3a, unanswered, dropped
    assert got[2][2] == ["shell", "shell"] and got[5][2] == ["apply_patch"]
    patch = (item.trace.events[5].tool_calls or [])[0].function.arguments
    assert json.loads(patch)["input"].startswith("*** Begin Patch\n")
    assert got[6][3:] == ("call_pT9c", "apply_patch")
    assert [e.session for e in item.trace.events] == [1] * 8 + [2]
    assert item.dropped == {"developer message": 1, "event_msg line": 3, "reasoning item": 1,
                            "session_meta line": 1, "tool call without result": 1,
                            "turn_context line": 1}
    assert "password: [redacted] if" in item.trace.events[1].content


def test_codex_older_rollout_format_is_read() -> None:
    item = import_file("codex", CODEX_OLD)
    assert shape(item.trace) == [
        ("user", "List the test files.", [], None, None),
        ("assistant", "", ["local_shell"], None, None),
        ("tool", "test_upload.py\ntest_kiln.py", [], "call_ls1", "local_shell"),
        ("assistant", "There are two: test_upload.py and test_kiln.py.", [], None, None),
    ]
    assert json.loads((item.trace.events[1].tool_calls or [])[0].function.arguments)["command"] == \
        ["ls", "tests"]
    assert {(e.session, e.day) for e in item.trace.events} == {(1, 1)}  # no per-line timestamps
    assert item.dropped == {"reasoning item": 1, "session_meta line": 1, "state record": 2}


def test_codex_function_output_as_content_items() -> None:
    rows = [
        {"timestamp": "2025-10-29T01:00:00Z", "type": "response_item", "payload": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}},
        {"timestamp": "2025-10-29T01:00:01Z", "type": "response_item", "payload": {
            "type": "function_call", "name": "view", "arguments": "{}", "call_id": "c1"}},
        {"timestamp": "2025-10-29T01:00:02Z", "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "c1",
            "output": [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "x"}]}},
    ]
    transcript = read_codex("".join(json.dumps(r) + "\n" for r in rows).encode(), "r.jsonl")
    assert transcript.messages[2].content == "a\n[image]"


def test_pi_keeps_the_branch_that_ends_the_file() -> None:
    item = import_file("pi", DATA / "pi-session.jsonl")
    assert shape(item.trace) == [
        ("user", "Count the TODOs in src/.", [], None, None),
        ("user", "Only count TODOs in upload.py, and show them.", [], None, None),
        ("assistant", "", ["read"], None, None),
        ("tool", "# TODO: retry with backoff", [], "toolu_pi2", "read"),
        ("assistant", 'One: "retry with backoff" in upload.py.', [], None, None),
    ]
    assert item.dropped == {"bashExecution message": 1, "branch_summary entry": 1,
                            "model_change entry": 1, "off-branch entry": 3, "session header": 1,
                            "thinking_level_change entry": 1}


# --- sessions, days, ids -----------------------------------------------------------------


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_sessions_and_days_never_decrease_and_untimed_messages_keep_the_latest() -> None:
    stamps = ["2031-03-01T23:00:00+00:00", None, "2031-03-02T00:30:00+00:00",
              "2031-03-01T22:00:00+00:00",  # clock went back: nothing moves back
              "2031-03-02T07:00:00+00:00",  # 6.5 h after the latest: a new session
              "2031-03-02T13:00:00+00:00",  # exactly 6 h: the same session
              "2031-03-05T09:00:00-05:00"]
    transcript = Transcript([Message("user", f"m{i}", Origin(i + 1),
                                     timestamp=None if s is None else _at(s))
                             for i, s in enumerate(stamps)])
    trace = trace_of(transcript).trace
    assert [(e.session, e.day) for e in trace.events] == \
        [(1, 1), (1, 1), (1, 2), (1, 2), (2, 2), (2, 2), (3, 5)]
    assert trace.header.sessions == 3


def test_event_ids_widen_past_9999_events() -> None:
    transcript = Transcript([Message("user", "x", Origin(1))] * 10_000)
    events = trace_of(transcript).trace.events
    assert (events[0].id, events[-1].id) == ("e00001", "e10000")


@pytest.mark.parametrize(("stem", "expected"), [
    ("Rollout 2025_10_29 T00:59", "rollout-2025-10-29-t00-59"),
    ("--Weird__NAME--", "weird-name"),
    ("a" * 70, "a" * 64),
    ("x" * 63 + "-y", "x" * 63),
])
def test_trace_id_from_the_file_stem(stem: str, expected: str) -> None:
    assert trace_id_for(stem) == expected


def test_a_stem_with_no_usable_character_refuses() -> None:
    with pytest.raises(EfoldError) as caught:
        trace_id_for("___")
    assert caught.value.code is Code.CORPUS_IMPORT_INVALID


# --- privacy ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected", "count"), [
    ("Temporary password: Qz7-29xk", f"Temporary password: {REDACTED}", 1),
    ("the access token=AbCd1234.", f"the access token={REDACTED}.", 1),
    ("the temporary password is Qz7-29xk", f"the temporary password is {REDACTED}", 1),
    ("the password is required", "the password is required", 0),
    ("api_key: k1 and PIN: 4412", f"api_key: {REDACTED} and PIN: {REDACTED}", 2),
    (f"password: {REDACTED}", f"password: {REDACTED}", 0),
    ("no secrets here", "no secrets here", 0),
])
def test_redaction_replaces_only_the_credential_value(text: str, expected: str, count: int) -> None:
    assert redact_text(text) == (expected, count)


@pytest.mark.parametrize("text", [
    "Temporary password: x", "password is hunter2", "the password is required", "PIN code 1234",
    "token = 'Zz9'", "my passport is here", "secretkey=abc", "Passwords: see the vault",
    "sign-in code was 99-AB", "credentials set to Kx8!", "nothing", "pin it is",
])
def test_redaction_agrees_with_the_retention_rule(text: str) -> None:
    assert bool(credential_value_spans(text)) == contains_credential_assignment(text)


def test_json_arguments_are_redacted_value_by_value() -> None:
    arguments = json.dumps({"password": "hunter2", "pin": 1234, "cmd": "export TOKEN=abc9",
                            "nested": [{"api_key": "k"}], "ok": "fine", "flag": True})
    redacted, count = redact_arguments(arguments)
    assert json.loads(redacted) == {"password": REDACTED, "pin": REDACTED,
                                    "cmd": f"export TOKEN={REDACTED}",
                                    "nested": [{"api_key": REDACTED}], "ok": "fine", "flag": True}
    assert count == 4
    assert redact_arguments('{"a": 1}') == ('{"a": 1}', 0)  # untouched when clean
    assert redact_arguments("password=x y") == (f"password={REDACTED} y", 1)  # not JSON


# --- refusals -------------------------------------------------------------------------------


def test_malformed_json_document_names_the_decoder_line(tmp_path: Path) -> None:
    detail = refusal(tmp_path, "anthropic", "bad.json", '{\n  "messages": [\n    {"role": "user",,}\n  ]\n}\n')
    assert detail.startswith("bad.json:3: malformed JSON")


def test_malformed_jsonl_line_names_its_line(tmp_path: Path) -> None:
    good = json.dumps({"type": "user", "message": {"role": "user", "content": "hi"}})
    detail = refusal(tmp_path, "claude-code", "s.jsonl", f"{good}\n\n{good}\n{{oops\n")
    assert detail.startswith("s.jsonl:4: malformed JSON")
    detail = refusal(tmp_path, "openai-chat", "c.jsonl",
                     '{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"\n')
    assert detail.startswith("c.jsonl:2: malformed JSON")


def test_tool_result_for_an_unknown_call_names_the_message_and_its_line(tmp_path: Path) -> None:
    document = {"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_00", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "?"}]},
    ]}
    text = json.dumps(document, indent=2)
    detail = refusal(tmp_path, "anthropic", "file.json", text)
    line = line_of(text, '"tool_result"') - 4  # the message object opens 4 lines above
    assert detail == f"file.json:{line}: messages[2]: tool result for unknown call 'toolu_01'"


@pytest.mark.parametrize(("fmt", "text", "needle"), [
    ("openai-chat", '[{"role": "critic", "content": "x"}]', "unknown role 'critic'"),
    ("openai-chat", '[{"role": "user", "content": [{"type": "video", "video": 1}]}]',
     "unknown content part type 'video'"),
    ("anthropic", '[{"role": "user", "content": [{"type": "hologram"}]}]',
     "unknown content block type 'hologram'"),
    ("anthropic", '[{"role": "system", "content": "x"}]', "unknown role 'system'"),
    ("codex", '{"timestamp": "2025-01-01T00:00:00Z", "type": "response_item", '
              '"payload": {"type": "teleport"}}', "unknown response item type 'teleport'"),
    ("pi", '{"type": "message", "id": "a", "parentId": null, "timestamp": "2025-01-01T00:00:00Z", '
           '"message": {"role": "user", "content": [{"type": "sound"}]}}',
     "unknown content block type 'sound'"),
])
def test_unknown_roles_and_block_types_refuse(tmp_path: Path, fmt: str, text: str, needle: str) -> None:
    assert needle in refusal(tmp_path, fmt, "t.json", text + "\n")


def test_a_repeated_call_id_refuses(tmp_path: Path) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    rows = [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "r"},
            {"role": "assistant", "tool_calls": [call]}]
    detail = refusal(tmp_path, "openai-chat", "r.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert detail == "r.jsonl:4: call id 'call_1' repeats"


def test_a_second_result_for_one_call_refuses(tmp_path: Path) -> None:
    rows = [{"role": "user", "content": "a"},
            {"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"},
            {"role": "tool", "tool_call_id": "c", "content": "r"}]
    detail = refusal(tmp_path, "openai-chat", "r.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert detail == "r.jsonl:4: a second result for call 'c'"


@pytest.mark.parametrize(("fmt", "text"), [
    ("openai-chat", '[{"role": "system", "content": "only a prompt"}]'),
    ("anthropic", '{"system": "s", "messages": []}'),
    ("claude-code", '{"type": "summary", "summary": "s", "leafUuid": "u"}'),
    ("openai-chat", "  \n"),
    ("anthropic", '[{"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]}]'),
])
def test_an_empty_transcript_refuses(tmp_path: Path, fmt: str, text: str) -> None:
    assert "no user or assistant message" in refusal(tmp_path, fmt, "e.json", text + "\n")


def test_a_transcript_that_is_not_a_message_list_refuses(tmp_path: Path) -> None:
    assert "expected a JSON array of messages" in refusal(tmp_path, "anthropic", "x.json", '{"a": 1}')


def test_an_unreadable_timestamp_refuses(tmp_path: Path) -> None:
    line = {"type": "user", "timestamp": "yesterday", "message": {"role": "user", "content": "hi"}}
    assert "s.jsonl:1: unreadable timestamp 'yesterday'" == \
        refusal(tmp_path, "claude-code", "s.jsonl", json.dumps(line) + "\n")


def test_cli_refuses_duplicate_ids_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "Chat.json").write_text('[{"role": "user", "content": "hi"}]')
    out = tmp_path / "out"
    code, _, stderr = run("openai-chat", str(tmp_path / "a" / "Chat.json"),
                          str(tmp_path / "b" / "Chat.json"), "--out", str(out))
    assert code == 2 and "refused: corpus_import_invalid" in stderr
    assert "both map to trace id 'chat'" in stderr and not out.exists()


def test_cli_refuses_an_existing_output_file_before_writing_any(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "pi-session.jsonl").write_text("keep me\n")
    code, _, stderr = run("codex", str(CODEX), "--out", str(out))
    assert code == 0
    code, _, stderr = run("pi", str(DATA / "pi-session.jsonl"), "--out", str(out))
    assert code == 2 and "corpus_import_invalid" in stderr and "exists" in stderr
    assert (out / "pi-session.jsonl").read_text() == "keep me\n"
    # A second run of the codex import refuses too, and the batch writes nothing.
    code, _, stderr = run("codex", str(CODEX_OLD), str(CODEX), "--out", str(out))
    assert code == 2 and "exists" in stderr
    assert not (out / f"{trace_id_for(CODEX_OLD.stem)}.jsonl").exists()


def test_cli_id_option_needs_one_file_and_a_valid_id(tmp_path: Path) -> None:
    code, _, stderr = run("codex", str(CODEX), str(CODEX_OLD), "--id", "x", "--out", str(tmp_path))
    assert code == 2 and "--id needs exactly one FILE" in stderr
    code, _, stderr = run("codex", str(CODEX), "--id", "-Bad", "--out", str(tmp_path))
    assert code == 2 and "corpus_import_invalid" in stderr
    code, stdout, _ = run("codex", str(CODEX), "--id", "codex-1", "--out", str(tmp_path))
    assert code == 0 and stdout.startswith("codex-1  9 events")
    assert load_trace((tmp_path / "codex-1.jsonl").read_bytes()).header.trace_id == "codex-1"


# --- the command, as a process ----------------------------------------------------------


def _controller(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", "corpus", "import", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_command_imports_and_prints_a_line_per_trace(tmp_path: Path) -> None:
    out = tmp_path / "traces"
    done = _controller("claude-code", str(CLAUDE), "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("7f3c2a10-5b8e-4d21-9c4e-0a1b2c3d4e5f  12 events  4 tool calls  "
                        "1 redactions  6 dropped (meta line 1, sidechain line 1, summary line 1, "
                        "system line 1, thinking block 1, tool call without result 1)")
    assert "probes.toml" in lines[-1]
    written = out / "7f3c2a10-5b8e-4d21-9c4e-0a1b2c3d4e5f.jsonl"
    assert oct(os.stat(written).st_mode & 0o777) == oct(0o644)
    assert load_trace(written.read_bytes()) == import_file("claude-code", CLAUDE).trace


def test_the_command_refuses_malformed_json_with_its_line_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('[\n  {"role": "user", "content": "hi"},\n  {"role": "assistant" "content": "x"}\n]\n')
    out = tmp_path / "traces"
    done = _controller("openai-chat", str(DATA / "openai-chat.jsonl"), str(bad), "--out", str(out))
    assert done.returncode == 2
    assert done.stderr.startswith("refused: corpus_import_invalid (broken.json:3: malformed JSON")
    assert not out.exists()


def test_imported_count_fields_are_consistent() -> None:
    item: Imported = import_file("openai-chat", DATA / "openai-request.json")
    calls = sum(len(e.tool_calls or ()) for e in item.trace.events)
    results = sum(e.role == "tool" for e in item.trace.events)
    assert item.tool_calls == calls == results
    assert item.unanswered_calls == item.dropped["tool call without result"] == 1


def test_naive_timestamps_are_taken_as_utc(tmp_path: Path) -> None:
    rows = [{"type": "user", "timestamp": "2031-01-01T23:30:00", "message": {"role": "user", "content": "a"}},
            {"type": "user", "timestamp": "2031-01-02T00:30:00Z", "message": {"role": "user", "content": "b"}}]
    path = tmp_path / "n.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    events = import_file("claude-code", path).trace.events
    assert [(e.session, e.day) for e in events] == [(1, 1), (1, 2)]


def test_text_encodings(tmp_path: Path) -> None:
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf[{"role": "user", "content": "hi"}]')
    assert import_file("openai-chat", bom).trace.events[0].content == "hi"
    bad = tmp_path / "latin.jsonl"
    bad.write_bytes(b'{"role": "user", "content": "a"}\n{"role": "user", "content": "caf\xe9"}\n')
    with pytest.raises(EfoldError) as caught:
        import_file("openai-chat", bad)
    assert caught.value.detail == "latin.jsonl:2: not UTF-8 text"
    detail = refusal(tmp_path, "openai-chat", "s.json",
                     '[\n{"role": "user", "content": "ok"},\n{"role": "user", "content": "\\ud800"}\n]')
    assert detail == "s.json:3: [1]: text with an unpaired surrogate escape"


def test_claude_code_lines_of_one_message_split_by_a_result_stay_apart(tmp_path: Path) -> None:
    def assistant(block: dict[str, Any]) -> dict[str, Any]:
        return {"type": "assistant", "message": {"id": "msg_1", "role": "assistant", "content": [block]}}

    rows = [{"type": "user", "message": {"role": "user", "content": "go"}},
            assistant({"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}),
            {"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "one"}]}},
            assistant({"type": "tool_use", "id": "t2", "name": "Bash", "input": {}}),
            {"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t2", "content": "two"}]}}]
    path = tmp_path / "split.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(r, calls) for r, _, calls, *_ in shape(import_file("claude-code", path).trace)] == \
        [("user", []), ("assistant", ["Bash"]), ("tool", []), ("assistant", ["Bash"]), ("tool", [])]
