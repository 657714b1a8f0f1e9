"""A run that goes through its whole plan but measures nothing of a role (its fold
failed at every checkpoint) is not a success: ``pilot`` exits 1 and names the role and
the codes its slots ended with; the roles that measured something are not named, and
a run where every role measured something exits 0 as before."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from efold_pilot_kit import small_registration

from efold.controller.pilot.pilot import run_pilot
from efold.controller.pilot.pilot_view import Verbosity, end_of_run
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code

CAMPAIGN = """
name = "unmeasured"
suite = "original"
roles = {roles}
cap_usd = "60.00"
probe_limit = 2
"""
BROKEN_ROLE = """
[role.broken]
command = [{python!r}, {script!r}]
timeout_seconds = 20
"""


def _pilot(tmp: Path, roles: list[str]) -> subprocess.CompletedProcess[str]:
    script = tmp / "broken_fold.py"
    script.write_text("import sys\nsys.exit(3)\n")
    campaign = tmp / "campaign.toml"
    role = BROKEN_ROLE.format(python=sys.executable, script=str(script))
    campaign.write_text(CAMPAIGN.format(roles=json.dumps(roles))
                        + (role if "broken" in roles else ""))
    return subprocess.run([sys.executable, "-m", "efold.controller", "pilot", "--faux",
                           "--campaign", str(campaign), "--runs", str(tmp / "runs"),
                           "--no-progress", "--json"],
                          capture_output=True, text=True, timeout=300)


def test_a_role_whose_fold_failed_everywhere_makes_the_run_exit_1(tmp_path: Path) -> None:
    done = _pilot(tmp_path, ["native", "broken"])
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stderr.splitlines()
    start = said.index("nothing measured: every slot of a role ended before its question "
                       "was answered")
    # The fold's own words too: under --quiet this line is the only place they show.
    assert said[start + 1:] == ["  role broken: none of its 8 slots answered "
                                "(8 worker_body_failed); its fold said fold_plugin_failed "
                                "(broken: exit status 3)"]
    line = json.loads(done.stdout.splitlines()[-1])
    assert line["status"] == "complete" and line["completed"] == 8  # native's, all of them
    assert line["unmeasured"] == ["broken"]


def test_a_run_where_every_role_measured_something_exits_0(tmp_path: Path) -> None:
    done = _pilot(tmp_path, ["native"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing measured" not in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["unmeasured"] == []


def test_a_shard_is_no_failure_for_a_role_it_alone_measured_nothing_of(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cluster's shard holds part of the plan: whether a role measured nothing is the
    driver's to say over the whole cluster run, so a shard's controller ends 0."""
    script = tmp_path / "broken_fold.py"
    script.write_text("import sys\nsys.exit(3)\n")
    reg, raw = small_registration(roles='["native", "broken"]', extra=BROKEN_ROLE.format(
        python=sys.executable, script=str(script)))
    outcome = run_pilot(reg, raw, claim_run_dir(tmp_path / "run"))
    assert end_of_run(outcome, Verbosity.QUIET, False, judge_roles=False) == 0
    assert "nothing measured" not in capsys.readouterr().err
    assert end_of_run(outcome, Verbosity.QUIET, False) == 1
    assert "  role broken: none of its" in capsys.readouterr().err
    # A run that ended early (stopped, interrupted) measured little by its end, not by
    # its folds: its status says so, and the --json line names no role.
    stopped = dataclasses.replace(outcome, stop_code=Code.NOT_ADMITTED_CAP)
    assert end_of_run(stopped, Verbosity.QUIET, True) == 3
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["unmeasured"] == []
