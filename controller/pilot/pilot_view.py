"""What the operator sees while a pilot runs, and the run's log.

Three audiences, one stream of ``pilot.ProgressEvent``s (``RunView``):

- a terminal (stdout a tty): a progress bar per phase with M/N, rate, ETA, elapsed,
  the running exact accuracy and the running spend (settled + retained of the cap);
- anything else (a pipe, a file, CI), or ``--no-progress``: plain lines on stdout, no
  ANSI codes: one when a phase starts, one when it ends, and one each time a phase
  passes another tenth of its units (at most nine), so a long run is never silent;
- ``<run>/controller.log`` (``controller.rundirs.run_log``), always: one content-free line per
  phase, checkpoint, slot, stop and containment episode.

``--quiet`` shows neither bar nor lines nor table; ``--verbose`` adds one line per
checkpoint and per slot on stderr. Invariant: stdout stays parsable in every mode: the
``run:`` line first, and with ``--json`` the JSON line last (the commands print both;
nothing here prints before the run starts or after the summary).

The running accuracy counts what ``exact`` counts (``report.join.Observation.scored``):
completed, non-excluded slots; correct ones over them.
"""

from __future__ import annotations

import enum
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO, TypeVar

import click
import msgspec
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from efold.controller.campaigns.registration import Registration
from efold.controller.pilot.pilot import (
    OFFLINE,
    Dispatch,
    PilotOutcome,
    ProgressEvent,
    inline_smoke,
    run_pilot,
)
from efold.controller.pilot.unmeasured import folds_said, say_unmeasured, unmeasured
from efold.controller.rundirs.interrupt import exit_status, say
from efold.controller.rundirs.run_log import RunLog
from efold.controller.rundirs.suggest import suggest
from efold.errors import Code, EfoldError
from efold.guard import units_to_usd
from efold.protocol.records import Receipt, SlotStatus
from efold.report import decode_results
from efold.report.numbers import spend_line
from efold.report.readings import accuracy_brief, checkpoint_size
from efold.report.results import money, stand_in_lines
from efold.report.schema import BoundaryResults, ChainFacts, RunMoney

F = TypeVar("F", bound=Callable[..., Any])

PHASE_LABEL: Final = {"prep": "checkpoints", "probe": "probe slots",
                      "smoke-prep": "smoke checkpoints", "smoke": "smoke slots"}
_RATE_UNIT: Final = {"prep": "ckpt/s", "probe": "slots/s", "smoke-prep": "ckpt/s",
                     "smoke": "slots/s"}
INFEASIBLE_SHOWN: Final = 5  # inventory-infeasible checkpoints named after a run
_SLOT_PHASES: Final = ("probe", "smoke")  # one unit per slot: accuracy is shown


class Verbosity(enum.IntEnum):
    QUIET = 0  # the run: line, the report paths, stops on stderr, the JSON line
    NORMAL = 1  # + a bar (terminal) or phase lines, the summary table
    VERBOSE = 2  # + one line per checkpoint and per slot, on stderr


def output_options(f: F) -> F:
    """``--quiet``, ``--verbose`` and ``--no-progress``; read them with ``verbosity_of``."""
    f = click.option("--no-progress", is_flag=True,
                     help="No progress bar: plain progress lines instead, as when stdout "
                          "is not a terminal.")(f)
    f = click.option("--verbose", "-v", is_flag=True,
                     help="Also one line per checkpoint and per slot (id, status, outcome "
                          "or code, lookup calls, ms) on stderr.")(f)
    return click.option("--quiet", "-q", is_flag=True,
                        help="Only the run: line, the report paths, a stop on stderr and "
                             "(--json) the JSON line: no bar, no progress lines, no table. "
                             "The run's controller.log is written all the same.")(f)


def verbosity_of(quiet: bool, verbose: bool) -> Verbosity:
    if quiet and verbose:
        raise click.UsageError("--quiet and --verbose are exclusive")
    return Verbosity.QUIET if quiet else Verbosity.VERBOSE if verbose else Verbosity.NORMAL


