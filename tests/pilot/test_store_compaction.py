"""The store-compaction arm (h) through the commands: it registers, passes ``preflight``
and runs in a faux campaign beside ``compaction``, its slots reading the same compacted
context with the history lookup offered (and used by the faux reader)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EFOLD = str(Path(sys.executable).with_name("efold-controller"))
CAMPAIGN = """name = "h"
suite = "original"
roles = ["compaction", "store-compaction"]
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
    # The same compacted context: the same checkpoint size, slot by slot.
    sizes = {role: sorted(int(str(r["checkpoint_tokens"])) for r in rs)
             for role, rs in by_role.items()}
    assert sizes["compaction"] == sizes["store-compaction"]
    # The lookup is offered only on store-compaction, and the faux reader uses it.
    assert sum(int(str(r.get("lookup_calls", 0))) for r in by_role["compaction"]) == 0
    assert sum(int(str(r.get("lookup_calls", 0))) for r in by_role["store-compaction"]) > 0
