"""What runs on a shard's node: the shard's host (``ShardHost``, a Ray actor there,
pinned by ``dispatch``) and the task that brings a shard's records back
(``node_records``). No Ray here: ``dispatch`` wraps both, and is the only module that
imports it.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import msgspec

from efold.controller.campaigns.registration import REGISTRATION_NAME
from efold.controller.campaigns.shards import ShardTicket
from efold.controller.cluster.shard_keeper import last_line, private_file, read_end
from efold.controller.errors import ControllerError
from efold.controller.processes.proof import signal_pidfd
from efold.controller.rundirs.cluster_collect import NodeRecords, run_records_tar
from efold.controller.rundirs.cluster_run import shard_scratch_path
from efold.controller.rundirs.receipt_copies import RECEIPTS_DIR
from efold.errors import Code, EfoldError
from efold.identity import is_same_process
from efold.registry.journal import JOURNAL_NAME
from efold.registry.lease import LeaseState, probe_lease

# How long a shard's records may take to come back (and a reap on its node before).
COLLECT_SECONDS: Final = 120.0


class ShardHost:
    """One shard's host on its node (a Ray actor, created pinned to that node). It
    starts the shard's keeper (``controller.cluster.shard_keeper``), which starts the shard
    controller outside the actor's process tree and interrupts it if this actor's
    process dies; the actor holds the write end of that death pipe."""

    def __init__(self) -> None:
        self._ticket: ShardTicket | None = None
        self._scratch: Path | None = None
        self._keeper: int | None = None  # a pidfd of the keeper
        self._life: int | None = None  # the keeper's stdout: end of file when it is gone
        self._death: int | None = None  # held open for the keeper while this process lives
        self._started = 0.0

    def node(self) -> str:
        """The id of the node this host runs on, as its scheduler says (``dispatch``'s
        Ray actor answers from Ray's runtime context)."""
        raise NotImplementedError

    def start(self, ticket_json: bytes, registration: bytes, program: list[str]) -> int:
        """Start the shard's keeper and through it the shard controller; returns the
        keeper's pid. Refuses (raises) a ticket bound to another node, and a node
        directory where the shard's scratch directory cannot be made."""
        ticket = msgspec.json.decode(ticket_json, type=ShardTicket)
        if ticket.node != self.node():
            raise ControllerError(Code.CLUSTER_SHARD_MISPLACED,
                                  f"shard {ticket.spec.mark.index} is bound to node "
                                  f"{ticket.node}, not this one")
        scratch = shard_scratch_path(ticket.run_dir)
        try:
            scratch.mkdir(mode=0o700)
            for name, data in ((REGISTRATION_NAME, registration), ("ticket.json", ticket_json)):
                fd = os.open(scratch / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with open(fd, "wb") as out:
                    out.write(data)
        except OSError as exc:
            raise ControllerError(Code.PATH_NOT_WRITABLE,
                                  f"{scratch.parent}: the shard's scratch directory cannot "
                                  f"be made on node {ticket.node[:12]} "
                                  f"({exc.strerror or exc})") from None
        argv = [*program, "cluster", "shard", "--registration", str(scratch / REGISTRATION_NAME),
                "--sha256", ticket.registration_sha256, "--ticket", str(scratch / "ticket.json"),
                "--json", "--no-progress"]
        death_r, death_w = os.pipe()
        try:
            with private_file(scratch / "keeper-err") as err:
                first = subprocess.Popen(
                    [program[0], "-m", "efold.controller.cluster.shard_keeper", str(scratch),
                     str(death_r), "--", *argv],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                    pass_fds=(death_r,))
        finally:
            os.close(death_r)
        assert first.stdout is not None
        line = first.stdout.readline()
        first.wait()
        if not line.strip().isdigit():
            os.close(death_w)
            raise ControllerError(Code.CLUSTER_NODE_UNFIT,
                                  f"node {ticket.node[:12]}: the shard keeper did not start "
                                  f"({_tail(scratch / 'keeper-err')})")
        pid = int(line)
        self._keeper = os.pidfd_open(pid)
        self._life = os.dup(first.stdout.fileno())
        first.stdout.close()
        self._death = death_w
        self._ticket, self._scratch, self._started = ticket, scratch, time.monotonic()
        return pid

    def poll(self) -> tuple[int | None, int]:
        """(the controller's exit status, or None while it runs, or -1 when its keeper
        died without one and no controller holds its run's lease; the receipts
        published)."""
        assert self._ticket is not None and self._scratch is not None
        receipts = Path(self._ticket.run_dir) / RECEIPTS_DIR
        try:
            visited = sum(1 for n in os.listdir(receipts)
                          if n.endswith(".json") and not n.startswith("."))
        except OSError:
            visited = 0
        # The keeper writes the end before anything else, and stays until this actor's
        # process ends: gone without an end, it was killed.
        end = read_end(self._scratch)
        if end is not None:
            return end.exit_status, visited
        if not self._keeper_gone():
            return None, visited
        # Its keeper was killed: the controller runs on without it while it holds its
        # run's lease, watched (and interrupted) here until it lets go.
        orphan = self._orphan()
        if orphan is None:
            return -1, visited
        os.close(orphan)
        return None, visited

    def _keeper_gone(self) -> bool:
        assert self._life is not None
        ready, _, _ = select.select([self._life], [], [], 0)
        return bool(ready) and not os.read(self._life, 64)

    def interrupt(self) -> None:
        """Ask the shard controller (through its keeper) to stop as an operator's
        Ctrl-C would."""
        if self._keeper is not None and not self._keeper_gone():
            signal.pidfd_send_signal(self._keeper, signal.SIGINT)
        elif (orphan := self._orphan()) is not None:  # its keeper was killed
            try:
                signal_pidfd(orphan, signal.SIGINT)
            finally:
                os.close(orphan)

    def _orphan(self) -> int | None:
        """A pidfd of the shard controller once its keeper is gone: the holder of its
        run's live lease, proven after the pidfd was opened (its start time, not a
        recycled pid); None when no controller holds it."""
        if self._ticket is None:
            return None
        try:
            status = probe_lease(self._ticket.run_dir)
        except (EfoldError, OSError):
            return None
        if status.state is not LeaseState.LIVE or status.holder is None:
            return None
        try:
            pidfd = os.pidfd_open(status.holder.pid)
        except OSError:
            return None
        if not is_same_process(status.holder.identity()):
            os.close(pidfd)
            return None
        return pidfd

    def collect(self) -> tuple[bytes, bytes, float]:
        """After the controller exited: its run directory's records (a tar without
        ``slots/``), its last line (its ``--json`` line; a refusal's ``refused: CODE``
        line when it refused) and its wall time. Removes the scratch directory."""
        assert self._ticket is not None and self._scratch is not None
        seconds = time.monotonic() - self._started
        tar = run_records_tar(Path(self._ticket.run_dir))
        end = read_end(self._scratch)
        last = end.last_line if end is not None else last_line(self._scratch)
        shutil.rmtree(self._scratch)  # the ticket is spent; its copy goes with it
        return tar, last.encode(), seconds


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


def default_program() -> list[str]:
    """The shard controller's command line: this interpreter, efold's CLI module."""
    return [sys.executable, "-m", "efold.controller"]


def node_records(run_dir: str, reap_first: bool) -> NodeRecords:
    """On a shard's node (a Ray task bound to it): reap the shard's run first when asked
    and its controller is gone, remove its scratch directory once it has ended, and
    return its records."""
    path = Path(run_dir)
    said = []
    live = (path / JOURNAL_NAME).is_file() and probe_lease(path).state is LeaseState.LIVE
    if reap_first and not live and (path / JOURNAL_NAME).is_file():
        done = subprocess.run([*default_program(), "reap", run_dir], capture_output=True,
                              text=True, timeout=COLLECT_SECONDS)
        lines = (done.stdout or done.stderr).strip().splitlines()
        said.append(f"reap on its node: {lines[0] if lines else f'exit {done.returncode}'}")
    scratch = shard_scratch_path(run_dir)
    if not live and scratch.exists():
        shutil.rmtree(scratch, ignore_errors=True)
        said.append("scratch removed on its node")
    return NodeRecords(tar=run_records_tar(path), live=live, said="; ".join(said))
