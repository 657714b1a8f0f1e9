"""Running one campaign over a Ray cluster (``efold-controller cluster pilot``).

Ray schedules and transports; efold keeps every rule it has on one machine. The order,
each step complete before the next:

1. connect to the cluster (``ray.init(address=...)``) and list its alive nodes that
   have the resources a shard asks for (``ShardResources``);
2. claim the cluster run's directory, take its lease, open its journal and consume
   the campaign's authorization there, once, before anything is dispatched
   (``cluster_run``'s module docstring has the directory's layout);
3. fix the shards (``shards.plan_shards``: whole checkpoints, the cap partitioned), bind
   each to one node (round robin over the nodes sorted by id), mint each its own
   single-use shard authorization and publish ``cluster.json``;
4. start one ``ShardHost`` actor per shard, pinned to its node (hard node affinity,
   never restarted, no task retried: Ray never moves or re-runs a shard). The actor
   checks it is on its node (``cluster_shard_misplaced``) and starts an ordinary efold
   controller, ``efold-controller cluster shard``, as its own process: lease, journal,
   children, containment and reap on that node, exactly as ``pilot``;
5. poll every shard, printing its progress; as a shard ends, bring its run's records
   back (a tar of its run directory without ``slots/``), publish the copy, then its
   end record. A shard whose actor or node dies is recorded ``lost``: its slots are
   missing, and it is never re-run elsewhere;
6. release the lease and write the merged reports (``cluster_run.read_shards``).

Ctrl-C (or SIGTERM) asks every shard controller to stop as an operator's Ctrl-C would
(each contains its children and writes its reports), waits for them, brings their
records back and ends with status 130 (143).
"""

from __future__ import annotations

import logging
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from efold.controller.campaigns.plan import plan_for
from efold.controller.campaigns.registration import REGISTRATION_NAME, Registration
from efold.controller.campaigns.shards import ShardTicket, checkpoint_keys, plan_shards, shard_plan
from efold.controller.cluster.shard_host import (
    COLLECT_SECONDS,
    ShardHost,
    node_records,
)
from efold.controller.errors import ControllerError
from efold.controller.rundirs.aggregate import PLAN_NAME
from efold.controller.rundirs.authorize_run import RealGrant, consume_faux, consume_real, mint_shard
from efold.controller.rundirs.cluster_collect import (
    NodeRecords,
    collect,
    publish_copy,
    reach_shards,
)
from efold.controller.rundirs.cluster_run import (
    CLUSTER_NAME,
    CLUSTER_VERSION,
    SHARDS_DIR,
    ClusterManifest,
    ShardEnd,
    ShardOutcome,
    ShardPlaced,
    outcome_of,
    read_shard_ends,
    shard_end_name,
)
from efold.controller.rundirs.run_setup import route_of_grant
from efold.controller.rundirs.runroot import claim_run_dir, new_run_dir, private_subdir
from efold.digests import canonical_json, sha256_hex
from efold.errors import Code, EfoldError
from efold.identity import current_identity
from efold.registry import publish_exclusive
from efold.registry.authorization import AuthorizationDomain
from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease

# How long a head at HOST:PORT has to accept a connection.
CONNECT_SECONDS: Final = 10.0
# How often the cluster controller asks each shard how far it is.
POLL_SECONDS: Final = 0.5
# How long one answer from a shard's actor may take (a poll, an interruption's ask),
# and how long a shard's actor may stay silent before the shard is recorded lost (under
# Ray's own 60 s for a lost head, after which Ray ends the driver: the cluster controller
# ends first, its reports written). How long its records may take to come back is
# ``shard_host.COLLECT_SECONDS``.
RPC_SECONDS: Final = 5.0
UNREACHABLE_SECONDS: Final = 30.0
_FIXED_CODES: Final = frozenset(code.value for code in Code)


# How long every shard has to be placed and its controller started (``--place-seconds``).
PLACE_SECONDS: Final = 120.0


@dataclass(frozen=True)
class ShardResources:
    """What each shard asks of its node (Ray resources): CPUs, GPUs and named custom
    resources, e.g. ``{"llama-server": 1}`` for a node that hosts a local model server;
    and how long it may wait to be placed (``place_seconds``)."""

    cpus: float = 1.0
    gpus: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)
    place_seconds: float = PLACE_SECONDS

    def asked(self) -> str:
        need = {"CPU": self.cpus, "GPU": self.gpus, **self.custom}
        return ", ".join(f"{k} {v:g}" for k, v in need.items() if v)


