"""What each suite's traces must look like: counts, sizes, families and seeds.

These are the numbers of docs/architecture.md §6 and the reference "Suites" section; validation checks
every trace against the shape of its suite, and the hard generator is built to land
inside the same bounds (its tests run the validator on every allowed seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from efold.corpus.model import Category

ORIGINAL: Final = "original"
HARD: Final = "hard"
HARD_DISTRACTORS: Final = "hard-distractors"
SUITES: Final = (ORIGINAL, HARD, HARD_DISTRACTORS)

ORIGINAL_FAMILIES: Final = ("stage-hire", "workshop-move", "cafe-fitout", "archive-scan")
# Cycled by seed: 101 kiln, 102 cider, ..., 108 print, 109 kiln again with fresh names.
HARD_FAMILIES: Final = (
    "kiln", "cider", "lighting", "localisation", "grant", "oven", "trailer", "print",
)
HARD_SEED_MIN: Final = 101
HARD_SEED_MAX: Final = 124
HARD_DEFAULT_SEEDS: Final = tuple(range(101, 109))

KIB: Final = 1024
# Bounds the hard suite is designed against (the cold-rebuild arm's projection).
TEXT_WINDOW: Final = 64  # last 64 text messages
PROJECTION_RECORDS: Final = 32  # newest 32 tool records ...
PROJECTION_BYTES: Final = 64 * KIB  # ... or 64 KiB of them
OVERSIZED_HEAD: Final = 16 * KIB  # an oversized result keeps its first 16 KiB


def hard_family(seed: int) -> str:
    return HARD_FAMILIES[(seed - HARD_SEED_MIN) % len(HARD_FAMILIES)]


def hard_trace_id(seed: int, *, distractors: bool = False) -> str:
    return f"gen-{hard_family(seed)}-{seed}" + ("-distractors" if distractors else "")


@dataclass(frozen=True)
class SuiteShape:
    """Inclusive bounds for one suite (None = not constrained)."""

    families: tuple[str, ...]
    sessions: tuple[int, int]
    owner_turns: tuple[int, int]
    tool_records: tuple[int, int]
    steers: int
    probes: tuple[int, int]
    categories: frozenset[Category]
    days_are_sessions: bool
    record_bytes: tuple[int, int] | None = None
    oversized_records: tuple[int, int] | None = None  # results over OVERSIZED_HEAD
    token_estimate: tuple[int, int] | None = None  # chars/4 at the probe


_SEVEN: Final = frozenset({
    Category.TOOL_IDENTIFIER, Category.ACTIVE_CONSTRAINT, Category.SUPERSEDED_CURRENT,
    Category.COMMITMENT_STATUS, Category.ARTIFACT_STATUS, Category.NEXT_ACTION,
    Category.ABSTENTION,
})
_HARD_SHAPE: Final = SuiteShape(
    families=HARD_FAMILIES,
    sessions=(7, 10),
    owner_turns=(84, 116),
    tool_records=(64, 96),
    steers=3,
    probes=(17, 17),
    categories=frozenset(Category) - {Category.BOUNDARY},  # a case is never a suite trace
    days_are_sessions=False,
    record_bytes=(8 * KIB, 64 * KIB),
    oversized_records=(2, 3),
    token_estimate=(212_000, 232_000),
)
# The original traces carry realistic tool results (quoted mail threads, whole pages and
# documents, chat logs; about 38 KiB per trace). Their chars/4 bound keeps each one well
# above the smallest compaction trigger (32,000 x 0.2 = 6,400 tokens, 4,000-token recent
# tail), so `compaction` crosses its boundary at the probe and `compaction-2` still reaches
# the trigger after its mid-trace compaction, while every tool record still fits the
# cold-rebuild projection (at most 32 records and 64 KiB; tests/corpus checks it).
ORIGINAL_TOKEN_ESTIMATE: Final = (11_000, 14_000)
SHAPES: Final[dict[str, SuiteShape]] = {
    ORIGINAL: SuiteShape(
        families=ORIGINAL_FAMILIES,
        sessions=(5, 5),
        owner_turns=(36, 38),
        tool_records=(24, 32),  # "about 28"
        steers=1,
        probes=(13, 13),
        categories=_SEVEN,
        days_are_sessions=True,
        token_estimate=ORIGINAL_TOKEN_ESTIMATE,
    ),
    HARD: _HARD_SHAPE,
    HARD_DISTRACTORS: _HARD_SHAPE,
}
