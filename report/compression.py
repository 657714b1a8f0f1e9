"""Checkpoint sizes per role and their compression against the native role.

A receipt carries the reader-visible size of the checkpoint its slot read (chars/4
estimated tokens and UTF-8 bytes, counted by the controller: ``controller.pilot.evidence``).
Every probe of one role x suite x trace x repeat reads the same checkpoint, so a size is
counted once per checkpoint, never once per slot (``report.join`` refuses a checkpoint
recorded with two sizes). Sizes are facts of the checkpoint, whatever the slot's status
or exclusion.

The reference is the full transcript at the boundary, whose size the controller counts
from the trace and every receipt carries (``transcript_tokens``/``transcript_bytes``):
so a role compresses against it even when the native arm is inventory-infeasible (the
hard suite), and the native role itself shows about 0%. Receipts written before that
size existed fall back to the checkpoints of the plan's first role whose arm is
``native`` (the role the "versus native" view uses), paired with a role's own by suite,
trace and repeat. One pair's compression is ``1 - role / reference``; a role
reports the nearest-rank median over its pairs and the aggregate ``1 - sum / sum``. A
pair whose reference size is 0 has no ratio and is left out of both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from efold.protocol.records import Receipt
from efold.report.join import Observation
from efold.report.schema import Compression, SizeRatio
from efold.report.stats import nearest_rank

__all__ = ["CheckpointId", "checkpoint_sizes", "role_compression"]

CheckpointId = tuple[str, str, int]  # suite, trace, repeat: one checkpoint of a role
TRANSCRIPT = "transcript"  # SizeRatio.reference when the full transcript is the reference
Size = tuple[int, int]  # tokens, bytes


def _sizes(observations: Iterable[Observation],
           pick: Callable[[Receipt], tuple[int | None, int | None]],
           ) -> dict[CheckpointId, Size]:
    """One size per checkpoint of one role, where some receipt carries it (``report.join``
    has checked that its receipts agree)."""
    sizes: dict[CheckpointId, Size] = {}
    for obs in observations:
        if obs.receipt is None:
            continue
        tokens, size = pick(obs.receipt)
        if tokens is not None and size is not None:
            key = (obs.planned.suite, obs.planned.trace_id, obs.planned.repeat)
            sizes.setdefault(key, (tokens, size))
    return sizes


def checkpoint_sizes(observations: Iterable[Observation]) -> dict[CheckpointId, Size]:
    """One role's checkpoints that some receipt gave a size, with that size."""
    return _sizes(observations, lambda r: (r.checkpoint_tokens, r.checkpoint_bytes))


def transcript_sizes(observations: Iterable[Observation]) -> dict[CheckpointId, Size]:
    """The full transcript's size at each of one role's checkpoints, where its receipts
    carry it (``controller.pilot.evidence.transcript_size``)."""
    return _sizes(observations, lambda r: (r.transcript_tokens, r.transcript_bytes))


def _ratio(part: int, whole: int) -> float:
    """``1 - part / whole`` (``whole`` positive)."""
    return 1.0 - part / whole


def _versus(reference: str, mine: Mapping[CheckpointId, Size],
            theirs: Mapping[CheckpointId, Size]) -> SizeRatio:
    pairs = [(mine[key], theirs[key]) for key in sorted(mine)
             if key in theirs and theirs[key][0] > 0 and theirs[key][1] > 0]
    if not pairs:
        return SizeRatio(reference=reference, pairs=0, tokens_median=None,
                         tokens_aggregate=None, bytes_median=None, bytes_aggregate=None)
    return SizeRatio(
        reference=reference,
        pairs=len(pairs),
        tokens_median=nearest_rank([_ratio(m[0], r[0]) for m, r in pairs], 50),
        tokens_aggregate=_ratio(sum(m[0] for m, _ in pairs), sum(r[0] for _, r in pairs)),
        bytes_median=nearest_rank([_ratio(m[1], r[1]) for m, r in pairs], 50),
        bytes_aggregate=_ratio(sum(m[1] for m, _ in pairs), sum(r[1] for _, r in pairs)),
    )


def role_compression(role: str, observations: Sequence[Observation], reference: str | None,
                     reference_observations: Sequence[Observation]) -> Compression | None:
    """The sizes of ``role``'s checkpoints, and (unless ``reference`` is None or the role
    itself) their compression against ``reference``'s; None when no receipt of the role
    carries a size."""
    mine = checkpoint_sizes(observations)
    if not mine:
        return None
    tokens = [size[0] for size in mine.values()]
    sizes = [size[1] for size in mine.values()]
    versus = None
    transcripts = transcript_sizes(observations)
    if transcripts and transcripts.keys() >= mine.keys():
        versus = msgspec.structs.replace(_versus(TRANSCRIPT, mine, transcripts),
                                         against="transcript")
    elif reference is not None and reference != role:
        versus = _versus(reference, mine, checkpoint_sizes(reference_observations))
    median_tokens, median_bytes = nearest_rank(tokens, 50), nearest_rank(sizes, 50)
    assert median_tokens is not None and median_bytes is not None  # mine is not empty
    return Compression(checkpoints=len(mine), tokens_median=median_tokens,
                       tokens_sum=sum(tokens), bytes_median=median_bytes,
                       bytes_sum=sum(sizes), versus_reference=versus)
