"""A scripted provider on 127.0.0.1 (ephemeral port) for the guard's HTTP tests.

The case is chosen by the base URL: ``http://127.0.0.1:PORT/case/<name>/v1`` so that
``<base>/responses`` or ``<base>/chat/completions`` reaches the script ``<name>``. Every
request is recorded (path, lower-cased headers, body) so tests can count sends.

Responses are written with chunked transfer encoding in tiny pieces (7 bytes: UTF-8
sequences and line ends split across chunks). The event bytes are built here, by hand,
independently of the production faux renderer.

The timed cases (``late_data``, ``late_close``, ``head_trickle``, ``extension_trickle``)
play a peer that keeps a read alive past the guard's deadline. Each of their loops is
bounded (``TRICKLE_STEPS``), and every wait is on the server's release event, so
``release_stalled`` (or shutting the server down) ends them at once.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# When the timed cases send their late data, measured from the request's arrival: inside
# a 1.0 s deadline even after a cold client's setup (up to ~0.3 s before the request
# leaves), so the data restarts a per-read timeout that would then outlast the deadline.
LATE_S = 0.6
# The trickling cases send one byte per TRICKLE_S, at most TRICKLE_STEPS times (6 s): far
# past any deadline the tests use, yet bounded.
TRICKLE_S = 0.1
TRICKLE_STEPS = 60

REPLY_TEXT = "Réponse: the parcel 🚚 ships Tuesday\u2028(line sep) \u2029 done"
CHUNK = 7

USAGE_OK = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 20},
    "output_tokens": 50,
    "output_tokens_details": {"reasoning_tokens": 10},
    "total_tokens": 170,
}


def _usage(**changes: Any) -> dict[str, Any]:
    """``USAGE_OK`` changed as given; its ``total_tokens`` follows the parts it totals
    (input + output) unless a change sets it."""
    usage = json.loads(json.dumps(USAGE_OK))
    changes = {"total_tokens": changes.get("input_tokens", USAGE_OK["input_tokens"])
               + changes.get("output_tokens", USAGE_OK["output_tokens"]), **changes}
    for key, value in changes.items():
        if key == "cached":
            usage["input_tokens_details"]["cached_tokens"] = value
        elif key == "cache_write":
            usage["input_tokens_details"]["cache_write_tokens"] = value
        elif key == "reasoning":
            usage["output_tokens_details"]["reasoning_tokens"] = value
        else:
            usage[key] = value
    return usage


def sse(events: list[dict[str, Any]], eol: str = "\n") -> bytes:
    out = []
    for event in events:
        data = json.dumps(event, ensure_ascii=False)
        out.append(f"event: {event.get('type', 'message')}{eol}data: {data}{eol}{eol}")
    return "".join(out).encode()


MESSAGE_ITEM = {
    "id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
    "content": [{"type": "output_text", "text": REPLY_TEXT, "annotations": []}],
}


def responses_events(terminal: str | None = "response.completed",
                     usage: dict[str, Any] | None = USAGE_OK,
                     tier: str | None = "default",
                     error_mid_stream: bool = False,
                     model: str | None = "gpt-5") -> list[dict[str, Any]]:
    created: dict[str, Any] = {"id": "resp_1", "status": "in_progress", "service_tier": "auto"}
    if model is not None:
        created["model"] = model
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": created},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
         "item": {**MESSAGE_ITEM, "content": [], "status": "in_progress"}},
        {"type": "response.output_text.delta", "sequence_number": 2, "output_index": 0,
         "content_index": 0, "delta": REPLY_TEXT[:11]},
        {"type": "response.output_text.delta", "sequence_number": 3, "output_index": 0,
         "content_index": 0, "delta": REPLY_TEXT[11:]},
    ]
    if error_mid_stream:
        events.append({"type": "error", "sequence_number": 4, "code": "server_error",
                       "message": "The server had an error"})
        return events
    events.append({"type": "response.output_item.done", "sequence_number": 4,
                   "output_index": 0, "item": MESSAGE_ITEM})
    if terminal is None:
        return events
    response: dict[str, Any] = {"id": "resp_1", "status": terminal.split(".")[1],
                                "output": [MESSAGE_ITEM]}
    if model is not None:
        response["model"] = model
    if usage is not None:
        response["usage"] = usage
    if tier is not None:
        response["service_tier"] = tier
    if terminal == "response.failed":
        response["error"] = {"code": "server_error", "message": "failed"}
    events.append({"type": terminal, "sequence_number": 5, "response": response})
    return events


CHAT_USAGE = {"prompt_tokens": 120, "completion_tokens": 50, "total_tokens": 170,
              "prompt_tokens_details": {"cached_tokens": 20},
              "completion_tokens_details": {"reasoning_tokens": 10}}


def chat_chunks(*, usage: bool, tool_call: bool = False) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-5",
            "service_tier": "default"}
    chunks: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {**base, "choices": [{"index": 0, "delta": {"content": REPLY_TEXT[:9]}}]},
        {**base, "choices": [{"index": 0, "delta": {"content": REPLY_TEXT[9:]}}]},
    ]
    if tool_call:
        chunks += [
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "call_1", "type": "function",
                 "function": {"name": "history_get", "arguments": ""}}]}}]},
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "{\"id\": "}}]}}]},
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "\"rec-7\"}"}}]}}]},
        ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {},
                                        "finish_reason": "tool_calls" if tool_call else "stop"}]})
    if usage:
        chunks.append({**base, "choices": [], "usage": json.loads(json.dumps(CHAT_USAGE))})
    return chunks


def chat_usage_conflict() -> list[dict[str, Any]]:
    """Two terminal usage chunks that disagree; the second is the cheaper reading."""
    chunks = chat_chunks(usage=True)
    cheaper = {**chunks[-1], "usage": {**CHAT_USAGE, "completion_tokens": 5,
                                       "completion_tokens_details": {"reasoning_tokens": 1}}}
    return [*chunks, cheaper]


def chat_sse(chunks: list[dict[str, Any]]) -> bytes:
    body = "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks)
    return (body + "data: [DONE]\n\n").encode()


def chat_body(*, usage: bool) -> bytes:
    doc: dict[str, Any] = {
        "id": "chatcmpl-2", "object": "chat.completion", "model": "gpt-5",
        "service_tier": "default",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": REPLY_TEXT}}],
    }
    if usage:
        doc["usage"] = {"prompt_tokens": 120, "completion_tokens": 50, "total_tokens": 170,
                        "prompt_tokens_details": {"cached_tokens": 20}}
    return json.dumps(doc, ensure_ascii=False).encode()


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        self.server.record(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()},
                                    body))
        parts = self.path.split("/")
        case = parts[2] if len(parts) > 2 and parts[1] == "case" else ""
        script = CASES.get(case)
        if script is None:
            self._status(404)
            return
        script(self, body)

    # -- writing helpers -------------------------------------------------------------

    def _status(self, code: int, headers: dict[str, str] | None = None,
                body: bytes = b"{}") -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self, data: bytes, *, content_type: str = "text/event-stream",
               cut_after: int | None = None, stall_after: int | None = None) -> None:
        """Chunked response in tiny pieces. ``cut_after``: abort the connection after
        that many bytes (no terminating chunk). ``stall_after``: stop writing there and
        wait (until the server shuts down or 5 s)."""
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for start in range(0, len(data), CHUNK):
            if cut_after is not None and start >= cut_after:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if stall_after is not None and start >= stall_after:
                self.wfile.flush()
                self.server.release.wait(5.0)
                self.close_connection = True
                return
            piece = data[start:start + CHUNK]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def late(self, data: bytes, *, chunked: bool = True) -> None:
        """Half of ``data`` at once, the rest ``LATE_S`` after the request arrived, then
        silence until released (at most 5 s). ``chunked=False``: no length, no chunking,
        the body would end only when the connection closes."""
        arrived = time.monotonic()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding" if chunked else "connection",
                         "chunked" if chunked else "close")
        self.end_headers()
        half = len(data) // 2
        self._piece(data[:half], chunked)
        if not self.server.release.wait(max(0.0, arrived + LATE_S - time.monotonic())):
            self._piece(data[half:], chunked)
            self.server.release.wait(5.0)
        self.close_connection = True

    def _piece(self, piece: bytes, chunked: bool) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        self.wfile.flush()

    def trickle(self, prefix: bytes) -> None:
        """Write ``prefix`` raw, then one byte per ``TRICKLE_S`` that never completes the
        line it is in: each byte keeps a per-read timeout alive."""
        self.close_connection = True
        try:
            self.wfile.write(prefix)
            self.wfile.flush()
            for _ in range(TRICKLE_STEPS):
                if self.server.release.wait(TRICKLE_S):
                    return
                self.wfile.write(b"a")
                self.wfile.flush()
        except OSError:  # the client hung up: the case is over
            return

    def stream_until_close(self, data: bytes) -> None:
        """No length, no chunking: the body ends when the connection closes."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = True


