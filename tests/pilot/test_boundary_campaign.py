"""Boundary cases inside campaigns: a contained probe child per case and role, judged by
the controller after the child has exited.

One real faux pilot mixes a question trace with three bundled cases on native and
cold-rebuild: every boundary slot's receipt carries its oracle verdicts, and they are
exactly what the offline run (``boundary run``) of the same case and arm says; the
results carry the per-role figures, the contrasts and the incidents. The judging step
itself refuses a work record that is missing, altered or unnamed; a case edited after
registration refuses the registration; the campaign and the reports refuse what they
must.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from efold.boundary.case import load_case
from efold.boundary.suite import bundled_cases_root, select_cases
from efold.boundary.validate import run_offline
from efold.boundary.work import WORK_NAME, WorkRecord, write_work
from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.profiles import route_of
from efold.controller.campaigns.registration import (
    compute_registration,
    encode_registration,
    load_registration,
    write_registration,
)
from efold.controller.errors import CampaignError
from efold.controller.pilot.boundary_slots import CheckpointFacts, judge_boundary
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code, EfoldError
from efold.protocol.records import BoundaryRecord, Receipt
from efold.report.errors import ReportError
from efold.report.join import join_receipts
from efold.worker.boundary_body import WORKSPACE_DIR

CASES = ["B01", "B05", "X07"]
CAMPAIGN = """
name = "mixed"
suite = "original"
roles = ["native", "cold-rebuild"]
probe_limit = 1
traces = ["orig-cafe-fitout"]
cap_usd = "60.00"
{root}
[boundary]
cases = {cases}
{case_root}
[reader]
provider = "faux"
model = "faux-extractive-v1"
api = "responses"
base_url = "faux://local"
effort = "low"
"""


def campaign_text(cases: list[str] = CASES, case_root: Path | None = None) -> str:
    return CAMPAIGN.format(root="", cases=json.dumps(cases),
                           case_root="" if case_root is None else f'root = "{case_root}"')


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = campaign_text()
    reg = compute_registration(parse_campaign(text), text.encode())
    run = claim_run_dir(tmp_path_factory.mktemp("runs") / "mixed")
    outcome = run_pilot(reg, encode_registration(reg), run)
    assert outcome.stop_code is None
    return run


def receipts(run: Path) -> dict[str, Receipt]:
    return {p.stem: msgspec.json.decode(p.read_bytes(), type=Receipt)
            for p in (run / "receipts").glob("*.json")}


def test_a_mixed_campaign_runs_questions_and_cases(mixed_run: Path) -> None:
    found = receipts(mixed_run)
    questions = [r for r in found.values() if r.category != "boundary"]
    cases = [r for r in found.values() if r.category == "boundary"]
    assert len(questions) == 2 and len(cases) == 2 * len(CASES)
    assert all(r.boundary is None and r.status == "completed" for r in questions)
    assert all(r.boundary is not None and r.status == "completed" for r in cases)


def test_verdicts_in_the_campaign_equal_the_offline_run(mixed_run: Path) -> None:
    """The contained child (guard, faux provider, IPC) and the controller's judging give
    the oracle verdicts the in-process offline run gives, case by case and arm by arm."""
    by_case = {c.id: c for c in select_cases(bundled_cases_root(), CASES)}
    for receipt in receipts(mixed_run).values():
        record = receipt.boundary
        if record is None:
            continue
        case = by_case[record.case]
        offline = run_offline(case, case.prefix, receipt.arm)
        assert [(o.type, o.verdict) for o in record.oracles] == \
            [(r.type, r.verdict) for r in offline.results], (receipt.slot, record)
        assert record.passed is offline.passed
        assert [a.family for a in record.actions] == [a.family for a in offline.run.actions]
        assert record.ending == offline.run.ending and record.requests == offline.run.requests
        assert (record.repeat, record.folds) == (case.sidecar.fold.repeat, offline.folds)
        assert receipt.correct is (offline.passed is True)
        assert receipt.spend.admitted == record.requests  # every request went through the guard
        # the workspace the oracles judged and the work record stay as evidence
        slot = mixed_run / "slots" / receipt.slot
        assert (slot / WORKSPACE_DIR).is_dir() and (slot / WORK_NAME).is_file()
        assert not (slot / "checkpoint").exists()  # the checkpoint is restored in memory


def test_results_carry_rates_contrasts_and_incidents(mixed_run: Path) -> None:
    results = json.loads((mixed_run / "results.json").read_bytes())
    b = results["boundary"]
    assert b["reference_arm"] == "native"
    assert [c.split("@")[0] for c in b["cases"]] == sorted(c.id for c in select_cases(
        bundled_cases_root(), CASES))
    arms = {a["arm"]: a for a in b["arms"]}
    # native's checkpoint shows X07's answer: nothing to recall, so that run is excluded
    # (never scored, and not in the Recall Trigger Rate); cold-rebuild's needs recall.
    assert b["excluded"] == [{"case": "X07-required-recall-ticket", "case_version": 1,
                              "arm": "native", "excluded": "recall_answer_visible"}]
    x07 = next(r for r in receipts(mixed_run).values()
               if r.boundary is not None and r.boundary.case.startswith("X07")
               and r.role == "native")
    assert x07.excluded == "recall_answer_visible"
    assert arms["native"]["passed"]["successes"] == 2
    assert arms["native"]["recall_trigger"] is None
    assert arms["cold-rebuild"]["passed"]["successes"] == 0
    assert arms["cold-rebuild"]["recall_trigger"] == {**arms["cold-rebuild"]["recall_trigger"],
                                                     "successes": 0, "trials": 1}
    # As the reference, native's X07 run still stands: cold-rebuild lost what it had.
    [contrast] = b["contrasts"]
    assert (contrast["counts"]["pairs"], contrast["counts"]["b"]) == (3, 3)
    assert {i["failing_arm"] for i in b["incidents"]} == {"cold-rebuild"}
    assert sorted(i["category"] for i in b["incidents"]) == [
        "authority_loss", "missing_obligation", "recall_not_triggered"]
    assert all(i["build"] == json.loads((mixed_run / "registration.json").read_bytes())
               ["digests"]["build"] for i in b["incidents"])
    summary = (mixed_run / "summary.md").read_text()
    assert "## boundary cases per role" in summary and "## compression incidents" in summary
    assert "boundary cases versus native" in (mixed_run / "report.html").read_text()


# -- judging refuses what it cannot trust -------------------------------------------------


def _judged(tmp_path: Path, work: bytes | None, named: str | None) -> BoundaryRecord:
    case = load_case(bundled_cases_root() / "B01-explicit-api-constraint")
    shutil.copytree(case.workspace, tmp_path / WORKSPACE_DIR)
    if work is not None:
        (tmp_path / WORK_NAME).write_bytes(work)
    route = route_of(parse_campaign(campaign_text()).reader)
    return judge_boundary(case, tmp_path, named, CheckpointFacts(False, None, 0), route,
                          real=False)


def test_a_work_record_that_does_not_hold_is_never_judged(tmp_path: Path) -> None:
    record = WorkRecord(version=1, actions=[], recall_outputs=[], ending="answered",
                        requests=1, input_tokens=10, output_tokens=2)
    sha = write_work(tmp_path, record)
    data = (tmp_path / WORK_NAME).read_bytes()
    (tmp_path / WORK_NAME).unlink()
    for work, named, why in [(None, sha, "missing"), (data, None, "unnamed"),
                             (data.replace(b"answered", b"no_outpu"), sha, "altered"),
                             (b"{}", "0" * 64, "not a record")]:
        where = tmp_path / why.replace(" ", "-")
        where.mkdir()
        judged = _judged(where, work, named)
        assert judged.code == Code.BOUNDARY_WORK_INVALID.value, why
        assert judged.oracles == [] and judged.passed is None


def test_an_untouched_workspace_is_judged_by_the_oracles(tmp_path: Path) -> None:
    record = WorkRecord(version=1, actions=[], recall_outputs=[], ending="answered",
                        requests=1, input_tokens=10, output_tokens=2)
    sha = write_work(tmp_path, record)
    judged = _judged(tmp_path, None, sha)
    assert judged.code is None and judged.passed is False  # B01 needs an edit
    assert {o.type for o in judged.oracles} >= {"forbidden-path-unchanged", "tests-pass"}
    assert judged.environment_sha256 is not None and len(judged.environment_sha256) == 64


# -- the campaign, the registration and the reports refuse -------------------------------


def test_a_case_edited_after_registration_refuses(tmp_path: Path) -> None:
    root = tmp_path / "cases"
    shutil.copytree(bundled_cases_root(), root)
    text = campaign_text(["B01"], root)
    reg = compute_registration(parse_campaign(text), text.encode())
    path, sha = write_registration(reg, tmp_path / "reg")
    load_registration(path, sha)  # holds as registered
    (root / "B01-explicit-api-constraint" / "workspace" / "NEW.txt").write_text("x")
    with pytest.raises(EfoldError) as caught:
        load_registration(path, sha)
    assert caught.value.code in (Code.BOUNDARY_CASE_CHANGED, Code.REGISTRATION_DIGEST_MISMATCH)


@pytest.mark.parametrize(("text", "code"), [
    (campaign_text(["B99"]), Code.BOUNDARY_CASE_INVALID),
    (campaign_text(["B01", "B01-explicit-api-constraint"]), Code.BOUNDARY_CASE_INVALID),
    (campaign_text([]), Code.BOUNDARY_CASE_INVALID),
    (campaign_text().replace("[boundary]", "[boundary]\nextra = 1"), Code.CAMPAIGN_INVALID),
    (campaign_text().split("[boundary]")[0].replace("probe_limit = 1", "probe_limit = 0")
     + '[reader]\nprovider = "faux"\nmodel = "faux-extractive-v1"\napi = "responses"\n'
     'base_url = "faux://local"\neffort = "low"\n', Code.CAMPAIGN_INVALID),
    (campaign_text(case_root=Path("/nonexistent")), Code.CAMPAIGN_INVALID),
    (campaign_text().replace("probe_limit = 1", "probe_limit = 0"), Code.CAMPAIGN_INVALID),
])
def test_bad_boundary_tables_refuse(text: str, code: Code) -> None:
    with pytest.raises((CampaignError, EfoldError)) as caught:
        compute_registration(parse_campaign(text), text.encode())
    assert caught.value.code is code


def test_a_campaign_without_cases_registers_as_before() -> None:
    """No ``[boundary]``: nothing of it is encoded, and the corpus digest is the suite's."""
    plain = CAMPAIGN.split("[boundary]")[0].format(root="") + "[reader]" + \
        CAMPAIGN.split("[reader]")[1]
    reg = compute_registration(parse_campaign(plain), plain.encode())
    assert b"boundary" not in encode_registration(reg)
    assert all(not t.trace_id.startswith(("b0", "x0")) for t in reg.selection)


