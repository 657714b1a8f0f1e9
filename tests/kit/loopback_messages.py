"""A scripted Anthropic Messages API on loopback: the real HTTP seam, offline.

``serve_messages()`` starts a ``ThreadingHTTPServer`` on 127.0.0.1 answering
``POST /v1/messages`` with the documented shapes (Anthropic API reference, "Messages",
"Streaming Messages", and "On-demand compaction"; looked up, never run against the live
service):

- a body with ``stream: true`` gets SSE events (``message_start`` with usage,
  ``content_block_start``/``_delta``/``_stop`` per block, ``message_delta`` with the
  stop reason and cumulative output, ``message_stop``, a ``ping`` in between);
  otherwise one JSON message;
- a body with a top-level ``compaction`` gets the documented compaction reply:
  ``stop_reason: "compaction"``, one ``compaction`` block whose ``content`` is a
  deterministic, digest-named summary listing the user texts it saw and whose
  ``signature`` is ``"sig-loopback-"`` + the sha256 of the messages, and usage whose
  top-level counts are zero with the cost in ``iterations``.

A reader reply names what it read: ``SAW-COMPACTION <signature>`` when the first
message holds a compaction block, else ``LOOPBACK-ECHO <digest of the user texts>``.
With ``tools`` offered and ``mode="tool_calls"``, a request whose last message is not a
tool result is answered with a ``history_get`` tool_use first.

``mode`` scripts the faults the adapters must read strictly: missing_usage,
null_usage, bad_usage, no_iterations, top_above_iterations, two_blocks, empty_content,
http_500, not_json, error_body, decreasing_usage, error_event, cut_stream, no_model (a
reader reply without ``model``) and duplicate_usage (the reader message repeats
``usage``, the second reading cheaper). Each request's path, lower-cased headers and
JSON body are recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-haiku-4-5"
# A reader reply's usage (input_tokens excludes the cache counts).
INPUT_TOKENS, CACHE_WRITE_TOKENS, CACHE_READ_TOKENS, OUTPUT_TOKENS = 700, 300, 500, 90
# A compaction reply's one iteration (the top-level counts are zero).
COMPACT_INPUT_TOKENS, COMPACT_OUTPUT_TOKENS = 2400, 320
SIGNATURE_PREFIX = "sig-loopback-"
SUMMARY_PREFIX = "LOOPBACK-SUMMARY"
SAW_COMPACTION = "SAW-COMPACTION"
ECHO = "LOOPBACK-ECHO"
TOOL_CALL = {"type": "tool_use", "id": "toolu_01", "name": "history_get",
             "input": {"id": "rec-7"}}


# The loopback model's rates (USD per million tokens): 20 / 100 / 2 / 25 units per token
# for input / output / cache read / cache write. A test catalog, so the tests do not
# depend on the bundled one's prices.
CATALOG_TOML = f"""version = 1
[[model]]
provider = "anthropic"
model = "{MODEL}"
input = "1"
output = "5"
cache_read = "0.1"
cache_write = "1.25"
""".encode()
UNITS_PER_TOKEN = {"input": 20, "output": 100, "cache_read": 2, "cache_write": 25}
CREDENTIAL = "sk-ant-test-CREDENTIAL-51c0"  # fictional; searched for in records
QUESTION = "QUESTION-MARKER: when does the parcel ship?"
HISTORY_GET = {"name": "history_get", "description": "Fetch a record by id.",
               "input_schema": {"type": "object", "properties": {"id": {"type": "string"}},
                                "required": ["id"]}}


def catalog_entry() -> Any:
    from efold.guard.catalog import parse_catalog

    return parse_catalog(CATALOG_TOML).entry("anthropic", MODEL)


def contract(base_url: str, **changes: Any) -> Any:
    from efold.guard import Contract, WireApi

    fields: dict[str, Any] = {"provider": "anthropic", "model": MODEL,
                              "api": WireApi.ANTHROPIC_MESSAGES, "base_url": base_url,
                              "effort": None, "stream": True}
    fields.update(changes)
    return Contract(**fields)


def reader_payload(stream: bool = True, question: str = QUESTION, **changes: Any
                   ) -> dict[str, Any]:
    """A reader's Messages request: a system prompt, the question, one history tool."""
    payload: dict[str, Any] = {
        "model": MODEL, "max_tokens": 1024, "system": "Answer briefly.",
        "messages": [{"role": "user", "content": question}],
        "tools": [json.loads(json.dumps(HISTORY_GET))], "tool_choice": {"type": "auto"},
        "stream": stream,
    }
    payload.update(changes)
    return payload


