"""The local route: models on this machine (loopback, no credential) run with one
command, ``pilot --reader URL --model NAME`` (or a campaign file whose every model is
local), without keygen or signed authorizations, smoking themselves first.

The model server is the scripted Chat Completions server on loopback
(``tests/kit/loopback_chat.py``: the real HTTP seam, answering a fixed reply with usage,
and its model list ``tiny``); ``tests/model_server`` runs the same route against a real
llama.cpp server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from efold_pilot_kit import journal_rows
from loopback_chat import Server, serve_chat

from efold.errors import Code
from efold.registry.authorization import AuthorizationDomain
from efold.registry.burn import FAUX_REGISTRY_NAME

CLI = [sys.executable, "-m", "efold.controller"]


@pytest.fixture
def server() -> Iterator[Server]:
    with serve_chat() as state:
        yield state


def _pilot(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run([*CLI, "pilot", "--runs", str(tmp_path / "runs"), "--json",
                           "--no-progress", *args], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "200"})
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    return done, json.loads(last) if last.startswith("{") else {}


def _receipts(run: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_bytes()) for p in sorted((run / "receipts").glob("*.json"))]


def test_a_reader_on_the_command_line_runs_in_one_command(server: Server,
                                                          tmp_path: Path) -> None:
    done, line = _pilot(tmp_path, "--reader", server.base_url, "--model", "tiny",
                        "--server", "llama-cpp-python", "--limit", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    run = Path(line["run"])
    assert line["status"] == "complete" and line["completed"] == line["planned"] == 8
    # The smoke came first, in the same run: its phases, then the campaign's.
    out = done.stdout
    assert out.index("smoke slots: 4/4") < out.index("probe slots: 4/4"), out
    # Every slot's reader request reached the server, as its preset says: chat, not
    # streamed (llama.cpp's Python server streams no usage), the limit in max_tokens.
    bodies = [r["body"] for r in server.requests]
    assert len(bodies) >= 8 and all(b["model"] == "tiny" and b["stream"] is False
                                     for b in bodies)
    assert all("max_completion_tokens" not in b for b in bodies)
    # Money is admitted and settled exactly as on a paid route, at the local price: zero.
    holds = journal_rows(run, "SELECT state, settled_units FROM holds")
    assert holds and all(state == "settled" and units == 0 for state, units in holds)
    registration = json.loads((run / "registration.json").read_bytes())
    assert registration["campaign"]["reader"]["provider"] == "local"
    assert registration["campaign"]["reader"]["base_url"] == server.base_url
    # Its own authorization, in the local domain, burned beside the run root.
    markers = list((tmp_path / "runs" / FAUX_REGISTRY_NAME).iterdir())
    assert len(markers) == 1
    claim = json.loads((markers[0] / "claim.json").read_bytes())
    assert claim["domain"] == AuthorizationDomain.LOCAL.value and claim["run_id"] == run.name


def test_a_faux_reader_reads_what_a_local_summariser_wrote(server: Server,
                                                          tmp_path: Path) -> None:
    done, line = _pilot(tmp_path, "--summariser", server.base_url, "--summariser-model",
                        "tiny", "--server", "llama-cpp-python", "--roles",
                        "native,compaction", "--limit", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert line["faux"] is True and line["completed"] == 4
    # The compaction arm's summaries came from the server (the reader sends nothing).
    assert server.requests
    assert all(r["body"]["model"] == "tiny" for r in server.requests)
    checkpoint = next(Path(line["run"]).glob("checkpoints/*compaction*"))
    assert any(b"SUMMARY-FROM-TINY" in p.read_bytes()
               for p in checkpoint.rglob("*") if p.is_file())
    # A model wrote them: no stand-in is named anywhere.
    run = Path(line["run"])
    for text in (done.stdout, (run / "summary.md").read_text(),
                 (run / "report.html").read_text()):
        assert "stand-in" not in text


def test_a_smoke_that_fails_admits_nothing_after_it(server: Server, tmp_path: Path) -> None:
    # The smoke's fourth slot loses its request (the connection drops unanswered): one
    # loss breaks no run rule, but the smoke did not pass.
    server.answer_only = 3
    done, line = _pilot(tmp_path, "--reader", server.base_url, "--model", "tiny",
                        "--server", "llama-cpp-python", "--limit", "3")
    assert done.returncode == 3, done.stdout + done.stderr
    assert line["code"] == Code.SMOKE_FAILED.value
    run = Path(line["run"])
    receipts = _receipts(run)
    assert len(receipts) == 12  # every slot visited
    smoke = [r for r in receipts if r["status"] != "unadmitted"]
    assert len(smoke) == 4  # the first slot of each role, and nothing after it
    assert all(r["status"] == "unadmitted" and r["code"] == Code.LOOKUP_STOPPED.value
               for r in receipts if r not in smoke)
    assert "smoke_failed" in (run / "summary.md").read_text()


def test_a_model_the_server_does_not_serve_refuses_before_the_run(server: Server,
                                                                    tmp_path: Path) -> None:
    done, _ = _pilot(tmp_path, "--reader", server.base_url, "--model", "nope",
                     "--server", "llama-server")
    assert done.returncode == 2
    said = done.stderr
    assert f"refused: {Code.LOCAL_MODEL_NOT_SERVED.value}" in said, said
    assert "serves tiny" in said and "--alias NAME" in said  # what it is, how to fix it
    assert not list((tmp_path / "runs").glob("default-*"))  # nothing was claimed
    assert not server.requests  # no model request was sent


def test_refusals_name_the_cause(tmp_path: Path) -> None:
    cases = [
        (["--reader", "http://127.0.0.1:9/v1", "--model", "m"],
         Code.LOCAL_SERVER_UNREACHABLE, "no server answers at http://127.0.0.1:9/v1"),
        (["--reader", "http://192.0.2.1/v1", "--model", "m"],
         Code.CAMPAIGN_INVALID, "on this machine"),
        (["--faux", "--reader", "http://127.0.0.1:9/v1", "--model", "m"],
         Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE, "run it with --local"),
    ]
    for args, code, said in cases:
        done, _ = _pilot(tmp_path, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert f"refused: {code.value}" in done.stderr and said in done.stderr, done.stderr
    usage = subprocess.run([*CLI, "pilot", "--reader", "http://127.0.0.1:9/v1"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert usage.returncode == 2 and "--reader URL and --model NAME go together" in usage.stderr


def test_a_campaign_file_with_a_paid_reader_needs_real(tmp_path: Path) -> None:
    campaign = tmp_path / "paid.toml"
    campaign.write_text('name = "paid"\nsuite = "original"\nroles = ["native"]\n'
                        'cap_usd = "5.00"\n[reader]\nprovider = "openai"\n'
                        'model = "gpt-5-mini"\napi = "responses"\n'
                        'base_url = "https://api.openai.com/v1"\n'
                        'credential_env = "OPENAI_API_KEY"\n')
    for args in ([], ["--local"]):
        done, _ = _pilot(tmp_path, "--campaign", str(campaign), *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "refused: lookup_pilot_real_route_unavailable" in done.stderr


def test_a_context_window_too_small_says_the_sizes(server: Server, tmp_path: Path) -> None:
    """A catalog's context_window tightens the envelope, which admits by bytes: every
    checkpoint is skipped, and the run names each with its first request's budget and
    the envelope. Nothing was proven, so the smoke did not pass."""
    (tmp_path / "cat.toml").write_text(
        'version = 1\n[[model]]\nprovider = "local"\nmodel = "tiny"\n'
        'service_tiers = false\ncontext_window = 6000\ninput = "0.5"\noutput = "1.5"\n'
        'cache_read = "0.05"\ncache_write = "0.5"\n')
    (tmp_path / "cw.toml").write_text(
        'name = "cw"\nsuite = "original"\nroles = ["native"]\ncap_usd = "1.00"\n'
        f'[reader]\nprovider = "local"\nmodel = "tiny"\nbase_url = "{server.base_url}"\n'
        'server = "llama-cpp-python"\ncatalog = "cat.toml"\n')
    done, line = _pilot(tmp_path, "--campaign", str(tmp_path / "cw.toml"), "--limit", "1")
    assert done.returncode == 3 and line["code"] == Code.SMOKE_FAILED.value
    said = " ".join(done.stdout.split())  # the terminal may wrap the line
    assert "skipped (inventory_infeasible): its first request counts as up to" in said
    assert "over the reader's input envelope of 6,000 tokens" in said
    assert not server.requests


PROXY = Path(__file__).resolve().parents[1] / "kit" / "compacting_proxy.py"


def test_a_compaction_proxy_gets_its_summaries_from_the_local_model(server: Server,
                                                                   tmp_path: Path) -> None:
    """A third-party compaction proxy that compacts often (a small trigger) makes dozens
    of summary requests per checkpoint: every one reaches the local summariser model,
    admitted and settled under the cap, well past the old limit of 10."""
    (tmp_path / "proxy.toml").write_text(f"""\
