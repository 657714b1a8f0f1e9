"""``openai-compact`` on the real route, end to end against a loopback provider.

The summariser and the reader are the same provider and API (``local``/``responses``,
a loopback server reproducing ``POST /v1/responses/compact`` and streaming
``/v1/responses``): the prep child sends one guarded compaction request, the probe
child's first request starts with the compaction item it got back. With the reader on
Chat Completions instead, the plan marks every slot inventory-infeasible, none is built
and nothing is sent. (Its smoke cannot run: a role without an eligible slot refuses
``report_input_invalid``, as it does for ``ceiling`` on ``original``.) Nothing here has
run against the live service.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_chat import CATALOG
from loopback_compact import CompactServer, serve_compact
from ordinary_user import REAL_RUN_FLAGS

EFOLD = [sys.executable, "-c", "from efold.controller.cli import main; main()"]
PROFILE = """provider = "local"
model = "tiny"
api = "responses"
base_url = "{url}"
catalog = "catalog.toml"
"""


@pytest.fixture
def server() -> Iterator[CompactServer]:
    with serve_compact() as state:
        state.model = "tiny"
        yield state


def run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EFOLD, *args], cwd=tmp, capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/bin:/bin",
                                            "EFOLD_ACCOUNT_ID": "acct-fictional"})


def pilot(tmp: Path, url: str, *, chat_reader: bool) -> dict[str, object]:
    """Smoke, then pilot, of one ``openai-compact`` slot; the reader on the same
    provider and API as the summariser, or (``chat_reader``) on Chat Completions."""
    (tmp / "catalog.toml").write_bytes(CATALOG)
    profile = PROFILE.format(url=url)
    reader = profile.replace('"responses"', '"chat"') if chat_reader else profile
    reader = f"[reader]\n{reader}"
    (tmp / "campaign.toml").write_text(
        'name = "loopback-compact"\nsuite = "original"\ntraces = ["orig-archive-scan"]\n'
        'probe_limit = 1\nroles = ["openai-compact"]\ncap_usd = "5.00"\n'
        f"{reader}[summariser]\n{profile}")
    assert run(tmp, "keygen", "--out", "approver").returncode == 0
    done = run(tmp, "register", "campaign.toml", "--output", "reg")
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("sha256: ")[1].strip()
    (tmp / "runs").mkdir(mode=0o700)
    if chat_reader:  # no slot to smoke or run: the plan says why
        done = run(tmp, "plan", "--registration", "reg/registration.json", "--sha256", sha,
                   "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        plan = json.loads(done.stdout)
        assert isinstance(plan, dict)
        return plan
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


def test_the_same_provider_reads_the_compaction_it_made(tmp_path: Path,
                                                         server: CompactServer) -> None:
    results = pilot(tmp_path, server.base_url, chat_reader=False)
    paths = [r["path"] for r in server.requests]
    # The smoke's one slot, then the pilot's: each a compaction, then the answer.
    assert paths == ["/v1/responses/compact", "/v1/responses"] * 2
    compact, read = (r["body"] for r in server.requests[2:])
    assert set(compact) == {"model", "input"} and compact["model"] == "tiny"
    held = [i for i in read["input"] if i.get("type") == "compaction"]
    assert len(held) == 1 and held[0]["encrypted_content"].startswith("gAAAAABloopback-")
    assert read["input"].index(held[0]) < len(read["input"]) - 1  # before the question
    execution = results["execution"]
    assert isinstance(execution, dict) and execution["completed"] == 1


def test_another_reader_is_skipped_and_nothing_is_sent(tmp_path: Path,
                                                       server: CompactServer) -> None:
    plan = pilot(tmp_path, server.base_url, chat_reader=True)
    assert (plan["slots"], plan["eligible"], plan["skipped_inventory_infeasible"]) == (1, 0, 1)
    assert plan["checkpoints"] == 0  # never built, so never compacted
    assert server.requests == []
