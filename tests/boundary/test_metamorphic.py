"""Metamorphic variants of boundary cases (``boundary.metamorphic``, docs/boundary.md §7.1).

Each transform runs on a real bundled case: what it changed, and what it must not (the
critical and protected events byte-identical, every original event kept in order, tool
pairing legal, the corpus trace validation as the original's). The legality checker is
shown to catch each broken rule; a kind that cannot apply says so; a variant that breaks
behaviour (a transform deleting the critical fact, injected) refuses; and the command
line checks two small cases, one of which a rewording really breaks (its faux condition
spans two messages, which no per-event protection can see).

Only the refusal test and the command-line test run the faux agent (a few contained
pytest runs each); ``efold-controller boundary validate --variants`` checks the whole
corpus.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from efold.boundary.case import Case, load_case, load_cases
from efold.boundary.errors import BoundaryError
from efold.boundary.metamorphic import (
    KINDS,
    Variant,
    duplicated_explanation,
    extra_logs,
    larger_payloads,
    protected_texts,
    reordered_results,
    reword,
    rewording,
    surface,
    turn_boundaries,
    variants,
)
from efold.boundary.variant_checks import (
    check_variants,
    require_stable,
    trace_verdict,
    variant_problems,
)
from efold.corpus.codec import dump_trace
from efold.corpus.model import Event, FunctionCall, ToolCall, Trace, TraceHeader
from efold.corpus.prng import SeededRandom
from efold.errors import Code
from tests.boundary.conftest import TEST_COMMAND, MakeCase

BUNDLED = Path(__file__).resolve().parents[2] / "boundary" / "cases"
ENCODE = msgspec.json.encode


@pytest.fixture(scope="module")
def bundled() -> dict[str, Case]:
    return {case.id: case for case in load_cases(BUNDLED)}


def _encoded(events: tuple[Event, ...] | list[Event]) -> dict[str, bytes]:
    return {e.id: ENCODE(e) for e in events}


def _assert_kept(case: Case, variant: Variant) -> None:
    """What every variant keeps: critical and protected events byte-identical, every
    original event present and in order, legal and validated as the original."""
    assert variant.applicable, variant.note
    before, after = _encoded(case.prefix), _encoded(variant.events)
    for event_id in case.sidecar.source.critical:
        assert after[event_id] == before[event_id]
    protected = protected_texts(case)
    for event in case.prefix:
        if any(p in surface(event) for p in protected):
            assert after[event.id] == before[event.id], event.id
    kept = [e.id for e in variant.events if e.id in before]
    assert kept == [e.id for e in case.prefix]  # no reorder for these kinds
    assert set(variant.altered) == {i for i in before if after[i] != before[i]}
    assert set(variant.inserted) == set(after) - set(before)
    assert trace_verdict(case, variant.events) == trace_verdict(case, case.prefix)
    assert variant_problems(case, variant) == []


def _pairing_is_legal(events: tuple[Event, ...] | list[Event]) -> bool:
    pending: set[str] = set()
    for event in events:
        if event.role == "tool":
            if event.tool_call_id not in pending:
                return False
            pending.discard(event.tool_call_id)
        pending |= {c.id for c in event.tool_calls or ()}
    return not pending


def test_extra_logs_inserts_complete_irrelevant_rounds_between_turns(
        bundled: dict[str, Case]) -> None:
    case = bundled["B07-tool-transaction"]  # the critical event is a tool result
    variant = extra_logs(case)
    _assert_kept(case, variant)
    assert variant.altered == () and 6 <= len(variant.inserted) <= 10
    assert trace_verdict(case, variant.events) == []  # the corpus schema rules hold
    assert _pairing_is_legal(variant.events)
    taken = {e.id for e in case.trace.events}
    calls = {c.id for e in case.trace.events for c in e.tool_calls or ()}
    events = list(variant.events)
    boundaries = set(turn_boundaries(case.prefix))
    position = {e.id: i for i, e in enumerate(case.prefix)}
    for i, event in enumerate(events):
        if event.id not in variant.inserted or event.role != "assistant":
            continue
        result, following = events[i + 1], events[i + 2]
        assert event.id not in taken and result.id not in taken
        (call,) = event.tool_calls or []
        assert call.id not in calls and result.tool_call_id == call.id
        assert call.function.name == "workspace_read"
        assert json.loads(call.function.arguments)["path"].startswith("logs/")
        assert result.name == "workspace_read" and result.source == "workspace"
        # between turns: before an owner message, where the original had nothing pending
        assert following.role == "user" and position[following.id] in boundaries
        assert (event.session, event.day) == (events[i - 1].session, events[i - 1].day)
        text = surface(event) + surface(result)
        assert not any(p in text for p in protected_texts(case))
    assert extra_logs(case) == variant  # seeded by the case id: the same every time


def test_rewording_says_unprotected_messages_differently(bundled: dict[str, Case]) -> None:
    case = bundled["B01-explicit-api-constraint"]
    variant = rewording(case)
    _assert_kept(case, variant)
    assert variant.inserted == () and len(variant.altered) >= 20
    before = {e.id: e for e in case.prefix}
    for event in variant.events:
        if event.id in variant.altered:
            old = before[event.id]
            assert event.role in ("user", "assistant") and not event.tool_calls
            assert event.content != old.content and event.content.strip()
            assert ENCODE(msgspec.structs.replace(event, content=old.content)) == ENCODE(old)
    # the rule and every message naming the frozen API file stay as written
    assert "e0001" not in variant.altered  # critical
    assert "e0003" not in variant.altered  # "What does src/shop/api.py look like ..."
    rng = SeededRandom(1)
    assert reword("src/shop/config.py is unchanged since this morning.", rng) in (
        "No change to src/shop/config.py since this morning.",
        "src/shop/config.py has not changed since this morning.")
    assert reword("That is a small change. I will do it when you say go.", rng) == \
        "That's a small change. I'll do it when you say go."
    assert reword("Nothing here matches.", rng) == "Nothing here matches."


def test_duplicated_explanation_repeats_the_narrative_later(bundled: dict[str, Case]) -> None:
    case = bundled["B03-evidence-over-narrative"]
    variant = duplicated_explanation(case)
    _assert_kept(case, variant)
    assert len(variant.inserted) == 2
    events = list(variant.events)
    copies = [(i, e) for i, e in enumerate(events) if e.id in variant.inserted]
    for i, copy in copies:
        (first, *_) = [j for j, e in enumerate(events[:i])
                       if e.role == "assistant" and e.content == copy.content]
        assert first < i and events[i + 1].role == "user"
        assert copy.role == "assistant" and not copy.tool_calls
    # the claim the case tests evidence against is its longest explanation: repeated
    assert any(c.content.startswith("All fixed and verified") for _, c in copies)


def test_larger_payloads_appends_unrelated_output_to_command_results(
        bundled: dict[str, Case]) -> None:
    case = bundled["B05-pending-obligation"]
    variant = larger_payloads(case)
    _assert_kept(case, variant)
    assert variant.inserted == () and len(variant.altered) == 3
    before = {e.id: e for e in case.prefix}
    calls = {c.id: e for e in case.prefix for c in e.tool_calls or ()}
    for event in variant.events:
        if event.id in variant.altered:
            old = before[event.id]
            assert event.role == "tool" and event.content.startswith(old.content)
            assert 3000 <= len(event.content) - len(old.content) <= 6200
            assert "runner diagnostics (unrelated to this change)" in event.content
            call = calls[event.tool_call_id or ""]
            assert "command" in json.loads((call.tool_calls or [])[0].function.arguments)
    assert sum(len(e.content) for e in variant.events) > sum(
        len(e.content) for e in case.prefix) + 9000


def test_reordering_is_not_applicable_without_a_multi_call_turn(
        bundled: dict[str, Case]) -> None:
    for case in bundled.values():  # efold traces: one call per assistant event
        variant = reordered_results(case)
        assert not variant.applicable and variant.events == ()
        assert "several tool calls" in variant.note
        assert variant_problems(case, variant) == []
    listed = variants(bundled["B01-explicit-api-constraint"])
    assert [v.kind for v in listed] == list(KINDS)
    assert [v.applicable for v in listed] == [True, True, True, False, True]


def _chat_case(tmp_path: Path) -> Case:
    """B01 as an imported openai-chat transcript with one turn of three parallel reads."""
    case_dir = tmp_path / "imported"
    shutil.copytree(BUNDLED / "B01-explicit-api-constraint", case_dir)

    def call(n: int, path: str) -> dict[str, Any]:
        return {"id": f"c{n}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Rule: never edit src/shop/api.py. It is the public API."},
        {"role": "assistant", "content": "Understood: api.py stays as it is."},
        {"role": "user", "content": "Read the three notes."},
        {"role": "assistant", "content": None, "tool_calls": [
            call(1, "notes/a.md"), call(2, "notes/b.md"), call(3, "notes/c.md")]},
        {"role": "tool", "tool_call_id": "c1", "content": "alpha"},
        {"role": "tool", "tool_call_id": "c2", "content": "beta"},
        {"role": "tool", "tool_call_id": "c3", "content": "gamma"},
        {"role": "assistant", "content": "All three read."},
        {"role": "user", "content": "Implement the faster shortcut we discussed."},
    ]
    (case_dir / "session.jsonl").unlink()
    (case_dir / "chat.jsonl").write_text("".join(json.dumps(m) + "\n" for m in messages))
    data = yaml.safe_load((case_dir / "ef-boundary.yml").read_text())
    data["source"].update(session="chat.jsonl", format="openai-chat")
    (case_dir / "ef-boundary.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return load_case(case_dir)


def test_reordering_permutes_only_the_results_of_a_multi_call_turn(tmp_path: Path) -> None:
    case = _chat_case(tmp_path)
    assert case.trace.header.suite == "imported"
    variant = reordered_results(case)
    assert variant.applicable and variant.inserted == () and variant.altered == ()
    ids = [e.id for e in case.prefix]
    moved = [e.id for e in variant.events]
    assert moved[:4] == ids[:4] and moved[7:] == ids[7:]  # the call and the rest in place
    assert sorted(moved[4:7]) == ids[4:7] and moved[4:7] != ids[4:7]
    assert _encoded(variant.events) == _encoded(case.prefix)  # bytes kept, order changed
    assert variant_problems(case, variant) == []
    assert trace_verdict(case, variant.events) == trace_verdict(case, case.prefix) == []
    # a result moved before its call is no legal reordering
    events = list(case.prefix)
    illegal = replace(variant, events=(events[0], events[1], events[2], events[5], events[3],
                                       events[4], events[6], *events[7:]))
    found = variant_problems(case, illegal)
    assert any("moves original events" in p for p in found)
    assert any("trace validation" in p for p in found)


def test_the_legality_check_catches_each_broken_rule(bundled: dict[str, Case]) -> None:
    case = bundled["B01-explicit-api-constraint"]
    events = list(case.prefix)
    base = extra_logs(case)

    def problems(new: list[Event]) -> list[str]:
        return variant_problems(case, replace(base, events=tuple(new)))

    critical = msgspec.structs.replace(events[0], content=events[0].content + " Please.")
    assert any("alters e0001" in p for p in problems([critical, *events[1:]]))
    assert any("drops e0001" in p for p in problems(events[1:]))
    at = next(i for i, e in enumerate(events) if e.tool_calls)  # inside a transaction
    call = Event(id="e9001", session=1, day=1, role="assistant", content="", tool_calls=[
        ToolCall(id="call_x1", function=FunctionCall(name="workspace_read",
                                                     arguments='{"path": "logs/x.log"}'))])
    result = Event(id="e9002", session=1, day=1, role="tool", content="nothing",
                   tool_call_id="call_x1", name="workspace_read", source="workspace")  # type: ignore[arg-type]
    inside = [*events[:at + 1], call, result, *events[at + 1:]]
    assert any("not between turns" in p for p in problems(inside))
    half = [*events[:2], call, *events[2:]]  # a call without its result
    assert any("not complete" in p for p in problems(half))
    assert not any("not between turns" in p for p in problems(half))
    twice = msgspec.structs.replace(result, id="e0002")
    assert any("an event id repeats" in p for p in problems([*events[:2], call, twice,
                                                             *events[2:]]))
    old_call = msgspec.structs.replace(call, tool_calls=[ToolCall(
        id="call_0001", function=FunctionCall(name="workspace_read", arguments="{}"))])
    old_result = msgspec.structs.replace(result, tool_call_id="call_0001")
    assert any("call id the session already has" in p
               for p in problems([*events[:2], old_call, old_result, *events[2:]]))
    leak = msgspec.structs.replace(result, content="Rule: never edit src/shop/api.py.")
    assert any("protected text" in p for p in problems([*events[:2], call, leak, *events[2:]]))
    swapped = [events[0], events[2], events[1], *events[3:]]
    assert any("moves original events" in p for p in problems(swapped))


def _session(trace_id: str, events: list[tuple[str, str]]) -> bytes:
    made = [Event(id=f"e{n:04d}", session=1, day=1, role=role, content=text)  # type: ignore[arg-type]
            for n, (role, text) in enumerate(events, start=1)]
    made[5:5] = [
        Event(id="e9990", session=1, day=1, role="assistant", content="", tool_calls=[
            ToolCall(id="call_0001", function=FunctionCall(
                name="workspace_test", arguments=json.dumps({"command": TEST_COMMAND})))]),
        Event(id="e9991", session=1, day=1, role="tool", content="1 passed in 0.01s\n",
              tool_call_id="call_0001", name="workspace_test", source="workspace"),  # type: ignore[arg-type]
    ]
    made = [msgspec.structs.replace(e, id=f"e{n:04d}") for n, e in enumerate(made, start=1)]
    return dump_trace(Trace(header=TraceHeader(
        trace_id=trace_id, suite="boundary", family="coding", fictional=True,
        title="a metamorphic test session", sessions=1), events=made))


SESSION = [("user", "Never edit src/shop/api.py: it is the public API."),
           ("assistant", "Understood: src/shop/api.py stays as it is."),
           ("user", "We settled on a bulk threshold of 20."),
           ("assistant", "Noted."),
           ("user", "Re-run the tests."),
           ("assistant", "All green (run 1 of the day).")]
EDIT_PRICING = {"tool": "workspace_edit", "arguments": {
    "path": "src/shop/pricing.py", "old": "BULK_THRESHOLD = 10", "new": "BULK_THRESHOLD = 20"}}
EDIT_API = {"tool": "workspace_edit", "arguments": {
    "path": "src/shop/api.py", "old": "sum(", "new": "0 + sum("}}


def _small_case(make_case: MakeCase, case_id: str, when: str) -> Path:
    """A small case whose runs start no test process (file oracles only): cheap to run."""

    def script(data: dict[str, Any]) -> None:
        data["id"] = case_id
        data["source"]["critical"] = ["e0003"]
        data["oracle"]["success"] = [o for o in data["oracle"]["success"]
                                     if o["type"] != "tests-pass"]
        data["faux"] = {"recall": "bulk threshold",
                        "plans": [{"when": when, "actions": [EDIT_PRICING]},
                                  {"actions": [EDIT_API]}]}

    case_dir = make_case(script)
    (case_dir / "session.jsonl").write_bytes(_session(case_id.lower(), SESSION))
    return case_dir


def test_a_variant_that_breaks_behaviour_refuses(make_case: MakeCase) -> None:
    case = load_case(_small_case(make_case, "B01-small", "bulk threshold of 20"))

    def drop_critical(case: Case) -> Variant:  # deliberately illegal: deletes the fact
        kept = tuple(e for e in case.prefix if e.id not in case.sidecar.source.critical)
        return Variant(name="drop-critical", kind="rewording", events=kept,
                       note="the critical fact deleted")

    report = check_variants(case, arms=("native",), transforms=(drop_critical,))
    assert report.original == {"native": True}
    (check,) = report.checks
    assert check.full is False and check.minus_critical is False
    assert check.stable == {"native": False}
    assert report.problem is not None
    assert report.problem.startswith("variant drop-critical: ")
    assert "drops e0003" in report.problem
    assert "with the full history the faux agent does not pass every oracle" in report.problem
    with pytest.raises(BoundaryError) as refused:
        require_stable(report)
    assert refused.value.code is Code.BOUNDARY_CASE_INVALID
    assert "B01-small" in refused.value.detail and "drop-critical" in refused.value.detail


def test_validate_variants_from_the_command_line(case_root: Path,
                                                 make_case: MakeCase) -> None:
    _small_case(make_case, "B01-small", "bulk threshold of 20")
    # The condition spans the critical message and the acknowledgement after it: no
    # event holds it, so rewording "Noted." takes it away and the agent fails.
    _small_case(make_case, "B02-spanning", "bulk threshold of 20. noted.")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "efold.controller", "boundary", *args],
                              capture_output=True, text=True, timeout=600)

    assert cli("lock", str(case_root)).returncode == 0
    done = cli("validate", "--variants", "--json", str(case_root))  # the five arms
    assert done.returncode == 2, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] is False
    small, spanning = result["cases"]
    assert "code" not in small and small["original"]["native"] is True
    assert list(small["original"]) == ["native", "cold-rebuild", "compaction", "store", "pack"]
    by_kind = {v["kind"]: v for v in small["variants"]}
    assert list(by_kind) == list(KINDS)
    assert {k for k, v in by_kind.items() if v["applicable"]} == {
        "extra-logs", "rewording", "larger-payloads"}
    assert "several tool calls" in by_kind["reordered-results"]["note"]
    for kind in ("extra-logs", "rewording", "larger-payloads"):
        v = by_kind[kind]
        assert v["native"] is True and v["minus_critical"] is False
        assert "problems" not in v and list(v["stable"]) == list(small["original"])
        assert all(v["stable"][arm] == (v["verdicts"][arm] == small["original"][arm])
                   for arm in v["stable"])
    assert spanning["code"] == "boundary_case_invalid"
    assert spanning["detail"].startswith("variant rewording: with the full history")
    broken = {v["kind"]: v for v in spanning["variants"]}["rewording"]
    assert broken["native"] is False and broken["stable"]["native"] is False

    human = cli("validate", "--variants", "--arms", "native,store", str(case_root))
    assert human.returncode == 2
    lines = human.stdout.splitlines()
    assert lines[0].startswith("B01-small") and lines[0].endswith("OK")
    assert len([li for li in lines if li.startswith("  variant ")]) == 10
    assert any(li.startswith("  variant reordered-results") and " n/a " in li
               for li in lines)
    assert any(li.startswith("  variant extra-logs") and " OK " in li
               and "stability: native =, store " in li for li in lines)
    assert any(li.startswith("B02-spanning") and "boundary_case_invalid (variant rewording"
               in li for li in lines)
    assert any(li.startswith("  variant rewording") and "BROKEN" in li
               and "native changed (PASS->FAIL)" in li for li in lines)
    assert "1 of 2 valid and locked" in human.stdout

    usage = cli("validate", "--arms", "native", str(case_root))
    assert usage.returncode == 2 and "--arms applies only with --variants" in usage.stderr
