"""``python -m efold.worker probe|prep --ipc-fd N --key-fd M [--credential-fd K]``: a
child's whole life.

0. The credential descriptor, if any, is made non-inheritable at once and installed for
   the body (``efold.worker.credential``); it is closed on the way out, read or not.
1. Read the key pipe once (key + ``Assignment``), close it. The kind on argv must match.
2. Verify, before saying anything: the parent is the assigned controller (pid + start
   time + boot id) and the run lease is live, held by it at the assigned epoch.
3. ``Hello`` (the assignment's digests and cache key) ; ``Welcome`` (deadlines, budgets).
4. probe: the body restores and verifies the snapshot; ``Ready{arrival_digest}``; the
   body runs with a ``ProbeSession``; ``Terminal`` ; ``DoneAck``.
   prep: a body that may send (``SendingPrepBody``) is handed a ``PermitSession``; the
   body prepares (its summary requests, if any, are permit exchanges on the way);
   ``Prepared`` ; ``DoneAck``.
5. Exit 0 after ``DoneAck``.

Any failure exits with the fixed status of its code (``efold.protocol.exit_codes``) and
nothing else: no message after a failed check, nothing on stdout/stderr (they are
/dev/null anyway). A ``Stop`` from the controller exits ``worker_stopped``.

Imports are kept to the standard library, msgspec and efold's child-side modules: each
child pays for its imports at every launch (see ``benchmarks/bench_spawn.py``).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence
from typing import Final, cast

from efold.errors import Code, EfoldError
from efold.identity import current_identity
from efold.ipc.child_channel import ChildChannel
from efold.ipc.messages import Binding, DoneAck, Hello, Ready, Welcome
from efold.protocol.assignment import Assignment
from efold.protocol.exit_codes import EXIT_OK, exit_status_for
from efold.worker.bodies import (
    PrepBody,
    ProbeBody,
    SendingPrepBody,
    load_prep_body,
    load_probe_body,
)
from efold.worker.credential import inherited
from efold.worker.errors import WorkerError
from efold.worker.key_pipe import read_key_pipe
from efold.worker.session import PermitSession, ProbeSession, expect
from efold.worker.verify import verify_lease, verify_parent

USAGE: Final = ("usage: python -m efold.worker probe|prep --ipc-fd N --key-fd M"
                " [--credential-fd K]")
_OPTIONS: Final = ("--ipc-fd", "--key-fd", "--credential-fd")


def parse_argv(argv: Sequence[str]) -> tuple[str, int, int, int | None]:
    """(kind, ipc fd, key fd, credential fd or None). Deliberately tiny (no argparse: it
    costs import time)."""
    if len(argv) not in (5, 7) or argv[0] not in ("probe", "prep"):
        raise WorkerError(Code.WORKER_USAGE, USAGE)
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    if len(options) != len(argv) // 2 or not set(options) <= set(_OPTIONS):
        raise WorkerError(Code.WORKER_USAGE, USAGE)  # a repeated or unknown option
    try:
        fds = [int(options[name]) for name in _OPTIONS if name in options]
        ipc_fd, key_fd = int(options["--ipc-fd"]), int(options["--key-fd"])
    except (KeyError, ValueError) as exc:
        raise WorkerError(Code.WORKER_USAGE, USAGE) from exc
    if min(fds) < 3 or len(set(fds)) != len(fds):
        raise WorkerError(Code.WORKER_USAGE, "descriptors must be distinct and above stdio")
    return argv[0], ipc_fd, key_fd, fds[2] if len(fds) == 3 else None


def _open_socket(fd: int) -> socket.socket:
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise WorkerError(Code.WORKER_USAGE, f"ipc fd errno {exc.errno}") from exc
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise WorkerError(Code.WORKER_USAGE, "ipc fd is not a unix stream socket")
    return sock


def _hello(assignment: Assignment) -> Hello:
    return Hello(
        protocol=assignment.protocol,
        registration_digest=assignment.registration_digest,
        plan_digest=assignment.plan_digest,
        build_digest=assignment.build_digest,
        cache_key=assignment.cache_key,
    )


def run(kind: str, ipc_fd: int, key_fd: int, credential_fd: int | None = None, *,
        body: ProbeBody | PrepBody | None = None) -> None:
    """The child's protocol; returns normally only after ``DoneAck``.

    ``body`` overrides the registered body the assignment names: for programs that
    embed this entry point (test children), never set from anything the child reads.
    The credential pipe is the body's (``efold.worker.credential.current()``) until the
    end, then closed whether the body read it or not.
    """
    # Everything a child (and a fold or proxy it starts) writes is owner-only, whatever
    # umask its controller had: ``pilot`` sets 077 itself, but ``preflight``, ``fold
    # check`` and ``plan`` build checkpoints too, under the operator's own umask, and a
    # group-writable file in a slot directory fails its tree check.
    os.umask(0o077)
    with inherited(credential_fd):
        _protocol(kind, ipc_fd, key_fd, body)


def _protocol(kind: str, ipc_fd: int, key_fd: int, body: ProbeBody | PrepBody | None) -> None:
    key, assignment = read_key_pipe(key_fd)
    if assignment.kind != kind:
        raise WorkerError(Code.WORKER_USAGE, "argv kind differs from the assignment")
    sock = _open_socket(ipc_fd)
    verify_parent(assignment)
    verify_lease(assignment)
    # Load the body before speaking: an unregistered body refuses without a message.
    probe_body: ProbeBody | None = None
    prep_body: PrepBody | None = None
    if kind == "probe":
        probe_body = cast(ProbeBody, body) if body else load_probe_body(assignment.body)
    else:
        prep_body = cast(PrepBody, body) if body else load_prep_body(assignment.body)
    binding = Binding(epoch=assignment.epoch, slot=assignment.slot, worker=current_identity())
    channel = ChildChannel(
        sock,
        protocol=assignment.protocol,
        binding=binding,
        key=key,
        exchange_timeout=assignment.hello_timeout_ms / 1000,
    )
    welcome = expect(channel.request(_hello(assignment)), Welcome)
    channel.set_exchange_timeout(welcome.deadlines.exchange_ms / 1000)
    if probe_body is not None:
        arrival = probe_body.restore(assignment)
        channel.send(Ready(arrival_digest=arrival))
        final = probe_body.run(ProbeSession(channel, assignment, welcome))
        expect(channel.request(final), DoneAck)
    elif prep_body is not None:
        if isinstance(prep_body, SendingPrepBody):
            prep_body.bind_session(PermitSession(channel, assignment, welcome))
        prepared = prep_body.run(assignment, welcome)
        expect(channel.request(prepared), DoneAck)
    channel.close()


def main(argv: Sequence[str] | None = None, *, body: ProbeBody | PrepBody | None = None) -> int:
    """Run the child and return its exit status (never raises, never prints)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        run(*parse_argv(args), body=body)
    except EfoldError as exc:
        return exit_status_for(exc.code)
    except Exception:
        # Never a traceback (stderr is /dev/null anyway) and never exit status 1, which
        # would read as "unknown": a body bug is a fixed code like any other failure.
        return exit_status_for(Code.WORKER_BODY_FAILED)
    return EXIT_OK
