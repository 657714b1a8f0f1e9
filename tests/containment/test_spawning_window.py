"""With several launches in flight, a launch's fresh child must never be taken for an
adopted orphan of another launch being scanned (rule 4 of ``controller.processes.membership``):
scans wait until every child the controller made on purpose is registered
(``DirectChildren.spawning``/``quiet``). Real processes, the real /proc scan."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio

from efold.controller.processes.membership import tied_processes
from efold.controller.processes.proctable import scan
from efold.controller.processes.subreaper import DIRECT_CHILDREN, DirectChildren, become_subreaper
from efold.identity import identity_of


def test_quiet_waits_for_every_registration_under_way() -> None:
    children = DirectChildren()
    seen: list[str] = []

    async def scanner() -> None:
        await children.quiet()
        seen.append("scanned")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            with children.spawning():
                with children.spawning():
                    tg.start_soon(scanner)
                    await anyio.sleep(0.05)
                    assert seen == []  # two launches under way
                await anyio.sleep(0.05)
                assert seen == []  # one still under way
            await anyio.sleep(0.05)
            assert seen == ["scanned"]
            await children.quiet()  # nothing under way: at once

    anyio.run(main, backend="trio")


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                            start_new_session=True)


def test_a_fresh_child_is_no_orphan_of_a_launch_scanned_at_quiet() -> None:
    # Launch A's leader is registered; launch B's child is spawned while B's registration
    # is under way. A scan of A made then would adopt B's child (the negative control
    # below); made at quiet, it sees B's child registered.
    become_subreaper()
    leader_process = _sleeper()
    leader = identity_of(leader_process.pid)
    DIRECT_CHILDREN.add(leader)
    found: list[list[int]] = []

    def tied_to_a() -> list[int]:
        tied = tied_processes(scan(), leader=leader, pgid=leader_process.pid, recorded=(),
                              controller_pid=os.getpid(),
                              direct_children=DIRECT_CHILDREN.pids() - {leader.pid})
        return [e.pid for e in tied]

    async def scan_a() -> None:
        await DIRECT_CHILDREN.quiet()
        found.append(tied_to_a())

    async def main() -> subprocess.Popen[bytes]:
        async with anyio.create_task_group() as tg:
            with DIRECT_CHILDREN.spawning():
                child = _sleeper()
                assert child.pid in tied_to_a()  # unregistered: it would be adopted
                tg.start_soon(scan_a)
                await anyio.sleep(0.1)  # the scanner runs now, and must wait
                assert found == []
                DIRECT_CHILDREN.add(identity_of(child.pid))
        return child

    child = anyio.run(main, backend="trio")
    try:
        assert leader.pid in found[0] and child.pid not in found[0]
    finally:
        for process in (leader_process, child):
            DIRECT_CHILDREN.discard(process.pid)
            process.kill()
            process.wait()
