"""``efold.api``: the worked example of docs/python-api.md runs as written, and the API
reads what the command line wrote and refuses what it cannot read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from efold import api
from efold.errors import Code, EfoldError
from efold.report import decode_results

ROOT = Path(__file__).resolve().parents[1]


def _example() -> str:
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/python-api.md has one worked example"
    return blocks[0]


def test_the_worked_example_runs_as_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-c", _example()], cwd=work, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert done.returncode == 0, done.stderr
    assert re.search(r"^native: 8/8 exact, median checkpoint [\d,]+ tokens$", done.stdout,
                     re.M)
    assert "cold-rebuild missed:" in done.stdout
    assert "refused: campaign_not_found" in done.stdout
    runs = [p for p in (work / "efold-runs").iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1  # the refusal made no run


def test_open_run_reads_a_results_json_and_refuses_what_is_neither(tmp_path: Path) -> None:
    run = api.launch("--faux", "--roles", "native", "--limit", "2",
                     "--run-dir", str(tmp_path / "run"))
    assert run.status == "complete" and len(run.slots) == 2
    document = tmp_path / "run" / "results.json"
    alone = api.open_run(document)
    assert alone.results == decode_results(document.read_bytes())
    assert alone.role("native").overall.exact.trials == 2
    with pytest.raises(KeyError, match="roles: native"):
        alone.role("pack")
    assert alone.slot_dicts()[0]["role"] == "native"
    with pytest.raises(EfoldError) as caught:
        api.open_run(tmp_path / "nothing-here")
    assert caught.value.code is Code.RUN_NOT_FOUND
    (tmp_path / "bad.json").write_text('{"schema": "results-v9"}')
    with pytest.raises(EfoldError):
        api.open_run(tmp_path / "bad.json")


def test_a_timeout_stops_the_child_and_hands_back_its_interrupted_run(tmp_path: Path) -> None:
    with pytest.raises(api.LaunchTimedOut) as caught:
        api.launch("--faux", "--campaign", "hard", "--run-dir", str(tmp_path / "run"),
                   timeout=10)
    run = caught.value.run
    assert run is not None and run.path == tmp_path / "run"
    assert run.status == "interrupted"
    assert (tmp_path / "run" / "report.html").is_file()  # its reports were written
    assert api.latest_run(tmp_path).path == tmp_path / "run"
    with pytest.raises(EfoldError) as empty:
        api.latest_run(tmp_path / "run" / "receipts")
    assert empty.value.code is Code.RUN_NOT_FOUND
