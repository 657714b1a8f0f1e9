"""The bundled default campaign end to end, exactly as the README's main job runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from efold.report import decode_results


@pytest.mark.slow
def test_default_faux_pilot_from_the_command_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--no-progress",
         "--run-dir", str(run)], capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"run: {run}"
    results = decode_results((run / "results.json").read_bytes())
    ex = results.execution
    assert (ex.planned, ex.completed, ex.missing) == (260, 260, 0)
    native = next(r for r in results.results if r.role == "native")
    assert native.overall.exact.successes == native.overall.exact.trials == 52
