"""``efold-controller certify``: the endurance cycles, the closure fixtures and the
maximal source, run for real: the certification child is a contained process, plugins
are installed entry points it imports, and the verdicts are what the checks computed.

The example fold (``examples/ledger``) passes; each sabotaged variant of it fails with
the check of its category named; the reference arms fail where their design loses
(cold-rebuild cannot keep the early goal; native never folds).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from plugin_kit import installed_plugin

ROOT = Path(__file__).resolve().parents[2]
LEDGER = (ROOT / "examples" / "ledger" / "ledgerfold.py").read_text(encoding="utf-8")


def certify(*args: str, cwd: Path) -> tuple[int, list[str], dict[str, Any] | None, str]:
    """Exit status, the summary lines, the JSON report (None when refused), stderr."""
    done = subprocess.run([sys.executable, "-m", "efold.controller", "certify", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    report = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    return done.returncode, lines[:-1], report, done.stderr


def certify_plugin(tmp_path: Path, source: str, attr: str, *extra: str
                   ) -> tuple[int, list[str], dict[str, Any] | None, str]:
    """Install ``source`` as the entry point ``<attr lowercased>-<hex>`` and certify it;
    the class's ``name`` is set to that entry-point name."""
    name = f"{attr.lower()}-{secrets.token_hex(3)}"
    module = f"{source}\n\n{attr}.name = {name!r}\n"
    with installed_plugin(name, module, attr=attr):
        return certify(name, *extra, cwd=tmp_path)


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["endurance"]["checks"] if c["name"] == name)


def test_the_example_fold_passes_every_threshold(tmp_path: Path) -> None:
    status, lines, report, _ = certify_plugin(tmp_path, LEDGER, "LedgerFold",
                                              "--json", str(tmp_path / "report.json"))
    assert status == 0, lines
    assert report is not None and report["passed"] and report["failed"] == []
    assert json.loads((tmp_path / "report.json").read_text()) == report
    endurance = report["endurance"]
    assert endurance["cycles"] == 100
    assert all(f["status"] == "passed" for f in endurance["fixtures"])
    assert {f["shape"] for f in endurance["fixtures"]} == {
        "normal", "compact_all", "split_turn", "parallel", "reverse_order", "malformed_prior"}
    sizes = endurance["sizes"]
    assert sizes["stored"] == 100 and sizes["max_bytes"] <= 32 * 1024
    assert sizes["late_range_bytes"] <= 512 and abs(sizes["late_slope_bytes_per_cycle"]) <= 16
    prior = endurance["prior"]
    assert prior == {"offered": 99, "offered_exactly": 99, "read_cycles": 0, "echo_cycles": 0,
                     "derives_from_source": True}
    maximal = report["maximal"]
    assert maximal["passed"] and 24 * 1024 <= maximal["summary_bytes"] <= 32 * 1024
    assert maximal["source_bytes"] >= 320 * 1024 and maximal["utf8_valid"] is True
    memory = report["memory"]
    assert memory["status"] == "checked" and memory["passed"]
    assert memory["eligible_sessions"] == memory["indexed_sessions"] == 1000
    assert memory["stale_records"] == 0 and 0 < memory["hot_sessions"] <= 8
    assert memory["emitted_addresses"] == memory["expanded_addresses"] > 100
    assert memory["store_bytes"] > 0 and memory["source_bytes"] > 0
    assert {c["name"] for c in memory["checks"]} == {
        "coverage", "cold", "hot_bound", "lexical_recall", "structural_selection",
        "negative_control", "expansion", "endurance_expansion"}
    tasks = report["continuation"]["tasks"]
    assert [t["task"] for t in tasks] == ["rename-timeout", "add-clamp"]
    for task in tasks:
        assert task["passed"] and task["resume_exit"] == 0 and task["check_exit"] == 0
        assert task["found_via"] == "expansion" and task["address"] == "c0000-plan"
        assert task["address_resolved"] and task["files_exact"] and task["protected_intact"]
    assert lines[-1] == "verdict: PASS"


