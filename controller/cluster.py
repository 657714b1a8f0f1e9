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

import ctypes
import io
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
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

from efold.controller.aggregate import PLAN_NAME, RECEIPTS_DIR
from efold.controller.authorize_run import consume_faux, mint_shard
from efold.controller.cluster_run import (
    CLUSTER_NAME,
    CLUSTER_VERSION,
    SHARDS_DIR,
    ClusterManifest,
    ShardEnd,
    ShardOutcome,
    ShardPlaced,
    outcome_of,
    shard_copy_path,
    shard_end_name,
)
from efold.controller.errors import ControllerError
from efold.controller.plan import plan_for
from efold.controller.registration import REGISTRATION_NAME, Registration
from efold.controller.runroot import claim_run_dir, new_run_dir, private_subdir
from efold.controller.shards import ShardTicket, checkpoint_keys, plan_shards, shard_plan
from efold.digests import canonical_json, sha256_hex
from efold.errors import Code
from efold.identity import current_identity
from efold.registry import publish_exclusive
from efold.registry.files import fsync_dir, fsync_fd
from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease

# How long a head at HOST:PORT has to accept a connection.
CONNECT_SECONDS: Final = 10.0
# How often the cluster controller asks each shard how far it is.
POLL_SECONDS: Final = 0.5
# A shard's run directory is copied back without these (``slots/``: per-slot scratch
# trees; ``aggregate`` never reads them, ``prune --slots-only`` removes them).
_NOT_COPIED: Final = frozenset({"slots"})
_PR_SET_PDEATHSIG: Final = 1
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


def _as_from_a_shell() -> None:
    """In the shard controller before it runs. Signals as a shell would leave them: a
    Ray worker's thread blocks SIGINT and its process ignores SIGHUP and SIGQUIT, and a
    blocked or ignored disposition survives exec (the controller would never hear an
    interrupt). Then SIGTERM when the actor process that started it dies, so a killed
    actor leaves no controller running unwatched (it contains its children as on an
    operator's SIGTERM)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class ShardHost:
    """One shard's host on its node (a Ray actor, created pinned to that node). Its
    methods run one at a time on the actor's main thread, the one that started the
    shard controller (the parent-death signal is bound to that thread)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._ticket: ShardTicket | None = None
        self._scratch: Path | None = None
        self._started = 0.0

    def node(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def start(self, ticket_json: bytes, registration: bytes, program: list[str]) -> int:
        """Start the shard's controller; returns its pid. Refuses (raises) a ticket
        bound to another node."""
        ticket = msgspec.json.decode(ticket_json, type=ShardTicket)
        if ticket.node != self.node():
            raise ControllerError(Code.CLUSTER_SHARD_MISPLACED,
                                  f"shard {ticket.spec.mark.index} is bound to node "
                                  f"{ticket.node}, not this one")
        scratch = Path(tempfile.mkdtemp(prefix="efold-shard-"))
        (scratch / REGISTRATION_NAME).write_bytes(registration)
        (scratch / "ticket.json").write_bytes(ticket_json)
        argv = [*program, "cluster", "shard", "--registration", str(scratch / REGISTRATION_NAME),
                "--sha256", ticket.registration_sha256, "--ticket", str(scratch / "ticket.json"),
                "--json", "--no-progress"]
        with open(scratch / "out", "wb") as out, open(scratch / "err", "wb") as err:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=err, preexec_fn=_as_from_a_shell)
        self._ticket, self._scratch, self._started = ticket, scratch, time.monotonic()
        return self._proc.pid

    def poll(self) -> tuple[int | None, int]:
        """(the controller's exit status or None while it runs, receipts published)."""
        assert self._proc is not None and self._ticket is not None
        receipts = Path(self._ticket.run_dir) / RECEIPTS_DIR
        try:
            visited = sum(1 for n in os.listdir(receipts)
                          if n.endswith(".json") and not n.startswith("."))
        except OSError:
            visited = 0
        return self._proc.poll(), visited

    def interrupt(self) -> None:
        """Ask the shard controller to stop as an operator's Ctrl-C would."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)

    def collect(self) -> tuple[bytes, bytes, float]:
        """After the controller exited: its run directory's records (a tar without
        ``slots/``), the last line it printed (its ``--json`` line; a refusal's
        ``refused: CODE`` line when it refused) and its wall time."""
        assert self._proc is not None and self._ticket is not None and self._scratch
        seconds = time.monotonic() - self._started
        run = Path(self._ticket.run_dir)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            if run.is_dir():
                for name in sorted(os.listdir(run)):
                    if name not in _NOT_COPIED:
                        tar.add(run / name, arcname=name)
        lines = (self._scratch / "out").read_bytes().strip().splitlines()
        refusals = [line for line in (self._scratch / "err").read_bytes().splitlines()
                    if line.startswith(b"refused: ")]
        shutil.rmtree(self._scratch)  # the ticket is spent; its copy goes with it
        # Its refusal's line when it refused (then it printed no --json line), else the
        # --json line that ends a run.
        last = refusals[0] if refusals else lines[-1] if lines else b""
        return buffer.getvalue(), last, seconds


_Host: Any = ray.remote(max_restarts=0, max_task_retries=0)(ShardHost)


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


def eligible_nodes(resources: ShardResources) -> list[str]:
    """The alive nodes with at least one shard's resources, sorted by id."""
    need = {"CPU": resources.cpus, "GPU": resources.gpus, **resources.custom}
    found = []
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
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

    def worth_showing(self, visited: int) -> bool:
        """At each tenth of the shard's slots (as ``pilot``'s plain lines)."""
        step = max(1, self.slots // 10)
        return visited // step > self.shown // step


def run_cluster(reg: Registration, reg_bytes: bytes, *, shards: int | None,
                runs_root: Path, run_dir: Path | None, node_root: Path | None,
                resources: ShardResources, program: list[str],
                echo: Callable[[str], None]) -> ClusterOutcome:
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
        auth_id = consume_faux(reg, reg_bytes, plan.schedule_sha256, lease, run_id=run.name)
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
                                       authorization_id=shard_auth, cap_units=spec.cap_units)
            placed.append(ShardPlaced(spec=spec, node=node, run_dir=shard_dir,
                                      authorization_id=shard_auth))
            slots.append(len(part.slots))
            tickets.append(msgspec.json.encode(ShardTicket(
                spec=spec, node=node, registration_sha256=sha256_hex(reg_bytes),
                run_dir=shard_dir, artifact=artifact, trusted_key=key)))
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
        outcome.interrupted = interrupted.signal
        journal.close()
    outcome.ends = {s.placed.spec.mark.index: s.end for s in running if s.end is not None}
    return outcome


