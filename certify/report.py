"""The certification report (``efold-certification-v1``) and its human summary.

Every figure in it is computed by the controller from what the contained children
wrote (``checks``, ``memory``, ``continuation``). ``passed`` is true only when every
check of every part passed; the memory part of a fold without a retained store is
``not_applicable`` (and says why), never counted as a pass it did not earn.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from efold.certify.continuation import TaskResult
from efold.certify.memory import MemoryReport

REPORT_FORMAT: Final = "efold-certification-v1"


class CheckResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One named check over the endurance cycles: how many cycles failed it, the first
    few, and why the first one failed."""

    name: str
    passed: bool
    failed_cycles: int
    first_failed: list[int]
    detail: str | None = None


class SizeStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Summary sizes (UTF-8 bytes, marker excluded) over the cycles that stored one."""

    stored: int  # cycles that stored a summary
    max_bytes: int | None
    final_bytes: int | None
    late_range_bytes: int | None  # over the last 20 cycles; None: not all 20 stored one
    late_slope_bytes_per_cycle: float | None
    passed: bool
    detail: str | None = None


class PriorStats(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The previous summary on offer: offered exactly, read, its marker echoed."""

    offered: int  # cycles that had a stored summary to offer
    offered_exactly: int  # of those, cycles offered exactly the stored messages
    read_cycles: int | None  # cycles whose fold read ``prefix.prior``; None: unobservable
    echo_cycles: int  # cycles whose output carried an earlier cycle's marker
    derives_from_source: bool  # the fold's declaration (reported; echoing fails every fold)


class FixtureResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    shape: str
    cycle: int | None  # None: the fixture could not run
    status: Literal["passed", "failed", "not_run"]
    detail: str | None = None


class EnduranceReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cycles: int
    passed: bool
    checks: list[CheckResult]
    sizes: SizeStats
    prior: PriorStats
    fixtures: list[FixtureResult]


class MaximalReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source_bytes: int
    summary_bytes: int | None
    min_bytes: int
    max_bytes: int
    utf8_valid: bool | None
    passed: bool
    detail: str | None = None


class ContinuationReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    passed: bool
    tasks: list[TaskResult]


class CertificationReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: str
    fold: str
    kind: str  # "built-in arm" | "installed entry point"
    passed: bool
    failed: list[str]  # the names of the failing checks, in report order
    endurance: EnduranceReport
    maximal: MaximalReport
    memory: MemoryReport
    continuation: ContinuationReport


def _mark(passed: bool) -> str:
    return "pass" if passed else "FAIL"


def human_summary(report: CertificationReport) -> str:
    """The lines ``certify`` prints before the JSON report."""
    endurance = report.endurance
    lines = [f"certify {report.fold} ({report.kind}; derives from source: "
             f"{'declared' if endurance.prior.derives_from_source else 'not declared'})",
             f"endurance: {_mark(endurance.passed)} ({endurance.cycles} cycles)"]
    for check in endurance.checks:
        text = f"  {check.name:<16} {_mark(check.passed)}"
        if not check.passed:
            text += f" {check.failed_cycles}/{endurance.cycles} cycles"
            if check.detail:
                text += f" (first: {check.detail})"
        lines.append(text)
    sizes = endurance.sizes
    growth = f"  {'growth':<16} {_mark(sizes.passed)}"
    if sizes.late_range_bytes is not None and sizes.late_slope_bytes_per_cycle is not None:
        growth += (f" last 20: range {sizes.late_range_bytes} B, slope "
                   f"{sizes.late_slope_bytes_per_cycle:+.1f} B/cycle; max {sizes.max_bytes} B")
    elif sizes.detail:
        growth += f" ({sizes.detail})"
    lines.append(growth)
    prior = endurance.prior
    read = ("read unobservable (an external command receives its input whole)"
            if prior.read_cycles is None else f"read in {prior.read_cycles} cycles")
    lines.append(f"  {'prior summary':<16} offered exactly {prior.offered_exactly}/{prior.offered}; "
                 f"{read}; marker echoed in {prior.echo_cycles}")
    lines.append("  fixtures         " + ", ".join(
        f"{f.shape} {f.status}" for f in endurance.fixtures))
    maximal = report.maximal
    size = "no summary" if maximal.summary_bytes is None else f"{maximal.summary_bytes:,} B summary"
    lines.append(f"maximal source: {_mark(maximal.passed)} {maximal.source_bytes:,} B source -> "
                 f"{size} (want {maximal.min_bytes:,}..{maximal.max_bytes:,})"
                 + (f"; {maximal.detail}" if maximal.detail else ""))
    lines += _memory_lines(report.memory)
    lines.append(f"continuation QA: {_mark(report.continuation.passed)}")
    for task in report.continuation.tasks:
        how = task.found_via or "not found"
        if task.address is not None:
            how += f" {task.address}"
        lines.append(f"  {task.task:<16} {_mark(task.passed)} plan {how}; files exact "
                     f"{task.files_exact}, protected intact {task.protected_intact}, resume exit "
                     f"{task.resume_exit}, check exit {task.check_exit}"
                     + (f" ({task.reason})" if task.reason else ""))
    verdict = "PASS" if report.passed else "FAIL (" + ", ".join(report.failed) + ")"
    lines.append(f"verdict: {verdict}")
    return "\n".join(lines)


def _memory_lines(memory: MemoryReport) -> list[str]:
    if memory.status == "not_applicable":
        return [f"cross-session memory: not applicable ({memory.reason})"]
    lines = [f"cross-session memory: {_mark(memory.passed)} {memory.indexed_sessions}/"
             f"{memory.eligible_sessions} sessions indexed, {memory.stale_records} stale, "
             f"{memory.hot_sessions} hot; {memory.expanded_addresses}/{memory.emitted_addresses} "
             f"cited addresses expanded; store {memory.store_bytes:,} B, source "
             f"{memory.source_bytes:,} B"]
    for check in memory.checks:
        lines.append(f"  {check.name:<20} {_mark(check.passed)}"
                     + (f" ({check.detail})" if check.detail else ""))
    return lines
