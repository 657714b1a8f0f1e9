"""``python -m efold.worker``: self-verification before speaking, fixed exit statuses,
and the child's reaction to a controller that breaks the protocol. The controller side
here is driven by hand (no launcher) so that it can misbehave."""

from __future__ import annotations

import os
import subprocess
import sys

import msgspec
import pytest
from proc_harness import (
    DIGEST,
    Run,
    hand_core,
    make_assignment,
    program,
    recv_msg,
    spawn_entry,
    welcome,
)

from efold.errors import Code
from efold.identity import ProcessIdentity, current_identity
from efold.ipc import Granted, Hello, IpcEof, Prepared, Stop, seal
from efold.ipc.messages import ControllerEnvelope
from efold.protocol.assignment import SnapshotRef, encode_key_pipe
from efold.protocol.exit_codes import EXIT_OK, code_for_exit_status, exit_status_for


def finish(proc: subprocess.Popen[bytes]) -> Code | None:
    proc.wait(timeout=30)
    assert proc.stderr is not None and proc.stderr.read() == b""  # a child prints nothing
    assert proc.returncode >= 0, proc.returncode  # never killed by a signal here
    if proc.returncode == EXIT_OK:
        return None
    code = code_for_exit_status(proc.returncode)
    assert code is not None, proc.returncode  # always a fixed status, never 1
    return code


def silent_refusal(run: Run, assignment, code: Code, **spawn) -> None:  # type: ignore[no-untyped-def]
    """The child refuses with ``code`` and says nothing at all on the channel."""
    proc, sock, _ = spawn_entry(assignment, **spawn)
    assert sock.recv(1) == b""  # EOF without a single byte
    assert finish(proc) is code


# -- self-verification before Hello -----------------------------------------------------


def test_a_forged_controller_identity_refuses_before_hello(run: Run) -> None:
    me = current_identity()
    forged = ProcessIdentity(pid=me.pid, start_time=me.start_time + 1, boot_id=me.boot_id)
    silent_refusal(run, make_assignment(run, controller=forged), Code.WORKER_PARENT_UNVERIFIED)


def test_a_controller_that_is_not_the_parent_refuses(run: Run) -> None:
    other = ProcessIdentity(pid=1, start_time=0, boot_id=current_identity().boot_id)
    silent_refusal(run, make_assignment(run, controller=other), Code.WORKER_PARENT_UNVERIFIED)


def test_a_stale_epoch_is_a_lease_that_is_not_live(run: Run) -> None:
    silent_refusal(run, make_assignment(run, epoch=run.epoch + 1), Code.WORKER_LEASE_NOT_LIVE)


