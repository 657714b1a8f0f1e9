"""What the operator sees while a pilot runs: a progress bar, then a summary table."""

from __future__ import annotations

from pathlib import Path

import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn
from rich.table import Table

from efold.controller.pilot import OFFLINE, Dispatch, PilotOutcome, run_pilot
from efold.controller.registration import Registration
from efold.guard import units_to_usd
from efold.report import decode_results


def run_with_progress(reg: Registration, reg_bytes: bytes, run: Path, *,
                      show: bool, dispatch: Dispatch = OFFLINE) -> PilotOutcome:
    if not show:
        return run_pilot(reg, reg_bytes, run, dispatch=dispatch)
    with Progress(
        "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), transient=False,
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def tick(phase: str, done: int, total: int) -> None:
            label = {"prep": "checkpoints", "probe": "probe slots"}[phase]
            if phase not in tasks:
                tasks[phase] = bar.add_task(label, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        return run_pilot(reg, reg_bytes, run, progress=tick, dispatch=dispatch)


def print_summary(outcome: PilotOutcome) -> None:
    results = decode_results(outcome.reports["results.json"])
    table = Table(title=f"efold pilot: {results.campaign}", title_justify="left")
    for column in ("role", "exact (95% CI)", "done", "incompl.", "unadm.", "skipped",
                   "excluded", "settled $"):
        table.add_column(column, justify="left" if column == "role" else "right")
    for role in results.results:
        t = role.overall
        e = t.execution
        exact = t.exact
        ci = exact.wilson95
        shown = "-" if exact.rate is None or ci is None else (
            f"{exact.successes}/{exact.trials} {exact.rate:.0%} ({ci.lower:.0%}-{ci.upper:.0%})")
        table.add_row(
            role.role, shown, str(e.completed), str(e.incomplete), str(e.unadmitted),
            str(e.skipped), str(sum(t.excluded.values())), units_to_usd(role.spend.settled.units),
        )
    console = Console(width=max(110, Console().width))
    console.print(table)
    ex = results.execution
    console.print(
        f"planned {ex.planned} · eligible {ex.eligible} · visited {ex.visited} · "
        f"completed {ex.completed} · missing {ex.missing} · "
        f"settled ${units_to_usd(results.spend.settled.units)} "
        f"(cap ${units_to_usd(results.cap.units)})"
    )
    if results.reader_faux:
        console.print("faux reader: accuracy measures what each fold kept, not model quality.")
    for key, cause in sorted(outcome.causes.items()):
        console.print(f"checkpoint {key} not prepared: its fold said {cause.code}"
                      + (f" ({cause.detail})" if cause.detail else ""), markup=False)
    run = outcome.run_dir
    # Paths go out unwrapped (rich would fold them at the terminal width): scripts read them.
    print(f"results: {run / 'results.json'}\nsummary: {run / 'summary.md'}\n"
          f"report:  {run / 'report.html'}", flush=True)


def outcome_line(outcome: PilotOutcome) -> str:
    """The run as one line of JSON, the last line ``pilot --json`` prints: where it is,
    how it ended (``complete``, ``stopped`` with its code, ``interrupted`` with the
    signal), its slot counts and settled spend (faux money when the reader is faux)."""
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
        line.update(completed=ex.completed, missing=ex.missing,
                    settled_usd=units_to_usd(results.spend.settled.units),
                    cap_usd=units_to_usd(results.cap.units), faux=results.reader_faux,
                    results=str(outcome.run_dir / "results.json"))
    return msgspec.json.encode(line).decode()
