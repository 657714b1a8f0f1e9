"""A proxy fold: a compactor that ships as an OpenAI-compatible proxy between an agent
and its model, measured as efold measures any fold.

``ProxyFold.build`` starts the proxy's command on loopback, told its upstream (efold's
``CaptureEndpoint``, ``folds.capture``) and its port through the two environment
variables the campaign names, and replays the conversation through it as an agent
would: before every assistant message of the session transcript it sends the whole
conversation so far (``POST /v1/chat/completions``, non-streamed, no tools), and the
capture endpoint answers each forward with the assistant message the trace has next.
At the boundary it sends the whole conversation once more: the messages the proxy
forwards for that last request are the checkpoint.

* system or developer messages the proxy adds become owner-channel (``user``)
  messages, where efold's own folds put injected blocks; content given as parts is its
  text. The checkpoint is checked like any plugin's (``fold.checked``).
* the boundary is crossed when the forwarded conversation differs from the one sent
  (the proxy compacted); a proxy that forwarded it unchanged did not fold, and every
  slot of the checkpoint is excluded (``boundary_unverified``).
* a call the capture endpoint does not serve marks the boundary unverified with
  ``unsupported_calls`` (``fold_proxy_unsupported_call``): excluded, never scored.
* no lookup tools: a proxy keeps no store efold can read.

The proxy runs in a session of its own (so that efold can end its whole process group)
with the prep child's environment, ``env`` added, ``HOME`` and ``EFOLD_FOLD_DATA_DIR``
set to its private data directory (its working directory too unless ``cwd`` is given),
``EFOLD_FOLD_SETTINGS`` set to the role's settings as JSON, stdin from ``/dev/null`` and
stdout and stderr appended to ``proxy.log`` in the data directory. It still carries the
launch marker, so the controller's containment finds whatever it leaves. Whatever
happens, the proxy's group gets SIGTERM, then SIGKILL after ``STOP_GRACE_S``, and its
leader is reaped before ``build`` returns.

Failures: the proxy never listens within ``timeout_s`` or exits first
(``fold_proxy_not_ready``); the replay outlasts ``timeout_s`` (``fold_plugin_timeout``);
the proxy answers an agent request with an error, or answers it without forwarding it
(``fold_plugin_failed``); a summariser failure is re-raised as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from efold.corpus.model import Event
from efold.errors import Code
from efold.folds.capture import CaptureEndpoint, Summarise, content_text, message_key
from efold.folds.checkpoint import BoundaryEvidence, Checkpoint, ReaderMessage
from efold.folds.errors import FoldError, PluginError
from efold.folds.fold import TracePrefix, build_checkpoint, checked
from efold.folds.request import chat_message
from efold.folds.transcript import reader_message, session_transcript

STOP_GRACE_S = 2.0
_READY_POLL_S = 0.02
DATA_DIR_ENV = "EFOLD_FOLD_DATA_DIR"
SETTINGS_ENV = "EFOLD_FOLD_SETTINGS"
LOG_NAME = "proxy.log"


class ProxyFold:
    """A fold implemented by an OpenAI-compatible proxy (see the module docstring)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        upstream_env: str,
        port_env: str,
        model: str,
        context_window: int,
        summarise: Summarise,
        data_dir: Path,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a command")
        self._name = name
        self._argv = list(argv)
        self._upstream_env = upstream_env
        self._port_env = port_env
        self._model = model
        self._context_window = context_window
        self._summarise = summarise
        self._data_dir = data_dir
        self._timeout_s = timeout_s
        self._env = dict(os.environ if env is None else env)
        self._cwd = cwd

    @property
    def name(self) -> str:
        return self._name

    def build(self, prefix: TracePrefix) -> Checkpoint:
        deadline = time.monotonic() + self._timeout_s
        transcript = session_transcript(prefix.events)
        sent = [chat_message(reader_message(e)) for e in transcript]
        self._data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with CaptureEndpoint(model=self._model, context_window=self._context_window,
                             summarise=self._summarise) as capture:
            port = _free_port()
            process = self._start(capture.port, port, prefix)
            try:
                _await_listening(self._name, process, port, deadline)
                for k, event in enumerate(transcript):
                    if event.role == "assistant" and k > 0:  # an agent asks with something
                        self._exchange(capture, port, sent[:k], sent[k], deadline)
                forwarded = self._exchange(capture, port, sent, None, deadline)
            finally:
                _stop(process)
        return self._checkpoint(prefix, sent, forwarded, capture.unsupported)

    # -- the proxy process ---------------------------------------------------------------

    def _start(self, upstream_port: int, port: int, prefix: TracePrefix) -> subprocess.Popen[bytes]:
        env = dict(self._env)
        env.update({
            self._upstream_env: f"http://127.0.0.1:{upstream_port}/v1",
            self._port_env: str(port),
            DATA_DIR_ENV: str(self._data_dir),
            "HOME": str(self._data_dir),
            SETTINGS_ENV: json.dumps(prefix.settings, sort_keys=True),
        })
        try:
            with open(self._data_dir / LOG_NAME, "ab") as log:
                return subprocess.Popen(
                    self._argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    close_fds=True, env=env, cwd=self._cwd or str(self._data_dir),
                    start_new_session=True,
                )
        except OSError as exc:
            raise PluginError(Code.FOLD_PLUGIN_FAILED, f"{self._name}: cannot start") from exc

    # -- the replay ----------------------------------------------------------------------

    def _exchange(self, capture: CaptureEndpoint, port: int, messages: list[dict[str, Any]],
                  reply: dict[str, Any] | None, deadline: float) -> list[dict[str, Any]]:
        """Send one agent request through the proxy; the messages it forwarded."""
        capture.expect(messages, reply)
        body = {"model": self._model, "messages": messages, "stream": False}
        status = _post(self._name, port, body, deadline)
        if capture.failure is not None:
            raise capture.failure
        if status != 200:
            raise PluginError(Code.FOLD_PLUGIN_FAILED,
                              f"{self._name}: answered an agent request with HTTP {status}")
        if capture.forwarded is None:
            raise PluginError(Code.FOLD_PLUGIN_FAILED,
                              f"{self._name}: answered an agent request without forwarding it "
                              "(or changed its newest message)")
        return capture.forwarded

    def _checkpoint(self, prefix: TracePrefix, sent: list[dict[str, Any]],
                    forwarded: list[dict[str, Any]], unsupported: list[str]) -> Checkpoint:
        try:
            messages = [_reader_message(m) for m in forwarded]
        except (TypeError, ValueError, KeyError, msgspec.ValidationError) as exc:
            raise PluginError(Code.FOLD_PLUGIN_INVALID,
                              f"{self._name}: forwarded a message efold cannot read") from exc
        folded = [message_key(m) for m in forwarded] != [message_key(m) for m in sent]
        boundary = BoundaryEvidence(kind="proxy", verified=folded and not unsupported,
                                    unsupported_calls=len(unsupported))
        built = build_checkpoint(self._name, prefix, messages, [], boundary, [])
        try:
            return checked(built, self._name, prefix)
        except FoldError:
            raise
        except Exception as exc:
            raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{self._name}: invalid checkpoint") from exc


