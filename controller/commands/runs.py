"""``efold-controller runs [ROOT] [--json]``: the runs under a runs root, newest first.

Read-only (``efold.controller.rundirs.run_index``): one line per run directory directly under
ROOT (default ``./efold-runs``, where ``pilot`` puts runs): name, start (UTC), campaign,
status, slots visited/planned, spend (settled + retained of the cap, from the
journal) and each role's exact accuracy. A run that cannot be read is listed with its refusal code. Exit status: 0
listed (also when ROOT holds no run, and when ROOT is not given and ``./efold-runs`` does not exist yet: no run was made here), 2
refused (``runs_root_invalid``: a ROOT given that is missing or not a directory).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import click
import msgspec

from efold.controller.commands._options import refuse
from efold.controller.rundirs.run_index import (
    RunEntry,
    list_runs,
    spend_text,
    started_text,
    status_text,
)
from efold.controller.rundirs.runroot import DEFAULT_RUNS_ROOT
from efold.errors import EfoldError

_HEADER = ("RUN", "STARTED (UTC)", "CAMPAIGN", "STATUS", "SLOTS", "SPEND", "EXACT BY ROLE")


def _row(entry: RunEntry) -> tuple[str, ...]:
    slots = "-" if entry.planned is None else f"{entry.visited}/{entry.planned}"
    exact = ", ".join(role.text() for role in entry.accuracy) or "-"
    return (entry.name, started_text(entry), entry.campaign or "-", status_text(entry),
            slots, spend_text(entry), exact)


def _table(entries: list[RunEntry]) -> Iterator[str]:
    rows = [_HEADER, *map(_row, entries)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    for row in rows:
        yield "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                        ).rstrip()


@click.command("runs")
@click.argument("root", required=False, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array of runs.")
def command(root: str | None, as_json: bool) -> None:
    """List the runs under ROOT (default ./efold-runs), newest first.

    One line per run directory (one holding journal.sqlite, directly under ROOT): its
    start (UTC, from the journal; "(dir mtime)" when the journal records none), campaign,
    status (complete, stopped with its code, damaged, interrupted, crashed, running,
    unreconciled), slots visited/planned, spend from the journal (settled + retained
    of the cap, every caller's; faux units for a faux reader) and each role's exact
    accuracy. A run that cannot be read shows its refusal code. Read-only.

    \b
    Exit status:
      0  listed (also when ROOT holds no run, or ROOT is not given and
         ./efold-runs does not exist yet)
      2  refused: runs_root_invalid (a ROOT given is missing or not a directory)
    """
    entries: list[RunEntry] = []
    # No ROOT and no ./efold-runs: nothing was ever run here, which is no error (a ROOT
    # the operator names and that is missing is: likely a typo).
    missing_default = root is None and not os.path.lexists(DEFAULT_RUNS_ROOT)
    where = DEFAULT_RUNS_ROOT if root is None else root
    if not missing_default:
        try:
            entries = list_runs(where)
        except EfoldError as exc:
            refuse(exc)
    if as_json:
        click.echo(msgspec.json.encode(entries).decode())
    elif missing_default:
        click.echo(f"No runs: {where} does not exist here yet (`efold-controller pilot "
                   "--faux` makes it).")
    elif not entries:
        click.echo(f"No runs under {where} (a run directory holds journal.sqlite).")
    else:
        for line in _table(entries):
            click.echo(line)
