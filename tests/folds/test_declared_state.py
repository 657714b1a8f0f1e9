"""Declared fold state (``folds/state.py``): the derivation rule, the encoding constraint
(a checkpoint without state has exactly its old bytes), and the state an external
command or a plugin returns, good or bad."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from efold.corpus.model import Event, FunctionCall, SuiteItem, ToolCall
from efold.errors import Code
from efold.folds.arms import ColdRebuildFold, CompactionFold, NativeFold
from efold.folds.checkpoint import (
    CHECKPOINT_VERSION,
    Checkpoint,
    FoldReceipt,
    ReaderMessage,
    RetainedStore,
)
from efold.folds.declared import declared_state, state_from_messages
from efold.folds.errors import PluginError
from efold.folds.external import ExternalCommandFold
from efold.folds.fold import TracePrefix
from efold.folds.opaque import OpaqueContext
from efold.folds.registry import BUILTIN_ARMS, CheckedFold
from efold.folds.snapshot import (
    CHECKPOINT_FILE,
    content_digest,
    read_checkpoint,
    write_checkpoint,
)
from efold.folds.state import HANDOFF_TOOL, DeclaredState, decode_state

STATE = DeclaredState(keys={"release/version": "0.4.1"}, anchors=["release/version"],
                      failures={"feed": "retired"}, obligations={"changelog": "open"})
STATE_JSON = json.dumps(msgspec.to_builtins(STATE), sort_keys=True)


class Trace:
    """A small trace in the trace format, with tool calls of any name."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.calls = 0

    def _add(self, role: str, content: str, **extra: object) -> None:
        self.events.append(Event(id=f"e{len(self.events) + 1:04d}", session=1, day=1,
                                 role=role, content=content, **extra))  # type: ignore[arg-type]

    def owner(self, text: str) -> None:
        self._add("user", text)

    def reply(self, text: str) -> None:
        self._add("assistant", text)

    def tool(self, name: str, output: str) -> None:
        self.calls += 1
        call = ToolCall(id=f"call_{self.calls:04d}",
                        function=FunctionCall(name=name, arguments="{}"))
        self._add("assistant", "", tool_calls=[call])
        self._add("tool", output, tool_call_id=call.id, name=name)

    def stretch(self, rounds: int) -> None:
        """Ordinary chatter, long enough for the cold window and a compaction."""
        for i in range(rounds):
            self.owner(f"Round {i}: " + "the pallets and crates were counted again. " * 12)
            self.reply(f"Counted (round {i}).")

    def prefix(self) -> TracePrefix:
        return TracePrefix(trace_id="state-trace", events=list(self.events))


# -- the rule -----------------------------------------------------------------------------


def test_native_declares_the_last_visible_handoff_record() -> None:
    t = Trace()
    t.owner("Load the bot's handoff.")
    t.tool(HANDOFF_TOOL, json.dumps({"keys": {"release/version": "0.4.0"}}))
    t.tool(HANDOFF_TOOL, STATE_JSON)  # a later record replaces the earlier one whole
    t.reply("Loaded.")
    checkpoint = NativeFold().build(t.prefix())
    assert checkpoint.state is msgspec.UNSET  # built-in arms return none: it is derived
    assert declared_state(checkpoint) == STATE


def test_a_last_record_that_does_not_decode_declares_nothing() -> None:
    t = Trace()
    t.tool(HANDOFF_TOOL, STATE_JSON)
    t.tool(HANDOFF_TOOL, '{"keys": {"release/version": 41}}')  # wrong type: not a state
    assert declared_state(NativeFold().build(t.prefix())) is None  # no fallback to the first


@pytest.mark.parametrize("content", [
    "release/version is 0.4.1", "[]", '{"keys": {}, "notes": "x"}',
    '{"failures": {"feed": "closed"}}', '{"anchors": "release/version"}'])
def test_only_a_closed_json_state_is_a_state(content: str) -> None:
    assert decode_state(content) is None


