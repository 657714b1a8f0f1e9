"""A faux pilot with a ``[judge]`` end to end (19-C): every answered slot's probe child
asks the faux judge after its answer, on the ledger key ``<slot>#judge`` under the
run's one cap; the receipts carry the judge's scores and its own spend; the journal
counts the judge's holds; the reports show the judge table with kappa; and a cap too
small for reader + judge stops the run cleanly with the usual cap code."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

from efold_pilot_kit import small_registration

from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.aggregate import build_run_results, read_run
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code
from efold.protocol.records import SlotStatus
from efold.report.judge_table import JUDGE_TITLE
from efold.worker.judge import DEFAULT_RUBRIC, JUDGE_RUN_SUFFIX

JUDGE = '[judge]\nprovider = "faux"\n'


def _holds(run: Path) -> list[tuple[str, str, int, int]]:
    with contextlib.closing(sqlite3.connect(f"file:{run / 'journal.sqlite'}?mode=ro", uri=True)) as conn, conn:
        return conn.execute("SELECT slot, state, hold_units, COALESCE(settled_units, 0) "
                            "FROM holds").fetchall()


def test_a_faux_pilot_with_a_judge_scores_every_answer_under_the_one_cap(
        tmp_path: Path) -> None:
    reg, raw = small_registration(roles='["native", "cold-rebuild"]', extra=JUDGE)
    out = run_pilot(reg, raw, claim_run_dir(tmp_path / "run"))
    assert out.stop_code is None
    completed = [r for r in out.receipts if r.status is SlotStatus.COMPLETED]
    assert completed
    for r in completed:
        assert r.judge is not None and r.judge.code is None
        assert set(r.judge.scores) == set(DEFAULT_RUBRIC)
        assert r.judge.passed is not None
        assert (r.judge.spend.requests, r.judge.spend.admitted) == (1, 1)
        assert r.judge.spend.settled_units > 0
    # The journal holds one settled judge hold per answered slot, on its own key.
    holds = _holds(out.run_dir)
    judge_holds = [h for h in holds if h[0].endswith(JUDGE_RUN_SUFFIX)]
    assert sorted(h[0] for h in judge_holds) == sorted(r.slot + JUDGE_RUN_SUFFIX
                                                       for r in completed)
    assert all(h[1] == "settled" for h in judge_holds)
    judge_units = sum(r.judge.spend.settled_units for r in completed if r.judge)
    assert judge_units == sum(h[3] for h in judge_holds)
    # Under the one cap: the journal's total is the reader's plus the judge's.
    reader_units = sum(r.spend.settled_units for r in out.receipts)
    assert sum(h[3] for h in holds) == reader_units + judge_units
    # The reports: the judge beside the headline, with its own spend line.
    results = build_run_results(read_run(out.run_dir))
    assert results.judge == "faux/faux-extractive-v1"
    assert results.judge_spend is not None
    assert results.judge_spend.settled.units == judge_units
    assert results.summariser_spend is None  # the judge's holds are not a summariser's
    assert results.spend.settled.units == reader_units
    for role in results.results:
        assert role.judge is not None and role.judge.both > 0
        assert role.judge.judge_pass.trials == role.judge.both
    # cold-rebuild loses some values: both raters use both classes, so kappa is defined
    # (the faux judge and the deterministic scorer agree on every slot here: 1); native
    # keeps everything: one class throughout, kappa undefined (null).
    doc = json.loads(out.reports["results.json"])
    kappa = {role["role"]: role["judge"]["kappa"] for role in doc["results"]}
    assert kappa == {"native": None, "cold-rebuild": 1.0}
    cold = next(role for role in doc["results"] if role["role"] == "cold-rebuild")
    assert cold["judge"]["counts"]["both_fail"] > 0
    assert cold["judge"]["exact"] == cold["overall"]["exact"]  # every scored slot judged
    summary = out.reports["summary.md"].decode()
    assert f"## {JUDGE_TITLE}" in summary and "| 1.000 |" in summary
    assert summary.index("\n## ") < summary.index(f"## {JUDGE_TITLE}")


def test_without_a_judge_no_receipt_or_hold_names_one(tmp_path: Path) -> None:
    reg, raw = small_registration()
    out = run_pilot(reg, raw, claim_run_dir(tmp_path / "run"))
    assert out.stop_code is None
    assert all(r.judge is None for r in out.receipts)
    assert not [h for h in _holds(out.run_dir) if h[0].endswith(JUDGE_RUN_SUFFIX)]
    assert JUDGE_TITLE.encode() not in out.reports["summary.md"]


def test_a_cap_too_small_for_reader_and_judge_stops_with_the_cap_code(tmp_path: Path) -> None:
    # One faux Rmax: the first reader request fits; after it settles, its judge's hold
    # no longer does, and neither does the next slot's reader request.
    reg, raw = small_registration(cap="3.92", extra=JUDGE)
    assert reg.cap_units == reg.rmax_units
    out = run_pilot(reg, raw, claim_run_dir(tmp_path / "run"))
    assert out.stop_code is Code.NOT_ADMITTED_CAP
    first, *rest = out.receipts
    assert first.status is SlotStatus.COMPLETED
    assert first.judge is not None and first.judge.code == Code.NOT_ADMITTED_CAP.value
    assert (first.judge.spend.requests, first.judge.spend.admitted) == (1, 0)
    assert first.judge.scores == {} and first.judge.passed is None
    assert rest and all(r.status is SlotStatus.UNADMITTED
                        and r.code == Code.NOT_ADMITTED_CAP.value for r in rest)
    assert not [h for h in _holds(out.run_dir) if h[0].endswith(JUDGE_RUN_SUFFIX)]
