"""Step-by-step cost simulator for reasoning-retention policies under provider prompt caching.

The model is deliberately small. An agent runs `steps` steps behind a fixed system+tools prefix.
Each step the model emits reasoning and an action (both billed as output) and then receives an
observation. The history entry of a step is `[reasoning (if retained), action, observation]`, and
request *k* sends the prefix plus the history entries of steps `1..k-1`.

Caching is modelled at block granularity, where the blocks are the prefix and then each step's
reasoning, action and observation. The longest run of leading blocks that request *k* shares with
any earlier request is billed as a cache read; the remainder of the request is billed as a cache
write (so the first request writes the whole prefix). Nothing is uncached unless
`SimulationConfig.cache` is off, in which case every input token is billed at the plain input rate.
Cache lifetimes, minimum cacheable lengths and breakpoint limits are ignored: every step is
assumed to arrive well inside the cache TTL.

Policies:

- `'keep'`: every step's reasoning stays in the history.
- `'drop'`: a step's reasoning is dropped when the step is appended, so it is never carried.
- `'keep_latest'`: only the most recent completed step keeps its reasoning. Stripping the
  previous step rewrites the history each turn, which invalidates the cache from that point.
- `'after_artifact'`: a step's reasoning is dropped only if that step externalized its result
  (see `SimulationConfig.artifact_every`); other steps keep theirs.
- `'score'`: when a step is appended, the most predictable `SimulationConfig.drop_share` of its
  reasoning is replaced with `[SKIP]` (`ForgetReasoning(policy='score')`, seed 002's ICLR method); the
  rest is carried. Append-only like `'drop'`; the markers' few tokens are not counted.

`SimulationConfig.reasoning_multiplier` scales every step's reasoning, to model a policy that
makes the model re-derive what it no longer sees. `break_even_multiplier` finds the multiplier at
which a policy's bill equals `'keep'` at multiplier 1.

Example:
    ```python
    results = compare_policies(SimulationConfig())
    results['keep'].total_cost                    # 1.27706
    relative_change(results['drop'], results['keep'])  # -0.2016
    break_even_multiplier(SimulationConfig())     # 1.429
    ```
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, get_args

from pydantic_ai_compaction_bench.cost import REFERENCE_PRICES, PriceTable

__all__ = (
    'FABLE_5_1',
    'POLICIES',
    'SONNET_5_5',
    'THRESHOLDS',
    'CostBreakdown',
    'Policy',
    'Prices',
    'SimulationConfig',
    'SimulationResult',
    'StepRow',
    'ThresholdConfig',
    'ThresholdResult',
    'break_even_multiplier',
    'compare_policies',
    'compare_thresholds',
    'relative_change',
    'simulate',
    'simulate_threshold',
)

Policy = Literal['keep', 'drop', 'keep_latest', 'after_artifact', 'score']
"""A reasoning-retention policy; see the module docstring."""

POLICIES: tuple[Policy, ...] = get_args(Policy)
"""Every policy, in the order `compare_policies` reports them."""

_TOKENS_PER_PRICE_UNIT = 1_000_000
"""Prices are quoted per million tokens."""


Prices = PriceTable
"""The simulator prices with the same table as benchmark cost accounting."""

SONNET_5_5 = REFERENCE_PRICES
"""The seed study's default price sheet."""

FABLE_5_1 = PriceTable(input=10.00, cache_read=0.25, cache_write=12.50, output=50.00)
"""A premium price sheet, where output is dearer relative to cache reads."""


