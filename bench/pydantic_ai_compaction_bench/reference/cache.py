"""A prefix-cache simulator: what a provider's prompt cache would bill, offline.

Providers cache the longest prefix a request shares with earlier ones; that part is billed as a
cache read and the rest as a cache write. The simulator works at block granularity (instructions,
tool definitions, then each message part), which is how requests actually diverge: a compaction
rewrites a part, a fork appends one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CacheOutcome:
    """How one request's input splits between cache reads and writes."""

    input_tokens: int
    """All input tokens (reads and writes included, as pydantic-ai counts them)."""

    cache_read_tokens: int
    """The longest prefix shared with an earlier request."""

    cache_write_tokens: int
    """Everything after that prefix."""


@dataclass
class PrefixCacheSimulator:
    """Remembers every prefix sent so far (one simulator per conversation)."""

    _seen: set[bytes] = field(default_factory=set[bytes])

    def account(self, blocks: Sequence[tuple[str, int]]) -> CacheOutcome:
        """Bill a request made of `(content, tokens)` blocks, then remember its prefixes."""
        digest = b''
        read = 0
        total = 0
        matching = True
        for content, tokens in blocks:
            digest = hashlib.blake2b(digest + content.encode(), digest_size=16).digest()
            total += tokens
            if matching and digest in self._seen:
                read += tokens
            else:
                matching = False
                self._seen.add(digest)
        return CacheOutcome(input_tokens=total, cache_read_tokens=read, cache_write_tokens=total - read)
