"""A run whose journal is damaged (a disk error, a bad copy): every command that reads
the run refuses with ``journal_invalid`` and names the file, so the operator knows which
file is damaged (``recover`` named it; ``show``, ``aggregate`` and ``reap`` said only
SQLite's "file is not a database"). Real faux runs, the real command line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))

from efold_pilot_kit import finished_small_run

from efold.controller.cli import main

COMMANDS = ("show", "aggregate", "recover", "reap", "compare")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_small_run(tmp_path_factory.mktemp("clean"))


def _damaged(clean: Path, to: Path, how: str) -> Path:
    run = Path(shutil.copytree(clean, to, symlinks=True))
    journal = run / "journal.sqlite"
    with journal.open("r+b") as f:
        if how == "header":  # SQLite's magic string overwritten: not a database at all
            f.write(b"not a database!\0")
        else:  # a page past the header: opens, then fails to read
            f.seek(4096)
            f.write(b"\xff" * 4096)
    return run


@pytest.mark.parametrize("how", ["header", "page"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_damaged_journal_is_named_by_every_reader(clean: Path, tmp_path: Path, how: str,
                                                    command: str) -> None:
    run = _damaged(clean, tmp_path / "run", how)
    args = [command, str(run)] if command != "compare" else [command, str(clean), str(run)]
    done = CliRunner().invoke(main, [*args, "--json"], terminal_width=200)
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    line = next(x for x in done.stderr.splitlines() if x.startswith("refused: "))
    assert line.startswith(f"refused: journal_invalid ({run / 'journal.sqlite'}: "), line
    assert line.count("journal.sqlite") == 1, line  # named once


def test_an_intact_copy_is_read(clean: Path, tmp_path: Path) -> None:
    """The control: the same copy, undamaged, shows without a refusal."""
    run = Path(shutil.copytree(clean, tmp_path / "run", symlinks=True))
    done = CliRunner().invoke(main, ["show", str(run)], terminal_width=200)
    assert done.exit_code == 0 and "refused" not in done.output, done.output