@dataclass
class ClusterOutcome:
    run: Path
    ends: dict[int, ShardEnd]
    interrupted: int | None = None  # the signal that interrupted the cluster run


class _RayShardHost(ShardHost):
    def node(self) -> str:
        return str(ray.get_runtime_context().get_node_id())


# The actor class: never restarted, no task retried (Ray never moves or re-runs a shard).
RayShardHost: Any = ray.remote(max_restarts=0, max_task_retries=0)(_RayShardHost)


# What a gRPC server (a Ray head's GCS) answers an HTTP/2 client's connection preface
# with: a frame header (9 bytes) whose type byte (the fourth) is SETTINGS (4).
_H2_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(
    [0, 0, 0, 4, 0, 0, 0, 0, 0])  # ... and our own empty SETTINGS frame
_H2_SETTINGS: Final = 4


def _speaks_grpc(host: str, port: int) -> str | None:
    """None when ``host:port`` answers like a gRPC server within ``CONNECT_SECONDS``,
    else what it did instead (Ray's own client would wait on anything else forever)."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS) as conn:
            conn.settimeout(CONNECT_SECONDS)
            conn.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = conn.recv(9 - len(header))
                if not chunk:
                    return "it closed the connection (not a Ray head)"
                header += chunk
    except TimeoutError:
        return f"it answered nothing within {CONNECT_SECONDS:g} s (not a Ray head)"
    except OSError as exc:
        return str(exc)
    if header[3] != _H2_SETTINGS:
        return "it does not speak gRPC (not a Ray head)"
    return None


def connect(address: str) -> None:
    """Join the cluster at ``address`` (``auto``, ``host:port`` or ``ray://...``);
    ``cluster_unavailable`` when there is none. A ``host:port`` must answer as a gRPC
    server (a Ray head's GCS) within ``CONNECT_SECONDS`` first: Ray itself retries a
    dead head forever, and waits forever on a listener that is not Ray."""
    host, sep, port = address.rpartition(":")
    if sep and host and port.isdigit() and "://" not in address:
        why = _speaks_grpc(host, int(port))
        if why is not None:
            raise ControllerError(Code.CLUSTER_UNAVAILABLE, f"no Ray cluster at {address}: {why}")
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ControllerError(Code.CLUSTER_UNAVAILABLE,
                              f"no Ray cluster at {address}: {exc}") from exc


def disconnect() -> None:
    """Leave the cluster: Ray's own threads print nothing after this (a script reads
    ``--json``'s line as the last one)."""
    ray.shutdown()


# Ray's own functions carry no annotations: these two are their only callers' view.
def _ray_nodes() -> list[dict[str, Any]]:
    """``ray.nodes()``: every node the head knows, alive or dead."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


def _ray_free() -> dict[str, float]:
    """``ray.available_resources()``: what the cluster has free now."""
    free: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
    return free


def eligible_nodes(resources: ShardResources) -> list[str]:
    """The alive nodes with at least one shard's resources, sorted by id."""
    need = {"CPU": resources.cpus, "GPU": resources.gpus, **resources.custom}
    found = []
    nodes = _ray_nodes()
    for node in nodes:
        have = node.get("Resources", {})
        if node.get("Alive") and all(have.get(k, 0) >= v for k, v in need.items() if v):
            found.append(str(node["NodeID"]))
    return sorted(found)


@dataclass
class _Shard:
    placed: ShardPlaced
    host: Any
    slots: int  # planned
    end: ShardEnd | None = None
    shown: int = 0  # the visited count last printed
    answered: float = field(default_factory=time.monotonic)  # its actor's last answer

    def worth_showing(self, visited: int) -> bool:
        """At each tenth of the shard's slots (as ``pilot``'s plain lines)."""
        step = max(1, self.slots // 10)
        return visited // step > self.shown // step


def run_cluster(reg: Registration, reg_bytes: bytes, *, shards: int | None,
                runs_root: Path, run_dir: Path | None, node_root: Path | None,
                resources: ShardResources, program: list[str],
                echo: Callable[[str], None], grant: RealGrant | None = None,
                process_group_ok: bool = False) -> ClusterOutcome:
    """Run the registration's campaign over the connected cluster (the module
    docstring has the order). ``shards`` None: one per eligible node, at most one per
    checkpoint. ``node_root``: where each node makes its shard's run directory (None: the
    cluster run's own parent, the same path on every node)."""
    nodes = eligible_nodes(resources)
    if not nodes:
        raise ControllerError(Code.CLUSTER_SHARDS_INVALID,
                              "no alive node of the cluster has a shard's resources")
    plan = plan_for(reg)
    count = shards if shards is not None else min(len(nodes), len(checkpoint_keys(plan)))
    plan_shards(reg, plan, "check", count)  # refuses before any directory is made
    run = claim_run_dir(run_dir) if run_dir else new_run_dir(
        runs_root, f"{reg.campaign.name}-cluster")
    echo(f"run: {run}")
    root = node_root or run.parent
    outcome = ClusterOutcome(run, {})
    with acquire_lease(run) as lease:
        journal = JournalWriter(run, lease)
        lease.set_epoch(journal.record_epoch(current_identity()))
        # The campaign's authorization, consumed once, here: the operator's signed one
        # on the real route (bound to this directory), else a faux one minted now.
        route = route_of_grant(grant)
        if grant is not None and not grant.local:
            auth_id = consume_real(reg, reg_bytes, plan.schedule_sha256, lease,
                                   run_id=run.name, grant=grant)
        else:  # minted here: a faux one, or a local route's (its own domain)
            auth_id = consume_faux(reg, reg_bytes, plan.schedule_sha256, lease,
                                   run_id=run.name, domain=AuthorizationDomain.LOCAL
                                   if route == "local" else AuthorizationDomain.FAUX)
        publish_exclusive(run, REGISTRATION_NAME, reg_bytes)
        publish_exclusive(run, PLAN_NAME, canonical_json(plan) + b"\n")
        placed: list[ShardPlaced] = []
        tickets: list[bytes] = []
        slots: list[int] = []
        for i, spec in enumerate(plan_shards(reg, plan, run.name, count)):
            node = nodes[i % len(nodes)]
            shard_dir = str(root / f"{run.name}-s{spec.mark.index}")
            part = shard_plan(plan, spec.mark, spec.checkpoints, spec.cap_units)
            shard_auth = f"{auth_id}.shard-{spec.mark.index}"
            artifact, key = mint_shard(reg, reg_bytes, part.schedule_sha256, Path(shard_dir),
                                       authorization_id=shard_auth, cap_units=spec.cap_units,
                                       route=route)
            placed.append(ShardPlaced(spec=spec, node=node, run_dir=shard_dir,
                                      authorization_id=shard_auth))
            slots.append(len(part.slots))
            tickets.append(msgspec.json.encode(ShardTicket(
                spec=spec, node=node, registration_sha256=sha256_hex(reg_bytes),
                run_dir=shard_dir, artifact=artifact, trusted_key=key, route=route,
                process_group_ok=process_group_ok)))
        manifest = ClusterManifest(version=CLUSTER_VERSION, cluster=run.name,
                                   registration_sha256=sha256_hex(reg_bytes),
                                   authorization_id=auth_id, shards=placed)
        publish_exclusive(run, CLUSTER_NAME, msgspec.json.encode(manifest) + b"\n")
        private_subdir(run, SHARDS_DIR)
        running = [_Shard(p, _host(p.node, resources), n) for p, n in zip(placed, slots,
                                                                             strict=True)]
        with _signals_as_interrupt() as interrupted:
            _start(running, tickets, reg_bytes, program, run, echo, resources, interrupted)
            _watch(running, run, echo, interrupted)
        # A shard lost to the driver may have ended well on its node: read its own run
        # where this machine reaches it (the node is this one, or a shared filesystem).
        if any(s.end is not None and s.end.outcome is ShardOutcome.LOST for s in running):
            by_index = {s.placed.spec.mark.index: s for s in running}
            for c in collect(run, reach_shards(run), read_shard_ends(run, manifest)):
                if c.ended is not None:
                    by_index[c.index].end = c.ended
                    echo(f"shard {c.index}: its run on its node reads {c.ended.outcome.value}")
        outcome.interrupted = interrupted.signal
        journal.close()
    outcome.ends = {s.placed.spec.mark.index: s.end for s in running if s.end is not None}
    return outcome


def _host(node: str, resources: ShardResources) -> Any:
    return RayShardHost.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        num_cpus=resources.cpus, num_gpus=resources.gpus,
        resources=dict(resources.custom) or None).remote()


def _start(running: list[_Shard], tickets: list[bytes], reg_bytes: bytes,
           program: list[str], run: Path, echo: Callable[[str], None],
           resources: ShardResources, interrupted: _Interrupt) -> None:
    """Start every shard; one not placed (its actor not scheduled, or its controller
    not started) within ``place_seconds``, or by an interruption, ends ``refused``
    with ``cluster_unschedulable`` (its actor killed): never an unbounded wait."""
    starts = [s.host.start.remote(t, reg_bytes, program)
              for s, t in zip(running, tickets, strict=True)]
    deadline = time.monotonic() + resources.place_seconds
    for shard, ref in zip(running, starts, strict=True):
        spec = shard.placed.spec
        try:
            if not _placed(ref, deadline, interrupted):
                ray.kill(shard.host, no_restart=True)
                echo(f"shard {spec.mark.index}: not placed on node {shard.placed.node[:12]} "
                     f"within {resources.place_seconds:g} s (it asks {resources.asked()}; "
                     f"the node has {_available(shard.placed.node)})")
                _end(shard, run, ShardEnd(index=spec.mark.index, outcome=ShardOutcome.REFUSED,
                                          exit_status=None,
                                          code=Code.CLUSTER_UNSCHEDULABLE.value), echo)
                continue
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)
            code = cause.code.value if isinstance(cause, ControllerError) else None
            if code:
                echo(f"shard {spec.mark.index}: refused on its node: {cause}")
            else:
                unfit = _unfit(shard.placed.node)
                if unfit is not None:
                    code = Code.CLUSTER_NODE_UNFIT.value
                    echo(f"shard {spec.mark.index}: node {shard.placed.node[:12]} cannot run "
                         f"efold ({unfit})")
            _end(shard, run, ShardEnd(index=spec.mark.index, outcome=(
                ShardOutcome.REFUSED if code else ShardOutcome.LOST), exit_status=None,
                code=code), echo)
            continue
        echo(f"shard {spec.mark.index}/{spec.mark.count}: node {shard.placed.node[:12]}, "
             f"{shard.slots} slots, {len(spec.checkpoints)} checkpoints, cap {spec.cap_units} units, "
             f"run {shard.placed.run_dir}")


def _placed(ref: Any, deadline: float, interrupted: _Interrupt) -> bool:
    """Whether ``ref`` (a shard's start) completed before ``deadline`` and before any
    interruption; raises what the start raised."""
    while True:
        try:
            ray.get(ref, timeout=POLL_SECONDS)
            return True
        except ray.exceptions.GetTimeoutError:
            if interrupted.signal is not None or time.monotonic() >= deadline:
                return False


# A probe that imports efold on a node, pickled by value (its module is ``__main__``)
# so that it runs where efold itself cannot be imported and says why.
_UNFIT_PROBE = """
def efold_imports():
    try:
        import efold.controller.cluster.dispatch
    except BaseException as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
"""


def _unfit(node: str) -> str | None:
    """Why ``node`` cannot import efold, or None when it can (or cannot be asked)."""
    space: dict[str, Any] = {"__name__": "__main__"}
    exec(_UNFIT_PROBE, space)  # a function of __main__: cloudpickle sends it by value
    probe = ray.remote(num_cpus=0, max_retries=0)(space["efold_imports"])
    try:
        why = ray.get(probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id=node, soft=False)).remote(), timeout=RPC_SECONDS * 6)
    except ray.exceptions.RayError:
        return None
    return why if isinstance(why, str) else None


