"""Reading coding-agent session logs: Claude Code (``claude-code``), OpenAI Codex CLI
(``codex``) and pi (``pi``). Each is JSONL; every record's line is its own.

**claude-code** (``~/.claude/projects/<project>/<session-id>.jsonl``). Checked against
the entry models of daaain/claude-code-log (``claude_code_log/models.py``: ``type``
user / assistant / system / summary / attachment / queue-operation / ..., ``message``
an Anthropic message, ``uuid``, ``parentUuid``, ``isSidechain``, ``isMeta``,
``timestamp``; assistant ``message.id``, one content block per entry) and the
anthropics/claude-agent-sdk-typescript issue #431 transcript excerpt. Kept: user and
assistant lines of the main chain, in file order. Dropped (counted): every other line
type, ``isSidechain: true`` and ``isMeta: true`` lines. Consecutive assistant lines that
share ``message.id`` are merged into one assistant turn; content blocks map as in
``import_anthropic``.

**codex** (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``). Checked against
openai/codex ``codex-rs/protocol/src/protocol.rs`` (``RolloutLine {timestamp, type,
payload}``, ``RolloutItem`` tagged ``session_meta | response_item | compacted |
turn_context | event_msg | ...``) and ``codex-rs/protocol/src/models.rs``
(``ResponseItem``: ``message {role, content: [input_text | output_text |
input_image]}``, ``function_call {name, arguments, call_id}``, ``function_call_output
{call_id, output: string | content items}``, ``custom_tool_call {call_id, name,
input}``, ``custom_tool_call_output {call_id, output}``, ``local_shell_call {call_id,
action}``, ``reasoning``, ``web_search_call``, ...). The older format (openai/codex
``codex-rs/core/src/rollout.rs`` at 89a151f5: a ``SessionMeta {id, timestamp,
instructions}`` first line, bare ``ResponseItem`` lines and ``{"record_type":
"state"}`` lines, no per-line timestamps) is read too. Kept: ``message`` of role user /
assistant, calls (attached to the assistant turn before them, so parallel calls share one
event; a custom call's free-form ``input`` becomes ``{"input": ...}``, a local shell
call's ``action`` its arguments under the name ``local_shell``) and their outputs.
Dropped (counted): developer/system messages, ``reasoning`` and other non-conversation
items, and every line that is not a ``response_item`` (``event_msg`` repeats the
items).

**pi** (badlogic/pi-mono ``packages/coding-agent``, ``~/.pi/agent/sessions/.../*.jsonl``).
Checked against ``packages/coding-agent/src/core/session-manager.ts`` (a ``{"type":
"session", version, id, timestamp, cwd}`` header, then entries ``{type, id, parentId,
timestamp}``; ``message`` entries carry an ``AgentMessage``) and
``packages/ai/src/types.ts`` (``user {content: string | text/image}``, ``assistant
{content: text | thinking | toolCall {id, name, arguments}}``, ``toolResult
{toolCallId, toolName, content: text/image, isError}``). The session is a tree; like
pi's own ``buildSessionContext`` the branch kept is the path from the last entry to the
root (entries off it are dropped, counted); v1 files without ids are read in file order.
Dropped (counted): the header, non-message entries (model or thinking-level changes,
compactions, branch summaries, custom entries, labels), thinking blocks and message roles
other than user / assistant / toolResult (e.g. ``bashExecution``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from efold.corpus.import_anthropic import ERROR_PREFIX, add_message
from efold.corpus.import_json import read_jsonl
from efold.corpus.imports import (
    Message,
    Origin,
    Transcript,
    compact_json,
    import_error,
    parse_timestamp,
    parts_text,
    tool_call,
)
from efold.corpus.model import ToolCall

# --- claude-code --------------------------------------------------------------------


class _Turn:
    """An assistant turn being merged from consecutive lines with one message id."""

    def __init__(self, message_id: Any, blocks: list[Any], origin: Origin,
                 timestamp: datetime | None) -> None:
        self.message_id = message_id
        self.blocks = blocks
        self.origin = origin
        self.timestamp = timestamp


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def read_claude_code(data: bytes, name: str) -> Transcript:
    """The main chain of a Claude Code session log."""
    transcript = Transcript()
    turn: _Turn | None = None

    def flush() -> None:
        nonlocal turn
        if turn is not None:
            add_message(transcript, "assistant", turn.blocks, name, turn.origin, turn.timestamp)
            turn = None

    for origin, entry in read_jsonl(data, name):
        if not isinstance(entry, dict):
            raise import_error(name, origin, "a line must be a JSON object")
        kind = entry.get("type")
        if kind not in ("user", "assistant"):
            transcript.drop(f"{kind} line")
            continue
        if entry.get("isSidechain") is True:
            transcript.drop("sidechain line")
            continue
        if entry.get("isMeta") is True:
            transcript.drop("meta line")
            continue
        message = entry.get("message")
        if not isinstance(message, dict) or message.get("role") != kind:
            raise import_error(name, origin, f"a {kind} line without a {kind} message")
        stamp = parse_timestamp(entry.get("timestamp"), name, origin)
        content = message.get("content")
        if not isinstance(content, str | list):
            raise import_error(name, origin, "content is neither a string nor a list of blocks")
        if kind == "assistant":
            message_id = message.get("id")
            if turn is not None and message_id is not None and message_id == turn.message_id:
                turn.blocks = [*turn.blocks, *_blocks(content)]
                continue
            flush()
            turn = _Turn(message_id, _blocks(content), origin, stamp)
        else:
            flush()
            add_message(transcript, "user", content, name, origin, stamp)
    flush()
    return transcript


# --- codex --------------------------------------------------------------------------

_CODEX_SKIPPED = ("reasoning", "web_search_call", "ghost_snapshot", "compaction",
                  "compaction_summary", "other")


def _codex_text(content: Any, name: str, origin: Origin) -> str:
    return parts_text(content, name, origin,
                      texts={"input_text": "text", "output_text": "text"},
                      placeholders={"input_image": "[image]"})


def _codex_output(output: Any, name: str, origin: Origin) -> str:
    """``function_call_output.output``: a string, content items, or (some versions) an
    object ``{content, success}``."""
    if isinstance(output, dict) and "content" in output:
        output = output["content"]
    return _codex_text(output, name, origin)


def _str_field(item: dict[str, Any], key: str, name: str, origin: Origin) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise import_error(name, origin, f"{item.get('type')}: {key} is not a string")
    return value


def _codex_item(transcript: Transcript, item: dict[str, Any], name: str, origin: Origin,
                stamp: datetime | None) -> None:
    kind = item.get("type")
    if kind == "message":
        role = item.get("role")
        if role in ("developer", "system"):
            transcript.drop(f"{role} message")
            return
        if role not in ("user", "assistant"):
            raise import_error(name, origin, f"unknown role {role!r}")
        transcript.add(Message(role, _codex_text(item.get("content"), name, origin), origin,
                               timestamp=stamp))
    elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
        transcript.add_calls([_codex_call(item, name, origin)], origin, stamp)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        call_id = _str_field(item, "call_id", name, origin)
        transcript.add(Message("tool", _codex_output(item.get("output"), name, origin), origin,
                               tool_call_id=call_id, timestamp=stamp))
    elif kind in _CODEX_SKIPPED:
        transcript.drop(f"{kind} item")
    else:
        raise import_error(name, origin, f"unknown response item type {kind!r}")


def _codex_call(item: dict[str, Any], name: str, origin: Origin) -> ToolCall:
    kind = item["type"]
    if kind == "local_shell_call":
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str):
            raise import_error(name, origin, "local_shell_call: no call id")
        return tool_call(call_id, "local_shell", compact_json(item.get("action", {})))
    call_id = _str_field(item, "call_id", name, origin)
    tool = _str_field(item, "name", name, origin)
    if kind == "custom_tool_call":
        return tool_call(call_id, tool, compact_json({"input": _str_field(item, "input", name, origin)}))
    return tool_call(call_id, tool, _str_field(item, "arguments", name, origin))


def read_codex(data: bytes, name: str) -> Transcript:
    """The conversation of a Codex CLI rollout (current or older format)."""
    transcript = Transcript()
    for index, (origin, line) in enumerate(read_jsonl(data, name)):
        if not isinstance(line, dict):
            raise import_error(name, origin, "a line must be a JSON object")
        if "payload" in line and isinstance(line.get("type"), str):
            if line["type"] != "response_item":
                transcript.drop(f"{line['type']} line")
                continue
            item = line["payload"]
            if not isinstance(item, dict):
                raise import_error(name, origin, "response_item payload is not an object")
            stamp = parse_timestamp(line.get("timestamp"), name, origin)
            _codex_item(transcript, item, name, origin, stamp)
        elif line.get("record_type") is not None:  # older format: state snapshots
            transcript.drop(f"{line['record_type']} record")
        elif isinstance(line.get("type"), str):  # older format: a bare response item
            _codex_item(transcript, line, name, origin, None)
        elif index == 0:  # older format: the SessionMeta line
            transcript.drop("session_meta line")
        else:
            raise import_error(name, origin, "not a rollout line (no type)")
    return transcript


# --- pi -----------------------------------------------------------------------------


def _pi_branch(entries: list[tuple[Origin, dict[str, Any]]]) -> set[int]:
    """Indexes of the entries on the path from the last entry with an id to the root."""
    by_id = {e.get("id"): i for i, (_, e) in enumerate(entries) if isinstance(e.get("id"), str)}
    last = max(by_id.values(), default=None)
    if last is None:
        return set(range(len(entries)))
    path: set[int] = set()
    at: int | None = last
    while at is not None and at not in path:
        path.add(at)
        at = by_id.get(entries[at][1].get("parentId"))
    return path


def _pi_message(transcript: Transcript, message: Any, name: str, origin: Origin,
                stamp: datetime | None) -> None:
    if not isinstance(message, dict):
        raise import_error(name, origin, "a message entry without a message object")
    role = message.get("role")
    content = message.get("content")
    if role == "user":
        add_message(transcript, "user", _pi_blocks(content, name, origin), name, origin, stamp)
    elif role == "assistant":
        add_message(transcript, "assistant", _pi_blocks(content, name, origin), name, origin, stamp)
    elif role == "toolResult":
        call_id = message.get("toolCallId")
        if not isinstance(call_id, str):
            raise import_error(name, origin, "a toolResult without a string toolCallId")
        blocks = _pi_blocks(content, name, origin)
        if any(b["type"] not in ("text", "image") for b in blocks):
            raise import_error(name, origin, "a toolResult block that is not text or image")
        text = "\n".join(str(b.get("text", "")) if b["type"] == "text" else "[image]"
                         for b in blocks)
        if message.get("isError") is True:
            text = ERROR_PREFIX + text
        transcript.add(Message("tool", text, origin, tool_call_id=call_id, timestamp=stamp))
    else:
        transcript.drop(f"{role} message")


def _pi_blocks(content: Any, name: str, origin: Origin) -> list[dict[str, Any]]:
    """pi content as Anthropic-style blocks (``toolCall`` -> ``tool_use``)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise import_error(name, origin, "content is neither a string nor a list of blocks")
    blocks: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(block, dict):
            raise import_error(name, origin, "a content block that is not an object")
        if kind == "toolCall":
            blocks.append({"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                           "input": block.get("arguments", {})})
        elif kind in ("text", "image", "thinking"):
            blocks.append(block)
        else:
            raise import_error(name, origin, f"unknown content block type {kind!r}")
    return blocks


def read_pi(data: bytes, name: str) -> Transcript:
    """The current branch of a pi coding-agent session."""
    transcript = Transcript()
    entries: list[tuple[Origin, dict[str, Any]]] = []
    for origin, entry in read_jsonl(data, name):
        if not isinstance(entry, dict):
            raise import_error(name, origin, "a line must be a JSON object")
        if entry.get("type") == "session":
            transcript.drop("session header")
        else:
            entries.append((origin, entry))
    branch = _pi_branch(entries)
    for index, (origin, entry) in enumerate(entries):
        if index not in branch:
            transcript.drop("off-branch entry")
        elif entry.get("type") == "message":
            stamp = parse_timestamp(entry.get("timestamp"), name, origin)
            _pi_message(transcript, entry.get("message"), name, origin, stamp)
        else:
            transcript.drop(f"{entry.get('type')} entry")
    return transcript
