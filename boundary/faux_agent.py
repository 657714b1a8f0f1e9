"""The faux agent: a scripted, deterministic agent that acts only on what it can see.

The offline counterpart of a model in a boundary case, as the faux reader is for
questions: it reads exactly the payload the guard admitted (Responses-shaped input
items: the checkpoint, the continuation stimulus, then every tool round so far) and
decides from the text there, nothing else. Its script is the case's ``faux`` section
(``FauxScript``): plans, each conditioned on a text that must be visible, and a
fallback plan without a condition, the naive continuation an agent takes when the
history it needed is gone.

Each round it answers one of (docs/boundary.md §6):

1. a conditioned plan is visible (its ``when`` text, case and spacing folded, appears in
   the visible text: messages, tool outputs, recall outputs): it is the plan;
2. otherwise, when the payload offers the history tools and the script names a
   ``recall`` query, it recalls first: ``history_search`` with that query, then
   ``history_get`` of the first hit, and decides again with their outputs visible;
3. otherwise the fallback plan.

It then emits the plan's actions one per round (each a ``function_call`` of a workspace
tool with the scripted arguments), and when none is left a final message. Actions the
payload already holds count as done, so the agent is a pure function of the payload.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

import msgspec

from efold.folds.checkpoint import HISTORY_GET, HISTORY_SEARCH

FINAL_TEXT: Final = "Done: the continuation is complete."
_SPACE = re.compile(r"\s+")


class FauxAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One scripted tool call: a workspace tool and its arguments."""

    tool: str
    arguments: dict[str, Any]


class FauxPlan(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A plan: taken when ``when`` is visible (``None``: the fallback, always last)."""

    actions: list[FauxAction]
    when: str | None = None


class FauxScript(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A case's ``faux`` section: the plans in order, and the recall query."""

    plans: list[FauxPlan]
    recall: str | None = None


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text.casefold()).strip()


def _texts(items: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            out.extend(str(p.get("text", "")) for p in item.get("content", ())
                       if isinstance(p, dict))
        elif kind == "function_call_output":
            out.append(str(item.get("output", "")))
    return out


def _stimulus_at(items: list[dict[str, Any]]) -> int:
    """The index of the last owner message before the first tool round of this run."""
    at = -1
    for index, item in enumerate(items):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            at = index
    return at


def _call(index: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "call_id": f"faux_call_{index:02d}", "name": name,
            "arguments": json.dumps(arguments, sort_keys=True)}


def _final() -> list[dict[str, Any]]:
    return [{"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": FINAL_TEXT}]}]


def choose_plan(script: FauxScript, visible: str) -> FauxPlan:
    """The first plan whose ``when`` is in ``visible`` (folded), else the fallback."""
    folded = _fold(visible)
    for plan in script.plans:
        if plan.when is None or _fold(plan.when) in folded:
            return plan
    return FauxPlan(actions=[])  # a script without a fallback: do nothing


def faux_agent(script: FauxScript) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """The responder playing the agent of ``script`` (module docstring)."""

    def respond(payload: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = list(payload.get("input", ()))
        start = _stimulus_at(items)
        done = [i for i in items[start + 1:] if i.get("type") == "function_call"]
        recalls = [c for c in done if c.get("name") in (HISTORY_SEARCH, HISTORY_GET)]
        acted = len(done) - len(recalls)
        plan = choose_plan(script, "\n".join(_texts(items)))
        tools = {t.get("name") for t in payload.get("tools", ()) if isinstance(t, dict)}
        if plan.when is None and acted == 0 and script.recall is not None \
                and {HISTORY_SEARCH, HISTORY_GET} <= tools:
            searched = [c for c in recalls if c.get("name") == HISTORY_SEARCH]
            if not searched:
                return [_call(len(done), HISTORY_SEARCH, {"query": script.recall})]
            if len(recalls) == 1:
                hit = _first_hit(items)
                if hit is not None:
                    return [_call(len(done), HISTORY_GET, {"id": hit})]
        if acted < len(plan.actions):
            action = plan.actions[acted]
            return [_call(len(done), action.tool, action.arguments)]
        return _final()

    return respond


def _first_hit(items: list[dict[str, Any]]) -> str | None:
    """The first record id of the last ``history_search`` output, if any."""
    for item in reversed(items):
        if item.get("type") != "function_call_output":
            continue
        try:
            found = json.loads(str(item.get("output", "")))
        except ValueError:
            return None
        results = found.get("results") if isinstance(found, dict) else None
        if isinstance(results, list) and results and isinstance(results[0], dict):
            hit = results[0].get("id")
            return hit if isinstance(hit, str) else None
        return None
    return None
