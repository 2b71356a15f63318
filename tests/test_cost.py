"""Cache-aware cost accounting and registry prices."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai_compaction_bench.cost import REFERENCE_PRICES, CostRange, PriceTable, UsageTotals, cost, prices_for
from pydantic_ai_compaction_bench.costsim import SONNET_5_5, SimulationConfig, simulate

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_exact_cost_with_cache_detail() -> None:
    # 1000 uncached * $2 + 6000 read * $0.10 + 3000 written * $2.50 + 500 out * $10 = $15100 / 1M.
    usage = UsageTotals(input_tokens=10_000, cache_read_tokens=6_000, cache_write_tokens=3_000, output_tokens=500)
    assert usage.uncached_input_tokens == 1_000
    bill = cost(usage, REFERENCE_PRICES)
    assert bill.exact
    assert bill.low == bill.high == pytest.approx(0.0151, abs=1e-15)


def test_uncached_only_usage() -> None:
    bill = cost(UsageTotals(input_tokens=1_000_000, output_tokens=1_000_000), REFERENCE_PRICES)
    assert bill == CostRange(low=12.0, high=12.0)


def test_range_without_cache_detail() -> None:
    usage = UsageTotals(input_tokens=10_000, output_tokens=500, cache_detail=False)
    bill = cost(usage, REFERENCE_PRICES)
    assert not bill.exact
    # low: all input at the cache-read rate; high: all input at the cache-write rate; output exact.
    assert bill.low == pytest.approx((10_000 * 0.10 + 500 * 10.0) / 1e6, abs=1e-15)
    assert bill.high == pytest.approx((10_000 * 2.50 + 500 * 10.0) / 1e6, abs=1e-15)


def test_range_bounds_use_the_extreme_input_rates() -> None:
    # A sheet where cache reads cost more than input and writes less: the bounds still take the
    # cheapest and dearest of the plausible rates.
    odd = PriceTable(input=1.0, cache_read=3.0, cache_write=0.5, output=0.0)
    bill = cost(UsageTotals(input_tokens=1_000_000, cache_detail=False), odd)
    assert (bill.low, bill.high) == (1.0, 1.0)


@given(
    read=st.integers(0, 50_000),
    write=st.integers(0, 50_000),
    uncached=st.integers(0, 50_000),
    output=st.integers(0, 10_000),
)
def test_exact_cost_lies_within_the_range_without_detail(read: int, write: int, uncached: int, output: int) -> None:
    total = read + write + uncached
    exact = cost(UsageTotals(total, read, write, output), REFERENCE_PRICES)
    bounds = cost(UsageTotals(total, output_tokens=output, cache_detail=False), REFERENCE_PRICES)
    assert bounds.low - 1e-12 <= exact.low <= bounds.high + 1e-12


def test_simulated_keep_run_costs_the_same_through_the_ledger() -> None:
    keep = simulate(SimulationConfig(), 'keep')
    usage = UsageTotals(
        input_tokens=int(keep.input_tokens),
        cache_read_tokens=int(keep.cache_read_tokens),
        cache_write_tokens=int(keep.cache_write_tokens),
        output_tokens=int(keep.output_tokens),
    )
    assert cost(usage, REFERENCE_PRICES).low == pytest.approx(1.27706, abs=1e-12)


def test_reference_prices_are_the_seed_sheet() -> None:
    assert (REFERENCE_PRICES.input, REFERENCE_PRICES.cache_read, REFERENCE_PRICES.cache_write) == (
        SONNET_5_5.input,
        SONNET_5_5.cache_read,
        SONNET_5_5.cache_write,
    )
    assert REFERENCE_PRICES.output == SONNET_5_5.output == 10.0


@pytest.mark.parametrize(
    ('build', 'message'),
    [
        (lambda: UsageTotals(input_tokens=-1), 'UsageTotals.input_tokens must be non-negative'),
        (lambda: UsageTotals(10, output_tokens=-1), 'UsageTotals.output_tokens must be non-negative'),
        (lambda: UsageTotals(10, cache_read_tokens=8, cache_write_tokens=3), 'UsageTotals.input_tokens .* include'),
        (lambda: UsageTotals(10, cache_read_tokens=5, cache_detail=False), 'UsageTotals.cache_detail is False'),
        (lambda: PriceTable(input=1, cache_read=-0.1, cache_write=1, output=1), 'PriceTable.cache_read must be'),
        (lambda: PriceTable(input=1, cache_read=1, cache_write=float('nan'), output=1), 'PriceTable.cache_write'),
        (lambda: CostRange(low=2.0, high=1.0), 'CostRange.low'),
    ],
)
def test_invalid_values_are_rejected(build: object, message: str) -> None:
    assert callable(build)
    with pytest.raises(ValueError, match=message):
        build()


def test_prices_for_a_known_anthropic_model() -> None:
    # genai-prices lists Sonnet 4.5 with a long-context tier; the base rates are reported.
    assert prices_for('anthropic:claude-sonnet-4-5', at=AT) == PriceTable(
        input=3.0, cache_read=0.3, cache_write=3.75, output=15.0
    )


def test_prices_for_falls_back_to_the_input_rate_for_missing_cache_prices() -> None:
    # OpenAI lists no cache-write price (no write surcharge).
    assert prices_for('openai:gpt-4o', at=AT) == PriceTable(input=2.5, cache_read=1.25, cache_write=2.5, output=10.0)
    # Mistral lists neither cache price.
    assert prices_for('mistral:mistral-large-latest', at=AT) == PriceTable(
        input=2.0, cache_read=2.0, cache_write=2.0, output=6.0
    )


def test_prices_for_bare_and_colon_bearing_model_names() -> None:
    assert prices_for('gpt-4o', at=AT) == prices_for('openai:gpt-4o', at=AT)
    bedrock = prices_for('bedrock:anthropic.claude-3-5-sonnet-20240620-v1:0', at=AT)
    assert bedrock is not None
    assert (bedrock.input, bedrock.output) == (3.0, 15.0)


@pytest.mark.parametrize('model', ['openai:no-such-model-xyz', 'no-such-provider:gpt-4o', 'test:test', 'zzz-unknown'])
def test_prices_for_an_unknown_model_is_none(model: str) -> None:
    assert prices_for(model, at=AT) is None
