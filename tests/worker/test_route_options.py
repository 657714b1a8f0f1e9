"""Every request on a route carries the route's options, in its wire format, and passes
the guard's allowlist for that format."""

from __future__ import annotations

import msgspec
import pytest

from efold.guard import Contract, WireApi
from efold.guard.feasibility import first_request_budget
from efold.protocol.tasks import Route
from efold.worker.route import route_options

BASE = Route(provider="local", model="tiny", api="openai-chat", base_url="http://127.0.0.1:9/v1",
             effort=None, stream=False, catalog_file=None, catalog_sha256="0" * 64)


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, {"stream": False}),
    ({"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}),
    ({"max_output_tokens": 96}, {"stream": False, "max_completion_tokens": 96}),
    ({"max_output_tokens": 96, "max_tokens_field": "max_tokens"},
     {"stream": False, "max_tokens": 96}),
    ({"effort": "low"}, {"stream": False, "reasoning_effort": "low"}),
    ({"api": "openai-responses", "stream": True, "effort": "low", "max_output_tokens": 7},
     {"stream": True, "reasoning": {"effort": "low"}, "max_output_tokens": 7}),
    ({"api": "anthropic-messages", "max_output_tokens": 64},
     {"stream": False, "max_tokens": 64}),
    ({"api": "anthropic-messages", "stream": True, "effort": "high", "max_output_tokens": 64},
     {"stream": True, "max_tokens": 64, "output_config": {"effort": "high"}}),
])
def test_route_options_in_each_wire_format(changes: dict[str, object],
                                           expected: dict[str, object]) -> None:
    route = msgspec.structs.replace(BASE, **changes)
    options = route_options(route)
    assert options == expected
    contract = Contract(provider="local", model="tiny", api=WireApi(route.api),
                        base_url=route.base_url, effort=route.effort, stream=route.stream)
    if route.api == "openai-chat":
        payload = {"model": "tiny", "messages": [{"role": "user", "content": "q"}], **options}
    elif route.api == "anthropic-messages":
        payload = {"model": "tiny", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "q"}]}], **options}
    else:
        payload = {"model": "tiny", "input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "q"}]}], **options}
    assert first_request_budget(payload, contract) > 0  # the allowlist accepts it
