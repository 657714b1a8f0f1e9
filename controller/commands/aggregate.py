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
    unplanned and unvisited receipts; partial runs report honest counts."""
    import msgspec

    from efold.controller.aggregate import publish_reports, read_run, render_reports
    from efold.errors import EfoldError

    try:
        view = read_run(run)
        registration = msgspec.json.decode(open(f"{run}/registration.json", "rb").read())
        faux = registration["campaign"]["reader"]["provider"] == "faux"
        reports = render_reports(view, faux=faux)
        if output is not None:
            from efold.controller.runroot import claim_run_dir

            publish_reports(reports, claim_run_dir(output))
    except (EfoldError, OSError, KeyError, msgspec.DecodeError) as exc:
        code = exc.code.value if isinstance(exc, EfoldError) else "registration_invalid"
        fail(code, getattr(exc, "detail", "") or "run is not readable")
        return
    click.echo(reports["results.json" if as_json else "summary.md"].decode())
