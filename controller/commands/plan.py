"""``efold-controller plan --registration F --sha256 S``: slots, schedule, cost estimate.

Which checkpoints are inventory-infeasible (their first request can never fit the input
envelope) is learned the only safe way: every checkpoint is built by a contained prep
child in a private temporary root, removed afterwards (the same machinery as
``preflight``). No fold code runs in this process."""

from __future__ import annotations

from decimal import Decimal

import click
import msgspec

from efold.controller.campaigns.plan import plan_estimate, plan_for
from efold.controller.campaigns.price_profiles import PriceProfile, parse_model, price_profiles
from efold.controller.campaigns.registration import load_registration
from efold.controller.commands._options import refuse, registration_options
from efold.controller.pilot.pilot_view import aligned_amounts
from efold.controller.pilot.preflight import run_preflight
from efold.controller.rundirs.continuation import plan_continuation
from efold.controller.rundirs.interrupt import exit_status
from efold.errors import EfoldError
from efold.guard import units_to_usd


@click.command("plan")
@registration_options(required=False)
@click.option("--continue", "continue_run", default=None, metavar="RUN",
              type=click.Path(file_okay=False),
              help="Instead: what a continuation of RUN would run (its slots without a "
                   "terminal receipt, in schedule order) and the cap it has left.")
@click.option("--screening", "screening", multiple=True, metavar="PROVIDER/MODEL",
              help="Also price the plan on this reader, a cheaper screening alternate "
                   "(repeatable); never pooled with the registered one.")
@click.option("--sensitivity", "sensitivity", multiple=True, metavar="PROVIDER/MODEL",
              help="Also price the plan on this reader, a dearer sensitivity profile "
                   "(repeatable); never pooled.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan summary as JSON.")
def command(registration: str | None, sha256: str | None, continue_run: str | None,
            screening: tuple[str, ...], sensitivity: tuple[str, ...],
            as_json: bool) -> None:
    """Show the slots, schedule digest, workload and cost estimate. No model call; the
    checkpoints are built in contained prep children to find inventory-infeasible ones.

    `--continue RUN` shows instead what a continuation of RUN would run: the planned
    slots without a terminal receipt (completed, invalid or skipped), in the old
    schedule order, and the cap left after everything RUN settled and retained, against
    Rmax. It reads RUN only, and refuses a run whose lease is held (lease_held), that
    `recover` would not call reconciled (run_unreconciled), or whose cap left is below
    Rmax (cap_below_rmax).

    --screening and --sensitivity price the same workload on other readers (the
    registered reader's catalog, else the bundled one), each its own profile after the
    registered reader's, never pooled; a model no catalog prices is listed as unknown.

    Exit status: 0 printed (unprepared checkpoints are listed, not an error), 2 usage
    error or refused, 130/143 interrupted."""
    if continue_run is not None:
        if registration is not None or sha256 is not None:
            raise click.UsageError("--continue RUN takes its registration from RUN: no "
                                   "--registration or --sha256")
        if screening or sensitivity:
            raise click.UsageError("--screening and --sensitivity price a registration's "
                                   "plan: give --registration and --sha256")
        _show_continuation(continue_run, as_json)
        return
    if registration is None or sha256 is None:
        raise click.UsageError("give --registration FILE and --sha256 SHA (or --continue RUN)")
    asked = (*screening, *sensitivity)
    for model in asked:
        try:
            parse_model(model)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    if len(set(asked)) != len(asked):
        raise click.UsageError("each --screening and --sensitivity model once")
    try:
        loaded = load_registration(registration, sha256)
        reg = loaded.registration
        plan = plan_for(reg)
        prepared = run_preflight(reg, loaded.data)
        reader = reg.campaign.reader
        est = plan_estimate(reg, plan, prepared.infeasible())
        profiles = price_profiles(reg, plan, prepared.infeasible(), screening=screening,
                                  sensitivity=sensitivity)
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
        # The lines E sums, each on its own route: only those that apply.
        "expected_lines_usd": {name: units_to_usd(units)
                               for name, units in est.expected_lines().items()},
        "rmax_usd": units_to_usd(est.rmax_units),
        "full_upfront_usd": units_to_usd(est.full_upfront_units),
        "cap_usd": units_to_usd(est.cap_units),
        "cap_minus_rmax_usd": units_to_usd(est.cap_minus_rmax_units),
        "cap_over_expected": est.cap_over_expected,
    }
    # What each line is made of, for the human output's meanings (not in the JSON).
    parts: dict[str, object] = {"summary_checkpoints": est.summary_checkpoints,
                                "summary_requests": est.summary_requests}
    if est.summary_units_per_request is not None:
        parts["summary_per_request_usd"] = units_to_usd(est.summary_units_per_request)
    if est.judge_units_per_slot is not None:
        parts["judge_per_slot_usd"] = units_to_usd(est.judge_units_per_slot)
    # Lines whose money is not the reader's kind (the money header is the reader's): a
    # summariser is never faux; a judge may be either.
    judge = reg.campaign.judge
    parts["faux_lines"] = {"reader": reader.is_faux, "summariser": False,
                           "judge": judge is not None and judge.is_faux}
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
        # Null: registered before probe modes (the lookup offered wherever a store is).
        "probe_mode": None if isinstance(reg.campaign.probe_mode, msgspec.UnsetType)
        else reg.campaign.probe_mode,
        "checkpoints": len({s.checkpoint for s in plan.slots if s.eligible}),
        # Checkpoints whose prep child failed: their slots will be refused; `preflight`
        # says why, per slot.
        "checkpoints_unprepared": len(unprepared),
        "schedule_sha256": plan.schedule_sha256,
        "estimate": costs,
        "unprepared": unprepared,
    }
    if screening or sensitivity:
        summary["profiles"] = [_profile_json(p) for p in profiles]
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(summary), indent=2))
        return
    for line in describe_plan(summary, unprepared, faux=reader.is_faux, parts=parts):
        click.echo(line)
    if screening or sensitivity:
        for line in describe_profiles(profiles):
            click.echo(line)


