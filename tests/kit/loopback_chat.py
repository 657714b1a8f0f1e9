"""A scripted Chat Completions provider on loopback: the real HTTP seam, offline.

``serve_chat()`` starts a ``ThreadingHTTPServer`` on 127.0.0.1 that answers every
``POST /v1/chat/completions`` with ``status`` (200: a fixed non-streamed completion with
usage) and records each request's path, Authorization header and JSON body. A hook
(``on_request``) runs inside each request, while the sender is alive and waiting.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "SUMMARY-FROM-TINY: the owner's rules, names and numbers, kept verbatim."
PROMPT_TOKENS, COMPLETION_TOKENS = 321, 45
CATALOG = b"""version = 1

[[model]]
provider = "local"
model = "tiny"
input = "0.5"
output = "1.5"
cache_read = "0.05"
cache_write = "0.5"
"""


def prompt_tokens(body: bytes) -> int:
    """The input a real tokenizer could report for ``body``: ``PROMPT_TOKENS`` while
    that is plausible, a token per 4 bytes for a body too large for it (the guard stops
    a count below one token per 64 bytes sent: ``guard/usage.py``)."""
    if PROMPT_TOKENS * 64 >= len(body):
        return PROMPT_TOKENS
    return -(-len(body) // 4)


@dataclass
class Server:
    status: int = 200
    reply: str = REPLY
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""
    on_request: Callable[[], None] | None = None
    # When set, a request without exactly ``Bearer <required_key>`` is answered 401.
    required_key: str | None = None
    # When set, every request after the first ``answer_only`` is dropped: the connection
    # closes with no response, as when the server is killed mid-request.
    answer_only: int | None = None
    # When set, the reply to each non-streamed request: ``respond(body)`` (else ``reply``).
    respond: Callable[[dict[str, Any]], str] | None = None


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            """The model list a local route's check reads (``GET /v1/models``)."""
            if self.path != "/v1/models":
                self._send(404, b'{"error": {"message": "no"}}')
                return
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": "tiny", "object": "model", "owned_by": "me"}]}).encode())

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            server.requests.append({"path": self.path,
                                    "authorization": self.headers.get("authorization"),
                                    "body": json.loads(body)})
            if server.on_request is not None:
                server.on_request()
            if server.answer_only is not None and len(server.requests) > server.answer_only:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if server.required_key is not None \
                    and self.headers.get("authorization") != f"Bearer {server.required_key}":
                self._send(401, b'{"error": {"message": "invalid api key"}}')
                return
            if json.loads(body).get("stream"):
                self._stream_without_usage()
                return
            if self.path != "/v1/chat/completions" or server.status != 200:
                self._send(server.status if server.status != 200 else 404,
                           b'{"error": {"message": "no"}}')
                return
            prompt = prompt_tokens(body)
            reply = server.reply if server.respond is None else server.respond(json.loads(body))
            self._send(200, json.dumps({
                "id": "chatcmpl-1", "object": "chat.completion", "model": "tiny",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply}}],
                "usage": {"prompt_tokens": prompt,
                          "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": prompt + COMPLETION_TOKENS},
            }).encode())

        def _stream_without_usage(self) -> None:
            """As llama.cpp's Python server streams: deltas, a finish, ``[DONE]``, and
            no usage whatever ``stream_options`` asked for."""
            chunks = [{"delta": {"role": "assistant", "content": server.reply}},
                      {"delta": {}, "finish_reason": "stop"}]
            events = b"".join(
                b"data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                        "model": "tiny", "choices": [{"index": 0, **c}]}
                                       ).encode() + b"\n\n" for c in chunks)
            self._send(200, events + b"data: [DONE]\n\n", "text/event-stream")

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
def serve_chat() -> Iterator[Server]:
    state = Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
