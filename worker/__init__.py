"""worker: the prep and probe child processes (docs/architecture.md §8).

``python -m efold.worker probe|prep --ipc-fd N --key-fd M [--credential-fd K]`` runs ``entry.main``: key
pipe, self-checks, the lockstep protocol around a registered *body* (``bodies``).
Children import little (no anyio, trio, httpx, rich, click, psutil, cryptography):
keep it that way here, since ``python -m efold.worker`` imports this package first.
What a child is told and how it exits are the shared protocol (``efold.protocol``).
"""

from __future__ import annotations

from efold.worker.errors import WorkerError as WorkerError
from efold.worker.errors import WorkerStopped as WorkerStopped
from efold.worker.key_pipe import read_key_pipe as read_key_pipe
