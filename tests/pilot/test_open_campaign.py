"""An open campaign end to end, offline, as a new user runs it (every command a separate
``efold-controller`` process): import their own conversation, write its probes, check
them, then run a fold of each kind (an installed entry point, an external command, a
real compaction proxy over HTTP) next to the reference arms with ``pilot --faux``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from open_campaign_kit import (
    TRACE_ID,
    build_suite,
    campaign_toml,
    efold,
    field,
    guide_example,
    guide_scripts,
)
from plugin_kit import installed_plugin


def test_an_open_campaign_runs_every_kind_of_fold_offline(tmp_path: Path) -> None:
    build_suite(tmp_path)
    (tmp_path / "campaign.toml").write_text(
        campaign_toml(suite="suite", **guide_scripts(tmp_path)))
    with installed_plugin("facts-store", guide_example("entry-point-fold"),
                          attr="FactsStoreFold"):
        registered = efold("register", "campaign.toml", "--output", "reg", cwd=tmp_path)
        assert registered.returncode == 0, registered.stderr
        reg, sha = field(registered.stdout, "registration"), field(registered.stdout, "sha256")
        pilot = efold("pilot", "--faux", "--registration", reg, "--sha256", sha,
                      "--run-dir", str(tmp_path / "run"), "--no-progress", cwd=tmp_path)
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    execution = results["execution"]
    # 6 roles x 4 probes (two checkpoints per role: the whole trace and its cut at e0012)
    assert execution["planned"] == 24 and execution["completed"] == 24, execution
    receipts = [json.loads(p.read_text()) for p in (tmp_path / "run" / "receipts").glob("*.json")]
    by_role: dict[str, list[dict]] = {}
    for r in receipts:
        by_role.setdefault(r["role"], []).append(r)
    assert sorted(by_role) == sorted(["native", "compaction", "pack", "facts-store",
                                      "facts-tail", "squeeze"])
    # The full conversation answers everything; the proxy compacted the whole trace (its
    # checkpoint is not excluded) and each of its own calls got a summary.
    assert all(r.get("outcome") == "correct" for r in by_role["native"]), by_role["native"]
    squeeze = [r for r in by_role["squeeze"] if r["trace_id"] == TRACE_ID]
    assert squeeze and all(r.get("excluded") is None for r in squeeze), squeeze
    assert list((tmp_path / "run").glob(f"**/*squeeze.{TRACE_ID}/fold-data/proxy.log"))


def test_a_failing_fold_says_why_in_the_pilot_output(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "campaign.toml").write_text(f"""\
name = "broken-fold"
suite = "original"
traces = ["orig-stage-hire"]
probe_limit = 1
roles = ["native", "broken"]
cap_usd = "60.00"

[role.broken]
command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]
""")
    registered = efold("register", "campaign.toml", "--output", "reg", cwd=tmp_path)
    assert registered.returncode == 0, registered.stderr
    reg = ["--registration", field(registered.stdout, "registration"),
           "--sha256", field(registered.stdout, "sha256")]
    plan = efold("plan", *reg, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "checkpoints 2 (1 unprepared)" in plan.stdout
    assert "1 checkpoints could not be prepared" in plan.stdout
    assert ("unprepared r1.broken.orig-stage-hire: worker_body_failed; its fold said "
            "fold_plugin_failed (broken: exit status 3)") in plan.stdout
    pilot = efold("pilot", "--faux", *reg, "--run-dir", str(tmp_path / "run"), "--no-progress",
                  cwd=tmp_path)
    # The run completes its other role; the failed checkpoint's slots are refused with
    # the controller's code, and the output says what the fold itself reported. The
    # broken role measured nothing: the run exits 1 and says so.
    assert pilot.returncode == 1, pilot.stdout + pilot.stderr
    assert ("checkpoint r1.broken.orig-stage-hire not prepared: its fold said "
            "fold_plugin_failed (broken: exit status 3)") in pilot.stdout
    assert "  role broken: none of its 1 slot answered (1 worker_body_failed)" \
        in pilot.stderr


def _alive_with_env(needle: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_proxy_helper_that_escapes_its_group_is_contained(tmp_path: Path) -> None:
    # The proxy leaves a helper in a session of its own that ignores SIGTERM. efold's
    # stop of the proxy's group cannot reach it; the run's containment finds it (the
    # launch marker it inherited), kills it, and stops the run: nothing is stranded.
    proxy = Path(__file__).resolve().parents[1] / "kit" / "compacting_proxy.py"
    (tmp_path / "campaign.toml").write_text(f"""\
name = "escaping-proxy"
suite = "original"
traces = ["orig-stage-hire"]
probe_limit = 1
roles = ["squeeze", "native"]
cap_usd = "60.00"

[role.squeeze]
command = [{json.dumps(sys.executable)}, {json.dumps(str(proxy))}]
proxy = {{ upstream_env = "UPSTREAM_BASE_URL", port_env = "PROXY_PORT" }}
env = {{ PROXY_MODE = "escape" }}
""")
    registered = efold("register", "campaign.toml", "--output", "reg", cwd=tmp_path)
    assert registered.returncode == 0, registered.stderr
    run = tmp_path / "run"
    pilot = efold("pilot", "--faux", "--registration", field(registered.stdout, "registration"),
                  "--sha256", field(registered.stdout, "sha256"), "--run-dir", str(run),
                  "--no-progress", cwd=tmp_path)
    assert pilot.returncode == 3, pilot.stdout + pilot.stderr
    assert "stopped: lookup_worker_lost" in pilot.stdout
    data_dir = run / "checkpoints" / "r1.squeeze.orig-stage-hire" / "fold-data"
    assert _alive_with_env(f"EFOLD_FOLD_DATA_DIR={data_dir}") == []
    recover = efold("recover", str(run), cwd=tmp_path)
    assert recover.returncode == 0 and "reconciled" in recover.stdout, recover.stdout
