"""The store-compaction arm (h) through the commands: it registers (under the lookup
probe mode, the only one that offers its lookup), passes ``preflight`` and runs in a faux
campaign beside ``store``, its checkpoints the compaction arm's compacted context with
the history lookup offered (and used by the faux reader)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from efold.corpus import load_trace
from efold.folds import TracePrefix, read_checkpoint
from efold.folds.arms import CompactionFold

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
CAMPAIGN = """name = "h"
suite = "original"
roles = ["store", "store-compaction"]
probe_mode = "lookup-allowed-v1"
probe_limit = 4
cap_usd = "60.00"
"""


def efold(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EFOLD, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_store_compaction_registers_passes_preflight_and_runs(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    done = efold(tmp_path, "register", "c.toml", "--output", "reg")
    assert done.returncode == 0, done.stderr
    sha = done.stdout.split("sha256: ")[1].strip()
    given = ("--registration", "reg/registration.json", "--sha256", sha)
    checked = efold(tmp_path, "preflight", *given)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = efold(tmp_path, "pilot", "--faux", *given, "--run-dir", "run", "--quiet")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    receipts = [json.loads(p.read_bytes()) for p in (tmp_path / "run" / "receipts").iterdir()]
    by_role: dict[str, list[dict[str, object]]] = {}
    for r in receipts:
        by_role.setdefault(str(r["role"]), []).append(r)
    assert all(r["status"] == "completed" and "excluded" not in r
               for r in receipts), receipts
    # The compaction arm's compacted context, with the store and the lookup offered.
    run = tmp_path / "run"
    plan = json.loads((run / "plan.json").read_bytes())
    keys = {s["checkpoint"]: s["trace_id"] for s in plan["slots"]
            if s["role"] == "store-compaction"}
    assert keys
    for key, trace_id in keys.items():
        cp = read_checkpoint(run / "checkpoints" / key / "snapshot").checkpoint
        trace = load_trace((run / "traces" / f"{trace_id}.jsonl").read_bytes())
        assert cp.messages == CompactionFold().build(TracePrefix.of(trace)).messages
        assert cp.tools == ["history_search", "history_get"] and cp.store is not None
        assert len(cp.receipt.compactions) == 1
    # The faux reader uses the lookup it is offered.
    assert sum(int(str(r.get("lookup_calls", 0))) for r in by_role["store-compaction"]) > 0
