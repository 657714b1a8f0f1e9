"""``efold-controller cluster``: a campaign over a Ray cluster (``pip install 'efold[ray]'``).

``cluster pilot`` is the cluster controller (``controller.cluster.dispatch``); ``cluster shard``
is what each node runs for its shard: an ordinary efold controller, started by the
shard's Ray actor, never by hand. Only this command imports Ray, so without the extra
every other command is unchanged and ``cluster`` refuses with ``cluster_unavailable``
(``controller.cli``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import click
import msgspec

from efold.controller.campaigns.registration import Registration, load_registration
from efold.controller.campaigns.shards import ShardTicket
from efold.controller.campaigns.subset import Subset
from efold.controller.cluster.dispatch import (
    PLACE_SECONDS,
    ClusterOutcome,
    ShardResources,
    connect,
    disconnect,
    fetch_shard_runs,
    run_cluster,
)
from efold.controller.cluster.shard_host import default_program
from efold.controller.commands._options import (
    campaign_option,
    chosen_route,
    fail,
    pilot_registration,
    real_route_options,
    refuse,
    registration_options,
    subset_options,
)
from efold.controller.pilot.local_server import check_local_servers
from efold.controller.pilot.pilot import Dispatch
from efold.controller.pilot.pilot_view import (
    end_of_run,
    output_options,
    run_with_progress,
    verbosity_of,
)
from efold.controller.pilot.smoke import require_smoke
from efold.controller.pilot.unmeasured import say_unmeasured, unmeasured
from efold.controller.rundirs.aggregate import publish_reports, run_reports
from efold.controller.rundirs.authorize_run import (
    LOCAL_GRANT,
    RealGrant,
    check_real_route,
    load_grant,
    read_credentials,
)
from efold.controller.rundirs.cluster_collect import Collected, collect_run, read_cluster
from efold.controller.rundirs.cluster_run import (
    ShardOutcome,
    is_cluster_run,
    read_manifest,
    read_shard_ends,
)
from efold.controller.rundirs.interrupt import ending, exit_status
from efold.controller.rundirs.run_setup import check_real_grant
from efold.controller.rundirs.runroot import DEFAULT_RUNS_ROOT, claim_run_dir
from efold.errors import EfoldError
from efold.report import decode_results


@click.group("cluster")
def command() -> None:
    """Run a campaign over a Ray cluster: one ordinary efold controller per shard.

    Without Ray installed (pip install 'efold[ray]') it refuses with
    cluster_unavailable. Exit status: each subcommand's (`cluster pilot --help`); 2 for a
    usage error or a refusal."""


def _resource(ctx: click.Context, param: click.Parameter,
              values: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for value in values:
        name, sep, amount = value.partition("=")
        try:
            out[name] = float(amount) if sep else 1.0
        except ValueError:
            raise click.BadParameter(f"{value!r} is not NAME or NAME=AMOUNT") from None
        if not name or out[name] <= 0:
            raise click.BadParameter(f"{value!r} is not NAME or NAME=AMOUNT (AMOUNT > 0)")
    return out


@command.command("pilot")
@click.option("--faux", is_flag=True,
              help="Offline: the faux extractive reader on every shard.")
@click.option("--local", is_flag=True,
              help="Models on each node's loopback (no credential) on every shard: no "
                   "keygen or signed authorization.")
@click.option("--real", is_flag=True,
              help="The registration's real route on every shard (needs a passing `smoke`, "
                   "--run-dir, --authorization and --trust; each node's shard reads the "
                   "profile's credential variable from its own environment).")
@real_route_options
@click.option("--ray", "address", required=True, metavar="ADDRESS",
              help="The Ray cluster: `auto`, HOST:PORT of its head, or ray://HOST:PORT.")
@click.option("--shards", type=click.IntRange(1, 64), default=None,
              help="How many shards (default: one per node with the resources, at most "
                   "one per checkpoint).")
@registration_options(required=False)
@campaign_option
@subset_options
@click.option("--runs", "runs_root", default=None, type=click.Path(file_okay=False),
              help="Parent of the new cluster run directory (default: ./efold-runs).")
@click.option("--run-dir", "run_dir", default=None, type=click.Path(file_okay=False),
              help="Exact new cluster run directory (must not exist).")
@click.option("--node-runs", "node_runs", default=None, type=click.Path(file_okay=False),
              help="Absolute directory where each node makes its shard's run directory "
                   "(default: the cluster run's parent, the same path on every node).")
@click.option("--cpus", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="CPUs each shard reserves on its node.")
@click.option("--gpus", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="GPUs each shard reserves on its node.")
@click.option("--resource", "resources", multiple=True, callback=_resource,
              metavar="NAME[=AMOUNT]",
              help="A custom Ray resource each shard reserves (repeatable), e.g. "
                   "`--resource llama-server` for nodes that host a local model server.")
@click.option("--place-seconds", "place_seconds", type=click.FloatRange(min=1.0),
              default=PLACE_SECONDS, show_default=True,
              help="How long every shard may wait to be placed on its node and started; "
                   "a shard not placed by then is refused (cluster_unschedulable).")
@click.option("--json", "as_json", is_flag=True,
              help="End with one JSON line: the run, its status, per-shard outcomes.")
def pilot(faux: bool, local: bool, real: bool, authorization: str | None, trust: tuple[str, ...],
          process_group_ok: bool, address: str, shards: int | None,
          registration: str | None, sha256: str | None, campaign: str | None,
          subset: Subset | None, runs_root: str | None, run_dir: str | None,
          node_runs: str | None, cpus: float, gpus: float, resources: dict[str, float],
          place_seconds: float, as_json: bool) -> None:
    """Run a campaign sharded over a Ray cluster.

    The campaign's authorization is consumed once, here; the cap is split into one part
    per shard before anything is dispatched (each part at least one maximum
    reservation, the parts summing to the cap); each shard runs on the node it is bound
    to, as an ordinary efold controller with its own lease, journal, children and
    containment. A shard whose node dies is reported lost, its slots missing; it is
    never re-run elsewhere. The cluster run's directory gets the merged
    results.json, summary.md and report.html.

    --real: the campaign's signed authorization is consumed once, by the cluster run
    (its --run-dir is the authorization's output root); every shard gets its own
    single-use authorization bound to its route, and reads the credential from its
    node's environment (never through Ray): a node without it refuses its shard.

    --local (or no route flag, for a campaign whose every model is on loopback without a
    credential): a local authorization is minted and consumed once, here; each shard
    asks its own node's server for its model list before it starts (a model on each
    node's loopback: place shards next to theirs with --resource).

    Exit status: 0 every shard complete, 1 every shard complete but a role measured
    nothing over the whole run (every slot of it ended before its question was
    answered: the roles and their codes are printed), 2 refused, 3 a shard stopped,
    failed or was lost, 130/143 interrupted.
    """
    if faux + local + real > 1:
        raise click.UsageError("choose one of --faux (offline), --local (models on each "
                               "node's loopback) and --real (a paid route)")
    given = [flag for flag, on in (("--authorization", authorization is not None),
                                   ("--trust", bool(trust)),
                                   ("--process-group-containment", process_group_ok)) if on]
    if given and not real:
        raise click.UsageError(f"{' and '.join(given)} apply to --real runs")
    if (registration is None) != (sha256 is None):
        raise click.UsageError("--registration and --sha256 go together")
    if run_dir is not None and runs_root is not None:
        raise click.UsageError("--run-dir and --runs are exclusive")
    if node_runs is not None and not os.path.isabs(node_runs):
        raise click.UsageError("--node-runs must be an absolute path (it is a path on "
                               "every node)")
    try:
        made = pilot_registration(campaign=campaign, registration=registration,
                                  sha256=sha256, subset=subset, real=real)
        grant = None
        route = chosen_route(made.registration.campaign, faux=faux, local=local,
                             real=real, command="cluster pilot")
        if route == "local":
            grant = LOCAL_GRANT
        if route == "real":
            if run_dir is None:
                fail("lookup_pilot_real_route_unavailable",
                     "--real needs --run-dir: the directory the authorization binds")
            # The cluster run sends nothing: no credential is read here.
            grant = load_grant(made.registration, authorization=authorization,
                               trusted=trust, environ=os.environ, with_credentials=False)
            require_smoke(made.registration, str(sha256), Path(run_dir))
            check_real_grant(made.registration, made.data, Path(run_dir), grant)
        connect(address)
        try:
            outcome = run_cluster(
                made.registration, made.data, shards=shards,
                runs_root=Path(runs_root or DEFAULT_RUNS_ROOT),
                run_dir=Path(run_dir) if run_dir else None,
                node_root=Path(node_runs) if node_runs else None,
                resources=ShardResources(cpus=cpus, gpus=gpus, custom=resources,
                                         place_seconds=place_seconds),
                program=default_program(), echo=click.echo, grant=grant,
                process_group_ok=process_group_ok)
        finally:
            disconnect()
    except EfoldError as exc:
        refuse(exc)
    except KeyboardInterrupt:
        # Only before the shards started (or after they all ended): nothing to contain.
        click.echo("interrupted: no shard was running", err=True)
        raise SystemExit(130) from None
    with ending():  # a late Ctrl-C must not cut the run's last lines short
        status = _report(outcome, as_json)
    raise SystemExit(status)


def _report(outcome: ClusterOutcome, as_json: bool) -> int:
    """Aggregate the cluster run, print its headline and report paths; the exit status."""
    view, _, _ = read_cluster(outcome.run)
    reports = run_reports(view)
    publish_reports(reports, outcome.run)
    results = decode_results(reports["results.json"])
    status = results.status
    run = outcome.run
    click.echo(f"status: {status.verdict if status else 'unknown'}; "
               f"{len(view.receipts)} of {len(view.plan.slots)} slots visited")
    click.echo(f"results: {run / 'results.json'}\nsummary: {run / 'summary.md'}\n"
               f"report:  {run / 'report.html'}")
    code = 0
    if outcome.interrupted is not None:
        code = exit_status(outcome.interrupted)
    elif any(e.outcome is not ShardOutcome.COMPLETE for e in outcome.ends.values()) \
            or status is None or status.verdict != "complete":
        code = 3
    elif say_unmeasured(results):
        code = 1
    if as_json:
        click.echo(msgspec.json.encode({
            "run": str(run), "status": status.verdict if status else None,
            "planned": len(view.plan.slots), "visited": len(view.receipts),
            "shards": {str(i): e.outcome.value for i, e in sorted(outcome.ends.items())},
            # Only a complete run's: a stopped or interrupted one ended early.
            "unmeasured": [role.role for role in unmeasured(results)] if code in (0, 1)
            else [],
        }).decode())
    return code


def shard_dispatch(reg: Registration, ticket: ShardTicket,
                   environ: Mapping[str, str]) -> Dispatch:
    """How a shard reaches its reader: its ticket's route. A real shard reads every
    credential its profiles name from this node's environment (refused, naming the
    variable and the node, where one is missing), under the real route's rules."""
    if ticket.route == "faux":
        return Dispatch(shard=ticket)
    if ticket.route == "local":  # the models are on this node's loopback: ask them first
        check_local_servers(reg.campaign)
        return Dispatch(grant=LOCAL_GRANT, shard=ticket)
    check_real_route(reg, environ)
    credentials = read_credentials(reg, environ, where=f" on node {ticket.node[:12]}")
    grant = RealGrant(artifact=b"", trusted_keys=[], account_id="", credentials=credentials)
    return Dispatch(grant=grant, shard=ticket, process_group_ok=ticket.process_group_ok)


