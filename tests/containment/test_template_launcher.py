"""The fork-server template launcher (efold.controller.processes.template, efold.worker.template)
with real processes: adopted children run the unchanged protocol, lead their own group
under the controller, are journaled like spawned ones; a dead template falls back to
spawns; the template never reads the descriptors it relays."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import termios
import time
from pathlib import Path

import anyio
import pytest
from proc_harness import (
    FAST,
    PROGRAMS,
    Run,
    alive,
    kill_proven,
    make_assignment,
    wait_until,
    welcome,
)

from efold.controller.processes.adopted import AdoptedProcess
from efold.controller.processes.launcher import launch_worker, supervise
from efold.controller.processes.marker import MARKER_VAR, marker_of, markers_by_process
from efold.controller.processes.proctable import read_entry, scan
from efold.controller.processes.subreaper import DIRECT_CHILDREN, become_subreaper
from efold.controller.processes.template import (
    TEMPLATE_KIND,
    TEMPLATE_SLOT,
    _forked_by,
    _socket_at,
    running_template,
)
from efold.controller.rundirs.reap import reap
from efold.controller.rundirs.recovery import observe
from efold.errors import Code
from efold.identity import ProcessIdentity, identity_of
from efold.ipc import Prepared, Terminal, TerminalStatus
from efold.protocol.assignment import SnapshotRef
from efold.protocol.exit_codes import exit_status_for
from efold.protocol.template_wire import (
    ENCODER,
    FROM_TEMPLATE,
    LAUNCH_MARKER_VAR,
    Forked,
    ForkRequest,
    TemplateReady,
)
from efold.registry.journal import JournalReader
from efold.worker.builtin import BUILTIN_ANSWER, SNAPSHOT_FILE

pytestmark = pytest.mark.anyio


def launches(run: Run) -> list[dict]:  # type: ignore[type-arg]
    with JournalReader(run.run_dir) as reader:
        return reader.rows("launches")


async def test_a_prep_then_a_probe_child_through_the_template(run: Run) -> None:
    seen: dict[str, object] = {}
    async with running_template(run.journal, run.epoch, policy=FAST) as template:
        assert template.alive
        (template_row,) = launches(run)
        assert (template_row["kind"], template_row["slot"]) == (TEMPLATE_KIND, TEMPLATE_SLOT)
        assert template_row["pgid"] == template_row["pid"] and template_row["exited_ns"] is None
        prep = make_assignment(run, kind="prep")
        async with supervise(run.journal, prep, policy=FAST, template=template) as handle:
            pid = handle.identity.pid
            entry = read_entry(pid)
            assert entry is not None
            # Its own session and group, the controller's own (registered) child.
            assert (entry.pgid, entry.sid, entry.ppid) == (pid, pid, os.getpid())
            assert pid != template_row["pid"] and pid in DIRECT_CHILDREN
            assert isinstance(handle.process, AdoptedProcess)
            # /proc shows a forked process the environment it was exec'd with: the
            # template's (and its marker); the launch marker is in its os.environ only.
            seen["proc_marker"] = marker_of(pid)
            # Hello comes only after verify_parent and verify_lease passed in the child.
            await handle.accept_hello(welcome(), timeout=10)
            prepared = await handle.channel.receive(timeout=10)
            assert isinstance(prepared, Prepared)
            await handle.acknowledge_done()
        exit_ = await handle.close()
        assert exit_.status == 0 and exit_.containment is None
        assert pid not in DIRECT_CHILDREN
        snapshot = SnapshotRef(path=os.path.join(prep.slot_dir, SNAPSHOT_FILE),
                               digest=prepared.snapshot_digest)
        probe = make_assignment(run, kind="probe", slot="s0002", snapshot=snapshot)
        async with supervise(run.journal, probe, policy=FAST, template=template) as handle:
            await handle.accept_hello(welcome(), timeout=10)
            ready = await handle.accept_ready(timeout=10)
            terminal = await handle.channel.receive(timeout=10)
            assert isinstance(terminal, Terminal)
            await handle.acknowledge_done()
        exit_ = await handle.close()
        assert exit_.status == 0 and exit_.containment is None
        assert ready.arrival_digest == snapshot.digest
        assert terminal.status is TerminalStatus.ANSWERED and terminal.answer == BUILTIN_ANSWER
        assert terminal.witness == hashlib.sha256(
            b"efold-builtin-witness-v1\0" + snapshot.digest.encode()).hexdigest()
        assert template.alive
    rows = launches(run)
    assert [(r["kind"], r["exit_status"]) for r in rows] == [
        ("template", 0), ("prep", 0), ("probe", 0)]
    assert all(r["pgid"] == r["pid"] for r in rows)
    assert len({r["pid"] for r in rows}) == 3
    assert len({r["marker"] for r in rows}) == 3
    assert seen["proc_marker"] == rows[0]["marker"]  # the template's, see above
    assert template_row["pid"] not in DIRECT_CHILDREN
    with JournalReader(run.run_dir) as reader:
        assert reader.rows("containments") == [] and reader.rows("signals") == []


async def test_launches_fall_back_to_spawns_once_the_template_is_killed(run: Run) -> None:
    kinds: list[str] = []
    async with running_template(run.journal, run.epoch, policy=FAST) as template:
        for n in range(2):
            a = make_assignment(run, kind="prep", slot=f"s000{n}")
            async with supervise(run.journal, a, policy=FAST, template=template) as handle:
                kinds.append(type(handle.process).__name__)
                await handle.accept_hello(welcome(), timeout=10)
                assert isinstance(await handle.channel.receive(timeout=10), Prepared)
                await handle.acknowledge_done()
            exit_ = await handle.close()
            assert exit_.status == 0 and exit_.containment is None
            if n == 0:  # between the two launches: the template dies
                pid = launches(run)[0]["pid"]
                fd = os.pidfd_open(pid)
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    with anyio.fail_after(10):
                        await anyio.wait_readable(fd)
                finally:
                    os.close(fd)
                assert template.alive  # nobody noticed yet
        assert not template.alive
    assert kinds == ["AdoptedProcess", "Process"]  # the second one spawned
    rows = launches(run)
    assert [(r["kind"], r["exit_status"]) for r in rows] == [
        ("template", -signal.SIGKILL), ("prep", 0), ("prep", 0)]


async def _a_dead_template_means_a_spawn(run: Run, program: list[str]) -> list[int]:
    """Start a template with ``program``, which must never become ready; one prep launch
    through it must spawn and complete. Returns the exit statuses of both launches."""
    async with running_template(run.journal, run.epoch, program=program, policy=FAST,
                                ready_timeout=5) as template:
        assert template.alive  # not known yet: the first launch waits for its readiness
        a = make_assignment(run, kind="prep")
        async with supervise(run.journal, a, policy=FAST, template=template) as handle:
            assert not isinstance(handle.process, AdoptedProcess)
            assert not template.alive
            await handle.accept_hello(welcome(), timeout=10)
            assert isinstance(await handle.channel.receive(timeout=10), Prepared)
            await handle.acknowledge_done()
        assert (await handle.close()).status == 0
    rows = [(r["kind"], r["exit_status"]) for r in launches(run)]
    assert [kind for kind, _ in rows] == ["template", "prep"]
    return [status for _, status in rows]


async def test_a_template_that_never_gets_ready_means_spawns(run: Run) -> None:
    program = [sys.executable, "-I", "-c", "import sys; sys.exit(3)"]  # ignores its argv
    assert await _a_dead_template_means_a_spawn(run, program) == [3, 0]


async def test_a_template_with_a_thread_refuses_to_fork(run: Run) -> None:
    # fork() copies only the calling thread: a template with another thread (here one
    # started before its main) exits instead of serving, and the launch spawns.
    program = [sys.executable, "-I", "-c",
               "import sys, threading, time\n"
               "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
               "from efold.worker import template\n"
               "sys.exit(template.main(sys.argv[1:]))"]
    assert await _a_dead_template_means_a_spawn(run, program) == [
        exit_status_for(Code.LAUNCH_FAILED), 0]


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD), without reading them."""
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int.from_bytes(buf, sys.byteorder)


