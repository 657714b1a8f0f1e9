"""``anthropic-compact`` on the real route, end to end against a loopback Messages API.

The summariser and the reader are the same provider and API (``anthropic``/``messages``,
``tests/kit/loopback_messages.py`` reproducing ``POST /v1/messages``, streamed for the
reader, with ``compaction`` for the summariser): the prep child sends one guarded
on-demand compaction request, the probe child's first request starts with the signed
block it got back. Both send the credential as ``x-api-key`` (never as a bearer token)
with ``anthropic-version``, and the compaction beta where the block is involved.
Nothing here has run against the live service.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_messages import (
    CATALOG_TOML,
    COMPACT_INPUT_TOKENS,
    COMPACT_OUTPUT_TOKENS,
    CREDENTIAL,
    MODEL,
    SIGNATURE_PREFIX,
    UNITS_PER_TOKEN,
    MessagesServer,
    serve_messages,
)
from ordinary_user import REAL_RUN_FLAGS

EFOLD = [sys.executable, "-c", "from efold.controller.cli import main; main()"]
PROFILE = f"""provider = "anthropic"
model = "{MODEL}"
api = "messages"
base_url = "{{url}}"
catalog = "catalog.toml"
credential_env = "ANTHROPIC_API_KEY"
max_output_tokens = 512
"""
BETA = "compact-2026-09-04"


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with serve_messages() as state:
        yield state


def run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EFOLD, *args], cwd=tmp, capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/bin:/bin",
                                            "EFOLD_ACCOUNT_ID": "acct-fictional",
                                            "ANTHROPIC_API_KEY": CREDENTIAL})


def smoke_then_pilot(tmp: Path, url: str) -> dict[str, object]:
    (tmp / "catalog.toml").write_bytes(CATALOG_TOML)
    profile = PROFILE.format(url=url)
    (tmp / "campaign.toml").write_text(
        'name = "loopback-anthropic-compact"\nsuite = "original"\n'
        'traces = ["orig-archive-scan"]\nprobe_limit = 1\nroles = ["anthropic-compact"]\n'
        f'cap_usd = "5.00"\n[reader]\n{profile}[summariser]\n{profile}')
    assert run(tmp, "keygen", "--out", "approver").returncode == 0
    done = run(tmp, "register", "campaign.toml", "--output", "reg")
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("sha256: ")[1].strip()
    (tmp / "runs").mkdir(mode=0o700)
    for command, name, extra in (("smoke", "s", ["--smoke"]), ("pilot", "p", [])):
        auth = run(tmp, "authorize", "--registration", "reg/registration.json", "--sha256",
                   sha, *extra, "--key", "approver.key", "--out", f"{name}.json",
                   "--output-root", str(tmp / "runs" / name), "--approver", "ops",
                   "--approval-reference", "a-1")
        assert auth.returncode == 0, auth.stderr
        flag = ["--real"] if command == "pilot" else []
        done = run(tmp, command, *flag, "--registration", "reg/registration.json",
                   "--sha256", sha, "--run-dir", str(tmp / "runs" / name),
                   "--authorization", f"{name}.json", "--trust", "approver.pub",
                   "--no-progress", *REAL_RUN_FLAGS)
        assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((tmp / "runs" / "p" / "results.json").read_text())
    assert isinstance(results, dict)
    return results


def test_the_same_provider_reads_the_block_it_made(tmp_path: Path,
                                                   server: MessagesServer) -> None:
    results = smoke_then_pilot(tmp_path, server.base_url)
    # The smoke's one slot, then the pilot's: each a compaction, then the answer.
    assert [r["path"] for r in server.requests] == ["/v1/messages"] * 4
    compact, read = server.requests[2:]
    for request in (compact, read):
        headers = request["headers"]
        assert headers["x-api-key"] == CREDENTIAL and "authorization" not in headers
        assert headers["anthropic-version"] == "2023-06-01"
        assert headers["anthropic-beta"] == BETA  # the block is in play in both
    assert compact["body"]["compaction"] == {"type": "summarize"}
    assert "stream" not in compact["body"] and compact["headers"]["accept"] == "application/json"
    first = read["body"]["messages"][0]
    assert first["role"] == "assistant"
    [block] = first["content"]
    assert block["type"] == "compaction" and block["signature"].startswith(SIGNATURE_PREFIX)
    assert read["body"]["stream"] is True
    execution = results["execution"]
    assert isinstance(execution, dict) and execution["completed"] == 1
    # The compaction's cost is reported only in usage.iterations (its top-level counts
    # are zero): it is settled all the same, exactly, on the summariser's line.
    [role] = results["results"]
    cost = role["cost_per_correct"]
    assert cost["summariser_settled"]["units"] == (
        COMPACT_INPUT_TOKENS * UNITS_PER_TOKEN["input"]
        + COMPACT_OUTPUT_TOKENS * UNITS_PER_TOKEN["output"])
    assert cost["probe_settled"]["units"] > 0
    # The credential reached the server and nothing else: no file of the run holds it.
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert files and not any(CREDENTIAL.encode() in p.read_bytes() for p in files)
