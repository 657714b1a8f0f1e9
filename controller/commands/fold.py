"""``efold-controller fold check FOLD [--campaign FILE] [--trace T] [--json]``: build a
fold once in a contained prep child and say whether efold can use what it kept
(``controller.pilot.fold_check``).

Exit 0: the checkpoint was built and is usable; 1: the fold failed, or its checkpoint
is unusable (inventory-infeasible, excluded, or an arm that does not apply to the
suite); 2: a refusal (``refused: CODE (detail)``: an unknown fold or trace, a bad
campaign); 130/143 when interrupted.
"""

from __future__ import annotations

from collections.abc import Iterator

import click

from efold.controller.commands._options import echo_report, refuse
from efold.controller.pilot.fold_check import KIND_NAMES, FoldCheck, check_fold, resolve
from efold.controller.rundirs.interrupt import exit_status
from efold.errors import EfoldError
from efold.isolation import Isolation

_WHY: dict[str, str] = {
    "arm_not_applicable": "the arm does not apply to this suite: its slots are skipped",
    "inventory_infeasible": "the first request does not fit the input envelope: its "
                            "slots are skipped (inventory_infeasible)",
    "boundary_unverified": "verified: false excludes every slot of this checkpoint "
                           "(boundary_unverified): asked, never scored",
    "pressure_unverified": "pressure not met excludes every slot of this checkpoint "
                           "(pressure_unverified): asked, never scored",
    "store_degraded": "an empty store excludes every slot of this checkpoint "
                      "(store_degraded): asked, never scored",
}
_EXCLUDED = "{} excludes every slot of this checkpoint: asked, never scored"


@click.group("fold")
def command() -> None:
    """Check a fold: build it once in a contained prep child and show what it keeps.

    Exit status (fold check): 0 usable, 1 failed or unusable, 2 usage error or refused."""


@command.command("check")
@click.argument("fold")
@click.option("--campaign", "campaign", default=None, metavar="FILE",
              help="A campaign file (or a bundled one: `default`, `original`, `hard`, "
                   "`boundary`, `resume`, `lookup`): FOLD is then one of its roles.")
@click.option("--trace", "trace", default=None, metavar="T",
              help="A trace id of the suite (default: the campaign's first trace).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def check(fold: str, campaign: str | None, trace: str | None, as_json: bool) -> None:
    """Build FOLD on one trace in a contained prep child (a private temporary root,
    removed afterwards) and show what the checkpoint keeps, or why the fold failed.

    FOLD is a built-in arm or an installed efold.folds entry point; with --campaign,
    a role of that campaign. Exits 0 when the checkpoint is built and usable, 1 when
    the fold failed or the checkpoint is unusable, 2 on a refusal."""
    try:
        result = check_fold(resolve(fold, campaign, trace))
    except EfoldError as exc:
        refuse(exc)
    echo_report(result, as_json=as_json, text=describe(result))
    if result.interrupted is not None:
        raise SystemExit(exit_status(result.interrupted))
    if not result.ok:
        raise SystemExit(1)


def describe_isolation(iso: Isolation | None) -> Iterator[str]:
    """Whether the fold ran isolated (no network, writes only its slot), each part with
    its reason when it did not."""
    if iso is None:
        yield "isolated: not reported (the prep child failed before saying)"
        return
    yield f"isolated: {'yes' if iso.complete else 'no'}"
    yield f"  network: {iso.network}" + (f" ({iso.network_reason})" if iso.network_reason
                                         else "")
    yield f"  writes: {iso.writes}" + (f" ({iso.writes_reason})" if iso.writes_reason
                                       else " (only its slot directory)")


def describe(c: FoldCheck) -> Iterator[str]:
    """The human form of a check (a proxy's log tail, when it wrote one, at the end)."""
    yield from _describe(c)
    if c.proxy_log:
        yield f"proxy log (its last {len(c.proxy_log)} lines):"
        yield from (f"  {line}" for line in c.proxy_log)


def _describe(c: FoldCheck) -> Iterator[str]:
    t = c.trace
    yield f"fold: {c.fold} ({KIND_NAMES[c.kind]}; role {c.role})"
    yield (f"trace: {t.id} ({t.suite} suite): {t.events} events, "
           f"{t.tokens_estimate:,} estimated tokens")
    if c.interrupted is not None:
        yield f"interrupted (signal {c.interrupted}): no result"
        return
    yield from describe_isolation(c.isolation)
    kept = c.checkpoint
    if kept is None:
        yield f"failed: {c.code} (the controller's code)"
        if c.cause is not None:
            yield f"fold's own code: {c.cause.code}" + (f" ({c.cause.detail})"
                                                        if c.cause.detail else "")
        else:
            yield "fold's own code: none reported (the prep child left no cause)"
        yield "usable: no"
        return
    yield "checkpoint: built"
    yield f"  messages: {kept.messages}"
    yield f"  visible bytes: {kept.visible_bytes:,}"
    yield f"  estimated tokens: {kept.tokens_estimate:,}"
    withheld = " (recall-only: no lookup is offered)" if c.probe_mode == "recall-only" else ""
    yield f"  tools offered: {', '.join(kept.tools) or 'none'}{withheld}"
    if kept.store_records is None:
        yield "  store: none"
    else:
        yield (f"  store: {kept.store_records} records "
               f"({kept.omitted_credential} omitted: credential)")
    yield (f"  boundary: {kept.boundary_kind}, "
           f"verified: {'true' if kept.boundary_verified else 'false'}")
    yield ("  first request: " + ("fits the input envelope" if c.feasible
                                  else "does NOT fit the input envelope"))
    if c.stand_in:
        model = ("; the campaign's summariser model is not used here" if c.summariser_skipped
                 else "")
        yield ("  summaries by the stand-in: efold's deterministic summariser answered this "
               "fold's summary requests (fold check sends no model request" + model + "), "
               "so this checkpoint does not show the fold's own summarising")
    counts = c.availability or {}
    yield (f"availability ({sum(counts.values())} probes): "
           + ", ".join(f"{name} {n}" for name, n in counts.items()))
    if c.absent:
        yield "absent probes:"
        yield from (f"  {a.probe} ({a.category})" for a in c.absent)
    if c.unusable:
        yield "usable: no"
        yield from (f"  {_WHY.get(reason) or _EXCLUDED.format(reason)}"
                    for reason in c.unusable)
    else:
        yield "usable: yes"