def _reader_message(message: dict[str, Any]) -> ReaderMessage:
    """A forwarded chat message as a checkpoint message (system and developer become
    the owner's channel); ``msgspec.ValidationError`` when it is not one."""
    role = message["role"]
    text = content_text(message.get("content"))
    if role in ("system", "developer", "user"):
        return ReaderMessage(role="user", content=text)
    if role == "tool":
        return ReaderMessage(role="tool", content=text, tool_call_id=str(message["tool_call_id"]))
    if role != "assistant":
        raise ValueError(f"role {role!r}")
    calls = [{"id": c["id"], "type": "function",
              "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
             for c in message.get("tool_calls") or ()]
    return msgspec.convert({"role": "assistant", "content": text, "tool_calls": calls or None},
                           ReaderMessage)


def _free_port() -> int:
    """A loopback port free now (the proxy binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _await_listening(name: str, process: subprocess.Popen[bytes], port: int,
                     deadline: float) -> None:
    while True:
        if _exited(process):
            raise PluginError(Code.FOLD_PROXY_NOT_READY, f"{name}: exited before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise PluginError(Code.FOLD_PROXY_NOT_READY, f"{name}: not listening on port {port}")
        time.sleep(_READY_POLL_S)


def _post(name: str, port: int, body: dict[str, Any], deadline: float) -> int:
    # Imported here: http.client (with ssl and email) is ~15 ms of a process's start,
    # the fork-server template's among them, and only a proxy fold's requests need it.
    import http.client

    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise PluginError(Code.FOLD_PLUGIN_TIMEOUT, f"{name}: timed out")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=remaining)
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    except TimeoutError as exc:
        raise PluginError(Code.FOLD_PLUGIN_TIMEOUT, f"{name}: timed out") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise PluginError(Code.FOLD_PLUGIN_FAILED, f"{name}: the agent request failed") from exc
    finally:
        connection.close()


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the proxy's leader has exited, WITHOUT reaping it: its unreaped zombie
    keeps its process group number from being reused while efold still signals it."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the proxy's group, SIGKILL the group after the grace (or at once when the
    leader has gone), then reap the leader."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    end = time.monotonic() + STOP_GRACE_S
    while not _exited(process) and time.monotonic() < end:
        time.sleep(_READY_POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def deterministic_summary(messages: list[dict[str, Any]]) -> str:
    """A proxy's own call answered offline: the deterministic summariser's summary of
    its messages (system text as owner text, tool calls and results as events)."""
    from efold.folds.summariser import summarise

    events: list[Event] = []
    for n, m in enumerate(messages, 1):
        role = m.get("role") if isinstance(m, dict) else None
        text = content_text(m.get("content")) if isinstance(m, dict) else ""
        if role not in ("user", "assistant", "tool", "system", "developer"):
            continue
        if role == "tool":
            events.append(Event(id=f"m{n:04d}", session=1, day=1, role="user",
                                content=f"Tool result: {text}"))
        else:
            events.append(Event(id=f"m{n:04d}", session=1, day=1,
                                role="assistant" if role == "assistant" else "user",
                                content=text))
    return summarise(events).render()