@dataclass(frozen=True)
class SimulationConfig:
    """One simulated agent run; the defaults are the seed study's."""

    steps: int = 40
    """Agent steps, which is also the number of requests."""

    prefix_tokens: int = 20_000
    """System prompt plus tool definitions, sent at the head of every request."""

    reasoning_tokens: int = 1_500
    """Reasoning emitted per step at multiplier 1."""

    action_tokens: int = 150
    """Action (tool call) emitted per step."""

    observation_tokens: int = 1_200
    """Observation (tool result) received after each step."""

    prices: Prices = SONNET_5_5
    """Price sheet used for every request."""

    reasoning_multiplier: float = 1.0
    """Scales every step's reasoning, modelling re-derivation the policy forces. At 0 each step keeps a reasoning
    block of no tokens (`break_even_multiplier` reads the bill's slope through it), which a policy that drops it
    still breaks the cached prefix at; a run with no reasoning at all is `reasoning_tokens=0`, which has none."""

    artifact_every: int | frozenset[int] = 2
    """For `'after_artifact'`: every n-th step externalizes its result, or the explicit set of steps (1-based)."""

    cache: bool = True
    """Whether the provider caches prompts; when off every input token is billed at `Prices.input`."""

    drop_share: float = 0.8
    """For `'score'`: the share of each step's reasoning replaced with `[SKIP]` (the paper's 80 %)."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f'SimulationConfig.steps must be a positive integer, got {self.steps!r}.')
        for name in ('prefix_tokens', 'reasoning_tokens', 'action_tokens', 'observation_tokens'):
            value: int = getattr(self, name)
            if value < 0:
                raise ValueError(f'SimulationConfig.{name} must be non-negative, got {value!r}.')
        if not math.isfinite(self.reasoning_multiplier) or self.reasoning_multiplier < 0:
            raise ValueError(
                f'SimulationConfig.reasoning_multiplier must be a finite non-negative number, '
                f'got {self.reasoning_multiplier!r}.'
            )
        if not 0.0 <= self.drop_share <= 1.0:  # also refuses NaN
            raise ValueError(f'SimulationConfig.drop_share must lie in [0, 1], got {self.drop_share!r}.')
        self._validate_artifact_every()

    def _validate_artifact_every(self) -> None:
        if isinstance(self.artifact_every, int):
            if self.artifact_every < 1:
                raise ValueError(
                    f'SimulationConfig.artifact_every must be a positive integer, got {self.artifact_every!r}.'
                )
            return
        outside = sorted(step for step in self.artifact_every if not 1 <= step <= self.steps)
        if outside:
            raise ValueError(f'SimulationConfig.artifact_every holds steps outside 1..{self.steps}: {outside!r}.')

    def externalizes(self, step: int) -> bool:
        """Whether *step* (1-based) externalized its result, per `artifact_every`."""
        if isinstance(self.artifact_every, int):
            return step % self.artifact_every == 0
        return step in self.artifact_every


@dataclass(frozen=True)
class CostBreakdown:
    """A bill in US dollars, split by billing class."""

    uncached_input: float
    """Input billed at the plain input rate (only when caching is off)."""

    cache_write: float
    """Input written to the cache."""

    cache_read: float
    """Input read from the cache."""

    output: float
    """Reasoning and action output."""

    @property
    def total(self) -> float:
        """The whole bill."""
        return self.uncached_input + self.cache_write + self.cache_read + self.output


@dataclass(frozen=True)
class StepRow:
    """What one request sent and cost.

    Token counts are floats because `reasoning_multiplier` may make reasoning fractional.
    """

    step: int
    """The 1-based step (and request) number."""

    input_tokens: float
    """Every input token sent: cache read plus cache write plus uncached."""

    cache_read_tokens: float
    """Input served from the cache."""

    cache_write_tokens: float
    """Input written to the cache."""

    uncached_input_tokens: float
    """Input billed at the plain rate (only when caching is off)."""

    carried_reasoning_tokens: float
    """Earlier steps' reasoning included in this request's input."""

    output_tokens: float
    """Reasoning plus action emitted by this step."""

    cost: float
    """This request's bill in US dollars, input and output."""


@dataclass(frozen=True)
class SimulationResult:
    """Totals and per-step rows of one policy over one configuration."""

    policy: Policy
    """The policy simulated."""

    config: SimulationConfig
    """The configuration simulated."""

    input_tokens: float
    """Every input token sent over the run."""

    cache_read_tokens: float
    """Input served from the cache over the run."""

    cache_write_tokens: float
    """Input written to the cache over the run."""

    uncached_input_tokens: float
    """Input billed at the plain rate over the run (only when caching is off)."""

    output_tokens: float
    """Reasoning plus action emitted over the run."""

    reasoning_output_tokens: float
    """The reasoning part of `output_tokens`."""

    carried_reasoning_tokens: float
    """Reasoning tokens re-sent as input over the run."""

    cost: CostBreakdown
    """The bill split by billing class."""

    reasoning_output_cost: float
    """Dollars spent emitting reasoning (part of `cost.output`)."""

    reasoning_carry_cost: float
    """Dollars spent re-sending reasoning as input: its cache writes, cache reads and uncached input."""

    steps: tuple[StepRow, ...]
    """One row per request, in order."""

    @property
    def total_cost(self) -> float:
        """The whole bill in US dollars."""
        return self.cost.total


