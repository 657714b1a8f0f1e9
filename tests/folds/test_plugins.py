"""Plugins: the ``efold.folds`` entry-point group and the external-command fold."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import sys
import textwrap
import time

import pytest

from efold.errors import Code
from efold.folds.errors import FoldError, PluginError
from efold.folds.external import ExternalCommandFold
from efold.folds.registry import BUILTIN_ARMS, arm_names, get_fold, plugin_arms

PLUGIN_MODULE = '''
from efold.folds.arms import NativeFold
from efold.folds.fold import build_receipt
from efold.folds.checkpoint import BoundaryEvidence, Checkpoint, ReaderMessage


class TailFold:
    """Keeps only the last message: a deliberately forgetful third-party fold."""

    name = "tail-only"

    def build(self, prefix):
        messages = [ReaderMessage(role="user", content=prefix.events[-1].content)]
        receipt = build_receipt(arm=self.name, prefix=prefix, messages=messages, tools=[],
                                boundary=BoundaryEvidence(kind="external", verified=True), pressure=[])
        return Checkpoint(arm=self.name, trace_id=prefix.trace_id, messages=messages, tools=[],
                          receipt=receipt)


class LyingFold(TailFold):
    name = "liar"

    def build(self, prefix):
        import msgspec
        built = super().build(prefix)
        return msgspec.structs.replace(built, arm="liar", tools=["history_search", "history_get"])


class Crashing:
    name = "crashing"

    def build(self, prefix):
        raise RuntimeError("plugin bug")


def misnamed():
    return TailFold()
'''


@pytest.fixture
def installed_plugins(tmp_path, monkeypatch):
    """A tiny distribution installed into a temp dir on sys.path (dist-info + module)."""
    site = tmp_path / "site"
    (site / "tinyfolds").mkdir(parents=True)
    (site / "tinyfolds" / "__init__.py").write_text(PLUGIN_MODULE)
    info = site / "tinyfolds-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyfolds\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [efold.folds]
            tail-only = tinyfolds:TailFold
            liar = tinyfolds:LyingFold
            crashing = tinyfolds:Crashing
            misnamed = tinyfolds:misnamed
            native = tinyfolds:TailFold
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield
    sys.modules.pop("tinyfolds", None)


def test_builtin_arms_are_registered():
    assert list(BUILTIN_ARMS) == [
        "native", "native-lookup", "cold-rebuild", "compaction", "compaction-2", "ceiling",
        "store",
        "store-compaction", "pack", "restart-switch-compact", "ledger-cold", "openai-compact",
        "anthropic-compact",
    ]
    with pytest.raises(FoldError) as unknown:
        get_fold("no-such-arm")
    assert unknown.value.code is Code.FOLD_UNKNOWN


def test_an_entry_point_plugin_builds_a_checked_checkpoint(installed_plugins, synthetic):
    names, rejected = plugin_arms()
    assert "tail-only" in names and "tail-only" in arm_names()
    # a plugin claiming a built-in name is rejected and listed, never preferred
    assert [(r.name, r.code) for r in rejected] == [("native", Code.FOLD_PLUGIN_INVALID)]
    assert type(get_fold("native")).__module__ == "efold.folds.arms"
    t = synthetic()
    t.owner("first")
    t.owner("last words")
    checkpoint = get_fold("tail-only").build(t.prefix())
    assert [m.content for m in checkpoint.messages] == ["last words"]
    assert checkpoint.arm == "tail-only" and checkpoint.receipt.source_events == 2


def _refusal(synthetic, build) -> Code:
    """The code of the ``PluginError`` that ``build`` raises on a one-message trace."""
    t = synthetic()
    t.owner("hello")
    with pytest.raises(PluginError) as refused:
        build(t.prefix())
    return refused.value.code


@pytest.mark.parametrize(
    ("name", "code"),
    [("liar", Code.FOLD_PLUGIN_INVALID), ("crashing", Code.FOLD_PLUGIN_FAILED), ("misnamed", Code.FOLD_PLUGIN_INVALID)],
)
def test_misbehaving_plugins_are_named_errors(installed_plugins, synthetic, name, code):
    assert _refusal(synthetic, lambda prefix: get_fold(name).build(prefix)) is code


def _script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "fold.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


GOOD_FOLD = """
import json, sys
request = json.load(sys.stdin)
assert request["protocol"] == "efold-fold-v1"
owner = [e for e in request["events"] if e["role"] == "user"]
messages = [{"role": "user", "content": "Summary: " + " / ".join(e["content"] for e in owner)}]
json.dump({"protocol": "efold-fold-v1", "messages": messages,
           "tools": ["history_search", "history_get"], "boundary_crossed": True}, sys.stdout)