def test_only_a_handoff_call_makes_a_record() -> None:
    t = Trace()
    t.tool("workspace_read", STATE_JSON)  # the same bytes from another tool
    assert declared_state(NativeFold().build(t.prefix())) is None
    # A tool message named handoff_state that answers no visible handoff call is none
    # either (a fold that kept the result but dropped the call).
    orphan = ReaderMessage(role="tool", content=STATE_JSON, tool_call_id="call_9",
                           name=HANDOFF_TOOL)
    assert state_from_messages([orphan]) is None
    # Text quoting the record (a summary, a pack, a note) is never a record.
    assert state_from_messages([ReaderMessage(role="user", content=STATE_JSON)]) is None


def test_cold_rebuild_declares_none_and_compaction_only_when_its_tail_keeps_the_record() -> None:
    early = Trace()
    early.owner("Load the bot's handoff.")
    early.tool(HANDOFF_TOOL, STATE_JSON)
    early.reply("Loaded.")
    early.stretch(80)
    prefix = early.prefix()
    assert declared_state(NativeFold().build(prefix)) == STATE
    assert declared_state(ColdRebuildFold().build(prefix)) is None
    compacted = CompactionFold().build(prefix)
    assert compacted.receipt.boundary.verified
    summary = compacted.messages[0].content
    assert '"release/version": "0.4.1"' in summary  # the summary quotes the record ...
    assert declared_state(compacted) is None  # ... and so declares nothing

    late = Trace()
    late.stretch(80)
    late.owner("Load the bot's handoff.")
    late.tool(HANDOFF_TOOL, STATE_JSON)
    late.reply("Loaded.")
    kept = CompactionFold().build(late.prefix())
    assert kept.receipt.boundary.verified
    assert declared_state(kept) == STATE  # the kept tail holds the call and the record


# -- the encoding constraint --------------------------------------------------------------


