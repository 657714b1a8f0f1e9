"""Fuzzing every decoder of untrusted bytes: no crash outside named errors.

For any input, a decoder returns a valid value or raises an ``efold.errors.EfoldError``
subclass carrying a fixed ``Code``. Anything else (``ValueError``, ``KeyError``,
``TypeError``, ``UnicodeDecodeError``, ``RecursionError``, a leaking msgspec error, an
``AssertionError``...) propagates out of ``named()`` and fails the example.

Inputs mix pure random bytes with mutations of a VALID sample, so the fuzzer gets past
the outer layer: byte-level (bit flips, overwrites with interesting tokens, inserts,
deletions, truncation, splicing, duplicated chunks, deep nesting) and structure-aware
(a node of the decoded JSON / msgpack / TOML tree replaced, deleted, duplicated or
wrapped, then re-encoded; IPC bodies re-sealed with the slot key, authorizations
re-signed with a trusted key, so the checks *behind* the MAC and the signature are
fuzzed too).

Decoders covered: IPC frames on both sides of the lockstep core in every phase; the
Responses / Chat Completions stream and body parsers (chunked at random boundaries,
then settled); campaign TOML (text and the CLI's file path); the bundled catalog
format; traces and probe files (then validated); signed authorizations; the burn
registry's records; lease files; a real faux-pilot run's receipts, plan and
registration under ``aggregate``; ``load_registration``; external-fold output.

Sized by ``reliability_kit.budget``; the long run (about 50x the examples)::

    EFOLD_RELIABILITY_LONG=1 python -m pytest -q tests/reliability/test_fuzz.py
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import re
import sqlite3
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from efold_test_kit import (
    KEY,
    Core,
    D,
    core_pair,
    feed_chunked,
    hello,
    real_artifact,
    sample_bindings,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as _event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from reliability_kit import budget

from efold.controller.campaigns.campaign import Campaign, load_campaign, parse_campaign
from efold.controller.campaigns.registration import (
    LoadedRegistration,
    load_registration,
)
from efold.controller.errors import CampaignError
from efold.controller.rundirs.aggregate import RunView, read_run, run_reports
from efold.controller.rundirs.receipt_copies import RECEIPTS_DIR
from efold.corpus import (
    CorpusError,
    ProbeFile,
    SuiteItem,
    Trace,
    dump_probes,
    dump_trace,
    load_probes,
    load_trace,
    original_suite,
    validate,
)
from efold.corpus.model import Event, FunctionCall, ToolCall, ToolSource
from efold.errors import Code, EfoldError
from efold.folds.checkpoint import Checkpoint
from efold.folds.errors import PluginError
from efold.folds.external import decode_output
from efold.folds.fold import TracePrefix
from efold.guard import WireApi, bundled_catalog
from efold.guard.catalog import Catalog, parse_catalog
from efold.guard.contract import Contract
from efold.guard.pricing import rmax_units
from efold.guard.settlement import Decision, settle_wire
from efold.guard.wire import (
    ChatBodyParser,
    ChatStreamParser,
    FauxReply,
    ResponsesStreamParser,
    SseDecoder,
    StreamEnd,
    WireOutcome,
    render_responses_sse,
)
from efold.guard.wire.outcome import WireParser
from efold.ipc import (
    PREP_PROTOCOL,
    PROBE_PROTOCOL,
    Admit,
    BudgetGrant,
    Consume,
    Consumed,
    DeadlineGrant,
    DoneAck,
    FrameParser,
    Granted,
    Halt,
    Halted,
    IpcError,
    IpcPeerError,
    MeterReading,
    Prepared,
    Ready,
    Refused,
    Settle,
    Settled,
    SettleOutcome,
    Side,
    Stop,
    Terminal,
    TerminalStatus,
    UsageReport,
    Welcome,
    seal,
)
from efold.ipc.framing import HEADER_SIZE, TAG_SIZE
from efold.ipc.lockstep import TABLES
from efold.ipc.messages import CHILD_KINDS, Message
from efold.registry.authorization import (
    Attestation,
    AuthorizationBindings,
    AuthorizationDomain,
    VerifiedAuthorization,
    check_signature,
    mint_faux_authorization,
    sign_attestation,
    verify_faux_authorization,
    verify_real_authorization,
)
from efold.registry.burn import (
    CLAIM_NAME,
    CONSUMED_MARKER,
    ConsumptionRecord,
    consume_authorization,
    registry_key,
    verify_consumption,
)
from efold.registry.errors import RegistryError
from efold.registry.files import make_private_dir
from efold.registry.lease import LEASE_NAME, LeaseStatus, acquire_lease, probe_lease

T = TypeVar("T")


# -- the oracle -------------------------------------------------------------------------

def event(text: str) -> None:
    """Count ``text`` for ``--hypothesis-show-statistics`` (when inside a test)."""
    if currently_in_test_context():
        _event(text)


def named(call: Callable[[], T], label: str = "") -> T | EfoldError:
    """The decoder's value, or the named error it raised. Any other exception is not
    caught: it fails the example (hypothesis then shrinks it). With a ``label``, the
    outcome is counted (``--hypothesis-show-statistics`` shows how deep inputs got)."""
    try:
        result = call()
    except EfoldError as exc:
        assert isinstance(exc.code, Code), exc
        if label:
            event(f"{label}: {exc.code.value}")
        return exc
    if label:
        event(f"{label}: {type(result).__name__}")
    return result


def fuzz(ci: int, long: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return settings(
        max_examples=budget(ci=ci, long=long),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much, HealthCheck.large_base_example],
    )


# -- byte-level mutations ---------------------------------------------------------------

TOKENS = [
    b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbb\xbf",
    b"\n", b"\r", b"\r\n", b"\n\n", b" ", b"\t", b'"', b"'", b"\\", b"\\u0000",
    b"\\ud800", b"\\udc00", b"[", b"]", b"{", b"}", b",", b":", b"=", b"#", b'"""',
    b"null", b"true", b"false", b"0", b"-0", b"-1", b"1.5", b"1e999", b"-1e-999",
    b"NaN", b"inf", b"18446744073709551615", b"18446744073709551616",
    b"-9223372036854775809", b"99999999999999999999999999999999", b"data: ",
    b"event: ", b": keep-alive", b"[DONE]", b"\xc0", b"\xdc", b"\xdd",
]


JSON_OPENERS = (b"[", b'{"a":', b"[{", b'{"":[')
MSGPACK_OPENERS = (b"\x91", b"\x81\xa1a", b"\x92\xc0")  # [x], {"a": x}, [nil, x]


