"""``efold-controller prune [ROOT] [--older-than D] [--keep N] [--run RUN ...]
[--slots-only] [--dry-run] [--yes] [--json]``: remove old run directories (or only their
``slots/``) that are over for certain (``efold.controller.rundirs.prune``).

What would go is decided and measured first; ``--dry-run`` stops there. Removing needs
``--yes``, or a "yes" at the prompt when stdin is a terminal (``prune_not_confirmed``
otherwise: nothing is removed). A run that is not reconciled (``prune_unreconciled``),
whose lease is held (``prune_run_live``) or whose records do not read is kept, whatever
the options, and named on stderr with its code. The leftovers of a controller stopped as
it started (a bare claim, a run stopped before its plan) are candidates too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click
import msgspec

from efold.controller.commands._options import refusal_for
from efold.controller.rundirs.prune import (
    PruneEntry,
    PruneReport,
    Selection,
    apply_prune,
    parse_duration,
    plan_prune,
)
from efold.controller.rundirs.runroot import DEFAULT_RUNS_ROOT
from efold.errors import Code, EfoldError

_HEADER = ("RUN", "STARTED (UTC)", "STATUS", "SIZE (BYTES)", "ACTION")


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _action(entry: PruneEntry, slots_only: bool) -> str:
    what = "slots/" if slots_only else "run"
    if entry.action == "remove":
        return f"would remove {what}"
    if entry.action == "removed":
        return f"removed {what}"
    if entry.action == "incomplete":
        return f"partly removed: {entry.code}"
    return f"kept: {entry.code}"


def _table(report: PruneReport) -> Iterator[str]:
    rows = [_HEADER, *((e.name, e.started, e.status, f"{e.bytes:,}",
                        _action(e, report.slots_only)) for e in report.runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    for row in rows:
        cells = [cell.rjust(w) if i == 3 else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        yield "  ".join(cells).rstrip()


def _text(report: PruneReport) -> Iterator[str]:
    if report.runs:
        yield from _table(report)
    else:
        yield f"No run to prune under {report.root}."
    for note in report.notes:
        yield f"note: {note.name}: {note.why}"
    what = "slots/ of " if report.slots_only else ""
    gone = [e for e in report.runs if e.action in ("removed", "incomplete")]
    kept = len(report.kept)
    if report.applied:
        yield (f"Freed {report.freed_bytes:,} bytes: {what}{len(gone)} run(s) removed"
               + (f", {kept} kept" if kept else "") + ".")
    elif report.runs:
        yield (f"Would free {report.removable_bytes:,} bytes: {what}{len(report.removable)} "
               "run(s)" + (f", {kept} kept" if kept else "") + "; nothing was removed.")


def _emit(report: PruneReport, as_json: bool) -> None:
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        for line in _text(report):
            click.echo(line)
    for entry in report.kept:
        click.echo(f"kept: {entry.code} ({entry.name}: {entry.detail})", err=True)
    if report.kept:
        raise SystemExit(1)


@click.command("prune")
@click.argument("root", default=DEFAULT_RUNS_ROOT, type=click.Path())
@click.option("--older-than", "older_than", default=None, metavar="DURATION",
              callback=_duration,
              help="Only runs that started longer ago than this: 90s, 30m, 12h, 7d, 2w.")
@click.option("--keep", default=None, type=click.IntRange(min=0), metavar="N",
              help="Spare the N newest runs.")
@click.option("--run", "runs", multiple=True, metavar="RUN",
              help="Only this run (a name under ROOT, or its path); repeatable. Not with "
              "--older-than or --keep.")
@click.option("--slots-only", is_flag=True,
              help="Remove only the runs' slots/ (the slots' private workspaces); plan, receipts, "
              "journal, checkpoints and reports stay, and aggregate still works.")
@click.option("--dry-run", is_flag=True, help="List what would go and its size; remove "
              "nothing.")
@click.option("--yes", "-y", is_flag=True, help="Remove without asking.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def command(root: str, older_than: int | None, keep: int | None, runs: tuple[str, ...],
            slots_only: bool, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Remove old run directories under ROOT (default ./efold-runs) that are over.

    Only directories directly under ROOT that hold journal.sqlite are runs; so are the
    leftovers of a controller stopped as it started (a claim that recorded nothing: its
    lease alone; a run stopped before its plan). Nothing else is touched (a symlink is
    never followed). Without --older-than, --keep or --run every run is a candidate;
    --keep counts runs only. A candidate is removed only when no controller
    holds its lease and it is reconciled (complete, stopped, interrupted or crashed,
    and `recover` would say reconciled); otherwise it is kept and named on stderr
    (prune_run_live, prune_unreconciled, or its records' refusal code), whatever the
    options. One line per run: start, status, size in bytes (disk usage) and action;
    then the bytes freed. Removing asks first in a terminal; elsewhere it needs --yes.

    \b
    Exit status:
      0  every candidate removed (with --dry-run: would be), or none
      1  a candidate was kept (not reconciled, live, unreadable) or not removed
         entirely (prune_incomplete); the others were removed
      2  usage error, or refused: runs_root_invalid, run_not_found (a --run that is
         no run under ROOT), prune_not_confirmed (no --yes and no terminal, or the
         answer was no); nothing was removed
    """
    if runs and (older_than is not None or keep is not None):
        raise click.UsageError("--run names runs exactly: not with --older-than or --keep")
    refuse_ = refusal_for(as_json)
    try:
        planned = plan_prune(root, Selection(older_than_ns=older_than, keep=keep,
                                             runs=runs), slots_only=slots_only)
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    if dry_run or not planned.removable:
        _emit(planned, as_json)
        return
    if not yes:
        if not sys.stdin.isatty():
            refuse_(Code.PRUNE_NOT_CONFIRMED.value,
                    "stdin is not a terminal: give --yes to remove, or --dry-run to list "
                    "what would go")
        for line in _text(planned):
            click.echo(line, err=True)
        what = "the slots/ of " if slots_only else ""
        if not click.confirm(f"Remove {what}{len(planned.removable)} run(s), "
                             f"{planned.removable_bytes:,} bytes?", default=False, err=True):
            refuse_(Code.PRUNE_NOT_CONFIRMED.value, "declined: nothing was removed")
    try:
        done = apply_prune(planned)
    except EfoldError as exc:
        refuse_(exc.code.value, exc.detail)
    _emit(done, as_json)
