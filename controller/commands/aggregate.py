"""``efold-controller aggregate RUN``: read-only aggregation of a run's receipts."""

from __future__ import annotations

import click

from efold.controller.commands._options import fail


@click.command("aggregate")
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--output", default=None, type=click.Path(file_okay=False),
              help="Write results.json, summary.md and report.html into this new directory.")
@click.option("--json", "as_json", is_flag=True, help="Print results.json instead of summary.md.")
def command(run: str, output: str | None, as_json: bool) -> None:
    """Aggregate RUN's receipts (it changes nothing in RUN). Refuses duplicate, changed,
    unplanned and unvisited receipts and a plan that does not match the run's
    registration; a slot the controller left in flight counts as visited, never scored."""
    from efold.controller.aggregate import publish_reports, read_run, render_reports
    from efold.errors import EfoldError

    try:
        reports = render_reports(read_run(run))
        if output is not None:
            from efold.controller.runroot import claim_run_dir

            publish_reports(reports, claim_run_dir(output))
    except EfoldError as exc:
        fail(exc.code.value, exc.detail)
        return
    click.echo(reports["results.json" if as_json else "summary.md"].decode())
