"""Reading a cluster run back from its shards' own runs (``cluster collect``, and
``aggregate``/``show``/``recover``/``reap`` on a cluster run). No Ray here.

A shard's run directory on its node is the truth about that shard: its journal holds
its money, its receipts its slots. The copy under ``shards/<k>/`` is what the cluster
controller brought back when it saw the shard end; after a fault (the driver killed, the
Ray head gone, a shard reaped later) that copy is stale or absent. So every reader of a
cluster run looks at each shard's run where the manifest says it lives, and takes it
when it is **reachable** from here (the path is a run directory on this machine: the
node is this machine, or the nodes share the filesystem), **this run's shard** (the
cluster's registration bytes, exactly the shard plan the manifest derives) and **not
older** than the copy (the same run, by its journal's first epoch, with at least as
many journal rows: a journal only grows). A shard whose controller still holds its
lease is read as it is now and never copied.

``collect`` writes what the readers only read: under the cluster run's lease (never
while its controller lives) it replaces each stale copy by the shard run's records
(complete or absent), gives a shard that never got one an end record read from its run
(replacing ``lost``: the driver's guess), removes the scratch directory of every ended
shard, and says of each shard what it did. ``collect`` never writes to a shard's run.
"""

from __future__ import annotations

import enum
import io
import os
import shutil
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

import msgspec

from efold.controller.campaigns.registration import REGISTRATION_NAME
from efold.controller.campaigns.shards import shard_plan
from efold.controller.rundirs.aggregate import (
    AggregateError,
    RunView,
    publish_reports,
    read_run,
    run_records,
    run_reports,
)
from efold.controller.rundirs.chain import read_linked
from efold.controller.rundirs.cluster_run import (
    SHARDS_DIR,
    ShardEnd,
    ShardOutcome,
    ShardPlaced,
    ShardView,
    is_cluster_run,
    read_manifest,
    read_shard_ends,
    read_shards,
    shard_copy_path,
    shard_end_name,
    shard_scratch_path,
)
from efold.controller.rundirs.runroot import private_subdir
from efold.errors import Code, EfoldError
from efold.identity import current_identity
from efold.registry import publish_exclusive
from efold.registry.files import fsync_dir, fsync_fd
from efold.registry.journal import JOURNAL_NAME, JournalReader, JournalWriter
from efold.registry.lease import LeaseState, acquire_lease, probe_lease

# A shard's run directory is copied back without these (``slots/``: per-slot scratch
# trees; ``aggregate`` never reads them, ``prune --slots-only`` removes them).
NOT_COPIED: Final = frozenset({"slots"})


class Reach(enum.StrEnum):
    """What a reader found at a shard's run directory from this machine."""

    READ = "read"  # its run, ended, read here
    RUNNING = "running"  # its run, its controller holding its lease: read as it is now
    NO_RUN = "no_run"  # its directory is here (its scratch or its parent) but no run in it
    UNREACHABLE = "unreachable"  # nothing of it here: another node, no shared filesystem
    NOT_ITS_RUN = "not_its_run"  # a run there, not this shard's (refused, never read)
    OLDER = "older"  # its run, older than the copy (never replaces it)


@dataclass(frozen=True)
class ShardRun:
    placed: ShardPlaced
    reach: Reach
    view: RunView | None  # its run read here (READ, RUNNING)
    detail: str = ""
    # Where its records were read: its run directory, or their copy fetched from its
    # node (``cluster collect --ray``).
    source: Path | None = None


def run_records_tar(run_dir: Path) -> bytes:
    """A run directory's records as a tar, without ``slots/``; empty bytes when there is
    no journal there (no run was ever opened)."""
    if not (run_dir / JOURNAL_NAME).is_file():
        return b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in sorted(os.listdir(run_dir)):
            if name not in NOT_COPIED:
                tar.add(run_dir / name, arcname=name)
    return buffer.getvalue()


