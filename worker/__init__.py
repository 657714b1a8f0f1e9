"""worker: the prep and probe child processes (docs/architecture.md §8).

``python -m efold.worker probe|prep --ipc-fd N --key-fd M`` runs ``entry.main``: key
pipe, self-checks, the lockstep protocol around a registered *body* (``bodies``).
Children import little (no anyio, trio, httpx, rich, click, psutil, cryptography):
keep it that way here, since ``python -m efold.worker`` imports this package first.
"""

from __future__ import annotations

from efold.worker.assignment import ASSIGNMENT_VERSION as ASSIGNMENT_VERSION
from efold.worker.assignment import Assignment as Assignment
from efold.worker.assignment import SnapshotRef as SnapshotRef
from efold.worker.assignment import WorkerKind as WorkerKind
from efold.worker.assignment import encode_key_pipe as encode_key_pipe
from efold.worker.assignment import read_key_pipe as read_key_pipe
from efold.worker.errors import WorkerError as WorkerError
from efold.worker.errors import WorkerStopped as WorkerStopped
from efold.worker.exit_codes import EXIT_OK as EXIT_OK
from efold.worker.exit_codes import code_for_exit_status as code_for_exit_status
from efold.worker.exit_codes import exit_status_for as exit_status_for
