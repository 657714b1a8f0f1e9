"""``efold-controller register CAMPAIGN.toml --output DIR [subset flags]``."""

from __future__ import annotations

import click

from efold.controller.campaigns.campaign import named_campaign
from efold.controller.campaigns.design import refuse_output_inside_builds
from efold.controller.campaigns.registration import (
    compute_registration,
    subset_of,
    write_registration,
)
from efold.controller.campaigns.reportable import check_reportable
from efold.controller.campaigns.subset import Subset, describe
from efold.controller.commands._options import refuse, subset_options
from efold.errors import EfoldError


@click.command("register")
@click.argument("campaign", type=click.Path(dir_okay=False))
@click.option("--output", "output", required=True, type=click.Path(file_okay=False),
              help="Directory for registration.json (created private; must not hold one).")
@subset_options
def command(campaign: str, output: str, subset: Subset | None) -> None:
    """Validate a campaign, freeze its digests and write registration.json.

    CAMPAIGN is a TOML file, or a bundled campaign: `default`, `original`, `hard`,
    `boundary`, `resume` or `lookup`. Prints the registration's sha256: every later
    command takes --registration FILE --sha256 SHA.

    --roles, --traces, --probes and --limit register a subset of the campaign: a new
    registration with its own sha256 (the campaign's sha256 stays the file's), whose
    plan holds only the kept slots. The same flags, in any order, give the same
    sha256 (on the same code and corpus).

    Exit status: 0 registered, 2 usage error or refused (nothing written).
    """
    try:
        spec, raw = named_campaign(campaign)
        reg = compute_registration(spec, raw, subset)
        check_reportable(reg)
        refuse_output_inside_builds(reg.campaign.roles, output, "--output")
        path, sha = write_registration(reg, output)
    except EfoldError as exc:
        refuse(exc)
    click.echo(f"registration: {path}")
    click.echo(f"sha256: {sha}")
    kept = subset_of(reg)
    if kept is not None:
        click.echo(f"subset: {describe(kept)}")
