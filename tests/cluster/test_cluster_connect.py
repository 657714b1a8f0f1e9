"""A ``--ray`` address that is not a Ray head refuses at once (``cluster_unavailable``),
never hangs inside Ray's client: a listener that accepts and says nothing, and one that
answers like a web server."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CAMPAIGN = 'name = "c"\nsuite = "original"\nroles = ["native"]\ncap_usd = "60.00"\n'


@contextmanager
def listener(reply: bytes | None) -> Iterator[int]:
    """A loopback TCP listener that accepts every connection and sends ``reply`` (None:
    nothing), holding each open."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("reply", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n"])
def test_a_listener_that_is_not_ray_refuses_within_seconds(tmp_path: Path,
                                                           reply: bytes | None) -> None:
    (tmp_path / "c.toml").write_text(CAMPAIGN)
    with listener(reply) as port:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "efold.controller", "cluster", "pilot",
                               "--faux", "--ray", f"127.0.0.1:{port}", "--campaign",
                               str(tmp_path / "c.toml"), "--runs", str(tmp_path / "runs")],
                              capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused: cluster_unavailable" in done.stderr and "not a Ray head" in done.stderr
    assert "Traceback" not in done.stderr
    assert took < 60
    assert not (tmp_path / "runs").exists()  # refused before a run directory was made
