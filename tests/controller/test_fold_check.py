"""``efold-controller fold check``: a fold built once in a real, contained prep child, and
a failed fold's own code carried out of the prep child (``prep-failure.json``) as a
claim the operator sees, in ``fold check`` and in ``preflight``'s report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, encode_registration
from efold.controller.pilot.preflight import run_preflight
from efold.controller.pilot.prep_launch import CAUSE_CODES, CAUSE_MAX_BYTES, read_cause
from efold.corpus import original_suite
from efold.errors import Code
from efold.folds import TracePrefix, checkpoint_availability, get_fold
from efold.worker.prep import FAILURE_FILE

# An efold-fold-v1 command: every fact-shaped line as one note, and the lookup tools.
GOOD = """import json, re, sys
request = json.load(sys.stdin)
fact = re.compile(r"^[A-Z][A-Za-z ]{1,60}: \\\\S")
notes = []
for event in request["events"]:
    for line in event["content"].splitlines():
        if fact.match(line) and line not in notes:
            notes.append(line)
json.dump({"protocol": "efold-fold-v1",
           "messages": [{"role": "user", "content": "Notes:\\n" + "\\n".join(notes)}],
           "tools": ["history_search", "history_get"], "boundary_crossed": BOUNDARY}, sys.stdout)
"""
SCRIPTS = {
    "good": GOOD.replace("BOUNDARY", "True"),
    "unverified": GOOD.replace("BOUNDARY", "False"),
    "exits3": "import sys\nsys.stdin.read()\nsys.exit(3)\n",
    "garbage": "import sys\nsys.stdin.read()\nprint('this is not json')\n",
}


def _campaign(tmp_path: Path, kind: str) -> Path:
    script = tmp_path / f"{kind}.py"
    script.write_text(SCRIPTS[kind])
    path = tmp_path / f"{kind}.toml"
    path.write_text(
        f'name = "fold-check-{kind}"\nsuite = "original"\nroles = ["mine"]\n'
        f'cap_usd = "60.00"\n\n[role.mine]\n'
        f"command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n"
        "timeout_seconds = 30\n")
    return path


def _fold_check(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", "fold", "check", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.stdout, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_builtin_arm_prints_what_an_in_process_build_keeps() -> None:
    item = original_suite()[0]
    trace = item.trace
    built = get_fold("compaction").build(TracePrefix.of(trace))
    expected = Counter(r.availability.value
                       for r in checkpoint_availability(built, item.probes.probes))
    done = _fold_check("compaction", "--json")
    assert done.returncode == 0, done.stderr
    got = _json(done)
    assert got["ok"] is True and got["fold"] == "compaction" and got["kind"] == "builtin"
    assert got["trace"]["id"] == trace.header.trace_id
    assert got["trace"]["events"] == len(trace.events) == built.receipt.source_events
    kept = got["checkpoint"]
    assert kept["messages"] == len(built.messages) == built.receipt.messages
    assert kept["visible_bytes"] == built.receipt.visible_bytes
    assert kept["tokens_estimate"] == built.receipt.tokens_estimate
    assert kept["tools"] == [] and kept["store_records"] is None
    assert kept["boundary_kind"] == "compaction" and kept["boundary_verified"] is True
    assert got["feasible"] is True and got["unusable"] == []
    assert {k: v for k, v in got["availability"].items() if v} == dict(expected)
    assert sum(got["availability"].values()) == len(item.probes.probes)
    absent = {p.id: p.category.value for p in item.probes.probes}
    assert all(absent[a["probe"]] == a["category"] for a in got["absent"])
    assert len(got["absent"]) == expected.get("absent", 0)
    assert got["code"] is None and got["cause"] is None

    text = _fold_check("compaction", "--trace", trace.header.trace_id)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "fold: compaction (built-in arm; role compaction)"
    assert f"  messages: {len(built.messages)}" in lines
    assert f"  estimated tokens: {built.receipt.tokens_estimate:,}" in lines
    assert "  boundary: compaction, verified: true" in lines
    assert lines[-1] == "usable: yes"


def test_a_command_role_that_succeeds(tmp_path: Path) -> None:
    item = original_suite()[1]
    trace_id = item.trace.header.trace_id
    done = _fold_check("mine", "--campaign", str(_campaign(tmp_path, "good")),
                       "--trace", trace_id, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    got = _json(done)
    assert got["ok"] is True and got["kind"] == "command" and got["trace"]["id"] == trace_id
    kept = got["checkpoint"]
    # The fold asked for the lookup tools; the campaign's probe mode (recall-only, the
    # default) offers none, so its checkpoint is published without them.
    assert kept["messages"] == 1 and kept["tools"] == []
    assert kept["store_records"] is None and kept["omitted_credential"] is None
    assert kept["boundary_kind"] == "external" and kept["boundary_verified"] is True
    assert sum(got["availability"].values()) == len(item.probes.probes)
    assert "expected" not in done.stdout  # ids and categories only


def test_a_command_that_exits_3_shows_its_own_code(tmp_path: Path) -> None:
    done = _fold_check("mine", "--campaign", str(_campaign(tmp_path, "exits3")))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed: worker_body_failed (the controller's code)" in done.stdout
    assert "fold's own code: fold_plugin_failed (mine: exit status 3)" in done.stdout
    assert done.stdout.rstrip().endswith("usable: no")


def test_a_command_that_prints_garbage_is_fold_plugin_invalid(tmp_path: Path) -> None:
    done = _fold_check("mine", "--campaign", str(_campaign(tmp_path, "garbage")), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    got = _json(done)
    assert got["ok"] is False and got["checkpoint"] is None
    assert got["code"] == Code.WORKER_BODY_FAILED.value
    assert got["cause"] == {"code": "fold_plugin_invalid", "detail": "mine: malformed output"}


def test_an_unverified_boundary_is_built_but_excluded(tmp_path: Path) -> None:
    campaign = str(_campaign(tmp_path, "unverified"))
    done = _fold_check("mine", "--campaign", campaign)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  boundary: external, verified: false" in done.stdout
    assert "verified: false excludes every slot of this checkpoint" in done.stdout
    as_json = _json(_fold_check("mine", "--campaign", campaign, "--json"))
    assert as_json["ok"] is False and as_json["code"] is None
    assert as_json["unusable"] == ["boundary_unverified"]
    assert as_json["checkpoint"]["excluded"] == "boundary_unverified"


PROXY = Path(__file__).resolve().parents[1] / "kit" / "compacting_proxy.py"


def _proxy_campaign(tmp_path: Path, mode: str) -> Path:
    path = tmp_path / f"proxy-{mode}.toml"
    path.write_text(
        f'name = "fold-check-proxy"\nsuite = "original"\nroles = ["squeeze"]\n'
        f'cap_usd = "60.00"\n\n[role.squeeze]\n'
        f"command = [{json.dumps(sys.executable)}, {json.dumps(str(PROXY))}]\n"
        'proxy = { upstream_env = "UPSTREAM_BASE_URL", port_env = "PROXY_PORT" }\n'
        f'env = {{ PROXY_MODE = "{mode}" }}\nsettings = {{ trigger_chars = 12000 }}\n')
    return path


def test_a_proxy_role_is_checked_like_any_fold(tmp_path: Path) -> None:
    done = _fold_check("squeeze", "--campaign", str(_proxy_campaign(tmp_path, "compact")),
                       "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    got = _json(done)
    assert got["kind"] == "proxy" and got["ok"] is True
    kept = got["checkpoint"]
    assert kept["boundary_kind"] == "proxy" and kept["boundary_verified"] is True
    assert 1 < kept["messages"] < got["trace"]["events"]
    [line] = got["proxy_log"]  # what the proxy wrote, from its data directory
    assert re.fullmatch(r"compacting proxy: listening on \d+, trigger 12000 chars", line)


def test_a_proxy_that_exits_shows_its_log(tmp_path: Path) -> None:
    done = _fold_check("squeeze", "--campaign", str(_proxy_campaign(tmp_path, "crash")))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "fold's own code: fold_proxy_not_ready (squeeze: exited before listening)" in done.stdout
    assert done.stdout.rstrip().endswith(
        "proxy log (its last 1 lines):\n  compacting proxy: PROXY_MODE=crash, exiting 3")


def test_a_proxy_that_calls_what_efold_does_not_serve_is_excluded(tmp_path: Path) -> None:
    done = _fold_check("squeeze", "--campaign", str(_proxy_campaign(tmp_path, "embeddings")),
                       "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    got = _json(done)
    assert got["unusable"] == ["fold_proxy_unsupported_call"]


def test_refusals_exit_2_in_the_refused_form(tmp_path: Path) -> None:
    unknown = _fold_check("no-such-fold")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith("refused: fold_unknown (no fold named 'no-such-fold'")
    trace = _fold_check("compaction", "--trace", "orig-nowhere")
    assert trace.returncode == 2
    assert trace.stderr.startswith("refused: campaign_invalid (trace 'orig-nowhere'")
    role = _fold_check("other", "--campaign", str(_campaign(tmp_path, "good")))
    assert role.returncode == 2 and role.stderr.startswith("refused: fold_unknown (")
    missing = _fold_check("mine", "--campaign", str(tmp_path / "absent.toml"))
    assert missing.returncode == 2 and missing.stderr.startswith("refused: campaign_not_found (")


def test_preflight_reports_the_cause_of_a_failing_command_role(tmp_path: Path) -> None:
    text = _campaign(tmp_path, "exits3").read_text().replace(
        'roles = ["mine"]', 'roles = ["mine"]\ntraces = ["orig-workshop-move"]')
    reg = compute_registration(parse_campaign(text), text.encode())
    report = run_preflight(reg, encode_registration(reg))
    assert not report.ok and report.version == 3 and report.slots
    for slot in report.slots:
        assert slot.code == Code.WORKER_BODY_FAILED.value
        assert slot.cause is not None and slot.cause.code == "fold_plugin_failed"
        assert slot.cause.detail == "mine: exit status 3"
    encoded = json.loads(msgspec.json.encode(report))
    assert encoded["slots"][0]["cause"] == {"code": "fold_plugin_failed",
                                            "detail": "mine: exit status 3"}


def test_a_good_slot_has_no_cause_field(tmp_path: Path) -> None:
    text = _campaign(tmp_path, "good").read_text().replace(
        'roles = ["mine"]', 'roles = ["mine"]\ntraces = ["orig-workshop-move"]')
    reg = compute_registration(parse_campaign(text), text.encode())
    report = run_preflight(reg, encode_registration(reg))
    assert report.ok
    assert all("cause" not in s for s in json.loads(msgspec.json.encode(report))["slots"])


def _write(directory: Path, data: bytes, mode: int = 0o600) -> None:
    path = directory / FAILURE_FILE
    path.write_bytes(data)
    os.chmod(path, mode)


def test_the_cause_is_read_only_as_a_bounded_closed_claim(tmp_path: Path) -> None:
    assert read_cause(tmp_path) is None  # absent
    _write(tmp_path, b'{"code": "fold_plugin_timeout", "detail": "x: timed out\\u001b[2J"}')
    cause = read_cause(tmp_path)
    assert cause is not None and cause.code == "fold_plugin_timeout"
    assert cause.detail == "x: timed out?[2J"  # no control character reaches a terminal
    refused = [
        b'{"code": "worker_body_failed", "detail": ""}',  # not a fold or corpus code
        b'{"code": "made_up", "detail": ""}',
        b'{"code": "fold_plugin_failed", "detail": "", "extra": 1}',  # closed shape
        b'{"code": "fold_plugin_failed", "detail": "' + b"d" * 501 + b'"}',
        b'{"code": "fold_plugin_failed", "detail": "' + b"d" * CAUSE_MAX_BYTES + b'"}',
        b"not json",
    ]
    for data in refused:
        _write(tmp_path, data)
        assert read_cause(tmp_path) is None, data
    _write(tmp_path, b'{"code": "fold_plugin_failed", "detail": ""}', mode=0o666)
    assert read_cause(tmp_path) is None  # writable by others: not read
    (tmp_path / FAILURE_FILE).unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b'{"code": "fold_plugin_failed", "detail": ""}')
    (tmp_path / FAILURE_FILE).symlink_to(elsewhere)
    assert read_cause(tmp_path) is None  # a link: not followed
    assert Code.FOLD_PLUGIN_FAILED in CAUSE_CODES and Code.TRACE_SCHEMA_INVALID in CAUSE_CODES
    assert Code.WORKER_BODY_FAILED not in CAUSE_CODES
    assert Code.LOOKUP_PREPARATION_INVALID not in CAUSE_CODES


def test_an_infeasible_checkpoint_is_built_but_unusable() -> None:
    done = _fold_check("native", "--campaign", "hard", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    got = _json(done)
    assert got["checkpoint"] is not None and got["feasible"] is False
    assert got["unusable"] == ["inventory_infeasible"] and got["code"] is None