@st.composite
def byte_mutants(draw: st.DrawFn, samples: Sequence[bytes], *, max_ops: int = 6,
                 max_nest: int = 3000, openers: Sequence[bytes] = JSON_OPENERS) -> bytes:
    """One of ``samples`` after 1..max_ops byte-level mutations (``nest``: up to
    ``max_nest`` container openers inserted anywhere)."""
    data = bytearray(draw(st.sampled_from(samples)))
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(["flip", "set", "insert", "token", "delete", "truncate",
                                   "splice", "duplicate", "nest"]))
        n = len(data)
        at = draw(st.integers(0, n))
        if op == "flip" and n:
            data[min(at, n - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and n:
            data[min(at, n - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "token":
            token = draw(st.sampled_from(TOKENS))
            if draw(st.booleans()):
                data[at:at] = token
            else:
                data[at:at + len(token)] = token
        elif op == "delete" and n:
            del data[at:at + draw(st.integers(1, 64))]
        elif op == "truncate":
            del data[at:]
        elif op == "splice":
            # A slice of any sample (this one included) pasted over or into this one.
            other = draw(st.sampled_from(samples))
            start = draw(st.integers(0, len(other)))
            piece = other[start:start + draw(st.integers(1, 256))]
            end = at + (draw(st.integers(0, 256)) if draw(st.booleans()) else 0)
            data[at:end] = piece
        elif op == "duplicate" and n:
            size = draw(st.integers(1, 64))
            chunk = bytes(data[at:at + size]) or bytes(data[-size:])
            data[at:at] = chunk * draw(st.integers(1, 8))
        elif op == "nest" and max_nest:
            depth = draw(st.integers(1, max_nest))
            opener = draw(st.sampled_from(openers))
            data[at:at] = opener * depth
    return bytes(data)


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    """``data`` split at ``cuts`` (repeated cuts give empty chunks too)."""
    last = 0
    for cut in sorted(min(c, len(data)) for c in cuts):
        yield data[last:cut]
        last = cut
    yield data[last:]


# -- structure-aware mutations ----------------------------------------------------------

WORDS = [
    "", " ", "\n", "\u2028", "\x00", "é", "中", "a" * 300, "null", "0", "-1", "1e3",
    "60.00", "0.01", "4.000000001", "completed", "incomplete", "failed", "response.completed",
    "response.incomplete", "response.failed", "response.output_item.done", "error",
    "message", "function_call", "output_text", "reasoning", "[DONE]", "stop", "length",
    "content_filter", "default", "flex", "priority", "auto", "gpt-5", "gpt-5-2025-08-07",
    "faux", "openai", "faux-extractive-v1", "openai-responses", "openai-chat", "native",
    "store", "pack", "compaction", "original", "hard", "hard-distractors", "user",
    "assistant", "tool", "email_read", "web_fetch", "history_search", "history_get",
    "efold-fold-v1", "efold-probe-v2", "efold-prep-v1", "hello", "welcome", "ready",
    "admit", "permit", "refused", "consume", "consumed", "settle", "settled", "halt",
    "halted", "terminal", "done_ack", "stop", "prepared", "trace", "run-marker",
    "registry-claim", "efold-real-authorization-v1", "efold-faux-authorization-v1",
    "/", "/tmp/x/../y", "ab" * 32, "AB" * 32, "ab" * 64,
]
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from([0, 1, -1, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1,
                     -(2**63)]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.5, -0.0, 1e300, 5e-324]),
    st.text(max_size=12),
    st.sampled_from(WORDS),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8) | st.sampled_from(WORDS), inner, max_size=4),
    max_leaves=10,
)


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _nodes(child, (*path, index))


def _leaves(tree: Any) -> list[Any]:
    """Every scalar and every key of ``tree``: values that make sense somewhere."""
    found: list[Any] = []
    for _, node in _nodes(tree):
        if isinstance(node, dict):
            found.extend(node)
        elif not isinstance(node, list):
            found.append(node)
    return found


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgspec encodes


def _clamp(value: int) -> int:
    return min(max(value, _INT_MIN), _INT_MAX)


def _tweak(draw: st.DrawFn, node: Any, pool: Sequence[Any]) -> Any:
    """A value of ``node``'s own type, often a near miss: it still decodes, so the
    checks after decoding see it."""
    same = [p for p in pool if type(p) is type(node) and p != node]
    if same and draw(st.booleans()):
        return draw(st.sampled_from(same))
    if isinstance(node, bool):
        return not node
    if isinstance(node, int):
        return _clamp(draw(st.sampled_from([node + 1, node - 1, -node, 0, node * 1000,
                                            2**53, 2**63 - 1, 2**64 - 1]))
                      if draw(st.booleans()) else draw(st.integers(_INT_MIN, _INT_MAX)))
    if isinstance(node, float):
        return draw(st.sampled_from([-node, node * 1e10, 0.0, -1.0, 1e308, math.inf, math.nan]))
    if isinstance(node, str):
        edit = draw(st.sampled_from(["append", "cut", "upper", "swap", "space", "text"]))
        if edit == "append":
            return node + draw(st.sampled_from(["x", "/", "..", " ", "\x00", "é", "0"]))
        if edit == "cut":
            return node[:draw(st.integers(0, max(0, len(node) - 1)))]
        if edit == "upper":
            return node.upper()
        if edit == "swap" and len(node) > 1:
            i = draw(st.integers(0, len(node) - 2))
            return node[:i] + node[i + 1] + node[i] + node[i + 2:]
        if edit == "space":
            return f" {node}"
        return draw(st.text(max_size=12))
    if isinstance(node, bytes):
        return node[::-1] if draw(st.booleans()) else draw(st.binary(max_size=16))
    if isinstance(node, list) and node:
        return draw(st.permutations(node)) if draw(st.booleans()) else node[:-1]
    if isinstance(node, dict) and node:
        keys = list(node)
        drop = draw(st.sampled_from(keys))
        return {k: v for k, v in node.items() if k != drop}
    return node


# A node marked this way becomes a list nested that deep once encoded (``to_json``,
# ``to_msgpack``, ``toml_document``): nesting no tree walk of this module could build.
_DEEP_JSON = re.compile(rb'"\\u0000DEEP(\d+)\\u0000"')
_DEEP_MSGPACK = re.compile(rb"[\xa0-\xbf]\x00DEEP(\d+)\x00")


def to_json(tree: Any) -> bytes:
    return _DEEP_JSON.sub(lambda m: b"[" * int(m[1]) + b"]" * int(m[1]),
                          msgspec.json.encode(tree))


def to_msgpack(tree: Any) -> bytes:
    return _DEEP_MSGPACK.sub(lambda m: b"\x91" * int(m[1]) + b"\x90",
                             msgspec.msgpack.encode(tree))


def tree_mutants(trees: Sequence[Any], *, max_ops: int = 3, extra: Sequence[Any] = (),
                 values: st.SearchStrategy[Any] = VALUES,
                 max_deep: int = 3000) -> st.SearchStrategy[Any]:
    """One of ``trees`` (decoded JSON / msgpack / TOML) with 1..max_ops nodes replaced
    (by a random value or one found in any of the trees or ``extra`` trees), tweaked
    within their type, deleted, inserted, duplicated, wrapped, or nested up to
    ``max_deep`` levels deep (encode with ``to_json`` / ``to_msgpack``)."""
    pool = list({repr(v): v for t in (*trees, *extra) for v in _leaves(t)}.values())
    return _tree_mutants(trees, pool, max_ops, values, max_deep)


