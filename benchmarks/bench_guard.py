"""Guard overhead per request: a 250,000-byte Responses payload and a 10-event stream.

Measured in one run against the same loopback server (127.0.0.1, ephemeral port):

- baseline: ``json.dumps`` + httpx POST of the same payload, reading the whole stream;
- guarded:  ``Guard.request`` over ``HttpTransport`` (options check, serialize, detach,
  allowlist, U_k, digest, admit, re-serialize + compare, consume, one send, incremental
  parse, settle) with the in-memory test permit source;
- the guard's own steps without the network, for scale.

Prints medians (ms) of many alternating runs and the ratio guarded / baseline
(target <= 1.3x). Run: ``python benchmarks/bench_guard.py [--runs N]``; ``--quick`` (for CI)
runs 2 warm-up rounds and 5 measured runs instead of 20 and ``--runs``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import msgspec
from bench_kit import parse_runs

from efold.guard import (
    Contract,
    Guard,
    HttpTransport,
    WireApi,
    bundled_catalog,
)
from efold.guard.testing import TestOnlyPermitSource
from efold.guard.wire import RESPONSES, ResponsesStreamParser

MODEL = "gpt-5"
TARGET_BODY_BYTES = 250_000
ITEMS = 30


def _stream() -> bytes:
    text = "The parcel ships on Tuesday; the invoice INV-2291 is still open. "
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "r", "status": "in_progress",
                                                   "model": MODEL}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "content": []}},
    ]
    step = len(text) // 6 + 1
    events += [{"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
                "delta": text[i:i + step]} for i in range(0, len(text), step)]
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {
            "id": "r", "status": "completed", "model": MODEL, "output": [item],
            "service_tier": "default",
            "usage": {"input_tokens": 60_000, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 0}}}},
    ]
    assert len(events) == 10, len(events)
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


STREAM = _stream()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body go out in two writes; without this, Nagle + delayed ACK add ~40 ms
    # to whichever client happens to hit it, which would measure TCP, not the guard.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(STREAM)))
        self.end_headers()
        self.wfile.write(STREAM)


def _payload() -> dict[str, Any]:
    tools = [{"type": "function", "name": name, "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}, "id": {"type": "string"}}}}
        for name in ("history_search", "history_get")]
    payload: dict[str, Any] = {
        "model": MODEL, "instructions": "Answer from the conversation.", "input": [],
        "tools": tools, "stream": True, "store": False, "reasoning": {"effort": "high"},
        "max_output_tokens": 4096,
    }
    for i in range(ITEMS):
        role = "user" if i % 2 == 0 else "assistant"
        kind = "input_text" if role == "user" else "output_text"
        payload["input"].append({"type": "message", "role": role,
                                 "content": [{"type": kind, "text": ""}]})
    per_item = (TARGET_BODY_BYTES - len(msgspec.json.encode(payload))) // ITEMS
    filler = ("lorem ipsum dolor sit amet, " * (per_item // 28 + 1))[:per_item]
    for item in payload["input"]:
        item["content"][0]["text"] = filler
    payload["input"][-1]["content"][0]["text"] += "x" * (
        TARGET_BODY_BYTES - len(msgspec.json.encode(payload)))
    assert len(msgspec.json.encode(payload)) == TARGET_BODY_BYTES
    return payload


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    args = parse_runs(parser, runs=300, quick_runs=5,
                      quick_help="2 warm-up rounds, 5 runs (CI); overrides --runs")
    warmups = 2 if args.quick else 20

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    payload = _payload()
    entry = bundled_catalog().entry("openai", MODEL)
    contract = Contract(provider="openai", model=MODEL, api=WireApi.OPENAI_RESPONSES,
                        base_url=base_url, effort="high")
    transport = HttpTransport(base_url, credential="sk-bench")
    client = httpx.Client(trust_env=False)

    def baseline() -> None:
        body = json.dumps(payload).encode()
        response = client.post(base_url + "/responses", content=body, headers={
            "content-type": "application/json", "authorization": "Bearer sk-bench"})
        assert response.status_code == 200 and len(response.content) == len(STREAM)

    guards: list[Guard] = []

    def fresh_guard() -> None:  # one probe run per request, built outside the timing
        guards.append(Guard(contract, entry, TestOnlyPermitSource(entry=entry), transport))

    def guarded() -> None:
        result = guards.pop().request(payload)
        assert result.ok, result.code

    def accounting_only() -> None:
        body = msgspec.json.encode(payload)
        RESPONSES.check(msgspec.json.decode(body), contract, first_request=True).framing()
        hashlib.sha256(body).hexdigest()
        assert msgspec.json.encode(payload) == body

    def parse_only() -> None:
        parser = ResponsesStreamParser()
        for start in range(0, len(STREAM), 1024):
            parser.feed(STREAM[start:start + 1024])
        assert parser.finish().usage is not None

    def json_dumps_only() -> None:
        json.dumps(payload).encode()

    timings: dict[str, list[float]] = {k: [] for k in
                                       ("baseline", "guarded", "accounting", "parse", "dumps")}
    jobs: list[tuple[str, Callable[[], None], Callable[[], None] | None]] = [
        ("baseline", baseline, None), ("guarded", guarded, fresh_guard),
        ("accounting", accounting_only, None), ("parse", parse_only, None),
        ("dumps", json_dumps_only, None),
    ]
    for _ in range(warmups):  # warm up connections, imports, caches
        for _, fn, setup in jobs:
            if setup:
                setup()
            fn()
    for _ in range(args.runs):
        for name, fn, setup in jobs:
            if setup:
                setup()
            start = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - start)
    server.shutdown()
    transport.close()
    client.close()

    med = {k: _median_ms(v) for k, v in timings.items()}
    print(f"payload {TARGET_BODY_BYTES} bytes, {ITEMS} input items, 10-event stream "
          f"({len(STREAM)} bytes), {args.runs} runs each, medians:")
    print(f"  baseline  json.dumps + httpx POST      {med['baseline']:8.3f} ms")
    print(f"  guarded   Guard.request over HTTP       {med['guarded']:8.3f} ms")
    print(f"  guard accounting (encode, detach, allowlist, H, digest, re-encode) "
          f"{med['accounting']:7.3f} ms")
    print(f"  guard incremental parse of the stream  {med['parse']:8.3f} ms")
    print(f"  (json.dumps alone                      {med['dumps']:8.3f} ms)")
    print(f"  ratio guarded / baseline: {med['guarded'] / med['baseline']:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
