"""Reading an Anthropic Messages transcript (format ``anthropic``), and the content-block
mapping Claude Code session logs share (``import_agents``).

Checked against the Messages API reference (platform.claude.com/docs, "Create a
Message": ``system``, ``messages`` of ``{role: "user" | "assistant", content: string |
blocks}``; blocks ``text``, ``image``, ``document``, ``tool_use {id, name, input}``,
``tool_result {tool_use_id, content: string | blocks, is_error}``, ``thinking``,
``redacted_thinking``) and the block models of daaain/claude-code-log
(``claude_code_log/models.py``).

Input: a JSON object with optional ``system`` and a ``messages`` array, or a bare
array. Mapping:

* ``system``: dropped (counted once).
* ``text`` blocks: the message's content, joined with newlines; ``image`` and
  ``document`` blocks become the text ``[image]`` / ``[document]``.
* ``tool_use``: a tool call with ``arguments`` = compact JSON of ``input``; every call
  of an assistant message in its one event, in order.
* ``tool_result`` (user messages): one role-tool event per block, placed before any
  text of the same user message; content a string or ``text``/``image``/``document``
  blocks; ``is_error: true`` prefixes the content with ``[error] ``.
* ``thinking`` / ``redacted_thinking``: dropped (counted).
* Any other role or block type, or a block in the wrong role, refuses.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from efold.corpus.import_json import read_messages
from efold.corpus.imports import (
    Message,
    Origin,
    Transcript,
    compact_json,
    import_error,
    parts_text,
    tool_call,
)
from efold.corpus.model import ToolCall

ERROR_PREFIX = "[error] "
_PLACEHOLDERS = {"image": "[image]", "document": "[document]"}
_THINKING = ("thinking", "redacted_thinking")


def _result_text(content: Any, name: str, origin: Origin) -> str:
    return parts_text(content, name, origin, texts={"text": "text"},
                      placeholders=_PLACEHOLDERS, what="tool_result content")


def _tool_use(block: dict[str, Any], name: str, origin: Origin) -> ToolCall:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise import_error(name, origin, "a tool_use block without a string id and name")
    return tool_call(block["id"], block["name"], compact_json(block.get("input", {})))


def add_message(transcript: Transcript, role: Any, content: Any, name: str, origin: Origin,
                timestamp: datetime | None = None) -> None:
    """Append the events of one Anthropic-style message (``role`` user or assistant,
    ``content`` a string or blocks) to ``transcript``."""
    if role not in ("user", "assistant"):
        raise import_error(name, origin, f"unknown role {role!r}")
    if isinstance(content, str):
        transcript.add(Message(role, content, origin, timestamp=timestamp))
        return
    if not isinstance(content, list):
        raise import_error(name, origin, "content is neither a string nor a list of blocks")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind in _PLACEHOLDERS:
            texts.append(_PLACEHOLDERS[str(kind)])
        elif kind in _THINKING:
            transcript.drop(f"{kind} block")
        elif kind == "tool_use" and role == "assistant" and isinstance(block, dict):
            calls.append(_tool_use(block, name, origin))
        elif kind == "tool_result" and role == "user" and isinstance(block, dict):
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str):
                raise import_error(name, origin, "a tool_result without a string tool_use_id")
            text = _result_text(block.get("content"), name, origin)
            if block.get("is_error") is True:
                text = ERROR_PREFIX + text
            transcript.add(Message("tool", text, origin, tool_call_id=call_id, timestamp=timestamp))
        elif kind in ("tool_use", "tool_result"):
            raise import_error(name, origin, f"a {kind} block in a {role} message")
        else:
            raise import_error(name, origin, f"unknown content block type {kind!r}")
    text = "\n".join(texts)
    if role == "user":
        if text:
            transcript.add(Message("user", text, origin, timestamp=timestamp))
    elif text or calls:
        transcript.add(Message("assistant", text, origin, tuple(calls), timestamp=timestamp))
    else:
        transcript.drop("assistant message with only thinking")


def read_anthropic(data: bytes, name: str) -> Transcript:
    """The transcript of an Anthropic Messages request or transcript."""
    records, envelope = read_messages(data, name, allow_jsonl=False)
    transcript = Transcript()
    if envelope.get("system"):
        transcript.drop("system prompt")
    for origin, raw in records:
        if not isinstance(raw, dict):
            raise import_error(name, origin, "a message must be a JSON object")
        add_message(transcript, raw.get("role"), raw.get("content"), name, origin)
    return transcript