def test_the_template_never_reads_a_relayed_key_pipe() -> None:
    """Driven by hand over its wire: the template forks for a request, and the key pipe
    it relayed still holds every byte; unreleased, the grandchild exits untouched and
    the bytes are still there once both are gone."""
    become_subreaper()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = {"PATH": os.defpath, MARKER_VAR: "a" * 32}
    template = subprocess.Popen(
        [sys.executable, "-I", "-m", "efold.worker.template", "--control-fd",
         str(theirs.fileno())], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    theirs.close()
    key_read, key_write = os.pipe()
    secret = b"k" * 100
    os.write(key_write, secret)
    os.close(key_write)
    ipc_ours, ipc_theirs = socket.socketpair()
    grandchild = None
    try:
        ours.settimeout(20)
        assert isinstance(FROM_TEMPLATE.decode(ours.recv(1024)), TemplateReady)
        request = ForkRequest(kind="prep", marker="b" * 32, roles=("ipc", "key"))
        socket.send_fds(ours, [ENCODER.encode(request)], [ipc_theirs.fileno(), key_read])
        forked = FROM_TEMPLATE.decode(ours.recv(1024))
        assert isinstance(forked, Forked) and forked.pid != template.pid
        grandchild = forked.pid
        entry = read_entry(grandchild)
        assert entry is not None and entry.pgid == grandchild and entry.sid == grandchild
        assert _pending(key_read) == len(secret)  # forked: nobody read a byte
        ours.close()  # no Release: the template leaves, the grandchild is never released
        assert template.wait(timeout=20) == 0
        assert wait_until(lambda: (e := read_entry(grandchild)) is None or e.exited)
        assert _pending(key_read) == len(secret)  # still nobody
        assert os.read(key_read, 1000) == secret
    finally:
        if template.poll() is None:
            template.kill()
            template.wait()
        if grandchild is not None:
            try:
                os.waitpid(grandchild, 0)  # our adopted zombie (we are a subreaper)
            except ChildProcessError:
                pass
        os.close(key_read)
        ipc_ours.close()
        ipc_theirs.close()
        ours.close()


def test_the_wire_names_the_launch_marker_like_the_controller() -> None:
    assert LAUNCH_MARKER_VAR == MARKER_VAR


def test_the_template_starts_no_thread_and_imports_the_bodies() -> None:
    code = ("import sys, threading\n"
            "from efold.worker import template\n"
            "template.preload()\n"
            "assert threading.active_count() == 1, threading.enumerate()\n"
            "wanted = ['efold.worker.entry', 'efold.worker.builtin', 'efold.worker.reader',"
            " 'efold.worker.prep', 'efold.worker.boundary_body']\n"
            "missing = [m for m in wanted if m not in sys.modules]\n"
            "assert not missing, missing\n")
    start = time.monotonic()
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60)
    assert time.monotonic() - start < 60