def conversation(turns: int = 3) -> list[dict[str, Any]]:
    """A head to compact: alternating owner turns and replies."""
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": [{"type": "text", "text": f"Owner turn {i}."}]})
        out.append({"role": "assistant", "content": f"Reply {i}: " + "y" * 40})
    return out


@dataclass
class MessagesServer:
    mode: str = "normal"
    model: str = MODEL
    tier: str | None = "standard"
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The user messages' texts, in order (string content or text blocks)."""
    texts: list[str] = []
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.extend(b["text"] for b in content or () if b.get("type") == "text")
    return texts


def summary_block(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The documented compaction block: a readable summary and an opaque signature."""
    texts = user_texts(messages)
    summary = f"{SUMMARY_PREFIX} {_digest(texts)[:16]}: " + " | ".join(texts)
    return {"type": "compaction", "content": summary,
            "signature": SIGNATURE_PREFIX + _digest(messages)}


def _usage(server: MessagesServer, **counts: Any) -> dict[str, Any]:
    usage: dict[str, Any] = dict(counts)
    if server.tier is not None:
        usage["service_tier"] = server.tier
    return usage


def compaction_reply(server: MessagesServer, body: dict[str, Any]) -> dict[str, Any]:
    block = summary_block(body.get("messages") or [])
    mode = server.mode
    if mode == "empty_content":
        block["content"] = ""
    content = [block, {**block, "signature": "second"}] if mode == "two_blocks" else [block]
    usage = _usage(server, input_tokens=0, output_tokens=0, iterations=[
        {"type": "compaction", "input_tokens": COMPACT_INPUT_TOKENS,
         "output_tokens": COMPACT_OUTPUT_TOKENS}])
    reply: dict[str, Any] = {"id": "msg_cmp_01", "type": "message", "role": "assistant",
                             "model": server.model, "content": content,
                             "stop_reason": "compaction", "stop_sequence": None,
                             "usage": usage}
    if mode == "missing_usage":
        del reply["usage"]
    elif mode == "null_usage":
        reply["usage"] = None
    elif mode == "bad_usage":
        usage["iterations"][0]["output_tokens"] = str(COMPACT_OUTPUT_TOKENS)
    elif mode == "no_iterations":
        del usage["iterations"]
    elif mode == "top_above_iterations":
        usage["input_tokens"] = COMPACT_INPUT_TOKENS + 1
    elif mode == "error_body":
        reply = {"type": "error", "error": {"type": "overloaded_error", "message": "no"}}
    return reply


def reader_blocks(server: MessagesServer, body: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                                         str]:
    """The blocks of a reader reply and its stop reason."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    answered = isinstance(last.get("content"), list) and any(
        b.get("type") == "tool_result" for b in last["content"])
    if server.mode == "tool_calls" and body.get("tools") and not answered:
        return [{"type": "text", "text": "Looking it up."}, dict(TOOL_CALL)], "tool_use"
    first = messages[0].get("content") if messages else None
    if isinstance(first, list) and first and first[0].get("type") == "compaction":
        text = f"{SAW_COMPACTION} {first[0].get('signature')}"
    else:
        text = f"{ECHO} {_digest(user_texts(messages))[:16]}"
    return [{"type": "text", "text": text}], "end_turn"


def _reader_usage(server: MessagesServer) -> dict[str, Any] | None:
    if server.mode in ("missing_usage", "null_usage"):
        return None
    usage = _usage(server, input_tokens=INPUT_TOKENS,
                   cache_creation_input_tokens=CACHE_WRITE_TOKENS,
                   cache_read_input_tokens=CACHE_READ_TOKENS, output_tokens=OUTPUT_TOKENS)
    if server.mode == "bad_usage":
        usage["output_tokens"] = float(OUTPUT_TOKENS)
    return usage


CHEAPER_USAGE = ',"usage":{"input_tokens":1,"output_tokens":1}'


