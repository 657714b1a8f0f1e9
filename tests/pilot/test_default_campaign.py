"""The bundled default campaign end to end, exactly as the README's main job runs it, and
what it must show a first-time user: folds that differ. Every reference arm is told
apart from at least one other by its paired 95% interval, native is the paired reference
of every other arm (its checkpoints fit the envelope: nothing skipped), pack and
cold-rebuild keep smaller checkpoints than native, and no arm is offered the lookup (the
default probe mode is recall-only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from efold.report import decode_results


def test_default_faux_pilot_shows_folds_that_differ(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "pilot", "--faux", "--no-progress",
         "--run-dir", str(run)], capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"run: {run}"
    results = decode_results((run / "results.json").read_bytes())
    ex = results.execution
    assert (ex.planned, ex.completed, ex.skipped, ex.missing) == (272, 272, 0, 0)
    roles = {r.role: r for r in results.results}
    assert list(roles) == ["native", "cold-rebuild", "compaction", "pack"]
    assert len(results.categories) == 12

    told_apart: set[str] = set()
    for contrast in results.contrasts:
        interval = contrast.overall.completed.delta_pp95
        assert contrast.overall.completed.pairs == 68
        assert interval is not None
        if interval.lower > 0 or interval.upper < 0:
            told_apart |= {contrast.role_a, contrast.role_b}
    assert told_apart == set(roles), f"arms no interval tells apart: {set(roles) - told_apart}"

    def median_tokens(role: str) -> int:
        sizes = roles[role].compression
        assert sizes is not None
        return sizes.tokens_median

    assert median_tokens("pack") < median_tokens("native")
    assert median_tokens("cold-rebuild") < median_tokens("native")
    assert all(r.tool_use is None for r in results.results)
    assert results.run is not None and results.run.probe_mode == "recall-only"
    # The terminal's table carries each role's size beside its accuracy.
    assert "median checkpoint" in done.stdout
    assert re.search(r"\b9,\d{3} tok \(3\d%\)", done.stdout)  # pack and cold-rebuild: about a third