def test_a_run_without_a_live_lease_refuses(run: Run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    other = tmp_path / "other-run"
    other.mkdir()
    assignment = msgspec.structs.replace(make_assignment(run), run_dir=str(other))
    silent_refusal(run, assignment, Code.WORKER_LEASE_NOT_LIVE)


def test_a_released_lease_refuses(run: Run) -> None:
    assignment = make_assignment(run)
    run.journal.close()
    run.lease.release()
    silent_refusal(run, assignment, Code.WORKER_LEASE_NOT_LIVE)


@pytest.mark.parametrize("pipe", [b"", b"x" * 32, os.urandom(32) + b"\xc1garbage",
                                  b"y" * (70 * 1024)],
                         ids=["empty", "wrong-key", "key-then-garbage", "oversized"])
def test_a_bad_key_pipe_refuses(run: Run, pipe: bytes) -> None:
    silent_refusal(run, make_assignment(run), Code.WORKER_KEY_INVALID, pipe_bytes=pipe)


def test_probe_fields_on_a_prep_assignment_refuse(run: Run) -> None:
    bad = msgspec.structs.replace(make_assignment(run), cache_key="ck")
    silent_refusal(run, bad, Code.WORKER_KEY_INVALID, pipe_bytes=encode_key_pipe(os.urandom(32), bad))


def test_an_unregistered_body_refuses(run: Run) -> None:
    silent_refusal(run, make_assignment(run, body="nonesuch"), Code.WORKER_USAGE)


def test_argv_kind_must_match_the_assignment(run: Run) -> None:
    silent_refusal(run, make_assignment(run, kind="prep"), Code.WORKER_USAGE, argv_kind="probe")


@pytest.mark.parametrize("argv", [[], ["probe"], ["bogus", "--ipc-fd", "5", "--key-fd", "6"],
                                  ["prep", "--ipc-fd", "x", "--key-fd", "6"],
                                  ["prep", "--ipc-fd", "5", "--key-fd", "5"],
                                  ["prep", "--ipc-fd", "1", "--key-fd", "6"]])
def test_bad_argv_is_usage(argv: list[str]) -> None:
    out = subprocess.run([sys.executable, "-I", "-m", "efold.worker", *argv],
                         capture_output=True, timeout=30)
    assert out.returncode == exit_status_for(Code.WORKER_USAGE)
    assert out.stdout == b"" and out.stderr == b""


# -- after Hello ----------------------------------------------------------------------


def test_a_snapshot_that_does_not_verify_stops_before_ready(run: Run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    snap = tmp_path / "snap.bin"
    snap.write_bytes(b"not what was prepared")
    a = make_assignment(run, kind="probe", snapshot=SnapshotRef(path=str(snap), digest=DIGEST))
    proc, sock, key = spawn_entry(a)
    core = hand_core(a, proc, key)
    assert isinstance(recv_msg(core, sock), Hello)
    sock.sendall(core.outgoing(welcome()))
    with pytest.raises(IpcEof):  # no Ready, nothing at all
        recv_msg(core, sock)
    assert finish(proc) is Code.WORKER_SNAPSHOT_INVALID


def test_a_symlinked_snapshot_is_refused(run: Run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    data = b"snapshot"
    real = tmp_path / "real.bin"
    real.write_bytes(data)
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    a = make_assignment(run, kind="probe",
                        snapshot=SnapshotRef(path=str(link), digest=hashlib.sha256(data).hexdigest()))
    proc, sock, key = spawn_entry(a)
    core = hand_core(a, proc, key)
    recv_msg(core, sock)
    sock.sendall(core.outgoing(welcome()))
    assert finish(proc) is Code.WORKER_SNAPSHOT_INVALID


def test_a_body_bug_is_a_fixed_code_and_prints_nothing(run: Run) -> None:
    a = make_assignment(run)
    proc, sock, key = spawn_entry(a, prefix=program("body_child.py", "crash"))
    core = hand_core(a, proc, key)
    assert isinstance(recv_msg(core, sock), Hello)
    sock.sendall(core.outgoing(welcome()))
    assert finish(proc) is Code.WORKER_BODY_FAILED  # finish(): no traceback either


# -- a controller that breaks the protocol ----------------------------------------------


def _forged_frame(a, proc, key: bytes, msg, *, seq: int = 1, epoch_shift: int = 0) -> bytes:  # type: ignore[no-untyped-def]
    from efold.identity import identity_of

    env = ControllerEnvelope(epoch=a.epoch + epoch_shift, slot=a.slot, worker=identity_of(proc.pid),
                             seq=seq, msg=msg)
    return seal(key, msgspec.msgpack.encode(env))


@pytest.mark.parametrize(
    ("violation", "code"),
    [
        ("bad_mac", Code.IPC_BAD_MAC),
        ("binding", Code.IPC_BINDING_MISMATCH),
        ("seq", Code.IPC_SEQ_MISMATCH),
        ("out_of_order", Code.IPC_OUT_OF_ORDER),
        ("too_large", Code.IPC_FRAME_TOO_LARGE),
        ("truncated", Code.IPC_TRUNCATED_FRAME),
        ("eof", Code.IPC_EOF),
        ("bad_message", Code.IPC_BAD_MESSAGE),
        ("stop", Code.WORKER_STOPPED),
    ],
)
def test_the_child_exits_with_the_fixed_code_of_a_controller_violation(
    run: Run, violation: str, code: Code
) -> None:
    a = make_assignment(run)
    proc, sock, key = spawn_entry(a)
    core = hand_core(a, proc, key)
    assert isinstance(recv_msg(core, sock), Hello)
    good = _forged_frame(a, proc, key, welcome())
    frames = {
        "bad_mac": good[:-1] + bytes([good[-1] ^ 1]),
        "binding": _forged_frame(a, proc, key, welcome(), epoch_shift=1),
        "seq": _forged_frame(a, proc, key, welcome(), seq=0),
        "out_of_order": _forged_frame(a, proc, key, Granted(permit_id="p", hold=1)),
        "too_large": (2**21).to_bytes(4, "big") + b"z" * 64,
        "truncated": good[:12],
        "eof": b"",
        "bad_message": seal(key, b"\xc1"),
        "stop": core.outgoing(Stop(code=Code.LOOKUP_STOPPED)),
    }
    sock.sendall(frames[violation])
    if violation in ("truncated", "eof"):
        sock.shutdown(2)
    assert finish(proc) is code


def test_a_replayed_welcome_is_refused(run: Run) -> None:
    a = make_assignment(run)
    proc, sock, key = spawn_entry(a)
    core = hand_core(a, proc, key)
    recv_msg(core, sock)
    frame = core.outgoing(welcome())
    sock.sendall(frame)
    assert isinstance(recv_msg(core, sock), Prepared)
    sock.sendall(frame)  # the genuine Welcome again instead of DoneAck
    assert finish(proc) is Code.IPC_SEQ_MISMATCH


def test_a_silent_controller_is_an_exchange_timeout(run: Run) -> None:
    a = make_assignment(run, hello_timeout_ms=300)
    proc, sock, key = spawn_entry(a)
    core = hand_core(a, proc, key)
    recv_msg(core, sock)  # Hello, never answered
    assert finish(proc) is Code.IPC_TIMEOUT
    a = make_assignment(run)
    proc, sock, key = spawn_entry(a)
    core = hand_core(a, proc, key)
    recv_msg(core, sock)
    sock.sendall(core.outgoing(welcome(exchange_ms=300)))
    assert isinstance(recv_msg(core, sock), Prepared)  # DoneAck never comes
    assert finish(proc) is Code.IPC_TIMEOUT


def test_every_worker_and_ipc_code_has_a_distinct_exit_status() -> None:
    from efold.protocol.exit_codes import EXIT_STATUS

    statuses = list(EXIT_STATUS.values())
    assert len(statuses) == len(set(statuses))
    assert all(2 < s < 126 for s in statuses)  # not 0/1/2, not the shell's 126+
    # worker_timeout is the controller's verdict on a child, never a child's exit.
    worker_codes = {c for c in Code if c.value.startswith(("worker_", "ipc_"))}
    worker_codes.discard(Code.WORKER_TIMEOUT)
    assert worker_codes <= set(EXIT_STATUS)
    for code, status in EXIT_STATUS.items():
        assert code_for_exit_status(status) is code