def tell_containment(line: str, verbosity: Verbosity) -> None:
    """The run's containment at its open (``run_setup.check_containment``), on stderr:
    the process-group fallback always (a warning, even with --quiet), cgroup mode with
    --verbose."""
    fallback = not line.startswith("containment: cgroup")
    if fallback:
        click.echo(f"warning: {line}", err=True)
    elif verbosity >= Verbosity.VERBOSE:
        click.echo(line, err=True)


def spend_text(units: int, faux: bool) -> str:
    """Settled spend as exact decimals: ``$0.1234``, or faux money labelled as such."""
    return f"{units_to_usd(units)} faux units" if faux else f"${units_to_usd(units)}"


def accuracy_text(correct: int, scored: int) -> str:
    return f"acc {correct / scored:.1%} ({correct}/{scored})" if scored else "acc - (0/0)"


def counts_in_exact(receipt: Receipt) -> bool:
    """Whether ``exact`` counts the slot (completed, not excluded); a completed slot was
    admitted, so it is eligible (``report.join.Observation.scored``)."""
    return receipt.status is SlotStatus.COMPLETED and receipt.excluded is None


def slot_line(r: Receipt) -> str:
    """``--verbose``: one visited slot, content-free."""
    what = r.outcome.value if r.status is SlotStatus.COMPLETED and r.outcome else (r.code or "-")
    excluded = f", excluded {r.excluded.value}" if r.excluded is not None else ""
    return (f"slot {r.slot} ({r.role}): {r.status.value}, {what}{excluded}, "
            f"{r.lookup_calls} lookup calls, {r.elapsed_ms} ms")


class _RateColumn(ProgressColumn):
    """Units per second, named (``4.2 slots/s``); ``?`` until rich has two samples."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        unit = task.fields.get("unit", "/s")
        return Text("? " + unit if speed is None else f"{speed:.1f} {unit}",
                    style="progress.data.speed")


class _EtaColumn(ProgressColumn):
    """``eta 0:01:02`` (``eta ?`` while the rate is unknown, ``eta 0:00:00`` when done)."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("eta 0:00:00", style="progress.remaining")
        left = task.time_remaining
        if left is None:
            return Text("eta ?", style="progress.remaining")
        minutes, seconds = divmod(int(left), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"eta {hours}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def _bar() -> Progress:
    # Stderr is not redirected: --verbose lines go through ``RunView._detail``.
    return Progress(
        "[progress.description]{task.description}", BarColumn(bar_width=24),
        MofNCompleteColumn(), _RateColumn(), _EtaColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[acc]}"), TextColumn("{task.fields[spend]}"),
        transient=False, redirect_stderr=False,
    )


@dataclass
class _Phase:
    total: int
    started: float  # time.monotonic() at its first event
    mark: int | None  # the next ``done`` that earns a plain progress line
    task: TaskID | None = None
    ended: bool = False


def next_mark(total: int, done: int) -> int | None:
    """The first tenth of ``total`` (rounded up) past ``done`` and short of ``total``."""
    for k in range(1, 10):
        mark = math.ceil(total * k / 10)
        if done < mark < total:
            return mark
    return None


