"""A provider credential reaches only its child, over an inherited pipe, once the child's
Hello is accepted: never on argv, in the environment, or before the child verified its
assignment; every descriptor of the handoff is closed on every path."""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from proc_harness import FAST, PROGRAMS, Run, make_assignment, welcome

from efold.controller.errors import ControllerError
from efold.controller.processes import proctable
from efold.controller.processes.childenv import child_environment
from efold.controller.processes.launcher import WorkerHandle, launch_worker, supervise
from efold.errors import Code
from efold.identity import ProcessIdentity, current_identity
from efold.ipc import IpcEof, Prepared, Terminal
from efold.registry.journal import JournalReader
from efold.worker import credential as child_credential
from efold.worker.credential import MAX_CREDENTIAL_BYTES, CredentialPipe, inherited
from efold.worker.entry import parse_argv
from efold.worker.errors import WorkerError

NONE = hashlib.sha256(b"no credential").hexdigest()  # credential_child.py's "none"
O_CLOEXEC_FLAG = 0o2000000  # as /proc/<pid>/fdinfo prints the file flags


def canary() -> str:
    return "efold-canary-" + secrets.token_hex(16)


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def child(mode: str, report: Path | None = None) -> list[str]:
    return [sys.executable, str(PROGRAMS / "credential_child.py"), mode,
            str(report) if report else "-"]


