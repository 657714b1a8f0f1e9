"""``python -I isolated_child.py ROOT OUTSIDE PORT HOST_IP [threads]``: isolate (ROOT the only
writable root), then try what foreign code would; print one JSON line of what happened.

``threads``: start a thread first (a user namespace then must be refused)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

from efold.isolation import isolate


def attempt(action: object) -> str:
    try:
        action()  # type: ignore[operator]
    except OSError as exc:
        return f"refused errno {exc.errno}"
    return "done"


def write(path: str) -> None:
    with open(path, "w") as f:
        f.write("x")


def connect(host: str, port: int) -> None:
    socket.create_connection((host, port), timeout=2).close()


def loopback_inside() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        socket.create_connection(listener.getsockname(), timeout=2).close()


def main() -> None:
    root, outside, port, host_ip = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if sys.argv[5:] == ["threads"]:
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
    iso = isolate([root])
    print(json.dumps({
        "isolation": {"network": iso.network, "writes": iso.writes,
                      "network_reason": iso.network_reason,
                      "writes_reason": iso.writes_reason},
        "write_inside": attempt(lambda: write(os.path.join(root, "inside"))),
        "mkdir_inside": attempt(lambda: os.mkdir(os.path.join(root, "sub"))),
        "write_outside": attempt(lambda: write(outside)),
        "devnull": attempt(lambda: write("/dev/null")),
        "host_loopback": attempt(lambda: connect("127.0.0.1", port)),
        "non_loopback": attempt(lambda: connect("192.0.2.1", 80)),
        "host_address": attempt(lambda: connect(host_ip, port)),
        "loopback_inside": attempt(loopback_inside),
        "signal_parent": attempt(lambda: os.kill(os.getppid(), 0)),
    }))


if __name__ == "__main__":
    main()