@st.composite
def _tree_mutants(draw: st.DrawFn, trees: Sequence[Any], pool: list[Any], max_ops: int,
                  values: st.SearchStrategy[Any], max_deep: int) -> Any:
    tree = copy.deepcopy(draw(st.sampled_from(trees)))
    replacement = st.sampled_from(pool) | values if pool else values
    ops = ["replace", "tweak", "tweak", "delete", "insert", "duplicate", "wrap"]
    for _ in range(draw(st.integers(1, max_ops))):
        path, node = draw(st.sampled_from(list(_nodes(tree))))
        op = draw(st.sampled_from([*ops, "deep"] if max_deep else ops))
        new: Any = node
        if op == "replace":
            new = draw(replacement)
        elif op == "deep":
            new = f"\x00DEEP{draw(st.integers(1, max_deep))}\x00"
        elif op == "tweak":
            new = _tweak(draw, node, pool)
        elif op == "wrap":
            new = [node] if draw(st.booleans()) else {str(draw(st.sampled_from(pool or ["k"]))): node}
        elif op == "insert" and isinstance(node, dict):
            key = draw(st.sampled_from(pool) | st.text(max_size=8)) if pool else "k"
            node[key if isinstance(key, str) else str(key)] = draw(replacement)
        elif op == "insert" and isinstance(node, list):
            node.insert(draw(st.integers(0, len(node))), draw(replacement))
        elif op == "duplicate" and isinstance(node, list) and node:
            index = draw(st.integers(0, len(node) - 1))
            node.insert(index, copy.deepcopy(node[index]))
        elif op == "delete" and path:
            parent = tree
            for step in path[:-1]:
                parent = parent[step]
            del parent[path[-1]]
            continue
        if new is not node:
            if not path:
                tree = new
            else:
                parent = tree
                for step in path[:-1]:
                    parent = parent[step]
                parent[path[-1]] = new
    return tree


def reorder(draw: st.DrawFn, items: list[Any], i: int, op: str) -> None:
    """A list-level mutation of ``items`` at ``i``: ``drop`` it, ``repeat`` it, or ``swap``
    it with another item (drawn)."""
    if op == "drop":
        del items[i]
    elif op == "repeat":
        items.insert(i, items[i])
    elif op == "swap":
        j = draw(st.integers(0, len(items) - 1))
        items[i], items[j] = items[j], items[i]


def json_inputs(samples: Sequence[bytes], *, max_nest: int = 3000) -> st.SearchStrategy[bytes]:
    """Random bytes, byte mutants, and re-encoded tree mutants of JSON ``samples``."""
    trees = [msgspec.json.decode(s) for s in samples]
    tree_bytes = tree_mutants(trees).map(to_json)
    return st.one_of(
        st.binary(max_size=512),
        byte_mutants(samples, max_nest=max_nest),
        tree_bytes,
        tree_bytes.flatmap(lambda b: byte_mutants([b], max_ops=2, max_nest=max_nest)),
    )


# -- 1. IPC frames, both sides of the lockstep core ----------------------------------------

IPC_MAX = 4096

PROBE_SCRIPT: list[Message] = [
    hello(PROBE_PROTOCOL, cache_key="ck-1"),
    Welcome(deadlines=DeadlineGrant(run_ms=60_000, exchange_ms=5_000),
            budgets=BudgetGrant(max_requests=10, meter_calls=8, meter_bytes=126_976)),
    Ready(arrival_digest=D),
    Admit(request_id="req-1", round=0, payload_digest=D, rmax=78_400_000),
    Granted(permit_id="permit-1", hold=78_400_000),
    Consume(permit_id="permit-1", body_digest=D),
    Consumed(),
    Settle(permit_id="permit-1", outcome=SettleOutcome.SETTLED, code=None,
           usage=UsageReport(input=120, output=30, cache_read=0, reasoning=4), tier="default",
           cost=12_345),
    Settled(),
    Admit(request_id="req-2", round=1, payload_digest=D, rmax=78_400_000),
    Refused(code=Code.NOT_ADMITTED_CAP),
    Halt(code=Code.LOOKUP_MODEL_SWITCH_FORBIDDEN),
    Halted(),
    Terminal(status=TerminalStatus.ANSWERED, code=None, answer="the 14th",
             meter=MeterReading(calls=1, bytes=900), witness=D),
    DoneAck(),
]
PREP_SCRIPT: list[Message] = [
    hello(PREP_PROTOCOL),
    Welcome(deadlines=DeadlineGrant(run_ms=120_000, exchange_ms=5_000),
            budgets=BudgetGrant(max_requests=10, meter_calls=8, meter_bytes=126_976)),
    Prepared(snapshot_digest=D, files=2, bytes=4096, rejected={"oversized": 1}),
    DoneAck(),
]
SCRIPTS = {PROBE_PROTOCOL: PROBE_SCRIPT, PREP_PROTOCOL: PREP_SCRIPT}


def _feed(core: Core, stream: bytes, chunking: Sequence[int]) -> Message | IpcError:
    """``feed_chunked`` at this section's maximum frame."""
    return feed_chunked(core, stream, chunking, IPC_MAX)


@dataclass
class Exchange:
    """Both cores driven validly up to ``step``; ``frame`` is the valid next frame and
    ``receiver`` the core that must read it."""

    receiver: Core
    frame: bytes
    sent: Message


def _exchange(protocol: str, step: int, stop: bool) -> Exchange:
    child, ctrl = core_pair(protocol, IPC_MAX)
    script = SCRIPTS[protocol]
    for msg in script[:step]:
        sender, receiver = (child, ctrl) if type(msg) in CHILD_KINDS else (ctrl, child)
        assert _feed(receiver, sender.outgoing(msg), []) == msg
    msg = script[step]
    from_child = type(msg) in CHILD_KINDS
    if stop and not from_child:
        msg = Stop(code=Code.LOOKUP_STOPPED)
    sender, receiver = (child, ctrl) if from_child else (ctrl, child)
    return Exchange(receiver=receiver, frame=sender.outgoing(msg), sent=msg)


def _check_received(ex: Exchange, result: Message | IpcError, phase_before: Any,
                    seq_before: int) -> None:
    outcome = result.code.value if isinstance(result, IpcError) else type(result).__name__
    event(f"{ex.receiver.side.value} receives: {outcome}")
    if isinstance(result, IpcError):
        return
    table = TABLES[ex.receiver.protocol]
    allowed = dict(table[phase_before][1])
    if table[phase_before][0] is Side.CONTROLLER:
        allowed[Stop] = None  # type: ignore[assignment]
    assert type(result) in allowed, result
    assert ex.receiver.seq == seq_before + 1


@st.composite
def ipc_cases(draw: st.DrawFn) -> tuple[str, int, bool]:
    protocol = draw(st.sampled_from([PROBE_PROTOCOL, PREP_PROTOCOL]))
    step = draw(st.integers(0, len(SCRIPTS[protocol]) - 1))
    return protocol, step, draw(st.booleans())


ipc_chunking = st.lists(st.integers(1, IPC_MAX + 64), max_size=6)


def _valid_frames() -> list[bytes]:
    frames = []
    for protocol, script in SCRIPTS.items():
        for step in range(len(script)):
            frames.append(_exchange(protocol, step, False).frame)
    return frames