@command.command("shard")
@registration_options(required=True)
@click.option("--ticket", "ticket_path", required=True, type=click.Path(dir_okay=False),
              help="The shard's ticket (written by its Ray actor).")
@output_options
@click.option("--json", "as_json", is_flag=True, help="End with pilot's JSON line.")
def shard(registration: str, sha256: str, ticket_path: str, quiet: bool, verbose: bool,
          no_progress: bool, as_json: bool) -> None:
    """One shard of a cluster run, on its node (started by its Ray actor, never by
    hand): an ordinary pilot of the shard's slots under the shard's part of the cap,
    consuming the shard's single-use authorization. Exit status as `pilot`'s, except
    that a role measuring nothing in this shard alone is no failure (1): the driver
    judges roles over the whole cluster run."""
    verbosity = verbosity_of(quiet, verbose)
    try:
        loaded = load_registration(registration, sha256)
        ticket = msgspec.json.decode(Path(ticket_path).read_bytes(), type=ShardTicket)
        if ticket.registration_sha256 != sha256:
            fail("cluster_records_invalid", "the ticket is for another registration")
        dispatch = shard_dispatch(loaded.registration, ticket, os.environ)
        run = claim_run_dir(ticket.run_dir)
    except (OSError, msgspec.DecodeError) as exc:
        fail("cluster_records_invalid", f"the ticket is unreadable: {exc}")
    except EfoldError as exc:
        refuse(exc)
    click.echo(f"run: {run}")
    try:
        outcome = run_with_progress(loaded.registration, loaded.data, run,
                                    show=not no_progress, dispatch=dispatch,
                                    verbosity=verbosity)
    except EfoldError as exc:
        refuse(exc)
    with ending():
        status = end_of_run(outcome, verbosity, as_json, judge_roles=False)
    if status:
        raise SystemExit(status)


