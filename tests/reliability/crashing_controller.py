"""A controller that SIGKILLs itself at its Nth journal write (a real process, a real
journal): ``python crashing_controller.py RUN MODE N WHEN LOG [AUTH]``.

MODE is a faulty-child mode of tests/pilot/faulty_child.py (``none`` for the production
worker). WHEN is ``after`` (the Nth transaction committed, its follow-up not done) or
``before`` (killed as the Nth transaction begins: that write is absent). N = 0 never
crashes (a census run). Every write appends ``index method caller`` to LOG, so a census
lists the distinct write points (a write nested in ``JournalWriter.batched`` has its
method suffixed ``@batch``). AUTH, if given, receives the minted faux authorization
(artifact and trusted key) so the test can try to reuse it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "pilot"))

from efold_pilot_kit import faulty_program, small_registration  # noqa: E402

from efold.controller.pilot.pilot import run_pilot  # noqa: E402
from efold.controller.rundirs.runroot import claim_run_dir  # noqa: E402
from efold.registry import authorization as authz  # noqa: E402
from efold.registry import journal as J  # noqa: E402

run, mode, crash_at, when, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
auth_out = sys.argv[6] if len(sys.argv) > 6 else None
count = 0
original = J.JournalWriter._transaction


@contextmanager
def counted(self: J.JournalWriter, *, now: bool = False) -> Iterator[object]:
    global count
    count += 1
    mine = count  # this write's number: writes nested in a batch count on meanwhile
    method = sys._getframe(2).f_code.co_name
    if method in ("_insert",):
        method = sys._getframe(3).f_code.co_name
        caller = sys._getframe(4).f_code.co_name
    else:
        caller = sys._getframe(3).f_code.co_name
    if self._batching:  # nested in a batch: named so, for the test's own checks
        method += "@batch"
    with open(log, "a") as f:
        f.write(f"{mine} {method} {caller}\n")
    if when == "before" and mine == crash_at:
        os.kill(os.getpid(), signal.SIGKILL)
    with original(self, now=now) as conn:
        yield conn
    # A write nested in ``JournalWriter.batched`` is committed by its batch: killed
    # "after" it, the process dies before that commit (a crash inside the batch).
    if when == "after" and mine == crash_at:
        os.kill(os.getpid(), signal.SIGKILL)


J.JournalWriter._transaction = counted  # type: ignore[method-assign,assignment]

if auth_out is not None:
    import base64

    import msgspec
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    mint = authz.mint_faux_authorization

    def saving(bindings: authz.AuthorizationBindings, **kw: object) -> authz.FauxMint:
        minted = mint(bindings, **kw)  # type: ignore[arg-type]
        key = minted.trusted_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
        Path(auth_out).write_text(json.dumps({
            "artifact": base64.b64encode(minted.artifact).decode(),
            "key": base64.b64encode(key).decode(),
            "bindings": msgspec.json.encode(bindings).decode(),
        }))
        return minted

    authz.mint_faux_authorization = saving  # type: ignore[assignment]

reg, raw = small_registration(roles='["native"]')
program = None if mode == "none" else faulty_program(mode, Path(run).parent / f"{mode}.marker")
run_pilot(reg, raw, claim_run_dir(run), program=program)
