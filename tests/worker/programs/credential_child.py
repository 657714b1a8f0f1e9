"""A real child that runs efold's worker entry point with a body that reads the credential.

    python credential_child.py MODE REPORT prep|probe --ipc-fd N --key-fd M [--credential-fd K]

MODE ``read``: the body reads ``efold.worker.credential.credential()`` and reports its
sha256 (``NONE`` without one) in ``Prepared.snapshot_digest`` (prep) or
``Terminal.answer`` (probe). MODE ``idle``: the body never reads it.

REPORT (a path, or ``-``): what this program saw of the credential pipe through its own
duplicate of the descriptor, outside the protocol: ``early=`` what was readable before
the entry point ran (``empty``: nothing yet), then ``after=`` how many bytes were left
once the entry point returned (read to EOF: it waits until the controller closed its
end). Counts only, never the credential.
"""

from __future__ import annotations

import hashlib
import os
import sys

from efold.ipc.messages import MeterReading, Prepared, Terminal, TerminalStatus, Welcome
from efold.protocol.assignment import Assignment
from efold.worker.credential import credential
from efold.worker.entry import main
from efold.worker.session import ProbeSession

NONE = hashlib.sha256(b"no credential").hexdigest()


def _digest(read: bool) -> str:
    value = credential() if read else None
    return NONE if value is None else hashlib.sha256(value.encode("ascii")).hexdigest()


class Body:
    def __init__(self, read: bool) -> None:
        self.read = read

    def restore(self, assignment: Assignment) -> str:
        assert assignment.snapshot is not None
        return assignment.snapshot.digest

    def run(self, *args: object) -> Prepared | Terminal:
        if isinstance(args[0], ProbeSession):
            return Terminal(status=TerminalStatus.ANSWERED, code=None, answer=_digest(self.read),
                            meter=MeterReading(calls=0, bytes=0), witness=NONE)
        assert isinstance(args[1], Welcome)
        return Prepared(snapshot_digest=_digest(self.read), files=0, bytes=0, rejected={})


def _peek(fd: int) -> str:
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return "empty"
    finally:
        os.set_blocking(fd, True)
    return str(len(data)) if data else "eof"


def _drain(fd: int) -> int:
    total = 0
    while chunk := os.read(fd, 1 << 16):
        total += len(chunk)
    return total


if __name__ == "__main__":
    mode, report, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    dup = None
    if "--credential-fd" in argv:
        dup = os.dup(int(argv[argv.index("--credential-fd") + 1]))
    lines = [f"early={_peek(dup)}"] if dup is not None else []
    status = main(argv, body=Body(mode == "read"))  # type: ignore[arg-type]
    if dup is not None:
        lines.append(f"after={_drain(dup)}")
    if report != "-":
        with open(report, "w") as f:
            f.write("\n".join(lines))
    sys.exit(status)
