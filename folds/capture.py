"""The capture endpoint a proxy fold talks to as its upstream: efold's stand-in for the
model behind the proxy, on loopback, in the prep child.

It serves exactly what a compaction proxy needs from an OpenAI-compatible upstream:

* ``POST /v1/chat/completions``: either the **forward** of the agent request in flight
  (its newest message equals the newest message the agent sent: a proxy may rewrite
  anything but that) or one of the proxy's **own calls** (a summarisation request, say).
  A forward is recorded (the messages the proxy forwarded, for the checkpoint) and
  answered with the trace's next assistant message, as the agent's model answered it;
  an own call is answered by ``summarise`` (the campaign's summariser: a guarded,
  metered request, or the deterministic summariser offline). Both answer
  ``stream: true`` as server-sent events.
* discovery, from the campaign's reader profile: ``GET /v1/models``,
  ``GET /v1/models/{id}`` (``context_window``, ``context_length`` and ``max_model_len``
  in estimated tokens), ``GET /props`` (``n_ctx``) and ``GET /health``.

Paths are accepted with or without the ``/v1`` prefix. Anything else gets a 404 JSON
error naming the call, and is recorded: the fold then marks its boundary unverified
with ``unsupported_calls`` (``fold_proxy_unsupported_call``), so the checkpoint's slots
are excluded, never scored. A summariser failure (a refused, lost or stopped request)
is answered with a 503 and kept in ``failure``: the fold re-raises it, so a prep fails
with the summariser's own code exactly as a compaction arm's would.

Threads: ``ThreadingHTTPServer`` handles each connection on its own thread; all state is
behind ``_lock``, and ``summarise`` is called under it (one upstream request at a time,
which the lockstep permit channel needs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

# The proxy's own call (its messages, as sent) -> the reply text.
Summarise = Callable[[list[dict[str, Any]]], str]
MAX_BODY_BYTES = 64 * 1024 * 1024  # a request body past this is refused (413)


def message_key(message: object) -> tuple[object, ...] | None:
    """What identifies a chat message across a proxy: role, text, tool calls and the
    call it answers; None when ``message`` is not a message object. Content given as
    a list of text parts is the same text."""
    if not isinstance(message, dict):
        return None
    calls = tuple(
        (c.get("id"), (c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
        for c in message.get("tool_calls") or () if isinstance(c, dict)
    )
    return (message.get("role"), content_text(message.get("content")), calls,
            message.get("tool_call_id"))


def content_text(content: object) -> str:
    """A message's content as text: a string, or the text of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict) and isinstance(part.get("text", ""), str))
    return str(content)


