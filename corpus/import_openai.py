"""Reading an OpenAI Chat Completions message list (format ``openai-chat``).

Checked against the Chat Completions request schema (OpenAI API reference, "Create chat
completion" ``messages``; the same shapes as ``ChatCompletionMessageParam`` in the
openai SDKs, e.g. ``ChatCompletionToolMessageParam`` ``{role: "tool", tool_call_id,
content: string | text parts}``) and against efold's own chat wire shape
(``efold/folds/request.py``, ``chat_message``).

Input: a JSON array of messages, an object with a ``messages`` array (a request body),
or JSONL with one message per line. Mapping:

* ``system`` / ``developer``: dropped (counted).
* ``user``: content a string or parts; ``text`` parts are joined with newlines;
  ``image_url``, ``input_audio`` and ``file`` parts become ``[image]``, ``[audio]``,
  ``[file]``.
* ``assistant``: ``content`` (string, ``text``/``refusal`` parts, or null; ``refusal``
  when there is no content) and every entry of ``tool_calls``, in order, in one event.
  A ``function`` call keeps its ``arguments`` text; a ``custom`` call's free-form
  ``input`` becomes ``{"input": ...}``.
* ``tool``: ``tool_call_id`` and content (string or text parts); the event's tool name
  is the called function's, looked up from the call.
* Anything else refuses, including the legacy ``function`` role and ``function_call``
  (they carry no call id to pair a result with).
"""

from __future__ import annotations

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

_PLACEHOLDERS = {"image_url": "[image]", "input_audio": "[audio]", "file": "[file]"}


def _text(content: Any, name: str, origin: Origin) -> str:
    return parts_text(content, name, origin, texts={"text": "text", "refusal": "refusal"},
                      placeholders=_PLACEHOLDERS)


def _call(raw: Any, name: str, origin: Origin) -> ToolCall:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise import_error(name, origin, "a tool call without a string id")
    kind = raw.get("type", "function")
    body = raw.get(kind)
    if kind not in ("function", "custom") or not isinstance(body, dict) \
            or not isinstance(body.get("name"), str):
        raise import_error(name, origin, f"tool call {raw['id']!r}: unknown or malformed "
                                         f"type {kind!r}")
    if kind == "custom":
        arguments = compact_json({"input": body.get("input", "")})
    else:
        value = body.get("arguments", "")
        arguments = value if isinstance(value, str) else compact_json(value)
    return tool_call(raw["id"], body["name"], arguments)


def read_openai_chat(data: bytes, name: str) -> Transcript:
    """The transcript of an OpenAI chat message list (mapping in the module docstring)."""
    records, _ = read_messages(data, name, allow_jsonl=True)
    transcript = Transcript()
    for origin, raw in records:
        if not isinstance(raw, dict):
            raise import_error(name, origin, "a message must be a JSON object")
        role = raw.get("role")
        if role in ("system", "developer"):
            transcript.drop(f"{role} message")
        elif role == "user":
            transcript.add(Message("user", _text(raw.get("content"), name, origin), origin))
        elif role == "assistant":
            if raw.get("function_call") is not None:
                raise import_error(name, origin, "legacy function_call (no call id); "
                                                 "use tool_calls")
            raw_calls = raw.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise import_error(name, origin, "tool_calls is not a list")
            content = _text(raw.get("content"), name, origin)
            if not content and isinstance(raw.get("refusal"), str):
                content = raw["refusal"]
            calls = tuple(_call(c, name, origin) for c in raw_calls)
            transcript.add(Message("assistant", content, origin, calls))
        elif role == "tool":
            call_id = raw.get("tool_call_id")
            if not isinstance(call_id, str):
                raise import_error(name, origin, "a tool message without a string tool_call_id")
            transcript.add(Message("tool", _text(raw.get("content"), name, origin), origin,
                                   tool_call_id=call_id))
        else:
            raise import_error(name, origin, f"unknown role {role!r}")
    return transcript