@dataclass
class RunView:
    """Shows a run's ``ProgressEvent``s (see the module docstring) and logs them.

    Invariant: writes nothing to stdout but bar and plain progress lines, and only
    between the command's ``run:`` line and its summary."""

    verbosity: Verbosity
    faux: bool
    log: RunLog
    bar: Progress | None = None
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    scored: int = 0
    correct: int = 0
    settled_units: int = 0
    retained_units: int = 0
    cap_units: int = 0
    phases: dict[str, _Phase] = field(default_factory=dict)
    # Set by the first interruption notice: from then on the remaining slots are visited
    # without a launch, so the phase's count no longer says what ran; the bar is stopped
    # and no progress line follows (``end_of_run`` gives the run's own figures).
    ending: bool = False

    def tell(self, text: str) -> None:
        """An interruption notice (``controller.rundirs.interrupt``): the bar is stopped first,
        its last frame left on screen, so the notice is printed below it and never
        redrawn over; the line goes to stderr like every other notice."""
        self.ending = True
        if self.bar is not None:
            self.bar.stop()
        say(text)

    def __call__(self, event: ProgressEvent) -> None:
        self.log.open()  # the run is open: its root may hold more than lease and journal
        phase = self.phases.get(event.phase)
        if phase is None:
            phase = self.phases[event.phase] = _Phase(
                event.total, time.monotonic(), next_mark(event.total, event.done))
            self._started(event, phase)
        if phase.ended:
            return
        self.settled_units = event.settled_units
        self.retained_units = event.retained_units
        self.cap_units = event.cap_units
        if event.checkpoint is not None:
            c = event.checkpoint
            self.log.write("checkpoint", key=c.key, role=c.role, ready=c.ready,
                           elapsed_ms=c.elapsed_ms, run_settled_units=event.settled_units)
            self._detail(f"checkpoint {c.key} ({c.role}): "
                         f"{'ready' if c.ready else 'not ready'}, {c.elapsed_ms} ms")
        if event.receipt is not None:
            r = event.receipt
            if counts_in_exact(r):
                self.scored += 1
                self.correct += r.correct is True
            self.log.write("slot", slot=r.slot, role=r.role, status=r.status.value,
                           outcome=r.outcome.value if r.outcome else None, code=r.code,
                           excluded=r.excluded.value if r.excluded else None,
                           lookup_calls=r.lookup_calls, elapsed_ms=r.elapsed_ms,
                           slot_settled_units=r.spend.settled_units)
            self._detail(slot_line(r))
        if self.bar is not None and phase.task is not None:
            acc, spend = self._fields(event.phase)
            self.bar.update(phase.task, completed=event.done, total=event.total, acc=acc,
                            spend=spend)
        if event.done >= event.total:
            phase.ended = True
            self.log.write("phase", phase=event.phase, state="end", done=event.done,
                           total=event.total, seconds=self._seconds(phase),
                           scored=self.scored if event.phase in _SLOT_PHASES else None,
                           correct=self.correct if event.phase in _SLOT_PHASES else None,
                           run_settled_units=self.settled_units)
            self._plain(f"{self._count(event)} in {self._seconds(phase):.1f} s"
                        + self._figures(event, phase))
        elif phase.mark is not None and event.done >= phase.mark:
            phase.mark = next_mark(event.total, event.done)
            self._plain(f"{self._count(event)}, {self._seconds(phase):.1f} s"
                        + self._figures(event, phase))

    def _started(self, event: ProgressEvent, phase: _Phase) -> None:
        self.log.write("phase", phase=event.phase, state="start", total=event.total)
        if self.bar is not None:
            acc, spend = self._fields(event.phase)
            phase.task = self.bar.add_task(PHASE_LABEL[event.phase], total=event.total,
                                           unit=_RATE_UNIT[event.phase], acc=acc, spend=spend)
        elif event.done < event.total:
            self._plain(f"{self._count(event)} ...")

    def _fields(self, phase: str) -> tuple[str, str]:
        """The bar's accuracy and spend columns."""
        acc = accuracy_text(self.correct, self.scored) if phase in _SLOT_PHASES else ""
        return acc, self._spend()

    def _spend(self) -> str:
        """The run's spend so far against its cap, in the reports' one wording
        (``report.numbers.spend_line``)."""
        return spend_line(RunMoney(settled=money(self.settled_units),
                                   retained=money(self.retained_units), open=money(0),
                                   charged=money(self.settled_units + self.retained_units)),
                          money(self.cap_units), self.faux)

    def _figures(self, event: ProgressEvent, phase: _Phase) -> str:
        settled = self._spend()
        if event.phase not in _SLOT_PHASES:
            return f", {settled}" if self.settled_units or self.retained_units else ""
        seconds = self._seconds(phase)
        rate = f"{event.done / seconds:.1f} slots/s" if seconds > 0 else "? slots/s"
        return f", {rate}, {accuracy_text(self.correct, self.scored)}, {settled}"

    @staticmethod
    def _count(event: ProgressEvent) -> str:
        return f"{PHASE_LABEL[event.phase]}: {event.done}/{event.total}"

    @staticmethod
    def _seconds(phase: _Phase) -> float:
        return time.monotonic() - phase.started

    def _plain(self, line: str) -> None:
        if self.bar is None and not self.ending and self.verbosity >= Verbosity.NORMAL:
            print(line, file=self.out, flush=True)

    def _detail(self, line: str) -> None:
        if self.verbosity < Verbosity.VERBOSE:
            return
        if self.bar is not None and self.err.isatty():  # the bar's screen: above the bar
            self.bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.err, flush=True)


