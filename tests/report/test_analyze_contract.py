"""``analyze --corpus contract``: the contract corpus as the analyzer's comparison set.

Real runs, real subprocesses: the bundled ``contract`` campaign runs once offline
(``pilot --faux``, 60 slots), then ``analyze --corpus contract`` pairs two of its roles
over exactly the corpus's 20 tasks. The verdict and counts are checked against the
run's own ``results.json`` (the oracles' verdicts, read apart from the analyzer); a run
of two corpus cases names the other 18 as unpaired; a run without the corpus, an absent
role, a case at another version and a corpus that disagrees with its lock refuse.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from efold.boundary.lock import LOCK_NAME
from efold.boundary.suite import contract_cases_root
from efold.controller.rundirs.aggregate import read_run
from efold.errors import Code
from efold.report.comparison_corpus import corpus_comparison, load_corpus
from efold.report.errors import ReportError

# One worker runs this module: its runs are made once (a module fixture is per worker).
pytestmark = pytest.mark.xdist_group("contract-pilot")

CORPUS = contract_cases_root()
TASKS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


def _efold(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "efold.controller", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _pilot(cwd: Path, campaign: str) -> Path:
    cwd.mkdir(parents=True, exist_ok=True)
    done = _efold("pilot", "--faux", "--campaign", campaign, "--quiet", cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (cwd / "efold-runs").glob(f"{Path(campaign).stem}-*")
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled contract campaign, a campaign of two corpus cases (its root the
    corpus) and the bundled resume campaign (no corpus case), each run once."""
    base = tmp_path_factory.mktemp("contract-runs")
    two = base / "two.toml"
    two.write_text(
        (Path(__file__).resolve().parents[2] / "controller" / "campaigns" / "contract.toml")
        .read_text().replace('name = "contract"', 'name = "two"')
        .replace('cases = ["contract"]',
                 f'cases = ["X21", "X25"]\nroot = "{CORPUS}"'))
    return {"contract": _pilot(base / "full", "contract"),
            "two": _pilot(base / "two", str(two)),
            "resume": _pilot(base / "resume", "resume")}