class CaptureEndpoint:
    """The upstream a proxy fold is pointed at (see the module docstring). Use as a
    context manager: it listens on 127.0.0.1 (``port``) until closed."""

    def __init__(self, *, model: str, context_window: int, summarise: Summarise) -> None:
        self.model = model
        self.context_window = context_window
        self._summarise = summarise
        self._lock = threading.Lock()
        # The agent request in flight: its newest message, and the assistant message
        # the trace answered it with (None: the boundary request, answered "OK.").
        self._expected: tuple[object, ...] | None = None
        self._reply: dict[str, Any] | None = None
        self.forwarded: list[dict[str, Any]] | None = None  # of the request in flight
        self.own_calls = 0
        self.unsupported: list[str] = []  # "METHOD /path" of each call not served
        self.failure: BaseException | None = None  # the first summariser failure
        # Imported here: http.server (with http.client and ssl) is ~17 ms of a process's
        # start, the fork-server template's among them, and only a capture needs it.
        from http.server import ThreadingHTTPServer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        # A short poll: ``shutdown`` waits for the serving loop to look (0.5 s by default,
        # which was half of a small checkpoint's whole replay).
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> CaptureEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def expect(self, sent: list[dict[str, Any]], reply: dict[str, Any] | None) -> None:
        """The agent is about to send ``sent``; its model's answer will be ``reply``."""
        with self._lock:
            self._expected = message_key(sent[-1]) if sent else None
            self._reply = reply
            self.forwarded = None

    # -- called by the handler threads --------------------------------------------------

    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return 400, _error("messages must be a list", "invalid_request_error")
        with self._lock:
            if messages and message_key(messages[-1]) == self._expected:
                self.forwarded = messages
                reply = self._reply or {"role": "assistant", "content": "OK."}
                return 200, _completion(self.model, reply, messages)
            self.own_calls += 1
            if self.failure is not None:
                return 503, _error("efold capture: the summariser has stopped", "unavailable")
            try:
                text = self._summarise(messages)
            except BaseException as exc:  # kept for the fold to re-raise, never lost
                self.failure = exc
                return 503, _error("efold capture: the summary request failed", "unavailable")
            return 200, _completion(self.model, {"role": "assistant", "content": text}, messages)

    def refuse(self, call: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.unsupported.append(call)
        return 404, _error(f"efold capture: {call} is not served (efold serves chat "
                           "completions and model discovery only)", "fold_proxy_unsupported_call")

    def model_object(self) -> dict[str, Any]:
        n = self.context_window
        return {"id": self.model, "object": "model", "created": 0, "owned_by": "efold",
                "context_window": n, "context_length": n, "max_model_len": n}


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


def _completion(model: str, message: dict[str, Any], prompt: list[Any]) -> dict[str, Any]:
    prompt_tokens = max(1, len(msgspec.json.encode(prompt)) // 4)
    completion_tokens = max(1, len(msgspec.json.encode(message)) // 4)
    return {
        "id": "chatcmpl-efold", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def _sse(completion: dict[str, Any]) -> bytes:
    """A completion as server-sent events: one delta chunk, the finish, the usage."""
    choice = completion["choices"][0]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(delta["tool_calls"])]
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        base | {"choices": [], "usage": completion["usage"]},
    ]
    return b"".join(b"data: " + msgspec.json.encode(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _handler_for(capture: CaptureEndpoint) -> type[BaseHTTPRequestHandler]:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # stderr is not ours to write (and may carry trace text)

        def _path(self) -> str:
            path = self.path.split("?", 1)[0]
            return path.removeprefix("/v1") or "/"

        def do_GET(self) -> None:
            path = self._path()
            if path == "/models":
                self._send(200, {"object": "list", "data": [capture.model_object()]})
            elif path.startswith("/models/"):
                if path.removeprefix("/models/") == capture.model:
                    self._send(200, capture.model_object())
                else:
                    self._send(404, _error("no such model", "model_not_found"))
            elif path == "/props":
                n = capture.context_window
                self._send(200, {"n_ctx": n, "default_generation_settings": {"n_ctx": n}})
            elif path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._send(*capture.refuse(f"GET {self.path}"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                self._send(413, _error("request body too large", "invalid_request_error"))
                return
            raw = self.rfile.read(length)
            if self._path() != "/chat/completions":
                self._send(*capture.refuse(f"POST {self.path}"))
                return
            try:
                body = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                self._send(400, _error("body is not JSON", "invalid_request_error"))
                return
            if not isinstance(body, dict):
                self._send(400, _error("body is not a JSON object", "invalid_request_error"))
                return
            status, answer = capture.chat(body)
            if status == 200 and body.get("stream") is True:
                self._send_bytes(200, _sse(answer), "text/event-stream")
            else:
                self._send(status, answer)

        def do_PUT(self) -> None:
            self._refuse_other()

        def do_DELETE(self) -> None:
            self._refuse_other()

        def do_PATCH(self) -> None:
            self._refuse_other()

        def _refuse_other(self) -> None:
            self.close_connection = True
            self._send(*capture.refuse(f"{self.command} {self.path}"))

        def _send(self, status: int, body: dict[str, Any]) -> None:
            self._send_bytes(status, msgspec.json.encode(body), "application/json")

        def _send_bytes(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
