"""The answer a reader brings to a report, one line per role: which fold keeps what, at
what size and at what cost ("store keeps 97.1% (66/68) at 34% of the transcript's size,
0.0921752 faux units per correct answer").

Every figure is a ``Results`` field, read as it is: the accuracy is the role's exact
rate (completed, eligible, non-excluded slots), the size is the median of its
checkpoints' compression against the transcript (or the native role) as
``Compression.versus_reference`` holds it, the cost is ``CostPerCorrect.per_correct``.
A figure that is missing is said to be missing, never printed as zero.
"""

from __future__ import annotations

from efold.report.numbers import count, money_brief
from efold.report.schema import Results, RoleResult
from efold.report.table_kit import format_rate

__all__ = ["accuracy_brief", "checkpoint_size", "reading", "readings", "size_share"]


def size_share(role: RoleResult) -> tuple[float, str] | None:
    """The median share of its reference that the role's checkpoint keeps (0.34: a third
    of the size), and whose size that is (``the transcript's`` or ``native's``); None
    without a paired size (no checkpoint with a size, or no reference)."""
    sizes = role.compression
    ratio = None if sizes is None else sizes.versus_reference
    if ratio is None or ratio.tokens_median is None:
        return None
    whose = "the transcript's" if ratio.against == "transcript" else f"{ratio.reference}'s"
    return 1.0 - ratio.tokens_median, whose


def checkpoint_size(role: RoleResult) -> str:
    """A terminal cell: the median checkpoint in estimated tokens and its share of the
    reference, ``9,526 tok (37%)``; ``-`` without a size."""
    if role.compression is None:
        return "-"
    share = size_share(role)
    tokens = f"{count(role.compression.tokens_median)} tok"
    return tokens if share is None else f"{tokens} ({100.0 * share[0]:.0f}%)"


def accuracy_brief(role: RoleResult) -> str:
    """A terminal cell: ``66/68 97% (90%-99%)``; ``-`` when no slot was scored."""
    exact, interval = role.overall.exact, role.overall.exact.wilson95
    if exact.rate is None or interval is None:
        return "-"
    return (f"{exact.successes:,}/{exact.trials:,} {exact.rate:.0%} "
            f"({interval.lower:.0%}-{interval.upper:.0%})")


def reading(role: RoleResult, faux: bool) -> str:
    exact = role.overall.exact
    if exact.rate is None:
        codes = ", ".join(f"{count(n)} {code}" for code, n in sorted(role.codes.items()))
        return f"{role.role}: no scored slot" + (f" ({codes})" if codes else "")
    parts = [f"{role.role} keeps {format_rate(exact.rate)} "
             f"({count(exact.successes)}/{count(exact.trials)})"]
    share = size_share(role)
    if share is not None:
        fraction, whose = share
        parts.append(f"at {100.0 * fraction:.0f}% of {whose} size")
    cost = role.cost_per_correct
    if cost is not None and cost.per_correct is not None:
        parts.append(f"{money_brief(cost.per_correct, faux)} per correct answer")
    return parts[0] + (" " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def readings(results: Results) -> list[str]:
    """One line per role, in the plan's role order."""
    return [reading(role, results.reader_faux) for role in results.results]