def _collected_line(c: Collected) -> str:
    did = [f"{c.reach.value}"]
    if c.copied:
        did.append("copy replaced from its run")
    if c.ended is not None:
        did.append(f"ended {c.ended.outcome.value}")
    if c.scratch_removed:
        did.append("scratch removed")
    if c.scratch is not None:
        did.append(f"scratch left at {c.scratch}")
    if c.detail:
        did.append(c.detail)
    return f"shard {c.index} (node {c.node[:12]}, {c.run_dir}): " + "; ".join(did)


@command.command("collect")
@click.argument("run", type=click.Path(file_okay=False))
@click.option("--ray", "address", default=None, metavar="ADDRESS",
              help="Ask each shard's own node (a Ray task bound to it) for its run, instead "
                   "of reading its path on this machine: for nodes without a shared "
                   "filesystem.")
@click.option("--reap", "reap_first", is_flag=True,
              help="With --ray: each node first reaps its shard run whose controller is gone "
                   "(as `reap` does on one machine).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: each shard's line.")
def collect(run: str, address: str | None, reap_first: bool, as_json: bool) -> None:
    """Read a cluster run back from its shards' own runs: after its driver was killed,
    the Ray head died, or a shard run was reaped, the copies under shards/ are stale.

    Under the cluster run's lease (refused, lease_held, while its controller lives), it
    re-reads every shard run this machine reaches (this node, or a shared filesystem),
    replaces each stale copy (never a newer with an older), gives a shard that never
    got an end record one read from its own run, removes the scratch directory of every
    ended shard, and writes the merged results.json, summary.md and report.html again.
    A shard it cannot reach is named (its money and visits stay unknown, never zero).

    Exit status: 0 every shard's run read (or it refused with none), 1 a shard not
    reached or still running, 2 refused."""
    path = Path(run)
    if not is_cluster_run(path):
        fail("run_not_found", f"{run} is not a cluster run (no cluster.json)")
    if reap_first and address is None:
        raise click.UsageError("--reap applies with --ray (on one machine: `reap RUN`)")
    try:
        fetched = None
        if address is not None:
            connect(address)
            try:
                fetched = fetch_shard_runs(read_manifest(path), reap_first=reap_first)
            finally:
                disconnect()
        done = collect_run(path, fetched)
        ends = read_shard_ends(path, read_manifest(path))
    except EfoldError as exc:
        refuse(exc)
    if as_json:
        click.echo(msgspec.json.encode({"run": run, "shards": done}).decode())
    else:
        for c in done:
            click.echo(_collected_line(c))
    # A shard without a run of its own is read only if it refused before opening one;
    # else its run is gone or elsewhere (`recover` says NOT reconciled for it too).
    unread = [c for c in done if c.reach.value != "read" and not (
        c.reach.value == "no_run" and c.index in ends
        and ends[c.index].outcome is ShardOutcome.REFUSED)]
    raise SystemExit(1 if unread else 0)