VALID_FRAMES = _valid_frames()
VALID_BODIES = [f[HEADER_SIZE:-TAG_SIZE] for f in VALID_FRAMES]
BODY_TREES = [msgspec.msgpack.decode(b) for b in VALID_BODIES]


@fuzz(ci=200, long=10_000)
@given(case=ipc_cases(), data=st.data(), chunking=ipc_chunking)
def test_ipc_unauthenticated_bytes_are_refused_in_every_phase(
    case: tuple[str, int, bool], data: st.DataObject, chunking: list[int]
) -> None:
    """Random streams and byte mutants of the valid frame (header, body or tag), fed to
    the child or the controller core in any phase: a MAC-less change is always refused."""
    ex = _exchange(*case)
    stream = data.draw(st.one_of(
        st.binary(max_size=1024),
        byte_mutants([ex.frame], max_nest=0),
        byte_mutants([ex.frame, *VALID_FRAMES], max_nest=0),
    ))
    phase, seq = ex.receiver.phase, ex.receiver.seq
    result = _feed(ex.receiver, stream, chunking)
    _check_received(ex, result, phase, seq)
    if stream.startswith(ex.frame):
        assert result == ex.sent  # bytes after a frame belong to the next one
    elif not isinstance(result, IpcPeerError):
        # Only a genuine frame passes the MAC: one spliced whole from another exchange
        # (the same binding and seq: e.g. the step's other controller reply).
        assert any(stream.startswith(f) for f in VALID_FRAMES), result


@st.composite
def sealed_bodies(draw: st.DrawFn, sent: bytes) -> bytes:
    """Bodies carrying a valid MAC: the decoder and every check behind it are fuzzed."""
    seq = msgspec.msgpack.decode(sent)["seq"]
    body = draw(st.one_of(
        st.binary(max_size=256),
        st.sampled_from(VALID_BODIES),  # replayed or skipped messages
        # Any message of either direction, at the right seq: out of order unless allowed.
        st.sampled_from(BODY_TREES).map(lambda t: to_msgpack({**t, "seq": seq})),
        byte_mutants([sent, *VALID_BODIES], max_nest=3000, openers=MSGPACK_OPENERS),
        tree_mutants([msgspec.msgpack.decode(sent)], extra=BODY_TREES,
                     values=VALUES | st.binary(max_size=8)).map(to_msgpack),
    ))
    return seal(KEY, body[:IPC_MAX], IPC_MAX)


@fuzz(ci=300, long=15_000)
@example(case=(PROBE_PROTOCOL, 4, False), data=None, chunking=[])  # Granted, to the child
@given(case=ipc_cases(), data=st.data(), chunking=ipc_chunking)
def test_ipc_authenticated_garbage_is_refused_in_every_phase(
    case: tuple[str, int, bool], data: st.DataObject | None, chunking: list[int]
) -> None:
    """Re-sealed mutants (wrong kind, field, binding, seq, protocol...) reach the
    decoder and the lockstep checks of either side: a message its phase allows, or a
    named peer error."""
    ex = _exchange(*case)
    body = ex.frame[HEADER_SIZE:-TAG_SIZE]
    frame = data.draw(sealed_bodies(body)) if data is not None else ex.frame
    phase, seq = ex.receiver.phase, ex.receiver.seq
    result = _feed(ex.receiver, frame, chunking)
    _check_received(ex, result, phase, seq)
    if data is None:
        assert result == ex.sent


@pytest.mark.parametrize(("protocol", "step"), [
    (protocol, step) for protocol, script in SCRIPTS.items() for step in range(len(script))])
def test_ipc_value_nested_past_the_recursion_limit(protocol: str, step: int) -> None:
    """An authenticated body whose message carries, before its ``kind`` tag, a value
    nested deeper than any recursion limit: the decoder must skip it to find the tag."""
    ex = _exchange(protocol, step, False)
    tree = msgspec.msgpack.decode(ex.frame[HEADER_SIZE:-TAG_SIZE])
    tree["msg"] = {"x": "\x00DEEP3500\x00", **tree["msg"]}
    phase, seq = ex.receiver.phase, ex.receiver.seq
    result = _feed(ex.receiver, seal(KEY, to_msgpack(tree), IPC_MAX), [])
    _check_received(ex, result, phase, seq)
    assert isinstance(result, IpcError) and result.code is Code.IPC_BAD_MESSAGE, result


@fuzz(ci=100, long=5_000)
@given(stream=st.binary(max_size=1024) | byte_mutants(VALID_FRAMES, max_nest=0),
       chunking=ipc_chunking)
def test_ipc_frame_parser_alone(stream: bytes, chunking: list[int]) -> None:
    """The bare ``FrameParser``: a body, or a named error at the first bad frame."""
    parser = FrameParser(KEY, IPC_MAX)
    i = k = 0
    while True:
        want = parser.want()
        step = min(want, chunking[k % len(chunking)]) if chunking else want
        k += 1
        chunk = stream[i:i + step]
        i += len(chunk)
        if not chunk:
            assert isinstance(named(parser.end_of_stream), IpcPeerError)
            return
        result = named(lambda: parser.feed(chunk))  # noqa: B023
        if isinstance(result, EfoldError):
            return
        assert result is None or isinstance(result, bytes)


# -- 2. model wire adapters: SSE streams and JSON bodies -------------------------------

ENTRY = bundled_catalog().entry("openai", "gpt-5")
CONTRACTS = {
    "responses": Contract(provider="openai", model="gpt-5", api=WireApi.OPENAI_RESPONSES,
                          base_url="https://api.openai.invalid/v1", effort="high"),
    "chat": Contract(provider="openai", model="gpt-5", api=WireApi.OPENAI_CHAT,
                     base_url="https://api.openai.invalid/v1", effort="high"),
    "chat-body": Contract(provider="openai", model="gpt-5", api=WireApi.OPENAI_CHAT,
                          base_url="https://api.openai.invalid/v1", effort="high",
                          stream=False),
}
PARSERS: dict[str, Callable[[], WireParser]] = {
    "responses": ResponsesStreamParser, "chat": ChatStreamParser, "chat-body": ChatBodyParser,
}
ITEMS: list[dict[str, Any]] = [
    {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "The parcel ships on the 14th. é 🚚 \u2028"}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "history_get",
     "arguments": '{"id": "e0001"}'},
]
RESPONSES_USAGE = {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 100},
                   "output_tokens": 80, "output_tokens_details": {"reasoning_tokens": 20}}
CHAT_USAGE = {"prompt_tokens": 1200, "prompt_tokens_details": {"cached_tokens": 100},
              "completion_tokens": 80, "completion_tokens_details": {"reasoning_tokens": 20}}


