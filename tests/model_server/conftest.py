"""A real local model server (llama.cpp's OpenAI-compatible ``llama-server``), started by
``.ci/model_server.sh``. Without it these tests skip, saying why; they never pass
without having talked to it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from ordinary_user import REAL_RUN_FLAGS

from efold.guard import CatalogEntry, parse_catalog

MODEL = "smollm2"
GEMMA = "gemma3"  # Gemma 3 270M (the pretrained model), the second server's alias
PROVIDER = "llama-cpp"
# An operator catalog for the local model: made-up rates, so that money is accounted
# exactly as on a paid route (nothing is billed by a local server). A local server has
# no service tiers and reports none: its absent tier is the base rate.
CATALOG = b"""version = 1
[[model]]
provider = "llama-cpp"
model = "smollm2"
service_tiers = false
input = "0.01"
output = "0.02"
cache_read = "0.001"
cache_write = "0.01"
[[model]]
provider = "llama-cpp"
model = "gemma3"
service_tiers = false
input = "0.02"
output = "0.04"
cache_read = "0.002"
cache_write = "0.02"
"""

_HOW = "start one with: eval \"$(bash .ci/model_server.sh start)\""


def _unavailable(why: str) -> None:
    """Skip, saying why; where the server is required (``.ci/run`` sets
    ``EFOLD_REQUIRE_MODEL_SERVER``), fail instead: these tests never pass unrun."""
    if os.environ.get("EFOLD_REQUIRE_MODEL_SERVER"):
        pytest.fail(f"the model server is required here: {why}")
    pytest.skip(f"{why}; {_HOW}")


@pytest.fixture(scope="session")
def model_server_url() -> str:
    url = os.environ.get("EFOLD_MODEL_SERVER_URL")
    if not url:
        _unavailable("no local model server (EFOLD_MODEL_SERVER_URL unset)")
    assert url.startswith("http://127.0.0.1:"), "the model server must be on loopback"
    return url


@pytest.fixture(scope="session")
def gemma_server_url() -> str:
    url = os.environ.get("EFOLD_GEMMA_SERVER_URL")
    if not url:
        _unavailable("no local Gemma server (EFOLD_GEMMA_SERVER_URL unset)")
    assert url.startswith("http://127.0.0.1:"), "the model server must be on loopback"
    return url


@pytest.fixture(scope="session")
def entry() -> CatalogEntry:
    return parse_catalog(CATALOG).entry(PROVIDER, MODEL)


@dataclass
class OwnServer:
    url: str
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, process: subprocess.Popen[bytes], api_key: str | None) -> None:
    request = urllib.request.Request(f"{url}/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    for _ in range(240):
        if process.poll() is not None:
            raise RuntimeError(f"the model server exited with {process.returncode}")
        try:
            urllib.request.urlopen(request, timeout=1).read()
            return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError("the model server did not answer within 60 s")


@pytest.fixture
def start_server() -> Iterator[object]:
    """Start a model server of the test's own (another port, options of its own), with
    the flags ``.ci/model_server.sh`` gives the shared one."""
    binary = os.environ.get("EFOLD_MODEL_SERVER_BIN")
    model = os.environ.get("EFOLD_MODEL_SERVER_MODEL")
    if not binary or not model:
        _unavailable("no model server install (EFOLD_MODEL_SERVER_BIN unset)")
    started: list[subprocess.Popen[bytes]] = []

    def start(*, api_key: str | None = None) -> OwnServer:
        port = _free_port()
        argv = [binary, "-m", model, "--alias", MODEL, "--host", "127.0.0.1",
                "--port", str(port), "-c", "16384", "-np", "1", "-n", "4096", "--no-webui",
                "--override-kv", "llama.context_length=int:16384"]
        if api_key:
            argv += ["--api-key", api_key]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(process)
        url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(url, process, api_key)
        return OwnServer(url, process)

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()


class RecordingProxy:
    """A loopback HTTP proxy to the model server that keeps every response body."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.responses: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=900)
                conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                data = reply.read()
                conn.close()
                proxy.statuses.append(reply.status)
                if reply.status == 200:
                    proxy.responses.append(json.loads(data))
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{parts.path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def usage(self) -> dict[str, int]:
        return {"input": sum(r["usage"]["prompt_tokens"] for r in self.responses),
                "output": sum(r["usage"]["completion_tokens"] for r in self.responses),
                "cache_read": sum(usage_counts(r["usage"])["cache_read"]
                                  for r in self.responses)}


@pytest.fixture
def proxy(model_server_url: str) -> Iterator[RecordingProxy]:
    p = RecordingProxy(model_server_url)
    yield p
    p.server.shutdown()


EFOLD = str(Path(sys.executable).with_name("efold-controller"))
ACCOUNT = "acct-local-fictional"


def usage_counts(usage: dict[str, Any]) -> dict[str, int]:
    """A Chat Completions ``usage`` object as the catalog's token classes, read here
    independently of efold: ``prompt_tokens`` includes the cached prompt tokens
    (``prompt_tokens_details.cached_tokens``, priced at ``cache_read``), as OpenAI's do.
    llama-server reports the tokens its prompt cache served, so a request that repeats a
    prefix (the chat template's opening, a checkpoint's probes) has some."""
    details = usage.get("prompt_tokens_details") or {}
    return {"input": usage["prompt_tokens"], "output": usage["completion_tokens"],
            "cache_read": details.get("cached_tokens", 0),
            "cache_write": details.get("cache_write_tokens", 0)}


def settled_matches_server(run: Path, responses: list[dict[str, Any]]) -> int:
    """Assert that ``run``'s holds are exactly ``responses`` (the proxy's, for this run),
    every one settled at the server's reported usage priced by the catalog (cached
    prompt tokens at the ``cache_read`` rate); the total."""
    from efold.guard.pricing import price_units
    from efold.registry.journal import JournalReader

    entry = parse_catalog(CATALOG).entry(PROVIDER, MODEL)
    with JournalReader(run) as journal:
        holds = journal.rows("holds")
    assert len(holds) == len(responses) and all(h["state"] == "settled" for h in holds)
    settled = sum(h["settled_units"] for h in holds)
    assert settled == sum(price_units(entry, usage_counts(r["usage"]), None)
                          for r in responses)
    return settled


class Operator:
    """An operator on the real route in ``tmp``: the campaign file and the local catalog
    written, a key made, the campaign registered, a smoke and a pilot authorization
    signed (``runs/smoke``, ``runs/pilot``); then ``efold`` runs any command as they
    would, and ``smoke`` / ``pilot`` the two real runs."""

    def __init__(self, tmp: Path, campaign: str) -> None:
        self.tmp = tmp
        self.env = {**os.environ, "EFOLD_ACCOUNT_ID": ACCOUNT, "CI": "1"}  # CI: loopback only
        (tmp / "catalog.toml").write_bytes(CATALOG)
        (tmp / "campaign.toml").write_text(campaign)
        assert self.efold("keygen", "--out", "approver").returncode == 0
        registered = self.efold("register", "campaign.toml", "--output", "reg")
        assert registered.returncode == 0, registered.stderr
        reg, sha = Path(field(registered.stdout, "registration")), field(registered.stdout,
                                                                          "sha256")
        self.runs = tmp / "runs"
        self.runs.mkdir(mode=0o700)
        self.real = ["--registration", str(reg), "--sha256", sha, "--trust", "approver.pub",
                     *REAL_RUN_FLAGS]
        self.smoke_auth = self._authorize(reg, sha, "smoke", "--smoke")
        self.pilot_auth = self._authorize(reg, sha, "pilot")

    def efold(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([EFOLD, *args], cwd=self.tmp, env=self.env, capture_output=True,
                              text=True, timeout=3600)

    def _authorize(self, reg: Path, sha: str, name: str, *extra: str) -> Path:
        done = self.efold("authorize", "--registration", str(reg), "--sha256", sha, *extra,
                          "--key", "approver.key", "--out", f"{name}-auth.json",
                          "--output-root", str(self.runs / name),
                          "--approver", "ops@example.invalid",
                          "--approval-reference", "local-0001")
        assert done.returncode == 0, done.stderr
        return self.tmp / f"{name}-auth.json"

    def smoke(self) -> subprocess.CompletedProcess[str]:
        return self.efold("smoke", *self.real, "--run-dir", str(self.runs / "smoke"),
                          "--authorization", str(self.smoke_auth), "--no-progress")

    def pilot(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.efold("pilot", "--real", *self.real, "--run-dir", str(self.runs / "pilot"),
                          "--authorization", str(self.pilot_auth), *extra)


def field(out: str, name: str) -> str:
    """The value of the ``name: value`` line of a command's output."""
    return next(line.split(": ", 1)[1] for line in out.splitlines()
                if line.startswith(f"{name}: "))