_BlockKind = Literal['prefix', 'reasoning', 'scored', 'action', 'observation']
_Block = tuple[_BlockKind, int]
"""A block is identified by its kind and step; the same key always means the same content."""


class _PrefixCache:
    """Every earlier request's block sequence, stored as a trie so matching is linear in the request."""

    def __init__(self) -> None:
        # (parent node, block) -> child node; node 0 is the empty prefix.
        self._children: dict[tuple[int, _Block], int] = {}

    def longest_match(self, blocks: list[_Block]) -> int:
        """How many leading blocks of *blocks* some earlier request also began with."""
        node = 0
        for matched, block in enumerate(blocks):
            child = self._children.get((node, block))
            if child is None:
                return matched
            node = child
        return len(blocks)

    def add(self, blocks: list[_Block]) -> None:
        """Remember *blocks* as a request that later ones may share a prefix with."""
        node = 0
        for block in blocks:
            node = self._children.setdefault((node, block), len(self._children) + 1)


def _step_reasoning(config: SimulationConfig) -> float:
    return config.reasoning_tokens * config.reasoning_multiplier


def _retains_reasoning(config: SimulationConfig, policy: Policy, step: int, request: int) -> bool:
    """Whether request *request* still carries the reasoning of the earlier *step*."""
    if policy == 'keep':
        return True
    if policy == 'drop':
        return False
    if policy == 'keep_latest':
        return step == request - 1
    return not config.externalizes(step)


def _request_blocks(config: SimulationConfig, policy: Policy, request: int) -> list[_Block]:
    blocks: list[_Block] = [('prefix', 0)]
    # A run whose steps have no reasoning has no block of it: one of no tokens would still end a cached prefix
    # when a policy drops it (`--reasoning 0` billed `keep_latest` 29 % more than `keep`). A multiplier of 0 keeps
    # the blocks: `break_even_multiplier` reads the bill's slope through it, as the seed's model does.
    thinks = config.reasoning_tokens > 0
    for step in range(1, request):
        if not thinks:
            pass
        elif policy == 'score':
            blocks.append(('scored', step))
        elif _retains_reasoning(config, policy, step, request):
            blocks.append(('reasoning', step))
        blocks.append(('action', step))
        blocks.append(('observation', step))
    return blocks


def _block_tokens(config: SimulationConfig, block: _Block) -> float:
    kind = block[0]
    if kind == 'prefix':
        return config.prefix_tokens
    if kind == 'reasoning':
        return _step_reasoning(config)
    if kind == 'scored':
        return _step_reasoning(config) * (1 - config.drop_share)
    if kind == 'action':
        return config.action_tokens
    return config.observation_tokens


@dataclass(frozen=True)
class _Split:
    """Input tokens of a request (or of its reasoning blocks) by billing class."""

    read: float = 0.0
    """Tokens served from the cache."""

    write: float = 0.0
    """Tokens written to the cache."""

    uncached: float = 0.0
    """Tokens billed at the plain input rate."""

    @property
    def total(self) -> float:
        return self.read + self.write + self.uncached

    def cost(self, prices: Prices) -> float:
        return (
            self.read * prices.cache_read + self.write * prices.cache_write + self.uncached * prices.input
        ) / _TOKENS_PER_PRICE_UNIT


def _split(config: SimulationConfig, blocks: list[_Block], matched: int, *, reasoning_only: bool = False) -> _Split:
    """Bill *blocks*: the first *matched* are cache reads, the rest cache writes (all uncached without a cache).

    With *reasoning_only*, only the reasoning blocks' share is counted, which attributes the
    carrying cost of reasoning without a second, differently keyed match.
    """

    def tokens(part: list[_Block]) -> float:
        return sum(
            _block_tokens(config, block) for block in part if not reasoning_only or block[0] in ('reasoning', 'scored')
        )

    if not config.cache:
        return _Split(uncached=tokens(blocks))
    return _Split(read=tokens(blocks[:matched]), write=tokens(blocks[matched:]))


