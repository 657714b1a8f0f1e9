"""The pluggable part of a child: which code runs between the handshake and the end.

The entry point (``efold.worker.entry``) owns the protocol: key pipe, self-checks,
``Hello``/``Welcome``, ``Ready``, ``Terminal``/``Prepared`` and ``DoneAck``. A *body*
owns the work in between:

* a **probe body** ``restore``s the assigned snapshot into the private slot directory
  and returns its arrival digest (sent in ``Ready``), then ``run``s with a
  ``ProbeSession`` (admit / consume / settle) and returns the ``Terminal`` message;
* a **prep body** ``run``s with the assignment and the ``Welcome`` and returns the
  ``Prepared`` message. A prep body that may send model requests (a summariser's) also
  has ``bind_session``: the entry point hands it the ``PermitSession`` (admit / consume
  / settle / halt, ``efold-prep-v2``) after ``Welcome``, before ``run``.

Registration is explicit: the tables below map the body name an ``Assignment`` carries
to ``"module:attribute"`` (a zero-argument factory or class). Only the chosen module is
imported, and only when the child starts, so a child pays for the imports of its own
body and nothing else. Registered here:

====================  ======  =========================================================
name                  kind    what it is
====================  ======  =========================================================
``builtin``           probe   ``efold.worker.builtin.BuiltinProbe``: restores and verifies
                              a single-file snapshot, answers ``UNKNOWN`` without any
                              model request (a skeleton for the protocol, not a reader)
``builtin``           prep    ``efold.worker.builtin.BuiltinPrep``: writes a tiny
                              snapshot file into its slot directory and reports it
``reader``            probe   ``efold.worker.reader.ReaderProbe``: restores the verified
                              checkpoint and runs the reader loop through the guard
``boundary``          probe   ``efold.worker.boundary_body.BoundaryProbe``: restores
                              the checkpoint as the reader does, then runs a boundary
                              case's agent loop on a workspace copy through the guard
``fold``              prep    ``efold.worker.prep.FoldPrep``: replays a trace through a
                              fold arm and writes the snapshot (a compaction arm's
                              summaries through the guard when the task names a
                              summariser model)
====================  ======  =========================================================
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Final, Protocol, cast, runtime_checkable

from efold.errors import Code
from efold.ipc.messages import Prepared, Terminal, Welcome
from efold.protocol.assignment import Assignment
from efold.worker.errors import WorkerError
from efold.worker.session import PermitSession, ProbeSession


class ProbeBody(Protocol):
    def restore(self, assignment: Assignment) -> str:
        """Verify the assigned snapshot and restore it (in memory, as the reader does,
        or inside ``assignment.slot_dir``, the body's private directory); return the
        arrival digest. Raise ``WorkerError(worker_snapshot_invalid)`` if it does not
        verify."""
        ...

    def run(self, session: ProbeSession) -> Terminal:
        """Do the probe run and return the terminal message."""
        ...


class PrepBody(Protocol):
    def run(self, assignment: Assignment, welcome: Welcome) -> Prepared:
        """Prepare the checkpoint snapshot inside ``assignment.slot_dir``."""
        ...


@runtime_checkable
class SendingPrepBody(PrepBody, Protocol):
    """A prep body that may send model requests: it is handed its permit session first."""

    def bind_session(self, session: PermitSession) -> None:
        """Keep ``session`` for ``run``: the only way its requests may be admitted."""
        ...


PROBE_BODIES: Final[Mapping[str, str]] = {
    "builtin": "efold.worker.builtin:BuiltinProbe",
    "reader": "efold.worker.reader:ReaderProbe",
    "boundary": "efold.worker.boundary_body:BoundaryProbe",
}

PREP_BODIES: Final[Mapping[str, str]] = {
    "builtin": "efold.worker.builtin:BuiltinPrep",
    "fold": "efold.worker.prep:FoldPrep",
}


def _load(table: Mapping[str, str], name: str) -> object:
    target = table.get(name)
    if target is None:
        raise WorkerError(Code.WORKER_USAGE, "unregistered body")
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory()


def load_probe_body(name: str) -> ProbeBody:
    """Instantiate the registered probe body ``name`` (``worker_usage`` if unknown)."""
    return cast(ProbeBody, _load(PROBE_BODIES, name))


def load_prep_body(name: str) -> PrepBody:
    """Instantiate the registered prep body ``name`` (``worker_usage`` if unknown)."""
    return cast(PrepBody, _load(PREP_BODIES, name))
