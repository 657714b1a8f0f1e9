"""A scripted OpenAI Responses compaction endpoint on loopback: the real HTTP seam, offline.

``serve_compact()`` starts a ``ThreadingHTTPServer`` on 127.0.0.1 answering
``POST /v1/responses/compact`` with the documented "compacted response object"
(OpenAI API reference, "Compact a response"): ``object: "response.compaction"``, an
``output`` holding the request's user messages verbatim followed by one opaque
``compaction`` item, and ``usage`` (input/output tokens with their details). ``mode``
scripts the faults the adapter must read strictly. Each request's path, Authorization
header and JSON body is recorded.

It also answers ``POST /v1/responses`` (the reader's route on the same provider and
API) with a streamed answer rendered by the faux provider's SSE renderer, so a run can
read a compacted checkpoint on the same route; ``ANSWER`` names how many compaction
items the reader's input held.
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

INPUT_TOKENS, CACHED_TOKENS, OUTPUT_TOKENS, REASONING_TOKENS = 139, 0, 438, 64
MODEL = "gpt-5"
ENCRYPTED_PREFIX = "gAAAAABloopback-"


def input_tokens(raw: bytes) -> int:
    """The input a real tokenizer could report for a request of ``raw`` bytes:
    ``INPUT_TOKENS`` while that is plausible, a token per 4 bytes for a body too large
    for it (the guard stops a count below one token per 64 bytes sent)."""
    if INPUT_TOKENS * 64 >= len(raw):
        return INPUT_TOKENS
    return -(-len(raw) // 4)


@dataclass
class CompactServer:
    # normal | missing_usage | null_usage | bad_usage | wrong_object | unknown_item |
    # two_compactions | empty_encrypted | http_500 | not_json | error_body
    mode: str = "normal"
    model: str = MODEL
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""


def compaction_output(items: list[dict[str, Any]], mode: str = "normal") -> list[dict[str, Any]]:
    """The documented output: user messages kept (with ids and status), then the
    opaque item (its content a digest of the input: it names what was compacted)."""
    kept: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            kept.append({"id": f"msg_{index:03d}", "status": "completed", **item})
    digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
    compaction = {"id": "cmp_001", "type": "compaction",
                  "encrypted_content": ENCRYPTED_PREFIX + digest}
    if mode == "empty_encrypted":
        compaction["encrypted_content"] = ""
    out = [*kept, compaction]
    if mode == "two_compactions":
        out.append({**compaction, "id": "cmp_002"})
    if mode == "unknown_item":
        out.append({"type": "reasoning", "id": "rs_1", "summary": []})
    return out


def _reply(server: CompactServer, body: dict[str, Any], raw: bytes) -> dict[str, Any]:
    inp = input_tokens(raw)
    reply: dict[str, Any] = {
        "id": "resp_001", "object": "response.compaction", "created_at": 1764967971,
        "model": server.model,
        "output": compaction_output(body.get("input") or [], server.mode),
        "usage": {"input_tokens": inp,
                  "input_tokens_details": {"cached_tokens": CACHED_TOKENS},
                  "output_tokens": OUTPUT_TOKENS,
                  "output_tokens_details": {"reasoning_tokens": REASONING_TOKENS},
                  "total_tokens": inp + OUTPUT_TOKENS},
    }
    if server.mode == "missing_usage":
        del reply["usage"]
    elif server.mode == "null_usage":
        reply["usage"] = None
    elif server.mode == "bad_usage":
        reply["usage"]["output_tokens"] = "438"
    elif server.mode == "wrong_object":
        reply["object"] = "response"
    elif server.mode == "error_body":
        reply = {"error": {"message": "no", "type": "server_error"}}
    return reply


ANSWER = "LOOPBACK-ANSWER: compaction items read: {n}"


def _answer(server: CompactServer, body: dict[str, Any], raw: bytes) -> bytes:
    from efold.guard.wire.faux import FauxReply, render_responses_sse

    held = sum(1 for item in body.get("input") or () if item.get("type") == "compaction")
    items = [{"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": ANSWER.format(n=held)}]}]
    usage = {"input_tokens": input_tokens(raw), "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0}}
    return render_responses_sse(FauxReply(items=items), usage, model=server.model)


def _handler(server: CompactServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.loads(raw)
            server.requests.append({"path": self.path, "body": body,
                                    "authorization": self.headers.get("authorization")})
            if self.path == "/v1/responses":
                self._send(200, _answer(server, body, raw), "text/event-stream")
            elif self.path != "/v1/responses/compact":
                self._send(404, b'{"error": {"message": "not found"}}')
            elif server.mode == "http_500":
                self._send(500, b'{"error": {"message": "boom"}}')
            elif server.mode == "not_json":
                self._send(200, b"event: nope\n\n")
            else:
                self._send(200, json.dumps(_reply(server, body, raw)).encode())

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
def serve_compact(mode: str = "normal") -> Iterator[CompactServer]:
    state = CompactServer(mode=mode)
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