def test_analyze_pairs_every_corpus_task(runs: dict[str, Path], tmp_path: Path) -> None:
    run = runs["contract"]
    written = tmp_path / "set.json"
    done = _efold("analyze", "--corpus", "contract", "--run", str(run),
                  "--arms", "native,compaction", "--write", str(written), cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # comparison_ready: the gate of 20 is met
    lines = done.stdout.splitlines()
    lock_sha = hashlib.sha256((CORPUS / LOCK_NAME).read_bytes()).hexdigest()
    assert lines[0] == (f"from {run}, the contract corpus (lock sha256 {lock_sha}): 20 pairs "
                        "of native and compaction over 20 of its 20 tasks")
    assert lines[1] == ("verdict: comparison_ready (20 paired tasks, 20 pairs; the evidence "
                        "gate is 20 paired tasks)")
    data = json.loads(written.read_bytes())
    assert sorted({r["task"] for r in data["runs"]}) == TASKS
    assert data["provenance"]["source"] == "efold-corpus"
    assert data["provenance"]["corpus"] == "contract"
    assert data["provenance"]["corpus_sha256"] == lock_sha
    plan = json.loads((run / "plan.json").read_bytes())
    assert data["provenance"]["registration_sha256"] == plan["registration_sha256"]
    # The verdicts, read from the run's results apart from the analyzer.
    results = json.loads((run / "results.json").read_bytes())["boundary"]["runs"]
    passed = {(r["case"], r["arm"]): r["passed"] for r in results}
    native = {t for t in TASKS if passed[(t, "native")]}
    compaction = {t for t in TASKS if passed[(t, "compaction")]}
    cold = {t for t in TASKS if passed[(t, "cold-rebuild")]}
    # The summary loses a decision in a fetched record or a proposal's tail; the cold
    # boundary keeps only the two recent ones (docs/boundary.md, "The contract corpus").
    assert len(native) == 20
    assert sorted(t[:3] for t in set(TASKS) - compaction) == [
        "X23", "X25", "X27", "X34", "X35", "X38"]
    assert sorted(t[:3] for t in cold) == ["X29", "X37"]
    as_json = _efold("analyze", "--corpus", "contract", "--run", str(run),
                     "--arms", "native,compaction", "--json", cwd=tmp_path)
    assert as_json.returncode == 0
    analysis = json.loads(as_json.stdout)
    assert analysis["verdict"] == "comparison_ready" and analysis["paired_tasks"] == 20
    accepted = {a["arm"]: a["accepted"]["successes"] for a in analysis["arms"]}
    assert accepted == {"native": len(native), "compaction": len(compaction)}
    acceptance = analysis["acceptance"]
    assert (acceptance["b"], acceptance["c"], acceptance["both_correct"]) == (
        len(native - compaction), len(compaction - native), len(native & compaction))
    assert analysis["provenance"]["corpus_sha256"] == lock_sha
    assert as_json.stderr.startswith(f"from {run}, the contract corpus")
    # The run holds the corpus and nothing else, so pairing its every slot (--run alone)
    # gives the same analysis; only the provenance differs.
    plain = _efold("analyze", "--run", str(run), "--arms", "native,compaction", "--json",
                   cwd=tmp_path)
    other = json.loads(plain.stdout)
    assert other["provenance"]["source"] == "efold-run"
    assert {**other, "provenance": None} == {**analysis, "provenance": None}


def test_a_task_without_a_scored_pair_is_named(runs: dict[str, Path], tmp_path: Path) -> None:
    done = _efold("analyze", "--corpus", "contract", "--run", str(runs["two"]),
                  "--arms", "native,cold-rebuild", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # 2 paired tasks: the gate is not met
    first, verdict = done.stdout.splitlines()[:2]
    missing = [t for t in TASKS if not t.startswith(("X21-", "X25-"))]
    assert first.endswith(f"over 2 of its 20 tasks; no scored pair for 18: {', '.join(missing)}")
    assert verdict.startswith("verdict: insufficient_evidence (2 paired tasks, 2 pairs;")


def test_refusals(runs: dict[str, Path], tmp_path: Path) -> None:
    resume = _efold("analyze", "--corpus", "contract", "--run", str(runs["resume"]),
                    "--arms", "native,compaction", cwd=tmp_path)
    assert resume.returncode == 2 and resume.stdout == ""
    assert resume.stderr.startswith("refused: comparison_invalid (run ")
    assert "did not run the contract corpus: none of its 20 cases" in resume.stderr
    absent = _efold("analyze", "--corpus", "contract", "--run", str(runs["contract"]),
                    "--arms", "native,store", "--json", cwd=tmp_path)
    assert absent.returncode == 2
    assert json.loads(absent.stdout)["refused"] == "comparison_invalid"
    assert "no role 'store'" in absent.stderr
    alone = _efold("analyze", "--corpus", "contract", cwd=tmp_path)
    assert alone.returncode == 2 and "--corpus goes with --run" in alone.stderr
    unknown = _efold("analyze", "--corpus", "nope", "--run", str(runs["contract"]),
                     "--arms", "native,compaction", cwd=tmp_path)
    assert unknown.returncode == 2 and "'nope' is not 'contract'" in unknown.stderr


def test_another_revision_or_a_changed_corpus_refuses(runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    corpus = load_corpus("contract")
    assert corpus.tasks == TASKS and set(corpus.versions.values()) == {1}
    view = read_run(runs["contract"])
    receipts = list(view.receipts)
    at = next(i for i, r in enumerate(receipts) if r.boundary is not None)
    record = receipts[at].boundary
    assert record is not None
    receipts[at] = msgspec.structs.replace(
        receipts[at], boundary=msgspec.structs.replace(record, case_version=2))
    with pytest.raises(ReportError) as info:
        corpus_comparison(corpus, receipts, "native", "compaction", run="r",
                          registration_sha256=view.plan.registration_sha256,
                          efold_version="0", models=[], faux=True, representative=False)
    assert info.value.code is Code.COMPARISON_INVALID
    assert f"ran {record.case} at version 2, the contract corpus locks version 1" in (
        info.value.detail)
    # the same id and version, but another case than the locked one: a corpus edited and
    # locked again elsewhere is not this corpus
    receipts[at] = msgspec.structs.replace(
        receipts[at], boundary=msgspec.structs.replace(record, case_sha256="0" * 64))
    with pytest.raises(ReportError) as info:
        corpus_comparison(corpus, receipts, "native", "compaction", run="r",
                          registration_sha256=view.plan.registration_sha256,
                          efold_version="0", models=[], faux=True, representative=False)
    assert info.value.code is Code.COMPARISON_INVALID
    assert "judged a case with digest 000000000000" in info.value.detail
    assert record.case_sha256 == corpus.digests[record.case]  # what the run recorded
    copy = tmp_path / "contract"
    shutil.copytree(CORPUS, copy)
    contract = copy / TASKS[0] / "workspace" / "contract.json"
    contract.write_text(contract.read_text().replace('"v01"', '"v00"'))
    with pytest.raises(ReportError) as info:
        load_corpus("contract", root=copy)
    assert info.value.code is Code.COMPARISON_INVALID
    assert f"disagrees with its lock: {TASKS[0]}: boundary_case_changed" in info.value.detail
