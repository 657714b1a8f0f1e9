"""The contract corpus (``boundary/contract/``, docs/boundary.md "The contract corpus").

Twenty contract tasks, each a boundary case whose workspace holds a protected contract
(``contract.json``) and its verifier (``verify.py``). Checked here for real: the lock
holds and every case passes what ``boundary validate --ablation`` checks; for every task
the verifier fails the stub, passes the reference solution, fails every other variant
the faux agent can write, and really reads the contract (one expected value changed
and the reference fails); the faux agent's fallback fails and its informed plan passes
through ``boundary run``; the builder writes exactly the committed bytes; the reserved
``contract`` selector names the corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from efold.boundary.case import Case, case_digest, load_case, load_cases
from efold.boundary.errors import BoundaryError
from efold.boundary.lock import LOCK_NAME, lock_problems
from efold.boundary.oracles import ForbiddenPathUnchanged, TestsPass
from efold.boundary.runner_check import runner_problems
from efold.boundary.suite import (
    CONTRACT_CORPUS,
    bundled_cases_root,
    contract_cases_root,
    select_cases,
)
from efold.boundary.validate import ablation, recall_problem, run_offline
from efold.errors import Code
from efold.folds.checkpoint import visible_text
from efold.folds.fold import TracePrefix
from efold.folds.registry import BUILTIN_ARMS

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "boundary" / "contract"
BUILDER = REPO / "scripts" / "build_contract_corpus.py"
VERIFY = ["python", "verify.py"]
IDS = [f"X{n}" for n in range(21, 41)]
# Where each task's decision sits (the builder's ``Task.carrier``): what a compaction
# summary and the cold boundary keep of it follows from that.
DOCUMENT = {"X25", "X27", "X35", "X38"}  # the middle of a fetched design record
PROPOSAL = {"X23", "X34"}  # the tail of a long assistant proposal
RECENT = {"X29", "X37"}  # an owner message a few turns before the boundary


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    return {c.id: c for c in load_cases(CORPUS)}


def _short(case: Case) -> str:
    return case.id.split("-", 1)[0]


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text.casefold()).strip()


def _texts(case: Case) -> list[tuple[str, str]]:
    """(event id, every text the faux agent could see of it) for the pre-fold events."""
    out = []
    for event in case.prefix:
        calls = " ".join(f"{c.function.name} {c.function.arguments}"
                         for c in event.tool_calls or ())
        out.append((event.id, _fold(f"{event.content} {calls}")))
    return out


def _verify(workspace: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "verify.py"], cwd=workspace, capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_lock_holds_and_every_case_is_valid(cases: dict[str, Case]) -> None:
    """What ``boundary validate --ablation`` checks, case by case, through the library
    functions the command calls."""
    assert [_short(c) for c in cases.values()] == IDS
    assert lock_problems(CORPUS, list(cases.values())) == []
    locked = json.loads((CORPUS / LOCK_NAME).read_text())
    assert sorted(locked["cases"]) == sorted(cases)
    for case in cases.values():
        assert case.version == 1 and case.sidecar.tier == "exploratory"
        assert runner_problems(case) == [], case.id
        assert recall_problem(case) is None, case.id
        proof = ablation(case)
        assert proof.problem is None, (case.id, proof.problem)
        # the informed plan wrote the reference and ran the verifier; without the history
        # the fallback ran (its verdicts fail), with the decision deleted the superseded
        # choice or the fallback did
        assert [r.verdict for r in proof.full.results] == ["pass"] * 3, case.id
        assert proof.no_history.results[0].verdict == "fail", case.id


def test_the_corpus_is_small() -> None:
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert total < 1_500_000, total


@pytest.mark.parametrize("short", IDS)
def test_structure(cases: dict[str, Case], short: str) -> None:
    case = next(c for c in cases.values() if _short(c) == short)
    sidecar = case.sidecar
    contract = json.loads((case.workspace / "contract.json").read_text())
    module = f"{contract['module']}.py"
    # the verifier and the protected files judge: never the reference solution's bytes
    assert sidecar.oracle.success == [
        TestsPass(command=VERIFY),
        ForbiddenPathUnchanged(path="contract.json"), ForbiddenPathUnchanged(path="verify.py")]
    assert sidecar.tools.test is not None and sidecar.tools.test.commands == [VERIFY]
    assert sorted(p.name for p in case.workspace.iterdir()) == sorted(
        ["README.md", "contract.json", "verify.py", module])
    assert case.expected is not None
    assert [p.name for p in case.expected.iterdir()] == [module]
    assert contract["vectors"]
    # The verifier is one file, the same in every task.
    assert (case.workspace / "verify.py").read_bytes() == (
        CORPUS / "X21-contract-retry-backoff" / "workspace" / "verify.py").read_bytes()
    # The plans: the decision (only the critical event carries its wording), the
    # superseded choice (said earlier in the session), the fallback.
    assert sidecar.faux is not None
    decided, superseded, fallback = sidecar.faux.plans
    assert decided.when and superseded.when and fallback.when is None
    texts = _texts(case)
    assert {i for i, t in texts if _fold(decided.when) in t} == set(sidecar.source.critical)
    assert [i for i, t in texts if _fold(superseded.when) in t]
    # Neither wording is in the workspace or the stimulus: only the history holds them.
    outside = _fold(" ".join([*(p.read_text() for p in case.workspace.iterdir()),
                              *sidecar.continuation.input]))
    assert _fold(decided.when) not in outside and _fold(superseded.when) not in outside
    assert decided.actions[0].tool == "workspace_write"
    assert decided.actions[0].arguments == {
        "path": module, "content": (case.expected / module).read_text()}
    # The session folds: compaction compacts it, and what each arm keeps of the
    # decision follows from where it sits.
    assert (case.path / sidecar.source.session).stat().st_size < 80_000
    prefix = TracePrefix(trace_id=case.trace.header.trace_id, events=case.prefix)
    compacted = BUILTIN_ARMS["compaction"]().build(prefix)
    assert len(compacted.receipt.compactions) == 1
    cold = BUILTIN_ARMS["cold-rebuild"]().build(prefix)
    assert (_fold(decided.when) in _fold(visible_text(compacted.messages))) == (
        short not in DOCUMENT | PROPOSAL)
    assert (_fold(decided.when) in _fold(visible_text(cold.messages))) == (short in RECENT)
    assert _fold(superseded.when) not in _fold(visible_text(cold.messages))


@pytest.mark.parametrize("short", IDS)
def test_the_verifier_decides(cases: dict[str, Case], short: str, tmp_path: Path) -> None:
    """The stub fails, the reference passes, every other variant the faux agent writes
    fails, and one changed expected value fails the reference: the verdict comes from
    contract.json, not from the verifier or the agent's script."""
    case = next(c for c in cases.values() if _short(c) == short)
    assert case.expected is not None and case.sidecar.faux is not None
    workspace = tmp_path / "workspace"
    shutil.copytree(case.workspace, workspace)
    contract = json.loads((workspace / "contract.json").read_text())
    vectors = len(contract["vectors"])
    stub = _verify(workspace)
    assert stub.returncode != 0 and f"0 of {vectors} vectors match" in stub.stdout
    # what the session's verifier runs show is what this verifier prints on the stub
    shown = next(e.content for e in case.prefix if e.name == "workspace_test")
    assert shown == stub.stdout
    module = next(p for p in case.expected.iterdir())
    for plan in case.sidecar.faux.plans[1:]:
        for action in plan.actions:
            if action.tool == "workspace_write":
                (workspace / module.name).write_text(action.arguments["content"])
                wrong = _verify(workspace)
                assert wrong.returncode != 0, (plan.when, wrong.stdout)
    shutil.copytree(case.expected, workspace, dirs_exist_ok=True)
    passed = _verify(workspace)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"{vectors} of {vectors} vectors match" in passed.stdout
    changed = json.loads((workspace / "contract.json").read_text())
    last = changed["vectors"][-1]
    last["expect_sha256"] = hashlib.sha256(b'"a different value"').hexdigest()
    (workspace / "contract.json").write_text(json.dumps(changed, indent=1))
    mutated = _verify(workspace)
    assert mutated.returncode != 0
    assert f"{last['id']} MISMATCH" in mutated.stdout
    assert f"{vectors - 1} of {vectors} vectors match" in mutated.stdout


