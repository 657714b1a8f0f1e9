"""An open campaign, as a new user builds one: their own agent conversation imported
with ``corpus import``, probes they wrote, and a fold of each kind (an installed entry
point, an external command, a compaction proxy) next to efold's reference arms.

* ``write_transcript(path)``: a fictional coding-agent session in the OpenAI Chat
  Completions message format (tool calls and results), long enough (about 40k
  characters) that every compacting fold folds it. Its facts are written as the fact
  lines efold's faux reader reads (``Label: value``), with one correction.
* ``PROBES``: the probe file the user writes for it (``<trace_id>.probes.toml``), one
  probe with an earlier boundary.
* ``guide_example(name)``: an example of docs/folds.md, the user's only guide.
* ``campaign_toml(...)``: the campaign naming all of it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "billing-migration"
_EXAMPLE = re.compile(r"<!-- example: ([a-z0-9-]+) -->\n```(\w+)\n(.*?)^```", re.S | re.M)


def guide_example(name: str) -> str:
    """The fenced example named ``name`` in docs/folds.md."""
    text = (ROOT / "docs" / "folds.md").read_text(encoding="utf-8")
    return next(m.group(3) for m in _EXAMPLE.finditer(text) if m.group(1) == name)


_FILLER = ("The log shows the worker draining its queue, retrying two jobs and settling. "
           "Nothing in this stretch changes the plan. ")


def transcript(filler: int = 12) -> list[dict[str, object]]:
    """The session's messages (deterministic); ``filler`` sizes each tool result."""
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "We are moving the billing service to the new cluster. "
         "House rule: never deploy on a Friday."},
    ]
    facts = [("Release ticket", "REL-4471"), ("Region", "eu-west-3"),
             ("Rollback window", "45 minutes"), ("Schema version", "v118")]
    for n in range(24):
        call_id = f"call_{n:03d}"
        path = f"deploy/part{n:02d}.log"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}]})
        body = _FILLER * filler
        if n < len(facts):
            label, value = facts[n]
            body = f"{label}: {value}\n" + body
        messages.append({"role": "tool", "tool_call_id": call_id, "content": body})
        messages.append({"role": "assistant", "content": f"Read {path}; nothing blocking."})
        if n == 12:
            messages.append({"role": "user", "content":
                             "Correction: the Region is now eu-central-2, not eu-west-3."})
            messages.append({"role": "assistant", "content": "Noted.\nRegion: eu-central-2"})
    messages.append({"role": "user", "content": "Good. Let's continue tomorrow."})
    messages.append({"role": "assistant", "content": "Understood; I will pick up from here."})
    return messages


def write_transcript(path: Path, filler: int = 12) -> Path:
    path.write_text(json.dumps({"messages": transcript(filler)}, indent=1), encoding="utf-8")
    return path


PROBES = '''\
[[probe]]
id = "ticket"
category = "tool_identifier"
question = "What is the current release ticket? Reply with the value only."
expected = ["REL-4471"]
value_kind = "identifier"

[[probe]]
id = "region"
category = "superseded_current"
question = "What is the current region? Reply with the value only."
expected = ["eu-central-2"]
superseded = ["eu-west-3"]
value_kind = "identifier"

[[probe]]
id = "schema"
category = "tool_identifier"
question = "What is the current schema version? Reply with the value only."
expected = ["v118"]
value_kind = "identifier"

[[probe]]
id = "region-before"
category = "tool_identifier"
question = "What is the current region? Reply with the value only."
expected = ["eu-west-3"]
value_kind = "identifier"
boundary = "e0012"
'''


ROLES = ("native", "compaction", "pack", "facts-store", "facts-tail", "squeeze")


def campaign_toml(*, suite: str, command_script: Path, proxy_script: Path, roles: tuple[str, ...] = ROLES,
                  top: str = "", extra: str = "", cap_usd: str = "60.00",
                  trigger_chars: int = 8000, proxy_timeout: int = 60) -> str:
    """Reference arms, then the three kinds of fold (``facts-store``: the installed
    entry point; ``facts-tail`` and ``squeeze``: the guide's command and proxy scripts); ``top`` adds top-level keys, ``extra`` appends tables."""
    return f"""\
name = "open-campaign"
suite = "{suite}"
roles = {json.dumps(list(roles))}
selection_seed = 7
schedule_seed = 7
cap_usd = "{cap_usd}"
{top}

[role.facts-tail]
command = [{json.dumps(sys.executable)}, {json.dumps(str(command_script))}]
timeout_seconds = 30

[role.squeeze]
command = [{json.dumps(sys.executable)}, {json.dumps(str(proxy_script))}]
proxy = {{ upstream_env = "OPENAI_BASE_URL", port_env = "PORT" }}
settings = {{ keep = 6, trigger_chars = {trigger_chars} }}
timeout_seconds = {proxy_timeout}
{extra}"""


EFOLD = str(Path(sys.executable).with_name("efold-controller"))


def efold_env(env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``efold(*args, cwd=...)``: run ``efold-controller`` with ``env``."""
    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([EFOLD, *args], cwd=cwd, capture_output=True, text=True,
                              timeout=1800, env=env)
    return run


efold = efold_env(dict(os.environ))


def field(out: str, name: str) -> str:
    return next(line.split(": ", 1)[1] for line in out.splitlines()
                if line.startswith(f"{name}: "))


def build_suite(tmp_path: Path, filler: int = 12) -> Path:
    """``corpus import`` the user's conversation, add their probes, validate."""
    source = write_transcript(tmp_path / f"{TRACE_ID}.json", filler)
    suite = tmp_path / "suite"
    imported = efold("corpus", "import", "openai-chat", str(source), "--out", str(suite),
                     cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    (suite / f"{TRACE_ID}.probes.toml").write_text(PROBES)
    checked = efold("corpus", "validate", str(suite), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return suite


def guide_scripts(tmp_path: Path) -> dict[str, Path]:
    """The guide's command fold and proxy, saved as a user would save them."""
    scripts = {"command_script": tmp_path / "facts_tail.py",
               "proxy_script": tmp_path / "tail_proxy.py"}
    scripts["command_script"].write_text(guide_example("command-fold"))
    scripts["proxy_script"].write_text(guide_example("proxy-fold"))
    return scripts
