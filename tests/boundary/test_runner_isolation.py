"""The boundary test runner's command runs isolated (``run_contained``): no network (a
namespace with only its own loopback) and writes only beneath its workspace copy and its
private ``TMPDIR``; as root and as an ordinary user (umask 002); where the kernel
refuses (simulated), the command still runs and the result says why."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from as_user import USERS, drop, ordinary_python, workspace

from efold.boundary.runner import run_contained
from efold.isolation import SIMULATE_VAR

SUITE = """
import json, os, socket, sys

def attempt(action):
    try:
        action()
    except OSError as exc:
        return f"refused errno {exc.errno}"
    return "done"

def write(path):
    with open(path, "w") as f:
        f.write("x")

def connect(host, port):
    socket.create_connection((host, port), timeout=2).close()

outside, port, host = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(json.dumps({
    "workspace": attempt(lambda: write("written-in-workspace")),
    "tmpdir": attempt(lambda: write(os.path.join(os.environ["TMPDIR"], "scratch"))),
    "outside": attempt(lambda: write(outside)),
    "loopback": attempt(lambda: connect("127.0.0.1", port)),
    "host_address": attempt(lambda: connect(host, port)),
    "non_loopback": attempt(lambda: connect("192.0.2.1", 80)),
}))
"""


def host_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this host has no non-loopback route")
        return str(s.getsockname()[0])


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def accepted(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def _layout(base: Path, user: str) -> tuple[Path, Path]:
    """(workspace copy with the suite, a file outside it in a directory the same user
    may write)."""
    ws, elsewhere = base / "ws", base / "elsewhere"
    for d in (ws, elsewhere):
        d.mkdir()
        d.chmod(0o775)
    (ws / "suite.py").write_text(SUITE)
    if user == "nobody":
        for p in (ws, elsewhere, ws / "suite.py"):
            os.chown(p, 65534, 65534)
    return ws, elsewhere / "planted"


RUNNER = """
import json, sys
from pathlib import Path
from efold.boundary.runner import run_contained
r = run_contained(["python", "suite.py", *sys.argv[2:]], Path(sys.argv[1]), timeout_s=60)
print(json.dumps({"exit": r.exit_code, "stdout": r.stdout,
                  "isolation": None if r.isolation is None else {
                      "network": r.isolation.network, "writes": r.isolation.writes,
                      "network_reason": r.isolation.network_reason,
                      "writes_reason": r.isolation.writes_reason}}))
"""


@pytest.fixture(scope="module")
def python() -> Iterator[str | None]:
    with ordinary_python() as interpreter:
        yield interpreter


@pytest.mark.parametrize("user", USERS)
def test_the_runner_writes_only_its_workspace_and_reaches_no_network(
        user: str, listener: socket.socket, python: str | None) -> None:
    if python is None:
        pytest.skip("no interpreter the ordinary user can run")
    with workspace(user) as base:
        ws, outside = _layout(base, user)
        # The runner itself runs as ``user`` (an ordinary one: the user-namespace path).
        done = subprocess.run(
            [*drop(user), python, "-I", "-c", RUNNER, str(ws), str(outside),
             str(listener.getsockname()[1]), host_address()],
            capture_output=True, text=True, timeout=120, umask=0o002, cwd="/")
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["exit"] == 0, got
        assert json.loads(got["stdout"]) == {
            "workspace": "done", "tmpdir": "done",
            "outside": "refused errno 13",
            "loopback": "refused errno 111", "host_address": "refused errno 101",
            "non_loopback": "refused errno 101"}
        assert got["isolation"]["network"] == "loopback-only"
        assert got["isolation"]["writes"].startswith("landlock-abi-")
        assert got["isolation"]["network_reason"] is None
        assert got["isolation"]["writes_reason"] is None
        assert (ws / "written-in-workspace").exists() and not outside.exists()
        assert accepted(listener) == 0


def test_where_isolation_is_refused_the_command_runs_and_says_why(
        tmp_path: Path, listener: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIMULATE_VAR, "network,writes")
    ws, outside = _layout(tmp_path, "self")
    result = run_contained(["python", "suite.py", str(outside),
                            str(listener.getsockname()[1]), host_address()],
                           ws, timeout_s=60)
    assert result.exit_code == 0, result.stdout
    got = json.loads(result.stdout)
    assert got["outside"] == "done" and got["loopback"] == "done"
    assert accepted(listener) == 2  # loopback and the host's address: nothing isolated
    assert result.isolation is not None
    assert result.isolation.network == "host" and result.isolation.writes == "unrestricted"
    assert result.isolation.network_reason == (
        f"network namespace unavailable (simulated by {SIMULATE_VAR})")
    assert result.isolation.writes_reason == (
        f"Landlock unavailable (simulated by {SIMULATE_VAR})")


def test_a_command_that_cannot_start_reports_no_isolation(tmp_path: Path) -> None:
    result = run_contained(["/nonexistent/tool"], tmp_path, timeout_s=5)
    assert result.exit_code == 127 and result.isolation is None
