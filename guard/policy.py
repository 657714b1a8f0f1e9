"""The guard's rules as data: what a registration's policy digest binds.

``contract_policy()`` returns a plain JSON-able document of every number and allowlist
the guard enforces (limits, H slabs, tiers, money unit and rounding, the estimate
scenario, the per-wire allowlists, the permit protocol version). Changing any rule
changes the document and so the digest of every registration made afterwards.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

from efold.guard import accounting, contract, money, permits
from efold.guard.estimate import ASSUMED_SCENARIO
from efold.guard.wire import chat_payload, compact_anthropic, messages_payload, responses_payload

POLICY_VERSION = "efold-guard-policy-v1"


def _plain(value: Any) -> Any:
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def contract_policy() -> dict[str, Any]:
    scenario = dataclasses.asdict(ASSUMED_SCENARIO)
    document: dict[str, Any] = _plain({
        "version": POLICY_VERSION,
        "contract_version": contract.CONTRACT_VERSION,
        "permit_protocol": permits.PERMIT_PROTOCOL_VERSION,
        "input_envelope": contract.INPUT_ENVELOPE,
        "max_output": contract.MAX_OUTPUT,
        "max_requests": contract.MAX_REQUESTS,
        "history_tools": list(contract.HISTORY_TOOLS),
        "framing": {
            "per_request": accounting.H_PER_REQUEST,
            "per_input_item": accounting.H_PER_INPUT_ITEM,
            "per_reasoning_item": accounting.H_PER_REASONING_ITEM,
            "per_tool": accounting.H_PER_TOOL,
            "per_schema_property": accounting.H_PER_SCHEMA_PROPERTY,
            "instructions": accounting.H_INSTRUCTIONS,
        },
        "money": {
            "usd_per_unit": str(money.USD_PER_UNIT),
            "rounding": "cost rounded up to a whole unit once per request",
            "tiers": dict(money.TIER_MULTIPLIERS),
            "absent_tier": money.ABSENT_TIER_MULTIPLIER,
            "absent_tier_without_service_tiers": money.TIERLESS_ABSENT_TIER_MULTIPLIER,
            "input_tiers": (
                "each call is priced at the highest catalog input-size tier whose "
                "above_tokens is strictly exceeded by its reported input, cached input "
                "included; below every threshold, the base rates"
            ),
            "rmax": (
                "ceil(2 * (I * max input-class rate + O * output rate)), each maximum over "
                "the base rates and every tier with above_tokens < I"
            ),
        },
        "estimate_scenario": scenario,
        "wire": {
            "openai-responses": {
                "top_level": responses_payload.TOP_LEVEL_KEYS,
                "stored_input_refused": responses_payload.STORED_INPUT_KEYS,
                "items": responses_payload.ITEM_KEYS,
                "parts": responses_payload.PART_KEYS,
                "tool": responses_payload.TOOL_KEYS,
                "include": responses_payload.INCLUDE_VALUES,
            },
            "openai-chat": {
                "top_level": chat_payload.TOP_LEVEL_KEYS,
                "messages": chat_payload.MESSAGE_KEYS,
                "tool": chat_payload.TOOL_KEYS,
                "function": chat_payload.FUNCTION_KEYS,
            },
            "anthropic-messages": {
                "top_level": messages_payload.TOP_LEVEL_KEYS,
                "server_side_refused": messages_payload.SERVER_SIDE_KEYS,
                "messages": messages_payload.MESSAGE_KEYS,
                "blocks": messages_payload.BLOCK_KEYS,
                "role_blocks": messages_payload.ROLE_BLOCKS,
                "tool": messages_payload.TOOL_KEYS,
                "tool_choice": messages_payload.TOOL_CHOICE_KEYS,
                "version": messages_payload.ANTHROPIC_VERSION,
                "compaction": {
                    "beta": compact_anthropic.ANTHROPIC_COMPACT_BETA,
                    "request": compact_anthropic.COMPACTION_KEYS,
                    "max_instructions_chars": compact_anthropic.MAX_INSTRUCTIONS_CHARS,
                    "block": compact_anthropic.COMPACTION_BLOCK_KEYS,
                },
            },
        },
    })
    return document