name = "proxy-local"
suite = "original"
traces = ["orig-stage-hire"]
probe_limit = 1
roles = ["squeeze"]
cap_usd = "60.00"

[role.squeeze]
command = [{json.dumps(sys.executable)}, {json.dumps(str(PROXY))}]
proxy = {{ upstream_env = "UPSTREAM_BASE_URL", port_env = "PROXY_PORT" }}
settings = {{ trigger_chars = 1500, keep = 2 }}
""")
    done, line = _pilot(tmp_path, "--campaign", str(tmp_path / "proxy.toml"),
                        "--summariser", server.base_url, "--summariser-model", "tiny",
                        "--server", "llama-cpp-python")
    assert done.returncode == 0, done.stdout + done.stderr
    run = Path(line["run"])
    summaries = journal_rows(run, "SELECT state, settled_units FROM holds "
                                  "WHERE slot = 'r1.squeeze.orig-stage-hire'")
    assert len(summaries) > 10, summaries
    assert all(state == "settled" for state, _ in summaries)
    assert len(server.requests) == len(summaries)  # each one reached the model
    assert all("Summarise the conversation" in json.dumps(r["body"]) for r in server.requests)
    assert line["completed"] == 1


def test_a_local_run_in_parts_is_continued_with_its_own_authorization(
        server: Server, tmp_path: Path) -> None:
    done, line = _pilot(tmp_path, "--reader", server.base_url, "--model", "tiny",
                        "--server", "llama-cpp-python", "--limit", "2", "--slots", "0:6")
    assert done.returncode == 0, done.stdout + done.stderr
    first = Path(line["run"])
    assert line["chain"] == {"links": 1, "to_run": 2, "verdict": "partial"}
    rest, line = _pilot(tmp_path, "--local", "--continue", str(first))
    assert rest.returncode == 0, rest.stdout + rest.stderr
    assert line["chain"] == {"links": 2, "to_run": 0, "verdict": "complete"}
    assert line["planned"] == 8 and line["completed"] == 8
    second = Path(line["run"])
    plan = json.loads((second / "plan.json").read_text())
    assert len(plan["slots"]) == 2 and plan["link"]["index"] == 2
    # Each link minted and burned a local authorization of its own, bound to its plan.
    for run in (first, second):
        marker = json.loads((run / "authorization-consumed.json").read_text())
        assert marker["domain"] == AuthorizationDomain.LOCAL.value, marker


def test_only_a_local_run_imports_the_http_client_that_checks_its_server() -> None:
    # The model-list check's urllib (http.client, email, ssl) is imported when a local
    # run asks, not at every pilot's start.
    code = ("import sys\n"
            "import efold.controller.commands.pilot\n"
            "print([m for m in ('urllib.request', 'http.client') if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "[]"