# Each sabotage breaks one category and nothing else a test relies on.
ECHO = '''
class EchoFold(LedgerFold):
    """Reads the previous summary and carries its last line (the marker) forward."""

    def build(self, prefix):
        checkpoint = super().build(prefix)
        prior = prefix.prior
        if not hasattr(prior, "messages"):
            return checkpoint
        carried = prior.messages[-1].content.splitlines()[-1]
        first = checkpoint.messages[0]
        messages = [type(first)(role="user", content=first.content + "\\n" + carried),
                    *checkpoint.messages[1:]]
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages,
                                tools=checkpoint.tools, boundary=checkpoint.receipt.boundary,
                                pressure=[], store=checkpoint.store)
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages,
                          tools=checkpoint.tools, receipt=receipt, store=checkpoint.store)


class HonestEchoFold(EchoFold):
    derives_from_source = False  # says it reads the previous summary


class BuildsOnPriorFold(EchoFold):
    """Builds on its previous summary (carries its first line) and never on its marker."""

    derives_from_source = False

    def build(self, prefix):
        prior = prefix.prior
        if hasattr(prior, "messages"):
            prefix = type(prefix)(**{**{f: getattr(prefix, f) for f in prefix.__struct_fields__},
                                    "prior": type(prior)(**{
                                        **{f: getattr(prior, f) for f in prior.__struct_fields__},
                                        "messages": [type(m)(role=m.role, content=m.content.splitlines()[0])
                                                     for m in prior.messages]})})
        return super().build(prefix)
'''

GROWING = '''
class GrowingFold(LedgerFold):
    """No budget: one line per earlier entry, forever."""

    def build(self, prefix):
        global BUDGET
        BUDGET = 10 ** 9
        return super().build(prefix)
'''

UNCLOSED = '''
class UnclosedFold(LedgerFold):
    """Keeps the newest tool call visible, without its result."""

    def build(self, prefix):
        transcript = session_transcript(prefix.events)
        call = next(e for e in reversed(transcript) if e.tool_calls)
        summary = ReaderMessage(role="user", content=ledger(transcript, transcript))
        messages = [summary, reader_message(call)]
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages, tools=[],
                                boundary=BoundaryEvidence(kind="external", verified=True),
                                pressure=[])
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages,
                          tools=[], receipt=receipt)
'''

DROPS_COLD = '''
class DropsColdFold(LedgerFold):
    """A store that loses the old session where the rare fact lives."""

    def build(self, prefix):
        checkpoint = super().build(prefix)
        kept = [r for r in checkpoint.store.records if r.session != 17]
        store = type(checkpoint.store)(records=kept, omitted_credential=0)
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=checkpoint.messages,
                                tools=checkpoint.tools, boundary=checkpoint.receipt.boundary,
                                pressure=[], store=store)
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=checkpoint.messages,
                          tools=checkpoint.tools, receipt=receipt, store=store)
'''

FORGETFUL = '''
class ForgetfulFold(LedgerFold):
    """Keeps only the opening's first line: the goal, not what was pinned with it."""

    def build(self, prefix):
        global OPENING_CHARS
        first = next(e for e in prefix.events if e.role == "user")
        OPENING_CHARS = len(first.content.splitlines()[0])
        return super().build(prefix)
'''


@pytest.mark.parametrize(("source", "attr", "failing"), [
    (ECHO, "EchoFold", {"poison"}),
    (GROWING, "GrowingFold", {"summary_bytes", "growth", "maximal"}),
    (UNCLOSED, "UnclosedFold", {"closure", "fixture:normal"}),
    (FORGETFUL, "ForgetfulFold", {"constraint", "rare_fact"}),
    (DROPS_COLD, "DropsColdFold", {"memory:coverage", "memory:lexical_recall",
                                   "memory:expansion"}),
], ids=["echoes-the-poison", "grows-without-bound", "breaks-closure", "loses-the-rare-fact",
        "drops-the-cold-session"])
def test_a_sabotaged_fold_fails_with_its_check_named(tmp_path: Path, source: str, attr: str,
                                                     failing: set[str]) -> None:
    status, lines, report, _ = certify_plugin(tmp_path, LEDGER + source, attr)
    assert status == 1, lines
    assert report is not None and not report["passed"]
    assert failing <= set(report["failed"]), report["failed"]
    assert not {"goal", "fold_ok", "round_trip", "context", "prior_offered"} & set(report["failed"])
    assert lines[-1].startswith("verdict: FAIL (")


def test_reading_the_prior_is_observed_and_every_fold_that_echoes_it_fails(
        tmp_path: Path) -> None:
    _, _, declared, _ = certify_plugin(tmp_path, LEDGER + ECHO, "EchoFold")
    status, _, honest, _ = certify_plugin(tmp_path, LEDGER + ECHO, "HonestEchoFold")
    assert declared is not None and honest is not None
    for report in (declared, honest):
        assert report["endurance"]["prior"]["read_cycles"] == 100  # every cycle looked
        assert report["endurance"]["prior"]["echo_cycles"] == 99  # a marker once one exists
        # Declared or not, what it wrote carries a stored summary's marker: it fails.
        assert check(report, "poison")["passed"] is False
        assert check(report, "poison")["detail"].startswith(
            "cycle 2: echoes PRIOR_SUMMARY_POISON_991_001")
    assert honest["endurance"]["prior"]["derives_from_source"] is False and status == 1
    # Building on the previous summary is allowed; passing its stored bytes on is not.
    status, lines, builds, _ = certify_plugin(tmp_path, LEDGER + ECHO, "BuildsOnPriorFold")
    assert builds is not None and builds["endurance"]["prior"]["read_cycles"] == 100
    assert builds["endurance"]["prior"]["echo_cycles"] == 0
    assert check(builds, "poison")["passed"] is True and status == 0, lines