def _available(node: str) -> str:
    """A node's available resources now, as an operator reads them."""
    try:
        have: dict[str, float] = next(
            (n.get("Resources", {}) for n in _ray_nodes()
             if str(n.get("NodeID")) == node), {})
        free = _ray_free()
    except Exception:  # only a sentence of the refusal: never its cause
        return "unknown resources"
    return ", ".join(f"{k} {free.get(k, 0):g} free of {v:g}" for k, v in sorted(have.items())
                     if k in ("CPU", "GPU") or not k.startswith(("node:", "memory",
                                                                  "object_store")))


def _watch(running: list[_Shard], run: Path, echo: Callable[[str], None],
           interrupted: _Interrupt) -> None:
    """Poll every shard until each has ended. Every ``ray.get`` is bounded: a shard
    whose actor does not answer for ``UNREACHABLE_SECONDS`` (its node or the Ray head
    gone) ends ``lost`` with ``cluster_shard_unreachable`` (its keeper interrupts its
    controller when the actor dies; ``cluster collect`` reads its run later)."""
    asked = False
    while any(s.end is None for s in running):
        if interrupted.signal is not None and not asked:
            asked = True
            echo("interrupted: every shard controller is asked to stop and contain")
            for s in running:
                if s.end is None:
                    s.host.interrupt.remote()
        for shard in [s for s in running if s.end is None]:
            _look(shard, run, echo)
        if any(s.end is None for s in running):
            time.sleep(POLL_SECONDS)


