"""``efold.isolation`` in real processes, as root and as an ordinary user (umask 002):
after ``isolate`` a process writes only beneath its roots, reaches nothing outside its
own loopback, and where an isolation is unavailable it says why instead of failing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from as_user import USERS, drop, ordinary_python, workspace

from efold.isolation import (
    SIMULATE_VAR,
    WRITABLE_DEVICES,
    isolate,
    landlock_abi,
    write_rights,
)

CHILD = Path(__file__).resolve().parent / "isolated_child.py"
EACCES = f"refused errno {13}"


def host_address() -> str:
    """This host's own non-loopback address (the route's source address), else
    192.0.2.2."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return str(s.getsockname()[0])
        except OSError:
            return "192.0.2.2"


class Listener:
    """A TCP listener the test opens on every host address: counts what reaches it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.port = int(self.sock.getsockname()[1])

    def accepted(self) -> int:
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


@pytest.fixture
def listener() -> Iterator[Listener]:
    lis = Listener()
    try:
        yield lis
    finally:
        lis.sock.close()


@pytest.fixture(scope="module")
def python() -> Iterator[str | None]:
    with ordinary_python() as interpreter:
        yield interpreter


def run_child(python: str, user: str, root: Path, outside: Path, port: int,
              *extra: str, env: dict[str, str] | None = None) -> dict[str, object]:
    done = subprocess.run(
        [*drop(user), python, "-I", str(CHILD), str(root), str(outside), str(port),
         host_address(), *extra],
        capture_output=True, text=True, timeout=60, umask=0o002, cwd="/",
        env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _dirs(base: Path, user: str) -> tuple[Path, Path]:
    root, elsewhere = base / "root", base / "elsewhere"
    for d in (root, elsewhere):
        d.mkdir()
        d.chmod(0o775)
        if user == "nobody":
            os.chown(d, 65534, 65534)
    return root, elsewhere / "written"


@pytest.mark.parametrize("user", USERS)
def test_isolated_code_writes_only_its_roots_and_reaches_no_network(
        user: str, listener: Listener, python: str | None) -> None:
    if python is None:
        pytest.skip("no interpreter the ordinary user can run")
    assert not isinstance(landlock_abi(), str), "this project's machines have Landlock"
    with workspace(user) as base:
        root, outside = _dirs(base, user)
        got = run_child(python, user, root, outside, listener.port)
        assert got["isolation"] == {"network": "loopback-only",
                                    "writes": f"landlock-abi-{landlock_abi()}",
                                    "network_reason": None, "writes_reason": None}
        assert got["write_inside"] == "done" and (root / "inside").exists()
        assert got["mkdir_inside"] == "done"
        assert got["devnull"] == "done"
        assert got["write_outside"] == EACCES  # the same user may write there unrestricted
        assert not outside.exists()
        assert got["host_loopback"] == "refused errno 111"  # its own lo: nobody listens
        assert str(got["non_loopback"]).startswith("refused")
        assert str(got["host_address"]).startswith("refused")
        assert got["loopback_inside"] == "done"  # its own loopback works (proxies)
        # ABI 6+: scoped, so not even signal 0 reaches its parent (outside the domain;
        # for root the refusal is the scope's alone, the simulated test shows it allowed).
        assert got["signal_parent"] == "refused errno 1"
        assert listener.accepted() == 0
        # Unisolated, the same user reaches the listener and writes there: the refusals
        # above are the isolation's, not the test's permissions.
        reach = subprocess.run(
            [*drop(user), python, "-I", "-c",
             f"import socket; socket.create_connection(('127.0.0.1', {listener.port})).close();"
             f" open({str(outside)!r}, 'w').close()"], timeout=30, umask=0o002, check=False)
        assert reach.returncode == 0
        assert listener.accepted() == 1 and outside.exists()


@pytest.mark.parametrize("user", USERS)
def test_simulated_unavailability_is_reported_with_its_reason(
        user: str, listener: Listener, python: str | None) -> None:
    if python is None:
        pytest.skip("no interpreter the ordinary user can run")
    with workspace(user) as base:
        root, outside = _dirs(base, user)
        got = run_child(python, user, root, outside, listener.port,
                        env={SIMULATE_VAR: "network,writes"})
        iso = got["isolation"]
        assert iso == {"network": "host", "writes": "unrestricted",
                       "network_reason": "network namespace unavailable (simulated by "
                                         f"{SIMULATE_VAR})",
                       "writes_reason": f"Landlock unavailable (simulated by {SIMULATE_VAR})"}
        assert got["write_outside"] == "done"  # nothing restricted, as reported
        assert got["host_loopback"] == "done"
        assert got["host_address"] == "done"
        if user == "self":  # (nobody may never signal its parent, the root test)
            assert got["signal_parent"] == "done"
        assert listener.accepted() == 2


def test_a_multithreaded_ordinary_user_gets_no_user_namespace(
        listener: Listener, python: str | None) -> None:
    if "nobody" not in USERS or python is None:
        pytest.skip("needs root to drop to an ordinary user")
    with workspace("nobody") as base:
        root, outside = _dirs(base, "nobody")
        got = run_child(python, "nobody", root, outside, listener.port, "threads")
    iso = got["isolation"]
    assert isinstance(iso, dict)
    assert iso["network"] == "host"
    assert iso["network_reason"] == "a user namespace needs a single-threaded process"
    assert iso["writes"] != "unrestricted"  # Landlock does not need a single thread
    assert got["write_outside"] == EACCES


def test_a_missing_writable_root_is_a_reason_not_a_narrowing(tmp_path: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-I", "-c",
         "import sys; from efold.isolation import isolate;"
         f" i = isolate([{str(tmp_path / 'absent')!r}], network=False, network_reason='x');"
         " print(i.writes, '|', i.writes_reason, '|', i.network, '|', i.network_reason)"],
        capture_output=True, text=True, timeout=30, check=True)
    assert probe.stdout.strip() == (
        f"unrestricted | writable root {tmp_path / 'absent'} cannot be opened "
        "(ENOENT: No such file or directory) | host | x")


@pytest.mark.parametrize(("abi", "refer", "truncate", "ioctl_dev"), [
    (1, False, False, False), (2, True, False, False), (3, True, True, False),
    (4, True, True, False), (5, True, True, True), (7, True, True, True)])
def test_the_handled_rights_follow_the_abi(abi: int, refer: bool, truncate: bool,
                                           ioctl_dev: bool) -> None:
    rights = write_rights(abi)
    assert bool(rights & (1 << 13)) is refer
    assert bool(rights & (1 << 14)) is truncate
    assert bool(rights & (1 << 15)) is ioctl_dev
    assert rights & 0b1101 == 0  # execute, read file, read dir: never handled
    assert rights & (1 << 1)  # write file, always


def test_isolate_in_this_process_is_not_called() -> None:
    """The module is import-safe: importing it isolates nothing (pytest itself still
    writes its cache), and the devices it grants exist here."""
    assert callable(isolate)
    assert all(os.path.exists(d) for d in WRITABLE_DEVICES)
