"""Whether a finished run measured nothing of a role, and saying so.

A role measured nothing when it visited slots and answered none of them, not because
its plan said so (every slot skipped as inventory-infeasible, which ``plan`` shows
beforehand) but because they failed: a fold that failed at every checkpoint, a server
that refused every request. Such a run did not do what it was run for, however
completely it went through its plan: ``pilot`` (and a cluster run, over all its shards)
exits 1 and says which roles, with their slots' codes and what their folds said.
"""

from __future__ import annotations

import click

from efold.controller.pilot.pilot import PilotOutcome
from efold.report.schema import Results, RoleResult


def say_unmeasured(results: Results, *, fold_said: dict[str, list[str]] | None = None
                   ) -> bool:
    """Whether a role measured nothing (``unmeasured``), said on stderr with a line for
    each such role naming the codes its slots ended with and what its fold said when it
    failed (``fold_said``, by role: ``folds_said``; the cause, which ``--quiet`` prints
    nowhere else)."""
    roles = unmeasured(results)
    if roles:
        click.echo("nothing measured: every slot of a role ended before its question was "
                   "answered", err=True)
    for role in roles:
        codes = ", ".join(f"{n:,} {code}" for code, n in
                          sorted(role.codes.items(), key=lambda item: -item[1]))
        visited = role.overall.execution.visited
        said = (fold_said or {}).get(role.role)
        click.echo(f"  role {role.role}: none of its {visited:,} slot"
                   f"{'s' if visited != 1 else ''} answered ({codes or 'no code'})"
                   + (f"; its fold said {'; '.join(said)}" if said else ""), err=True)
    return bool(roles)


def folds_said(outcome: PilotOutcome) -> dict[str, list[str]]:
    """What each role's fold said at the checkpoints it failed, by role, each distinct
    saying once (at most three)."""
    roles = {slot.checkpoint: slot.role for slot in outcome.plan.slots}
    said: dict[str, list[str]] = {}
    for key, cause in sorted(outcome.causes.items()):
        text = cause.code + (f" ({cause.detail})" if cause.detail else "")
        sayings = said.setdefault(roles.get(key, "?"), [])
        if text not in sayings and len(sayings) < 3:
            sayings.append(text)
    return said


def unmeasured(results: Results) -> list[RoleResult]:
    """The roles of ``results`` that measured nothing (module docstring)."""
    return [role for role in results.results
            if not role.overall.execution.completed
            and role.overall.execution.skipped < role.overall.execution.visited]
