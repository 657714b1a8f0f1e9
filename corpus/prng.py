"""A small seeded PRNG of our own (SplitMix64), so a seed yields the same values on
every Python version and in every process.

``random.Random`` is not used on purpose: its algorithms (seeding from ints/strings,
``randrange``, ``shuffle``) are CPython implementation details that have changed across
versions. Everything here is integer arithmetic modulo 2**64; no floats.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

_MASK = (1 << 64) - 1


class SeededRandom:
    """SplitMix64 stream. ``fork(label)`` derives an independent stream, so that one
    consumer (e.g. distractor text) never shifts the values another consumer draws."""

    # Invariant: 0 <= _state < 2**64; every draw advances it by the golden gamma.
    _state: int

    def __init__(self, seed: int) -> None:
        self._state = seed & _MASK

    def next_u64(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Uniform integer in [0, n) without modulo bias (rejection sampling)."""
        if n <= 0:
            raise ValueError("below() needs n >= 1")
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            value = self.next_u64()
            if value < limit:
                return value % n

    def between(self, low: int, high: int) -> int:
        """Uniform integer in [low, high] (both inclusive)."""
        return low + self.below(high - low + 1)

    def choice(self, items: Sequence[T]) -> T:
        return items[self.below(len(items))]

    def shuffled(self, items: Sequence[T]) -> list[T]:
        out = list(items)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out

    def sample(self, items: Sequence[T], k: int) -> list[T]:
        return self.shuffled(items)[:k]

    def percent(self, chance: int) -> bool:
        """True with probability chance/100."""
        return self.below(100) < chance

    def fork(self, label: str) -> SeededRandom:
        digest = hashlib.sha256(f"{self._state}:{label}".encode()).digest()
        return SeededRandom(int.from_bytes(digest[:8], "big"))
