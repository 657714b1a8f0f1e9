"""The process-group fallback, where no writable cgroup2 exists: said at run open, in the
status and report, and by ``recover``; refused where cgroups are required.

An ordinary user outside a delegated subtree is the real case (``nobody``, umask 002:
creating a child of its cgroup is EACCES), not a simulation; these run where this
process is root and can drop to that user.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from as_user import NOBODY, drop, ordinary_python, workspace

from efold.controller.campaigns.campaign import parse_campaign
from efold.controller.errors import ControllerError
from efold.controller.rundirs.run_setup import containment_refusal
from efold.errors import Code, EfoldError

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to run a command as an ordinary user")

SMALL = """
name = "fallback"
suite = "original"
roles = ["native"]
probe_limit = 1
traces = ["{trace}"]
cap_usd = "60.00"
{containment}
"""


def _first_trace() -> str:
    from efold.corpus import load_suite
    return load_suite("original")[0].trace.header.trace_id


def _as_nobody(python: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFOLD_")}
    env["HOME"] = str(cwd)
    return subprocess.run([*drop("nobody"), python, "-m", "efold.controller", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
                          umask=0o002, stdin=subprocess.DEVNULL, check=False)


def _campaign(ws: Path, containment: str) -> Path:
    ws.chmod(0o755)  # nogroup is shared: a group-writable parent of a run is refused
    path = ws / "campaign.toml"
    path.write_text(SMALL.format(trace=_first_trace(), containment=containment))
    os.chown(path, NOBODY, NOBODY)
    return path


@needs_root
def test_an_ordinary_user_runs_in_the_fallback_and_every_record_says_so() -> None:
    with ordinary_python() as python, workspace("nobody") as ws:
        if python is None:
            pytest.skip("no interpreter the ordinary user can run")
        campaign = _campaign(ws, "")
        done = _as_nobody(python, ["pilot", "--faux", "--campaign", str(campaign),
                                   "--runs", str(ws / "runs"), "--no-progress"], ws)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "warning: containment: process-group, no cgroup (cannot create a child of own " \
               "cgroup" in done.stderr
        run = Path(done.stdout.splitlines()[0].removeprefix("run: "))
        results = json.loads((run / "results.json").read_text())
        assert results["status"]["containment"] == {"mode": "process-group",
                                                    "operator_allowed": False}
        assert "Containment: process groups, no writable cgroup here" in \
            (run / "summary.md").read_text()
        recovered = _as_nobody(python, ["recover", str(run)], ws)
        assert recovered.returncode == 0, recovered.stdout
        first = recovered.stdout.splitlines()[0]
        assert first.startswith("reconciled") and "cannot be seen" in first
        assert "containment: process-group" in recovered.stdout
        # preflight (here through `fold check`, which runs it) warns the same way.
        checked = _as_nobody(python, ["fold", "check", "native", "--campaign", str(campaign)],
                             ws)
        assert "warning: containment: process-group, no cgroup (" in checked.stderr, \
            checked.stdout + checked.stderr


@needs_root
def test_a_campaign_that_requires_cgroups_refuses_in_the_fallback() -> None:
    with ordinary_python() as python, workspace("nobody") as ws:
        if python is None:
            pytest.skip("no interpreter the ordinary user can run")
        campaign = _campaign(ws, 'containment = "cgroup"')
        done = _as_nobody(python, ["pilot", "--faux", "--campaign", str(campaign),
                                   "--runs", str(ws / "runs")], ws)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "refused: containment_unavailable (the campaign requires cgroup " \
               "containment: cannot create a child of own cgroup" in done.stderr
        assert not (ws / "runs").exists() or not any((ws / "runs").iterdir())


def test_who_may_run_without_a_cgroup() -> None:
    why = "no writable cgroup2"

    def refused(wanted: str | None, mode: str, real: bool, ok: bool) -> Code | None:
        refusal = containment_refusal(wanted, mode, why, real=real, process_group_ok=ok)
        assert refusal is None or isinstance(refusal, ControllerError)
        return None if refusal is None else refusal.code

    unavailable = Code.CONTAINMENT_UNAVAILABLE
    assert refused(None, "cgroup", True, False) is None
    assert refused(None, "process-group", False, False) is None  # offline falls back
    assert refused(None, "process-group", True, False) is unavailable  # real: not silently
    assert refused(None, "process-group", True, True) is None  # the operator's flag
    assert refused("cgroup", "process-group", False, False) is unavailable
    assert refused("cgroup", "process-group", True, True) is unavailable  # the campaign wins
    assert refused("process-group", "process-group", True, False) is unavailable


@pytest.mark.parametrize("value", ['"cgroups"', '""', "true", '"auto"'])
def test_a_containment_the_campaign_cannot_mean_is_refused(value: str) -> None:
    with pytest.raises(EfoldError) as caught:
        parse_campaign(SMALL.format(trace="t", containment=f"containment = {value}"))
    assert caught.value.code is Code.CAMPAIGN_INVALID
