"""Payload accounting: the framing allowance H and the input budget U_k (docs/architecture.md §5).

    U_k = UTF8Bytes(JSON(final payload)) + Σ previous settled output tokens + H(payload)
    H   = 4096 per request + 256 per input item + 1024 per reasoning item
          + 1024 per tool + 256 per schema property (recursive) + 4096 if instructions

``U_k > I`` refuses before any hold. H deliberately overcounts (generous power-of-two
slabs with no proved backend derivation); the choices below err the same way:

- a reasoning item is also an input item (256 + 1024);
- a string ``input`` (Responses) is one input item; for Chat Completions every message
  is an input item;
- schema properties are counted through ``properties`` and ``patternProperties`` of
  every nested schema (``items``, ``prefixItems``, ``additionalProperties``,
  ``anyOf``/``oneOf``/``allOf``, ``not``, ``$defs``/``definitions``, conditionals);
- "instructions exist" means the Responses ``instructions`` key is present and not null.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

H_PER_REQUEST: Final = 4096
H_PER_INPUT_ITEM: Final = 256
H_PER_REASONING_ITEM: Final = 1024
H_PER_TOOL: Final = 1024
H_PER_SCHEMA_PROPERTY: Final = 256
H_INSTRUCTIONS: Final = 4096

_NESTED_SCHEMA_KEYS: Final = ("items", "additionalProperties", "not", "if", "then", "else",
                              "contains", "propertyNames", "unevaluatedItems",
                              "unevaluatedProperties", "additionalItems")
_SCHEMA_LIST_KEYS: Final = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAP_KEYS: Final = ("$defs", "definitions", "dependentSchemas")
_PROPERTY_MAP_KEYS: Final = ("properties", "patternProperties")


class PayloadShape(msgspec.Struct, frozen=True):
    """The counts H is computed from (produced by a wire format's payload check)."""

    input_items: int
    reasoning_items: int
    tools: int
    schema_properties: int
    has_instructions: bool

    def framing(self) -> int:
        """H for this payload, in tokens."""
        return (
            H_PER_REQUEST
            + H_PER_INPUT_ITEM * self.input_items
            + H_PER_REASONING_ITEM * self.reasoning_items
            + H_PER_TOOL * self.tools
            + H_PER_SCHEMA_PROPERTY * self.schema_properties
            + (H_INSTRUCTIONS if self.has_instructions else 0)
        )


def count_schema_properties(schema: Any) -> int:
    """Properties of a JSON schema, counted recursively through nested schemas."""
    if not isinstance(schema, dict):
        return 0
    total = 0
    for key in _PROPERTY_MAP_KEYS:
        props = schema.get(key)
        if isinstance(props, dict):
            total += len(props)
            total += sum(count_schema_properties(sub) for sub in props.values())
    for key in _NESTED_SCHEMA_KEYS:
        total += count_schema_properties(schema.get(key))
    for key in _SCHEMA_LIST_KEYS:
        subs = schema.get(key)
        if isinstance(subs, list):
            total += sum(count_schema_properties(sub) for sub in subs)
    for key in _SCHEMA_MAP_KEYS:
        subs = schema.get(key)
        if isinstance(subs, dict):
            total += sum(count_schema_properties(sub) for sub in subs.values())
    return total


def input_budget(body_bytes: int, prior_settled_output: int, shape: PayloadShape) -> int:
    """U_k, in tokens (bytes of the serialized body count one token each)."""
    return body_bytes + prior_settled_output + shape.framing()
