"""``efold-controller pilot``: run a campaign end to end."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import click

from efold.controller.campaigns.clean_source import require_clean_source
from efold.controller.campaigns.design import refuse_output_inside_builds
from efold.controller.campaigns.local_models import LocalModels
from efold.controller.campaigns.profiles import SERVER_PRESETS
from efold.controller.campaigns.registration import REGISTRATION_NAME, LoadedRegistration
from efold.controller.campaigns.subset import Subset
from efold.controller.commands._options import (
    campaign_option,
    chosen_route,
    pilot_registration,
    real_route_options,
    refusal_for,
    registration_options,
    subset_options,
)
from efold.controller.errors import ControllerError
from efold.controller.pilot.local_server import check_local_servers
from efold.controller.pilot.pilot import Dispatch
from efold.controller.pilot.pilot_view import (
    Verbosity,
    end_of_run,
    output_options,
    run_with_progress,
    tell_containment,
    verbosity_of,
)
from efold.controller.pilot.smoke import require_smoke
from efold.controller.processes.launcher import DEFAULT_PROGRAM
from efold.controller.processes.template import Launcher
from efold.controller.processes.template_spawn import EarlyTemplate
from efold.controller.rundirs.authorize_run import LOCAL_GRANT, load_grant
from efold.controller.rundirs.continuation import choose_run, refuse_no_run
from efold.controller.rundirs.interrupt import ending
from efold.controller.rundirs.run_index import is_bare_claim
from efold.controller.rundirs.run_setup import check_containment, check_real_grant
from efold.controller.rundirs.runroot import (
    DEFAULT_RUNS_ROOT,
    claim_leased_run_dir,
    new_run_path,
    unclaim_run_dir,
)
from efold.controller.rundirs.suggest import suggest, suggest_prune
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.protocol.tasks import RouteKind
from efold.registry.journal import JOURNAL_NAME
from efold.registry.lease import Lease, acquire_lease


@click.command("pilot")
@click.option("--faux", is_flag=True, help="Offline: the faux extractive reader, no credential.")
@click.option("--local", is_flag=True,
              help="Models on this machine (loopback, no credential): no keygen or signed "
                   "authorization; the run smokes itself first.")
@click.option("--real", is_flag=True, help="The campaign's real route (needs a passing `smoke`).")
@click.option("--reader", "reader_url", default=None, metavar="URL",
              help="A reader model on this machine: its OpenAI-compatible base URL "
                   "(http://127.0.0.1:PORT/v1), with --model.")
@click.option("--model", "reader_model", default=None, metavar="NAME",
              help="--reader's model, by the name its server serves it under.")
@click.option("--summariser", "summariser_url", default=None, metavar="URL",
              help="A summariser model on this machine (base URL), with --summariser-model: "
                   "it writes the compaction arms' summaries and ledger-cold's "
                   "extractions, and answers the own calls of compaction proxies.")
@click.option("--summariser-model", "summariser_model", default=None, metavar="NAME",
              help="--summariser's model, by the name its server serves it under.")
@click.option("--server", type=click.Choice(list(SERVER_PRESETS)), default=None,
              help="The kind of server behind --reader/--summariser (its API, streaming and "
                   "reply-limit field); default openai-compatible.")
@registration_options(required=False)
@campaign_option
@subset_options
@click.option("--runs", "runs_root", default=None, type=click.Path(file_okay=False),
              help="Parent of the new run directory (default: ./efold-runs).")
@click.option("--run-dir", "run_dir", default=None, type=click.Path(file_okay=False),
              help="Exact new run directory (must not exist; --real: the authorization's "
                   "output root).")
@real_route_options
@click.option("--keep-answers", is_flag=True,
              help="--real: keep the reader's answers in the run's owner-only answers.jsonl "
                   "(reports never carry them; without it only their hashes are kept).")
@click.option("--launcher", type=click.Choice(["template", "spawn"]), default="template",
              show_default=True,
              help="How children start: forked from a pre-imported fork-server template "
                   "(each still a fresh, contained, verified process), or each spawned "
                   "as a new interpreter.")
@click.option("--require-clean-source", "clean_source", is_flag=True,
              help="Refuse (fold_source_unclean) unless every command, proxy and plugin "
                   "fold's files are committed in their git checkout (any route).")
@click.option("--continue", "continue_run", default=None, metavar="RUN",
              type=click.Path(file_okay=False),
              help="Continue RUN (interrupted, stopped, crashed and reaped, or a part): a new "
                   "run of RUN's registration that runs only the slots its chain has no "
                   "terminal receipt for, under the cap the chain has left.")
@click.option("--slots", "slots", default=None, metavar="A:B",
              help="Run only schedule positions A to B-1 (from 0), as a first link to "
                   "continue later (with --continue: of what is left, only those).")
@click.option("--chunk", "chunk", default=None, metavar="K/N",
              help="Run only the K-th of N groups of whole traces (so each checkpoint is "
                   "prepared once), as --slots does.")
@output_options
@click.option("--json", "as_json", is_flag=True,
              help="End with one machine-readable line: a JSON object with the run "
                   "directory, status, stop code, slot counts and settled spend.")
def command(faux: bool, local: bool, real: bool, reader_url: str | None,
            reader_model: str | None, summariser_url: str | None,
            summariser_model: str | None, server: str | None,
            registration: str | None, sha256: str | None,
            campaign: str | None, subset: Subset | None,
            runs_root: str | None, run_dir: str | None, authorization: str | None,
            trust: tuple[str, ...], process_group_ok: bool, keep_answers: bool,
            launcher: Launcher, clean_source: bool, continue_run: str | None,
            slots: str | None,
            chunk: str | None, quiet: bool,
            verbose: bool, no_progress: bool, as_json: bool) -> None:
    """Run a campaign: `pilot --faux` alone runs the bundled default campaign.

    Every run gets a new directory (printed first); nothing is resumed or reused.
    Ctrl-C (or SIGTERM) closes admission, contains every child in flight, writes the
    reports with an "interrupted" banner and exits 130 (143).

    --campaign NAME|FILE registers a campaign and runs it in one step; --roles,
    --traces, --probes and --limit run a subset of it (or of --registration) as a new
    registration. Either way the registration made is printed after the run: line
    (registration: RUN/registration.json, sha256: SHA; not with --quiet).

    Output: in a terminal a progress bar per phase (rate, ETA, running accuracy and
    settled spend); otherwise (a pipe, CI) or with --no-progress plain lines, one when a
    phase starts and ends and one per tenth of it. --quiet prints only the run: line, the
    report paths, a stop on stderr and the --json line; --verbose adds one line per
    checkpoint and per slot on stderr. Stdout always starts with the run: line and, with
    --json, ends with the JSON line. Every run also writes <run>/controller.log (UTC,
    owner-only, content-free: one line per phase, checkpoint, slot, stop and
    containment episode).

    --real runs a registration's real route: it needs --registration/--sha256, --run-dir
    (the directory the authorization binds), --authorization and --trust, the provider
    account id in EFOLD_ACCOUNT_ID, the credential variable the reader's profile names,
    and a passing `efold-controller smoke` of the same registration under the same
    parent directory. The authorization is consumed once, before any child starts.

    --local (or no route flag, for a campaign whose every model is on loopback without a
    credential) runs a local route in one command: nothing can be billed, so no keygen,
    registration file or signed authorization; a local authorization is minted and
    burned like the faux one. Each server is asked for its model list first; the run
    then smokes itself (its first slot of every role) and admits the rest only if that
    passed (else it stops: smoke_failed). --reader URL --model NAME (and --summariser
    URL --summariser-model NAME, --server KIND) put models on this machine into the
    campaign without writing a file.

    --continue RUN runs, as a new run linked to RUN (RUN's registration, on the route
    given), every slot of the plan that no run of RUN's chain has a terminal receipt for
    (completed, invalid or skipped), in schedule order, under the registration's cap
    minus everything the chain settled and retained; `plan --continue RUN` shows it
    first. RUN must be reconciled, its lease free, and not continued already
    (run_already_continued). A real continuation needs an authorization made by
    `authorize --continue RUN` (it binds the continuation's slots and cap). The reports
    of a continuation, and `aggregate` on any of its links, are the whole chain's.
    --slots A:B and --chunk K/N run a part of the schedule on purpose; --continue runs
    the rest.

    Exit status: 0 complete, 1 complete but a role measured nothing (every slot of
    it ended before its question was answered: the roles and their codes are printed),
    2 refused, 3 stopped (a stop code is printed), 130/143 interrupted.
    """

    if continue_run is not None and (registration is not None or campaign is not None
                                     or subset is not None):
        raise click.UsageError("--continue RUN runs RUN's registration: no --registration, "
                               "--campaign or subset options")
    if slots is not None and chunk is not None:
        raise click.UsageError("--slots and --chunk are exclusive")
    if faux + local + real > 1:
        raise click.UsageError("choose one of --faux (offline), --local (models on this "
                               "machine) and --real (a paid route)")
    models = LocalModels(
        reader=_pair(reader_url, reader_model, "--reader", "--model"),
        summariser=_pair(summariser_url, summariser_model, "--summariser",
                         "--summariser-model"), server=server)
    if server is not None and not models:
        raise click.UsageError("--server describes the server of --reader or --summariser")
    if models and (registration is not None or real or continue_run is not None):
        raise click.UsageError("--reader/--summariser put local models into a campaign "
                               "(--campaign, or the default one), never into a registration "
                               "or a --real run")
    if (registration is None) != (sha256 is None):
        raise click.UsageError("--registration and --sha256 go together")
    if run_dir is not None and runs_root is not None:
        raise click.UsageError("--run-dir and --runs are exclusive (--run-dir names the run, "
                               "--runs the root a new run is made in)")
    if keep_answers and not real:
        raise click.UsageError("--keep-answers applies to --real runs")
    if process_group_ok and not real:
        raise click.UsageError("--process-group-containment applies to --real runs (an "
                               "offline run falls back to process groups by itself)")
    if faux and (authorization is not None or trust):
        # A faux run mints its own faux authorization: an operator's would be ignored.
        given = [name for name, on in (("--authorization", authorization is not None),
                                       ("--trust", bool(trust))) if on]
        raise click.UsageError(f"{' and '.join(given)} apply to --real runs (a --faux run "
                               "authorizes itself)")
    verbosity = verbosity_of(quiet, verbose)
    refuse_ = refusal_for(as_json)  # under --json, a refusal is a JSON line too
    early = _early_template(launcher, faux=faux, local=local or bool(models), real=real)
    dispatch = Dispatch(launcher=launcher)
    # A continuation holds the continued run's lease from before it claims its own
    # directory until it has linked to it (``open_run``): a second continuation of the
    # same run is refused here, before it claims a directory or consumes anything.
    continued: Lease | None = None
    try:
        if continue_run is not None:
            refuse_no_run(Path(continue_run).absolute())
            continued = acquire_lease(continue_run)
        made = None if continue_run is not None else pilot_registration(
            campaign=campaign, registration=registration, sha256=sha256, subset=subset,
            real=real, models=models)
        try:
            chosen = choose_run(None if made is None else
                                LoadedRegistration(made.registration, made.data),
                                continue_run=continue_run, slots=slots, chunk=chunk,
                                holding=continued is not None)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        reg, reg_bytes = chosen.loaded.registration, chosen.loaded.data
        if clean_source:
            require_clean_source(reg.campaign.roles)
        route = chosen_route(reg.campaign, faux=faux, local=local, real=real,
                             command="pilot")
        if route == "local":
            check_local_servers(reg.campaign)
            dispatch = Dispatch(grant=LOCAL_GRANT, launcher=launcher)
        if route == "real":
            if run_dir is None:
                raise ControllerError(Code.LOOKUP_PILOT_REAL_ROUTE_UNAVAILABLE,
                                      "--real needs --run-dir: the directory the "
                                      "authorization binds")
            grant = load_grant(reg, authorization=authorization, trusted=trust,
                               environ=os.environ)
            require_smoke(reg, sha256_hex(reg_bytes), Path(run_dir))
            # Every refusal the consumption would give, before the directory exists.
            check_real_grant(reg, reg_bytes, Path(run_dir), grant, part=chosen.part)
            dispatch = Dispatch(grant=grant, keep_answers=keep_answers, launcher=launcher,
                                process_group_ok=process_group_ok)
        containment = check_containment(reg, real=real, process_group_ok=process_group_ok)
        dispatch = replace(dispatch, part=chosen.part, continued=continued, early=early)
        beside = None if continue_run is None else Path(continue_run).absolute().parent
        refuse_output_inside_builds(reg.campaign.roles,
                                    run_dir or runs_root or beside or DEFAULT_RUNS_ROOT,
                                    "the run directory" if run_dir else "the runs root")
        # Leased from the claim on: until its journal exists, the directory reads as a
        # live claim (never as one a stopped controller left, for prune to remove).
        run, claimed = claim_leased_run_dir(run_dir or new_run_path(
            runs_root or beside or DEFAULT_RUNS_ROOT, reg.campaign.name))
    except EfoldError as exc:
        if continued is not None:
            continued.release()
        refuse_(exc.code.value, exc.detail)
    except BaseException:
        if continued is not None:
            continued.release()
        raise
    try:
        dispatch = replace(dispatch, claimed=claimed)
        click.echo(f"run: {run}")
        tell_containment(containment, verbosity)
        # The run publishes these bytes as its registration.json. --quiet prints only the
        # result: the registration stays in the run directory.
        link = chosen.part.link if chosen.part is not None else None
        if link is not None and verbosity is not Verbosity.QUIET:
            click.echo(f"continues: {link.previous} (link {link.index} of its chain: "
                       f"{len(dispatch.part.slots) if dispatch.part else 0:,} slots)")
        if made is not None and made.made and verbosity is not Verbosity.QUIET:
            click.echo(f"registration: {run / REGISTRATION_NAME}")
            click.echo(f"sha256: {sha256_hex(reg_bytes)}")
        outcome = run_with_progress(reg, reg_bytes, run, show=not no_progress,
                                    dispatch=dispatch, verbosity=verbosity)
    except EfoldError as exc:
        _undo_claim(run, claimed)  # refused before it recorded anything: nothing to keep
        refuse_(exc.code.value, exc.detail)
    except KeyboardInterrupt:
        # Only before the run's signal watcher is up (or after it closed): whatever was
        # launched was contained on the way out.
        removed = _undo_claim(run, claimed)
        click.echo(_interrupted_early(run, removed), err=True)
        if as_json:  # the last line, whatever the outcome
            click.echo(json.dumps({"run": None if removed else str(run),
                                   "status": "interrupted", "code": None,
                                   "signal": int(signal.SIGINT)}))
        raise SystemExit(130) from None
    finally:  # released when linked, or when the run let go; else here
        if continued is not None:
            continued.release()
        claimed.release()
    with ending():
        status = end_of_run(outcome, verbosity, as_json)
    if status:
        raise SystemExit(status)


def _undo_claim(run: Path, claimed: Lease) -> bool:
    """Remove the directory this command claimed when the run stopped before its
    journal: it recorded and launched nothing (every launch is journaled first). Done
    under the claim's lease (let go after), so that no prune can take it meanwhile.
    False when it has a journal, or holds anything a claim does not leave."""
    try:
        return not (run / JOURNAL_NAME).exists() and unclaim_run_dir(run)
    finally:
        claimed.release()


def _interrupted_early(run: Path, removed: bool) -> str:
    """What an interruption before the run's own handling left."""
    if removed:
        return f"interrupted: nothing was recorded or launched in {run}, so it was removed"
    if not (run / JOURNAL_NAME).exists():
        return (f"interrupted: {run} was claimed but nothing was recorded or launched in "
                f"it (it has no journal); {_removes(run)}")
    return f"interrupted: {run} is incomplete; `{suggest('recover', run)}` shows what it left"


def _removes(run: Path) -> str:
    return f"`{suggest_prune(run)}` removes it" if is_bare_claim(run) else "it can be removed"


def _early_template(launcher: Launcher, *, faux: bool, local: bool,
                    real: bool) -> EarlyTemplate | None:
    """The run's template, started now when its routes are known from the flags, so
    that its imports overlap this command's own start (the registration's checks, the
    run's setup: about 0.2 s); killed when the command ends unless the run took it."""
    routes: RouteKind | None = "faux" if faux else "local" if local else "real" if real \
        else None
    if launcher != "template" or routes is None:
        return None
    # SIGTERM before the run's own watcher is up ends the command with the status its
    # default action gives (143), but through this context's close, so that the
    # template is killed and reaped here rather than left to notice our death. Both
    # are registered before the spawn: the context closes last in, first out.
    ctx = click.get_current_context()
    previous = signal.signal(signal.SIGTERM, _terminated)
    ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))
    early = EarlyTemplate()
    ctx.call_on_close(early.discard)
    early.start(routes, program=DEFAULT_PROGRAM)
    return early


def _terminated(signum: int, frame: object) -> NoReturn:
    raise SystemExit(128 + signum)


def _pair(url: str | None, model: str | None, url_flag: str,
          model_flag: str) -> tuple[str, str] | None:
    if (url is None) != (model is None):
        raise click.UsageError(f"{url_flag} URL and {model_flag} NAME go together")
    return None if url is None or model is None else (url.rstrip("/"), model)