def simulate(config: SimulationConfig, policy: Policy) -> SimulationResult:
    """Simulate *policy* over *config*, request by request.

    Args:
        config: The agent run and price sheet.
        policy: Which reasoning is kept in the history; see the module docstring.

    Returns:
        Run totals, the bill by billing class, the reasoning attribution, and one row per request.

    Raises:
        ValueError: If *policy* is not one of `POLICIES`.
    """
    if policy not in POLICIES:
        raise ValueError(f'simulate: policy must be one of {POLICIES!r}, got {policy!r}.')
    prices = config.prices
    cache = _PrefixCache()
    output_per_step = _step_reasoning(config) + config.action_tokens
    rows: list[StepRow] = []
    inputs: list[_Split] = []
    carried: list[_Split] = []
    for request in range(1, config.steps + 1):
        blocks = _request_blocks(config, policy, request)
        matched = cache.longest_match(blocks)
        cache.add(blocks)
        split = _split(config, blocks, matched)
        reasoning = _split(config, blocks, matched, reasoning_only=True)
        inputs.append(split)
        carried.append(reasoning)
        rows.append(
            StepRow(
                step=request,
                input_tokens=split.total,
                cache_read_tokens=split.read,
                cache_write_tokens=split.write,
                uncached_input_tokens=split.uncached,
                carried_reasoning_tokens=reasoning.total,
                output_tokens=output_per_step,
                cost=split.cost(prices) + output_per_step * prices.output / _TOKENS_PER_PRICE_UNIT,
            )
        )
    return _totals(config, policy, inputs, carried, tuple(rows))


def _totals(
    config: SimulationConfig,
    policy: Policy,
    inputs: list[_Split],
    carried: list[_Split],
    rows: tuple[StepRow, ...],
) -> SimulationResult:
    prices = config.prices
    read = sum(split.read for split in inputs)
    write = sum(split.write for split in inputs)
    uncached = sum(split.uncached for split in inputs)
    output = sum(row.output_tokens for row in rows)
    reasoning_output = _step_reasoning(config) * config.steps
    return SimulationResult(
        policy=policy,
        config=config,
        input_tokens=read + write + uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        uncached_input_tokens=uncached,
        output_tokens=output,
        reasoning_output_tokens=reasoning_output,
        carried_reasoning_tokens=sum(split.total for split in carried),
        cost=CostBreakdown(
            uncached_input=uncached * prices.input / _TOKENS_PER_PRICE_UNIT,
            cache_write=write * prices.cache_write / _TOKENS_PER_PRICE_UNIT,
            cache_read=read * prices.cache_read / _TOKENS_PER_PRICE_UNIT,
            output=output * prices.output / _TOKENS_PER_PRICE_UNIT,
        ),
        reasoning_output_cost=reasoning_output * prices.output / _TOKENS_PER_PRICE_UNIT,
        reasoning_carry_cost=sum(split.cost(prices) for split in carried),
        steps=rows,
    )


def compare_policies(config: SimulationConfig) -> dict[str, SimulationResult]:
    """Simulate every policy over *config*, keyed by policy name in `POLICIES` order."""
    return {policy: simulate(config, policy) for policy in POLICIES}


def relative_change(result: SimulationResult, baseline: SimulationResult) -> float:
    """The fractional change of *result*'s bill against *baseline*'s (`-0.2` means 20% cheaper).

    Raises:
        ValueError: If the baseline bill is zero, so no relative change exists.
    """
    if baseline.total_cost == 0:
        raise ValueError('relative_change: the baseline bill is zero.')
    return result.total_cost / baseline.total_cost - 1


def break_even_multiplier(config: SimulationConfig, policy: Policy = 'drop') -> float:
    """The reasoning multiplier at which *policy*'s bill equals `'keep'` at multiplier 1.

    Solved exactly rather than by search: which blocks hit the cache depends only on block
    identity, never on block sizes, so every billed token count (and therefore the bill) is affine
    in the reasoning size. Two simulations, at multipliers 0 and 1, fix the line.

    Args:
        config: The agent run; its own `reasoning_multiplier` is ignored.
        policy: The policy to break even; `'keep'` trivially breaks even at 1.

    Returns:
        The multiplier; above it *policy* costs more than `'keep'`, below it less.

    Raises:
        ValueError: If reasoning does not move the bill (no reasoning tokens or a zero output
            price), or if *policy* costs more than `'keep'` even with no reasoning at all.
    """
    target = simulate(replace(config, reasoning_multiplier=1.0), 'keep').total_cost
    at_zero = simulate(replace(config, reasoning_multiplier=0.0), policy).total_cost
    at_one = simulate(replace(config, reasoning_multiplier=1.0), policy).total_cost
    slope = at_one - at_zero
    if slope <= 0:
        raise ValueError(f'break_even_multiplier: reasoning does not change the {policy!r} bill, so no break-even.')
    multiplier = (target - at_zero) / slope
    if multiplier < 0:
        raise ValueError(f'break_even_multiplier: {policy!r} costs more than keep even with no reasoning.')
    return multiplier


