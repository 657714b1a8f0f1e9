"""Neutral filler prose of exact lengths, and same-length hypothetical decoys.

Filler is deliberately repetitive business prose (a documented limitation): it exists
to give the hard traces their size. It never contains a colon, a digit-letter code, a
credential word or a date, so it can never be mistaken for a fact line (FORMS.md §2).
Every length here is exact, which is what lets ``hard-distractors`` swap a paragraph
for a decoy of the same length and leave every size and offset unchanged.
"""

from __future__ import annotations

from typing import Final

from efold.corpus.prng import SeededRandom

_TEMPLATES: Final = (
    "The {item} schedule was reviewed against the {noun} plan and nothing needs to change "
    "this week.",
    "{person} confirmed that the {item} can be handled by the existing team without extra "
    "cost.",
    "Delivery windows for the {item} stay in the morning, with a call ahead of about half "
    "an hour.",
    "We suggest keeping the {noun} list current so that the handover stays simple for "
    "everyone.",
    "Packaging for the {item} follows the usual pallet and strapping standard.",
    "{person} asked whether the {noun} notes could be shared with the wider team before "
    "{weekday}.",
    "The warehouse team logged the {item} on arrival and found no visible damage.",
    "Any further move of the {item} uses the same loading bay and trolley route.",
    "Access to the loading bay is by the side gate, which is usually open until late "
    "afternoon.",
    "The previous {noun} check found everything in order, and the next one is routine.",
    "{person} will look at the {item} again on {weekday} and report back in the usual "
    "thread.",
    "Invoices are sent monthly and list each {item} line separately for easier checking.",
    "Our drivers carry protective covers for the {item} in case the weather turns.",
    "Please keep the {noun} folder tidy so that older versions are easy to tell apart.",
    "The {item} stayed on the lower racking, away from the doors and the heaters.",
    "{person} noted that the {noun} meeting ran short and the remaining points moved to "
    "{weekday}.",
    "All handling of the {item} follows the standard lifting guidance for the site.",
    "The team prefers written confirmation for any change to the {noun} arrangements.",
    "Spare parts for the {item} are kept on site so that a fault does not stop the work.",
    "Feedback on the {noun} draft was mostly about layout and wording, not substance.",
    "{person} is covering the {noun} questions while the usual contact is away.",
    "Parking near the entrance is limited, so vans should use the rear yard where possible.",
    "The {item} arrived in two boxes, and both were checked against the packing list.",
    "Routine cleaning of the {item} is logged at the end of each working day.",
)
_NOUNS: Final = (
    "logistics", "handover", "storage", "delivery", "inventory", "maintenance", "supplier",
    "scheduling", "packing", "site", "equipment", "loading", "contact", "workshop",
)
_WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
# Padding words by length (1..12) for exact-length endings.
_PAD_WORDS: Final = {
    1: "a", 2: "at", 3: "the", 4: "note", 5: "order", 6: "supply", 7: "storage",
    8: "delivery", 9: "logistics", 10: "scheduling", 11: "maintenance", 12: "arrangements",
}


class Vocabulary:
    """Slot values for one trace (its items and people)."""

    def __init__(self, items: tuple[str, ...], people: tuple[str, ...]) -> None:
        self.items = items
        self.people = people

    def sentence(self, rng: SeededRandom) -> str:
        template = rng.choice(_TEMPLATES)
        text = template.format(
            item=rng.choice(self.items), noun=rng.choice(_NOUNS),
            person=rng.choice(self.people), weekday=rng.choice(_WEEKDAYS),
        )
        return text[:1].upper() + text[1:]


def pad_exact(rng: SeededRandom, length: int) -> str:
    """Exactly ``length`` characters of padding words ending in a full stop (length >= 2)."""
    if length < 2:
        raise ValueError("padding needs at least two characters")
    words: list[str] = []
    room = length - 1  # everything before the closing full stop
    while room > 12:
        word = _PAD_WORDS[rng.between(3, 9)]
        words.append(word)
        room -= len(word) + 1  # the word and the space after it; leaves room >= 3
    words.append(_PAD_WORDS[room])  # 1 <= room <= 12: one word fills it exactly
    return " ".join(words) + "."


def paragraph(rng: SeededRandom, vocab: Vocabulary, length: int) -> str:
    """A paragraph of whole sentences, padded with words to exactly ``length`` chars."""
    sentences: list[str] = []
    used = 0
    misses = 0
    while misses < 6:  # a few tries for a shorter sentence before padding with words
        sentence = vocab.sentence(rng)
        extra = len(sentence) + (1 if sentences else 0)
        if used + extra > length - 3:  # keep room for " " and a padding word
            misses += 1
            continue
        sentences.append(sentence)
        used += extra
    text = " ".join(sentences)
    gap = length - len(text)
    if not text:
        return pad_exact(rng, length)
    return text + " " + pad_exact(rng, gap - 1)


def paragraphs(rng: SeededRandom, vocab: Vocabulary, total: int) -> list[str]:
    """Paragraphs whose lengths plus ``\\n\\n`` separators sum to exactly ``total``."""
    if total < 2:
        raise ValueError("filler needs at least two characters")
    out: list[str] = []
    remaining = total
    while remaining > 0:
        if out:
            remaining -= 2  # the separator before this paragraph
        size = rng.between(360, 900)
        if remaining - size < 300:  # never leave a stub: take the rest
            size = remaining
        out.append(paragraph(rng, vocab, size))
        remaining -= size
    return out


def same_length(rng: SeededRandom, vocab: Vocabulary, line: str, length: int) -> str:
    """``line`` on its own line, then neutral prose: exactly ``length`` chars in all."""
    if len(line) + 4 > length:
        raise ValueError("decoy line longer than the paragraph it replaces")
    return line + "\n" + paragraph(rng, vocab, length - len(line) - 1)
