"""``efold-controller reap RUN [--json]``: finish containment a dead controller left.

The one command that signals a run's processes after its controller is gone
(``efold.controller.reap``); ``recover`` stays observation-only. It takes the run lease,
so it refuses (``lease_held``) while a controller is live.

Exit status: 0 the run is reconciled afterwards, 1 something could not be proven dead
(``reap_incomplete``; its processes are named by ``recover``), 2 refused.
"""

from __future__ import annotations

import click

from efold.controller.commands._options import fail


@click.command("reap")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(run_dir: str, as_json: bool) -> None:
    """Contain every process a dead controller left behind in RUN_DIR, with the same
    proofs as a live containment (pidfd + start time + group), and journal it."""
    import msgspec

    from efold.controller.reap import reap
    from efold.errors import EfoldError

    try:
        report = reap(run_dir)
    except EfoldError as exc:
        fail(exc.code.value, exc.detail)
        return
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        click.echo(report.verdict)
        for launch in report.launches:
            click.echo(f"  launch {launch.launch_id} slot={launch.slot} {launch.outcome} "
                       f"members={launch.members} signals={launch.signals} "
                       f"survivors={launch.survivors}")
        if not report.launches:
            click.echo("  nothing to reap")
    if not report.reconciled:
        if not as_json:
            click.echo("refused: reap_incomplete (see `efold-controller recover RUN`)", err=True)
        raise SystemExit(1)
