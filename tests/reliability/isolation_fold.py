"""A fold that tries what isolated fold code must not manage: reach a listener the test
opens outside its network namespace (on loopback and on the host's own address), reach
a non-loopback address, append to the run's journal, write into the burn registry and
into the operator's home. It records each attempt in ``attempts.json`` in its slot
directory (the parent of its private ``TMPDIR``: the one place it may write), then
answers a valid fold.

``python isolation_fold.py TARGETS``: an external command fold (TARGETS a JSON file:
``port``, ``host``, ``journal``, ``registry``, ``home``); an entry-point fold imports
``attempt_all`` and ``checkpoint``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ATTACK = b"ATTACK-FROM-THE-FOLD"


def _try(action: Callable[[], object]) -> str:
    try:
        action()
    except OSError as exc:
        return f"refused errno {exc.errno}"
    return "done"


def _connect(host: str, port: int) -> None:
    socket.create_connection((host, port), timeout=2).close()


def _append(path: str) -> None:
    with open(path, "ab") as f:
        f.write(ATTACK)


def _create(path: str) -> None:
    with open(path, "xb") as f:
        f.write(ATTACK)


def attempt_all(targets_file: str) -> dict[str, str]:
    t: dict[str, Any] = json.loads(Path(targets_file).read_text())
    got = {
        "host_loopback": _try(lambda: _connect("127.0.0.1", t["port"])),
        "host_address": _try(lambda: _connect(t["host"], t["port"])),
        "non_loopback": _try(lambda: _connect("192.0.2.1", 80)),
        "journal": _try(lambda: _append(t["journal"])),
        "registry": _try(lambda: os.makedirs(os.path.join(t["registry"], "planted"))),
        "home": _try(lambda: _create(os.path.join(t["home"], "planted"))),
    }
    slot = Path(os.environ["TMPDIR"]).parent
    (slot / "attempts.json").write_text(json.dumps(got))
    return got


ANSWER = {"protocol": "efold-fold-v1", "messages": [{"role": "user", "content": "folded"}],
          "tools": [], "boundary_crossed": True}

if __name__ == "__main__":
    sys.stdin.buffer.read()
    attempt_all(sys.argv[1])
    sys.stdout.write(json.dumps(ANSWER))
