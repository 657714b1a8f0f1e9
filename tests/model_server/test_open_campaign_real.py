"""The open campaign on the real route: the user's imported conversation and a fold of
each kind (entry point, command, compaction proxy) next to reference arms, read by the
local llama.cpp model; the proxy's own summarisation calls and the compaction arm's
summary are written by that model too, each a guarded, metered request."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from open_campaign_kit import (
    TRACE_ID,
    build_suite,
    campaign_toml,
    efold_env,
    field,
    guide_example,
    guide_scripts,
)
from ordinary_user import REAL_RUN_FLAGS
from plugin_kit import installed_plugin

from efold.registry.journal import JournalReader

from .conftest import CATALOG, MODEL, PROVIDER

pytestmark = pytest.mark.model_server

ROLES = ("native", "compaction", "facts-store", "facts-tail", "squeeze")
ACCOUNT = "acct-local-fictional"


def _profile(table: str, url: str, max_output: int) -> str:
    return f"""
[{table}]
provider = "{PROVIDER}"
model = "{MODEL}"
api = "chat"
base_url = "{url}"
stream = false
catalog = "catalog.toml"
max_output_tokens = {max_output}
max_tokens_field = "max_tokens"
"""


def test_an_open_campaign_on_the_real_route(tmp_path: Path, model_server_url: str) -> None:
    env = {**os.environ, "EFOLD_ACCOUNT_ID": ACCOUNT, "CI": "1"}  # CI: loopback only
    efold = efold_env(env)
    # CI time: the server reads the native role's whole conversation (about 6k tokens
    # at filler 9) at about 80 tokens a second, and writes 10-30 tokens a second; filler
    # 9 is the least that still compacts (7.0k estimated tokens, the trigger 6.4k).
    build_suite(tmp_path, filler=9)
    (tmp_path / "catalog.toml").write_bytes(CATALOG)
    extra = (_profile("reader", model_server_url, 32)
             + _profile("summariser", model_server_url, 128) + "max_requests = 4\n")
    (tmp_path / "campaign.toml").write_text(campaign_toml(
        suite="suite", **guide_scripts(tmp_path), roles=ROLES, cap_usd="1.00",
        top=f'traces = ["{TRACE_ID}"]\nprobe_limit = 2', extra=extra, trigger_chars=12000,
        proxy_timeout=540))
    with installed_plugin("facts-store", guide_example("entry-point-fold"),
                          attr="FactsStoreFold"):
        assert efold("keygen", "--out", "approver", cwd=tmp_path).returncode == 0
        registered = efold("register", "campaign.toml", "--output", "reg", cwd=tmp_path)
        assert registered.returncode == 0, registered.stderr
        reg, sha = field(registered.stdout, "registration"), field(registered.stdout, "sha256")
        runs = tmp_path / "runs"
        runs.mkdir(mode=0o700)
        real = ["--registration", reg, "--sha256", sha, "--trust", "approver.pub",
                *REAL_RUN_FLAGS]
        for run, extra_flag in (("smoke", ["--smoke"]), ("pilot", [])):
            done = efold("authorize", "--registration", reg, "--sha256", sha, *extra_flag,
                         "--key", "approver.key", "--out", f"{run}-auth.json",
                         "--output-root", str(runs / run), "--approver", "ops@example.invalid",
                         "--approval-reference", "local-0002", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
        smoke = efold("smoke", *real, "--run-dir", str(runs / "smoke"), "--authorization",
                      "smoke-auth.json", "--no-progress", cwd=tmp_path)
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        pilot = efold("pilot", "--real", *real, "--run-dir", str(runs / "pilot"),
                      "--authorization", "pilot-auth.json", "--no-progress", cwd=tmp_path)
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    run = runs / "pilot"
    results = json.loads((run / "results.json").read_text())
    assert results["reader"] == f"{PROVIDER}/{MODEL}"
    execution = results["execution"]
    assert execution["planned"] == 10 and execution["completed"] == 10, execution
    # The proxy's own calls were real, settled requests on its checkpoint key, and so
    # was the compaction arm's summary: every hold of the run settled.
    with JournalReader(run) as journal:
        holds = journal.rows("holds")
    assert holds and all(h["state"] == "settled" for h in holds)
    prep_holds = {h["slot"] for h in holds if h["slot"].count(".") == 2}
    assert f"r1.squeeze.{TRACE_ID}" in prep_holds and f"r1.compaction.{TRACE_ID}" in prep_holds
    by_role = {r["role"]: r["overall"]["exact"] for r in results["results"]}
    print(f"\nopen campaign on {PROVIDER}/{MODEL}: "
          + ", ".join(f"{role} {e['successes']}/{e['trials']}" for role, e in by_role.items())
          + f"; {len(holds)} requests, {len(prep_holds)} checkpoints summarised")
