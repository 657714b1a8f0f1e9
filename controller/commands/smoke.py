"""``efold-controller smoke``: the configured-process smoke that opens the real route."""

from __future__ import annotations

import os
from pathlib import Path

import click

from efold.controller.campaigns.design import refuse_output_inside_builds
from efold.controller.campaigns.registration import load_registration
from efold.controller.commands._options import real_route_options, refuse, registration_options
from efold.controller.pilot.pilot import Dispatch
from efold.controller.pilot.pilot_view import (
    output_options,
    print_summary,
    run_with_progress,
    tell_containment,
    verbosity_of,
)
from efold.controller.pilot.smoke import record_smoke, smoke_failures
from efold.controller.rundirs.authorize_run import load_grant
from efold.controller.rundirs.run_setup import check_containment, check_real_grant
from efold.controller.rundirs.runroot import claim_run_dir
from efold.errors import EfoldError


@click.command("smoke")
@registration_options(required=True)
@click.option("--run-dir", "run_dir", required=True, type=click.Path(file_okay=False),
              help="The new run directory the smoke's authorization binds (must not exist).")
@real_route_options
@output_options
def command(registration: str, sha256: str, run_dir: str, authorization: str | None,
            trust: tuple[str, ...], process_group_ok: bool, quiet: bool, verbose: bool,
            no_progress: bool) -> None:
    """Smoke a registration's real route: one slot per role through the whole flow.

    Lease, authorization (consumed once: sign it with `authorize --registration FILE
    --sha256 S --smoke`), prep, probe, permits, settlement, containment and receipts,
    under the smoke's own cap (what one slot per role can reserve at most). When every
    slot completed, a passing record is kept beside the run directory, in
    `.efold-smoke-v1/` of its parent: `pilot --real` needs one for the same
    registration and route, under the same parent.

    Output options as for `pilot` (--quiet, --verbose, --no-progress; the run's
    controller.log); the smoke's verdict and record path are printed in every mode.

    Exit status: 0 passed, 2 refused, 3 ran but did not pass (why is printed).
    """

    verbosity = verbosity_of(quiet, verbose)
    try:
        loaded = load_registration(registration, sha256)
        reg = loaded.registration
        grant = load_grant(reg, authorization=authorization, trusted=trust, environ=os.environ)
        # Every refusal the consumption would give, before the directory exists.
        check_real_grant(reg, loaded.data, Path(run_dir), grant, smoke=True)
        containment = check_containment(reg, real=True, process_group_ok=process_group_ok)
        refuse_output_inside_builds(reg.campaign.roles, run_dir, "the run directory")
        run = claim_run_dir(run_dir)
    except EfoldError as exc:
        refuse(exc)
    click.echo(f"run: {run}")
    tell_containment(containment, verbosity)
    try:
        outcome = run_with_progress(reg, loaded.data, Path(run), show=not no_progress,
                                    dispatch=Dispatch(grant=grant, smoke=True,
                                                      process_group_ok=process_group_ok),
                                    verbosity=verbosity)
        record = record_smoke(reg, sha256.strip().lower(), outcome)
    except EfoldError as exc:
        refuse(exc)
    print_summary(outcome, verbosity)
    failures = smoke_failures(outcome)
    click.echo(f"smoke record: {record}")
    if failures:
        click.echo("smoke: did not pass")
        for why in failures:
            click.echo(f"  {why}")
        raise SystemExit(3)
    click.echo(f"smoke: passed ({len(outcome.receipts)} slots, one per role)")
