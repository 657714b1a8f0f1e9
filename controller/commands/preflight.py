"""``efold-controller preflight --registration F --sha256 S [--json]``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import click
import msgspec

from efold.controller.campaigns.registration import load_registration
from efold.controller.commands._options import refuse, registration_options
from efold.controller.pilot.preflight import PreflightReport, run_preflight
from efold.controller.rundirs.interrupt import exit_status
from efold.errors import EfoldError

# How many failing checkpoints the summary names (the rest are counted; --json has all).
MAX_NAMED_FAILURES = 10


def summary_lines(report: PreflightReport) -> Iterator[str]:
    """The verdict, then the counts: slots and eligible ones, checkpoints, failures by
    code, inventory-infeasible checkpoints, snapshot bytes (each checkpoint once) and
    the largest file."""
    failed = [s for s in report.slots if not s.ok]
    if report.interrupted is not None:
        verdict = f"interrupted (signal {report.interrupted})"
    else:
        verdict = "ok" if report.ok else f"FAILED ({len(failed)} slots failed)"
    yield f"preflight: {verdict}"
    eligible = sum(s.eligible for s in report.slots)
    yield (f"slots: {len(report.slots)} (eligible {eligible}), "
           f"checkpoints: {report.checkpoints}")
    codes = Counter(s.code or "failed" for s in failed)
    yield "failures: " + (", ".join(f"{code} {n}" for code, n in sorted(codes.items()))
                          or "none")
    failing = sorted({s.checkpoint for s in failed})
    for checkpoint in failing[:MAX_NAMED_FAILURES]:
        yield f"  failed: {checkpoint}"
    if len(failing) > MAX_NAMED_FAILURES:
        yield f"  ... and {len(failing) - MAX_NAMED_FAILURES} more (--json lists every slot)"
    yield f"inventory-infeasible checkpoints: {len(report.infeasible())}"
    per_checkpoint: dict[str, int] = {}
    for s in report.slots:  # the slots of one checkpoint share its snapshot
        per_checkpoint[s.checkpoint] = max(per_checkpoint.get(s.checkpoint, 0), s.bytes)
    largest = max(report.slots, key=lambda s: s.largest_bytes, default=None)
    yield (f"bytes: {sum(per_checkpoint.values()):,} in snapshots, largest file "
           + (f"{largest.largest_bytes:,} ({largest.checkpoint})" if largest else "-"))


@click.command("preflight")
@registration_options()
@click.option("--json", "as_json", is_flag=True,
              help="Print the full report (one JSON object, every slot) instead of the "
                   "summary.")
def command(registration: str, sha256: str, as_json: bool) -> None:
    """Run only the prep children in a private temporary root (removed afterwards),
    dry-restore every snapshot and print a summary (--json: the report per slot).

    The summary: the verdict; slots and eligible ones; failures by code and the failing
    checkpoints; inventory-infeasible checkpoints; snapshot bytes and the largest file.
    Exits 1 if any eligible slot fails (tree limits, restore, watchdog), 130/143 when
    interrupted."""
    try:
        loaded = load_registration(registration, sha256)
        report = run_preflight(loaded.registration, loaded.data)
    except EfoldError as exc:
        refuse(exc)
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(report), indent=2))
    else:
        for line in summary_lines(report):
            click.echo(line)
    if report.interrupted is not None:
        raise SystemExit(exit_status(report.interrupted))
    if not report.ok:
        raise SystemExit(1)
