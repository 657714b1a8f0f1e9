"""Errors of the child processes.

::

    WorkerError                   (efold.errors.EfoldError)
    ├── (plain)                   a self-verification failure: key pipe, parent, lease,
    │                             digests, snapshot (``code`` says which); the child
    │                             exits with that code's fixed status and does nothing else
    └── WorkerStopped             the controller answered with ``Stop``; ``stop_code`` is
                                  the controller's code (its decision, not our failure)
"""

from __future__ import annotations

from efold.errors import Code, EfoldError


class WorkerError(EfoldError):
    """A child refused to go on; ``code`` says which check failed."""


class WorkerStopped(WorkerError):
    """The controller sent ``Stop{code}``: the child stops at once and exits."""

    def __init__(self, stop_code: Code) -> None:
        super().__init__(Code.WORKER_STOPPED, stop_code.value)
        self.stop_code = stop_code