def test_reports_refuse_a_boundary_record_on_a_question(mixed_run: Path) -> None:
    from efold.protocol.records import Plan

    plan = msgspec.json.decode((mixed_run / "plan.json").read_bytes(), type=Plan)
    found = receipts(mixed_run)
    question = next(r for r in found.values() if r.category != "boundary")
    record = next(r.boundary for r in found.values() if r.boundary is not None)
    forged = msgspec.structs.replace(question, boundary=record)
    with pytest.raises(ReportError):
        join_receipts(plan, [forged if r.slot == question.slot else r
                             for r in found.values()])
    case_slot = next(r for r in found.values() if r.boundary is not None)
    assert case_slot.boundary is not None
    bad = msgspec.structs.replace(case_slot, boundary=msgspec.structs.replace(
        case_slot.boundary, ending="a sentence the agent wrote"))
    with pytest.raises(ReportError):
        join_receipts(plan, [bad if r.slot == case_slot.slot else r for r in found.values()])


# -- any fold: a user's external command that keeps only the handoff state ---------------

# A state-only fold (B12's capability): it keeps nothing of the session but the last
# handoff record (the reserved ``handoff_state`` call and its result, so the agent sees
# it) and returns that record's state as its declared state.
STATE_ONLY_FOLD = '''\
import json, sys
request = json.load(sys.stdin)
events = request["events"]
record = next(e for e in reversed(events)
              if e["role"] == "tool" and e.get("name") == "handoff_state")
call = next(e for e in events if e["role"] == "assistant"
            and any(c["id"] == record["tool_call_id"] for c in e.get("tool_calls") or []))
messages = [
    {"role": "assistant", "content": "", "tool_calls": call["tool_calls"]},
    {"role": "tool", "content": record["content"], "tool_call_id": record["tool_call_id"],
     "name": "handoff_state"},
]
json.dump({"protocol": "efold-fold-v1", "messages": messages, "tools": [],
           "boundary_crossed": True, "state": json.loads(record["content"])}, sys.stdout)
'''


