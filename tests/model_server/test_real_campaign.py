"""The real route end to end, as an operator runs it, against the local llama.cpp server.

keygen, register, authorize (``--registration``), smoke, pilot --real: a campaign of
three arms (two of them compaction arms whose summaries the model writes) and eight
probes, read by SmolLM2 on loopback. Between efold and the server sits a recording proxy
of the test's own: what the server reported is read there, independently of efold, and
the money efold settled is checked against it exactly.
"""

from __future__ import annotations

import http.client
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from efold.guard import parse_catalog
from efold.guard.pricing import price_units
from efold.registry.journal import JournalReader

from .conftest import CATALOG, MODEL, PROVIDER

pytestmark = pytest.mark.model_server

ROLES = ["compaction", "compaction-2", "cold-rebuild"]
CAMPAIGN = """\
name = "local-smollm2"
suite = "original"
traces = ["orig-archive-scan"]
probe_limit = 8
roles = {roles}
selection_seed = 20261130
schedule_seed = 20261130
cap_usd = "1.00"

[reader]
provider = "{provider}"
model = "{model}"
api = "chat"
base_url = "{url}"
stream = false
catalog = "catalog.toml"
max_output_tokens = 96
max_tokens_field = "max_tokens"

[summariser]
provider = "{provider}"
model = "{model}"
api = "chat"
base_url = "{url}"
stream = false
catalog = "catalog.toml"
max_output_tokens = 512
max_tokens_field = "max_tokens"
max_requests = 2
"""
ACCOUNT = "acct-local-fictional"
EFOLD = str(Path(sys.executable).with_name("efold-controller"))


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
                "output": sum(r["usage"]["completion_tokens"] for r in self.responses)}


@pytest.fixture
def proxy(model_server_url: str) -> Iterator[RecordingProxy]:
    p = RecordingProxy(model_server_url)
    yield p
    p.server.shutdown()


def _efold(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EFOLD, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=3600)


def _field(out: str, name: str) -> str:
    return next(line.split(": ", 1)[1] for line in out.splitlines()
                if line.startswith(f"{name}: "))


def _authorize(tmp: Path, env: dict[str, str], reg: Path, sha: str, run_dir: Path, out: str,
               *extra: str) -> Path:
    done = _efold("authorize", "--registration", str(reg), "--sha256", sha, *extra,
                  "--key", "approver.key", "--out", out, "--output-root", str(run_dir),
                  "--approver", "ops@example.invalid", "--approval-reference", "local-0001",
                  cwd=tmp, env=env)
    assert done.returncode == 0, done.stderr
    return tmp / out


def test_smoke_then_a_real_campaign_on_the_local_server(tmp_path: Path, proxy: RecordingProxy,
                                                        ) -> None:
    env = {**os.environ, "EFOLD_ACCOUNT_ID": ACCOUNT, "CI": "1"}  # CI: loopback only
    (tmp_path / "catalog.toml").write_bytes(CATALOG)
    (tmp_path / "campaign.toml").write_text(CAMPAIGN.format(
        roles=json.dumps(ROLES), provider=PROVIDER, model=MODEL, url=proxy.url))
    assert _efold("keygen", "--out", "approver", cwd=tmp_path, env=env).returncode == 0
    registered = _efold("register", "campaign.toml", "--output", "reg", cwd=tmp_path, env=env)
    assert registered.returncode == 0, registered.stderr
    reg, sha = Path(_field(registered.stdout, "registration")), _field(registered.stdout, "sha256")
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    smoke_auth = _authorize(tmp_path, env, reg, sha, runs / "smoke", "smoke-auth.json", "--smoke")
    pilot_auth = _authorize(tmp_path, env, reg, sha, runs / "pilot", "pilot-auth.json")
    real = ["--registration", str(reg), "--sha256", sha, "--trust", "approver.pub"]

    # Without a passing smoke, the real route stays shut, and nothing is consumed.
    early = _efold("pilot", "--real", *real, "--run-dir", str(runs / "pilot"),
                   "--authorization", str(pilot_auth), cwd=tmp_path, env=env)
    assert early.returncode == 2
    assert "refused: lookup_pilot_real_route_unavailable" in early.stderr
    assert "smoke" in early.stderr and not (runs / "pilot").exists()
    assert proxy.statuses == []

    started = time.monotonic()
    smoke = _efold("smoke", *real, "--run-dir", str(runs / "smoke"), "--authorization",
                   str(smoke_auth), "--no-progress", cwd=tmp_path, env=env)
    smoke_s = time.monotonic() - started
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "smoke: passed (3 slots, one per role)" in smoke.stdout
    smoke_requests = len(proxy.responses)

    started = time.monotonic()
    pilot = _efold("pilot", "--real", *real, "--run-dir", str(runs / "pilot"),
                   "--authorization", str(pilot_auth), "--keep-answers", "--no-progress",
                   cwd=tmp_path, env=env)
    pilot_s = time.monotonic() - started
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    run = runs / "pilot"
    results = json.loads((run / "results.json").read_text())
    assert results["reader"] == f"{PROVIDER}/{MODEL}" and results["reader_faux"] is False
    assert f"{PROVIDER}/{MODEL}" in (run / "summary.md").read_text()
    execution = results["execution"]
    assert execution["planned"] == 24 and execution["completed"] == 24, execution

    # Settled money is exactly the server's reported usage, priced by the catalog, for
    # every request of the run (24 probe answers and the summaries), read at the proxy.
    entry = parse_catalog(CATALOG).entry(PROVIDER, MODEL)
    run_responses = proxy.responses[smoke_requests:]
    with JournalReader(run) as journal:
        holds = journal.rows("holds")
    assert len(holds) == len(run_responses) and all(h["state"] == "settled" for h in holds)
    settled = sum(h["settled_units"] for h in holds)
    assert settled == sum(price_units(entry, {"input": r["usage"]["prompt_tokens"],
                                              "output": r["usage"]["completion_tokens"]}, None)
                          for r in run_responses)
    summaries = [h for h in holds if h["slot"].count(".") == 2]  # checkpoint keys
    assert len(summaries) == 3  # compaction: 1, compaction-2: 2

    # The answers are kept privately; the reports stay content-free.
    answers = [json.loads(line) for line in (run / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == 24 and stat.S_IMODE((run / "answers.jsonl").stat().st_mode) == 0o600
    report_text = "".join((run / n).read_text() for n in ("results.json", "summary.md"))
    assert not any(a["answer"] and a["answer"] in report_text for a in answers
                   if len(a["answer"]) > 12)

    # The authorization is single-use: the same run directory, made anew, refuses.
    run.rename(runs / "pilot-done")
    again = _efold("pilot", "--real", *real, "--run-dir", str(runs / "pilot"),
                   "--authorization", str(pilot_auth), "--no-progress", cwd=tmp_path, env=env)
    assert again.returncode == 2 and "authorization_consumed" in again.stderr

    by_role = {r["role"]: r for r in results["results"]}
    print(f"\nreal campaign on {PROVIDER}/{MODEL}: smoke {smoke_s:.0f} s, "
          f"pilot {pilot_s:.0f} s ({pilot_s / 24:.1f} s per slot); "
          f"settled {settled} units over {len(holds)} requests")
    for role in ROLES:
        exact = by_role[role]["overall"]["exact"]
        print(f"  {role}: {exact['successes']}/{exact['trials']} exact, Wilson 95% "
              f"{exact['wilson95']['lower']:.3f}-{exact['wilson95']['upper']:.3f}")
