"""``efold-controller show RUN [--json]``: one run's status, campaign, counts, spend (the
journal's: settled and retained, every caller, against the cap), each role's exact
accuracy and median checkpoint size, damaged files and reports.

Read-only, like ``aggregate`` without ``--output``: it writes nothing in RUN. Exit
status: 0 shown, 2 usage error or refused (RUN is not a run, its records refuse, or
``--latest`` found none).
"""

from __future__ import annotations

from collections.abc import Iterator

import click
import msgspec

from efold.controller.commands._options import (
    journal_refusal,
    latest_options,
    refusal_for,
    resolve_run,
)
from efold.controller.rundirs.run_index import RunDetails, show_run, spend_text, started_text
from efold.errors import EfoldError


def _text(details: RunDetails) -> Iterator[str]:
    run, ex = details.run, details.execution
    yield f"status: {details.headline}"
    yield f"run: {run.path}"
    yield f"campaign: {run.campaign}" + (f" (probe mode {run.probe_mode})"
                                          if run.probe_mode else "")
    yield f"started: {started_text(run)}"
    gone = (f", receipt copies missing {ex.receipt_copies_missing}"
            if ex.receipt_copies_missing else "")
    yield (f"slots: {ex.visited}/{ex.planned} visited (eligible {ex.eligible}, completed "
           f"{ex.completed}, incomplete {ex.incomplete}, invalid {ex.invalid}, unadmitted "
           f"{ex.unadmitted}, skipped {ex.skipped}, missing {ex.missing}{gone})")
    yield f"spend: {spend_text(run)}"
    for line in details.roles:
        yield f"  {line.role}: exact {line.accuracy}, median checkpoint {line.checkpoint}"
    if run.damaged_files:
        yield f"damaged: {', '.join(run.damaged_files)} (gone or unreadable)"
    present = {name: path for name, path in details.reports.items() if path is not None}
    for name, path in present.items():
        yield f"{name}: {path}"
    if present and run.damaged_files:
        yield ("(those reports were written when the run ended, before the damage: "
               "`efold-controller aggregate RUN --allow-damaged --output DIR` reports what "
               "the run holds now)")
    absent = [name for name in details.reports if name not in present]
    if absent:
        yield (f"absent: {', '.join(absent)} (`efold-controller aggregate RUN --output DIR` "
               "makes them)")


@click.command("show")
@click.argument("run", required=False, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the details as one JSON object.")
@latest_options
def command(run: str | None, latest: bool, root: str | None, as_json: bool) -> None:
    """Show one run: status, campaign, counts, spend, each role's accuracy and checkpoint
    size, and its reports. Writes nothing.

    `--latest` takes the newest run under --root (./efold-runs) instead of RUN. The
    paths of results.json, summary.md and report.html in RUN are printed when present;
    `aggregate RUN --output DIR` makes them otherwise.

    \b
    Exit status:
      0  shown (whatever the run's status)
      2  usage error or refused: RUN is not a run or its records refuse, or --latest
         found none
    """
    refuse_ = refusal_for(as_json)
    run = resolve_run(run, latest, root, refuse_)
    try:
        details = show_run(run)
    except EfoldError as exc:
        refuse_(exc.code.value, journal_refusal(run, exc) or exc.detail)
    if as_json:
        click.echo(msgspec.json.encode(details).decode())
    else:
        for line in _text(details):
            click.echo(line)