class _CheckpointBeforeState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``Checkpoint`` as it was before ``state`` existed: same fields, same order."""

    arm: str
    trace_id: str
    messages: list[ReaderMessage]
    tools: list[str]
    receipt: FoldReceipt
    store: RetainedStore | None = None
    version: int = CHECKPOINT_VERSION
    opaque: OpaqueContext | None = None


def _handoff_trace() -> TracePrefix:
    t = Trace()
    t.owner("Load the bot's handoff.")
    t.tool(HANDOFF_TOOL, STATE_JSON)
    t.stretch(40)
    return t.prefix()


@pytest.mark.parametrize("arm", sorted(BUILTIN_ARMS))
def test_a_checkpoint_without_state_encodes_to_its_old_bytes(arm: str, hard_item: SuiteItem,
                                                             tmp_path: Path) -> None:
    for prefix in (TracePrefix.of(hard_item.trace), _handoff_trace()):
        checkpoint = BUILTIN_ARMS[arm]().build(prefix)
        assert checkpoint.state is msgspec.UNSET
        encoded = msgspec.json.encode(checkpoint)
        # The old struct decodes the bytes (it refuses unknown keys) and re-encodes them
        # byte for byte: no "state" key, no other change.
        old = msgspec.json.decode(encoded, type=_CheckpointBeforeState)
        assert msgspec.json.encode(old) == encoded
        assert content_digest(checkpoint) == hashlib.sha256(encoded).hexdigest()
        # The snapshot's checkpoint.json is the old encoding of the store-less checkpoint.
        target = tmp_path / f"{arm}-{prefix.trace_id}"
        manifest = write_checkpoint(checkpoint, target)
        written = (target / CHECKPOINT_FILE).read_bytes()
        without_store = msgspec.structs.replace(old, store=None)
        assert written == msgspec.json.encode(without_store)
        restored = read_checkpoint(target, expected_digest=manifest.digest)
        assert restored.checkpoint == checkpoint and restored.checkpoint.state is msgspec.UNSET


def test_a_checkpoint_with_state_carries_it_through_a_snapshot(tmp_path: Path) -> None:
    plain = NativeFold().build(_handoff_trace())
    stated = msgspec.structs.replace(plain, state=STATE)
    encoded = msgspec.json.encode(stated)
    assert encoded.startswith(msgspec.json.encode(plain)[:-1] + b',"state":{')
    assert content_digest(stated) != content_digest(plain)
    manifest = write_checkpoint(stated, tmp_path / "snap")
    restored = read_checkpoint(tmp_path / "snap", expected_digest=manifest.digest)
    assert restored.checkpoint.state == STATE and declared_state(restored.checkpoint) == STATE


def test_a_state_built_in_python_is_checked_like_a_decoded_one() -> None:
    with pytest.raises(TypeError):
        DeclaredState(keys={"release/version": 41})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        DeclaredState(anchors="release/version")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DeclaredState(failures={"feed": "closed"})  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        DeclaredState(obligations={"changelog": "retired"})  # type: ignore[dict-item]
    plain = NativeFold().build(_handoff_trace())
    for bad in (None, {"keys": {}}):
        with pytest.raises(TypeError):
            msgspec.structs.replace(plain, state=bad)
    with pytest.raises(msgspec.ValidationError):  # and in a checkpoint that decodes
        msgspec.json.decode(msgspec.json.encode(plain)[:-1] + b',"state":null}',
                            type=Checkpoint)


# -- what an external command or a plugin returns ---------------------------------------------


def _command(tmp_path: Path, state: str | None) -> list[str]:
    extra = "" if state is None else f', "state": {state}'
    path = tmp_path / "fold.py"
    path.write_text(textwrap.dedent(f"""
        import json, sys
        request = json.load(sys.stdin)
        owner = [e["content"] for e in request["events"] if e["role"] == "user"]
        sys.stdout.write('{{"protocol": "efold-fold-v1", "messages": '
                         + json.dumps([{{"role": "user", "content": " / ".join(owner)}}])
                         + ', "tools": [], "boundary_crossed": true{extra}}}')
    """))
    return [sys.executable, str(path)]


def test_an_external_command_returns_state(tmp_path: Path) -> None:
    fold = ExternalCommandFold("stateful", _command(tmp_path, STATE_JSON))
    checkpoint = fold.build(_handoff_trace())
    assert checkpoint.state == STATE and declared_state(checkpoint) == STATE


def test_an_external_command_without_state_declares_by_the_rule(tmp_path: Path) -> None:
    fold = ExternalCommandFold("plain", _command(tmp_path, None))
    checkpoint = fold.build(_handoff_trace())
    assert checkpoint.state is msgspec.UNSET
    assert declared_state(checkpoint) is None  # its one message is no handoff record
    assert b'"state":' not in msgspec.json.encode(checkpoint)


@pytest.mark.parametrize("state", [
    '{"keys": {"release/version": 41}}',  # a wrong type
    '{"keys": {}, "notes": "kept"}',  # an unknown key
    '{"failures": {"feed": "closed"}}',  # not a failure status
    '{"obligations": {"changelog": "retired"}}',  # not an obligation status
    '["release/version"]',  # not an object
    "null",  # omit the key to declare none
])
def test_an_external_command_with_a_bad_state_is_refused(tmp_path: Path, state: str) -> None:
    fold = ExternalCommandFold("bad-state", _command(tmp_path, state))
    with pytest.raises(PluginError) as refused:
        fold.build(_handoff_trace())
    assert refused.value.code is Code.FOLD_PLUGIN_INVALID


class _StatefulPlugin:
    """An entry-point plugin that returns the native checkpoint and a state of its own."""

    name = "stateful-plugin"

    def __init__(self, state: object) -> None:
        self._state = state

    def build(self, prefix: TracePrefix) -> Checkpoint:
        native = NativeFold().build(prefix)
        receipt = msgspec.structs.replace(native.receipt, arm=self.name)
        return msgspec.structs.replace(native, arm=self.name, receipt=receipt,
                                       state=self._state)


def test_a_plugin_returns_state_and_a_malformed_one_fails_the_plugin() -> None:
    own = DeclaredState(keys={"release/version": "0.5.0"})
    checkpoint = CheckedFold("stateful-plugin", _StatefulPlugin(own)).build(_handoff_trace())
    assert declared_state(checkpoint) == own  # the returned state wins over the record
    with pytest.raises(PluginError) as refused:
        CheckedFold("stateful-plugin", _StatefulPlugin({"keys": {}})).build(_handoff_trace())
    assert refused.value.code is Code.FOLD_PLUGIN_FAILED  # its own build raised
