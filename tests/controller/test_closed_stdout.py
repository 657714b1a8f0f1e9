"""A pilot whose standard output is closed after its first line (``| head -1``) goes
on to its end: every slot is run, the exit status is the run's, and one line on
standard error says the rest of the output was dropped. (Click alone exits 1 at the
first failed write, without a word, in the middle of the run.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
CAMPAIGN = """name = "pipe"
suite = "original"
roles = ["native", "compaction"]
probe_limit = 3
cap_usd = "60.00"
"""


def test_a_closed_stdout_does_not_end_the_run(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    proc = subprocess.Popen([EFOLD, "pilot", "--faux", "--campaign", "c.toml", "--run-dir",
                             "run", "--no-progress"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert first.startswith("run: ")
    proc.stdout.close()  # the reader is gone: what the pilot writes next cannot be delivered
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 0, err
    assert "standard output was closed" in err
    plan = (tmp_path / "run" / "plan.json").read_text()
    receipts = list((tmp_path / "run" / "receipts").iterdir())
    assert receipts and plan.count('"slot"') == len(receipts)
    assert (tmp_path / "run" / "results.json").is_file()


def test_a_stream_closed_before_the_start_is_no_output_and_the_run_goes_on(
        tmp_path: Path) -> None:
    """``>&-`` and ``2>&-``: Python starts with None for that stream. The run ends as it
    would, with its reports (before, a traceback and a run directory without a journal)."""
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    for n, closed in enumerate((">&-", "2>&-")):
        done = subprocess.run(
            ["sh", "-c", f'exec "$0" pilot --faux --campaign c.toml --run-dir run{n} '
             f"{closed}", EFOLD], cwd=tmp_path, capture_output=True,
            text=True, timeout=600)
        assert done.returncode == 0, (closed, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout
        assert (tmp_path / f"run{n}" / "results.json").is_file()