def _chunk(**fields: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-5-2025-08-07", "service_tier": "default", **fields}


CHAT_EVENTS: list[Any] = [
    _chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": "The parcel "},
                     "finish_reason": None}], usage=None),
    _chunk(choices=[{"index": 0, "delta": {"content": "ships é 🚚 \u2028"},
                     "finish_reason": None}], usage=None),
    _chunk(choices=[{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "history_get", "arguments": '{"id": '}}]},
        "finish_reason": None}], usage=None),
    _chunk(choices=[{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": '"e0001"}'}}]}, "finish_reason": None}],
        usage=None),
    _chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], usage=None),
    _chunk(choices=[], usage=CHAT_USAGE),
    "[DONE]",
]
CHAT_BODY = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-5",
    "service_tier": "default",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "The parcel ships on the 14th.",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "history_get", "arguments": '{"id": "e1"}'}}]}}],
    "usage": CHAT_USAGE,
}


def _events_of(stream: bytes) -> list[tuple[str | None, Any]]:
    events = SseDecoder().feed(stream)
    return [(e.event, e.data if e.data == "[DONE]" else msgspec.json.decode(e.data))
            for e in events]


def render_sse(events: Sequence[tuple[str | None, Any]], eol: str = "\n") -> bytes:
    out = []
    for name, data in events:
        if name is not None:
            out.append(f"event: {name}{eol}")
        text = data if isinstance(data, str) else to_json(data).decode()
        out.append(f"data: {text}{eol}{eol}")
    return "".join(out).encode()


RESPONSES_SAMPLES = [
    render_responses_sse(FauxReply(items=ITEMS, tier=tier, terminal=terminal), usage,
                         model="gpt-5")
    for tier, terminal, usage in [("default", "completed", RESPONSES_USAGE),
                                  (None, "incomplete", RESPONSES_USAGE),
                                  ("flex", "failed", None), ("default", "error", None),
                                  ("default", "cut", None)]
]
STREAM_EVENTS = {
    "responses": [_events_of(s) for s in RESPONSES_SAMPLES],
    "chat": [[(None, e) for e in CHAT_EVENTS]],
}
STREAM_SAMPLES = {
    "responses": RESPONSES_SAMPLES,
    "chat": [render_sse(events) for events in STREAM_EVENTS["chat"]],
    "chat-body": [msgspec.json.encode(CHAT_BODY)],
}


@st.composite
def event_mutants(draw: st.DrawFn, streams: Sequence[list[tuple[str | None, Any]]]) -> bytes:
    """A valid event list with one event's JSON tree mutated, events dropped, repeated
    or swapped; rendered with any line ending."""
    events = list(draw(st.sampled_from(streams)))
    bodies = [b for e in streams for _, b in e if not isinstance(b, str)]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(events) - 1)) if events else 0
        op = draw(st.sampled_from(["tree", "tree", "tree", "drop", "repeat", "swap", "name"]))
        if not events:
            break
        name, body = events[i]
        if op == "tree":
            events[i] = (name, draw(tree_mutants([body], extra=bodies[:12])))
        elif op == "name":
            events[i] = (draw(st.none() | st.sampled_from(WORDS)), body)
        else:
            reorder(draw, events, i, op)
    eol = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    return render_sse(events, eol)


def wire_inputs(kind: str) -> st.SearchStrategy[bytes]:
    samples = STREAM_SAMPLES[kind]
    if kind == "chat-body":
        return json_inputs(samples)
    structured = event_mutants(STREAM_EVENTS[kind])
    return st.one_of(
        st.binary(max_size=512),
        byte_mutants(samples),
        structured,
        structured.flatmap(lambda b: byte_mutants([b], max_ops=2)),
    )


def _check_outcome(outcome: WireOutcome) -> None:
    assert isinstance(outcome, WireOutcome)
    assert isinstance(outcome.terminal, StreamEnd)
    assert not (outcome.usage_invalid and outcome.usage is not None)
    assert outcome.tier is None or isinstance(outcome.tier, str)
    assert outcome.model is None or isinstance(outcome.model, str)
    assert all(isinstance(item, dict) for item in outcome.output_items)


def parse_and_settle(kind: str, data: bytes, cuts: list[int], stop_at_done: bool) -> None:
    parser = PARSERS[kind]()
    for chunk in chunked(data, cuts):
        assert named(lambda: parser.feed(chunk)) is None  # noqa: B023
        if stop_at_done and parser.done:
            break  # as the guard does: nothing after the terminal is read
    outcome = named(parser.finish)
    assert isinstance(outcome, WireOutcome), outcome  # a parser has no refusal of its own
    _check_outcome(outcome)
    event(f"outcome: {outcome.terminal.value}{' malformed' if outcome.malformed else ''}")
    decision = named(lambda: settle_wire(outcome, hold_units=rmax_units(ENTRY),
                                         input_budget=CONTRACTS[kind].input_envelope,
                                         payload_bytes=len(data), contract=CONTRACTS[kind],
                                         entry=ENTRY), "settle")
    assert isinstance(decision, Decision | EfoldError)


@st.composite
def wire_cases(draw: st.DrawFn, kind: str) -> tuple[bytes, list[int], bool]:
    data = draw(wire_inputs(kind))
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=8))
    return data, cuts, draw(st.booleans())


DEEP = b"[" * 5000  # deeper than any recursion limit: never decodable


@fuzz(ci=300, long=15_000)
@example(case=(b"data: " + DEEP + b"\n\n", [], False))
@example(case=(b'data: {"type": ["response.completed"]}\n\n', [], False))
@example(case=(b'data: {"type": {}}\n\ndata: {"type": "error"}\n\n', [7], True))
@given(case=wire_cases("responses"))
def test_responses_stream(case: tuple[bytes, list[int], bool]) -> None:
    parse_and_settle("responses", *case)


@fuzz(ci=300, long=15_000)
@example(case=(b"data: " + DEEP + b"\n\n", [3, 9], False))
@example(case=(render_sse([(None, _chunk(choices=[], usage=[[1]])),
                           (None, _chunk(choices=[], usage=[[2]]))]), [], False))
@given(case=wire_cases("chat"))
def test_chat_stream(case: tuple[bytes, list[int], bool]) -> None:
    parse_and_settle("chat", *case)


def _at_depth(depth: int) -> Iterator[tuple[str, bytes]]:
    """Inputs whose nesting is ``depth``: decodable just below the recursion limit, so
    what the parsers do with the decoded value next must not recurse deeper."""
    nested = b"[" * depth + b"%d" + b"]" * depth
    usage = [b'data: {"usage": ' + (nested % n) + b"}\n\n" for n in (1, 2)]
    yield "chat", usage[0] + usage[1] + b"data: [DONE]\n\n"
    yield "chat", usage[0] + usage[0] + b"data: [DONE]\n\n"
    call = b'{"id": %s, "function": {"name": %s, "arguments": %s}}' % ((nested % 1,) * 3)
    yield "chat-body", (b'{"choices": [{"message": {"role": "assistant", "content": "x", '
                        b'"tool_calls": [' + call + b"]}}]}")
    yield "responses", (b'data: {"type": "response.completed", "response": {"usage": '
                        + (nested % 1) + b', "output": [' + (nested % 1) + b"]}}\n\n")


def _decodable_depth() -> int:
    """The deepest nesting msgspec decodes from this stack (binary search)."""
    low, high = 1, 1 << 16
    while low < high:
        mid = (low + high + 1) // 2
        try:
            msgspec.json.decode(b"[" * mid + b"]" * mid)
            low = mid
        except RecursionError:
            high = mid - 1
    return low


