"""Membership by cgroup v2 (controller/processes/cgroups.py, controller/processes/cgroup_mount.py): real
processes in real cgroups, every verdict checked from /proc, never from our own records.

The cgroup tests skip, saying why, only where this process has no writable cgroup2 (the
``pids.max`` test also where the pids controller is not offered to cgroup2: on a hybrid
host it may be bound to its v1 hierarchy). Every cgroup a test creates is killed and
removed by its fixture's finalizer, with raw file operations that do not depend on the
module under test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from as_user import NOBODY, ordinary_python

from efold.controller.errors import ControllerError
from efold.controller.processes.cgroup_mount import (
    Cgroup2,
    NoCgroup2,
    find_cgroup2,
    open_below,
    parse_cgroup2_mount,
    parse_own_cgroup,
)
from efold.controller.processes.cgroups import RunCgroup, cgroup_of, start_time
from efold.errors import Code

FOUND = find_cgroup2()
needs_cgroup2 = pytest.mark.skipif(
    isinstance(FOUND, NoCgroup2),
    reason=f"no writable cgroup2: {getattr(FOUND, 'reason', '')}")

# A hostile launch: held on stdin until placed, then two escapees, each leaving its
# session and group (setsid), double-forking, clearing its environment and exec'ing
# under another name (os.execve with argv[0] changed; bash's ``exec -a``), the second
# ignoring SIGTERM. Says "ready" once both have exec'd (a close-on-exec pipe's EOF).
HOSTILE = textwrap.dedent("""
    import os, signal, sys, time
    marker = sys.argv[1]
    sys.stdin.readline()
    r, w = os.pipe()
    a = os.fork()
    if a == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sleep", [marker + "-renamed", "60"], {})
        os._exit(0)
    os.waitpid(a, 0)
    c = os.fork()
    if c == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.execve("/bin/bash", ["bash", "-c", "exec -a " + marker + "-stubborn /bin/sleep 60"], {})
        os._exit(0)
    os.waitpid(c, 0)
    os.close(w)
    os.read(r, 1)
    print("ready", flush=True)
    time.sleep(60)
""")


def _alive_with(marker: str) -> dict[int, str]:
    """pid -> argv[0] of every live (not zombie) process whose command line holds
    ``marker``, read from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        state = stat[stat.rindex(b")") + 2:].split()[0]
        if marker.encode() in cmdline and state != b"Z":
            found[int(entry)] = cmdline.split(b"\0")[0].decode()
    return found


def _await_escapees(marker: str) -> dict[int, str]:
    """The marked processes once both escapees run under their new names (bash's own
    exec of sleep follows the ready signal by a moment)."""
    deadline = time.monotonic() + 5
    while True:
        alive = _alive_with(marker)
        names = sorted(alive.values())
        if names.count(f"{marker}-renamed") == 1 and names.count(f"{marker}-stubborn") == 1:
            return alive
        assert time.monotonic() < deadline, names
        time.sleep(0.01)


def _raw_cleanup(path: str) -> None:
    """Kill and remove a cgroup tree with plain file operations (finalizers)."""
    if not os.path.isdir(path):
        return
    Path(path, "cgroup.kill").write_text("1")
    deadline = time.monotonic() + 10
    while "populated 1" in Path(path, "cgroup.events").read_text():
        assert time.monotonic() < deadline, f"{path} stays populated"
        time.sleep(0.01)
    for root, dirs, _ in os.walk(path, topdown=False):
        for d in dirs:
            os.rmdir(os.path.join(root, d))
    os.rmdir(path)


def _run_path(run_id: str) -> str:
    assert isinstance(FOUND, Cgroup2)
    return os.path.join(FOUND.own_path, f"efold-{run_id}")


@pytest.fixture
def run_id() -> Iterator[str]:
    """A fresh run id; its cgroup, if anything created it, is gone afterwards."""
    rid = f"test-{uuid.uuid4().hex[:12]}"
    yield rid
    _raw_cleanup(_run_path(rid))


