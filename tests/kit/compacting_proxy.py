"""A small compaction proxy, written for the tests as a third party would write one: an
OpenAI-compatible server (Python standard library only) that sits between an agent and
its model and compacts the conversation when it grows.

    UPSTREAM_BASE_URL=http://127.0.0.1:9/v1 PROXY_PORT=8080 python compacting_proxy.py

On start it asks its upstream which models exist (``GET /models``) and sizes its
trigger from the model's context window (at most half of it). For every
``POST /v1/chat/completions``: when the text not yet summarised exceeds
``TRIGGER_CHARS``, it asks the upstream to summarise it (after its previous summary)
up to the last ``KEEP`` messages (never splitting a tool call from its results), and
forwards one system message holding the summary plus everything after it; until it
first compacts it forwards the conversation unchanged. It returns the upstream's answer
as it came.

Knobs (environment): ``TRIGGER_CHARS`` (default 12000), ``KEEP`` (default 6),
``PROXY_MODE``: ``compact`` (default), ``passthrough`` (never compacts), ``embeddings``
(also calls ``POST /embeddings``, which efold does not serve), ``never-listen`` (sleeps
without listening), ``crash`` (exits 3 at once), ``stubborn`` (compacts, and leaves a
helper process that ignores SIGTERM), ``escape`` (the same helper, in a session of its
own). ``EFOLD_FOLD_SETTINGS`` may override
``keep`` and ``trigger_chars``. A ``state.json`` of counts is kept in the working
directory, to show the proxy had somewhere private to write.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = os.environ["UPSTREAM_BASE_URL"].rstrip("/")
PORT = int(os.environ["PROXY_PORT"])
MODE = os.environ.get("PROXY_MODE", "compact")
SETTINGS = json.loads(os.environ.get("EFOLD_FOLD_SETTINGS") or "{}")
TRIGGER_CHARS = int(SETTINGS.get("trigger_chars", os.environ.get("TRIGGER_CHARS", "12000")))
KEEP = int(SETTINGS.get("keep", os.environ.get("KEEP", "6")))
SUMMARY_PROMPT = ("Summarise the conversation below for the assistant who continues it. Keep "
                  "every name, number, identifier, date, decision, rule and correction.")
STATE = {"requests": 0, "compactions": 0}


def call(method: str, path: str, body: object | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(UPSTREAM + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def text_of(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content)
    calls = " ".join(c["function"]["name"] + c["function"]["arguments"]
                     for c in message.get("tool_calls") or [])
    return f"{message['role']}: {content} {calls}".strip()


def cut_point(messages: list[dict], start: int) -> int:
    """Where the kept tail starts: KEEP messages from the end (never before ``start``),
    moved earlier past tool results so that a kept result always has its call."""
    cut = max(start, len(messages) - KEEP)
    while cut > start and messages[cut]["role"] == "tool":
        cut -= 1
    return cut


# The compaction so far: how many leading messages the summary stands for, and the
# summary. The agent resends its whole conversation each turn; the proxy summarises
# only what has grown past the trigger since, folding in its previous summary.
MEMORY: dict = {"covered": 0, "summary": None}


def compact(model: str, messages: list[dict]) -> list[dict]:
    covered, summary = MEMORY["covered"], MEMORY["summary"]
    if covered > len(messages):  # another conversation: start over
        covered, summary = 0, None
    live = messages[covered:]
    if MODE != "passthrough" and sum(len(text_of(m)) for m in live) > TRIGGER_CHARS:
        cut = cut_point(messages, covered)
        if cut > covered:
            head = messages[covered:cut]
            if summary is not None:
                head = [{"role": "user", "content": "Earlier summary:\n" + summary}, *head]
            status, raw = call("POST", "/chat/completions", {
                "model": model,
                "messages": [{"role": "system", "content": SUMMARY_PROMPT}, *head,
                             {"role": "user", "content": "Write the summary now."}],
            })
            if status != 200:
                raise RuntimeError(f"summary failed: {status}")
            summary = json.loads(raw)["choices"][0]["message"]["content"]
            covered = cut
            STATE["compactions"] += 1
            MEMORY.update(covered=covered, summary=summary)
    if summary is None:
        return messages
    return [{"role": "system", "content": "Summary of the earlier conversation:\n" + summary},
            *messages[covered:]]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        STATE["requests"] += 1
        try:
            body["messages"] = compact(body.get("model", ""), body["messages"])
            if MODE == "embeddings":
                call("POST", "/embeddings", {"model": body.get("model"), "input": "x"})
            status, raw = call("POST", "/chat/completions", body)
        except Exception as exc:
            status, raw = 502, json.dumps({"error": {"message": str(exc)}}).encode()
        with open("state.json", "w") as f:
            json.dump(STATE, f)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def main() -> int:
    if MODE == "crash":
        print("compacting proxy: PROXY_MODE=crash, exiting 3", flush=True)
        return 3
    if MODE == "never-listen":
        time.sleep(3600)
        return 0
    if MODE in ("stubborn", "escape") and os.fork() == 0:  # a helper ignoring SIGTERM
        if MODE == "escape":  # ... in a session of its own, out of the proxy's group
            os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
        os._exit(0)
    global TRIGGER_CHARS
    status, raw = call("GET", "/models")
    if status == 200:
        window = json.loads(raw)["data"][0].get("context_window")
        if window and "TRIGGER_CHARS" not in os.environ and "trigger_chars" not in SETTINGS:
            TRIGGER_CHARS = min(TRIGGER_CHARS, int(window) * 4 // 2)
    print(f"compacting proxy: listening on {PORT}, trigger {TRIGGER_CHARS} chars", flush=True)
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