def test_the_implementation_cannot_decide_the_exit_status(cases: dict[str, Case],
                                                          tmp_path: Path) -> None:
    """The module runs in the verifier's child: exiting 0 from it (at import, or from
    inside a call) is no pass."""
    case = cases["X21-contract-retry-backoff"]
    workspace = tmp_path / "workspace"
    shutil.copytree(case.workspace, workspace)
    for body in ("import os\nos._exit(0)\n",
                 "import os\n\ndef retry_delays(attempts):\n    os._exit(0)\n"):
        (workspace / "retry.py").write_text(body)
        cheated = _verify(workspace)
        assert cheated.returncode == 1, cheated.stdout
        assert "the implementation gave no outcomes" in cheated.stdout


def test_any_implementation_that_meets_the_contract_passes(tmp_path: Path) -> None:
    """Not the reference's bytes: another correct implementation of X21, written by the
    informed plan, passes the case (its oracles are the verifier and the protected
    files)."""
    case_dir = tmp_path / "X21-contract-retry-backoff"
    shutil.copytree(CORPUS / case_dir.name, case_dir)
    own = ("def retry_delays(attempts):\n    if attempts < 0:\n        raise ValueError(attempts)\n"
           "    return [min(250 * 3 ** i, 6000) for i in range(attempts)]\n")
    sidecar = yaml.safe_load((case_dir / "ef-boundary.yml").read_text())
    write = sidecar["faux"]["plans"][0]["actions"][0]
    assert write["tool"] == "workspace_write" and write["arguments"]["content"] != own
    write["arguments"]["content"] = own
    (case_dir / "ef-boundary.yml").write_text(yaml.safe_dump(sidecar, sort_keys=False))
    case = load_case(case_dir)
    outcome = run_offline(case, case.prefix, "native")
    assert outcome.passed is True, outcome.results