def _profile_json(p: PriceProfile) -> dict[str, object]:
    return {"kind": p.kind, "reader": p.reader, "money": "faux" if p.faux else "USD",
            "expected_usd": None if p.expected_units is None
            else units_to_usd(p.expected_units),
            "per_slot_usd": None if p.per_slot_units is None
            else units_to_usd(p.per_slot_units),
            "unknown": p.unknown}


def describe_profiles(profiles: list[PriceProfile]) -> list[str]:
    """One line per reader: the same workload priced on it, never summed with another."""
    lines = ["price profiles (the same workload on each reader; never pooled):"]
    width = max(len(p.reader) for p in profiles)
    for p in profiles:
        if p.expected_units is None or p.per_slot_units is None:
            figures = f"unknown: {p.unknown}"
        else:
            unit = "faux units" if p.faux else "USD"
            figures = (f"expected {units_to_usd(p.expected_units)} {unit} "
                       f"({units_to_usd(p.per_slot_units)} per slot)")
        lines.append(f"  {p.kind:<11} {p.reader:<{width}}  {figures}")
    return lines


def _show_continuation(run: str, as_json: bool) -> None:
    try:
        cont = plan_continuation(run)
    except EfoldError as exc:
        refuse(exc)
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(cont), indent=2))
        return
    unit = "faux units, no money is spent" if cont.faux else "USD"
    figures = {"cap": cont.cap_units, "settled": cont.settled_units,
               "retained": cont.retained_units, "left": cont.remaining_cap_units,
               "Rmax": cont.rmax_units}
    amounts = dict(zip(figures, aligned_amounts([units_to_usd(v) for v in figures.values()]),
                       strict=True))
    click.echo(f"continues {cont.run} (registration sha256 {cont.registration_sha256})")
    click.echo(f"  link {cont.link.index} of its chain ({cont.links} "
               f"{'run' if cont.links == 1 else 'runs'} so far)")
    click.echo(f"  slots: {len(cont.remaining):,} of {cont.planned:,} to run "
               f"({cont.terminal:,} have a terminal receipt in the chain: completed, "
               "invalid or skipped)")
    click.echo(f"money ({unit}):")
    for name, meaning in (("cap", "the registration's cap"),
                          ("settled", "what the chain settled, every caller"),
                          ("retained", "what it retained (lost, aborted or left open by a "
                                       "crash: never assumed refunded)"),
                          ("left", "cap - settled - retained: the continuation's cap"),
                          ("Rmax", "one maximum reservation: the least the cap left must "
                                   "hold")):
        click.echo(f"  {name:<8} {amounts[name]:>16}  {meaning}")