def _completed_with(response_json: str) -> bytes:
    """A Responses stream whose terminal ``response`` object is ``response_json``,
    written by hand (a JSON encoder cannot repeat a key)."""
    head = sse(responses_events(terminal=None))
    return head + (f'event: response.completed\ndata: {{"type":"response.completed",'
                   f'"sequence_number":5,"response":{response_json}}}\n\n').encode()


_USAGE_JSON = json.dumps(USAGE_OK)
_CHEAP_USAGE_JSON = '{"input_tokens":1,"output_tokens":1}'
# Two readings of one field; the last (which msgspec, like most decoders, would keep)
# is always the cheaper one.
DUPLICATE_KEY_BODIES: dict[str, str] = {
    "dup_usage": f'{{"id":"resp_1","status":"completed","model":"gpt-5",'
                 f'"service_tier":"default","usage":{_USAGE_JSON},"usage":{_CHEAP_USAGE_JSON}}}',
    # The repeat spelled with an escape: the same key once unescaped.
    "dup_usage_escaped": f'{{"id":"resp_1","status":"completed","model":"gpt-5",'
                         f'"service_tier":"default","usage":{_USAGE_JSON},'
                         f'"usag\\u0065":{_CHEAP_USAGE_JSON}}}',
    # Deep in the usage object: two cached counts.
    "dup_nested": '{"id":"resp_1","status":"completed","model":"gpt-5","service_tier":"default",'
                  '"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":0,'
                  '"cached_tokens":20},"output_tokens":50}}',
    # A repeat that is not usage at all (the id) is still two readings of the reply.
    "dup_id": '{"id":"resp_1","id":"resp_2","status":"completed","model":"gpt-5",'
              f'"service_tier":"default","usage":{_USAGE_JSON}}}',
    # A colon inside a string is no member: this one settles.
    "colons_in_strings": '{"id":"resp:1","status":"completed","model":"gpt-5",'
                         f'"service_tier":"default","note":"a: b\\":c","usage":{_USAGE_JSON}}}',
}