def run_with_progress(reg: Registration, reg_bytes: bytes, run: Path, *,
                      show: bool, dispatch: Dispatch = OFFLINE,
                      verbosity: Verbosity = Verbosity.NORMAL) -> PilotOutcome:
    """Run the pilot into ``run`` with its log, showing it as ``verbosity`` says: a bar
    when ``show`` and stdout is a terminal, else plain lines. Raises what ``run_pilot``
    raises; a log that fails is a warning (``run_log_failed``), never a stop."""
    faux = reg.campaign.reader.is_faux
    log = RunLog(run)
    try:
        log.write("run", state="start", campaign=reg.campaign.name, faux=faux,
                  smoke="inline" if inline_smoke(dispatch) else dispatch.smoke,
                  route="offline" if dispatch.grant is None
                  else "local" if dispatch.grant.local else "real")
        view = RunView(verbosity, faux, log)
        try:
            if show and verbosity >= Verbosity.NORMAL and sys.stdout.isatty():
                with _bar() as bar:
                    view.bar = bar
                    outcome = run_pilot(reg, reg_bytes, run, progress=view, dispatch=dispatch,
                                        tell=view.tell)
            else:
                outcome = run_pilot(reg, reg_bytes, run, progress=view, dispatch=dispatch,
                                    tell=view.tell)
        except EfoldError as exc:
            log.write("refused", code=exc.code.value)
            raise
        except KeyboardInterrupt:
            log.write("interrupted", contained="yes")
            raise
        log_outcome(log, outcome)
    finally:
        log.close()
        if log.failure is not None:
            click.echo(f"warning: run_log_failed ({log.failure}; the run went on, its "
                       "journal and receipts are its record)", err=True)
    return outcome


def log_outcome(log: RunLog, outcome: PilotOutcome) -> None:
    """The end of the run: checkpoint causes (codes), containment episodes, its stop."""
    for key, cause in sorted(outcome.causes.items()):
        log.write("checkpoint_cause", key=key, code=cause.code)
    results = decode_results(outcome.reports["results.json"]) \
        if "results.json" in outcome.reports else None
    status = results.status if results is not None else None
    for episode in status.containments if status is not None else []:
        log.write("containment", slot=episode.slot, kind=episode.kind, cause=episode.cause,
                  outcome=episode.outcome, finished=episode.finished)
    if outcome.reused:
        log.write("checkpoints_reused", count=outcome.reused)
    if outcome.stop_code is not None:
        log.write("stop", code=outcome.stop_code.value)
    if outcome.interrupted is not None:
        log.write("interrupted", signal=outcome.interrupted)
    spent = results.money if results is not None else None
    log.write("run", state="end", status=_status(outcome),
              verdict=status.verdict if status is not None else None,
              planned=len(outcome.plan.slots), visited=len(outcome.receipts),
              run_settled_units=spent.settled.units if spent is not None else None,
              run_retained_units=spent.retained.units if spent is not None else None,
              run_open_units=spent.open.units if spent is not None else None)


