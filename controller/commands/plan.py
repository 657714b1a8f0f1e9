"""``efold-controller plan --registration F --sha256 S``: slots, schedule, cost estimate.

Which checkpoints are inventory-infeasible (their first request can never fit the input
envelope) is learned the only safe way: every checkpoint is built by a contained prep
child in a private temporary root, removed afterwards (the same machinery as
``preflight``). No fold code runs in this process."""

from __future__ import annotations

import click
import msgspec

from efold.controller.commands._options import refuse, registration_options
from efold.controller.interrupt import exit_status
from efold.controller.plan import estimate, plan_for
from efold.controller.preflight import run_preflight
from efold.controller.profiles import profile_catalog
from efold.controller.registration import load_registration
from efold.errors import EfoldError
from efold.guard import expected_slot_units, units_to_usd


@click.command("plan")
@registration_options()
@click.option("--json", "as_json", is_flag=True, help="Print the plan summary as JSON.")
def command(registration: str, sha256: str, as_json: bool) -> None:
    """Show the slots, schedule digest, workload and cost estimate. No model call; the
    checkpoints are built in contained prep children to find inventory-infeasible ones.

    Exit status: 0 printed (unprepared checkpoints are listed, not an error), 2 usage
    error or refused, 130/143 interrupted."""
    try:
        loaded = load_registration(registration, sha256)
        reg = loaded.registration
        plan = plan_for(reg)
        prepared = run_preflight(reg, loaded.data)
        reader = reg.campaign.reader
        est = estimate(plan, expected_slot_units(reader.provider, reader.model,
                                                 catalog=profile_catalog(reader)),
                       reg.campaign.budgets.max_requests, prepared.infeasible())
    except EfoldError as exc:
        refuse(exc)
    if prepared.interrupted is not None:
        click.echo("interrupted: no estimate (the checkpoints were not all prepared)", err=True)
        raise SystemExit(exit_status(prepared.interrupted))
    roles = plan.roles  # campaign order, as every report
    traces = sorted({s.trace_id for s in plan.slots})
    costs = {
        "expected_per_slot_usd": units_to_usd(est.expected_units_per_slot),
        "expected_usd": units_to_usd(est.expected_units),
        "rmax_usd": units_to_usd(est.rmax_units),
        "full_upfront_usd": units_to_usd(est.full_upfront_units),
        "cap_usd": units_to_usd(est.cap_units),
        "cap_minus_rmax_usd": units_to_usd(est.cap_minus_rmax_units),
        "cap_over_expected": est.cap_over_expected,
    }
    # Checkpoint -> (controller's code, what its fold said: informational), first slot.
    unprepared: dict[str, dict[str, object]] = {}
    for s in prepared.slots:
        if s.feasible is None and s.checkpoint not in unprepared:
            unprepared[s.checkpoint] = {"code": s.code, "cause": msgspec.to_builtins(s.cause)}
    summary: dict[str, object] = {
        "campaign": plan.campaign,
        "slots": len(plan.slots),
        "eligible": est.eligible_slots,
        "skipped_inventory_infeasible": est.skipped_slots,
        "roles": roles,
        "traces": len(traces),
        "repeats": plan.repeats,
        "checkpoints": len({s.checkpoint for s in plan.slots if s.eligible}),
        # Checkpoints whose prep child failed: their slots will be refused; `preflight`
        # says why, per slot.
        "checkpoints_unprepared": len(unprepared),
        "schedule_sha256": plan.schedule_sha256,
        "estimate": costs,
        "unprepared": unprepared,
    }
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(summary), indent=2))
        return
    for key, value in summary.items():
        if key not in ("estimate", "unprepared"):
            click.echo(f"{key}: {value}")
    for checkpoint, why in unprepared.items():
        cause = why["cause"]
        said = (f"; its fold said {cause['code']} ({cause['detail']})"
                if isinstance(cause, dict) else "")
        click.echo(f"unprepared {checkpoint}: {why['code']}{said}")
    for key, cost in costs.items():
        click.echo(f"estimate.{key}: {cost}")