def _look(shard: _Shard, run: Path, echo: Callable[[str], None]) -> None:
    """One poll of one shard; its end once its controller exited (or it is lost)."""
    index = shard.placed.spec.mark.index
    try:
        status, visited = ray.get(shard.host.poll.remote(), timeout=RPC_SECONDS)
        shard.answered = time.monotonic()
        if shard.worth_showing(visited):
            shard.shown = visited
            echo(f"shard {index}: {visited}/{shard.slots} slots visited")
        if status is None:
            return
        if status < 0:  # its keeper died without an end: the controller's fate is unknown
            raise ray.exceptions.RayError("the shard's keeper died")
        tar, line, seconds = ray.get(shard.host.collect.remote(), timeout=COLLECT_SECONDS)
    except ray.exceptions.GetTimeoutError:
        if time.monotonic() - shard.answered < UNREACHABLE_SECONDS:
            return
        echo(f"shard {index}: its actor has not answered for {UNREACHABLE_SECONDS:g} s")
        _end(shard, run, ShardEnd(index=index, outcome=ShardOutcome.LOST, exit_status=None,
                                  code=Code.CLUSTER_SHARD_UNREACHABLE.value), echo)
        return
    except ray.exceptions.RayError:
        _end(shard, run, ShardEnd(index=index, outcome=ShardOutcome.LOST,
                                  exit_status=None), echo)
        return
    code = _code_of(line)
    if tar:
        try:
            publish_copy(run, index, tar)
        except EfoldError as exc:  # records its node sent that will not unpack here
            echo(f"shard {index}: its records are refused ({exc})")
            _end(shard, run, ShardEnd(index=index, outcome=ShardOutcome.FAILED,
                                      exit_status=status, code=exc.code.value), echo)
            return
    _end(shard, run, ShardEnd(index=index, outcome=outcome_of(status), exit_status=status,
                              code=code, seconds=round(seconds, 3)), echo)


