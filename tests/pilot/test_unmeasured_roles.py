"""A run that goes through its whole plan but measures nothing of a role (its fold
failed at every checkpoint) is not a success: ``pilot`` exits 1 and names the role and
the codes its slots ended with; the roles that measured something are not named, and
a run where every role measured something exits 0 as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    assert said[start + 1:] == ["  role broken: none of its 8 slots answered "
                                "(8 worker_body_failed)"]
    line = json.loads(done.stdout.splitlines()[-1])
    assert line["status"] == "complete" and line["completed"] == 8  # native's, all of them
    assert line["unmeasured"] == ["broken"]


def test_a_run_where_every_role_measured_something_exits_0(tmp_path: Path) -> None:
    done = _pilot(tmp_path, ["native"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing measured" not in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["unmeasured"] == []
