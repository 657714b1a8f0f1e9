"""``recover`` and ``reap`` on a cluster run: each is what it is on one machine, done to
every shard's own run where this machine reaches it (``cluster_collect``).

A cluster run's own journal holds no process: its controller only dispatched. What a
fault leaves alive is in the shard runs on their nodes. So ``recover`` on a cluster run
says reconciled only if every shard's run says so (a shard that refused before opening
a run has nothing to reconcile); a shard whose run this machine
does not reach is not reconciled from here, and the line says where to run
``recover`` (the node and the path). ``reap`` reaps every reachable shard run whose
controller is gone (never a live one: ``lease_held`` there is reported, not forced),
then collects the cluster run (``collect_run``) so its copies and reports are the
shards' runs as they are now.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from efold.controller.rundirs.cluster_collect import Reach, ShardRun, collect_run, reach_shards
from efold.controller.rundirs.cluster_run import read_manifest, read_shard_ends
from efold.controller.rundirs.reap import reap
from efold.controller.rundirs.recovery import named, observe
from efold.errors import EfoldError
from efold.registry.lease import LeaseState, probe_lease


class ShardRecovery(msgspec.Struct, frozen=True):
    index: int
    node: str
    run_dir: str
    reach: str  # cluster_collect.Reach
    reconciled: bool
    verdict: str  # the shard run's own verdict line, or why it has none from here


class ClusterRecovery(msgspec.Struct, frozen=True):
    reconciled: bool  # every shard's run reconciled
    verdict: str
    lease: str  # the cluster controller's lease
    shards: list[ShardRecovery]


def _verdict(shards: list[ShardRecovery]) -> str:
    behind = [s.index for s in shards if not s.reconciled]
    if not behind:
        return "reconciled: every shard's run is reconciled"
    return ("NOT reconciled: shard " + ", ".join(map(str, behind))
            + " (each line says why and what to run)")


def _shard_line(run: Path, shard: ShardRun, refused: bool,
                failed: str | None) -> ShardRecovery:
    """How one shard's run reads from here (``recover``'s own verdict where it can)."""
    placed = shard.placed
    reconciled, verdict = False, ""
    if shard.reach in (Reach.READ, Reach.RUNNING, Reach.OLDER):
        report = observe(placed.run_dir)
        # ``reap`` on the cluster run reaps the shard runs it reaches.
        reconciled, verdict = report.reconciled, named(report.verdict, run)
    elif refused and shard.reach in (Reach.NO_RUN, Reach.UNREACHABLE):
        # Its actor refused (nothing started on the node), or its controller refused
        # and exited before opening a run (and launching anything): nothing is alive.
        reconciled, verdict = True, "reconciled: it refused before any run began"
    elif shard.reach is Reach.UNREACHABLE:
        verdict = (f"not reachable from this machine: run `efold-controller recover "
                   f"{placed.run_dir}` on node {placed.node[:12]}")
    else:
        verdict = f"no run of its own read here ({shard.reach.value}: {shard.detail or '-'})"
    if failed is not None:
        verdict += f"; reap: {failed}"
    return ShardRecovery(index=placed.spec.mark.index, node=placed.node,
                         run_dir=placed.run_dir, reach=shard.reach.value,
                         reconciled=reconciled, verdict=verdict)


def observe_cluster(run: Path, refusals: dict[int, str] | None = None) -> ClusterRecovery:
    """``recover`` on a cluster run: observation only, as on one machine."""
    ends = read_shard_ends(run, read_manifest(run))
    shards = []
    for shard in reach_shards(run):
        index = shard.placed.spec.mark.index
        end = ends.get(index)
        shards.append(_shard_line(run, shard, end is not None and end.outcome.value == "refused",
                                  (refusals or {}).get(index)))
    return ClusterRecovery(reconciled=all(s.reconciled for s in shards), verdict=_verdict(shards),
                           lease=probe_lease(run).state.value, shards=shards)


def reap_cluster(run: Path) -> ClusterRecovery:
    """``reap`` on a cluster run: every reachable shard run whose controller is gone is
    reaped; then the cluster run is collected, and observed again."""
    refusals: dict[int, str] = {}
    for shard in reach_shards(run):
        index = shard.placed.spec.mark.index
        # Never a run older than its copy (a restored backup: not the run's truth), nor
        # one whose controller holds its lease.
        if shard.reach is Reach.OLDER:
            refusals[index] = f"not reaped: its run is {shard.detail}"
        elif shard.reach is Reach.RUNNING or (
                shard.reach is Reach.READ
                and probe_lease(shard.placed.run_dir).state is LeaseState.LIVE):
            refusals[index] = "not reaped: a live process holds its lease"
        elif shard.reach is Reach.READ:
            try:
                reap(shard.placed.run_dir)
            except EfoldError as exc:  # named on the shard's line, never hidden
                refusals[index] = f"{exc.code.value} ({exc.detail})"
    collect_run(run)
    return observe_cluster(run, refusals)


def cluster_text(report: ClusterRecovery) -> list[str]:
    """``recover``/``reap`` on a cluster run, as text: the verdict first and last."""
    lines = [report.verdict, f"cluster controller lease: {report.lease}"]
    lines += [f"shard {s.index} (node {s.node[:12]}, {s.run_dir}): {s.verdict}"
              for s in report.shards]
    return [*lines, report.verdict]
