"""The real fork-server template with a test body for every worker it forks.

    python template_child.py MODE --control-fd N

MODE is a ``body_child.py`` mode (a tree mode, or crash/hang/session), or
``credential_read``: ``credential_child.py``'s body that reports the credential's sha256,
or ``exec_sleeper``: a prep body that starts ``sleep`` (an exec'd descendant) and writes
its pid to ``tree.pids`` as ``sleeper``, or ``entropy``: a prep body that writes to
``entropy.json`` what it draws from ``random`` and from OpenSSL's generator, and its
parent, or ``slow_forked``: the builtin bodies, but the template answers each
``ForkRequest`` 3 s after its fork (a template too slow for the exchange's timeout).
"""

from __future__ import annotations

import json
import os
import random
import ssl
import subprocess
import sys

from body_child import BODIES, TreeBody
from credential_child import Body as CredentialBody

from efold.ipc.messages import Prepared, Welcome
from efold.protocol.assignment import Assignment
from efold.worker.template import main


class ExecSleeper:
    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        sleeper = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(assignment.slot_dir, "tree.pids"), "w") as f:
            json.dump({"leader": os.getpid(), "sleeper": sleeper.pid}, f)
        return Prepared(snapshot_digest="d" * 64, files=0, bytes=0, rejected={})


class Entropy:
    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        drawn = {"random": random.getrandbits(128), "ssl": ssl.RAND_bytes(16).hex(),
                 "ppid": os.getppid()}
        with open(os.path.join(assignment.slot_dir, "entropy.json"), "w") as f:
            json.dump(drawn, f)
        return Prepared(snapshot_digest="d" * 64, files=0, bytes=0, rejected={})


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "credential_read":
        body: object = CredentialBody(read=True)
    elif mode == "exec_sleeper":
        body = ExecSleeper()
    elif mode == "slow_forked":
        import time

        from efold.protocol.template_wire import Forked
        from efold.worker import template as served

        answer = served._reply

        def late(sock: object, msg: object) -> None:
            if isinstance(msg, Forked):
                time.sleep(3)
            answer(sock, msg)  # type: ignore[arg-type]

        served._reply = late  # type: ignore[assignment]
        sys.exit(main(sys.argv[2:]))
    elif mode == "entropy":
        body = Entropy()
        ssl.RAND_bytes(16)  # the template's own generator is seeded before any fork
    else:
        body = BODIES[mode]() if mode in BODIES else TreeBody(mode)
    sys.exit(main(sys.argv[2:], bodies=lambda kind: body))  # type: ignore[arg-type,return-value]
