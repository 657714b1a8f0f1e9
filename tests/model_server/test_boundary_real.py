"""Boundary cases on the real route, as an operator runs them, against the local server.

keygen, register, authorize, smoke, ``pilot --real``: a bundled case on two roles,
the agent played by SmolLM2 on loopback through the guard (Chat Completions, the case's
workspace tools offered, and under ``lookup-allowed-v1`` the history lookup tools too). Between efold
and the server sits the recording proxy of ``test_real_campaign``: every request the
agents sent is read there, and the money efold settled is checked against what the
server reported, exactly. The oracles then judge whatever the model did to each
workspace copy; a 135M model rarely does the work, so the verdicts are real but not a
measure of anything but the mechanics.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .conftest import MODEL, PROVIDER, Operator, RecordingProxy, settled_matches_server

pytestmark = pytest.mark.model_server

# Two folded roles, one case, chosen for the prompt the model must read (CI time: the
# server reads about 60 prompt tokens a second at 10k tokens of context). B03's session
# folds to the smallest cold boundary of the bundled cases (about 5k tokens; B01's is
# 10k, its compaction checkpoint 11k, the native role's whole session more). ``store``
# is that cold boundary plus the history lookup tools, offered under the lookup probe
# mode, and ``pack`` puts its (short) pack before the same boundary: the server reads
# each prompt once and answers the repeats from its prompt cache.
ROLES = ["store", "pack"]
CASES = ["B03"]
CAMPAIGN = """\
name = "local-boundary"
suite = "original"
probe_limit = 0
roles = {roles}
probe_mode = "lookup-allowed-v1"
cap_usd = "1.00"

[boundary]
cases = {cases}

[budgets]
max_requests = 4

[reader]
provider = "{provider}"
model = "{model}"
api = "chat"
base_url = "{url}"
stream = false
catalog = "catalog.toml"
max_output_tokens = 64
max_tokens_field = "max_tokens"
"""


def test_boundary_cases_on_the_real_route(tmp_path: Path, proxy: RecordingProxy) -> None:
    op = Operator(tmp_path, CAMPAIGN.format(roles=json.dumps(ROLES), cases=json.dumps(CASES),
                                            provider=PROVIDER, model=MODEL, url=proxy.url))
    smoke = op.smoke()
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    smoke_requests = len(proxy.responses)
    started = time.monotonic()
    pilot = op.pilot("--no-progress")
    seconds = time.monotonic() - started
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    run = op.runs / "pilot"

    # Every slot is a boundary slot, completed and judged by the controller.
    receipts = [json.loads(p.read_text()) for p in (run / "receipts").glob("*.json")]
    assert len(receipts) == len(ROLES) * len(CASES)
    for receipt in receipts:
        record = receipt["boundary"]
        assert receipt["status"] == "completed", receipt
        assert record["oracles"] and all(o["verdict"] in ("pass", "fail", "not_applicable")
                                         for o in record["oracles"])
        assert 1 <= record["requests"] <= 4 and receipt["spend"]["admitted"] == record["requests"]
        assert len(record["environment_sha256"]) == 64
        assert (run / "slots" / receipt["slot"] / "work.json").is_file()

    # Every agent request was the server's, and settled at exactly what it reported.
    responses = proxy.responses[smoke_requests:]
    assert len(responses) == sum(r["boundary"]["requests"] for r in receipts)
    settled_matches_server(run, responses)

    results = json.loads((run / "results.json").read_text())
    boundary = results["boundary"]
    assert boundary["reference_arm"] == "store"  # no native role: the first
    assert all(i["model"] == f"{PROVIDER}/{MODEL}" for i in boundary["incidents"])
    print(f"\nboundary cases on {PROVIDER}/{MODEL}: pilot {seconds:.0f} s, "
          f"{len(responses)} agent requests")
    for arm in boundary["arms"]:
        passed = arm["passed"]
        print(f"  {arm['arm']}: {passed['successes']}/{passed['trials']} cases passed, "
              f"{arm['actions']} actions, tokens/task {arm['tokens_per_task_median']}")