def _chain(outcome: PilotOutcome) -> ChainFacts | None:
    """The run's chain, as its reports read it (None: no link of one)."""
    if "results.json" not in outcome.reports:
        return None
    status = decode_results(outcome.reports["results.json"]).status
    return status.chain if status is not None else None


def _status(outcome: PilotOutcome) -> str:
    return ("interrupted" if outcome.interrupted is not None
            else "stopped" if outcome.stop_code is not None else "complete")


def print_summary(outcome: PilotOutcome, verbosity: Verbosity = Verbosity.NORMAL) -> None:
    """The summary table per role and the counts (not ``--quiet``), then the report
    paths (always)."""
    if verbosity >= Verbosity.NORMAL:
        _print_table(outcome)
    run = outcome.run_dir
    # Paths go out unwrapped (rich would fold them at the terminal width): scripts read them.
    print(f"results: {run / 'results.json'}\nsummary: {run / 'summary.md'}\n"
          f"report:  {run / 'report.html'}", flush=True)


def aligned_amounts(amounts: list[str]) -> list[str]:
    """Exact decimal amounts padded with zeros to the same number of decimals, so a
    right-justified column lines up on the point (never rounded: zeros only)."""
    places = max((len(a.partition(".")[2]) for a in amounts), default=0)
    out = []
    for amount in amounts:
        whole, _, fraction = amount.partition(".")
        out.append(f"{int(whole):,}" + (f".{fraction.ljust(places, '0')}" if places else ""))
    return out


def _print_table(outcome: PilotOutcome) -> None:
    results = decode_results(outcome.reports["results.json"])
    faux = results.reader_faux
    money_column = "settled (faux units)" if faux else "settled (USD)"
    mode = results.run.probe_mode if results.run is not None else None
    table = Table(title=f"efold pilot: {results.campaign}"
                        + (f" ({mode})" if mode is not None else ""), title_justify="left")
    for column in ("role", "exact (95% CI)", "median checkpoint", "done", "incompl.",
                   "unadm.", "skipped", "excluded", money_column):
        table.add_column(column, justify="left" if column == "role" else "right",
                         no_wrap=True)
    settled = aligned_amounts([units_to_usd(role.spend.settled.units)
                               for role in results.results])
    for role, amount in zip(results.results, settled, strict=True):
        t = role.overall
        e = t.execution
        table.add_row(
            role.role, accuracy_brief(role), checkpoint_size(role), f"{e.completed:,}", f"{e.incomplete:,}",
            f"{e.unadmitted:,}",
            f"{e.skipped:,}", f"{sum(t.excluded.values()):,}", amount,
        )
    console = Console(width=max(140, Console().width))  # piped: no wrapped cells
    console.print(table)
    if results.boundary is not None:
        console.print(_boundary_table(results.boundary))
    ex = results.execution
    console.print(
        f"planned {ex.planned:,} · eligible {ex.eligible:,} · visited {ex.visited:,} · "
        f"completed {ex.completed:,} · missing {ex.missing:,}"
    )
    # The run's money from its journal, every caller's (the table above: each role's
    # probe slots only).
    console.print("spend unknown (results built without the run's journal)"
                  if results.money is None else spend_line(results.money, results.cap, faux),
                  markup=False, highlight=False)
    if faux:
        console.print("faux reader: accuracy measures what each fold kept, not model quality.")
    for stand_in in stand_in_lines(results):
        console.print(stand_in, markup=False, highlight=False)
    for key, cause in sorted(outcome.causes.items()):
        console.print(f"checkpoint {key} not prepared: its fold said {cause.code}"
                      + (f" ({cause.detail})" if cause.detail else ""), markup=False)
    infeasible = sorted(outcome.infeasible.items())
    for key, first in infeasible[:INFEASIBLE_SHOWN]:
        console.print(f"checkpoint {key} skipped (inventory_infeasible): {first.why_not()}",
                      markup=False, highlight=False)
    if len(infeasible) > INFEASIBLE_SHOWN:
        console.print(f"... and {len(infeasible) - INFEASIBLE_SHOWN:,} more checkpoints "
                      "skipped (inventory_infeasible)", markup=False)