def test_the_faux_plans_through_boundary_run(tmp_path: Path) -> None:
    """Two tasks through the real offline runner: the full history passes, the cold
    boundary (the fallback: the verifier on the stub) fails both, and compaction keeps
    an owner's decision (X21) but loses one in the middle of a fetched record (X25,
    where it follows the superseded choice)."""
    root = tmp_path / "cases"
    root.mkdir()
    for name in ("X21-contract-retry-backoff", "X25-contract-idempotency-replay"):
        shutil.copytree(CORPUS / name, root / name)
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "boundary", "run", "--faux", str(root),
         "--arms", "native,cold-rebuild,compaction", "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    runs = {(r["case"][:3], r["arm"]): r for r in json.loads(done.stdout)["runs"]}
    verdicts = {key: run["passed"] for key, run in runs.items()}
    assert verdicts == {("X21", "native"): True, ("X21", "cold-rebuild"): False,
                        ("X21", "compaction"): True, ("X25", "native"): True,
                        ("X25", "cold-rebuild"): False, ("X25", "compaction"): False}
    assert runs[("X21", "native")]["actions"] == ["edit", "test"]
    assert runs[("X21", "cold-rebuild")]["actions"] == ["test"]  # the fallback: verify only
    assert runs[("X25", "compaction")]["actions"] == ["edit", "test"]  # the superseded write
    assert dict(runs[("X25", "compaction")]["oracles"])["tests-pass"] == "fail"


def test_the_builder_writes_exactly_the_committed_corpus(tmp_path: Path,
                                                         cases: dict[str, Case]) -> None:
    out = tmp_path / "contract"
    done = subprocess.run([sys.executable, str(BUILDER), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*cases, LOCK_NAME])
    for case_id, case in cases.items():
        assert case_digest(out / case_id) == case.sha256, case_id
    assert (out / LOCK_NAME).read_bytes() == (CORPUS / LOCK_NAME).read_bytes()


def test_the_reserved_name_selects_the_contract_corpus() -> None:
    assert contract_cases_root() == CORPUS
    chosen = select_cases(bundled_cases_root(), [CONTRACT_CORPUS])
    assert [_short(c) for c in chosen] == IDS
    assert all(c.path.parent == CORPUS for c in chosen)
    for root, names in ((bundled_cases_root(), [CONTRACT_CORPUS, "B01"]),
                        (CORPUS, [CONTRACT_CORPUS])):
        with pytest.raises(BoundaryError) as info:
            select_cases(root, names)
        assert info.value.code is Code.BOUNDARY_CASE_INVALID
        assert "give it alone, without a root" in info.value.detail