def describe_plan(summary: dict[str, object], unprepared: dict[str, dict[str, object]], *,
                  faux: bool, parts: dict[str, object] | None = None) -> list[str]:
    """The plan for a person: the workload, the money (what each figure means, faux
    money labelled as such, decimals aligned; the lines of the expected spend under it),
    then anything surprising. ``parts``: what the summariser and judge lines are made of
    (their meanings say less without it)."""
    costs = summary["estimate"]
    assert isinstance(costs, dict)
    lines_usd = costs.get("expected_lines_usd") or {}
    assert isinstance(lines_usd, dict)
    parts = parts or {}
    roles = summary["roles"]
    assert isinstance(roles, list)
    lines = [
        f"campaign {summary['campaign']}: {summary['slots']} slots, {summary['eligible']} "
        f"eligible, {summary['skipped_inventory_infeasible']} skipped (inventory-infeasible)",
        f"  roles ({len(roles)}, in report order): {', '.join(roles)}",
        f"  probe mode {summary.get('probe_mode') or 'unknown (registered before modes)'}"
        f" · traces {summary['traces']} · repeats "
        f"{summary['repeats']} · checkpoints "
        f"{summary['checkpoints']} ({summary['checkpoints_unprepared']} unprepared)",
        f"  schedule sha256 {summary['schedule_sha256']}",
        "money" + (" (faux reader: faux units, no money is spent)" if faux else " (USD)") + ":",
    ]
    if set(lines_usd) <= {"reader"}:
        expected = [("expected", costs["expected_usd"], "the likely spend: "
                     + _line_meaning("reader", summary, costs, parts))]
    else:
        expected = [("expected", costs["expected_usd"], "the likely spend, the sum of:")]
        faux_lines = parts.get("faux_lines")
        for name, value in lines_usd.items():
            meaning = _line_meaning(name, summary, costs, parts)
            line_faux = faux_lines.get(name, faux) if isinstance(faux_lines, dict) else faux
            if line_faux != faux:  # not the money the header names
                meaning += (" (faux units, no money is spent)" if line_faux
                            else " (USD: real money)")
            expected.append((f"  {name}", value, meaning))
    rows = [
        *expected,
        ("cap", costs["cap_usd"], f"the hard bound; cap / expected = {costs['cap_over_expected']}"),
        ("one reservation", costs["rmax_usd"], "Rmax: what each request holds until it settles"),
        ("cap - Rmax", costs["cap_minus_rmax_usd"], "what is left to admit after one hold"),
        ("full upfront", costs["full_upfront_usd"], "every request of every slot at Rmax: a "
         "worst case to compare with, never held at once"),
    ]
    width = max(len(_whole(str(v))) for _, v, _ in rows)
    for name, value, meaning in rows:
        text = str(value)
        lines.append(f"  {name:<16} {_whole(text):>{width}}{_fraction(text):<8} {meaning}")
    warnings = plan_warnings(summary, unprepared)
    if warnings:
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in warnings)
    for checkpoint, why in unprepared.items():
        cause = why["cause"]
        said = (f"; its fold said {cause['code']} ({cause['detail']})"
                if isinstance(cause, dict) else "")
        lines.append(f"unprepared {checkpoint}: {why['code']}{said}")
    return lines


def _line_meaning(name: str, summary: dict[str, object], costs: dict[str, object],
                  parts: dict[str, object]) -> str:
    if name == "reader":
        return (f"the reader: {summary['eligible']} eligible slots x "
                f"{costs['expected_per_slot_usd']} each")
    if name == "summariser":
        each = parts.get("summary_per_request_usd")
        return (f"summary requests of the prep children: {parts.get('summary_requests')} "
                f"over {parts.get('summary_checkpoints')} checkpoints"
                + (f" x {each} each" if each is not None else ""))
    if name == "judge":
        each = parts.get("judge_per_slot_usd")
        return (f"the judge: one request per answered slot, {summary['eligible']}"
                + (f" x {each} each" if each is not None else ""))
    return name


def plan_warnings(summary: dict[str, object], unprepared: dict[str, dict[str, object]]
                  ) -> list[str]:
    """What an operator should look at before running the plan."""
    costs = summary["estimate"]
    assert isinstance(costs, dict)
    found: list[str] = []
    ratio = costs["cap_over_expected"]
    if isinstance(ratio, str) and Decimal(ratio) < 1:
        found.append("the cap is below the expected spend: the run will likely stop at the "
                     "cap (not_admitted_cap) before every slot is asked")
    if summary["skipped_inventory_infeasible"]:
        found.append(f"{summary['skipped_inventory_infeasible']} slots are skipped: their "
                     "checkpoints cannot fit the input envelope (they count, never scored)")
    if unprepared:
        found.append(f"{len(unprepared)} checkpoints could not be prepared: their slots "
                     "will be refused (see the unprepared lines below)")
    if not summary["eligible"]:
        found.append("no slot is eligible: the run would ask nothing")
    return found


def _whole(text: str) -> str:
    """``1234.5`` -> ``1,234`` (the integer part, with thousands separators)."""
    whole = text.split(".")[0]
    return f"{int(whole):,}"


def _fraction(text: str) -> str:
    return "." + text.split(".")[1] if "." in text else ""
