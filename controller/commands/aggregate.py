"""``efold-controller aggregate RUN``: read-only aggregation of a run's receipts.

Exit status (also in ``--help`` and docs/commands.md): 0 reports printed (the run is
complete, stopped, damaged, interrupted, crashed with every process accounted for, or
still running); 2 refused (a fixed code on stderr, no report; a receipt that fails its
checks refuses unless ``--allow-damaged``); 4 reports printed and written,
but processes of the run may be alive (``run_unreconciled`` on stderr; see
``efold.report.status``).
"""

from __future__ import annotations

import os

import click

from efold.controller.commands._options import (
    journal_refusal,
    latest_options,
    refusal_for,
    resolve_run,
)
from efold.controller.errors import ControllerError
from efold.controller.rundirs.aggregate import build_run_results, publish_reports
from efold.controller.rundirs.cluster_collect import read_any_run
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import Code, EfoldError
from efold.report import render_reports

EXIT_UNRECONCILED = 4


@click.command("aggregate")
@click.argument("run", required=False, type=click.Path())
@latest_options
@click.option("--output", default=None, type=click.Path(file_okay=False),
              help="Write results.json, summary.md and report.html into this new directory.")
@click.option("--json", "as_json", is_flag=True, help="Print results.json instead of summary.md.")
@click.option("--allow-damaged", is_flag=True,
              help="Report a run with receipts that fail their checks: each is named as a "
                   "damaged file and left out, instead of refusing the run.")
@click.option("--chain/--no-chain", "chain", default=True, show_default=True,
              help="A link of a chain (a run and its continuations): report the whole "
                   "chain, or the link alone.")
def command(run: str | None, latest: bool, root: str | None, output: str | None,
            as_json: bool, allow_damaged: bool, chain: bool) -> None:
    """Aggregate RUN's receipts (it changes nothing in RUN). Refuses duplicate, changed,
    unplanned and unvisited receipts and a plan that does not match the run's
    registration; a slot the controller left in flight counts as visited, never scored.
    With `--allow-damaged` such receipts are named as damaged files and left out, and
    the rest is reported (status DAMAGED). A receipt the journal expects that is gone,
    or a results.json in RUN that does not parse, is reported as damage either way.
    `--latest` takes the newest run under --root (./efold-runs) instead of RUN.
    Every report opens with the run's status: complete, partial (a chain with slots
    still to run), stopped (with its code), damaged, interrupted, crashed, running, or
    UNRECONCILED. A link of a chain (`pilot --continue`) reports the whole chain: every
    slot of the plan once, with its one terminal receipt, the links' money summed and
    each link's end in the banner; --no-chain reports the link alone.

    \b
    Exit status:
      0  reports printed: the run is complete, stopped, damaged, interrupted, still
         running, or crashed with every process it started accounted for
      2  refused: a fixed code on stderr, no report (a receipt failing its checks,
         without --allow-damaged)
      4  run_unreconciled: reports printed (and written with --output), but processes
         of the run may be alive: a containment episode ended unreconciled, or, with
         no controller holding the run lease, one never finished or a launch has no
         exit record and no finished containment; run `efold-controller recover RUN`,
         then `efold-controller reap RUN`
    """
    refuse_ = refusal_for(as_json)
    run = resolve_run(run, latest, root, refuse_)
    try:
        results = build_run_results(read_any_run(run, allow_damaged=allow_damaged,
                                                 chain=chain))
        reports = render_reports(results)
        if output is not None:
            if os.path.lexists(output):
                raise ControllerError(Code.OUTPUT_EXISTS, f"{output} exists: aggregate writes "
                                      "its reports into a new directory")
            publish_reports(reports, claim_run_dir(output, parent_is="--output's parent"))
    except EfoldError as exc:
        refuse_(exc.code.value, journal_refusal(run, exc) or exc.detail)
    click.echo(reports["results.json" if as_json else "summary.md"].decode())
    if results.status is not None and results.status.unreconciled:
        click.echo(f"unreconciled: {Code.RUN_UNRECONCILED.value}", err=True)
        raise SystemExit(EXIT_UNRECONCILED)