def _code_of(line: bytes) -> str | None:
    """The fixed code a shard controller's last line names: its ``--json`` line's
    ``code``, or the code of its ``refused: CODE (...)`` line."""
    if line.startswith(b"refused: "):
        code: object = line.split()[1].decode("ascii", "replace")
    else:
        try:
            code = msgspec.json.decode(line).get("code")
        except (msgspec.DecodeError, AttributeError):
            return None
    return code if isinstance(code, str) and code in _FIXED_CODES else None


def _end(shard: _Shard, run: Path, end: ShardEnd, echo: Callable[[str], None]) -> None:
    shard.end = end
    publish_exclusive(run / SHARDS_DIR, shard_end_name(end.index),
                      msgspec.json.encode(end) + b"\n")
    detail = f" ({end.code})" if end.code else ""
    took = f" in {end.seconds:.1f} s" if end.seconds is not None else ""
    echo(f"shard {end.index}: {end.outcome.value}{detail}{took}")


@dataclass
class _Interrupt:
    signal: int | None = None


@contextmanager
def _signals_as_interrupt() -> Iterator[_Interrupt]:
    """SIGINT and SIGTERM, while the shards run, set the interrupt (the first one wins)
    instead of raising: the watch loop then asks every shard to stop and waits."""
    seen = _Interrupt()

    def note(signum: int, frame: object) -> None:
        if seen.signal is None:
            seen.signal = signum

    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield seen
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def fetch_shard_runs(manifest: ClusterManifest, *, reap_first: bool
                     ) -> dict[int, NodeRecords | str]:
    """Every shard's run records as its own node reads them, by shard index (a task
    bound to the node, at most ``COLLECT_SECONDS``), or why its node could not be asked."""
    task = ray.remote(num_cpus=0, max_retries=0)(node_records)
    refs = {p.spec.mark.index: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id=p.node, soft=False)).remote(p.run_dir, reap_first) for p in manifest.shards}
    out: dict[int, NodeRecords | str] = {}
    for index, ref in refs.items():
        try:
            out[index] = ray.get(ref, timeout=COLLECT_SECONDS)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            out[index] = f"its node did not answer within {COLLECT_SECONDS:g} s"
        except ray.exceptions.RayError as exc:
            out[index] = f"its node could not be asked ({type(exc).__name__})"
    return out
