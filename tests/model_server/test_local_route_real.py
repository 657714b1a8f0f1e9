"""The local route against the real llama.cpp server: ``pilot --reader URL --model NAME
--summariser URL --summariser-model NAME`` runs a bundled campaign in one command (no keygen, no registration file, no signed
authorization), its inline smoke first, every request admitted, settled from the usage
the server reported, at the local price. A subset (one role, one block) keeps it to a
few minutes of the model reading its prompts; the route is the default campaign's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from efold.registry.journal import JournalReader

from .conftest import MODEL

pytestmark = pytest.mark.model_server


def test_pilot_with_a_reader_on_the_command_line(model_server_url: str,
                                                 tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "efold.controller", "pilot", "--reader", model_server_url,
         "--model", MODEL, "--summariser", model_server_url, "--summariser-model", MODEL,
         "--server", "llama-server", "--roles", "compaction", "--limit",
         "1", "--runs", str(tmp_path / "runs"), "--json", "--no-progress"],
        capture_output=True, text=True, timeout=1800, cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "complete" and line["completed"] == line["planned"] == 1
    assert "smoke slots: 1/1" in done.stdout
    run = Path(line["run"])
    with JournalReader(run) as journal:
        holds = journal.rows("holds")
    # Every request settled at the usage the server reported (never missing), at zero:
    # the compaction arm's summary and the reader's answer.
    assert len(holds) >= 2
    assert all(h["state"] == "settled" and h["settled_units"] == 0 and h["usage"]
               for h in holds)
    registration = json.loads((run / "registration.json").read_bytes())
    assert registration["campaign"]["reader"] == {
        **registration["campaign"]["reader"], "provider": "local", "model": MODEL,
        "base_url": model_server_url, "server": "llama-server"}
    assert "nothing billed" in (run / "summary.md").read_text()