def test_wire_parsers_at_the_nesting_boundary() -> None:
    """Every depth around the deepest decodable one (wherever this stack puts it)."""
    boundary = _decodable_depth()
    for depth in range(max(1, boundary - 60), boundary + 10):
        for kind, data in _at_depth(depth):
            parse_and_settle(kind, data, [], False)


def _body(**changes: Any) -> bytes:
    body = copy.deepcopy(CHAT_BODY)
    body["choices"][0].update(changes)
    return msgspec.json.encode(body)


@fuzz(ci=200, long=10_000)
@example(case=(DEEP, [5], False))
@example(case=(_body(finish_reason=["length"]), [], False))
@example(case=(_body(message={"role": "assistant", "content": "x", "tool_calls": 5}), [], False))
@example(case=(_body(message={"role": "assistant", "content": "x", "tool_calls": True}), [], False))
@given(case=wire_cases("chat-body"))
def test_chat_body(case: tuple[bytes, list[int], bool]) -> None:
    parse_and_settle("chat-body", *case)


# -- 3. campaign TOML, and the bundled catalog's TOML ---------------------------------------

def toml_value(value: Any) -> str:
    """A TOML rendering of a decoded TOML (or JSON-like) value: inline tables only."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    return '""'  # None has no TOML spelling


def toml_document(tree: Any) -> bytes:
    if not isinstance(tree, dict):
        tree = {"value": tree}
    text = "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in tree.items())
    return _DEEP_JSON.sub(lambda m: b"[" * int(m[1]) + b"]" * int(m[1]), text.encode())


CAMPAIGN_SAMPLES = [
    resources.files("efold.controller.campaigns").joinpath(f"{name}.toml").read_bytes()
    for name in ("default", "hard")
] + [b'''
name = "small"
suite = "original"
roles = ["native", "store", "late"]
probe_limit = 2
selection_seed = 7
schedule_seed = 7
cap_usd = "60.00"
repeats = 2

[role.late]
arm = "compaction-2"
instructions = "Answer briefly. \\u00e9"

[reader]
provider = "openai"
model = "gpt-5"
api = "openai-chat"
base_url = "https://api.openai.invalid/v1"
effort = "high"

[budgets]
max_requests = 4
lookup_calls = 2

[deadlines]
probe_seconds = 30.5
grace_seconds = 1
''']
CAMPAIGN_TREES = [tomllib.loads(s.decode()) for s in CAMPAIGN_SAMPLES]
TOML_VALUES = VALUES | st.sampled_from([math.inf, -math.inf, math.nan, 101, 124, 125, 100])


def toml_inputs(samples: Sequence[bytes], trees: Sequence[Any], *,
                max_nest: int) -> st.SearchStrategy[bytes]:
    tree_docs = tree_mutants(trees, values=TOML_VALUES, max_deep=max_nest).map(toml_document)
    return st.one_of(
        st.binary(max_size=512),
        st.text(max_size=256).map(str.encode),
        byte_mutants(samples, max_nest=max_nest),
        tree_docs,
        tree_docs.flatmap(lambda b: byte_mutants([b], max_ops=2, max_nest=max_nest)),
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@fuzz(ci=200, long=10_000)
@example(data=b"name = " + DEEP)  # tomllib: RecursionError
@example(data=b"repeats = " + b"1" * 5000)  # tomllib: ValueError (int digit limit)
@example(data=b"name = \"x\"\n\xff = 1\n")  # not UTF-8: only the CLI's path sees bytes
@given(data=toml_inputs(CAMPAIGN_SAMPLES, CAMPAIGN_TREES, max_nest=3000))
def test_campaign(scratch: Path, data: bytes) -> None:
    """``parse_campaign(text)`` and the CLI's path (``load_campaign``: the file's bytes,
    which need not be UTF-8)."""
    path = scratch / "campaign.toml"
    path.write_bytes(data)
    loaded = named(lambda: load_campaign(path), "load_campaign")
    parsed = named(lambda: parse_campaign(data.decode("utf-8", "replace")))
    assert isinstance(parsed, Campaign | CampaignError), parsed
    if isinstance(loaded, tuple):
        campaign, raw = loaded
        assert isinstance(campaign, Campaign) and raw == data
        # Compared as encoded: a float field that were nan would never equal itself.
        assert msgspec.json.encode(parsed) == msgspec.json.encode(campaign)
    else:
        assert isinstance(loaded, CampaignError), loaded


def test_campaign_deeply_nested_array_is_a_named_error() -> None:
    with pytest.raises(CampaignError):
        parse_campaign("name = " + "[" * 100_000 + "]" * 100_000)


def test_campaign_huge_integer_is_a_named_error() -> None:
    with pytest.raises(CampaignError):
        parse_campaign("name = \"x\"\nsuite = \"original\"\nroles = [\"native\"]\n"
                       "repeats = " + "1" * 5000 + "\n")


CATALOG_SAMPLE = resources.files("efold.guard").joinpath("catalog.toml").read_bytes()


@fuzz(ci=150, long=7_500)
@example(data=b"version = 1\nmodel = " + b"[" * 100_000)
@example(data=b"version = " + b"7" * 5000)
@example(data=CATALOG_SAMPLE.replace(b'input = "1.25"', b'input = "1e999999999"'))
@example(data=CATALOG_SAMPLE.replace(b'input = "1.25"', b"input = 1e-999999999"))
@given(data=toml_inputs([CATALOG_SAMPLE], [tomllib.loads(CATALOG_SAMPLE.decode())],
                        max_nest=3000))
def test_catalog(data: bytes) -> None:
    """The catalog format (an operator may pass their own file): ``parse_catalog``."""
    result = named(lambda: parse_catalog(data), "parse_catalog")
    assert isinstance(result, Catalog | EfoldError), result


# -- 4. traces and probe files ---------------------------------------------------------

ITEM = min(original_suite(), key=lambda item: len(dump_trace(item.trace)))
TRACE_SAMPLE = dump_trace(ITEM.trace)
PROBES_SAMPLE = dump_probes(ITEM.probes)
TRACE_LINES = TRACE_SAMPLE[:-1].split(b"\n")
TRACE_TREES = [msgspec.json.decode(line) for line in TRACE_LINES]


@st.composite
def trace_line_mutants(draw: st.DrawFn) -> bytes:
    """The valid trace with lines' JSON trees mutated, lines dropped, repeated, swapped."""
    # Each line with its tree: a mutated tree stays a tree (its deep marks unencoded).
    lines: list[Any] = list(TRACE_TREES)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["tree", "tree", "drop", "repeat", "swap"]))
        if op == "tree":
            lines[i] = draw(tree_mutants([lines[i]], extra=TRACE_TREES[:40]))
        elif op != "drop" or len(lines) > 1:  # a trace keeps at least one line
            reorder(draw, lines, i, op)
    return b"\n".join(to_json(tree) for tree in lines) + b"\n"