def _boundary_table(b: BoundaryResults) -> Table:
    """The boundary cases per role (``exact`` above counts them with the questions: a
    case is exact when every oracle passed)."""
    table = Table(title=f"boundary cases: {len(b.cases):,} per role, versus {b.reference_arm}",
                  title_justify="left")
    for column in ("role", "passed (95% CI)", "n/a", "actions", "recall", "incidents"):
        table.add_column(column, justify="left" if column == "role" else "right")
    incidents = Counter(i.failing_arm for i in b.incidents)
    for s in b.arms:
        p = s.passed
        ci = p.wilson95
        passed = "-" if p.rate is None or ci is None else (
            f"{p.successes:,}/{p.trials:,} {p.rate:.0%} ({ci.lower:.0%}-{ci.upper:.0%})")
        recall = "-" if s.recall_trigger is None else \
            f"{s.recall_trigger.successes:,}/{s.recall_trigger.trials:,}"
        table.add_row(s.arm, passed, f"{s.not_applicable:,}", f"{s.actions:,}", recall,
                      f"{incidents[s.arm]:,}")
    return table


def end_of_run(outcome: PilotOutcome, verbosity: Verbosity, as_json: bool, *,
               judge_roles: bool = True) -> int:
    """What ``pilot`` prints once its run ended (the summary, the report paths, how it
    ended and the next step, then the ``--json`` line), and its exit status: 0
    complete, 1 complete but a role measured nothing (``say_unmeasured``; not with
    ``judge_roles`` False: a cluster's shard, whose roles are judged over the whole
    cluster run), 3 stopped, 130/143 interrupted."""
    print_summary(outcome, verbosity)
    status = 0
    run = outcome.run_dir
    to_err = verbosity is Verbosity.QUIET  # --quiet: stdout holds only what scripts read
    if outcome.interrupted is not None:
        click.echo(f"interrupted: {interrupted_counts(outcome)}; the reports are in {run}",
                   err=to_err)
        click.echo(f"next: `{suggest('recover', run)}` (should say reconciled), then "
                   f"`{suggest('pilot --continue', run)}` runs what is left, as a new "
                   "run linked to this one", err=to_err)
        status = exit_status(outcome.interrupted)
    elif outcome.stop_code is not None:
        click.echo(f"stopped: {outcome.stop_code.value}", err=to_err)
        for line in stop_causes(outcome):
            click.echo(f"  {line}", err=to_err)
        status = 3
    elif judge_roles and "results.json" in outcome.reports \
            and say_unmeasured(decode_results(outcome.reports["results.json"]),
                               fold_said=folds_said(outcome)):
        status = 1
    chain = _chain(outcome)
    if outcome.reused and verbosity is not Verbosity.QUIET:
        click.echo(f"checkpoints: {outcome.reused:,} reused from earlier links of the chain "
                   "(copied and verified against their journaled digests), not built again")
    if chain is not None and chain.to_run and outcome.interrupted is None:
        links = f"{len(chain.links)} link" + ("" if len(chain.links) == 1 else "s")
        click.echo(f"chain: {links}, {chain.to_run:,} slots still to run; "
                   f"`{suggest('pilot --continue', run)}` runs them", err=to_err)
    if as_json:  # always the very last line
        click.echo(outcome_line(outcome))
    return status


# What a slot's code most often means on a model server, said where a run stopped.
_HINTS: Final = {
    Code.LOOKUP_MISSING_USAGE: "the server sent no usage (a server whose streamed answers "
                               "carry none: stream = false, or --server llama-cpp-python)",
    Code.LOOKUP_SEND_FAILED: "the server did not take the request (is it still running?)",
    Code.LOOKUP_STREAM_LOST: "the answer ended before it was complete (the server closed "
                             "the connection, or stopped)",
    Code.LOOKUP_HTTP_STATUS: "the server answered with an HTTP error (its base URL or the "
                             "model name?)",
    Code.LOOKUP_MODEL_SWITCH_FORBIDDEN: "the server answered as another model: serve it "
                                        "under the campaign's model name",
}


