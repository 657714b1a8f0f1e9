"""``python -m efold.worker probe|prep --ipc-fd N --key-fd M [--credential-fd K]``: one
child (``efold.worker.entry``); ``python -m efold.worker --control-fd N``: the
fork-server template that forks such children (``efold.worker.template``).

A child ends with ``os._exit``, not ``SystemExit``: when ``main`` returns, nothing is
left to flush (stdio is /dev/null; every file a child hands over is written whole and
fsynced before the message that names it), and the interpreter's teardown would cost
each child about 50 ms (``benchmarks/bench_spawn.py``).
"""

import os
import sys

if sys.argv[1:2] == ["--control-fd"]:
    from efold.worker import template

    os._exit(template.main())
else:
    from efold.worker import entry

    os._exit(entry.main())
