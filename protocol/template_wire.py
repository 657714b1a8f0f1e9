"""The fork-server template's wire: what ``efold.controller.processes.template`` and
``efold.worker.template`` say over their control socket.

The control socket is one end of a ``SOCK_SEQPACKET`` socketpair, so every message is
one packet (at most ``MAX_PACKET`` bytes of msgpack) and a ``ForkRequest`` carries the
descriptors it relays in the same packet (``SCM_RIGHTS``), in the order of ``roles``.
One exchange per launch, strictly in turn:

    controller                              template
    ----------                              --------
                                  <-  TemplateReady        (once, after its imports)
    ForkRequest + fds             ->
                                  <-  Forked{pid}          (the worker, the controller's
                                                            child, has setsid)
                                      | TemplateRefused{reason}
    Release                       ->                       (pid registered by then)
                                  <-  Released             (its "go" byte written)

Nothing here carries a secret: the key pipe and the credential pipe travel as
descriptors the template never reads.
"""

from __future__ import annotations

import re
import signal
from typing import Final, Literal

import msgspec

from efold.protocol.assignment import WorkerKind

MAX_PACKET: Final = 1024
# Blocked in the controller while it spawns the template (so that the exception an
# interruption raises there never lands between the fork and the child's registration);
# the child inherits the mask, and the template unblocks them before anything else.
INTERRUPTIONS: Final = frozenset({signal.SIGINT, signal.SIGTERM})
# Where a forked worker holds what a request relays: ipc, then key, then credential.
# The worker the template names holds the request's IPC socket here before ``Forked``.
FIRST_FD: Final = 3
# Same name as efold.controller.processes.marker.MARKER_VAR (the controller sits above us).
LAUNCH_MARKER_VAR: Final = "EFOLD_LAUNCH_MARKER"
MARKER_FORM: Final = re.compile(r"[0-9a-f]{32}")

# "cgroup": the launch's cgroup directory, last when present; the template forks the
# worker into it (``efold.worker.sibling_fork``) and the worker never holds it.
Role = Literal["ipc", "key", "credential", "cgroup"]
# The only descriptor sets a request may relay, in this order.
ROLE_SETS: Final[tuple[tuple[Role, ...], ...]] = (
    ("ipc", "key"), ("ipc", "key", "credential"),
    ("ipc", "key", "cgroup"), ("ipc", "key", "credential", "cgroup"))


class ForkRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="fork"):
    kind: WorkerKind
    marker: str  # the launch marker (32 hex digits), set in the grandchild's environ
    roles: tuple[Role, ...]  # what each relayed descriptor is, in packet order


class Release(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="release"):
    pass


class TemplateReady(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="ready"):
    pass


class Forked(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="forked"):
    pid: int


class Released(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="released"):
    pass


class TemplateRefused(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="refused"):
    reason: Literal["bad_request", "fork_failed"]


ToTemplate = ForkRequest | Release
FromTemplate = TemplateReady | Forked | Released | TemplateRefused

TO_TEMPLATE: Final = msgspec.msgpack.Decoder(ToTemplate)
FROM_TEMPLATE: Final = msgspec.msgpack.Decoder(FromTemplate)
ENCODER: Final = msgspec.msgpack.Encoder()


def request_problem(request: ForkRequest, fd_count: int) -> str | None:
    """Why ``request`` (arriving with ``fd_count`` descriptors) is malformed, or None."""
    if request.roles not in ROLE_SETS or len(request.roles) != fd_count:
        return "descriptor roles"
    if MARKER_FORM.fullmatch(request.marker) is None:
        return "marker form"
    return None
