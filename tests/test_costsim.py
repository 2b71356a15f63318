"""The reasoning-retention cost simulator: the seed study's published figures, hand-checked totals, properties."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai_compaction_bench.costsim import (
    FABLE_5_1,
    POLICIES,
    SONNET_5_5,
    Policy,
    Prices,
    SimulationConfig,
    SimulationResult,
    break_even_multiplier,
    compare_policies,
    relative_change,
    simulate,
)

SEED = SimulationConfig()
FABLE = SimulationConfig(prices=FABLE_5_1)


def percent(result: SimulationResult, baseline: SimulationResult) -> float:
    return relative_change(result, baseline) * 100


# --- Hand-worked seed study -------------------------------------------------------------------
# keep: each history entry is 1500 + 150 + 1200 = 2850 tokens and the history only grows, so
# request k (k >= 2) reads the prefix and entries 1..k-2 and writes entry k-1:
#   writes = 20000 + 39 * 2850                        = 131_150   -> $0.327875
#   reads  = 39 * 20000 + 2850 * (0 + 1 + ... + 38)   = 2_891_850 -> $0.289185
#   output = 40 * (1500 + 150)                        = 66_000    -> $0.66
#   total                                                         =  $1.27706
# drop: the same with 1350-token entries: writes 72_650, reads 1_780_350, total $1.01966.
# keep_latest: request k strips step k-2's reasoning, which no earlier request did, so it reads
# the prefix and stripped entries 1..k-3 and writes 1350 + 2850 = 4200 tokens:
#   writes = 20000 + 2850 + 38 * 4200                              = 182_450
#   reads  = 20000 + 38 * 20000 + 1350 * (0 + 1 + ... + 37)        = 1_729_050   total $1.28903


def test_keep_bill_matches_the_hand_computation() -> None:
    keep = simulate(SEED, 'keep')
    assert keep.cache_write_tokens == 131_150
    assert keep.cache_read_tokens == 2_891_850
    assert keep.input_tokens == 3_023_000
    assert keep.uncached_input_tokens == 0
    assert keep.output_tokens == 66_000
    assert keep.cost.cache_write == pytest.approx(0.327875, abs=1e-12)
    assert keep.cost.cache_read == pytest.approx(0.289185, abs=1e-12)
    assert keep.cost.output == pytest.approx(0.66, abs=1e-12)
    assert keep.cost.uncached_input == 0
    assert keep.total_cost == pytest.approx(1.27706, abs=1e-12)


def test_published_keep_figures() -> None:
    keep = simulate(SEED, 'keep')
    assert round(keep.total_cost, 2) == 1.28
    assert round(keep.total_cost, 3) == 1.277
    assert keep.reasoning_output_cost == pytest.approx(0.60, abs=1e-12)
    # Carrying reasoning: 39 writes of 1500 at $2.50/M plus 741 reads of 1500 at $0.10/M.
    assert keep.reasoning_carry_cost == pytest.approx(0.14625 + 0.11115, abs=1e-12)
    assert round(keep.reasoning_carry_cost, 2) == 0.26


def test_published_drop_saving() -> None:
    results = compare_policies(SEED)
    keep, drop = results['keep'], results['drop']
    assert drop.total_cost == pytest.approx(1.01966, abs=1e-12)
    # Dropping saves exactly what keep spent carrying reasoning, as the output is unchanged.
    assert keep.total_cost - drop.total_cost == pytest.approx(keep.reasoning_carry_cost, abs=1e-12)
    assert percent(drop, keep) == pytest.approx(-20.1557, abs=1e-4)
    # The exact change is -20.156%; the published "-20.1%" is the $0.2574 saving over the published
    # (cent-rounded) $1.28 bill. Pinned so a drift in either number shows up here.
    assert round((drop.total_cost - keep.total_cost) / round(keep.total_cost, 2) * 100, 1) == -20.1


def test_published_keep_latest_figures() -> None:
    results = compare_policies(SEED)
    keep, latest = results['keep'], results['keep_latest']
    assert latest.cache_write_tokens == 182_450
    assert latest.cache_read_tokens == 1_729_050
    assert latest.total_cost == pytest.approx(1.28903, abs=1e-12)
    assert round(percent(latest, keep), 1) == 0.9
    assert round((1 - latest.input_tokens / keep.input_tokens) * 100) == 37


def test_published_drop_break_even() -> None:
    multiplier = break_even_multiplier(SEED)
    # The $0.2574 saving buys 0.2574 / $0.60 = 42.9% more reasoning output.
    assert multiplier == pytest.approx(1.429, abs=1e-9)
    assert round(multiplier, 2) == 1.43


def test_published_fable_figures() -> None:
    results = compare_policies(FABLE)
    keep = results['keep']
    assert keep.total_cost == pytest.approx(5.6623375, abs=1e-12)
    assert round(percent(results['drop'], keep), 1) == -17.8
    assert round(percent(results['keep_latest'], keep), 1) == 6.2
    multiplier = break_even_multiplier(FABLE)
    assert multiplier == pytest.approx(1.336375, abs=1e-9)
    assert round(multiplier - 1, 2) == 0.34


@pytest.mark.parametrize('config', [SEED, FABLE], ids=['sonnet', 'fable'])
@pytest.mark.parametrize('policy', POLICIES)
def test_break_even_multiplier_reproduces_the_keep_bill(config: SimulationConfig, policy: Policy) -> None:
    multiplier = break_even_multiplier(config, policy)
    keep = simulate(config, 'keep').total_cost
    assert simulate(replace(config, reasoning_multiplier=multiplier), policy).total_cost == pytest.approx(
        keep, abs=1e-9
    )


def test_break_even_ignores_the_configured_multiplier() -> None:
    assert break_even_multiplier(replace(SEED, reasoning_multiplier=3.0)) == pytest.approx(1.429, abs=1e-9)
    assert break_even_multiplier(SEED, 'keep') == pytest.approx(1.0, abs=1e-12)


def test_keep_latest_must_think_less_to_break_even() -> None:
    # It costs more than keep at multiplier 1, so its break-even lies below 1.
    assert break_even_multiplier(SEED, 'keep_latest') < 1


def test_break_even_without_reasoning_is_an_error() -> None:
    with pytest.raises(ValueError, match='does not change'):
        break_even_multiplier(replace(SEED, reasoning_tokens=0))


def test_break_even_when_the_policy_costs_more_even_without_reasoning() -> None:
    # A huge observation rewritten every turn makes keep_latest dearer than keep at any multiplier.
    config = SimulationConfig(steps=5, prefix_tokens=0, reasoning_tokens=10, action_tokens=0, observation_tokens=10_000)
    with pytest.raises(ValueError, match='even with no reasoning'):
        break_even_multiplier(config, 'keep_latest')


def test_keep_rows_write_one_entry_per_request() -> None:
    rows = simulate(SEED, 'keep').steps
    assert len(rows) == 40
    assert (rows[0].cache_read_tokens, rows[0].cache_write_tokens) == (0, 20_000)
    for row in rows[1:]:
        assert row.cache_write_tokens == 2_850
        assert row.cache_read_tokens == 20_000 + (row.step - 2) * 2_850
        assert row.carried_reasoning_tokens == (row.step - 1) * 1_500
        assert row.output_tokens == 1_650


def test_keep_latest_rows_rewrite_the_previous_entry() -> None:
    rows = simulate(SEED, 'keep_latest').steps
    assert (rows[1].cache_read_tokens, rows[1].cache_write_tokens) == (20_000, 2_850)
    for row in rows[2:]:
        assert row.cache_write_tokens == 1_350 + 2_850
        assert row.cache_read_tokens == 20_000 + (row.step - 3) * 1_350
        assert row.carried_reasoning_tokens == 1_500


@pytest.mark.parametrize('policy', POLICIES)
def test_rows_add_up_to_the_totals(policy: Policy) -> None:
    result = simulate(SEED, policy)
    assert sum(row.cost for row in result.steps) == pytest.approx(result.total_cost, abs=1e-12)
    assert sum(row.input_tokens for row in result.steps) == result.input_tokens
    assert sum(row.carried_reasoning_tokens for row in result.steps) == result.carried_reasoning_tokens


def test_drop_never_carries_reasoning() -> None:
    drop = simulate(SEED, 'drop')
    assert drop.carried_reasoning_tokens == 0
    assert drop.reasoning_carry_cost == 0
    assert drop.reasoning_output_cost == pytest.approx(0.60, abs=1e-12)


def test_after_artifact_every_second_step() -> None:
    # Odd steps keep reasoning (2850-token entries), even steps drop it (1350). Append-only, so
    #   writes = 20000 + 20 * 2850 + 19 * 1350                 = 102_650
    #   reads  = 39 * 20000 + sum_{j=1}^{38} entry_j * (39 - j)
    #          = 780_000 + 2850 * 380 + 1350 * 361              = 2_350_350
    result = simulate(SEED, 'after_artifact')
    assert result.cache_write_tokens == 102_650
    assert result.cache_read_tokens == 2_350_350
    assert result.total_cost == pytest.approx(0.256625 + 0.235035 + 0.66, abs=1e-12)


def test_after_artifact_degenerates_to_drop_and_keep() -> None:
    assert simulate(replace(SEED, artifact_every=1), 'after_artifact').total_cost == pytest.approx(
        simulate(SEED, 'drop').total_cost, abs=1e-12
    )
    assert simulate(replace(SEED, artifact_every=41), 'after_artifact').total_cost == pytest.approx(
        simulate(SEED, 'keep').total_cost, abs=1e-12
    )


def test_after_artifact_with_an_explicit_set() -> None:
    every_second = simulate(SEED, 'after_artifact')
    explicit = simulate(replace(SEED, artifact_every=frozenset(range(2, 41, 2))), 'after_artifact')
    assert explicit.total_cost == pytest.approx(every_second.total_cost, abs=1e-12)
    # Only step 1 externalizes: every later step's reasoning is carried.
    only_first = simulate(replace(SEED, artifact_every=frozenset({1})), 'after_artifact')
    assert only_first.carried_reasoning_tokens == simulate(SEED, 'keep').carried_reasoning_tokens - 1_500 * 39


def test_without_cache_every_input_token_is_billed_at_the_input_rate() -> None:
    config = replace(SEED, cache=False)
    keep = simulate(config, 'keep')
    latest = simulate(config, 'keep_latest')
    assert (keep.cache_read_tokens, keep.cache_write_tokens) == (0, 0)
    assert keep.uncached_input_tokens == 3_023_000
    assert keep.total_cost == pytest.approx(3_023_000 * 2.0 / 1e6 + 0.66, abs=1e-12)
    # Without a cache to invalidate, keep_latest's smaller requests make it the cheaper policy.
    assert latest.input_tokens == 1_911_500
    assert latest.total_cost == pytest.approx(1_911_500 * 2.0 / 1e6 + 0.66, abs=1e-12)
    assert latest.total_cost < keep.total_cost


def test_multiplier_scales_reasoning_output() -> None:
    doubled = simulate(replace(SEED, reasoning_multiplier=2.0), 'drop')
    assert doubled.reasoning_output_tokens == 120_000
    assert doubled.total_cost == pytest.approx(1.01966 + 0.60, abs=1e-12)


def test_compare_policies_reports_every_policy_in_order() -> None:
    results = compare_policies(SEED)
    assert list(results) == ['keep', 'drop', 'keep_latest', 'after_artifact', 'score']
    assert all(result.policy == name for name, result in results.items())


@pytest.mark.parametrize(
    ('build', 'message'),
    [
        (lambda: SimulationConfig(steps=0), 'SimulationConfig.steps must be a positive integer'),
        (lambda: SimulationConfig(prefix_tokens=-1), 'SimulationConfig.prefix_tokens must be non-negative'),
        (lambda: SimulationConfig(reasoning_tokens=-1), 'SimulationConfig.reasoning_tokens must be non-negative'),
        (lambda: SimulationConfig(action_tokens=-1), 'SimulationConfig.action_tokens must be non-negative'),
        (lambda: SimulationConfig(observation_tokens=-1), 'SimulationConfig.observation_tokens must be non-negative'),
        (lambda: SimulationConfig(reasoning_multiplier=-0.5), 'SimulationConfig.reasoning_multiplier'),
        (lambda: SimulationConfig(reasoning_multiplier=float('nan')), 'SimulationConfig.reasoning_multiplier'),
        (lambda: SimulationConfig(artifact_every=0), 'SimulationConfig.artifact_every must be a positive integer'),
        (lambda: SimulationConfig(steps=3, artifact_every=frozenset({0, 4})), r'outside 1\.\.3: \[0, 4\]'),
        (lambda: Prices(input=-1, cache_write=0, cache_read=0, output=0), 'PriceTable.input must be'),
        (lambda: Prices(input=0, cache_write=0, cache_read=float('inf'), output=0), 'PriceTable.cache_read must be'),
    ],
)
def test_invalid_configuration_is_rejected(build: object, message: str) -> None:
    assert callable(build)
    with pytest.raises(ValueError, match=message):
        build()


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match='policy must be one of'):
        simulate(SEED, 'forget')  # pyright: ignore[reportArgumentType]


def test_relative_change_needs_a_nonzero_baseline() -> None:
    free = replace(SEED, prices=Prices(input=0, cache_write=0, cache_read=0, output=0))
    with pytest.raises(ValueError, match='baseline bill is zero'):
        relative_change(simulate(SEED, 'keep'), simulate(free, 'keep'))


# --- An independent reference: longest shared block prefix by brute force --------------------


def reference_bill(config: SimulationConfig, policy: Policy) -> tuple[float, float]:
    """(cache read, cache write) tokens, comparing each request with every earlier one directly."""

    def kept(step: int, request: int) -> bool:
        return {
            'keep': True,
            'drop': False,
            'keep_latest': step == request - 1,
            'after_artifact': not config.externalizes(step),
            'score': True,  # carried, with the skipped share of its tokens gone (below)
        }[policy]

    sizes = {
        'p': config.prefix_tokens,
        'r': config.reasoning_tokens
        * config.reasoning_multiplier
        * (1 - config.drop_share if policy == 'score' else 1),
        'a': config.action_tokens,
        'o': config.observation_tokens,
    }
    earlier: list[list[tuple[str, int]]] = []
    read = write = 0.0
    for request in range(1, config.steps + 1):
        blocks = [('p', 0)]
        for step in range(1, request):
            # A run without reasoning has no block of it (one of no tokens would still end a cached prefix).
            blocks += [('r', step)] if kept(step, request) and config.reasoning_tokens > 0 else []
            blocks += [('a', step), ('o', step)]
        shared = 0
        for other in earlier:
            common = 0
            while common < min(len(other), len(blocks)) and other[common] == blocks[common]:
                common += 1
            shared = max(shared, common)
        read += sum(sizes[kind] for kind, _ in blocks[:shared])
        write += sum(sizes[kind] for kind, _ in blocks[shared:])
        earlier.append(blocks)
    return read, write


configs = st.builds(
    SimulationConfig,
    steps=st.integers(1, 12),
    prefix_tokens=st.integers(0, 5_000),
    reasoning_tokens=st.integers(0, 3_000),
    action_tokens=st.integers(0, 500),
    observation_tokens=st.integers(0, 3_000),
    reasoning_multiplier=st.sampled_from([0.0, 0.5, 1.0, 1.5]),
    artifact_every=st.integers(1, 4),
)


@settings(max_examples=60, deadline=None)
@given(config=configs, policy=st.sampled_from(POLICIES))
def test_cache_accounting_matches_a_brute_force_reference(config: SimulationConfig, policy: Policy) -> None:
    result = simulate(config, policy)
    read, write = reference_bill(config, policy)
    assert result.cache_read_tokens == pytest.approx(read)
    assert result.cache_write_tokens == pytest.approx(write)
    assert result.input_tokens == pytest.approx(read + write)


@settings(max_examples=60, deadline=None)
@given(config=configs)
def test_dropping_reasoning_never_costs_more_than_keeping_it(config: SimulationConfig) -> None:
    results = compare_policies(config)
    keep = results['keep'].total_cost
    assert results['drop'].total_cost <= keep + 1e-12
    # after_artifact drops a subset of what drop drops, and everything is append-only.
    assert results['drop'].total_cost <= results['after_artifact'].total_cost + 1e-12
    assert results['after_artifact'].total_cost <= keep + 1e-12


def test_default_prices_are_the_seed_sheet() -> None:
    assert SEED.prices == SONNET_5_5 == Prices(input=2.00, cache_write=2.50, cache_read=0.10, output=10.00)
    assert Prices(input=10.00, cache_write=12.50, cache_read=0.25, output=50.00) == FABLE_5_1


def test_seed_001_threshold_model_compacting_often_is_cheaper_but_writes_more_summaries() -> None:
    from pydantic_ai_compaction_bench.costsim import THRESHOLDS, ThresholdConfig, compare_thresholds, simulate_threshold

    results = compare_thresholds(ThresholdConfig())
    often, late = results['often'], results['late']
    # The seed: "37% cheaper than compacting late. But it writes 18 summaries instead of 4."
    assert (often.summaries, late.summaries) == (18, 4)
    assert round((often.total_cost / late.total_cost - 1) * 100) == -37
    assert results['design'].threshold == THRESHOLDS['design'] == 0.75
    # Compacting later still writes fewer summaries, and bills more.
    full = simulate_threshold(ThresholdConfig(), 1.0)
    assert full.summaries < late.summaries and full.total_cost > late.total_cost
    # Without a cache the context's size is all that is billed: compacting often saves more.
    uncached = compare_thresholds(ThresholdConfig(cache_hit=0.0))
    assert uncached['often'].total_cost / uncached['late'].total_cost < often.total_cost / late.total_cost


def test_threshold_model_rejects_values_out_of_range() -> None:
    import pytest
    from pydantic_ai_compaction_bench.costsim import ThresholdConfig, simulate_threshold

    with pytest.raises(ValueError, match=r'ThresholdConfig\.cache_hit must lie in'):
        ThresholdConfig(cache_hit=1.5)
    with pytest.raises(ValueError, match=r'ThresholdConfig\.turns must be a positive integer, got 0'):
        ThresholdConfig(turns=0)
    with pytest.raises(ValueError, match='threshold must lie in'):
        simulate_threshold(ThresholdConfig(), 0.0)


def test_without_reasoning_every_policy_bills_what_keeping_it_does() -> None:
    config = SimulationConfig(reasoning_tokens=0)
    bills = {policy: simulate(config, policy).total_cost for policy in POLICIES}
    # Before: `keep_latest` 29 % above `keep`, its reasoning blocks of no tokens ending the cached prefix.
    assert len(set(bills.values())) == 1
