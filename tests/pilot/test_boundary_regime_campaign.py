"""A case's fold regime in a campaign: the prep child folds a root-mode case as a rebase
(``folds.regime``), as the offline run does, and every boundary slot resumes in a new
process from the published snapshot (the restart a ``fold.restart`` case asks for)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from efold.boundary.suite import bundled_cases_root, select_cases
from efold.boundary.validate import run_offline
from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.campaigns.registration import compute_registration, encode_registration
from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.folds.snapshot import read_checkpoint
from efold.protocol.records import Receipt
from tests.pilot.test_boundary_campaign import CAMPAIGN


def test_a_root_case_is_rebased_in_the_prep_child(tmp_path: Path) -> None:
    text = CAMPAIGN.format(root="", cases=json.dumps(["B09", "B11"]), case_root="").replace(
        'roles = ["native", "cold-rebuild"]', 'roles = ["native", "cold-rebuild"]').replace(
        "probe_limit = 1", "probe_limit = 0").replace('traces = ["orig-cafe-fitout"]\n', "")
    reg = compute_registration(parse_campaign(text), text.encode())
    run = claim_run_dir(tmp_path / "runs" / "regime")
    assert run_pilot(reg, encode_registration(reg), run).stop_code is None
    cases = {c.id: c for c in select_cases(bundled_cases_root(), ["B09", "B11"])}
    b09 = cases["B09-root-rebase-old-value"].trace.header.trace_id
    receipts = [msgspec.json.decode(p.read_bytes(), type=Receipt)
                for p in (run / "receipts").glob("*.json")]
    assert len(receipts) == 4
    for receipt in receipts:
        record = receipt.boundary
        assert record is not None and receipt.status == "completed"
        case = cases[record.case]
        offline = run_offline(case, case.prefix, receipt.arm)
        assert (record.passed, record.folds) == (offline.passed, offline.folds)
    snapshots = sorted((run / "checkpoints").glob("*/snapshot"))
    assert len(snapshots) == 4
    for snapshot in snapshots:
        checkpoint = read_checkpoint(snapshot).checkpoint
        rebase = checkpoint.receipt.rebase
        assert (rebase is not msgspec.UNSET) is (checkpoint.trace_id == b09), snapshot
        if checkpoint.arm == "cold-rebuild" and rebase is not msgspec.UNSET:
            assert rebase.leaf_folds == 1 and rebase.prior_messages > 0
