"""A real controller process for the crash test: launches a tree whose leader and
grandchild both ignore SIGTERM, then contains it with a very long grace, so that it can
be SIGKILLed mid-containment.

    python controller_script.py ROOT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from proc_harness import make_assignment, open_run, program, welcome

from efold.controller.processes.containment import ContainmentPolicy
from efold.controller.processes.launcher import launch_worker
from efold.errors import Code


async def main(root: Path) -> None:
    run = open_run(root)
    handle = await launch_worker(
        run.journal, make_assignment(run), program=program("body_child.py", "leader_ignores_term")
    )
    await handle.accept_hello(welcome(), timeout=30)
    await handle.channel.receive(timeout=30)  # Prepared: the tree is built
    await handle.contain(Code.LOOKUP_STOPPED, policy=ContainmentPolicy(term_grace=300))


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), backend="trio")
