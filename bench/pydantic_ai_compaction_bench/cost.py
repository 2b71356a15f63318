"""Cache-aware cost accounting for benchmark records.

Usage follows the pydantic-ai convention: `input_tokens` counts every input token, cache reads
and cache writes included, so the uncached remainder is `input - cache_read - cache_write`.

When a record carries the cache split (`UsageTotals.cache_detail`), its cost is exact. When it
does not, the split of its input is unknown and `cost` returns the range the bill must fall in:

- low: every input token billed at the cheapest input rate, `min(input, cache_read)`, as if the
  whole prompt had been read from cache and nothing had been written;
- high: every input token billed at the dearest input rate, `max(input, cache_write)`, as if the
  whole prompt had been sent uncached or written to cache.

Output is always exact. Prices come from the `genai_prices` registry (`prices_for`) or, for the
offline reference model, from `REFERENCE_PRICES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from genai_prices import data_snapshot, types

__all__ = ('REFERENCE_PRICES', 'CostRange', 'PriceTable', 'UsageTotals', 'cost', 'prices_for')

_TOKENS_PER_PRICE_UNIT = 1_000_000
"""Prices are quoted per million tokens."""


@dataclass(frozen=True)
class PriceTable:
    """Token prices in US dollars per million tokens."""

    input: float
    """Uncached input."""

    cache_read: float
    """Input served from the prompt cache."""

    cache_write: float
    """Input written to the prompt cache."""

    output: float
    """Output, reasoning included."""

    def __post_init__(self) -> None:
        for name in ('input', 'cache_read', 'cache_write', 'output'):
            value: float = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f'PriceTable.{name} must be a finite non-negative number, got {value!r}.')


REFERENCE_PRICES = PriceTable(input=2.00, cache_read=0.10, cache_write=2.50, output=10.00)
"""Prices for the offline reference model: the seed study's Sonnet 5.5 sheet (also `costsim.SONNET_5_5`)."""


@dataclass(frozen=True)
class UsageTotals:
    """Token usage of one benchmark record (or a sum of them)."""

    input_tokens: int
    """Every input token, cache reads and cache writes included."""

    cache_read_tokens: int = 0
    """Input served from the cache; must be 0 without `cache_detail`."""

    cache_write_tokens: int = 0
    """Input written to the cache; must be 0 without `cache_detail`."""

    output_tokens: int = 0
    """Every output token, reasoning included."""

    cache_detail: bool = True
    """Whether the provider reported the cache split; without it `cost` returns a range."""

    def __post_init__(self) -> None:
        for name in ('input_tokens', 'cache_read_tokens', 'cache_write_tokens', 'output_tokens'):
            value: int = getattr(self, name)
            if value < 0:
                raise ValueError(f'UsageTotals.{name} must be non-negative, got {value!r}.')
        if self.cache_read_tokens + self.cache_write_tokens > self.input_tokens:
            raise ValueError(
                f'UsageTotals.input_tokens ({self.input_tokens}) must include cache_read_tokens '
                f'({self.cache_read_tokens}) and cache_write_tokens ({self.cache_write_tokens}).'
            )
        # A split that was not reported cannot be partly known: zeros here mean "unknown", and
        # anything else would be silently ignored by the range.
        if not self.cache_detail and (self.cache_read_tokens or self.cache_write_tokens):
            raise ValueError(
                'UsageTotals.cache_detail is False, so cache_read_tokens and cache_write_tokens must be 0.'
            )

    @property
    def uncached_input_tokens(self) -> int:
        """Input neither read from nor written to the cache (meaningful only with `cache_detail`)."""
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens


@dataclass(frozen=True)
class CostRange:
    """A bill in US dollars: exact when `low == high`, otherwise the bounds it must lie within."""

    low: float
    """Cheapest plausible bill."""

    high: float
    """Dearest plausible bill."""

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f'CostRange.low ({self.low!r}) must not exceed CostRange.high ({self.high!r}).')

    @property
    def exact(self) -> bool:
        """Whether the bill is known exactly."""
        return self.low == self.high


def _dollars(tokens: int, price_per_million: float) -> float:
    return tokens * price_per_million / _TOKENS_PER_PRICE_UNIT


def cost(usage: UsageTotals, prices: PriceTable) -> CostRange:
    """The bill for *usage* at *prices*.

    Args:
        usage: Token usage; `input_tokens` includes cache reads and writes.
        prices: Per-million-token prices.

    Returns:
        An exact range (`low == high`) when `usage.cache_detail` is True. Otherwise `low` bills
        all input at `min(input, cache_read)` and `high` at `max(input, cache_write)`, output
        exactly in both.
    """
    output = _dollars(usage.output_tokens, prices.output)
    if usage.cache_detail:
        exact = (
            _dollars(usage.uncached_input_tokens, prices.input)
            + _dollars(usage.cache_read_tokens, prices.cache_read)
            + _dollars(usage.cache_write_tokens, prices.cache_write)
            + output
        )
        return CostRange(low=exact, high=exact)
    low = _dollars(usage.input_tokens, min(prices.input, prices.cache_read)) + output
    high = _dollars(usage.input_tokens, max(prices.input, prices.cache_write)) + output
    return CostRange(low=low, high=high)


def _base_rate(price: Decimal | types.TieredPrices | None) -> float | None:
    """A registry price as a float; tiered prices give their base (below the long-context threshold)."""
    if price is None:
        return None
    if isinstance(price, types.TieredPrices):
        return float(price.base)
    return float(price)


def _lookup(model: str) -> types.ModelInfo | None:
    """The registry entry for a `'provider:model'` (or bare model) string, or None."""
    # Split at the first colon: Bedrock model ids carry colons of their own ('...-v1:0').
    provider_id, colon, model_ref = model.partition(':')
    if not colon:
        provider_id, model_ref = '', model
    snapshot = data_snapshot.get_snapshot()
    try:
        _, info = snapshot.find_provider_model(model_ref, None, provider_id or None, None)
    except LookupError:
        return None
    return info


def prices_for(model: str, *, at: datetime | None = None) -> PriceTable | None:
    """Per-million-token prices for *model* from the bundled `genai_prices` registry (no network).

    Tiered prices (e.g. Anthropic's long-context tier) are reported at their base rate. Where the
    registry lists no cache price, the plain input rate stands in: a missing cache-read price means
    no known discount, and a missing cache-write price means the provider charges no write
    surcharge (as with OpenAI's and Google's implicit caching).

    Args:
        model: `'provider:model'` as pydantic-ai spells it (`'openai:gpt-4o'`,
            `'anthropic:claude-sonnet-4-5'`), or a bare model name for the registry to place.
        at: When the request was made, for prices that changed over time; defaults to now.

    Returns:
        The prices, or None when the registry does not know the model or lists no per-token
        input or output price for it.
    """
    info = _lookup(model)
    if info is None:
        return None
    listed = info.get_prices(at or datetime.now(tz=UTC))
    input_rate = _base_rate(listed.input_mtok)
    output_rate = _base_rate(listed.output_mtok)
    if input_rate is None or output_rate is None:
        return None
    cache_read = _base_rate(listed.cache_read_mtok)
    cache_write = _base_rate(listed.cache_write_mtok)
    return PriceTable(
        input=input_rate,
        cache_read=input_rate if cache_read is None else cache_read,
        cache_write=input_rate if cache_write is None else cache_write,
        output=output_rate,
    )
