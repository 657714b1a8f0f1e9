"""The ledger arm's extractor on a model route: each of the three extractions is one
request to the campaign's summariser model, its reply validated whole; a reply that
fails degrades its stage (nothing added, the reason recorded), never repaired.

The request and the reply's rules are tested in-process (``folds.ledger_model``); the
route end to end through real prep children, the guard and the journal, against the
scripted Chat Completions server on loopback (``tests/kit/loopback_chat.py``)."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from efold_pilot_kit import journal_rows
from loopback_chat import Server, serve_chat

from efold.controller.campaigns.campaign import Role
from efold.controller.campaigns.plan import summary_requests_per_checkpoint
from efold.corpus.suites import original_suite
from efold.errors import Code
from efold.folds import TracePrefix, read_checkpoint
from efold.folds.arms import LedgerColdFold
from efold.folds.checkpoint import HistoryRecord
from efold.folds.errors import FoldError
from efold.folds.ledger import (
    LEDGER_EXTRACTIONS,
    LEDGER_FILE,
    Found,
    LedgerEntry,
    check_extension,
    decode_ledger,
    extract,
    render_ledger,
    treated,
)
from efold.folds.ledger_model import (
    ENTRY_CHARS,
    EXTRACTION_INSTRUCTION,
    MAX_ENTRIES,
    extraction_request,
    model_extractor,
    parse_entries,
    request_tokens,
    source_bytes,
)
from efold.report.results import STAND_IN_EXTRACTOR

CLI = [sys.executable, "-m", "efold.controller"]
CAMPAIGN = """name = "ledger-model"
suite = "original"
traces = ["orig-stage-hire", "orig-cafe-fitout"]
probe_limit = 1
roles = ["native", "ledger-cold"]
cap_usd = "60.00"
"""


def _record(rid: str, text: str, seq: int = 1, role: str = "tool") -> HistoryRecord:
    return HistoryRecord(rid, seq, role, "email" if role == "tool" else "owner", 1, 2, text)  # type: ignore[arg-type]


def _reply(*entries: tuple[str, str, str]) -> str:
    return json.dumps({"entries": [{"section": s, "record": r, "text": t}
                                   for s, r, t in entries]})


# -- the request and the reply ------------------------------------------------------------

def test_the_request_sends_the_ledger_so_far_and_every_record_that_fits() -> None:
    earlier = [LedgerEntry("rules", f"- rule {n} [record e{n}]", n) for n in range(3)]
    chosen = [_record("a1", "Invoice ref: INV-100", 1), _record("a2", "x" * 30_000, 2),
              _record("a3", "Rule: no calls", 3, role="user")]
    request = extraction_request(earlier, chosen, max_source_bytes=6_000)
    system, user = request.messages
    assert system == {"role": "system", "content": EXTRACTION_INSTRUCTION}
    text = user["content"]
    # The ledger so far, newest entries kept; each record headed by its id.
    assert "- rule 2 [record e2]" in text
    assert "[record a1] tool result (email), day 2\nInvoice ref: INV-100" in text
    assert "[record a3] owner, day 2\nRule: no calls" in text
    # A long record keeps its head and tail with the cut stated; one with no room left
    # is not sent, and the next that fits still is.
    assert "[record a2]" in text and "characters omitted" in text
    assert [r.id for r in request.offered] == ["a1", "a2", "a3"]
    tight = extraction_request([], chosen, max_source_bytes=1_000)
    assert [r.id for r in tight.offered] == ["a1", "a3"] and tight.unoffered == 1
    assert "[1 records not sent: no room left in this request]" in tight.messages[1]["content"]
    # The bound is in the bytes the request carries (JSON escapes and UTF-8 included).
    assert len(msgspec.json.encode(tight.messages[1]["content"])) <= 1_000 + 1_024
    wide = [_record(f"w{n}", "é\n" * 300, n) for n in range(10)]
    sent = extraction_request([], wide, max_source_bytes=2_000).offered
    assert len(sent) == 1  # each record costs 1,200+ bytes escaped, not its 600 characters


def test_a_valid_reply_becomes_entries_citing_their_records() -> None:
    offered = [_record("a1", "Invoice ref: INV-100", 7)]
    reply = _reply(("identifiers", "a1", "Invoice   ref:\nINV-100"))
    assert parse_entries(reply, offered) == [
        LedgerEntry("identifiers", "- Invoice ref: INV-100 [record a1]", 7)]
    # One surrounding code fence is allowed; an empty list is an analysis-only stage.
    assert parse_entries(f"```json\n{reply}\n```", offered) == parse_entries(reply, offered)
    assert parse_entries(f"\ufeff{reply}", offered) == parse_entries(reply, offered)
    assert parse_entries('{"entries": []}', offered) == []
    # A bullet the model wrote is not doubled: the entry has its own.
    assert parse_entries(_reply(("rules", "a1", "- No calls")), offered) == [
        LedgerEntry("rules", "- No calls [record a1]", 7)]


@pytest.mark.parametrize(("reply", "reason"), [
    ("", "empty_output"),
    ("   \n", "empty_output"),
    ("x" * 40_000, "output_overrun"),
    ("The ledger: INV-100", "provider_output"),
    ('{"entries": [{"section": "facts", "record": "a1", "text": "t"}]}', "validation"),
    ('{"entries": [], "note": "done"}', "validation"),
    ('{"entries": [{"section": "rules", "record": "a1", "text": "t", "confidence": 1}]}',
     "validation"),
    ('{"entries": [], "x": ' + "[" * 3000 + "]" * 3000 + "}", "validation"),
    ('{"entries": ' + "[" * 3000 + "]" * 3000 + "}", "validation"),
    ("[" * 5000, "validation"),  # an array where the object should be, whatever follows
    ('Here you go: {"entries": []}', "provider_output"),
    (_reply(("identifiers", "a1", "INV-9 [record zz]")), "validation"),
    (_reply(("rules", "a1", "- ")), "validation"),  # a bullet and nothing else
    (_reply(("rules", "a1", "No calls"), ("rules", "a1", "No  calls")), "validation"),
    (_reply(("identifiers", "zz", "from a record it was not sent")), "validation"),
    (_reply(("identifiers", "a1", "   ")), "validation"),
    (_reply(("identifiers", "a1", "y" * (ENTRY_CHARS + 1))), "validation"),
    (_reply(*[("rules", "a1", "r")] * (MAX_ENTRIES + 1)), "validation"),
])
def test_a_reply_that_is_not_valid_degrades_the_stage_whole(reply: str, reason: str) -> None:
    offered = [_record("a1", "Invoice ref: INV-100")]
    assert parse_entries(reply, offered) == reason


def _prefix() -> TracePrefix:
    return TracePrefix.of(original_suite()[0].trace)


def test_a_degraded_stage_keeps_the_ledger_before_it_and_counts_its_operation() -> None:
    prefix = _prefix()
    replies = iter(["CITE-FIRST", "not json", '{"entries": []}'])
    sent: list[list[dict[str, str]]] = []

    def complete(messages: list[dict[str, str]]) -> str:
        sent.append(messages)
        reply = next(replies)
        if reply == "CITE-FIRST":  # the first stage cites the first record it was sent
            rid = re.search(r"^\[record ([^\]]+)\] ", messages[1]["content"], re.M)
            assert rid is not None
            reply = _reply(("rules", rid.group(1), "MODEL-RULE"))
        return reply

    extractor = model_extractor(complete)
    ledger = None
    for number in range(1, LEDGER_EXTRACTIONS + 1):
        nxt = extract(ledger, prefix, number, extractor)
        assert check_extension(ledger, nxt, number) is None
        ledger = nxt
    assert ledger is not None and len(sent) == 3
    assert [(e.added, e.degraded, e.operations, e.extractor) for e in ledger.extractions] == [
        (1, None, 1, "model"), (0, "provider_output", 1, "model"), (0, None, 1, "model")]
    # Each request read only its own third, and saw the ledger committed before it.
    assert "MODEL-RULE" in sent[1][1]["content"] and "MODEL-RULE" not in sent[0][1]["content"]
    _, stats = render_ledger(ledger)
    assert stats.extractor == "model" and stats.degraded == ["p2: provider_output"]
    assert treated(ledger)
    checkpoint = LedgerColdFold(ledger).build(prefix)
    assert checkpoint.receipt.boundary.verified
    assert "MODEL-RULE" in (checkpoint.messages[0].content or "")


def test_a_stage_with_nothing_to_read_sends_nothing() -> None:
    sent: list[object] = []
    found = model_extractor(lambda messages: sent.append(messages) or "")([], [])
    assert found == Found([], "model") and sent == []


def test_three_degraded_stages_are_not_a_treatment() -> None:
    prefix = _prefix()
    extractor = model_extractor(lambda messages: "")
    ledger = None
    for number in range(1, LEDGER_EXTRACTIONS + 1):
        ledger = extract(ledger, prefix, number, extractor)
    assert ledger is not None and not treated(ledger)
    assert not LedgerColdFold(ledger).build(prefix).receipt.boundary.verified


def test_a_stage_that_claims_a_degradation_it_cannot_have_is_refused() -> None:
    prefix = _prefix()
    first = extract(None, prefix, 1)
    # The deterministic extractor never degrades, and a degraded stage adds nothing.
    forged = msgspec.structs.replace(first, extractions=[msgspec.structs.replace(
        first.extractions[0], degraded="provider_output")])
    assert check_extension(None, forged, 1) is not None
    # One extractor throughout: a model's stage after a deterministic one is refused.
    with pytest.raises(FoldError) as refused:
        extract(first, prefix, 2, lambda earlier, chosen: Found([], "model"))
    assert refused.value.code is Code.FOLD_INPUT_INVALID


# -- end to end on the local route ---------------------------------------------------------

@pytest.fixture
def server() -> Iterator[Server]:
    with serve_chat() as state:
        yield state


def _extractions(server: Server) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests
            if r["body"]["messages"][0]["content"] == EXTRACTION_INSTRUCTION]


def test_a_local_summariser_model_writes_every_extraction(server: Server,
                                                          tmp_path: Path) -> None:
    """Per checkpoint, in order: a stage with one entry, a reply that is not JSON (a
    degraded stage), an analysis-only stage. Every request is admitted and settled on
    the checkpoint's key, its spend is the role's, and the reports name the model."""
    stage = itertools.count()

    def respond(body: dict[str, Any]) -> str:
        if body["messages"][0]["content"] != EXTRACTION_INSTRUCTION:
            return "SUMMARY-FROM-TINY"
        n = next(stage) % 3
        if n == 1:
            return "I could not produce JSON."
        if n == 2:
            return '{"entries": []}'
        rid = re.search(r"^\[record ([^\]]+)\] ", body["messages"][1]["content"], re.M)
        assert rid is not None
        return _reply(("identifiers", rid.group(1), "MODEL-ENTRY from the model"))

    server.respond = respond
    (tmp_path / "ledger.toml").write_text(CAMPAIGN)
    done = subprocess.run(
        [*CLI, "pilot", "--runs", str(tmp_path / "runs"), "--json", "--no-progress",
         "--summariser", server.base_url, "--summariser-model", "tiny",
         "--server", "llama-cpp-python", "--campaign", str(tmp_path / "ledger.toml")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    run = Path(line["run"])
    plan = json.loads((run / "plan.json").read_bytes())
    keys = sorted({s["checkpoint"] for s in plan["slots"] if s["role"] == "ledger-cold"})
    assert keys
    bodies = _extractions(server)
    assert len(bodies) == LEDGER_EXTRACTIONS * len(keys)
    assert all(b["model"] == "tiny" for b in bodies)
    for key in keys:
        # Three requests on the checkpoint's own key, each a one-round run of its own,
        # admitted and settled (the local price: zero).
        holds = journal_rows(run, "SELECT request_id, state FROM holds "
                                  f"WHERE slot = '{key}' ORDER BY request_id")
        assert holds == [(f"{key}-p{n}-s1-r1", "settled") for n in (1, 2, 3)], holds
        ledger = decode_ledger((run / "ledgers" / key / "p3" / LEDGER_FILE).read_bytes())
        assert [(e.extractor, e.added, e.degraded) for e in ledger.extractions] == [
            ("model", 1, None), ("model", 0, "provider_output"), ("model", 0, None)]
        (snapshot,), = journal_rows(run, "SELECT snapshot_digest FROM assignments "
                                         f"WHERE slot = '{key}' AND kind = 'checkpoint'")
        restored = read_checkpoint(run / "checkpoints" / key / "snapshot",
                                   expected_digest=str(snapshot))
        assert "MODEL-ENTRY from the model" in (restored.checkpoint.messages[0].content or "")
        receipt = restored.checkpoint.receipt
        assert receipt.boundary.verified and receipt.ledger is not msgspec.UNSET
        assert receipt.ledger.extractor == "model"
        assert receipt.ledger.degraded == ["p2: provider_output"]
    results = json.loads((run / "results.json").read_bytes())
    assert results["run"]["summarisers"] == {"ledger-cold": "local/tiny"}
    assert results["summariser_spend"]["requests"] == LEDGER_EXTRACTIONS * len(keys)
    for text in (done.stdout, (run / "summary.md").read_text(),
                 (run / "report.html").read_text()):
        assert "stand-in" not in text and STAND_IN_EXTRACTOR not in text
    # Every slot of the role carries its checkpoint's account, and the reports show it.
    ledgers = [s["ledger"] for s in results["slots"] if s["role"] == "ledger-cold"]
    assert ledgers and all(r["extractor"] == "model" and r["degraded"] == ["p2: provider_output"]
                           and r["selected"] > 0 and r.get("unoffered", 0) == 0
                           for r in ledgers)
    summary = (run / "summary.md").read_text()
    assert "Ledger extractions" in summary
    table = summary.split("Ledger extractions", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith("| ledger-cold"))
    assert "| model |" in row and "(100%)" in row and f"2 of {len(keys) * 3}" in row, row
    assert "provider_output 2" in row or f"provider_output {len(keys)}" in row


def test_without_a_summariser_model_the_reports_name_the_deterministic_extractor(
        tmp_path: Path) -> None:
    (tmp_path / "ledger.toml").write_text(CAMPAIGN + "repeats = 2\n")
    done = subprocess.run([*CLI, "pilot", "--faux", "--campaign", str(tmp_path / "ledger.toml"),
                           "--runs", str(tmp_path / "runs"), "--json",
                           "--no-progress"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "300"})
    assert done.returncode == 0, done.stdout + done.stderr
    run = Path(json.loads(done.stdout.splitlines()[-1])["run"])
    results = json.loads((run / "results.json").read_bytes())
    assert results["run"]["summarisers"] == {"ledger-cold": STAND_IN_EXTRACTOR}
    assert "Ledgers by efold's deterministic extractor for ledger-cold" in done.stdout
    # And offline nothing was retained in the permit journal for the extractions.
    assert journal_rows(run, "SELECT COUNT(*) FROM holds WHERE request_id LIKE '%-p_-s%'") \
        == [(0,)]
    # Two traces, two repeats: four checkpoints, even where two repeats came out alike.
    table = (run / "summary.md").read_text().split("Ledger extractions", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith("| ledger-cold"))
    assert row.startswith("| ledger-cold | 4 | deterministic |") and "(100%)" in row, row
    assert "| 0 of 12 |" in row, row


def _local_campaign(tmp_path: Path, server: Server, context_window: int | None) -> Path:
    """CAMPAIGN with ledger-cold alone and a local summariser whose operator catalog
    gives ``context_window`` (None: none)."""
    window = "" if context_window is None else f"context_window = {context_window}\n"
    (tmp_path / "cat.toml").write_text(
        'version = 1\n[[model]]\nprovider = "local"\nmodel = "tiny"\n'
        f'service_tiers = false\n{window}input = "0.5"\noutput = "1.5"\n'
        'cache_read = "0.05"\ncache_write = "0.5"\n')
    path = tmp_path / "local.toml"
    path.write_text(CAMPAIGN.replace('["native", "ledger-cold"]', '["ledger-cold"]') + f"""