def test_the_reference_arms_fail_where_their_design_loses(tmp_path: Path) -> None:
    results = {arm: certify(arm, cwd=tmp_path) for arm in ("native", "cold-rebuild", "compaction")}
    for status, _, report, _ in results.values():
        assert status == 1 and report is not None and not report["passed"]
    native = results["native"][2]
    cold = results["cold-rebuild"][2]
    compaction = results["compaction"][2]
    assert native is not None and cold is not None and compaction is not None
    # native never folds: nothing stored, nothing offered, nothing to malform.
    assert check(native, "folded")["failed_cycles"] == 100
    assert native["endurance"]["sizes"]["stored"] == 0
    assert native["endurance"]["prior"]["offered"] == 0
    assert "goal" not in native["failed"]
    # cold-rebuild keeps the newest 64 text messages: the opening is gone from cycle 1.
    assert {"goal", "constraint", "rare_fact"} <= set(cold["failed"])
    assert check(cold, "goal")["first_failed"][0] == 1
    # compaction keeps the opening, but a result's middle (an error line) and any
    # address: no citations; its summary budget is 16,384 tokens, over 32 KiB.
    assert "goal" not in compaction["failed"] and "rare_fact" not in compaction["failed"]
    assert {"open_errors", "sources", "summary_bytes", "maximal"} <= set(compaction["failed"])
    assert compaction["endurance"]["prior"]["derives_from_source"] is True
    assert compaction["endurance"]["prior"]["read_cycles"] == 0
    # Continuation: native keeps the plan visible; compaction's head-and-tail summary
    # cannot carry a plan line of several KiB, and the resume child refuses to invent one.
    for task in native["continuation"]["tasks"]:
        assert task["passed"] and task["found_via"] == "context"
    for task in compaction["continuation"]["tasks"]:
        assert not task["passed"] and task["resume_exit"] == 3
        assert task["found_via"] is None and task["reason"].startswith("unavailable:")
        assert task["protected_intact"] and not task["files_exact"]
    # Memory applies only to a fold with a retained store.
    assert native["memory"]["status"] == compaction["memory"]["status"] == "not_applicable"


def test_the_store_arm_recalls_the_cold_session_but_cannot_resume(tmp_path: Path) -> None:
    status, _, report, _ = certify("store", cwd=tmp_path)
    assert status == 1 and report is not None
    memory = report["memory"]
    # It recalls the cold session, but its cold window keeps 32 sessions in view: more
    # than the 8 hot sessions the bound allows.
    assert memory["status"] == "checked" and not memory["passed"], memory
    assert [c["name"] for c in memory["checks"] if not c["passed"]] == ["hot_bound"]
    assert memory["hot_sessions"] == 32 and memory["emitted_addresses"] > 0
    # Its projection cites only the newest 32 tool records: the plan is not among them.
    assert [t["passed"] for t in report["continuation"]["tasks"]] == [False, False]
    assert {"continuation:rename-timeout", "continuation:add-clamp", "goal"} <= set(report["failed"])


def test_an_unknown_fold_is_refused_before_any_child(tmp_path: Path) -> None:
    status, _, report, stderr = certify("no-such-fold", cwd=tmp_path)
    assert status == 2 and report is None
    assert stderr.startswith("refused: fold_unknown")


