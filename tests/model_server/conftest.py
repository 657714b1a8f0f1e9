"""A real local model server (llama.cpp's OpenAI-compatible server), started by
``.ci/model_server.sh``. Without it these tests skip, saying why; they never pass
without having talked to it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from efold.guard import CatalogEntry, parse_catalog

MODEL = "smollm2"
PROVIDER = "llama-cpp"
# An operator catalog for the local model: made-up rates, so that money is accounted
# exactly as on a paid route (nothing is billed by a local server).
CATALOG = b"""version = 1
[[model]]
provider = "llama-cpp"
model = "smollm2"
input = "0.01"
output = "0.02"
cache_read = "0.001"
cache_write = "0.01"
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
    """Start a model server of the test's own (another port, options of its own)."""
    python = os.environ.get("EFOLD_MODEL_SERVER_PYTHON")
    model = os.environ.get("EFOLD_MODEL_SERVER_MODEL")
    if not python or not model:
        _unavailable("no model server install (EFOLD_MODEL_SERVER_PYTHON unset)")
    started: list[subprocess.Popen[bytes]] = []

    def start(*, api_key: str | None = None) -> OwnServer:
        port = _free_port()
        argv = [python, "-m", "llama_cpp.server", "--model", model, "--model_alias", MODEL,
                "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "16384"]
        if api_key:
            argv += ["--api_key", api_key]
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