[summariser]
provider = "local"
model = "tiny"
base_url = "{server.base_url}"
server = "llama-cpp-python"
catalog = "cat.toml"
max_requests = 3
""")
    return path


def _pilot_file(tmp_path: Path, campaign: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    done = subprocess.run([*CLI, "pilot", "--campaign", str(campaign), "--runs",
                           str(tmp_path / "runs"), "--json", "--no-progress"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "300"})
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    return done, Path(json.loads(line)["run"]) if line.startswith("{") else tmp_path


def test_a_small_window_bounds_every_extraction_request_the_guard_admits(
        server: Server, tmp_path: Path) -> None:
    """With a 16,384-token window, every extraction request, as the guard counts it
    (its bytes plus the framing allowance), fits the window: each is admitted and sent;
    the records with no room are counted."""
    server.respond = lambda body: '{"entries": []}'
    done, run = _pilot_file(tmp_path, _local_campaign(tmp_path, server, 16_384))
    assert done.returncode == 0, done.stdout + done.stderr
    bodies = _extractions(server)
    assert bodies
    for body in bodies:  # U_k on a chat request: its bytes + 4,096 + 256 per message
        assert len(msgspec.json.encode(body)) + 4_096 + 256 * len(body["messages"]) <= 16_384
    holds = journal_rows(run, "SELECT state FROM holds WHERE request_id LIKE '%-p_-s%'")
    assert holds and all(state == "settled" for (state,) in holds)
    results = json.loads((run / "results.json").read_bytes())
    ledgers = [s["ledger"] for s in results["slots"] if "ledger" in s]
    assert ledgers and all(r["unoffered"] > 0 for r in ledgers)  # the window is tight


def test_a_window_with_no_room_for_any_record_degrades_every_stage(
        server: Server, tmp_path: Path) -> None:
    """A window smaller than the request's own framing leaves no room for a record: no
    request is sent, each stage is degraded (input_budget), and the checkpoint is not
    a ledger (its slots excluded, the model still named as the extractor)."""
    _, run = _pilot_file(tmp_path, _local_campaign(tmp_path, server, 9_000))
    assert _extractions(server) == []
    results = json.loads((run / "results.json").read_bytes())
    slots = [s for s in results["slots"] if s["role"] == "ledger-cold"]
    assert slots and all(s["excluded"] == "boundary_unverified" for s in slots), slots
    assert all(s["ledger"]["degraded"] == ["p1: input_budget", "p2: input_budget",
                                           "p3: input_budget"] for s in slots)
    assert results["run"]["summarisers"] == {"ledger-cold": "local/tiny"}


def test_when_no_ledger_could_be_built_the_configured_model_is_named(
        server: Server, tmp_path: Path) -> None:
    server.status = 500
    _, run = _pilot_file(tmp_path, _local_campaign(tmp_path, server, None))
    assert _extractions(server)  # asked, and refused by the server
    results = json.loads((run / "results.json").read_bytes())
    codes = [s["code"] for s in results["slots"]]  # the smoke's, then the stop's
    assert "lookup_http_status" in codes and set(codes) <= {"lookup_http_status",
                                                            "lookup_stopped"}, codes
    assert results["run"]["summarisers"] == {"ledger-cold": "local/tiny"}
    assert STAND_IN_EXTRACTOR not in (run / "summary.md").read_text()


def test_a_summariser_limit_below_three_extractions_refuses_at_register(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN + """
[summariser]
provider = "local"
model = "tiny"
base_url = "http://127.0.0.1:9/v1"
server = "llama-cpp-python"
max_requests = 2
""")
    done = subprocess.run([*CLI, "register", "c.toml", "--output", "reg"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("refused: campaign_invalid")
    assert "makes 3 extraction requests per checkpoint; summariser.max_requests is 2" \
        in done.stderr
    assert not (tmp_path / "reg").exists()


def test_three_extractions_per_ledger_checkpoint_each_within_its_allowance() -> None:
    def requests(arm: str, limit: int = 64) -> int:
        return summary_requests_per_checkpoint(Role(name=arm, arm=arm, instructions=""), limit)

    assert requests("ledger-cold") == LEDGER_EXTRACTIONS == 3
    assert requests("ledger-cold", 2) == 2  # never above the summariser's limit
    assert requests("compaction") == 1 and requests("cold-rebuild") == 0
    # Each request's input bound: its allowance, never over the route's envelope.
    assert [request_tokens(n, 272_000) for n in (1, 2, 3)] == [128_000, 64_000, 64_000]
    assert [request_tokens(n, 16_384) for n in (1, 2, 3)] == [16_384] * 3
    # The source fills what the instruction and the framing leave of it.
    assert 0 < source_bytes(1, 16_384) < 16_384 - len(EXTRACTION_INSTRUCTION)
