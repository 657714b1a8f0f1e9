"""Proxy folds: a real compaction proxy (tests/kit/compacting_proxy.py, its own process,
real HTTP on loopback) replayed through efold's capture endpoint."""

from __future__ import annotations

import http.client
import json
import os
import sys
from pathlib import Path

import pytest

from efold.errors import Code, EfoldError
from efold.folds.capture import CaptureEndpoint
from efold.folds.errors import PluginError
from efold.folds.fold import TracePrefix
from efold.folds.proxy import DATA_DIR_ENV, ProxyFold, deterministic_summary

PROXY = Path(__file__).resolve().parents[1] / "kit" / "compacting_proxy.py"


def _fold(tmp_path: Path, mode: str = "compact", *, summarise=deterministic_summary,
          timeout_s: float = 60.0, **env: str) -> ProxyFold:
    return ProxyFold(
        "squeeze", [sys.executable, str(PROXY)], upstream_env="UPSTREAM_BASE_URL",
        port_env="PROXY_PORT", model="faux-extractive-v1", context_window=68_000,
        summarise=summarise, data_dir=tmp_path / "data", timeout_s=timeout_s,
        env={**os.environ, "PROXY_MODE": mode, **env},
    )


def _alive_with(data_dir: Path) -> list[int]:
    """Pids of live (non-zombie) processes whose environment names ``data_dir``."""
    needle = f"{DATA_DIR_ENV}={data_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_compacting_proxy_is_a_fold(tmp_path, original_items):
    item = original_items[0]
    asked: list[int] = []

    def summarise(messages):
        asked.append(len(messages))
        return deterministic_summary(messages)

    checkpoint = _fold(tmp_path, summarise=summarise).build(TracePrefix.of(item.trace))
    assert checkpoint.receipt.boundary.kind == "proxy"
    assert checkpoint.receipt.boundary.verified
    assert checkpoint.receipt.boundary.unsupported_calls == 0
    # It compacted: fewer messages than the trace, opening with its summary (a system
    # message the proxy wrote, now on the owner's channel), the newest message last.
    assert len(checkpoint.messages) < len(item.trace.events)
    assert checkpoint.messages[0].role == "user"
    assert checkpoint.messages[0].content.startswith("Summary of the earlier conversation:")
    state = json.loads((tmp_path / "data" / "state.json").read_text())
    assert state["compactions"] == len(asked) > 0  # each of its own calls was answered
    assert checkpoint.tools == [] and checkpoint.store is None
    assert _alive_with(tmp_path / "data") == []


def test_a_proxy_that_forwards_unchanged_did_not_fold(tmp_path, original_items):
    checkpoint = _fold(tmp_path, "passthrough").build(TracePrefix.of(original_items[0].trace))
    assert not checkpoint.receipt.boundary.verified
    assert len(checkpoint.messages) == len(original_items[0].trace.events)


def test_an_unsupported_call_excludes_the_checkpoint(tmp_path, original_items):
    checkpoint = _fold(tmp_path, "embeddings").build(TracePrefix.of(original_items[0].trace))
    boundary = checkpoint.receipt.boundary
    assert boundary.unsupported_calls > 0 and not boundary.verified


def test_settings_reach_the_proxy(tmp_path, original_items):
    # trigger_chars past the whole conversation: the proxy never compacts.
    prefix = TracePrefix.of(original_items[0].trace, settings={"trigger_chars": 10**9})
    checkpoint = _fold(tmp_path).build(prefix)
    assert not checkpoint.receipt.boundary.verified


@pytest.mark.parametrize(("mode", "code"), [("crash", Code.FOLD_PROXY_NOT_READY),
                                            ("never-listen", Code.FOLD_PROXY_NOT_READY)])
def test_a_proxy_that_never_listens(tmp_path, original_items, mode, code):
    with pytest.raises(PluginError) as refused:
        _fold(tmp_path, mode, timeout_s=2.0).build(TracePrefix.of(original_items[0].trace))
    assert refused.value.code is code
    assert _alive_with(tmp_path / "data") == []


def test_a_stubborn_helper_is_ended_with_its_proxy(tmp_path, original_items):
    checkpoint = _fold(tmp_path, "stubborn").build(TracePrefix.of(original_items[0].trace))
    assert checkpoint.receipt.boundary.verified
    assert _alive_with(tmp_path / "data") == []


def test_a_summariser_failure_fails_the_fold_with_its_own_code(tmp_path, original_items):
    def refused(messages):
        raise EfoldError(Code.LOOKUP_REQUEST_LIMIT, "no more summaries")

    with pytest.raises(EfoldError) as failed:
        _fold(tmp_path, summarise=refused).build(TracePrefix.of(original_items[0].trace))
    assert failed.value.code is Code.LOOKUP_REQUEST_LIMIT
    assert _alive_with(tmp_path / "data") == []


def _request(port: int, method: str, path: str, body: object | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path, body=None if body is None else json.dumps(body))
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def test_the_capture_endpoint_serves_discovery_forwards_and_own_calls():
    with CaptureEndpoint(model="m1", context_window=4096,
                         summarise=lambda messages: f"summary of {len(messages)}") as capture:
        port = capture.port
        status, data = _request(port, "GET", "/v1/models")
        assert status == 200 and json.loads(data)["data"][0]["context_window"] == 4096
        assert _request(port, "GET", "/models/m1")[0] == 200
        assert _request(port, "GET", "/v1/models/other")[0] == 404
        assert json.loads(_request(port, "GET", "/props")[1])["n_ctx"] == 4096
        sent = [{"role": "user", "content": "hello"}]
        capture.expect(sent, {"role": "assistant", "content": "hi there"})
        # The proxy's own call (its newest message is not the agent's): the summariser.
        status, data = _request(port, "POST", "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": "summarise"}]})
        assert json.loads(data)["choices"][0]["message"]["content"] == "summary of 1"
        # The forward (newest message equal, content as parts): the trace's answer, streamed.
        forward = [{"role": "system", "content": "S"},
                   {"role": "user", "content": [{"type": "text", "text": "hello"}]}]
        status, data = _request(port, "POST", "/chat/completions",
                                {"messages": forward, "stream": True})
        assert status == 200 and b'"hi there"' in data and data.endswith(b"data: [DONE]\n\n")
        assert capture.forwarded == forward and capture.own_calls == 1
        assert capture.unsupported == []
        assert _request(port, "POST", "/v1/embeddings", {"input": "x"})[0] == 404
        assert _request(port, "GET", "/v1/files")[0] == 404
        assert capture.unsupported == ["POST /v1/embeddings", "GET /v1/files"]