def test_a_worker_finds_every_lazy_export_already_resolved() -> None:
    # Each worker would otherwise open and parse its package's __init__ file again for
    # the first lazy name it imports (``from efold.guard import HISTORY_TOOLS``).
    code = ("import builtins, io, os, sys\n"
            "from efold.worker import template\n"
            "template.preload('faux')\n"
            "opened = []\n"
            "real_open = io.open\n"
            "def spy(file, *a, **k):\n"
            "    opened.append(str(file))\n"
            "    return real_open(file, *a, **k)\n"
            "builtins.open = io.open = spy\n"
            "from efold.guard import HISTORY_TOOLS, Guard\n"
            "from efold.folds import Meter\n"
            "from efold.registry import JournalReader\n"
            "from efold.corpus import SuiteItem\n"
            "print(opened)\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60,
                          capture_output=True, text=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("routes", "client", "tls"), [
    ("faux", False, False), ("local", True, False), ("real", True, True)])
def test_the_template_preloads_only_what_its_routes_use(routes: str, client: bool,
                                                         tls: bool) -> None:
    # A faux run's workers send nothing: no HTTP client, no CA store loaded for them.
    code = ("import sys\n"
            "from efold.worker import template\n"
            "from efold.guard.wire import http\n"
            f"template.preload({routes!r})\n"
            "print('httpx' in sys.modules, http._https_context is not None)\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60,
                          capture_output=True, text=True)
    assert done.stdout.split() == [str(client), str(tls)]