def _arguments_event(arguments: str) -> bytes:
    """The valid trace whose first tool call carries ``arguments``."""
    lines = list(TRACE_LINES)
    for i, line in enumerate(lines):
        event = msgspec.json.decode(line)
        if event.get("tool_calls"):
            event["tool_calls"][0]["function"]["arguments"] = arguments
            lines[i] = msgspec.json.encode(event)
            break
    return b"\n".join(lines) + b"\n"


@fuzz(ci=150, long=7_500)
@example(data=_arguments_event("[" * 100_000))
@example(data=b'{"x": ' + DEEP + b', "kind": "trace"}\n')  # skipped while finding the tag
@given(data=st.one_of(st.binary(max_size=512), byte_mutants([TRACE_SAMPLE]), trace_line_mutants(),
                      trace_line_mutants().flatmap(lambda b: byte_mutants([b], max_ops=2))))
def test_trace_then_validation(data: bytes) -> None:
    """``load_trace`` (the prep child's and the corpus CLI's reader), then ``validate``
    on whatever decodes: a trace is untrusted until validated."""
    trace = named(lambda: load_trace(data), "load_trace")
    if isinstance(trace, EfoldError):
        assert isinstance(trace, CorpusError)
        return
    assert isinstance(trace, Trace)
    named(lambda: validate(SuiteItem(trace=trace, probes=ITEM.probes)), "validate")


@fuzz(ci=150, long=7_500)
@given(data=json_inputs([PROBES_SAMPLE], max_nest=200))
def test_probe_file_then_validation(data: bytes) -> None:
    probes = named(lambda: load_probes(data), "load_probes")
    if isinstance(probes, EfoldError):
        assert isinstance(probes, CorpusError) and probes.code is Code.PROBE_INVALID
        return
    assert isinstance(probes, ProbeFile)
    named(lambda: validate(SuiteItem(trace=ITEM.trace, probes=probes)), "validate")


# -- 5. authorizations, burn records, lease files -----------------------------------------

APPROVER = Ed25519PrivateKey.generate()
ACCOUNT = "acct-fictional-0001"
NOW = 1_760_000_000


def _bindings(output_root: str) -> AuthorizationBindings:
    return sample_bindings(output_root, reader="openai/gpt-5", effort="high",
                           deadlines={"probe_s": 60, "run_s": 21_600})


def _real_artifact(output_root: str, now: int = NOW, auth_id: str = "auth-fuzz-0001") -> bytes:
    return real_artifact(_bindings(output_root), APPROVER, authorization_id=auth_id,
                         account=ACCOUNT, now=now)


AUTH_ROOT = "/tmp/efold-fuzz-run"
REAL_ARTIFACT = _real_artifact(AUTH_ROOT)
FAUX = mint_faux_authorization(_bindings(AUTH_ROOT), now=NOW)
TRUSTED = [APPROVER.public_key(), FAUX.trusted_key]


@st.composite
def resigned_artifacts(draw: st.DrawFn) -> bytes:
    """A valid artifact's attestation tree mutated, then signed again by a trusted key
    when it still decodes: the checks behind the signature are fuzzed too."""
    tree = msgspec.json.decode(draw(st.sampled_from([REAL_ARTIFACT, FAUX.artifact])))
    attestation = draw(tree_mutants([tree["attestation"]], max_ops=2))
    try:
        typed = msgspec.convert(attestation, Attestation)
    except msgspec.ValidationError:
        tree["attestation"] = attestation
        return to_json(tree)
    signed = named(lambda: sign_attestation(typed, APPROVER))
    if isinstance(signed, bytes):
        return signed
    tree["attestation"] = attestation
    return to_json(tree)


@fuzz(ci=300, long=15_000)
@given(artifact=st.one_of(json_inputs([REAL_ARTIFACT, FAUX.artifact], max_nest=100),
                          resigned_artifacts(), resigned_artifacts()),
       skew=st.sampled_from([0, 10, -400, 4000, 10**12]))
def test_authorization(artifact: bytes, skew: int) -> None:
    """``check_signature`` (the verify-authorization command) and both validators."""
    now = NOW + skew
    expected = _bindings(AUTH_ROOT)
    for label, call in (
        ("check_signature real", lambda: check_signature(
            artifact, domain=AuthorizationDomain.REAL, trusted_keys=TRUSTED, now=now)),
        ("check_signature faux", lambda: check_signature(
            artifact, domain=AuthorizationDomain.FAUX, trusted_keys=TRUSTED, now=now)),
        ("verify_real", lambda: verify_real_authorization(
            artifact, trusted_keys=TRUSTED, expected=expected, account_id=ACCOUNT, now=now)),
        ("verify_faux", lambda: verify_faux_authorization(
            artifact, trusted_keys=TRUSTED, expected=expected, now=now)),
    ):
        result = named(call, label)
        assert isinstance(result, VerifiedAuthorization | RegistryError), result


@dataclass
class Burned:
    run_root: Path
    registry: Path
    artifact: bytes
    holder: Any
    marker: Path
    claim: Path


@pytest.fixture(scope="module")
def burned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Burned]:
    """One real consumption (registry entry + run-root marker), its lease held."""
    import time

    base = tmp_path_factory.mktemp("burn")
    run_root = base / "runs" / "r1"
    make_private_dir(run_root, parents=True)
    registry = base / "home" / "consumed-v1"
    now = int(time.time())
    artifact = _real_artifact(str(run_root), now=now, auth_id="auth-burn-fuzz-0001")
    with acquire_lease(run_root, epoch=2) as lease:
        consume_authorization(
            artifact, domain=AuthorizationDomain.REAL, trusted_keys=[APPROVER.public_key()],
            expected=_bindings(str(run_root)), account_id=ACCOUNT, lease=lease,
            run_id="run-1", registry_root=registry, now=now)
        entry = registry / registry_key(AuthorizationDomain.REAL, "auth-burn-fuzz-0001")
        yield Burned(run_root, registry, artifact, lease.holder, run_root / CONSUMED_MARKER,
                     entry / CLAIM_NAME)



@contextlib.contextmanager
def rewritten(path: Path, data: bytes) -> Iterator[None]:
    """``path`` holds ``data`` (same inode and mode: only the bytes are hostile), then
    its original bytes again."""
    original = path.read_bytes()
    try:
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(data)
        yield
    finally:
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(original)


@fuzz(ci=150, long=7_500)
@given(which=st.sampled_from(["marker", "claim"]), data=st.data())
def test_burn_records(burned: Burned, which: str, data: st.DataObject) -> None:
    """The run-root marker or the registry claim rewritten: ``verify_consumption`` returns
    the record or refuses with a named code."""
    path = burned.marker if which == "marker" else burned.claim
    mutant = data.draw(json_inputs([burned.marker.read_bytes(), burned.claim.read_bytes()],
                                   max_nest=100))
    with rewritten(path, mutant):
        result = named(lambda: verify_consumption(
            burned.run_root, domain=AuthorizationDomain.REAL,
            authorization_id="auth-burn-fuzz-0001",
            artifact_sha256=hashlib.sha256(burned.artifact).hexdigest(), run_id="run-1",
            controller=burned.holder, registry_root=burned.registry), f"{which}")
    assert isinstance(result, ConsumptionRecord | RegistryError), result


