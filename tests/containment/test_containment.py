"""Containment with real process trees (docs/architecture.md §9): grandchildren that ignore SIGTERM,
a descendant that keeps forking, zombies, forged records, setsid escapes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from proc_harness import (
    FAST,
    Run,
    alive,
    kill_proven,
    make_assignment,
    program,
    wait_until,
    welcome,
)

from efold.controller.processes.adopted import AdoptedProcess
from efold.controller.processes.containment import (
    ContainmentOutcome,
    ContainmentPolicy,
    SurvivorReason,
    contain,
)
from efold.controller.processes.launcher import WorkerHandle, launch_worker
from efold.controller.processes.proctable import read_entry, scan
from efold.controller.processes.subreaper import DIRECT_CHILDREN, is_subreaper
from efold.controller.processes.template import Template, running_template
from efold.errors import Code
from efold.identity import ProcessIdentity, identity_of
from efold.ipc import Prepared
from efold.registry.journal import JournalReader

pytestmark = pytest.mark.anyio

PER_MEMBER = ContainmentPolicy(term_grace=0.3, kill_wait=1.0, kill_rounds=3,
                               use_group_signal=False)


async def start_tree(
    run: Run, mode: str, template: Template | None = None,
) -> tuple[WorkerHandle, dict[str, ProcessIdentity]]:
    """Launch a prep child that builds the ``mode`` tree (forked by ``template`` if
    given: one started by ``tree_template`` for that mode); returns once it is built."""
    assignment = make_assignment(run, kind="prep")
    handle = await launch_worker(run.journal, assignment,
                                 program=program("body_child.py", mode), template=template)
    if template is not None:
        assert isinstance(handle.process, AdoptedProcess)  # not a fallback spawn
    await handle.accept_hello(welcome(), timeout=10)
    msg = await handle.channel.receive(timeout=10)
    assert isinstance(msg, Prepared)
    with open(os.path.join(assignment.slot_dir, "tree.pids")) as f:
        pids = json.load(f)
    return handle, {role: identity_of(pid) for role, pid in pids.items()}


@asynccontextmanager
async def tree_template(run: Run, launcher: str, mode: str) -> AsyncIterator[Template | None]:
    """None for the spawn launcher; else a running template whose workers build ``mode``."""
    if launcher == "spawn":
        yield None
        return
    async with running_template(run.journal, run.epoch, policy=FAST,
                                program=program("template_child.py", mode)) as template:
        yield template


def journal(run: Run, table: str, launch_id: int) -> list[dict]:  # type: ignore[type-arg]
    with JournalReader(run.run_dir) as reader:
        return reader.rows(table, "launch_id = ?", (launch_id,))


def live_in_group(pgid: int) -> list[int]:
    return [e.pid for e in scan().values() if e.pgid == pgid and not e.exited]


def cleanup(*idents: ProcessIdentity) -> None:
    for ident in idents:
        kill_proven(ident.pid, ident.start_time)


@pytest.mark.parametrize("launcher", ["spawn", "template"])
@pytest.mark.parametrize("policy", [FAST, PER_MEMBER], ids=["group", "per_member"])
async def test_a_grandchild_ignoring_sigterm_is_killed(
    run: Run, policy: ContainmentPolicy, launcher: str,
) -> None:
    async with tree_template(run, launcher, "grandchild_ignores_term") as template:
        await _grandchild_ignoring_sigterm_is_killed(run, policy, template)
    if template is not None:  # the template itself ended on its own, nothing left
        with JournalReader(run.run_dir) as reader:
            (row,) = reader.rows("launches", "kind = ?", ("template",))
        assert row["exit_status"] == 0 and journal(run, "containments", row["launch_id"]) == []


async def _grandchild_ignoring_sigterm_is_killed(
    run: Run, policy: ContainmentPolicy, template: Template | None,
) -> None:
    handle, tree = await start_tree(run, "grandchild_ignores_term", template)
    grandchild = tree["grandchild"]
    try:
        result = await handle.contain(Code.LOOKUP_STOPPED, policy=policy)
        assert result.outcome is ContainmentOutcome.CONTAINED and result.code is None
        assert not alive(grandchild.pid, grandchild.start_time)
        assert not alive(handle.identity.pid, handle.identity.start_time)
        sigs = [s.signal for s in result.signals]
        assert sigs[0] == signal.SIGTERM and signal.SIGKILL in sigs  # TERM, grace, KILL
        if policy.use_group_signal:
            assert {s.via for s in result.signals} == {"pidfd_group"}
        else:
            assert {s.via for s in result.signals} == {"pidfd"}
            assert grandchild.pid in {s.pid for s in result.signals if s.signal == signal.SIGKILL}
        exit_ = await handle.close(policy=FAST)
        assert exit_.status == -signal.SIGTERM  # the leader died of the first SIGTERM
        assert live_in_group(handle.pgid) == []
    finally:
        cleanup(grandchild)
    # (e) members were journaled before the first signal, leader first, in order.
    members = journal(run, "members", handle.launch_id)
    signals = journal(run, "signals", handle.launch_id)
    assert [m["role"] for m in members] == ["leader", "descendant"]
    assert [m["pid"] for m in members] == [handle.identity.pid, grandchild.pid]
    assert [m["member_id"] for m in members] == sorted(m["member_id"] for m in members)
    assert signals and max(m["recorded_ns"] for m in members) <= min(s["sent_ns"] for s in signals)
    assert signals[0]["signal"] == signal.SIGTERM
    (episode,) = journal(run, "containments", handle.launch_id)
    assert episode["cause"] == "lookup_stopped" and episode["result"] == "contained"


async def test_b_a_descendant_forking_during_containment_leaves_an_empty_group(run: Run) -> None:
    handle, tree = await start_tree(run, "forker")
    try:
        assert wait_until(lambda: len(live_in_group(handle.pgid)) > 5, timeout=10)
        result = await handle.contain(Code.LOOKUP_STOPPED, policy=FAST)
        assert result.outcome is ContainmentOutcome.CONTAINED
        await handle.close(policy=FAST)
        assert live_in_group(handle.pgid) == []
        # Nothing of the tree is left at all, not even an unreaped zombie of ours.
        assert wait_until(lambda: not [e for e in scan().values() if e.pgid == handle.pgid],
                          timeout=5)
    finally:
        cleanup(tree["forker"])


async def test_c_a_forged_member_is_never_signalled_and_is_unreconciled(run: Run) -> None:
    # An unrelated live process (its own session), recorded with a forged start time.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True)
    real = identity_of(bystander.pid)
    DIRECT_CHILDREN.add(real)  # the test starts it on purpose: never an adopted orphan
    handle, tree = await start_tree(run, "grandchild_ignores_term")
    forged = ProcessIdentity(pid=real.pid, start_time=real.start_time + 1, boot_id=real.boot_id)
    try:
        run.journal.record_stop(epoch=run.epoch, code="lookup_repeated_loss", slot=None,
                                sticky=True)
        run.journal.record_members(launch_id=handle.launch_id, containment_id=None,
                                   members=[(forged, bystander.pid, "descendant")])
        result = await handle.contain(Code.LOOKUP_STOPPED, policy=FAST)
        assert alive(real.pid, real.start_time)  # never signalled
        assert real.pid not in {s.pid for s in result.signals}
        assert real.pid not in {s["pid"] for s in journal(run, "signals", handle.launch_id)}
        # The rest of the launch is still contained.
        assert not alive(tree["grandchild"].pid, tree["grandchild"].start_time)
        assert result.outcome is ContainmentOutcome.UNRECONCILED
        assert result.code is Code.UNRECONCILED_CONTAINMENT
        (survivor,) = result.survivors
        assert survivor.identity == real and survivor.reason is SurvivorReason.UNPROVABLE
        with JournalReader(run.run_dir) as reader:
            # Journaled as a sticky stop that outranks the earlier one.
            assert reader.sticky_stop() == "unreconciled_containment"
            codes = [s["code"] for s in reader.rows("stops")]
        assert codes == ["lookup_repeated_loss", "unreconciled_containment"]
        await handle.close(policy=FAST)
    finally:
        bystander.kill()
        bystander.wait()
        DIRECT_CHILDREN.discard(real.pid)
        cleanup(tree["grandchild"])


async def test_d_a_zombie_member_is_dead_never_signalled_and_reaped(run: Run) -> None:
    handle, tree = await start_tree(run, "zombie")
    zombie, grandchild = tree["zombie"], tree["grandchild"]
    try:
        run.journal.record_members(
            launch_id=handle.launch_id, containment_id=None,
            members=[(handle.identity, handle.pgid, "leader"),
                     (zombie, handle.pgid, "descendant"), (grandchild, handle.pgid, "descendant")],
        )
        signal.pidfd_send_signal(handle.pidfd, signal.SIGUSR1)  # the leader lets it exit
        assert wait_until(lambda: (e := read_entry(zombie.pid)) is not None and e.exited)
        result = await handle.contain(Code.LOOKUP_STOPPED, policy=PER_MEMBER)
        assert result.outcome is ContainmentOutcome.CONTAINED
        assert zombie.pid not in {s.pid for s in result.signals}
        assert grandchild.pid in {s.pid for s in result.signals}
        # Once the leader died the zombie was ours (subreaper) and containment reaped it.
        assert read_entry(zombie.pid) is None or read_entry(zombie.pid).start_time != zombie.start_time  # type: ignore[union-attr]
        await handle.close(policy=FAST)
    finally:
        cleanup(grandchild)


@pytest.mark.parametrize("launcher", ["spawn", "template"])
@pytest.mark.parametrize("mode", ["setsid_child", "setsid_orphan"])
async def test_g_a_descendant_escaping_with_setsid_is_contained(
    run: Run, mode: str, launcher: str,
) -> None:
    """Documented behaviour: contained through the recorded identity, the parent links
    or (orphaned) its adoption by the subreaper controller; never silently missed."""
    async with tree_template(run, launcher, mode) as template:
        await _escaping_descendant_is_contained(run, mode, template)


async def _escaping_descendant_is_contained(run: Run, mode: str, template: Template | None) -> None:
    handle, tree = await start_tree(run, mode, template)
    escaped = tree["escaped"]
    try:
        entry = read_entry(escaped.pid)
        assert entry is not None and entry.pgid == escaped.pid != handle.pgid  # left the group
        if mode == "setsid_orphan":
            assert is_subreaper() and entry.ppid == os.getpid()  # adopted by us
        result = await handle.contain(Code.LOOKUP_STOPPED, policy=FAST)
        assert result.outcome is ContainmentOutcome.CONTAINED
        assert not alive(escaped.pid, escaped.start_time)
        recorded = {(m.identity.pid, m.pgid) for m in result.members}
        assert (escaped.pid, escaped.pid) in recorded
        assert escaped.pid in {s.pid for s in result.signals if s.via == "pidfd"}
        await handle.close(policy=FAST)
    finally:
        cleanup(escaped)


async def test_leftover_descendants_after_doneack_take_a_durable_stop_before_any_signal(
    run: Run,
) -> None:
    handle, tree = await start_tree(run, "grandchild_ignores_term")
    try:
        await handle.acknowledge_done()  # members journaled, then DoneAck: the leader exits 0
        exit_ = await handle.close(policy=FAST)
        assert exit_.status == 0
        assert exit_.containment is not None
        assert exit_.containment.cause is Code.LOOKUP_WORKER_LOST
        assert not alive(tree["grandchild"].pid, tree["grandchild"].start_time)
        with JournalReader(run.run_dir) as reader:
            stops = reader.rows("stops")
            signals = reader.rows("signals")
            members = reader.rows("members")
        assert [s["code"] for s in stops] == ["lookup_worker_lost"]
        assert stops[0]["recorded_ns"] <= min(s["sent_ns"] for s in signals)
        # Membership was durable before DoneAck: the grandchild is in the first batch.
        assert members[0]["containment_id"] is None
        assert tree["grandchild"].pid in {m["pid"] for m in members if m["containment_id"] is None}
    finally:
        cleanup(tree["grandchild"])


async def test_an_orphaned_zombie_is_reaped_when_the_worker_closes(run: Run) -> None:
    """The leader never reaped its child; once the leader exits, the zombie is ours
    (subreaper) and closing the launch reaps it: no zombie outlives a launch."""
    assignment = make_assignment(run, kind="prep")
    handle = await launch_worker(run.journal, assignment,
                                 program=program("body_child.py", "unreaped_grandchild"))
    await handle.accept_hello(welcome(), timeout=10)
    assert isinstance(await handle.channel.receive(timeout=10), Prepared)
    with open(os.path.join(assignment.slot_dir, "tree.pids")) as f:
        zombie = identity_of(json.load(f)["grandchild"])
    await handle.acknowledge_done()
    exit_ = await handle.close(policy=FAST)
    assert exit_.status == 0 and exit_.containment is None  # nothing was alive: no episode
    entry = read_entry(zombie.pid)
    assert entry is None or entry.start_time != zombie.start_time


async def test_containment_without_a_journal_still_contains(run: Run) -> None:
    handle, tree = await start_tree(run, "grandchild_ignores_term")
    try:
        result = await contain(handle.target, journal=None, cause=Code.LOOKUP_STOPPED,
                               policy=FAST)
        assert result.outcome is ContainmentOutcome.CONTAINED
        assert result.persisted is False and result.containment_id is None
        assert not alive(tree["grandchild"].pid, tree["grandchild"].start_time)
        handle.containment = result
        await handle.close(policy=FAST)
    finally:
        cleanup(tree["grandchild"])


def test_the_controller_is_a_subreaper_after_a_launch(tmp_path: Path) -> None:
    # In a fresh process: prctl state is per process, and pytest may already be one.
    script = tmp_path / "controller.py"
    script.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "import anyio\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'worker' / 'programs')!r})\n"
        "from proc_harness import make_assignment, open_run, welcome\n"
        "from efold.controller.processes.launcher import supervise\n"
        "from efold.controller.processes.subreaper import is_subreaper\n"
        "before = is_subreaper()\n"
        "run = open_run(Path(sys.argv[1]))\n"
        "async def main():\n"
        "    async with supervise(run.journal, make_assignment(run)) as h:\n"
        "        await h.accept_hello(welcome(), timeout=10)\n"
        "        await h.channel.receive(timeout=10)\n"
        "        await h.acknowledge_done()\n"
        "anyio.run(main, backend='trio')\n"
        "print(before, is_subreaper())\n"
    )
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
