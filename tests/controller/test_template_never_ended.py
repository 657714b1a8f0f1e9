"""A controller killed (SIGKILL) after its slots' children ended but before its
fork-server template's exit was journaled: nothing proves the template ended, so the
run is not reconciled. ``recover`` said so; ``show`` and ``aggregate`` said "Crashed",
"Processes possibly alive: no" and no launch unended, because the report's launch facts
left the template out. Every reader must tell the same truth until ``reap``."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from efold_pilot_kit import finished_small_run

from efold.controller.cli import main


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_small_run(tmp_path_factory.mktemp("clean"))


def _template_exit_unjournaled(clean: Path, to: Path) -> Path:
    """A copy of ``clean`` as a controller killed before it journaled its template's exit
    leaves it (the lease is released in either case: a dead holder's lock is gone)."""
    run = Path(shutil.copytree(clean, to, symlinks=True))
    with contextlib.closing(sqlite3.connect(run / "journal.sqlite")) as db, db:
        changed = db.execute("UPDATE launches SET exited_ns = NULL, exit_status = NULL "
                             "WHERE kind = 'template'").rowcount
    assert changed == 1
    return run


def _cli(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, list(args), terminal_width=200)
    return done.exit_code, done.output


def test_show_and_aggregate_agree_with_recover_on_an_unended_template(
        clean: Path, tmp_path: Path) -> None:
    run = _template_exit_unjournaled(clean, tmp_path / "run")
    code, out = _cli("recover", str(run))
    assert code == 1 and "1 launch(es) never seen to end" in out, out
    code, out = _cli("show", str(run))
    assert code == 0 and out.startswith("status: UNRECONCILED"), out
    code, out = _cli("aggregate", str(run))
    assert code == 4 and "Processes possibly alive: yes" in out, out
    assert "unreconciled: run_unreconciled" in out


def test_after_reap_the_template_is_contained_and_the_run_is_not_unreconciled(
        clean: Path, tmp_path: Path) -> None:
    run = _template_exit_unjournaled(clean, tmp_path / "run")
    code, out = _cli("reap", str(run))
    assert code == 0 and out.startswith("reconciled"), out
    code, out = _cli("show", str(run))
    assert code == 0 and not out.startswith("status: UNRECONCILED"), out
    code, out = _cli("aggregate", str(run))
    assert "Processes possibly alive: no" in out, out


def test_a_clean_run_is_complete(clean: Path) -> None:
    """The control: the template's journaled exit leaves the run Complete."""
    code, out = _cli("show", str(clean))
    assert code == 0 and out.startswith("status: Complete"), out
