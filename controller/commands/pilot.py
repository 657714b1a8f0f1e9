"""``efold-controller pilot``: run a campaign end to end."""

from __future__ import annotations

import os
from pathlib import Path

import click

from efold.controller.authorize_run import load_grant
from efold.controller.campaign import bundled_campaign
from efold.controller.commands._options import (
    fail,
    real_route_options,
    refuse,
    registration_options,
)
from efold.controller.errors import ControllerError
from efold.controller.interrupt import exit_status
from efold.controller.pilot import Dispatch
from efold.controller.pilot_view import outcome_line, print_summary, run_with_progress
from efold.controller.registration import (
    compute_registration,
    encode_registration,
    load_registration,
)
from efold.controller.runroot import DEFAULT_RUNS_ROOT, claim_run_dir, new_run_dir
from efold.controller.smoke import require_smoke
from efold.errors import Code, EfoldError


@click.command("pilot")
@click.option("--faux", is_flag=True, help="Offline: the faux extractive reader, no credential.")
@click.option("--real", is_flag=True, help="The campaign's real route (needs a passing `smoke`).")
@registration_options(required=False)
@click.option("--runs", "runs_root", default=None, type=click.Path(file_okay=False),
              help="Parent of the new run directory (default: ./efold-runs).")
@click.option("--run-dir", "run_dir", default=None, type=click.Path(file_okay=False),
              help="Exact new run directory (must not exist; --real: the authorization's "
                   "output root).")
@real_route_options
@click.option("--keep-answers", is_flag=True,
              help="--real: keep the reader's answers in the run's owner-only answers.jsonl "
                   "(reports never carry them; without it only their hashes are kept).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True,
              help="End with one machine-readable line: a JSON object with the run "
                   "directory, status, stop code, slot counts and settled spend.")
def command(faux: bool, real: bool, registration: str | None, sha256: str | None,
            runs_root: str | None, run_dir: str | None, authorization: str | None,
            trust: tuple[str, ...], keep_answers: bool, no_progress: bool,
            as_json: bool) -> None:
    """Run a campaign: `pilot --faux` alone runs the bundled default campaign.

    Every run gets a new directory (printed first); nothing is resumed or reused.
    Ctrl-C (or SIGTERM) closes admission, contains the child in flight, writes the
    reports with an "interrupted" banner and exits 130 (143).

    --real runs a registration's real route: it needs --registration/--sha256, --run-dir
    (the directory the authorization binds), --authorization and --trust, the provider
    account id in EFOLD_ACCOUNT_ID, the credential variable the reader's profile names,
    and a passing `efold-controller smoke` of the same registration under the same
    parent directory. The authorization is consumed once, before any child starts.

    Exit status: 0 complete, 2 refused, 3 stopped (a stop code is printed), 130/143
    interrupted.
    """

    if faux == real:
        raise click.UsageError("choose exactly one of --faux (offline) and --real")
    if (registration is None) != (sha256 is None):
        raise click.UsageError("--registration and --sha256 go together")
    if run_dir is not None and runs_root is not None:
        raise click.UsageError("--run-dir and --runs are exclusive (--run-dir names the run, "
                               "--runs the root a new run is made in)")
    if keep_answers and not real:
        raise click.UsageError("--keep-answers applies to --real runs")
    dispatch = Dispatch()
    try:
        if registration is not None and sha256 is not None:
            loaded = load_registration(registration, sha256)
            reg, reg_bytes = loaded.registration, loaded.data
        elif real:
            raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
                                  "--real needs --registration FILE --sha256 S")
        else:
            campaign, raw = bundled_campaign("default")
            reg = compute_registration(campaign, raw)
            reg_bytes = encode_registration(reg)
        if real:
            if run_dir is None:
                raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
                                      "--real needs --run-dir: the directory the "
                                      "authorization binds")
            grant = load_grant(reg, authorization=authorization, trusted=trust,
                               environ=os.environ)
            require_smoke(reg, str(sha256), Path(run_dir))
            dispatch = Dispatch(grant=grant, keep_answers=keep_answers)
        elif not reg.campaign.reader.is_faux:
            fail("lookup_pilot_real_route_unavailable",
                 "--faux needs a faux reader (this registration's reader is real: --real)")
        run = claim_run_dir(run_dir) if run_dir else new_run_dir(
            runs_root or DEFAULT_RUNS_ROOT, reg.campaign.name)
    except EfoldError as exc:
        refuse(exc)
    click.echo(f"run: {run}")
    try:
        outcome = run_with_progress(reg, reg_bytes, run, show=not no_progress,
                                    dispatch=dispatch)
    except EfoldError as exc:
        refuse(exc)
    except KeyboardInterrupt:
        # Only before the run's signal watcher is up (or after it closed): whatever was
        # launched was contained on the way out.
        click.echo(f"interrupted: {run} is incomplete; "
                   f"`efold-controller recover {run}` shows what it left", err=True)
        raise SystemExit(130) from None
    print_summary(outcome)
    status = 0
    if outcome.interrupted is not None:
        visited = len(outcome.receipts)
        click.echo(f"interrupted: reports for {visited} of {len(outcome.plan.slots)} slots "
                   f"are in {run}")
        click.echo(f"next: `efold-controller recover {run}` (should say reconciled), then a "
                   "new `pilot` run; runs are never resumed")
        status = exit_status(outcome.interrupted)
    elif outcome.stop_code is not None:
        click.echo(f"stopped: {outcome.stop_code.value}")
        status = 3
    if as_json:  # always the very last line
        click.echo(outcome_line(outcome))
    if status:
        raise SystemExit(status)
