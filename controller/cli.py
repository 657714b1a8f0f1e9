"""The ``efold-controller`` command: one thin click group; each command lives in its own
module under ``controller/commands`` and is imported only when it runs.

Every command module imports what it needs at its top, so loading one costs its whole
import tree (anyio, trio, psutil, rich...). The group therefore names its commands in a
table with their one-line help: ``efold-controller --help`` imports none of them, and
``efold-controller pilot ...`` imports only ``pilot``. ``tests/controller/test_cli.py``
checks that the table lists every command module with the help line the command itself
declares.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import signal
import sys
import textwrap
import threading
from typing import Final, NoReturn

import click

import efold
from efold.closed_stdout import tolerate_closed_stdout
from efold.errors import Code, interrupted_by

# Command name -> (module under efold.controller.commands, one-line help).
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "aggregate": ("aggregate", "Aggregate RUN's receipts (it changes nothing in RUN)."),
    "analyze": ("analyze", "The paired comparison analyzer: a candidate arm against a "
                "reference arm over the same tasks, with a minimum evidence gate of 20 "
                "paired tasks (never lower)."),
    "authorize": ("authorize", "Sign an authorization binding a registered campaign to a "
                  "cap and a run root."),
    "boundary": ("boundary", "Validate, lock, show and (offline) run boundary cases."),
    "certify": ("certify", "Certify a fold offline: 100 fold cycles with a poisoned "
                "previous summary, closure fixtures and a maximal source, in a contained "
                "child."),
    "cluster": ("cluster", "Run a campaign over a Ray cluster: one ordinary efold "
                "controller per shard."),
    "compare": ("compare", "Compare two runs slot by slot: what changed, paired accuracy, "
                "flips."),
    "corpus": ("corpus", "Generate, validate and inspect traces and their probes."),
    "fold": ("fold", "Check a fold: build it once in a contained prep child and show what "
             "it keeps."),
    "keygen": ("keygen", "Generate an Ed25519 approver key pair."),
    "pilot": ("pilot", "Run a campaign: `pilot --faux` alone runs the bundled default "
              "campaign."),
    "plan": ("plan", "Show the slots, schedule digest, workload and cost estimate."),
    "preflight": ("preflight", "Run only the prep children in a private temporary root "
                  "(removed afterwards), dry-restore every snapshot and print a summary "
                  "(--json: the report per slot)."),
    "prune": ("prune", "Remove old run directories under ROOT (default ./efold-runs) that "
              "are over."),
    "smoke": ("smoke", "Smoke a registration's real route: one slot per role through the "
              "whole flow."),
    "reap": ("reap", "Contain every process a dead controller left behind in RUN_DIR, with "
             "the same proofs as a live containment (pidfd + start time + group), and "
             "journal it."),
    "recover": ("recover", "Report the processes a run left behind."),
    "runs": ("runs", "List the runs under ROOT (default ./efold-runs), newest first."),
    "register": ("register", "Validate a campaign, freeze its digests and write "
                 "registration.json."),
    "show": ("show", "Show one run: status, campaign, counts, spend, each role's accuracy "
                     "and checkpoint size, and its reports."),
    "verify-authorization": ("verify_authorization", "Check an authorization's shape, "
                             "domain, trusted signature and validity window."),
}


# Commands that need an optional extra: command -> (the module it imports, the extra).
OPTIONAL: Final[dict[str, tuple[str, str]]] = {"cluster": ("ray", "ray")}


def load_command(name: str) -> click.Command:
    """The command ``name`` (a key of ``COMMANDS``), imported now. A command whose
    optional extra is not installed loads as one that refuses (exit 2)."""
    try:
        module = importlib.import_module(f"efold.controller.commands.{COMMANDS[name][0]}")
    except ModuleNotFoundError as exc:
        needs, extra = OPTIONAL.get(name, (None, None))
        if needs is None or exc.name != needs:
            raise
        return _unavailable(name, f"{needs} is not installed: pip install 'efold[{extra}]'")
    command: click.Command = module.command
    return command


def _unavailable(name: str, why: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True,
                                           "help_option_names": []})
    def refused() -> None:
        click.echo(f"refused: {Code.CLUSTER_UNAVAILABLE.value} ({why})", err=True)
        raise SystemExit(2)
    return refused


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


# The commands that exit 1 (a check ran and found a problem) and what it means for each:
# the one place the top-level help's exit-1 line is made from (each command's own --help
# states it too; tests/controller/test_cli.py checks both agree).
EXIT_ONE: Final[dict[str, str]] = {
    "analyze": "the evidence gate is not met",
    "certify": "a threshold failed",
    "fold": "fold check failed or unusable",
    "pilot": "a role measured nothing",
    "preflight": "a checkpoint failed",
    "prune": "a candidate was kept or not removed entirely",
    "reap": "incomplete",
    "recover": "not reconciled",
}


def _exit_statuses() -> str:
    one = textwrap.wrap("a check found a problem: " + ", ".join(
        f"{name} ({why})" for name, why in EXIT_ONE.items()), width=70)
    return "\n".join([
        "\b",
        "Exit status (each command's --help says which it uses):",
        "  0        done",
        *(f"  {'1' if i == 0 else ' '}        {line}" for i, line in enumerate(one)),
        '  2        usage error ("Usage: ... Error: ...") or refusal ("refused: CODE',
        '           (detail)") on stderr; nothing was done',
        "  3        pilot/smoke stopped (its code is printed) or the smoke did not pass",
        "  4        aggregate: reports printed, but the run is unreconciled",
        "  130/143  interrupted by SIGINT/SIGTERM, after containment",
    ])


EXIT_STATUSES: Final = _exit_statuses()


def _version(ctx: click.Context, _: click.Parameter, wanted: bool) -> None:
    """``--version``, as ``click.version_option`` prints it. The version is read only
    when asked: importlib.metadata is ~20 ms of every command's start."""
    if wanted and not ctx.resilient_parsing:
        click.echo(f"efold-controller, version {efold.__version__}")
        ctx.exit()


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_STATUSES)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_version,
              help="Show the version and exit.")
