"""The real route end to end, as an operator runs it, against the local llama.cpp server.

keygen, register, authorize (``--registration``), smoke, pilot --real: a campaign of
three arms (two of them compaction arms whose summaries the model writes) and four
probes, read by SmolLM2 on loopback. Between efold and the server sits a recording proxy
of the test's own: what the server reported is read there, independently of efold, and
the money efold settled is checked against it exactly.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from efold.registry.journal import JournalReader

from .conftest import MODEL, PROVIDER, Operator, RecordingProxy, settled_matches_server

pytestmark = pytest.mark.model_server

ROLES = ["compaction", "compaction-2", "cold-rebuild"]
PROBES = 4  # per role (the campaign's probe_limit): CI time, on a 135M model and 2 cores
SLOTS = PROBES * len(ROLES)
# Reply limits below the README's example (96 and 512), for CI time: at 11k tokens of
# context (the cold-rebuild checkpoint) the server writes about 6 tokens a second, and a
# 135M model's answer and summary need exist only, not be long.
CAMPAIGN = """\
name = "local-smollm2"
suite = "original"
traces = ["orig-archive-scan"]
probe_limit = {probes}
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
max_output_tokens = 32
max_tokens_field = "max_tokens"

[summariser]
provider = "{provider}"
model = "{model}"
api = "chat"
base_url = "{url}"
stream = false
catalog = "catalog.toml"
max_output_tokens = 128
max_tokens_field = "max_tokens"
max_requests = 2
"""
def test_smoke_then_a_real_campaign_on_the_local_server(tmp_path: Path, proxy: RecordingProxy,
                                                        ) -> None:
    op = Operator(tmp_path, CAMPAIGN.format(roles=json.dumps(ROLES), probes=PROBES,
                                            provider=PROVIDER, model=MODEL, url=proxy.url))
    runs = op.runs

    # Without a passing smoke, the real route stays shut, and nothing is consumed.
    early = op.pilot()
    assert early.returncode == 2
    assert "refused: lookup_pilot_real_route_unavailable" in early.stderr
    assert "smoke" in early.stderr and not (runs / "pilot").exists()
    assert proxy.statuses == []

    started = time.monotonic()
    smoke = op.smoke()
    smoke_s = time.monotonic() - started
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "smoke: passed (3 slots, one per role)" in smoke.stdout
    smoke_requests = len(proxy.responses)

    started = time.monotonic()
    pilot = op.pilot("--keep-answers", "--no-progress")
    pilot_s = time.monotonic() - started
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    run = runs / "pilot"
    results = json.loads((run / "results.json").read_text())
    assert results["reader"] == f"{PROVIDER}/{MODEL}" and results["reader_faux"] is False
    assert f"{PROVIDER}/{MODEL}" in (run / "summary.md").read_text()
    execution = results["execution"]
    assert execution["planned"] == SLOTS and execution["completed"] == SLOTS, execution

    # Settled money is exactly the server's reported usage, priced by the catalog, for
    # every request of the run (12 probe answers and the summaries), read at the proxy.
    settled = settled_matches_server(run, proxy.responses[smoke_requests:])
    with JournalReader(run) as journal:
        holds = journal.rows("holds")
    summaries = [h for h in holds if h["slot"].count(".") == 2]  # checkpoint keys
    assert len(summaries) == 3  # compaction: 1, compaction-2: 2

    # The answers are kept privately; the reports stay content-free.
    answers = [json.loads(line) for line in (run / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == SLOTS and stat.S_IMODE((run / "answers.jsonl").stat().st_mode) == 0o600
    report_text = "".join((run / n).read_text() for n in ("results.json", "summary.md"))
    assert not any(a["answer"] and a["answer"] in report_text for a in answers
                   if len(a["answer"]) > 12)

    # The authorization is single-use: the same run directory, made anew, refuses.
    run.rename(runs / "pilot-done")
    again = op.pilot("--no-progress")
    assert again.returncode == 2 and "authorization_consumed" in again.stderr

    by_role = {r["role"]: r for r in results["results"]}
    print(f"\nreal campaign on {PROVIDER}/{MODEL}: smoke {smoke_s:.0f} s, "
          f"pilot {pilot_s:.0f} s ({pilot_s / SLOTS:.1f} s per slot); "
          f"settled {settled} units over {len(holds)} requests")
    for role in ROLES:
        exact = by_role[role]["overall"]["exact"]
        print(f"  {role}: {exact['successes']}/{exact['trials']} exact, Wilson 95% "
              f"{exact['wilson95']['lower']:.3f}-{exact['wilson95']['upper']:.3f}")
