"""An external-command fold: any program, in any language, speaking JSON over stdio.

Protocol ``efold-fold-v1``. efold starts the command (stderr discarded since it may
carry trace text), writes ONE JSON object to its stdin and closes it::

    {"protocol": "efold-fold-v1", "arm": "<arm name>", "trace_id": "<id>",
     "events": [<event>, ...], "settings": {...}}

``settings`` is the campaign role's settings table, present only when the role has one.
``prior`` is present only when folds repeat (``efold-controller certify``): the summary
the previous cycle stored, ``{"cycle": n, "messages": [...], "first_kept_id": id |
null}`` (``fold.PriorSummary``); a command may ignore it.

Each event is exactly a trace JSONL event line (``corpus/FORMS.md`` §1): ``kind``
("message"), ``id``, ``session``, ``day``, ``role``, ``content`` and, when set,
``tool_calls``, ``tool_call_id``, ``name``, ``source``, ``steer``. Never probes.

The command must write ONE JSON object to stdout and exit 0::

    {"protocol": "efold-fold-v1",
     "messages": [{"role": "user" | "assistant" | "tool", "content": "<text>",
                   "tool_calls": [{"id": "...", "type": "function",
                                   "function": {"name": "...", "arguments": "<json>"}}],
                   "tool_call_id": "...", "name": "..."}, ...],
     "tools": [] | ["history_search", "history_get"],
     "boundary_crossed": true | false,
     "state": {"keys": {"<key>": "<value>"}, "anchors": ["<key>"],
               "failures": {"<id>": "open" | "retired"},
               "obligations": {"<id>": "open" | "done"}}}

``tool_calls``, ``tool_call_id`` and ``name`` are optional; unknown keys are refused.
``state`` is optional: the fold's declared state (``folds.state``), validated closed
(each of its four members optional; unknown keys, wrong types or ``null`` are refused);
without it the checkpoint's state is derived from its visible messages by the rule of
``folds.state``.
Asking for the tools gives the reader efold's standard retained store over the same
events (privacy rule included) where the campaign's probe mode offers a lookup
(``folds.probe_modes``; the default, recall-only, offers none); a command cannot supply
store content. efold computes
the receipt itself from the returned messages: a command's own counts are not trusted.

Failures, each a ``PluginError`` with its code: the command runs past ``timeout_s``
(``fold_plugin_timeout``; it is killed), writes more than ``max_output_bytes``
(``fold_plugin_output_too_large``; killed), exits non-zero or cannot start
(``fold_plugin_failed``), or writes anything that is not a valid response
(``fold_plugin_invalid``).

Containment: the command stays in its caller's process group and session (no
``setsid``), with the caller's environment unless ``env`` is given. In a prep child that
is the launch's group and environment, so the command and everything it starts are
found, journaled and re-proven by the controller's containment like any member of the
launch (its group, parent links, the launch marker). This module kills only the command
itself on a failure; whatever it left behind is the controller's to contain, and a
finished prep child that left processes behind stops the run (``lookup_worker_lost``).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any, Literal

import msgspec

from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.checkpoint import LOOKUP_TOOLS, BoundaryEvidence, Checkpoint, ReaderMessage
from efold.folds.errors import PluginError
from efold.folds.fold import PriorSummary, TracePrefix, build_checkpoint, checked
from efold.folds.retention import retain
from efold.folds.state import DeclaredState
from efold.folds.transcript import session_transcript

PROTOCOL = "efold-fold-v1"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT_BYTES = 32 * 1024 * 1024
_EXIT_POLL_S = 0.005


class _Request(msgspec.Struct, frozen=True, omit_defaults=True):
    protocol: str
    arm: str
    trace_id: str
    events: list[Event]
    settings: dict[str, Any] | None = None  # the role's settings; absent when it has none
    prior: PriorSummary | None = None  # the previous cycle's summary; absent unless repeated


class _Response(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    protocol: Literal["efold-fold-v1"]
    messages: list[ReaderMessage]
    tools: list[str]
    boundary_crossed: bool
    state: DeclaredState | msgspec.UnsetType = msgspec.UNSET  # absent: none returned


class ExternalCommandFold:
    """A fold implemented by an external command (see the module docstring)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a command")
        self._name = name
        self._argv = list(argv)
        self._timeout_s = timeout_s
        self._max_output_bytes = max_output_bytes
        self._env = None if env is None else dict(env)
        self._cwd = cwd

    @property
    def name(self) -> str:
        return self._name

    def build(self, prefix: TracePrefix) -> Checkpoint:
        request = msgspec.json.encode(
            _Request(protocol=PROTOCOL, arm=self._name, trace_id=prefix.trace_id,
                     events=prefix.events, settings=prefix.settings or None,
                     prior=None if prefix.prior is msgspec.UNSET else prefix.prior)
        )
        return decode_output(self._name, self._run(request), prefix)

    # -- the child process ---------------------------------------------------------------

    def _run(self, request: bytes) -> bytes:
        deadline = time.monotonic() + self._timeout_s
        try:
            process = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                env=self._env,
                cwd=self._cwd,
            )
        except OSError as exc:
            raise PluginError(Code.FOLD_PLUGIN_FAILED, f"{self._name}: cannot start") from exc
        stdin, stdout = process.stdin, process.stdout
        if stdin is None or stdout is None:  # Popen made both pipes, or raised
            _kill(process)
            raise PluginError(Code.FOLD_PLUGIN_FAILED, f"{self._name}: no pipes")
        writer = threading.Thread(target=_feed, args=(stdin, request), daemon=True)
        writer.start()
        try:
            output = self._collect(stdout, deadline)
            self._await_exit(process, deadline)
        except BaseException:
            _kill(process)
            raise
        finally:
            writer.join(timeout=1.0)
            stdout.close()
        process.wait()
        if process.returncode != 0:
            raise PluginError(Code.FOLD_PLUGIN_FAILED, f"{self._name}: exit status {process.returncode}")
        return output

    def _collect(self, stdout: IO[bytes], deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        fd = stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PluginError(Code.FOLD_PLUGIN_TIMEOUT, f"{self._name}: timed out")
                if not selector.select(remaining):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > self._max_output_bytes:
                    raise PluginError(
                        Code.FOLD_PLUGIN_OUTPUT_TOO_LARGE,
                        f"{self._name}: output exceeds {self._max_output_bytes} bytes",
                    )
                chunks.append(chunk)

    def _await_exit(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        """Wait for the leader to exit WITHOUT reaping it (WNOWAIT), until the deadline."""
        while True:
            result = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if result is not None:
                return
            if time.monotonic() >= deadline:
                raise PluginError(Code.FOLD_PLUGIN_TIMEOUT, f"{self._name}: timed out")
            time.sleep(_EXIT_POLL_S)


def decode_output(name: str, output: bytes, prefix: TracePrefix) -> Checkpoint:
    """The checkpoint a command's stdout stands for, or ``PluginError``
    (``fold_plugin_invalid``): the one decoder of a command's untrusted bytes."""
    try:
        response = msgspec.json.decode(output, type=_Response)
    except msgspec.DecodeError as exc:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: malformed output") from exc
    if response.tools not in ([], list(LOOKUP_TOOLS)):
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: tools must be none or both lookup tools")
    retained = retain(session_transcript(prefix.events)) if response.tools else None
    checkpoint = build_checkpoint(
        name, prefix, response.messages, response.tools,
        BoundaryEvidence(kind="external", verified=response.boundary_crossed), [],
        store=retained,
    )
    if isinstance(response.state, DeclaredState):
        checkpoint = msgspec.structs.replace(checkpoint, state=response.state)
    try:
        return checked(checkpoint, name, prefix)
    except PluginError:
        raise
    except Exception as exc:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{name}: invalid checkpoint") from exc


def _feed(stdin: IO[bytes], data: bytes) -> None:
    try:
        stdin.write(data)
        stdin.close()
    except OSError:
        pass  # the command stopped reading; its output (or exit status) decides


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command, then reap it. Safe by pid: an unreaped child's pid is still
    its own (every caller reaches here before ``wait``)."""
    process.kill()
    process.wait()
