"""What each suite's traces must look like: counts, sizes, families and seeds.

These are the numbers of docs/architecture.md §6 and the reference "Suites" section; validation checks
every trace against the shape of its suite, and the hard generator is built to land
inside the same bounds (its tests run the validator on every allowed seed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from efold.corpus.model import Category

ORIGINAL: Final = "original"
MEDIUM: Final = "medium"
HARD: Final = "hard"
HARD_DISTRACTORS: Final = "hard-distractors"
SUITES: Final = (ORIGINAL, MEDIUM, HARD, HARD_DISTRACTORS)
# The suites generated from seeds (corpus.generator): the same layout, facts and probes,
# at two sizes. ``medium`` is sized so that a whole trace still fits a 272,000-token
# input envelope counted one token per byte sent (so ``native`` is the paired reference)
# while the cold-rebuild projection, the oversized-record head and the compaction
# trigger each lose something; ``hard`` is four times longer than any envelope.
GENERATED: Final = (MEDIUM, HARD, HARD_DISTRACTORS)

ORIGINAL_FAMILIES: Final = ("stage-hire", "workshop-move", "cafe-fitout", "archive-scan")
# Cycled by seed: 101 kiln, 102 cider, ..., 108 print, 109 kiln again with fresh names.
HARD_FAMILIES: Final = (
    "kiln", "cider", "lighting", "localisation", "grant", "oven", "trailer", "print",
)
HARD_SEED_MIN: Final = 101
HARD_SEED_MAX: Final = 124
HARD_DEFAULT_SEEDS: Final = tuple(range(101, 109))
MEDIUM_DEFAULT_SEEDS: Final = tuple(range(101, 105))

KIB: Final = 1024
# Bounds the hard suite is designed against (the cold-rebuild arm's projection).
TEXT_WINDOW: Final = 64  # last 64 text messages
PROJECTION_RECORDS: Final = 32  # newest 32 tool records ...
PROJECTION_BYTES: Final = 64 * KIB  # ... or 64 KiB of them
OVERSIZED_HEAD: Final = 16 * KIB  # an oversized result keeps its first 16 KiB


def hard_family(seed: int) -> str:
    return HARD_FAMILIES[(seed - HARD_SEED_MIN) % len(HARD_FAMILIES)]


def generated_trace_id(suite: str, seed: int) -> str:
    """``med-kiln-101`` (medium), ``gen-kiln-101`` (hard), ``gen-kiln-101-distractors``."""
    if suite == MEDIUM:
        return f"med-{hard_family(seed)}-{seed}"
    return f"gen-{hard_family(seed)}-{seed}" + ("-distractors" if suite == HARD_DISTRACTORS else "")


@dataclass(frozen=True)
class RecordSizes:
    """What ``hard_render.assign_sizes`` draws for a generated suite: byte bands (inclusive)
    of ordinary records and of each oversized one, and the band the whole trace's chars/4
    target is drawn from. Every band sits inside its suite's ``SuiteShape`` with a margin,
    so the validator's bounds hold whatever the draw."""

    regular: tuple[int, int]
    booking: tuple[int, int]
    mid: tuple[int, int]
    big3: tuple[int, int]
    target_tokens: tuple[int, int]
    max_tokens: int  # the target is never moved above this (clamping regular records)


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


_HARD_SIZES: Final = RecordSizes(
    regular=(8 * KIB + 200, OVERSIZED_HEAD - 400), booking=(18 * KIB, 26 * KIB),
    mid=(34 * KIB, 46 * KIB), big3=(17 * KIB, 30 * KIB), target_tokens=(216_000, 228_000),
    max_tokens=230_000,
)
# About 120 KB a trace: 64-96 records of 0.4-1.5 KiB and two oversized ones (the long
# document, 37-39 KiB, so that its identifier, 45-55% in, is past the 16 KiB head the
# cold-rebuild projection keeps; the booking pack, 17.5-19 KiB; the optional third is
# an ordinary page here), 25.5k-29k tokens by chars/4. The native first request then counts at most about 260,000
# tokens (its bytes plus 256 of framing per input item: tests/corpus checks every seed),
# inside the faux reader's 272,000-token envelope.
_MEDIUM_SIZES: Final = RecordSizes(
    regular=(400, 1536), booking=(17 * KIB + 512, 19 * KIB), mid=(37 * KIB, 39 * KIB),
    big3=(600, 1536), target_tokens=(25_500, 28_500), max_tokens=29_000,
)
RECORD_SIZES: Final[dict[str, RecordSizes]] = {
    MEDIUM: _MEDIUM_SIZES, HARD: _HARD_SIZES, HARD_DISTRACTORS: _HARD_SIZES,
}

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
_MEDIUM_SHAPE: Final = replace(
    _HARD_SHAPE, record_bytes=(300, 40 * KIB), token_estimate=(25_000, 31_000),
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
    MEDIUM: _MEDIUM_SHAPE,
    HARD: _HARD_SHAPE,
    HARD_DISTRACTORS: _HARD_SHAPE,
}