def test_reap_contains_a_template_run_whose_controller_was_killed(tmp_path: Path) -> None:
    """The template is a journaled launch like any other: after the controller died,
    recover reports what it left (and tolerates the ``template`` kind) and reap contains
    the template, its worker and the worker's SIGTERM-ignoring grandchild."""
    controller = subprocess.Popen(
        [sys.executable, str(PROGRAMS / "controller_template_script.py"), str(tmp_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    run_dir = str(tmp_path / "run")
    ready = tmp_path / "ready.json"
    rows: list[dict] = []  # type: ignore[type-arg]
    grandchild: dict[str, int] = {}
    try:
        assert wait_until(ready.exists, timeout=30), controller.stderr
        pids = json.loads(ready.read_text())
        grandchild = {"pid": pids["grandchild"],
                      "start_time": identity_of(pids["grandchild"]).start_time}
        controller.kill()
        controller.wait()
        with JournalReader(run_dir) as reader:
            rows = reader.rows("launches")
        assert [r["kind"] for r in rows] == ["template", "prep"]
        assert rows[1]["pid"] == pids["leader"]
        assert alive(grandchild["pid"], grandchild["start_time"])
        observed = observe(run_dir)
        assert not observed.reconciled
        assert [launch.kind for launch in observed.launches] == ["template", "prep"]
        report = reap(run_dir, policy=FAST)
        assert report.reconciled, report
        assert not alive(grandchild["pid"], grandchild["start_time"])
        for row in rows:
            assert not alive(row["pid"], row["start_time"])
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        for row in rows:
            kill_proven(row["pid"], row["start_time"])
        if grandchild:
            kill_proven(grandchild["pid"], grandchild["start_time"])


def test_aggregate_leaves_the_template_out_of_the_slot_facts(tmp_path: Path) -> None:
    """A ``template`` launch (with a containment episode) in a finished run's journal:
    the report's launch facts stay the slots' and the run still aggregates complete."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pilot"))
    from click.testing import CliRunner
    from efold_pilot_kit import small_registration

    from efold.controller.cli import main
    from efold.controller.pilot.pilot import run_pilot
    from efold.controller.rundirs.aggregate import read_run
    from efold.controller.rundirs.runroot import claim_run_dir
    from efold.report import decode_results

    reg, raw = small_registration()
    run = claim_run_dir(tmp_path / "run")
    assert run_pilot(reg, raw, run).stop_code is None
    conn = sqlite3.connect(run / "journal.sqlite")
    with conn:
        (epoch, pid, start, boot), = conn.execute(
            "SELECT epoch, pid, start_time, boot_id FROM launches LIMIT 1").fetchall()
        cursor = conn.execute(
            "INSERT INTO launches (epoch, slot, kind, pid, start_time, boot_id, pgid,"
            " launched_ns, exited_ns, exit_status, marker)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, 1, 2, 0, ?)",
            (epoch, TEMPLATE_SLOT, TEMPLATE_KIND, pid, start, boot, pid, "c" * 32))
        conn.execute("INSERT INTO containments (launch_id, cause, started_ns, finished_ns,"
                     " result) VALUES (?, 'worker_timeout', 1, 2, 'contained')",
                     (cursor.lastrowid,))
    conn.close()
    view = read_run(run)
    assert {launch.kind for launch in view.facts.launches} == {"prep", "probe"}
    assert view.facts.containments == []
    result = CliRunner().invoke(main, ["aggregate", str(run), "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    status = decode_results(result.stdout.encode()).status
    assert status is not None and status.verdict == "complete" and status.containments == []


async def test_a_credential_is_relayed_to_the_forked_child(run: Run) -> None:
    secret = b"tok-" + os.urandom(8).hex().encode()
    templated = [sys.executable, str(PROGRAMS / "template_child.py"), "credential_read"]
    async with running_template(run.journal, run.epoch, program=templated,
                                policy=FAST) as template:
        a = make_assignment(run, kind="prep")
        async with supervise(run.journal, a, policy=FAST, template=template,
                             credential=secret) as handle:
            assert isinstance(handle.process, AdoptedProcess)
            await handle.accept_hello(welcome(), timeout=10)
            prepared = await handle.channel.receive(timeout=10)
            assert isinstance(prepared, Prepared)
            await handle.acknowledge_done()
        assert (await handle.close()).status == 0
    assert handle.credential is not None and handle.credential.delivered
    assert prepared.snapshot_digest == hashlib.sha256(secret).hexdigest()


async def test_what_a_forked_worker_execs_carries_the_launch_marker(run: Run) -> None:
    """The launch marker is in the grandchild's os.environ: an exec'd descendant shows it
    in /proc (membership rule 5 finds it), and containment takes it down."""
    templated = [sys.executable, str(PROGRAMS / "template_child.py"), "exec_sleeper"]
    async with running_template(run.journal, run.epoch, program=templated,
                                policy=FAST) as template:
        a = make_assignment(run, kind="prep")
        handle = await launch_worker(run.journal, a, template=template)
        try:
            await handle.accept_hello(welcome(), timeout=10)
            assert isinstance(await handle.channel.receive(timeout=10), Prepared)
            with open(os.path.join(a.slot_dir, "tree.pids")) as f:
                sleeper = identity_of(json.load(f)["sleeper"])
            # Popen may return (vfork) before the kernel has laid out the new environ.
            marker = handle.marker
            assert marker is not None
            assert wait_until(lambda: marker_of(sleeper.pid) == marker, timeout=5)
            result = await handle.contain(Code.LOOKUP_STOPPED, policy=FAST)
            assert sleeper.pid in {m.identity.pid for m in result.members}
            assert not alive(sleeper.pid, sleeper.start_time)
        finally:
            await handle.close(policy=FAST)


async def test_forked_workers_share_no_random_state_and_no_intermediate(run: Run) -> None:
    """Each worker is forked straight from the template as the controller's child
    (``CLONE_PARENT``: no intermediate to reap) and draws its own values from ``random``
    and from OpenSSL's generator, although it copies the template's memory."""
    templated = [sys.executable, str(PROGRAMS / "template_child.py"), "entropy"]
    drawn = []
    async with running_template(run.journal, run.epoch, program=templated,
                                policy=FAST) as template:
        # The template touches OpenSSL's generator before any fork: every worker then
        # copies a seeded state.
        for n in range(3):
            a = make_assignment(run, kind="prep", slot=f"s{n:04d}")
            async with supervise(run.journal, a, policy=FAST, template=template) as handle:
                assert isinstance(handle.process, AdoptedProcess)
                await handle.accept_hello(welcome(), timeout=10)
                assert isinstance(await handle.channel.receive(timeout=10), Prepared)
                await handle.acknowledge_done()
            assert (await handle.close()).status == 0
            with open(os.path.join(a.slot_dir, "entropy.json")) as f:
                drawn.append(json.load(f))
        template_pid = template.identity.pid
        # The template never had a child to wait for.
        with open(f"/proc/{template_pid}/task/{template_pid}/children") as f:
            assert f.read().split() == []
    assert {d["ppid"] for d in drawn} == {os.getpid()}
    assert len({d["random"] for d in drawn}) == 3
    assert len({d["ssl"] for d in drawn}) == 3


async def test_a_fork_answered_too_late_is_killed_with_its_template(run: Run) -> None:
    """A template that answers after the exchange's timeout has forked a worker that is
    the controller's child and unregistered: left alive, a later scan would take it for
    an orphan of another launch. The failure ends the template and kills that fork
    before the launch goes on (and spawns)."""
    templated = [sys.executable, str(PROGRAMS / "template_child.py"), "slow_forked"]
    async with running_template(run.journal, run.epoch, program=templated, policy=FAST,
                                exchange_timeout=1.0) as template:
        a = make_assignment(run, kind="prep")
        async with supervise(run.journal, a, policy=FAST, template=template) as handle:
            assert not isinstance(handle.process, AdoptedProcess)  # spawned instead
            assert not template.alive
            # Nothing the template forked is alive: it is dead, and so is its fork.
            template_marker = launches(run)[0]["marker"]
            forks = [pid for pid, found in markers_by_process(scan()).items()
                     if found == template_marker and pid != template.identity.pid]
            assert forks == []
            assert read_entry(template.identity.pid) is None \
                or read_entry(template.identity.pid).exited  # type: ignore[union-attr]
            await handle.accept_hello(welcome(), timeout=10)
            assert isinstance(await handle.channel.receive(timeout=10), Prepared)
            await handle.acknowledge_done()
        exit_ = await handle.close()
        assert exit_.status == 0 and exit_.containment is None
    with JournalReader(run.run_dir) as reader:
        assert reader.rows("containments") == []


def test_only_the_fork_holding_the_requests_socket_is_believed() -> None:
    """``_forked_by``: the controller's unregistered child holding the request's IPC
    socket at its place, and nothing else (not a registered worker, not a process
    holding another socket)."""
    become_subreaper()
    mine, relayed = socket.socketpair()
    other, _ = socket.socketpair()
    code = "import os, sys, time; os.dup2(int(sys.argv[1]), 3); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code, str(relayed.fileno())],
                             pass_fds=[relayed.fileno()])
    try:
        assert wait_until(lambda: _socket_at(child.pid, 3) is not None)
        me = identity_of(os.getpid())
        since = ProcessIdentity(pid=me.pid, start_time=0, boot_id=me.boot_id)
        ino = os.fstat(relayed.fileno()).st_ino
        assert _forked_by(child.pid, since, ino)
        assert not _forked_by(child.pid, since, os.fstat(other.fileno()).st_ino)
        DIRECT_CHILDREN.add(identity_of(child.pid))  # a worker already launched
        assert not _forked_by(child.pid, since, ino)
    finally:
        DIRECT_CHILDREN.discard(child.pid)
        child.kill()
        child.wait()
        for s in (mine, relayed, other):
            s.close()