def report_of(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def proc_text(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()


def credential_fd_of(pid: int) -> int | None:
    argv = proc_text(pid, "cmdline").split(b"\0")
    return int(argv[argv.index(b"--credential-fd") + 1]) if b"--credential-fd" in argv else None


def open_fds() -> Counter[str]:
    """What this process's descriptors point at (a pidfd: at which process), but the
    membership scan's pidfd pins: those pin whatever processes the machine runs (other
    tests' among them), at most ``PIN_LIMIT``, and are dropped as those processes exit
    (``proctable._Pins``), so a descriptor kept for good may be renumbered into a slot a
    pin left. A pipe, socket or pidfd of a launch kept open is a new target either way."""
    pins = {str(fd) for fd in proctable._PINS._by_fd}
    targets: Counter[str] = Counter()
    for fd in set(os.listdir("/proc/self/fd")) - pins:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target == "anon_inode:[pidfd]":
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    target += next(line for line in info if line.startswith("Pid:"))
        except (FileNotFoundError, StopIteration):
            continue  # the listing's own descriptor, closed since
        targets[target] += 1
    return targets


def assert_nowhere_but_the_pipe(handle: WorkerHandle, secret: str) -> None:
    """The child is alive: its environment and command line never hold the secret."""
    pid = handle.identity.pid
    assert secret.encode() not in proc_text(pid, "environ")
    assert secret.encode() not in proc_text(pid, "cmdline")


pytestmark = pytest.mark.anyio


# -- a real child reads exactly its credential ----------------------------------------------


async def test_a_prep_child_reads_exactly_its_credential(run: Run, tmp_path: Path) -> None:
    secret, report = canary(), tmp_path / "report"
    a = make_assignment(run, kind="prep")
    async with supervise(run.journal, a, policy=FAST, program=child("read", report),
                         credential=secret.encode()) as handle:
        assert handle.credential is not None and not handle.credential.delivered
        await handle.accept_hello(welcome(), timeout=10)
        assert handle.credential.delivered
        prepared = await handle.channel.receive(timeout=10)
        assert isinstance(prepared, Prepared) and prepared.snapshot_digest == sha(secret)
        pid = handle.identity.pid
        assert_nowhere_but_the_pipe(handle, secret)
        fd = credential_fd_of(pid)
        assert fd is not None and not os.path.exists(f"/proc/{pid}/fd/{fd}")  # read, closed
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0
    # Nothing was in the pipe when the child started: written after the Hello only.
    assert report_of(report) == {"early": "empty", "after": "0"}
    with JournalReader(run.run_dir) as reader:
        dump = repr([reader.rows(t) for t in ("launches", "members")])
    assert secret not in dump


async def test_a_probe_child_reads_exactly_its_credential(run: Run) -> None:
    secret = canary()
    a = make_assignment(run, kind="probe")  # its body "restores" the assigned digest
    async with supervise(run.journal, a, policy=FAST, program=child("read"),
                         credential=secret.encode()) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        await handle.accept_ready(timeout=10)
        terminal = await handle.channel.receive(timeout=10)
        assert isinstance(terminal, Terminal) and terminal.answer == sha(secret)
        assert_nowhere_but_the_pipe(handle, secret)
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0


async def test_without_a_credential_the_body_reads_none(run: Run) -> None:
    a = make_assignment(run, kind="prep")
    async with supervise(run.journal, a, policy=FAST, program=child("read")) as handle:
        assert handle.credential is None
        assert credential_fd_of(handle.identity.pid) is None
        await handle.accept_hello(welcome(), timeout=10)
        prepared = await handle.channel.receive(timeout=10)
        assert isinstance(prepared, Prepared) and prepared.snapshot_digest == NONE
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0


async def test_an_unread_credential_fd_is_close_on_exec_in_the_child(
        run: Run, tmp_path: Path) -> None:
    secret, report = canary(), tmp_path / "report"
    a = make_assignment(run, kind="prep")
    async with supervise(run.journal, a, policy=FAST, program=child("idle", report),
                         credential=secret.encode()) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        assert isinstance(await handle.channel.receive(timeout=10), Prepared)
        pid = handle.identity.pid
        fd = credential_fd_of(pid)
        fdinfo = dict(line.split(":", 1) for line in
                      proc_text(pid, f"fdinfo/{fd}").decode().splitlines())
        assert int(fdinfo["flags"], 8) & O_CLOEXEC_FLAG  # no grandchild inherits it
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0
    assert report_of(report) == {"early": "empty", "after": str(len(secret))}


# -- never written before an accepted Hello -------------------------------------------------


async def test_a_child_that_refuses_before_hello_is_never_written(
        run: Run, tmp_path: Path) -> None:
    me = current_identity()
    forged = ProcessIdentity(pid=me.pid, start_time=me.start_time + 1, boot_id=me.boot_id)
    report = tmp_path / "report"
    a = make_assignment(run, kind="prep", controller=forged)
    with pytest.raises(IpcEof):
        async with supervise(run.journal, a, policy=FAST, program=child("read", report),
                             credential=canary().encode()) as handle:
            await handle.accept_hello(welcome(), timeout=10)
    assert handle.credential is not None and not handle.credential.delivered
    assert (await handle.close()).code is Code.WORKER_PARENT_UNVERIFIED
    # The child's own duplicate of the pipe read EOF with nothing in it.
    assert report_of(report) == {"early": "empty", "after": "0"}


async def test_a_hello_that_differs_from_the_assignment_is_never_written(
        run: Run, tmp_path: Path) -> None:
    report = tmp_path / "report"
    a = make_assignment(run, kind="prep")
    handle = await launch_worker(run.journal, a, program=child("read", report),
                                 credential=canary().encode())
    handle.assignment = msgspec.structs.replace(a, build_digest="e" * 64)
    with pytest.raises(ControllerError) as info:
        await handle.accept_hello(welcome(), timeout=10)
    assert info.value.code is Code.WORKER_DIGEST_MISMATCH
    assert handle.credential is not None and not handle.credential.delivered
    exit_ = await handle.close(policy=FAST)
    assert exit_.code is Code.WORKER_STOPPED and exit_.containment is None
    assert report_of(report) == {"early": "empty", "after": "0"}


@pytest.mark.parametrize("bad", [b"", b"sk-a\nb", b"sk-a\rb", b"sk-a\0b", "sk-é".encode(),
                                 b"k" * (MAX_CREDENTIAL_BYTES + 1)])
async def test_an_unacceptable_credential_refuses_before_any_launch(run: Run, bad: bytes) -> None:
    before = open_fds()
    with pytest.raises(ControllerError) as info:
        await launch_worker(run.journal, make_assignment(run), credential=bad)
    assert info.value.code is Code.CAMPAIGN_INVALID
    if bad:
        assert bad.decode("latin-1") not in str(info.value)  # why, never the value
    assert open_fds() == before
    with JournalReader(run.run_dir) as reader:
        assert reader.rows("launches") == []


async def test_the_longest_credential_goes_through(run: Run) -> None:
    secret = "k" * MAX_CREDENTIAL_BYTES
    async with supervise(run.journal, make_assignment(run), policy=FAST, program=child("read"),
                         credential=secret.encode()) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        prepared = await handle.channel.receive(timeout=10)
        assert isinstance(prepared, Prepared) and prepared.snapshot_digest == sha(secret)
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0


# -- no descriptor leaks ----------------------------------------------------------------------


async def _full_launch(run: Run, credential: bytes | None) -> None:
    async with supervise(run.journal, make_assignment(run), policy=FAST, program=child("read"),
                         credential=credential) as handle:
        await handle.accept_hello(welcome(), timeout=10)
        await handle.channel.receive(timeout=10)
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0


async def test_the_controller_keeps_no_descriptor_of_any_launch(run: Run) -> None:
    await _full_launch(run, None)  # warm-up: whatever the first launch sets up for good
    before = open_fds()
    await _full_launch(run, canary().encode())
    assert open_fds() == before
    # A spawn that fails (no such program): both pipe ends closed, nothing written.
    with pytest.raises(ControllerError) as info:
        await launch_worker(run.journal, make_assignment(run), program=["/nonexistent/efold"],
                            credential=canary().encode())
    assert info.value.code is Code.LAUNCH_FAILED
    assert open_fds() == before
    # A child that refuses before Hello.
    me = current_identity()
    forged = ProcessIdentity(pid=me.pid, start_time=me.start_time + 1, boot_id=me.boot_id)
    with pytest.raises(IpcEof):
        async with supervise(run.journal, make_assignment(run, controller=forged), policy=FAST,
                             program=child("read"), credential=canary().encode()) as handle:
            await handle.accept_hello(welcome(), timeout=10)
    assert open_fds() == before


# -- the environment ----------------------------------------------------------------------


def test_the_child_environment_is_an_allowlist() -> None:
    secret = canary()
    env = child_environment({"PATH": "/usr/bin", "OPENAI_API_KEY": secret,
                             "EFOLD_CANARY_KEY": secret, "LANG": "C.UTF-8"})
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8"}


@pytest.mark.parametrize("explicit", [False, True])
async def test_a_credential_in_the_controller_environment_stays_behind(
        run: Run, monkeypatch: pytest.MonkeyPatch, explicit: bool) -> None:
    secret = canary()
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("EFOLD_CANARY_KEY", secret)
    env = child_environment() if explicit else None  # None: the launcher's own default
    async with supervise(run.journal, make_assignment(run), policy=FAST, program=child("read"),
                         env=env) as handle:
        environ = proc_text(handle.identity.pid, "environ")
        assert secret.encode() not in environ
        assert b"OPENAI_API_KEY" not in environ and b"EFOLD_CANARY_KEY" not in environ
        await handle.accept_hello(welcome(), timeout=10)
        await handle.channel.receive(timeout=10)
        await handle.acknowledge_done()
    assert (await handle.close()).status == 0


# -- the child's side, in process ------------------------------------------------------------


def test_argv_takes_an_optional_credential_fd() -> None:
    assert parse_argv(["prep", "--ipc-fd", "5", "--key-fd", "6"]) == ("prep", 5, 6, None)
    assert parse_argv(["probe", "--credential-fd", "7", "--ipc-fd", "5", "--key-fd", "6"]) == (
        "probe", 5, 6, 7)


@pytest.mark.parametrize("argv", [
    ["prep", "--ipc-fd", "5", "--key-fd", "6", "--credential-fd", "5"],
    ["prep", "--ipc-fd", "5", "--key-fd", "6", "--credential-fd", "2"],
    ["prep", "--ipc-fd", "5", "--key-fd", "6", "--credential-fd", "x"],
    ["prep", "--ipc-fd", "5", "--key-fd", "6", "--credential-fd"],
    ["prep", "--ipc-fd", "5", "--key-fd", "6", "--ipc-fd", "7"],
    ["prep", "--ipc-fd", "5", "--key-fd", "6", "--other-fd", "7"],
    ["prep", "--ipc-fd", "5", "--credential-fd", "6"],
])
def test_bad_credential_argv_is_usage(argv: list[str]) -> None:
    with pytest.raises(WorkerError) as info:
        parse_argv(argv)
    assert info.value.code is Code.WORKER_USAGE


def _pipe_with(data: bytes) -> int:
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_the_pipe_is_read_once_and_closed() -> None:
    r = _pipe_with(b"sk-test-1")
    pipe = CredentialPipe(r)
    assert pipe.read() == "sk-test-1" and not _is_open(r)
    assert pipe.read() == "sk-test-1"  # cached in memory, not read again
    assert CredentialPipe(None).read() is None


@pytest.mark.parametrize("data", [b"", b"a\nb", b"a\rb", b"a\0b", "é".encode(),
                                  b"k" * (MAX_CREDENTIAL_BYTES + 1)])
def test_an_invalid_pipe_refuses_every_time(data: bytes) -> None:
    r = _pipe_with(data)
    pipe = CredentialPipe(r)
    for _ in range(2):
        with pytest.raises(WorkerError) as info:
            pipe.read()
        assert info.value.code is Code.WORKER_KEY_INVALID
    assert not _is_open(r)


def test_inherited_installs_the_pipe_and_closes_it_unread() -> None:
    r = _pipe_with(b"sk-test-2")
    os.set_inheritable(r, True)  # as pass_fds leaves it in the child
    assert child_credential.credential() is None
    with inherited(r) as pipe:
        assert not os.get_inheritable(r)
        assert child_credential.current() is pipe
    assert not _is_open(r)  # never read: closed on the way out all the same
    assert child_credential.credential() is None
    r = _pipe_with(b"sk-test-3")
    with inherited(r):
        assert child_credential.credential() == "sk-test-3"
    assert child_credential.credential() is None


def test_a_credential_fd_that_is_not_a_pipe_is_usage() -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    with pytest.raises(WorkerError) as info, inherited(fd):
        pass
    assert info.value.code is Code.WORKER_USAGE
    assert not _is_open(fd)