def test_a_users_command_fold_runs_a_case_and_declares_its_state(tmp_path: Path) -> None:
    """B12 on a command fold next to cold-rebuild, in contained children: the fold's
    returned state reaches the controller's judging through the verified snapshot, so
    its state oracles pass; cold-rebuild declares none, so they are not applicable and
    its file oracles fail."""
    script = tmp_path / "state_only_fold.py"
    script.write_text(STATE_ONLY_FOLD)
    text = CAMPAIGN.format(root="", cases='["B12"]', case_root="").replace(
        '["native", "cold-rebuild"]', '["state-only", "cold-rebuild"]').replace(
        "probe_limit = 1", "probe_limit = 0").replace('traces = ["orig-cafe-fitout"]\n', "").replace(
        '[reader]', f'[role.state-only]\ncommand = [{json.dumps(sys.executable)}, '
                    f'{json.dumps(str(script))}]\n\n[reader]')
    reg = compute_registration(parse_campaign(text), text.encode())
    run = claim_run_dir(tmp_path / "runs" / "state-only")
    outcome = run_pilot(reg, encode_registration(reg), run)
    assert outcome.stop_code is None
    by_role = {r.role: r for r in receipts(run).values()}
    assert sorted(by_role) == ["cold-rebuild", "state-only"]
    state_only = by_role["state-only"].boundary
    cold = by_role["cold-rebuild"].boundary
    assert state_only is not None and cold is not None
    verdicts = {o.type: o.verdict for o in state_only.oracles}
    assert verdicts == {"state-key-equals": "pass", "anchor-active": "pass",
                        "obligation-open": "pass", "file-equals": "pass",
                        "artifact-exists": "pass", "tests-pass": "pass"}
    assert state_only.passed is True and by_role["state-only"].correct is True
    cold_verdicts = {o.type: o.verdict for o in cold.oracles}
    assert {cold_verdicts[t] for t in ("state-key-equals", "anchor-active",
                                       "obligation-open")} == {"not_applicable"}
    assert cold_verdicts["file-equals"] == "fail" and cold.passed is False


def test_the_pilot_prints_the_boundary_cases_per_role(tmp_path: Path) -> None:
    """As an operator runs it: ``pilot --faux --campaign FILE`` ends with the cases'
    own table (passed, not applicable, actions, recall, incidents) after the roles'."""
    (tmp_path / "cases.toml").write_text(
        campaign_text(["B01"]).replace("probe_limit = 1", "probe_limit = 0")
        .replace('traces = ["orig-cafe-fitout"]\n', ""))
    done = subprocess.run([sys.executable, "-m", "efold.controller", "pilot", "--faux",
                           "--campaign", "cases.toml", "--no-progress"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "boundary cases: 1 per role, versus native" in out
    table = out[out.index("boundary cases:"):].splitlines()
    rows = {cells[0]: cells[1:] for line in table if line.startswith("│")
            for cells in [[c.strip() for c in line.split("│")[1:-1]]]}
    assert rows["native"][:2] == ["1/1 100% (21%-100%)", "0"]
    assert rows["cold-rebuild"][0].startswith("0/1 0%") and rows["cold-rebuild"][-1] == "1"
