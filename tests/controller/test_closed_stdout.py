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