def unpack_records(tar: bytes, where: Path) -> None:
    """Unpack ``run_records_tar``'s bytes (made on a shard's node) into ``where``:
    regular files and directories inside it only, private, owned by this user. Python's
    ``data`` filter where this Python has it (3.11.4 and later); before it (efold runs on
    3.11), the same refusal here, never an unfiltered extraction. Records it will not
    unpack refuse: ``cluster_records_invalid``."""
    try:
        _unpack(tar, where)
    except tarfile.TarError as exc:  # FilterError and ExtractError included
        raise AggregateError(Code.CLUSTER_RECORDS_INVALID,
                             f"a shard's records will not unpack: {exc}") from None


def _unpack(tar: bytes, where: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r") as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(where, filter="data")
            return
        members = archive.getmembers()
        for member in members:
            parts = PurePosixPath(member.name).parts
            if not (member.isfile() or member.isdir()) or member.name.startswith("/") \
                    or ".." in parts:
                raise tarfile.ExtractError(f"{member.name!r}: not a file or directory "
                                           "inside the records")
            member.mode &= 0o700 if member.isdir() else 0o600
            member.uid, member.gid, member.uname, member.gname = \
                os.getuid(), os.getgid(), "", ""
        archive.extractall(where, members=members)


def publish_copy(run: Path, index: int, tar: bytes) -> None:
    """Unpack a shard's records into a hidden directory, fsync it, then rename it into
    place (an older copy moved aside first, removed after): the copy is complete or
    absent, and a crash between the renames leaves the shard without a copy (its run is
    read again), never with a mixed one."""
    final = shard_copy_path(run, index)
    # A partial copy left by a publisher killed mid-copy (we hold the run's lease: it
    # is nobody's now) would refuse every later copy of this shard.
    shutil.rmtree(run / SHARDS_DIR / f".{index}.partial", ignore_errors=True)
    partial = private_subdir(run, SHARDS_DIR, f".{index}.partial")
    unpack_records(tar, partial)
    for directory, _, files in os.walk(partial):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                fsync_fd(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)
    stale = run / SHARDS_DIR / f".{index}.stale"
    if final.exists():
        shutil.rmtree(stale, ignore_errors=True)
        os.rename(final, stale)
    os.rename(partial, final)
    fsync_dir(run / SHARDS_DIR)
    shutil.rmtree(stale, ignore_errors=True)


def _extent(run_dir: Path) -> tuple[str, int]:
    """A run's identity (its journal's first epoch) and its journal's size in rows."""
    journal = JournalReader(run_dir)
    try:
        epochs = journal.rows("epochs")
        first = epochs[0] if epochs else {}
        identity = f"{first.get('pid')}:{first.get('start_time')}:{first.get('started_ns')}"
        return identity, journal.size()
    finally:
        journal.close()


def reach_shard(run: Path, placed: ShardPlaced, reg_bytes: bytes, expected: object, *,
                fetched: Path | None = None, live: bool = False) -> ShardRun:
    """Shard ``placed``'s own run as this machine reaches it (the module docstring);
    ``expected`` is its shard plan. ``fetched``: its records as fetched from its node
    (``live``: its controller held its lease there), read instead of its path here."""
    path = fetched or Path(placed.run_dir)
    if not (path / JOURNAL_NAME).is_file():
        here = path.is_dir() or shard_scratch_path(placed.run_dir).exists()
        return ShardRun(placed, Reach.NO_RUN if here else Reach.UNREACHABLE, None)
    try:
        view = read_run(path)
        same = (path / REGISTRATION_NAME).read_bytes() == reg_bytes and view.plan == expected
        live = same and (live or (fetched is None
                                  and probe_lease(path).state is LeaseState.LIVE))
    except (EfoldError, OSError) as exc:
        # Refused at this shard only (e.g. a link planted at its path: path_refused):
        # the cluster run is still read, this shard from its copy.
        return ShardRun(placed, Reach.NOT_ITS_RUN, None, str(exc))
    if not same:
        return ShardRun(placed, Reach.NOT_ITS_RUN, None, "another registration or plan")
    if live:
        return ShardRun(placed, Reach.RUNNING, view, source=path)
    copy = shard_copy_path(run, placed.spec.mark.index)
    if (copy / JOURNAL_NAME).is_file():
        (mine, rows), (theirs, copied) = _extent(path), _extent(copy)
        if mine != theirs or rows < copied:
            return ShardRun(placed, Reach.OLDER, None,
                            f"older than the copy (its journal {rows} rows, first epoch "
                            f"{mine}; the copy's {copied} rows, first epoch {theirs})",
                            source=path)
    return ShardRun(placed, Reach.READ, view, source=path)


def end_from_run(index: int, view: RunView) -> ShardEnd:
    """A shard's end as its own run tells it (its controller's exit was not seen)."""
    facts = view.facts
    codes = [stop.code for stop in facts.stops]
    if Code.INTERRUPTED.value in codes:
        outcome, code = ShardOutcome.INTERRUPTED, Code.INTERRUPTED.value
    elif facts.controller == "holder_dead":
        outcome, code = ShardOutcome.FAILED, None
    elif facts.sticky_stop is not None:
        outcome, code = ShardOutcome.STOPPED, facts.sticky_stop
    elif view.journaled_missing or facts.in_flight:
        outcome, code = ShardOutcome.FAILED, None
    else:
        outcome, code = ShardOutcome.COMPLETE, None
    return ShardEnd(index=index, outcome=outcome, exit_status=None, code=code)


@dataclass(frozen=True)
class Collected:
    index: int
    node: str
    run_dir: str
    reach: Reach
    copied: bool  # its copy replaced (or made) from its run
    ended: ShardEnd | None  # the end record written, when one was
    scratch: str | None  # its scratch directory, when it is still there
    scratch_removed: bool
    detail: str = ""


def collect(run: Path, shards: list[ShardRun], ends: dict[int, ShardEnd]) -> list[Collected]:
    """Bring every reachable, ended shard run's records into the cluster run (the
    caller holds the cluster run's lease). ``shards`` as ``reach_shard`` found them."""
    out = []
    for shard in shards:
        placed, index = shard.placed, shard.placed.spec.mark.index
        copied, ended = False, None
        if shard.reach is Reach.READ and shard.view is not None and shard.source is not None:
            if not _current(run, index, shard.source):
                publish_copy(run, index, run_records_tar(shard.source))
                copied = True
            old = ends.get(index)
            if old is None or old.outcome is ShardOutcome.LOST:
                ended = end_from_run(index, shard.view)
                _publish_end(run, ended, replace=old is not None)
        scratch = shard_scratch_path(placed.run_dir)
        removed = False
        if scratch.exists() and shard.reach is not Reach.RUNNING and (
                shard.reach is not Reach.NO_RUN or index in ends):
            shutil.rmtree(scratch, ignore_errors=True)
            removed = not scratch.exists()
        out.append(Collected(index=index, node=placed.node, run_dir=placed.run_dir,
                             reach=shard.reach, copied=copied, ended=ended,
                             scratch=str(scratch) if scratch.exists() else None,
                             scratch_removed=removed, detail=shard.detail))
    return out


def _current(run: Path, index: int, shard_run: Path) -> bool:
    """Whether shard ``index``'s copy already holds its run as it is now."""
    copy = shard_copy_path(run, index)
    return (copy / JOURNAL_NAME).is_file() and _extent(copy) == _extent(shard_run)


def _publish_end(run: Path, end: ShardEnd, *, replace: bool) -> None:
    publish_exclusive(run / SHARDS_DIR, shard_end_name(end.index),
                      msgspec.json.encode(end) + b"\n", replace=replace)


def reach_shards(run: Path) -> list[ShardRun]:
    """Every shard of the cluster run at ``run`` as this machine reaches its own run."""
    plan, _ = run_records(run)
    reg_bytes = (run / REGISTRATION_NAME).read_bytes()
    manifest = read_manifest(run)
    return [reach_shard(run, placed, reg_bytes,
                        shard_plan(plan, placed.spec.mark, placed.spec.checkpoints,
                                   placed.spec.cap_units))
            for placed in manifest.shards]


def read_cluster(run: Path, *, allow_damaged: bool = False, releasing: bool = False
                 ) -> tuple[RunView, list[ShardView], list[ShardRun]]:
    """The cluster run read through its shards: each shard's own run where this machine
    reaches it (ended or running), else its copy (``read_shards``)."""
    reached = reach_shards(run)
    fresh = {s.placed.spec.mark.index: s.view for s in reached
             if s.reach in (Reach.READ, Reach.RUNNING) and s.view is not None}
    view, shards = read_shards(run, allow_damaged=allow_damaged, fresh=fresh,
                               releasing=releasing)
    return view, shards, reached


def read_any_run(run_dir: str | os.PathLike[str], *, allow_damaged: bool = False,
                 chain: bool = True) -> RunView:
    """A run's view, one machine's (``aggregate.read_run``), a cluster run's read through
    its shards, or (``chain``) a chain's read through its links (``chain.read_linked``);
    ``allow_damaged`` as ``read_run`` takes it."""
    run = Path(run_dir)
    if is_cluster_run(run):
        return read_cluster(run, allow_damaged=allow_damaged)[0]
    return read_linked(run, allow_damaged=allow_damaged, chain=chain)


class NodeRecords(msgspec.Struct, frozen=True):
    """A shard run's records as its own node read them (``cluster collect --ray``)."""

    tar: bytes  # ``run_records_tar``: empty when no run was opened there
    live: bool  # its controller held its lease
    said: str = ""  # what the node did first (its ``reap``), one line


FETCHED_DIR: Final = ".fetched"


def reach_fetched(run: Path, fetched: Mapping[int, NodeRecords | str]) -> list[ShardRun]:
    """Every shard as its node's records say (``fetched``, by index: the records, or
    why its node could not be asked), each unpacked under ``shards/.fetched/<k>`` and
    read there; a shard without an entry is reached here (``reach_shards``)."""
    plan, _ = run_records(run)
    reg_bytes = (run / REGISTRATION_NAME).read_bytes()
    out = []
    for shard in reach_shards(run):
        placed = shard.placed
        got = fetched.get(placed.spec.mark.index)
        if got is None:
            out.append(shard)
        elif isinstance(got, str):
            out.append(ShardRun(placed, Reach.UNREACHABLE, None, got))
        elif not got.tar:
            out.append(ShardRun(placed, Reach.NO_RUN, None, got.said))
        else:
            where = private_subdir(run, SHARDS_DIR, FETCHED_DIR, str(placed.spec.mark.index))
            try:
                unpack_records(got.tar, where)
            except AggregateError as exc:  # that shard's refusal, not the whole run's
                out.append(ShardRun(placed, Reach.NOT_ITS_RUN, None, exc.detail))
                continue
            found = reach_shard(run, placed, reg_bytes, shard_plan(
                plan, placed.spec.mark, placed.spec.checkpoints, placed.spec.cap_units),
                fetched=where, live=got.live)
            out.append(ShardRun(found.placed, found.reach, found.view,
                                "; ".join(x for x in (got.said, found.detail) if x),
                                found.source))
    return out


def collect_run(run: Path, fetched: Mapping[int, NodeRecords | str] | None = None
                ) -> list[Collected]:
    """``cluster collect``: under the cluster run's lease (``lease_held`` while its
    controller lives), a new epoch of its journal, every reachable ended shard's records
    collected (``fetched``: as their nodes sent them), and the merged reports written
    again from what is there now."""
    manifest = read_manifest(run)
    with acquire_lease(run) as lease:
        journal = JournalWriter(run, lease)
        lease.set_epoch(journal.record_epoch(current_identity()))
        # What a collector killed mid-fetch left (nobody's now: we hold the lease) would
        # refuse this fetch (private_dir_refused).
        shutil.rmtree(run / SHARDS_DIR / FETCHED_DIR, ignore_errors=True)
        try:
            shards = reach_fetched(run, fetched) if fetched else reach_shards(run)
            done = collect(run, shards, read_shard_ends(run, manifest))
        finally:
            shutil.rmtree(run / SHARDS_DIR / FETCHED_DIR, ignore_errors=True)
        view, _, _ = read_cluster(run, allow_damaged=True, releasing=True)
        publish_reports(run_reports(view), run, replace=True)
        journal.close()
    return done