def stop_causes(outcome: PilotOutcome) -> list[str]:
    """Why the slots before a stop failed: each code of an admitted slot that did not
    complete, with how many slots and, for a model server's usual trips, what it means."""
    counts: dict[str, int] = {}
    for r in outcome.receipts:
        if r.code is not None and r.status not in (SlotStatus.COMPLETED, SlotStatus.SKIPPED,
                                                   SlotStatus.UNADMITTED):
            counts[r.code] = counts.get(r.code, 0) + 1
    lines = []
    for code, n in sorted(counts.items(), key=lambda item: -item[1]):
        hint = _HINTS.get(Code(code)) if code in Code._value2member_map_ else None
        lines.append(f"{n:,} slot{'s' if n != 1 else ''} {code}" + (f": {hint}" if hint else ""))
    return lines


def interrupted_counts(outcome: PilotOutcome) -> str:
    """What an interrupted run did, from its receipts: ``161 answered, 99 not admitted:
    interrupted``, then every other status that occurred (the slots contained in
    flight are ``incomplete``) and the planned slots never visited. Every planned slot
    is counted once; never "reports for N of N" when most were never asked."""
    statuses: Counter[str] = Counter()
    for r in outcome.receipts:
        if r.status is SlotStatus.COMPLETED:
            statuses["answered"] += 1
        elif r.status is SlotStatus.UNADMITTED and r.code == Code.INTERRUPTED.value:
            statuses["not admitted: interrupted"] += 1
        else:
            statuses[r.status.value] += 1
    statuses["not visited"] = len(outcome.plan.slots) - len(outcome.receipts)
    first = ["answered", "not admitted: interrupted"]
    order = first + sorted(k for k in statuses if k not in first)
    return ", ".join(f"{statuses[k]:,} {k}" for k in order if k in first or statuses[k])


def outcome_line(outcome: PilotOutcome) -> str:
    """The run as one line of JSON, the last line ``pilot --json`` prints: where it is,
    how it ended (``complete``, ``stopped`` with its code, ``interrupted`` with the
    signal), its slot counts and its journal's spend, every caller's: settled, retained
    and open against the cap (faux money when the reader is faux)."""
    results = decode_results(outcome.reports["results.json"]) \
        if "results.json" in outcome.reports else None
    status = ("interrupted" if outcome.interrupted is not None
              else "stopped" if outcome.stop_code is not None else "complete")
    line: dict[str, object] = {
        "run": str(outcome.run_dir), "status": status,
        "code": None if outcome.stop_code is None else outcome.stop_code.value,
        "signal": outcome.interrupted,
        "planned": len(outcome.plan.slots), "visited": len(outcome.receipts),
    }
    if results is not None:
        ex = results.execution
        spent = results.money
        chain = results.status.chain if results.status is not None else None
        if chain is not None:  # a link's reports are its chain's, and so are the counts
            line.update(planned=ex.planned, visited=ex.visited,
                        chain={"links": len(chain.links), "to_run": chain.to_run,
                               "verdict": results.status.verdict
                               if results.status is not None else None})
        line.update(completed=ex.completed, missing=ex.missing,
                    settled_usd=None if spent is None else units_to_usd(spent.settled.units),
                    retained_usd=None if spent is None else units_to_usd(spent.retained.units),
                    open_usd=None if spent is None else units_to_usd(spent.open.units),
                    cap_usd=units_to_usd(results.cap.units), faux=results.reader_faux,
                    # Only a complete run's: an interrupted or stopped one ended early.
                    unmeasured=[role.role for role in unmeasured(results)]
                    if status == "complete" else [],
                    results=str(outcome.run_dir / "results.json"))
    return msgspec.json.encode(line).decode()