def repeat_usage(text: str, depth: int = 1) -> str:
    """JSON object ``text`` with a second, cheaper ``usage`` appended to the object that
    closes ``depth`` braces from its end (a JSON encoder cannot write a repeat)."""
    return text[:-depth] + CHEAPER_USAGE + text[-depth:]


def reader_json(server: MessagesServer, body: dict[str, Any]) -> dict[str, Any]:
    if server.mode == "error_body":
        return {"type": "error", "error": {"type": "api_error", "message": "no"}}
    blocks, stop = reader_blocks(server, body)
    reply: dict[str, Any] = {"id": "msg_01", "type": "message", "role": "assistant",
                             "model": server.model, "content": blocks, "stop_reason": stop,
                             "stop_sequence": None}
    usage = _reader_usage(server)
    if server.mode != "missing_usage":
        reply["usage"] = usage
    if server.mode == "no_model":
        del reply["model"]
    return reply


def _event(kind: str, **fields: Any) -> bytes:
    return (f"event: {kind}\ndata: " + json.dumps({"type": kind, **fields}) + "\n\n").encode()


def reader_sse(server: MessagesServer, body: dict[str, Any]) -> bytes:
    blocks, stop = reader_blocks(server, body)
    usage = _reader_usage(server)
    start_usage = None if usage is None else {**usage, "output_tokens": 1}
    message: dict[str, Any] = {"id": "msg_01", "type": "message", "role": "assistant",
                               "model": server.model, "content": [], "stop_reason": None,
                               "stop_sequence": None}
    if server.mode != "missing_usage":
        message["usage"] = start_usage
    if server.mode == "no_model":
        del message["model"]
    start = _event("message_start", message=message)
    if server.mode == "duplicate_usage":  # inside the message: before its "}}\n\n"
        start = repeat_usage(start.decode()[:-2], depth=2).encode() + b"\n\n"
    out = [start, _event("ping")]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            out.append(_event("content_block_start", index=index,
                              content_block={"type": "text", "text": ""}))
            text = block["text"]
            for piece in (text[:len(text) // 2], text[len(text) // 2:]):
                out.append(_event("content_block_delta", index=index,
                                  delta={"type": "text_delta", "text": piece}))
        else:
            out.append(_event("content_block_start", index=index,
                              content_block={**block, "input": {}}))
            arguments = json.dumps(block["input"])
            for piece in (arguments[:5], arguments[5:]):
                out.append(_event("content_block_delta", index=index,
                                  delta={"type": "input_json_delta", "partial_json": piece}))
        out.append(_event("content_block_stop", index=index))
    if server.mode == "error_event":
        out.append(_event("error", error={"type": "overloaded_error", "message": "no"}))
        return b"".join(out)
    delta_usage: dict[str, Any] | None = None
    if usage is not None:
        delta_usage = {"output_tokens": usage["output_tokens"]}
        if server.mode == "decreasing_usage":
            delta_usage["input_tokens"] = INPUT_TOKENS - 1
    fields: dict[str, Any] = {"delta": {"stop_reason": stop, "stop_sequence": None}}
    if server.mode != "missing_usage":
        fields["usage"] = delta_usage
    out.append(_event("message_delta", **fields))
    if server.mode != "cut_stream":
        out.append(_event("message_stop"))
    return b"".join(out)


def _handler(server: MessagesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.loads(raw)
            server.requests.append({
                "path": self.path, "body": body,
                "headers": {k.lower(): v for k, v in self.headers.items()}})
            if self.path != "/v1/messages":
                self._send(404, b'{"type": "error", "error": {"type": "not_found_error"}}')
            elif server.mode == "http_500":
                self._send(500, b'{"type": "error", "error": {"type": "api_error"}}')
            elif server.mode == "not_json":
                self._send(200, b"event: nope\n\n")
            elif "compaction" in body:
                self._send(200, json.dumps(compaction_reply(server, body)).encode())
            elif body.get("stream") is True:
                self._send(200, reader_sse(server, body), "text/event-stream")
            else:
                text = json.dumps(reader_json(server, body))
                if server.mode == "duplicate_usage":
                    text = repeat_usage(text)
                self._send(200, text.encode())

        def _send(self, status: int, data: bytes,
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve_messages(mode: str = "normal") -> Iterator[MessagesServer]:
    state = MessagesServer(mode=mode)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    # A short poll interval: shutdown waits for the loop's next poll.
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
