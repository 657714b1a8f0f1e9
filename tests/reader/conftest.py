"""Fixtures for the faux extractive reader: a minimal reader loop (the worker's loop
does the same through the guard) and the original suite."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from efold.folds.checkpoint import Checkpoint
from efold.folds.lookup import LookupTool
from efold.folds.meter import Meter, MeterWitness
from efold.folds.request import checkpoint_to_request
from efold.folds.store import HistoryStore
from efold.worker.faux_reader import respond

MAX_ROUNDS = 10


@dataclass
class ReaderRun:
    answer: str
    witness: MeterWitness | None
    calls: list[dict[str, Any]] = field(default_factory=list)


def run_reader(checkpoint: Checkpoint, question: str, meter: Meter | None = None) -> ReaderRun:
    payload = checkpoint_to_request(checkpoint, question, model="faux", instructions="Answer the owner.")
    store = HistoryStore.build(checkpoint.store) if checkpoint.store is not None else None
    tool = LookupTool(store, meter) if store is not None else None
    calls: list[dict[str, Any]] = []
    try:
        for _ in range(MAX_ROUNDS):
            items = respond(payload)
            assert len(items) == 1
            item = items[0]
            if item["type"] == "message":
                return ReaderRun(item["content"][0]["text"], tool.witness() if tool else None, calls)
            assert item["type"] == "function_call" and tool is not None
            calls.append(item)
            output = tool.call(item["name"], item["arguments"])
            payload["input"].extend(
                [item, {"type": "function_call_output", "call_id": item["call_id"], "output": output}]
            )
        raise AssertionError("the reader did not answer within the round limit")
    finally:
        if store is not None:
            store.close()


@pytest.fixture
def reader() -> Callable[..., ReaderRun]:
    return run_reader
