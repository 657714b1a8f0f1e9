"""``proctable.scan_since``: the live launch's /proc scan that reads only what started no
earlier than a leader, skipping older processes pinned by a pidfd. Real processes and
the real /proc: it reads what ``scan`` reads for every process that matters, finds the
same ties for a hostile tree, and holds no pin past its process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from proc_harness import kill_proven, wait_until

from efold.controller.processes import proctable
from efold.controller.processes.membership import tied_now, tied_processes
from efold.controller.processes.proctable import ProcEntry, read_entry, scan, scan_since
from efold.controller.processes.subreaper import DIRECT_CHILDREN, become_subreaper
from efold.identity import identity_of

# A leader that forks a member of its group, a member that leaves it with setsid, and
# a double-forked orphan; it writes their pids, once each setsid is done, and sleeps.
_TREE = r"""
import json, os, sys, time
pids = {}
def fork(body):  # returns once the child has run body (its setsid seen by every scan)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        body()
        os.write(w, b"x")
        time.sleep(60)
        os._exit(0)
    os.read(r, 1)
    return pid
pids["member"] = fork(lambda: None)
pids["escaped"] = fork(os.setsid)
r, w = os.pipe()
middle = os.fork()
if middle == 0:
    orphan = fork(os.setsid)
    os.write(w, str(orphan).encode())
    os._exit(0)
os.waitpid(middle, 0)
pids["orphan"] = int(os.read(r, 32))
with open(sys.argv[1], "w") as f:
    json.dump(pids, f)
time.sleep(60)
"""


def _fields(entry: ProcEntry) -> tuple[int, int, int, int]:
    return entry.ppid, entry.pgid, entry.sid, entry.start_time


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int]]]:
    become_subreaper()  # the orphan comes to us, as to the controller
    out = tmp_path / "tree.json"
    leader = subprocess.Popen([sys.executable, "-c", _TREE, str(out)], start_new_session=True)
    DIRECT_CHILDREN.add(identity_of(leader.pid))
    assert wait_until(out.exists)
    assert wait_until(lambda: out.stat().st_size > 0)
    pids = json.loads(out.read_text())
    try:
        yield leader, pids
    finally:
        for pid in (*pids.values(), leader.pid):
            entry = read_entry(pid)
            if entry is not None:
                kill_proven(pid, entry.start_time)
        leader.wait()
        DIRECT_CHILDREN.discard(leader.pid)
        for pid in pids.values():
            try:
                os.waitpid(pid, os.WNOHANG)  # the orphan, adopted by us
            except ChildProcessError:
                pass


def test_it_reads_what_scan_reads_for_every_process_started_since(
        tree: tuple[subprocess.Popen[bytes], dict[str, int]]) -> None:
    leader, pids = tree
    since = identity_of(leader.pid).start_time
    for _ in range(2):  # once pinning, once with the pins in place
        table = scan_since(since)
        full = scan()
        wanted = {pid for pid, e in full.items() if e.start_time >= since}
        ours = {leader.pid, *pids.values()}  # other tests' processes may change meanwhile
        assert ours <= wanted
        assert wanted - set(table) <= {pid for pid in wanted if pid not in scan()}
        assert all(_fields(table[pid]) == _fields(full[pid]) for pid in ours)


def test_it_finds_the_ties_the_whole_table_finds(
        tree: tuple[subprocess.Popen[bytes], dict[str, int]]) -> None:
    leader, pids = tree
    me = identity_of(leader.pid)
    for _ in range(2):
        cheap = {e.pid for e in tied_now(me, leader.pid, None)}
        whole = {e.pid for e in tied_processes(
            scan(), leader=me, pgid=leader.pid, recorded=(), controller_pid=os.getpid(),
            direct_children=DIRECT_CHILDREN.pids() - {me.pid})}
        assert cheap == whole == {leader.pid, *pids.values()}


def test_another_registered_child_is_read_once_and_never_tied(
        tree: tuple[subprocess.Popen[bytes], dict[str, int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sibling launch's leader, born after this launch's: the cheap scan reads it once
    (to pin it), never again while it lives, and the ties stay the whole table's."""
    leader, pids = tree
    me = identity_of(leader.pid)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               start_new_session=True)
    DIRECT_CHILDREN.add(identity_of(sibling.pid))
    reads: list[int] = []

    def counted(pid: int) -> ProcEntry | None:
        reads.append(pid)
        return read_entry(pid)

    monkeypatch.setattr(proctable, "read_entry", counted)
    try:
        assert identity_of(sibling.pid).start_time >= me.start_time
        for scan_number in range(2):
            reads.clear()
            cheap = {e.pid for e in tied_now(me, leader.pid, None)}
            read_by_cheap = set(reads)
            whole = {e.pid for e in tied_processes(
                scan(), leader=me, pgid=leader.pid, recorded=(), controller_pid=os.getpid(),
                direct_children=DIRECT_CHILDREN.pids() - {me.pid})}
            assert cheap == whole == {leader.pid, *pids.values()}
            assert (sibling.pid in read_by_cheap) == (scan_number == 0)
    finally:
        DIRECT_CHILDREN.discard(sibling.pid)
        sibling.kill()
        sibling.wait()