def test_burn_records_restored(burned: Burned) -> None:
    """The fixture's pair is intact (so the fuzzing above started from a valid pair)."""
    record = verify_consumption(
        burned.run_root, domain=AuthorizationDomain.REAL, authorization_id="auth-burn-fuzz-0001",
        artifact_sha256=hashlib.sha256(burned.artifact).hexdigest(), run_id="run-1",
        controller=burned.holder, registry_root=burned.registry)
    assert record.run_id == "run-1"


# -- 6./8. a real faux-pilot run: receipts, plan and registration under aggregate -------

@dataclass
class PilotRun:
    run: Path
    reg_bytes: bytes
    files: list[Path]  # plan.json, registration.json, every receipt


@pytest.fixture(scope="module")
def pilot_run(tmp_path_factory: pytest.TempPathFactory) -> PilotRun:
    from efold_pilot_kit import small_registration

    from efold.controller.pilot.pilot import run_pilot
    from efold.controller.rundirs.runroot import claim_run_dir

    reg, reg_bytes = small_registration(roles='["native"]')
    run = claim_run_dir(tmp_path_factory.mktemp("pilot") / "run")
    outcome = run_pilot(reg, reg_bytes, run)
    assert outcome.stop_code is None and outcome.receipts
    files = [run / "plan.json", run / "registration.json",
             *sorted((run / RECEIPTS_DIR).glob("*.json"))]
    return PilotRun(run, reg_bytes, files)


@contextlib.contextmanager
def journaled(run: Path, receipt: Path, data: bytes) -> Iterator[None]:
    """The journal records ``data`` as the receipt's digest (as if the controller had
    written these very bytes), then its original digest again."""
    slot = receipt.name.removesuffix(".json")
    with contextlib.closing(sqlite3.connect(run / "journal.sqlite")) as conn:
        (before,) = conn.execute("SELECT digest FROM receipts WHERE slot = ?", (slot,)).fetchone()
        with conn:
            conn.execute("UPDATE receipts SET digest = ? WHERE slot = ?",
                         (hashlib.sha256(data).hexdigest(), slot))
    try:
        yield
    finally:
        with contextlib.closing(sqlite3.connect(run / "journal.sqlite")) as conn, conn:
            conn.execute("UPDATE receipts SET digest = ? WHERE slot = ?", (before, slot))


def _aggregate(run: Path) -> None:
    """What ``efold-controller aggregate RUN`` does: read the run, render the reports."""
    view = named(lambda: read_run(run), "read_run")
    if isinstance(view, EfoldError):
        return
    assert isinstance(view, RunView)
    reports = named(lambda: run_reports(view), "run_reports")
    assert isinstance(reports, dict | EfoldError), reports


@fuzz(ci=150, long=7_500)
@given(which=st.sampled_from(["plan", "registration", "receipt", "receipt"]),
       index=st.integers(0, 64), journal=st.booleans(), data=st.data())
def test_aggregate_on_mutated_run_files(pilot_run: PilotRun, which: str, index: int,
                                        journal: bool, data: st.DataObject) -> None:
    """plan.json, registration.json or one receipt rewritten; ``journal``: a receipt's
    digest journaled to match, so its content reaches the reports."""
    receipts = pilot_run.files[2:]
    target = {"plan": pilot_run.files[0], "registration": pilot_run.files[1],
              "receipt": receipts[index % len(receipts)]}[which]
    samples = [target.read_bytes()]
    mutant = data.draw(json_inputs(samples, max_nest=100))
    with contextlib.ExitStack() as stack:
        stack.enter_context(rewritten(target, mutant))
        if journal and target.parent.name == RECEIPTS_DIR:
            stack.enter_context(journaled(pilot_run.run, target, mutant))
        _aggregate(pilot_run.run)


def test_aggregate_run_restored(pilot_run: PilotRun) -> None:
    view = read_run(pilot_run.run)
    assert len(view.receipts) == len(pilot_run.files) - 2 and not view.journaled_missing


@fuzz(ci=150, long=7_500)
@given(data=st.data())
def test_registration_mutated(pilot_run: PilotRun, scratch: Path, data: st.DataObject) -> None:
    """``load_registration(path, sha256)`` with the sha256 of the mutated bytes: the
    digest check passes, so decoding and the re-derivation behind it are fuzzed."""
    mutant = data.draw(json_inputs([pilot_run.reg_bytes], max_nest=100))
    path = scratch / "registration.json"
    path.write_bytes(mutant)
    result = named(lambda: load_registration(path, hashlib.sha256(mutant).hexdigest()),
                   "load_registration")
    assert isinstance(result, LoadedRegistration | EfoldError), result
    if isinstance(result, LoadedRegistration):
        assert result.data == mutant


@fuzz(ci=80, long=4_000)
@given(data=st.data())
def test_lease_file(pilot_run: PilotRun, scratch: Path, data: st.DataObject) -> None:
    """``probe_lease`` on a lease file of any bytes (no holder: the record decides)."""
    sample = (pilot_run.run / LEASE_NAME).read_bytes()
    mutant = data.draw(json_inputs([sample.rstrip()], max_nest=100) | byte_mutants([sample]))
    run_dir = scratch / "lease-run"
    run_dir.mkdir(exist_ok=True)
    (run_dir / LEASE_NAME).write_bytes(mutant)
    result = named(lambda: probe_lease(run_dir), "probe_lease")
    assert isinstance(result, LeaseStatus | RegistryError), result


# -- 7. external-fold output -------------------------------------------------------------

PREFIX = TracePrefix(trace_id="fuzz-trace", events=[
    Event(id="e0001", session=1, day=1, role="user",
          content="Please find the parcel number in my email."),
    Event(id="e0002", session=1, day=1, role="assistant", content="",
          tool_calls=[ToolCall(id="call_0001", function=FunctionCall(
              name="email_read", arguments='{"q": "parcel"}'))]),
    Event(id="e0003", session=1, day=1, role="tool", content="Parcel PX-4471 ships Monday.",
          tool_call_id="call_0001", name="email_read", source=ToolSource.EMAIL),
    Event(id="e0004", session=2, day=2, role="assistant", content="It ships Monday."),
])
FOLD_OUTPUTS = [
    msgspec.json.encode({
        "protocol": "efold-fold-v1",
        "messages": [
            {"role": "user", "content": "Please find the parcel number in my email."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0001", "type": "function",
                 "function": {"name": "email_read", "arguments": '{"q": "parcel"}'}}]},
            {"role": "tool", "content": "Parcel PX-4471 ships Monday.",
             "tool_call_id": "call_0001", "name": "email_read"},
            {"role": "assistant", "content": "Summary: ships Monday. é \u2028"},
        ],
        "tools": tools,
        "boundary_crossed": crossed,
    })
    for tools, crossed in ((["history_search", "history_get"], True), ([], False))
]


@fuzz(ci=200, long=10_000)
@given(output=json_inputs(FOLD_OUTPUTS, max_nest=100))
def test_external_fold_output(output: bytes) -> None:
    result = named(lambda: decode_output("ext-fold", output, PREFIX), "decode_output")
    assert isinstance(result, Checkpoint | PluginError), result