# --- Seed 001: how often to compact -------------------------------------------------------------------


@dataclass(frozen=True)
class ThresholdConfig:
    """Seed 001's cost model of a long session compacted at a threshold (a model, not a measurement).

    Each turn adds `turn_tokens` to the context and writes `output_tokens`. Before a turn, a context over
    `threshold × window_tokens` is compacted: one summarizer request reads the context and writes
    `summary_tokens`, and the context becomes `kept_fraction × threshold × window_tokens` (the seed's
    design goes from 75 % to about 40 % of the window). Caching: a request reads `cache_hit` of the
    context it carries from the cache (the rest, entries that expired between turns, at the input rate)
    and writes what is new; the first request after a compaction writes its whole context.
    The defaults reproduce the seed's figures: 18 summaries when compacting often (25 %) against 4 when
    compacting late (90 %), and a 37 % lower bill for compacting often.
    """

    turns: int = 150
    """Turns of the session (one request each)."""

    window_tokens: int = 200_000
    """The model's context window."""

    base_tokens: int = 20_000
    """System prompt, tools and the opening request."""

    turn_tokens: int = 3_100
    """What each turn adds to the context (the user's message, tool output, the reply)."""

    output_tokens: int = 300
    """Output written per turn."""

    summary_tokens: int = 3_000
    """Output of one summarizer request."""

    kept_fraction: float = 0.4 / 0.75
    """The context after a compaction, as a share of the threshold (seed: 75 % of the window down to 40 %)."""

    cache_hit: float = 0.9
    """Share of a request's carried context read from the cache."""

    prices: Prices = SONNET_5_5
    """Price sheet (the seed's Sonnet prices)."""

    def __post_init__(self) -> None:
        for name in ('turns', 'window_tokens'):
            if getattr(self, name) < 1:
                raise ValueError(f'ThresholdConfig.{name} must be a positive integer, got {getattr(self, name)!r}.')
        for name in ('base_tokens', 'turn_tokens', 'output_tokens', 'summary_tokens'):
            if getattr(self, name) < 0:
                raise ValueError(f'ThresholdConfig.{name} must be non-negative, got {getattr(self, name)!r}.')
        for name in ('kept_fraction', 'cache_hit'):
            value: float = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f'ThresholdConfig.{name} must lie in [0, 1], got {value!r}.')


THRESHOLDS: dict[str, float] = {'often': 0.25, 'design': 0.75, 'late': 0.90}
"""Seed 001's three compaction thresholds, as shares of the window."""


@dataclass(frozen=True)
class ThresholdResult:
    """One simulated session at one threshold."""

    threshold: float
    summaries: int
    """Compactions (summarizer requests) in the session."""

    input_tokens: float
    """Every input token, summarizer requests included."""

    total_cost: float
    """The bill in dollars."""


def simulate_threshold(config: ThresholdConfig, threshold: float) -> ThresholdResult:
    """Simulate one session compacted at *threshold* (a share of the window, in `(0, 1]`)."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f'simulate_threshold: threshold must lie in (0, 1], got {threshold!r}.')
    prices = config.prices
    per_token_carried = (
        config.cache_hit * prices.cache_read + (1 - config.cache_hit) * prices.input
    ) / _TOKENS_PER_PRICE_UNIT
    context = float(config.base_tokens)
    summaries = 0
    input_tokens = 0.0
    cost = 0.0
    rewritten = True  # the first request writes its whole context
    for _ in range(config.turns):
        if context > threshold * config.window_tokens:
            summaries += 1
            input_tokens += context
            cost += context * per_token_carried + config.summary_tokens * prices.output / _TOKENS_PER_PRICE_UNIT
            context = config.kept_fraction * threshold * config.window_tokens
            rewritten = True
        input_tokens += context + config.turn_tokens
        carried = context * (prices.cache_write / _TOKENS_PER_PRICE_UNIT if rewritten else per_token_carried)
        new = config.turn_tokens * prices.cache_write + config.output_tokens * prices.output
        cost += carried + new / _TOKENS_PER_PRICE_UNIT
        context += config.turn_tokens
        rewritten = False
    return ThresholdResult(threshold, summaries, input_tokens, cost)


def compare_thresholds(config: ThresholdConfig) -> dict[str, ThresholdResult]:
    """Simulate the session at each of seed 001's thresholds (`THRESHOLDS`)."""
    return {name: simulate_threshold(config, threshold) for name, threshold in THRESHOLDS.items()}
