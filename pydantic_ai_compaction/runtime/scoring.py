"""Block-level reasoning scoring for `ForgetReasoning(policy='score')` (seed 002's ICLR method).

A finished step's reasoning is split into blocks at blank lines; each block gets a predictability
score given what came before it, and the most predictable share is replaced with `[SKIP]`. The paper
scores with a 9B model's mean token entropy; the default here is a dependency-free proxy: how much of
a block's compressed size the preceding context already accounts for (zlib, conditional compression
gain). A real language-model scorer plugs in through `ReasoningScorer`.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from typing import Protocol

SKIP = '[SKIP]'
"""What replaces a dropped block."""

CONTEXT_CHARS = 32_768
"""Context the default scorer conditions on: deflate's window, so more would never be matched."""

_BLANK_LINE = re.compile(r'\n\s*\n')


class ReasoningScorer(Protocol):
    """Scores a step's reasoning blocks: higher means more predictable from the context (dropped first).

    An LM scorer returns, for example, the negative mean token entropy of each block conditioned on
    *context* and the blocks before it.
    """

    def __call__(self, context: str, blocks: Sequence[str], /) -> Sequence[float]:
        """One finite score per block, in order.

        Args:
            context: The conversation before the step, as text (its last `CONTEXT_CHARS` for the default).
            blocks: The step's reasoning blocks, in order.
        """
        ...


def split_blocks(text: str) -> list[str]:
    """*text*'s blocks: the non-blank runs between blank lines."""
    return [block.strip('\n') for block in _BLANK_LINE.split(text) if block.strip()]


def _deflated(data: bytes, dictionary: bytes = b'') -> int:
    # Raw deflate: no header or checksum to blur short blocks.
    compressor = (
        zlib.compressobj(9, zlib.DEFLATED, -15, zdict=dictionary)
        if dictionary
        else zlib.compressobj(9, zlib.DEFLATED, -15)
    )
    return len(compressor.compress(data)) + len(compressor.flush())


def compression_gain(context: str, blocks: Sequence[str], /) -> list[float]:
    """The default scorer: the share of each block's compressed size its preceding context saves.

    For a block `b` after context `c` (the conversation, then the step's earlier blocks), the score is
    `1 - |z(b | c)| / |z(b)|`, where `z(b | c)` is raw deflate at level 9 with `c` as its preset dictionary:
    the bytes `b` adds once `c` is known, which is `|z(c + b)| - |z(c)|` without the stream boundaries. Near
    1 when the block repeats what is already there, near 0 when it is new. Deterministic, pure Python, well
    under a millisecond per block.
    """
    prefix = context[-CONTEXT_CHARS:].encode('utf-8', 'surrogatepass')
    scores: list[float] = []
    for block in blocks:
        data = block.encode('utf-8', 'surrogatepass')
        alone = max(_deflated(data), 1)
        scores.append(1.0 - _deflated(data, prefix) / alone)
        prefix = (prefix + b'\n\n' + data)[-CONTEXT_CHARS:]  # the next block is conditioned on this one too
    return scores


def skipped_count(share: float, blocks: int) -> int:
    """How many of *blocks* a *share* replaces, rounded down.

    A product within 1e-9 under an integer counts as that integer, so `0.7 × 10` (6.999…) replaces 7.
    """
    return math.floor(share * blocks + 1e-9)


def choose_skips(scores: Sequence[float], share: float) -> set[int]:
    """Indices of the `skipped_count` most predictable blocks (ties: the earlier block first)."""
    values: list[object] = list(scores)  # a user's scorer may return anything
    if any(not isinstance(s, int | float) or isinstance(s, bool) or not math.isfinite(s) for s in values):
        raise ValueError(f'a reasoning scorer returned a score that is not a finite number: {list(scores)!r}')
    order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
    return set(order[: skipped_count(share, len(scores))])
