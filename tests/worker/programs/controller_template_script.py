"""A real controller process for the template crash test: starts a template, has it
fork a worker whose grandchild ignores SIGTERM, writes ``ready.json`` (the pids) into
ROOT_DIR, and waits to be SIGKILLed.

    python controller_template_script.py ROOT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
from proc_harness import make_assignment, open_run, program, welcome

from efold.controller.processes.launcher import launch_worker
from efold.controller.processes.template import running_template


async def main(root: Path) -> None:
    run = open_run(root)
    async with running_template(run.journal, run.epoch,
                                program=program("template_child.py",
                                                "grandchild_ignores_term")) as template:
        assignment = make_assignment(run)
        handle = await launch_worker(run.journal, assignment, template=template)
        await handle.accept_hello(welcome(), timeout=30)
        await handle.channel.receive(timeout=30)  # Prepared: the tree is built
        with open(os.path.join(assignment.slot_dir, "tree.pids")) as f:
            pids = json.load(f)
        (root / "ready.json").write_text(json.dumps(pids))
        await anyio.sleep(300)


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), backend="trio")
