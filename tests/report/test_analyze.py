"""The paired comparison analyzer (``report.analyze``) and its strict input
(``report.comparison_set``), on hand-checked data: every figure below was worked out by
hand from the set it is asserted on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from efold.errors import Code
from efold.report.analyze import analyze
from efold.report.comparison_set import MAX_BYTES, MAX_RUNS, decode_comparison
from efold.report.errors import ReportError


def run(task: str, arm: str, *, accepted: bool, repeat: int = 1, checks: tuple[int, int] = (1, 1),
        constraints: int | None = 0, claims: int | None = 0, tokens: int | None = 100,
        cost: str | None = "0.01", latency: int | None = 1000) -> dict[str, Any]:
    return {"task": task, "repeat": repeat, "arm": arm, "accepted": accepted,
            "checks_passed": checks[0], "checks_total": checks[1],
            "missed_constraints": constraints, "unsupported_claims": claims,
            "tokens": tokens, "cost_usd": cost, "latency_ms": latency}


def dataset(runs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"schema": "efold-comparison-v1", "arms": ["ref", "cand"],
            "representative_task_set": False, "runs": runs, **extra}


def encoded(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def hand_set(tasks: int = 20) -> dict[str, Any]:
    """``tasks`` tasks t00..: the reference accepts the first 15, the candidate the
    first 12 and t18, t19 (so 14); the candidate misses a constraint on t12-t14, uses
    half the tokens everywhere, costs 0.02 instead of 0.01 on t00-t04, and its latency
    is unmeasured on t19."""
    runs = []
    for i in range(tasks):
        t = f"t{i:02d}"
        runs.append(run(t, "ref", accepted=i < 15, checks=(1, 1) if i < 15 else (0, 1)))
        ok = i < 12 or i >= 18
        runs.append(run(t, "cand", accepted=ok, checks=(1, 1) if ok else (0, 1),
                        constraints=1 if 12 <= i < 15 else 0, tokens=50,
                        cost="0.02" if i < 5 else "0.01", latency=None if i == 19 else 1000))
    return dataset(runs)


def test_the_figures_of_a_hand_checked_set() -> None:
    a = analyze(decode_comparison(encoded(hand_set())))
    assert (a.verdict, a.paired_tasks, a.pairs, a.minimum_tasks) == ("comparison_ready", 20, 20, 20)
    ref, cand = a.arms
    assert (ref.arm, ref.accepted.successes, ref.accepted.trials) == ("ref", 15, 20)
    # Wilson 95% of 15/20 is 0.5313 to 0.8881, of 14/20 0.4810 to 0.8545
    assert ref.accepted.wilson95 is not None and cand.accepted.wilson95 is not None
    assert (round(ref.accepted.wilson95.lower, 4), round(ref.accepted.wilson95.upper, 4)) == \
        (0.5313, 0.8881)
    assert (round(cand.accepted.wilson95.lower, 4), round(cand.accepted.wilson95.upper, 4)) == \
        (0.4810, 0.8545)
    assert (cand.checks_passed, cand.checks_total, cand.missed_constraints) == (14, 20, 3)
    assert (ref.cost_usd, cand.cost_usd) == ("0.2", "0.25")  # exact decimal sums
    assert (cand.tokens_median, cand.latency_median_ms, cand.latency_unmeasured) == (50, 1000, 1)
    # acceptance pairs: both t00-t11 (12), only ref t12-t14 (3), only cand t18-t19 (2),
    # neither t15-t17 (3): delta (2 - 3) / 20 = -5 pp
    c = a.acceptance
    assert (c.both_correct, c.b, c.c, c.both_wrong, c.delta_pp) == (12, 3, 2, 3, -5.0)
    paired = {m.metric: (m.wins, m.ties, m.losses, m.unknown) for m in a.paired}
    assert paired == {
        "acceptance": (2, 15, 3, 0), "checks": (2, 15, 3, 0),
        "constraints_missed": (0, 17, 3, 0), "unsupported_claims": (0, 20, 0, 0),
        "tokens": (20, 0, 0, 0), "cost_usd": (0, 15, 5, 0), "latency_ms": (0, 19, 0, 1)}


def test_the_evidence_gate_is_twenty_paired_tasks_and_never_lower() -> None:
    assert analyze(decode_comparison(encoded(hand_set(19)))).verdict == "insufficient_evidence"
    # repeats add pairs, not tasks: 19 tasks x 2 repeats are still 19 paired tasks
    doc = hand_set(19)
    doc["runs"] += [dict(r, repeat=2) for r in doc["runs"]]
    a = analyze(decode_comparison(encoded(doc)))
    assert (a.verdict, a.paired_tasks, a.pairs) == ("insufficient_evidence", 19, 38)
    raised = dict(hand_set(20), minimum_tasks=25)
    assert analyze(decode_comparison(encoded(raised))).verdict == "insufficient_evidence"
    with pytest.raises(ReportError) as refused:
        decode_comparison(encoded(dict(hand_set(20), minimum_tasks=19)))
    assert refused.value.code is Code.COMPARISON_INVALID


def test_the_attestation_is_reported_as_given() -> None:
    attested = dict(hand_set(), representative_task_set=True)
    assert analyze(decode_comparison(encoded(attested))).representative_task_set is True
    assert analyze(decode_comparison(encoded(hand_set()))).representative_task_set is False


def _with(change: Any) -> dict[str, Any]:
    doc = hand_set()
    change(doc)
    return doc


@pytest.mark.parametrize(("doc", "words"), [
    (_with(lambda d: d["runs"][0].update(prompt="Summarise the ticket")), "prompt"),
    (_with(lambda d: d["runs"][0].update(output="the model's answer")), "output"),
    (_with(lambda d: d.update(api_key="sk-live-1234")), "api_key"),
    (_with(lambda d: d.update(provenance={"source": "a free sentence about the run"})),
     "provenance"),
    (_with(lambda d: d["runs"][0].update(task="a task with spaces")), "task"),
    (_with(lambda d: d["runs"][0].update(cost_usd=0.01)), "cost_usd"),
    (_with(lambda d: d["runs"][0].update(cost_usd="1e-3")), "cost_usd"),
    (_with(lambda d: d["runs"][0].update(tokens=-1)), "tokens"),
    (_with(lambda d: d["runs"][0].update(checks_passed=2)), "checks_passed"),
    (_with(lambda d: d["runs"][0].update(checks_passed=0)), "accepted"),
    (_with(lambda d: d["runs"][0].update(arm="other")), "arm"),
    (_with(lambda d: d["runs"].pop()), "no run of 'cand'"),
    (_with(lambda d: d["runs"].append(dict(d["runs"][0]))), "has 2 runs"),
    (_with(lambda d: d.update(arms=["ref", "ref"])), "arms"),
    (_with(lambda d: d.update(arms=["ref", "cand", "third"])), "arms"),
    (_with(lambda d: d.update(schema="efold-comparison-v0")), "schema"),
])
def test_a_set_that_breaks_the_format_is_refused(doc: dict[str, Any], words: str) -> None:
    with pytest.raises(ReportError) as refused:
        decode_comparison(encoded(doc))
    assert refused.value.code is Code.COMPARISON_INVALID
    assert words in refused.value.detail


def test_bounds_are_checked_before_anything_is_aggregated() -> None:
    with pytest.raises(ReportError) as refused:
        decode_comparison(b" " * (MAX_BYTES + 1))
    assert refused.value.code is Code.COMPARISON_TOO_LARGE
    runs = [run(f"t{i}", arm, accepted=True, tokens=None, cost=None, latency=None)
            for i in range(MAX_RUNS // 2 + 1) for arm in ("ref", "cand")]
    with pytest.raises(ReportError) as refused:
        decode_comparison(encoded(dataset(runs)))
    assert refused.value.code is Code.COMPARISON_TOO_LARGE
    with pytest.raises(ReportError) as refused:
        decode_comparison(b"[1, 2]")
    assert refused.value.code is Code.COMPARISON_INVALID


def test_unmeasured_is_never_zero() -> None:
    doc = hand_set()
    for r in doc["runs"]:
        if r["task"] == "t00":
            r.update(tokens=None, cost_usd=None)
    a = analyze(decode_comparison(encoded(doc)))
    ref, cand = a.arms
    assert (ref.tokens_unmeasured, ref.cost_unmeasured, ref.cost_usd) == (1, 1, "0.19")
    assert (cand.tokens_unmeasured, cand.cost_usd) == (1, "0.23")  # t00 cost 0.02, unmeasured
    paired = {m.metric: m for m in a.paired}
    assert paired["tokens"].unknown == 1 and paired["tokens"].wins == 19
    assert paired["cost_usd"].unknown == 1


# -- the command ----------------------------------------------------------------------------


def efold(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", "analyze", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_command_skips_analyzes_and_gates(tmp_path: Path) -> None:
    # No input is a usage error (a forgotten argument must not pass in a script)...
    forgotten = efold(cwd=tmp_path)
    assert forgotten.returncode == 2 and forgotten.stdout == ""
    assert "Error: give FILE, or --run RUN --arms REF,CAND" in forgotten.stderr
    assert efold("--json", cwd=tmp_path).returncode == 2
    # ...unless the caller says an empty input is fine.
    skipped = efold("--skip-if-empty", cwd=tmp_path)
    assert skipped.returncode == 0 and skipped.stdout.startswith("SKIP")
    as_json = efold("--skip-if-empty", "--json", cwd=tmp_path)
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == {
        "skip": "no comparison set given"}
    (tmp_path / "ready.json").write_bytes(encoded(hand_set()))
    ready = efold("ready.json", cwd=tmp_path)
    assert ready.returncode == 0, ready.stderr
    assert ready.stdout.startswith("verdict: comparison_ready (20 paired tasks")
    assert "representative task set: not attested" in ready.stdout
    (tmp_path / "short.json").write_bytes(encoded(hand_set(19)))
    short = efold("short.json", "--json", cwd=tmp_path)
    assert short.returncode == 1
    assert json.loads(short.stdout)["verdict"] == "insufficient_evidence"
    (tmp_path / "bad.json").write_bytes(encoded(_with(lambda d: d.update(secret="x"))))
    bad = efold("bad.json", "--json", cwd=tmp_path)
    assert bad.returncode == 2 and json.loads(bad.stdout)["refused"] == "comparison_invalid"
    assert bad.stderr.startswith("refused: comparison_invalid")
    for usage in (["ready.json", "--run", "x"], ["ready.json", "--attest-representative"],
                  ["--arms", "a,b"]):
        done = efold(*usage, cwd=tmp_path)
        assert done.returncode == 2 and "Usage" in done.stderr, usage


def test_a_written_set_reads_back_whole(tmp_path: Path) -> None:
    from efold.report.comparison_set import ComparisonSet, encode_comparison

    data = msgspec.json.decode(encoded(hand_set()), type=ComparisonSet)
    assert decode_comparison(encode_comparison(data)) == data


RESEARCH = {"request_context_tokens": 900, "parent_context_tokens": 4000,
            "checklist_count": 7, "first_mutation_boundary": True, "planning_pruned": True,
            "executor_verified": False, "plan_quality": "0.75",
            "plan_quality_rubric": "prewalk-evaluator@1"}


def test_a_v2_set_carries_the_research_protocol_fields() -> None:
    """v2 adds the research record's fields; the analyzer reports per arm the compliance
    rates, checklist median and mean plan quality over the runs that measured them."""
    doc = hand_set()
    doc["schema"] = "efold-comparison-v2"
    cand = [r for r in doc["runs"] if r["arm"] == "cand"]
    cand[0].update(RESEARCH)
    cand[1].update(RESEARCH, plan_quality="0.5", checklist_count=5, executor_verified=True)
    cand[2].update(first_mutation_boundary=False)  # one compliance field, nothing else
    a = analyze(decode_comparison(encoded(doc)))
    ref, candidate = a.arms
    assert ref.research is None  # nothing measured: null, never zeros
    r = candidate.research
    assert r is not None
    assert r.first_mutation_boundary is not None
    assert (r.first_mutation_boundary.successes, r.first_mutation_boundary.trials) == (2, 3)
    assert r.executor_verified is not None
    assert (r.executor_verified.successes, r.executor_verified.trials) == (1, 2)
    assert [(q.rubric, q.runs, q.mean) for q in r.plan_quality] == [
        ("prewalk-evaluator@1", 2, "0.625")]
    assert r.checklist_count_median == 5  # nearest rank of [5, 7]
    assert (r.request_context_tokens_median, r.parent_context_tokens_median) == (900, 4000)
    # Two rubrics are two figures, never one average.
    cand[2].update(plan_quality="1", plan_quality_rubric="other@2")
    mixed = analyze(decode_comparison(encoded(doc))).arms[1].research
    assert mixed is not None and [(q.rubric, q.runs, q.mean) for q in mixed.plan_quality] == [
        ("other@2", 1, "1"), ("prewalk-evaluator@1", 2, "0.625")]


@pytest.mark.parametrize(("schema", "fields", "words"), [
    ("efold-comparison-v1", {"checklist_count": 7}, "needs efold-comparison-v2"),
    ("efold-comparison-v2", {"checklist_count": 4}, "checklist_count"),
    ("efold-comparison-v2", {"checklist_count": 10}, "checklist_count"),
    ("efold-comparison-v2", {"plan_quality": "0.5"}, "go together"),
    ("efold-comparison-v2", {"plan_quality_rubric": "r"}, "go together"),
    ("efold-comparison-v2", {"plan_quality": "1.5", "plan_quality_rubric": "r"}, "0 to 1"),
    ("efold-comparison-v2", {"plan_quality": "0.5", "plan_quality_rubric": "a rubric"},
     "bounded identifier"),
    ("efold-comparison-v3", {}, "schema"),
])
def test_research_fields_are_checked(schema: str, fields: dict[str, Any], words: str) -> None:
    doc = hand_set()
    doc["schema"] = schema
    doc["runs"][0].update(fields)
    with pytest.raises(ReportError) as refused:
        decode_comparison(encoded(doc))
    assert refused.value.code is Code.COMPARISON_INVALID
    assert words in refused.value.detail


def test_a_v1_set_still_reads_and_writes_as_v1() -> None:
    from efold.report.comparison_set import encode_comparison

    data = decode_comparison(encoded(hand_set()))
    assert data.schema == "efold-comparison-v1"
    assert "checklist_count" not in encode_comparison(data).decode()
    assert analyze(data).arms[1].research is None