def main() -> None:
    """efold: measure what an agent still knows after its context is folded."""
    tolerate_closed_stdout()


def run() -> NoReturn:
    """The ``efold-controller`` program (its console script, ``python -m
    efold.controller``): ``main``, then the end the interpreter would give it, without
    its teardown.

    Tearing down the controller's interpreter (collecting and freeing every module and
    object of a run: several hundred modules) costs about 80 ms after the command's
    last word, and leaves nothing behind that is not already complete: every file a
    command writes is closed and fsynced before it returns, and its processes are
    contained and reaped. So, as the interpreter does at exit, the threads that are not
    daemons are joined, the ``atexit`` functions run (``logging`` and
    ``weakref.finalize`` among them: temporary directories are removed) and standard
    output and error are flushed; then the process exits with the command's status.
    Children end the same way (``efold.worker``). An exception other than ``SystemExit``
    is left to the interpreter: its traceback and status are the usual ones. ``main``
    itself (what tests invoke in process) never exits this way."""
    try:
        status = _standalone()
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(status)


def _standalone() -> int:
    """``main`` as click's standalone mode runs it (a usage error or a refusal shown,
    with its status; end of input "Aborted!" and 1), except that Ctrl-C, wherever it
    lands in click (the arguments being parsed, a command without handling of its own,
    one interrupted before its handling is up, the context closing after it returned),
    ends with 130 and "interrupted": the status a shell gives SIGINT, where 1 would
    read as a check that failed (``EXIT_ONE``). The context has closed by then: what
    it held (``pilot``'s early template) is released."""
    try:
        result = main(standalone_mode=False)
    except click.Abort as exc:
        # Raised while Ctrl-C was handled (``from`` it, or ``from None`` at a prompt),
        # or for end of input (``EOFError``), click's "Aborted!".
        if not isinstance(exc.__context__, KeyboardInterrupt):
            click.echo("Aborted!", err=True)
            return 1
    except KeyboardInterrupt:  # one that came after click's own handlers
        pass
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except Exception as exc:
        if not interrupted_by(exc):
            raise
    else:
        # An explicit exit's status (``--help``, ``--version``: click returns it); no
        # command returns a value of its own.
        return result if isinstance(result, int) else 0
    _say_interrupted()
    return 130


def interrupted_before_start() -> NoReturn:
    """A Ctrl-C while this module was being imported (the program's first moments,
    ``controller.__main__``): said as ``_standalone`` says one, with its status."""
    _say_interrupted()
    _exit_now(130)


def _say_interrupted() -> None:
    """``interrupted`` on stderr and, for ``pilot --json``, its closing line: a Ctrl-C
    that came before the command could say either itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # decided: a second Ctrl-C changes nothing
    click.echo("interrupted", err=True)
    line = _closing_json_line(sys.argv[1:])
    if line is not None:
        click.echo(line)


def _closing_json_line(args: list[str]) -> str | None:
    """The line ``pilot --json`` ends its output with whatever the outcome, for a Ctrl-C
    that came before the command could say it itself (its arguments parsed, its modules
    imported, its registration checked): no run was claimed yet, so ``run`` is null.
    Read from the arguments as given, with the command's own options (the interruption
    may have come before click parsed them): ``--json`` counts only as itself, not as
    the value of an option that takes one (``--run-dir --json``) or after ``--``."""
    if not args or args[0] != "pilot" or "--json" not in args:
        return None
    try:
        command = load_command("pilot")
    except Exception:  # it cannot be read: nothing says what its options take
        return None
    takes_value = {name for p in command.params
                   if isinstance(p, click.Option) and not p.is_flag and not p.count
                   for name in p.opts}
    rest = iter(args[1:])
    for word in rest:
        if word == "--":  # what follows is no option
            return None
        if word == "--json":
            return json.dumps({"run": None, "status": "interrupted", "code": None,
                               "signal": int(signal.SIGINT)})
        if word in takes_value:
            next(rest, None)  # its value, whatever it reads
    return None


def _exit_now(code: object) -> NoReturn:
    """Exit with ``code`` as ``SystemExit(code)`` would, without the teardown (``run``).
    The command is over: a Ctrl-C from here on changes neither its status nor its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # as the interpreter does: the message on standard error, status 1
        print(code, file=sys.stderr)
        status = 1
    # The interpreter's own first step at exit: its threading hooks (an executor's
    # shutdown among them), then every thread that is not a daemon joined.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None or stream.closed:  # closed at start, or since: nothing to flush
            continue
        try:
            stream.flush()
        except Exception:  # as the interpreter: a last word that cannot be written is 120
            status = status or 120
    os._exit(status)
