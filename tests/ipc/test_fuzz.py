"""Hypothesis fuzzing of the framing and the decoders: random and mutated frames only
ever yield a message or a named IPC error; never a crash, never an allocation larger
than the maximum frame."""

from __future__ import annotations

import tracemalloc

import msgspec
from efold_test_kit import BINDING, KEY, WORKER, feed_chunked, hello
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from efold.ipc import (
    PROBE_PROTOCOL,
    FrameParser,
    Hello,
    IpcError,
    IpcPeerError,
    controller_core,
    seal,
)
from efold.ipc.messages import ChildEnvelope

MAX = 4096

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

VALID = seal(KEY, msgspec.msgpack.encode(ChildEnvelope(
    epoch=3, slot="s0007", worker=WORKER, seq=0, msg=hello(),
)))


def drive(stream: bytes, chunking: list[int]) -> object:
    """Feed ``stream`` to a fresh controller core (``feed_chunked``). Returns the first
    message, or the IPC error raised; anything else propagates."""
    core = controller_core(protocol=PROBE_PROTOCOL, binding=BINDING, key=KEY, max_frame=MAX)
    return feed_chunked(core, stream, chunking, MAX)


def _bounded_memory(stream: bytes, chunking: list[int]) -> object:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = drive(stream, chunking)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Whatever the declared length says, the reader never holds much more than one
    # maximum frame (a few copies of it at most: buffer, body slice, decode).
    assert peak < 4 * (MAX + 36) + 64 * 1024, peak
    return result


chunkings = st.lists(st.integers(min_value=1, max_value=MAX + 64), min_size=0, max_size=6)


@FUZZ
@given(stream=st.binary(max_size=3 * MAX), chunking=chunkings)
def test_random_bytes_yield_only_named_errors(stream: bytes, chunking: list[int]) -> None:
    result = _bounded_memory(stream, chunking)
    assert isinstance(result, IpcPeerError), result  # no random stream carries our MAC


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    frame = bytearray(VALID)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "length"]))
        if op == "flip" and frame:
            i = draw(st.integers(min_value=0, max_value=len(frame) - 1))
            frame[i] ^= draw(st.integers(min_value=1, max_value=255))
        elif op == "insert":
            i = draw(st.integers(min_value=0, max_value=len(frame)))
            frame[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete" and frame:
            i = draw(st.integers(min_value=0, max_value=len(frame) - 1))
            del frame[i : i + draw(st.integers(min_value=1, max_value=8))]
        elif op == "truncate":
            del frame[draw(st.integers(min_value=0, max_value=len(frame))):]
        elif op == "length" and len(frame) >= 4:
            frame[:4] = draw(st.integers(min_value=0, max_value=2**32 - 1)).to_bytes(4, "big")
    return bytes(frame)


@FUZZ
@example(frame=VALID + b"\x00", chunking=[])
@given(frame=mutated_frames(), chunking=chunkings)
def test_mutated_frames_yield_only_named_errors(frame: bytes, chunking: list[int]) -> None:
    result = _bounded_memory(frame, chunking)
    if frame.startswith(VALID):
        # The frame itself is intact; bytes inserted after its end belong to the next
        # frame, which this one read never touches.
        assert isinstance(result, Hello)
    else:
        # A mutation the MAC does not cover cannot exist: every change is refused.
        assert isinstance(result, IpcPeerError), result


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


@st.composite
def authenticated_bodies(draw: st.DrawFn) -> bytes:
    """Bodies with a valid MAC: the decoder and the checks after it are what is fuzzed."""
    kinds = ["hello", "ready", "admit", "consume", "settle", "terminal", "prepared",
             "welcome", "stop", "nonsense"]
    msg = draw(st.dictionaries(st.text(max_size=12), msgpack_values, max_size=6))
    msg["kind"] = draw(st.sampled_from(kinds))
    env = {"epoch": draw(st.sampled_from([3, 4, "3"])), "slot": "s0007",
           "worker": msgspec.to_builtins(WORKER), "seq": draw(st.sampled_from([0, 1])),
           "msg": msg}
    if draw(st.booleans()):
        env = draw(st.dictionaries(st.text(max_size=8), msgpack_values, max_size=5))
    body = msgspec.msgpack.encode(env) if draw(st.booleans()) else draw(st.binary(max_size=200))
    return seal(KEY, body[:MAX], MAX)


@FUZZ
@given(frame=authenticated_bodies())
def test_authenticated_garbage_decodes_to_named_errors(frame: bytes) -> None:
    result = _bounded_memory(frame, [])
    assert isinstance(result, (IpcPeerError, Hello)), result


def test_a_huge_declared_length_allocates_nothing_for_its_body() -> None:
    parser = FrameParser(KEY, max_frame=1 << 20)
    tracemalloc.start()
    try:
        try:
            parser.feed((2**32 - 1).to_bytes(4, "big"))
        except IpcError as exc:
            assert exc.code.value == "ipc_frame_too_large"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
