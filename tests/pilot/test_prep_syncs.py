"""A checkpoint's rows never make the event loop wait on the disk: its assignment row
is committed unsynced (the next launch's sync covers it, before anything acts on it)
and its child's exit row rides with the writer's next commit, as a probe's does."""

from __future__ import annotations

import itertools
import os
import threading
import traceback
from collections import Counter
from pathlib import Path

import pytest
from efold_pilot_kit import small_registration

from efold.controller.pilot.pilot import run_pilot
from efold.controller.rundirs.runroot import claim_run_dir
from efold.registry.journal import JournalReader


def test_no_checkpoint_or_exit_row_is_synced_where_it_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waited: Counter[str] = Counter()  # the record_* an fdatasync ran inside, by name
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if threading.current_thread() is threading.main_thread():
            stack = traceback.extract_stack()
            for caller, frame in itertools.pairwise(stack):
                # A child's rows; the template's exit row is written as the run closes.
                if frame.name in ("record_assignment", "record_exit") \
                        and not caller.filename.endswith("template.py"):
                    waited[frame.name] += 1
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    run_pilot(reg, raw, run)
    with JournalReader(run) as reader:
        checkpoints = reader.rows("assignments", "kind = ?", ("checkpoint",))
        preps = reader.rows("launches", "kind = ?", ("prep",))
    assert checkpoints and preps  # the run prepared checkpoints, all on record
    assert all(p["exited_ns"] is not None for p in preps)
    assert waited == Counter()
