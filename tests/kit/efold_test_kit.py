"""Test material more than one test package uses (tests/conftest.py puts this folder on
``sys.path``, so a test module can ``from efold_test_kit import ...``).

* IPC: the sample slot key, worker, binding and digest, a ``Hello``, a core pair, and
  ``feed_chunked``, which drives a lockstep core with a byte stream cut at will.
* Authorizations: fictional digests named by a label, sample bindings, and a signed
  real-domain authorization.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from efold.identity import ProcessIdentity
from efold.ipc import (
    DEFAULT_MAX_FRAME,
    PROBE_PROTOCOL,
    Binding,
    Hello,
    IpcError,
    IpcPeerError,
    IpcPoisoned,
    LockstepCore,
    child_core,
    controller_core,
)
from efold.ipc.framing import HEADER_SIZE, TAG_SIZE
from efold.ipc.messages import Message
from efold.registry.authorization import (
    AUTHORIZATION_VERSION,
    Attestation,
    AuthorizationBindings,
    AuthorizationDomain,
    commit_account,
    sign_attestation,
)

# -- IPC ----------------------------------------------------------------------------------

KEY = bytes(range(32))
WORKER = ProcessIdentity(pid=4242, start_time=777, boot_id="boot-a")
BINDING = Binding(epoch=3, slot="s0007", worker=WORKER)
D = "ab" * 32  # a well-formed digest
Core = LockstepCore[Any, Any]


def hello(protocol: str = PROBE_PROTOCOL, *, cache_key: str = "ck") -> Hello:
    """A valid ``Hello`` (a probe's carries ``cache_key``, a prep's none)."""
    return Hello(protocol=protocol, registration_digest=D, plan_digest=D,  # type: ignore[arg-type]
                 build_digest=D, cache_key=cache_key if protocol == PROBE_PROTOCOL else None)


def core_pair(protocol: str = PROBE_PROTOCOL, max_frame: int = DEFAULT_MAX_FRAME) -> tuple[Core, Core]:
    """(child, controller) cores of one channel: ``BINDING``, ``KEY``."""
    kw: dict[str, Any] = {"protocol": protocol, "binding": BINDING, "key": KEY,
                          "max_frame": max_frame}
    return child_core(**kw), controller_core(**kw)


def feed_chunked(core: Core, stream: bytes, chunking: Sequence[int],
                 max_frame: int) -> Message | IpcError:
    """Feed ``stream`` to ``core`` in chunks (sizes taken in turn from ``chunking``, all of
    ``want()`` when it is empty; never more than ``want()``): the first message, or the
    IPC error raised. ``want()`` never asks to read past one maximum frame; an error is
    always the peer's fault, and it poisons the core for good."""
    i = k = 0
    try:
        while True:
            want = core.want()
            assert 0 < want <= max_frame + HEADER_SIZE + TAG_SIZE
            step = min(want, chunking[k % len(chunking)]) if chunking else want
            k += 1
            data = stream[i:i + step]
            i += len(data)
            if not data:
                raise core.end_of_stream()
            msg = core.feed(data)
            if msg is not None:
                return msg  # type: ignore[no-any-return]
    except IpcError as exc:
        assert isinstance(exc, IpcPeerError), exc  # never a local misuse
        assert core.poisoned is exc.code
        with pytest.raises(IpcPoisoned):
            core.want()
        return exc


# -- authorizations -------------------------------------------------------------------------

def hex_digest(label: str) -> str:
    """A fictional sha256 digest, named by ``label``."""
    return hashlib.sha256(label.encode()).hexdigest()


# The bound digests, each named by its label, in the order the authorize command lists them.
SAMPLE_DIGESTS = {
    "registration_raw_sha256": hex_digest("raw"),
    "registration_canonical_sha256": hex_digest("canon"),
    "code_digest": hex_digest("code"),
    "build_digest": hex_digest("build"),
    "catalog_digest": hex_digest("catalog"),
    "policy_digest": hex_digest("policy"),
    "schedule_digest": hex_digest("schedule"),
}


def sample_bindings(output_root: str | os.PathLike[str], **changes: Any) -> AuthorizationBindings:
    """Fictional bindings of a faux-reader run under ``output_root``: the
    ``SAMPLE_DIGESTS``, a $3.92 cap; ``changes`` set what a test relies on."""
    fields: dict[str, Any] = {
        **SAMPLE_DIGESTS, "reader": "faux-reader", "effort": "low", "cap_units": 78_400_000,
        "deadlines": {"probe_s": 60}, "output_root": os.fspath(output_root),
        "credential_env_var": "EFOLD_TEST_FICTIONAL_CREDENTIAL",
    }
    return AuthorizationBindings(**{**fields, **changes})


def real_artifact(bindings: AuthorizationBindings, key: Ed25519PrivateKey, *,
                  authorization_id: str, account: str, now: int) -> bytes:
    """A real-domain authorization of ``account`` over ``bindings``, issued at ``now`` for
    an hour and signed by ``key``."""
    return sign_attestation(Attestation(
        version=AUTHORIZATION_VERSION, domain=AuthorizationDomain.REAL,
        authorization_id=authorization_id, bindings=bindings,
        account=commit_account(account, domain=AuthorizationDomain.REAL),
        approver="approver@example.invalid", approval_reference="approval-7",
        issued_at=now, expires_at=now + 3600,
    ), key)