@pytest.fixture
def run(run_id: str) -> Iterator[RunCgroup]:
    assert isinstance(FOUND, Cgroup2)
    with RunCgroup.create(FOUND, run_id) as created:
        yield created


def _held(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A child held on its stdin (it reads a line before it does anything)."""
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)


@needs_cgroup2
def test_escapees_stay_members_and_die_with_the_cgroup(run: RunCgroup) -> None:
    marker = f"efold-escapee-{uuid.uuid4().hex[:8]}"
    launch = run.launch_cgroup("hostile")
    leader = _held([sys.executable, "-c", HOSTILE, marker],
                   env={**os.environ, "EFOLD_TEST_LAUNCH": marker})
    assert leader.stdin is not None and leader.stdout is not None
    launch.place(leader.pid)  # before it runs anything of its own
    leader.stdin.write("go\n")
    leader.stdin.flush()
    assert leader.stdout.readline() == "ready\n"
    assert b"EFOLD_TEST_LAUNCH=" in Path(f"/proc/{leader.pid}/environ").read_bytes()
    alive = _await_escapees(marker)
    assert len(alive) == 3 and leader.pid in alive
    escapees = [pid for pid in alive if pid != leader.pid]
    for pid in escapees:  # they did escape everything but the cgroup
        assert os.getsid(pid) != os.getsid(leader.pid)
        assert os.getpgid(pid) != os.getpgid(leader.pid)
        # the launch marker of today's containment is gone with the environment
        assert b"EFOLD_TEST_LAUNCH=" not in Path(f"/proc/{pid}/environ").read_bytes()
        assert cgroup_of(pid) == launch.rel
    stubborn = next(p for p, name in alive.items() if name.endswith("-stubborn"))
    sig_ign = int(next(line for line in Path(f"/proc/{stubborn}/status").read_text().splitlines()
                       if line.startswith("SigIgn:")).split()[1], 16)
    assert sig_ign & (1 << (signal.SIGTERM - 1))

    members = launch.members()
    assert {m.pid for m in members} == set(alive)
    assert all(m.start_time == start_time(m.pid) for m in members)
    assert {m.pid for m in run.members()} == set(alive)  # the run sees its launches' members

    assert launch.freeze(timeout=2.0)
    assert launch.events()["frozen"] == 1
    assert {m.pid for m in launch.members()} == set(alive)
    launch.kill()
    assert launch.wait_empty(timeout=5.0)
    assert leader.wait(timeout=5) == -signal.SIGKILL
    assert _alive_with(marker) == {}
    launch_path = launch.path
    launch.remove()
    assert not os.path.exists(launch_path)
    run_path = run.path
    run.remove()
    assert not os.path.exists(run_path)


PLACER = textwrap.dedent("""
    import os, subprocess, sys, time
    from efold.controller.processes.cgroup_mount import find_cgroup2
    from efold.controller.processes.cgroups import RunCgroup
    run = RunCgroup.create(find_cgroup2(), sys.argv[1])
    launch = run.launch_cgroup("fold")
    leader = subprocess.Popen([sys.executable, "-c", sys.argv[2], os.environ["MARK"]],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    launch.place(leader.pid)
    leader.stdin.write("go\\n"); leader.stdin.flush()
    assert leader.stdout.readline() == "ready\\n"
    print(run.path, flush=True)
    time.sleep(60)
""")

RECOVER = textwrap.dedent("""
    import json, sys
    from efold.controller.processes.cgroup_mount import find_cgroup2
    from efold.controller.processes.cgroups import RunCgroup
    run = RunCgroup.open_path(find_cgroup2(), sys.argv[1])
    seen = sorted(m.pid for m in run.members())
    frozen = run.freeze()
    run.kill()
    empty = run.wait_empty(5.0)
    run.remove()
    print(json.dumps({"seen": seen, "frozen": frozen, "empty": empty}))
""")


@needs_cgroup2
def test_a_new_process_finds_the_survivors_of_a_killed_placer(run_id: str) -> None:
    marker = f"efold-survivor-{uuid.uuid4().hex[:8]}"
    placer = subprocess.Popen([sys.executable, "-c", PLACER, run_id, HOSTILE],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "MARK": marker})
    assert placer.stdout is not None
    path = placer.stdout.readline().strip()
    assert path == _run_path(run_id)
    placer.kill()
    placer.wait(timeout=5)
    survivors = _await_escapees(marker)
    assert len(survivors) == 3  # the orphaned leader and both escapees
    assert all(os.getppid() != pid for pid in survivors)

    done = subprocess.run([sys.executable, "-c", RECOVER, path], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict == {"seen": sorted(survivors), "frozen": True, "empty": True}
    assert _alive_with(marker) == {}
    assert not os.path.exists(path)


@needs_cgroup2
def test_remove_refuses_a_populated_cgroup_and_wait_empty_is_bounded(run: RunCgroup) -> None:
    launch = run.launch_cgroup("busy")
    sleeper = _held(["/bin/sleep", "30"])
    launch.place(sleeper.pid)
    with pytest.raises(ControllerError) as refused:
        run.remove()
    assert refused.value.code is Code.CGROUP_NOT_EMPTY
    assert os.path.isdir(launch.path) and launch.events()["populated"] == 1
    started = time.monotonic()
    assert launch.wait_empty(timeout=0.3) is False
    assert 0.3 <= time.monotonic() - started < 1.5
    assert launch.freeze() and launch.thaw()
    assert launch.events()["frozen"] == 0
    launch.kill()
    assert launch.wait_empty(timeout=5.0)
    sleeper.wait(timeout=5)
    run.remove()
    assert not os.path.exists(launch.path)


@needs_cgroup2
def test_place_proves_membership_and_refuses_a_gone_process(run: RunCgroup) -> None:
    launch = run.launch_cgroup("one")
    gone = subprocess.Popen(["/bin/true"])
    gone.wait()
    with pytest.raises(ControllerError) as refused:
        launch.place(gone.pid)
    assert refused.value.code is Code.CGROUP_PLACE_UNVERIFIED
    assert launch.members() == []


@needs_cgroup2
def test_ids_paths_and_duplicates_are_refused_with_codes(run: RunCgroup, run_id: str,
                                                         tmp_path: Path) -> None:
    assert isinstance(FOUND, Cgroup2)
    for bad in ("../x", "a/b", "", ".hidden", "x" * 201):
        with pytest.raises(ControllerError) as refused:
            run.launch_cgroup(bad)
        assert refused.value.code is Code.CGROUP_ARGUMENT_INVALID
        with pytest.raises(ControllerError) as refused:
            RunCgroup.create(FOUND, bad)
        assert refused.value.code is Code.CGROUP_ARGUMENT_INVALID
    run.launch_cgroup("x" * 200).close()  # the longest opaque id is a valid name
    with pytest.raises(ControllerError) as refused:
        RunCgroup.create(FOUND, run_id)
    assert refused.value.code is Code.CGROUP_EXISTS
    with pytest.raises(ControllerError) as refused:
        RunCgroup.open(FOUND, f"absent-{uuid.uuid4().hex[:8]}")
    assert refused.value.code is Code.CGROUP_NOT_FOUND
    for outside in ("/tmp/efold-x", f"{FOUND.own_path}/other-{run_id}",
                    f"{run.path}/launch-x"):
        with pytest.raises(ControllerError) as refused:
            RunCgroup.open_path(FOUND, outside)
        assert refused.value.code is Code.CGROUP_PATH_REFUSED
    with RunCgroup.open_path(FOUND, run.path) as again:
        assert again.rel == run.rel
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for rel in ("link", "real/../real"):
        with pytest.raises(ControllerError) as refused:
            open_below(str(tmp_path), rel)
        assert refused.value.code is Code.CGROUP_PATH_REFUSED
    os.close(open_below(str(tmp_path), "real"))
    with pytest.raises(ControllerError) as refused:
        run.launch_cgroup("pids").set_pids_max(0)
    assert refused.value.code is Code.CGROUP_ARGUMENT_INVALID


@needs_cgroup2
def test_pids_max_without_the_controller_says_so(run: RunCgroup) -> None:
    if run.pids_unavailable is None:
        pytest.skip("the pids controller is available here (test_fork_burst covers it)")
    assert "pids" in run.pids_unavailable
    with run.launch_cgroup("bounded") as launch:
        with pytest.raises(ControllerError) as refused:
            launch.set_pids_max(4)
    assert refused.value.code is Code.CGROUP_CONTROLLER_UNAVAILABLE


BURST = textwrap.dedent("""
    import os, sys, time
    sys.stdin.readline()
    made = 0
    while made < 50:
        try:
            pid = os.fork()
        except BlockingIOError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        made += 1
    print(made, flush=True)
    time.sleep(30)
""")


@needs_cgroup2
def test_fork_burst_beyond_pids_max_fails_inside_the_child(run: RunCgroup) -> None:
    if run.pids_unavailable is not None:
        pytest.skip(f"pids.max cannot be set here: {run.pids_unavailable}")
    launch = run.launch_cgroup("burst")
    launch.set_pids_max(4)
    child = _held([sys.executable, "-c", BURST])
    assert child.stdin is not None and child.stdout is not None
    launch.place(child.pid)
    child.stdin.write("go\n")
    child.stdin.flush()
    # Exactly 4 processes may exist: the child and 3 forks; the 4th fork gets EAGAIN.
    assert child.stdout.readline() == "3\n"
    assert len(launch.members()) == 4
    assert launch.events()["populated"] == 1 and child.poll() is None
    launch.kill()
    assert launch.wait_empty(timeout=5.0)
    child.wait(timeout=5)


HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_ONLY = "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
READ_ONLY = "30 23 0:27 / /sys/fs/cgroup ro,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
SUBTREE = ("30 23 0:27 /user.slice/u /mnt/my\\040cg rw,nosuid shared:9 master:3 - "
           "cgroup2 cgroup2 rw\n")


def test_parsing_finds_the_mount_or_says_why_not() -> None:
    assert parse_cgroup2_mount(HYBRID, "/") == Cgroup2("/sys/fs/cgroup/unified", "/")
    assert parse_cgroup2_mount(SUBTREE, "/user.slice/u/app") == Cgroup2("/mnt/my cg", "/app")
    assert parse_cgroup2_mount(SUBTREE, "/user.slice/u") == Cgroup2("/mnt/my cg", "/")
    # one character past the mount's root is another cgroup, not inside it
    assert isinstance(parse_cgroup2_mount(SUBTREE, "/user.slice/ux"), NoCgroup2)
    no_v2 = parse_cgroup2_mount(V1_ONLY, "/")
    assert isinstance(no_v2, NoCgroup2) and "no cgroup2" in no_v2.reason
    ro = parse_cgroup2_mount(READ_ONLY, "/")
    assert isinstance(ro, NoCgroup2) and "read-only" in ro.reason
    assert ro.mode == "process-group"
    assert parse_own_cgroup("1:name=systemd:/\n0::/a/b\n") == "/a/b"
    missing = parse_own_cgroup("1:name=systemd:/\n")
    assert isinstance(missing, NoCgroup2) and "no 0::" in missing.reason
    outside = parse_own_cgroup("0::/../../x\n")
    assert isinstance(outside, NoCgroup2) and "outside" in outside.reason


def test_find_cgroup2_falls_back_with_a_reason(tmp_path: Path) -> None:
    ro = find_cgroup2(mountinfo=READ_ONLY, proc_cgroup="0::/\n")
    assert isinstance(ro, NoCgroup2) and "read-only" in ro.reason
    assert find_cgroup2(mountinfo=V1_ONLY, proc_cgroup="0::/\n") == NoCgroup2(
        "no cgroup2 file system is mounted here (cgroup v1 only)")
    # a "cgroup2" that is a plain directory: a child can be made, but it has no cgroup.kill
    fake = f"41 31 0:38 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n"
    plain = find_cgroup2(mountinfo=fake, proc_cgroup="0::/\n")
    assert isinstance(plain, NoCgroup2) and "cgroup.kill" in plain.reason
    assert list(tmp_path.iterdir()) == []  # the probe child is gone


PROBE = ("from efold.controller.processes.cgroup_mount import find_cgroup2; f = find_cgroup2(); "
         "print(f.mode, getattr(f, 'reason', ''))")


@needs_cgroup2
def test_an_ordinary_user_gets_the_fallback_not_an_error() -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: this process is the ordinary user (covered above)")
    with ordinary_python() as python:
        if python is None:
            pytest.skip("no interpreter the ordinary user can run")
        done = subprocess.run([python, "-c", PROBE], user=NOBODY, group=NOBODY,
                              extra_groups=[], umask=0o002, capture_output=True, text=True,
                              timeout=60, cwd="/", check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("process-group cannot create a child of own cgroup")
    assert "EACCES" in done.stdout


DELEGATED = textwrap.dedent("""
    import json, os, subprocess, sys
    from efold.controller.processes.cgroup_mount import find_cgroup2
    from efold.controller.processes.cgroups import RunCgroup
    sys.stdin.readline()
    found = find_cgroup2()
    run = RunCgroup.create(found, "deleg")
    launch = run.launch_cgroup("one")
    sleeper = subprocess.Popen(["/bin/sleep", "30"])
    launch.place(sleeper.pid)
    seen = [m.pid for m in run.members()]
    frozen = launch.freeze()
    launch.kill()
    empty = launch.wait_empty(5.0)
    sleeper.wait()
    run.remove()
    print(json.dumps({"own": found.own, "uid": os.getuid(), "sleeper": sleeper.pid,
                      "seen": seen, "frozen": frozen, "empty": empty,
                      "left": [e.name for e in os.scandir(found.own_path) if e.is_dir()]}))
""")


@needs_cgroup2
def test_an_ordinary_user_in_a_delegated_cgroup_gets_cgroup_mode(run_id: str) -> None:
    """The operator's way in: a cgroup delegated to the user (as systemd's Delegate=yes
    does: the directory and its cgroup.procs, cgroup.threads, cgroup.subtree_control
    are the user's). As that user, with umask 002, the whole layer works below it."""
    if os.geteuid() != 0:
        pytest.skip("not root: cannot delegate a cgroup to another user here")
    delegated = _run_path(run_id)  # the fixture removes it whatever happens
    os.mkdir(delegated)
    for name in ("", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"):
        os.chown(os.path.join(delegated, name), NOBODY, NOBODY)
    with ordinary_python() as python:
        if python is None:
            pytest.skip("no interpreter the ordinary user can run")
        child = subprocess.Popen([python, "-c", DELEGATED], user=NOBODY, group=NOBODY,
                                 extra_groups=[], umask=0o002, cwd="/", text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        Path(delegated, "cgroup.procs").write_text(str(child.pid))
        out, err = child.communicate("go\n", timeout=60)
    assert child.returncode == 0, err
    verdict = json.loads(out)
    assert isinstance(FOUND, Cgroup2)
    assert verdict["own"] == f"{FOUND.own.rstrip('/')}/efold-{run_id}"
    assert verdict["uid"] == NOBODY
    assert verdict["seen"] == [verdict["sleeper"]]
    assert verdict["frozen"] is True and verdict["empty"] is True
    assert verdict["left"] == []  # its run cgroup removed, children first