# A leader whose double-forked orphan stays in its group (no setsid): adopted by us.
_GROUP_ORPHAN = r"""
import os, sys, time
r, w = os.pipe()
middle = os.fork()
if middle == 0:
    orphan = os.fork()
    if orphan == 0:
        time.sleep(60)
        os._exit(0)
    os.write(w, str(orphan).encode())
    os._exit(0)
os.waitpid(middle, 0)
orphan = os.read(r, 32)
with open(sys.argv[1], "wb") as f:
    f.write(orphan)
time.sleep(60)
"""


def test_an_orphan_in_another_launchs_group_is_that_launchs_alone(tmp_path: Path) -> None:
    """Two launches in flight: an adopted orphan still in the group of the one it came
    from is never tied to the other, born before it (rule 4 alone would tie it: it is
    parented to us and started after that other launch's leader)."""
    become_subreaper()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    DIRECT_CHILDREN.add(identity_of(other.pid))
    out = tmp_path / "orphan"
    leader = subprocess.Popen([sys.executable, "-c", _GROUP_ORPHAN, str(out)],
                              start_new_session=True)
    DIRECT_CHILDREN.add(identity_of(leader.pid))
    orphan = 0
    try:
        assert wait_until(lambda: out.exists() and out.stat().st_size > 0)
        orphan = int(out.read_text())
        entry = read_entry(orphan)
        assert entry is not None and (entry.ppid, entry.pgid) == (os.getpid(), leader.pid)
        assert entry.start_time >= identity_of(other.pid).start_time
        assert orphan not in {e.pid for e in tied_now(identity_of(other.pid), other.pid, None)}
        assert orphan in {e.pid for e in tied_now(identity_of(leader.pid), leader.pid, None)}
    finally:
        for process in (leader, other):
            DIRECT_CHILDREN.discard(process.pid)
            process.kill()
            process.wait()
        if orphan:
            entry = read_entry(orphan)
            if entry is not None:
                kill_proven(orphan, entry.start_time)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(orphan, 0)


def test_an_older_process_is_not_read_again_while_it_lives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []

    def counted(pid: int) -> ProcEntry | None:
        reads.append(pid)
        return read_entry(pid)

    monkeypatch.setattr(proctable, "read_entry", counted)
    scan_since(0)  # reads (and pins) everything it can
    pinned = set(proctable._PINS._pins)
    assert pinned  # this test process at least
    reads.clear()
    future = 1 << 62  # no process started at or after this tick
    table = scan_since(future)
    still = pinned & set(proctable._PINS._pins)  # pinned, and alive throughout
    assert os.getpid() in still
    # Left out, and not read again; what it did read (exited, unpinned or newborn
    # processes, other tests' among them) is read as ``scan`` would.
    assert not still & set(reads) and not still & set(table)
    fresh = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = identity_of(fresh.pid).start_time
        assert fresh.pid in scan_since(start)  # a process born since is read
    finally:
        fresh.kill()
        fresh.wait()


def test_a_pin_goes_with_its_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    start = identity_of(child.pid).start_time
    scan_since(start)
    pins = proctable._PINS._pins
    assert child.pid in pins
    pidfd = pins[child.pid][0]
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    scan_since(start)
    assert child.pid not in pins and pidfd not in proctable._PINS._by_fd


def test_one_scan_never_pins_more_than_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every process of the machine is new to a fresh cache: the first scan is where the
    # limit must hold (a busy machine would otherwise take the controller's descriptors).
    monkeypatch.setattr(proctable._Pins, "PIN_LIMIT", 3)
    pins = proctable._Pins()
    table = pins.scan(0)
    assert len(table) > 3  # this machine has more processes than the limit
    assert 0 < len(pins._pins) <= 3 and len(pins._by_fd) == len(pins._pins)
    assert set(pins.scan(0)) >= {os.getpid()}  # beyond the limit: read, as scan reads