"""


def test_external_command_fold_speaks_json_over_stdio(tmp_path, synthetic):
    t = synthetic()
    t.owner("alpha")
    t.tool("Account reference: ACC-7F3K-219")
    t.owner("beta")
    fold = ExternalCommandFold("summary-cli", _script(tmp_path, GOOD_FOLD))
    checkpoint = fold.build(t.prefix())
    assert [m.content for m in checkpoint.messages] == ["Summary: alpha / beta"]
    assert checkpoint.tools == ["history_search", "history_get"]
    assert checkpoint.store is not None and len(checkpoint.store.records) == 4
    receipt = checkpoint.receipt
    assert receipt.boundary.kind == "external" and receipt.boundary.verified
    assert receipt.messages == 1 and receipt.visible_chars == len("Summary: alpha / beta")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("import sys; sys.stdout.write('not json')", Code.FOLD_PLUGIN_INVALID),
        (
            "import json, sys; json.dump({'protocol': 'efold-fold-v1', 'messages': [], "
            "'tools': [], 'boundary_crossed': True, 'extra': 1}, sys.stdout)",
            Code.FOLD_PLUGIN_INVALID,
        ),
        (
            "import json, sys; json.dump({'protocol': 'efold-fold-v1', 'messages': "
            "[{'role': 'tool', 'content': 'x', 'tool_call_id': 'nope'}], 'tools': [], "
            "'boundary_crossed': True}, sys.stdout)",
            Code.FOLD_PLUGIN_INVALID,
        ),
        (
            "import json, sys; json.dump({'protocol': 'efold-fold-v1', 'messages': [], "
            "'tools': ['history_search'], 'boundary_crossed': True}, sys.stdout)",
            Code.FOLD_PLUGIN_INVALID,
        ),
        ("import sys; sys.exit(3)", Code.FOLD_PLUGIN_FAILED),
    ],
)
def test_external_command_failures_are_named(tmp_path, synthetic, body, code):
    assert _refusal(synthetic, ExternalCommandFold("bad", _script(tmp_path, body)).build) is code


def test_external_command_output_limit(tmp_path, synthetic):
    body = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    fold = ExternalCommandFold("chatty", _script(tmp_path, body), max_output_bytes=200_000)
    assert _refusal(synthetic, fold.build) is Code.FOLD_PLUGIN_OUTPUT_TOO_LARGE


def test_external_command_timeout_kills_the_command_and_keeps_its_children_in_our_group(tmp_path, synthetic):
    pid_file = tmp_path / "grandchild.pid"
    body = f"""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open({str(pid_file)!r}, "w").write(str(child.pid))
    time.sleep(60)
    """
    fold = ExternalCommandFold("sleepy", _script(tmp_path, body), timeout_s=1.0)
    started = time.monotonic()
    assert _refusal(synthetic, fold.build) is Code.FOLD_PLUGIN_TIMEOUT
    assert time.monotonic() - started < 10
    grandchild = int(pid_file.read_text())
    try:
        # The command itself was killed; what it started stays in OUR process group
        # (no setsid), where the caller's containment finds it: in a prep child, the
        # launch group the controller contains.
        with open(f"/proc/{grandchild}/stat") as stat_file:
            fields = stat_file.read().rsplit(")", 1)[1].split()
        assert fields[0] not in ("Z", "X")
        assert int(fields[2]) == os.getpgrp()
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_external_command_that_cannot_start(tmp_path, synthetic):
    fold = ExternalCommandFold("missing", [str(tmp_path / "no-such-binary")])
    assert _refusal(synthetic, fold.build) is Code.FOLD_PLUGIN_FAILED


def test_external_command_receives_no_probe_fields(tmp_path, synthetic):
    t = synthetic()
    t.owner("hello")
    dump = tmp_path / "request.json"
    body = f"""
    import json, sys
    data = sys.stdin.read()
    open({str(dump)!r}, "w").write(data)
    json.dump({{"protocol": "efold-fold-v1", "messages": [], "tools": [], "boundary_crossed": False}}, sys.stdout)
    """
    checkpoint = ExternalCommandFold("spy", _script(tmp_path, body)).build(t.prefix())
    request = json.loads(dump.read_text())
    assert set(request) == {"protocol", "arm", "trace_id", "events"}
    assert set(request["events"][0]) <= {
        "kind", "id", "session", "day", "role", "content", "tool_calls", "tool_call_id", "name", "source", "steer",
    }
    assert not checkpoint.receipt.boundary.verified
    assert os.path.exists(dump)