CHAT_BODY_DUP_USAGE = (
    b'{"id":"chatcmpl-2","object":"chat.completion","model":"gpt-5","service_tier":"default",'
    b'"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant",'
    b'"content":"ok"}}],'
    b'"usage":{"prompt_tokens":120,"completion_tokens":50,"total_tokens":170},'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')


def chat_stream_dup_usage() -> bytes:
    """The usage chunk repeats ``usage`` (expensive, then cheap)."""
    chunks = chat_chunks(usage=False)
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    last = ('{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-5",'
            '"service_tier":"default","choices":[],'
            '"usage":{"prompt_tokens":120,"completion_tokens":50,"total_tokens":170},'
            '"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')
    return (body + f"data: {last}\n\ndata: [DONE]\n\n").encode()


def chat_body_with(usage: dict[str, Any] | None, *, model: str | None = "gpt-5") -> bytes:
    doc = json.loads(chat_body(usage=False))
    if usage is not None:
        doc["usage"] = usage
    if model is None:
        del doc["model"]
    return json.dumps(doc).encode()


def floor_usage(body: bytes, below: int) -> dict[str, Any]:
    """Usage whose input is the least the rule allows for ``body`` (``ceil(bytes / 64)``),
    minus ``below``."""
    inp = -(-len(body) // 64) - below
    return {"input_tokens": inp, "output_tokens": 50, "total_tokens": inp + 50}


Script = Callable[[_Handler, bytes], None]


def _responses(**kw: Any) -> Script:
    eol = kw.pop("eol", "\n")
    return lambda h, body: h.stream(sse(responses_events(**kw), eol))


_EARLY = sse(responses_events(terminal=None))

CASES: dict[str, Script] = {
    "normal": _responses(),
    "normal_crlf": _responses(eol="\r\n"),
    "normal_cr": _responses(eol="\r"),
    "incomplete": _responses(terminal="response.incomplete"),
    "failed": _responses(terminal="response.failed"),
    "error_event": _responses(error_mid_stream=True),
    "cut": lambda h, body: h.stream(sse(responses_events()), cut_after=len(
        sse(responses_events(terminal=None)))),
    "cut_clean": lambda h, body: h.stream_until_close(sse(responses_events(terminal=None))),
    "missing_usage": _responses(usage=None),
    "zero_input": _responses(usage=_usage(input_tokens=0, cached=0)),
    "input_above_u": _responses(usage=_usage(input_tokens=272_001)),
    "output_above_o": _responses(usage=_usage(output_tokens=128_001)),
    "reasoning_above_output": _responses(usage=_usage(output_tokens=10, reasoning=11)),
    "cache_above_input": _responses(usage=_usage(input_tokens=100, cached=60, cache_write=50)),
    "unknown_tier": _responses(tier="scale"),
    "absent_tier": _responses(tier=None),
    "http_401": lambda h, body: h._status(401, body=b'{"error":{"code":"invalid_api_key"}}'),
    "http_429": lambda h, body: h._status(429, {"retry-after": "1"},
                                          b'{"error":{"code":"rate_limit_exceeded"}}'),
    "http_500": lambda h, body: h._status(500),
    "redirect": lambda h, body: h._status(307, {"location": "/case/normal/v1/responses"}),
    "stall": lambda h, body: h.stream(sse(responses_events()), stall_after=CHUNK * 3),
    "chat_stream": lambda h, body: h.stream(chat_sse(chat_chunks(usage=True))),
    "chat_stream_tools": lambda h, body: h.stream(chat_sse(chat_chunks(usage=True,
                                                                       tool_call=True))),
    "chat_stream_no_usage": lambda h, body: h.stream(chat_sse(chat_chunks(usage=False))),
    "chat_usage_conflict": lambda h, body: h.stream(chat_sse(chat_usage_conflict())),
    "u64_usage": _responses(usage=_usage(cached=18446744073709551615)),
    "late_data": lambda h, body: h.late(sse(responses_events(terminal=None))),
    "late_close": lambda h, body: h.late(sse(responses_events(terminal=None)), chunked=False),
    # A head that never ends: the status line, then one header value byte by byte.
    "head_trickle": lambda h, body: h.trickle(b"HTTP/1.1 200 OK\r\nx-trickle: "),
    # A chunked body whose next chunk-size line never ends (a chunk extension, byte by
    # byte): the parser yields no data, so only the transport can notice the deadline.
    "extension_trickle": lambda h, body: h.trickle(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n" % (len(_EARLY), _EARLY) + b"1;x="),
    "chat_body": lambda h, body: h._status(200, body=chat_body(usage=True)),
    "chat_body_no_usage": lambda h, body: h._status(200, body=chat_body(usage=False)),
    # -- money parsing: duplicate keys, totals, the input floor, the model --------------
    **{name: (lambda h, body, text=text: h.stream(_completed_with(text)))
       for name, text in DUPLICATE_KEY_BODIES.items()},
    "chat_body_dup_usage": lambda h, body: h._status(200, body=CHAT_BODY_DUP_USAGE),
    "chat_stream_dup_usage": lambda h, body: h.stream(chat_stream_dup_usage()),
    "total_above_parts": _responses(usage=_usage(total_tokens=150_000)),
    "total_below_parts": _responses(usage=_usage(total_tokens=3)),
    "chat_total_above_parts": lambda h, body: h._status(200, body=chat_body_with(
        {"prompt_tokens": 120, "completion_tokens": 50, "total_tokens": 150_000})),
    "chat_total_below_parts": lambda h, body: h._status(200, body=chat_body_with(
        {"prompt_tokens": 120, "completion_tokens": 50, "total_tokens": 3})),
    "chat_total_absent": lambda h, body: h._status(200, body=chat_body_with(
        {"prompt_tokens": 120, "completion_tokens": 50})),
    "input_at_floor": lambda h, body: h.stream(sse(responses_events(
        usage=floor_usage(body, 0)))),
    "input_below_floor": lambda h, body: h.stream(sse(responses_events(
        usage=floor_usage(body, 1)))),
    "no_model": _responses(model=None),
    "no_model_failed": _responses(model=None, terminal="response.failed"),
    "chat_body_no_model": lambda h, body: h._status(200, body=chat_body_with(
        CHAT_USAGE, model=None)),
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Recorded] = []
        self.release = threading.Event()
        self._lock = threading.Lock()

    def record(self, rec: Recorded) -> None:
        with self._lock:
            self.requests.append(rec)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that hangs up mid-stream (the guard's own abort) is a scripted case,
        # not a server fault: keep the test output free of stdlib tracebacks.
        pass


class LoopbackServer:
    def __init__(self) -> None:
        self._server = _Server()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, case: str) -> str:
        return f"http://127.0.0.1:{self.port}/case/{case}/v1"

    @property
    def requests(self) -> list[Recorded]:
        return list(self._server.requests)

    def reset(self) -> None:
        with self._server._lock:
            self._server.requests.clear()
        self._server.release.clear()

    def release_stalled(self) -> None:
        self._server.release.set()

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        yield server