def _host(node: str, resources: ShardResources) -> Any:
    return _Host.options(
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


def _available(node: str) -> str:
    """A node's available resources now, as an operator reads them."""
    try:
        have: dict[str, float] = next(
            (n.get("Resources", {}) for n in ray.nodes()  # type: ignore[no-untyped-call]
             if str(n.get("NodeID")) == node), {})
        free = ray.available_resources()  # type: ignore[no-untyped-call]
    except Exception:  # only a sentence of the refusal: never its cause
        return "unknown resources"
    return ", ".join(f"{k} {free.get(k, 0):g} free of {v:g}" for k, v in sorted(have.items())
                     if k in ("CPU", "GPU") or not k.startswith(("node:", "memory",
                                                                  "object_store")))


def _watch(running: list[_Shard], run: Path, echo: Callable[[str], None],
           interrupted: _Interrupt) -> None:
    asked = False
    while any(s.end is None for s in running):
        if interrupted.signal is not None and not asked:
            asked = True
            echo("interrupted: every shard controller is asked to stop and contain")
            for s in running:
                if s.end is None:
                    s.host.interrupt.remote()
        for shard in [s for s in running if s.end is None]:
            index = shard.placed.spec.mark.index
            try:
                status, visited = ray.get(shard.host.poll.remote())
                if shard.worth_showing(visited):
                    shard.shown = visited
                    echo(f"shard {index}: {visited}/{shard.slots} slots visited")
                if status is None:
                    continue
                tar, line, seconds = ray.get(shard.host.collect.remote())
            except ray.exceptions.RayError:
                _end(shard, run, ShardEnd(index=index, outcome=ShardOutcome.LOST,
                                          exit_status=None), echo)
                continue
            _publish_copy(run, index, tar)
            _end(shard, run, ShardEnd(index=index, outcome=outcome_of(status),
                                      exit_status=status, code=_code_of(line),
                                      seconds=round(seconds, 3)), echo)
        if any(s.end is None for s in running):
            time.sleep(POLL_SECONDS)


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


def _publish_copy(run: Path, index: int, tar: bytes) -> None:
    """Unpack a shard's records into a hidden directory, then rename it into place:
    the copy is complete or absent."""
    final = shard_copy_path(run, index)
    partial = private_subdir(run, SHARDS_DIR, f".{index}.partial")
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r") as archive:
        archive.extractall(partial, filter="data")
    # Every byte durable before the name is: a crash leaves the whole copy or none.
    for directory, _, files in os.walk(partial):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                fsync_fd(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)
    os.rename(partial, final)
    fsync_dir(run / SHARDS_DIR)


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


def default_program() -> list[str]:
    """The shard controller's command line: this interpreter, efold's CLI module."""
    return [sys.executable, "-m", "efold.controller"]