HANGING = '''
import os, signal, subprocess, sys, time

PIDS = {pids!r}


class HangingFold(LedgerFold):
    """Starts a grandchild that ignores SIGTERM, then never returns. It reports both
    pids to the test's unix socket PIDS: it runs isolated and cannot write the test's
    files (a pathname socket is reachable from its namespace)."""

    def build(self, prefix):
        import socket
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        grandchild = subprocess.Popen([sys.executable, "-c", code])
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(f"{{os.getpid()}} {{grandchild.pid}}".encode(), PIDS)
        time.sleep(600)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_a_fold_that_hangs_is_contained_and_nothing_outlives_it(tmp_path: Path) -> None:
    import socket
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="efold-cert-", dir="/tmp"))  # a short socket path
    pids = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    pids.bind(str(where / "pids"))
    try:
        started = time.monotonic()
        status, _, report, stderr = certify_plugin(
            tmp_path, LEDGER + HANGING.format(pids=str(where / "pids")), "HangingFold",
            "--timeout", "8")
        pids.settimeout(0)
        reported = pids.recv(256).decode()
    finally:
        pids.close()
        shutil.rmtree(where)
    assert status == 2 and report is None
    assert stderr.startswith("refused: certify_child_failed") and "timed out" in stderr
    assert time.monotonic() - started < 60
    child, grandchild = (int(p) for p in reported.split())
    deadline = time.monotonic() + 5
    while (_alive(child) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(grandchild)


COMMAND = """
import json, sys
request = json.load(sys.stdin)
opening = next(e["content"] for e in request["events"] if e["role"] == "user")
summary = "Carried over: " + opening
prior = request.get("prior")
if prior is not None:  # builds on its previous summary: carries its last line forward
    summary += "\\n" + prior["messages"][-1]["content"].splitlines()[-1]
json.dump({"protocol": "efold-fold-v1", "boundary_crossed": True, "tools": [],
           "messages": [{"role": "user", "content": summary}]}, sys.stdout)
"""


def test_an_external_command_is_certified_from_its_campaign_role(tmp_path: Path) -> None:
    script = tmp_path / "carry.py"
    script.write_text(COMMAND)
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(f"""
name = "cert"
suite = "original"
roles = ["carry"]
cap_usd = "60.00"

[role.carry]
command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]
timeout_seconds = 30
""")
    status, lines, report, stderr = certify("carry", "--campaign", str(campaign), cwd=tmp_path)
    assert status == 1 and report is not None, stderr
    assert report["kind"] == "external command" and report["fold"] == "carry"
    prior = report["endurance"]["prior"]
    # A command receives its input whole: whether it read the prior is unobservable,
    # what it echoed is not, and it fails for echoing as every fold does.
    assert prior["read_cycles"] is None and prior["echo_cycles"] == 99
    assert prior["offered_exactly"] == 99 and not check(report, "poison")["passed"]
    assert "poison" in report["failed"]
    assert any("read unobservable" in line for line in lines)
    assert "goal" not in report["failed"] and "files" in report["failed"]
    status, _, _, stderr = certify("nope", "--campaign", str(campaign), cwd=tmp_path)
    assert status == 2 and stderr.startswith("refused: campaign_invalid")


HOT_LEAK = '''
class HotLeakFold(LedgerFold):
    """Appends every memory session's operation reference to its summary: 600 sessions
    in view, whatever its header lines say."""

    def build(self, prefix):
        checkpoint = super().build(prefix)
        refs = sorted({line.split()[1] for e in prefix.events if e.role == "tool"
                       for line in e.content.splitlines()[:1] if line.startswith("ref: op-")})
        if len(refs) < 600:
            return checkpoint
        first = checkpoint.messages[0]
        messages = [type(first)(role="user", content=first.content + "\\n" + " ".join(refs[:600])),
                    *checkpoint.messages[1:]]
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages,
                                tools=checkpoint.tools, boundary=checkpoint.receipt.boundary,
                                pressure=[], store=checkpoint.store)
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages,
                          tools=checkpoint.tools, receipt=receipt, store=checkpoint.store)


class RelabelledFold(LedgerFold):
    """Writes "Session N -" for "Session N:": the same 8 sessions in view."""

    def build(self, prefix):
        checkpoint = super().build(prefix)
        first = checkpoint.messages[0]
        messages = [type(first)(role="user", content=first.content.replace(": run", " - run")),
                    *checkpoint.messages[1:]]
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages,
                                tools=checkpoint.tools, boundary=checkpoint.receipt.boundary,
                                pressure=[], store=checkpoint.store)
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages,
                          tools=checkpoint.tools, receipt=receipt, store=checkpoint.store)
'''


def test_the_hot_set_counts_the_sessions_in_view_however_they_are_written(
        tmp_path: Path) -> None:
    _, _, leak, _ = certify_plugin(tmp_path, LEDGER + HOT_LEAK, "HotLeakFold")
    assert leak is not None and leak["memory"]["hot_sessions"] > 600
    assert "memory:hot_bound" in leak["failed"]
    _, _, relabelled, _ = certify_plugin(tmp_path, LEDGER + HOT_LEAK, "RelabelledFold")
    assert relabelled is not None and relabelled["memory"]["hot_sessions"] == 8
