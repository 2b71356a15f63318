"""`ForgetReasoning(policy='score')`: block-level reasoning scoring (seed 002's ICLR method)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import ForgetReasoning
from pydantic_ai_compaction.processors.views.forget import reasoning_decision
from pydantic_ai_compaction.runtime.checks import ConfigurationError
from pydantic_ai_compaction.runtime.scoring import SKIP, compression_gain, skipped_count, split_blocks

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '40'))

SOURCE = 'def parse_config(path):\n    data = load(path)\n    return data["timeout"]\n'
ECHO = 'parse_config reads data["timeout"] from the loaded file: def parse_config(path) returns data["timeout"].'
NOVEL = 'Hypothesis: the retry budget in scheduler.rs resets on SIGHUP, so the 17 ms spikes come from reload.'
ECHO2 = 'So def parse_config(path) does data = load(path) and return data["timeout"], no default.'
NOVEL2 = 'Unrelated idea: check whether quota_v2 in billing.go overflowed near 03:00 UTC last Tuesday.'


def dump(message: ModelMessage) -> bytes:
    return ModelMessagesTypeAdapter.dump_json([message])


def thinking_of(message: ModelMessage) -> str:
    return '\n\n'.join(p.content for p in message.parts if isinstance(p, ThinkingPart))


def run(steps: list[list[ModelResponsePart]], capability: ForgetReasoning[None]) -> list[list[ModelMessage]]:
    queue: Iterator[list[ModelResponsePart]] = iter(steps)
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=next(queue))

    agent = Agent(FunctionModel(respond), capabilities=[capability])

    @agent.tool_plain
    def read_file(path: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return SOURCE

    result = agent.run_sync('why does the service time out?')
    seen.append(result.all_messages())
    return seen


def test_an_agent_run_skips_the_predictable_blocks_at_append_time_only() -> None:
    reasoning = f'{ECHO}\n\n{NOVEL}\n\n{ECHO2}\n\n{NOVEL2}'
    steps: list[list[ModelResponsePart]] = [
        [ThinkingPart('I should read the config parser first.'), ToolCallPart('read_file', {'path': 'cfg.py'})],
        [ThinkingPart(reasoning), ToolCallPart('read_file', {'path': 'sched.rs'})],
        [ThinkingPart('Final check.\n\nStill thinking.'), TextPart('the reload resets the retry budget')],
    ]
    seen = run(steps, ForgetReasoning(policy='score', drop_share=0.5))
    # Cache-safe: every request starts with the previous request's messages, byte for byte.
    for earlier, later in pairwise(seen[:-1]):
        assert [dump(m) for m in later[: len(earlier)]] == [dump(m) for m in earlier]
    final = [m for m in seen[-1] if isinstance(m, ModelResponse)]
    assert [reasoning_decision(m) for m in final] == ['scored', 'scored', None]
    # One block, share 0.5: nothing skipped. Four blocks: the two that repeat the file just read.
    assert thinking_of(final[0]) == 'I should read the config parser first.'
    assert split_blocks(thinking_of(final[1])) == [SKIP, NOVEL, SKIP, NOVEL2]
    marks = (final[1].metadata or {})['pydantic_ai_compaction']
    assert (marks['skipped_blocks'], marks['blocks']) == (2, 4)
    assert thinking_of(final[2]) == 'Final check.\n\nStill thinking.'  # the last step is never touched


def test_the_default_scorer_ranks_repetition_above_new_content() -> None:
    context = f'read_file({{"path": "cfg.py"}})\n\n{SOURCE}'
    echo, novel = compression_gain(context, [ECHO, NOVEL])
    assert echo > novel + 0.2
    assert compression_gain(context, [ECHO, NOVEL]) == [echo, novel]  # deterministic


def test_a_language_model_scorer_plugs_in_through_the_protocol() -> None:
    calls: list[tuple[str, list[str]]] = []

    def by_length(context: str, blocks: Sequence[str]) -> list[float]:
        calls.append((context, list(blocks)))
        return [float(len(block)) for block in blocks]  # longest = most predictable

    steps: list[list[ModelResponsePart]] = [
        [ThinkingPart('a\n\nbbbb\n\ncc\n\nddd\n\ne'), ToolCallPart('read_file', {'path': 'x'})],
        [TextPart('done')],
    ]
    seen = run(steps, ForgetReasoning(policy='score', scorer=by_length, drop_share=0.6))
    response = next(m for m in seen[-1] if isinstance(m, ModelResponse))
    assert split_blocks(thinking_of(response)) == ['a', SKIP, SKIP, SKIP, 'e']  # floor(0.6 × 5) = 3
    assert calls == [('why does the service time out?', ['a', 'bbbb', 'cc', 'ddd', 'e'])]


def test_a_failing_scorer_leaves_the_step_as_it_was() -> None:
    def wrong(context: str, blocks: Sequence[str]) -> list[float]:
        return [math.nan] * len(blocks)

    steps: list[list[ModelResponsePart]] = [
        [ThinkingPart('one\n\ntwo'), ToolCallPart('read_file', {'path': 'x'})],
        [TextPart('done')],
    ]
    with pytest.warns(RuntimeWarning, match='not a finite number'):
        seen = run(steps, ForgetReasoning(policy='score', scorer=wrong))
    response = next(m for m in seen[-1] if isinstance(m, ModelResponse))
    assert thinking_of(response) == 'one\n\ntwo' and reasoning_decision(response) is None


def test_signed_thinking_is_never_edited() -> None:
    steps: list[list[ModelResponsePart]] = [
        [ThinkingPart(f'{ECHO}\n\n{ECHO}', signature='sig'), ToolCallPart('read_file', {'path': 'x'})],
        [TextPart('done')],
    ]
    seen = run(steps, ForgetReasoning(policy='score', drop_share=1.0))
    response = next(m for m in seen[-1] if isinstance(m, ModelResponse))
    assert thinking_of(response) == f'{ECHO}\n\n{ECHO}' and reasoning_decision(response) == 'kept'


@pytest.mark.parametrize('value', [1.5, -0.1, math.nan, math.inf, True, '0.8', None])
def test_drop_share_is_validated(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r'ForgetReasoning\.drop_share'):
        ForgetReasoning(policy='score', drop_share=value)  # pyright: ignore[reportArgumentType]


def test_scorer_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match=r'ForgetReasoning\.scorer'):
        ForgetReasoning(policy='score', scorer='qwen')  # pyright: ignore[reportArgumentType]


words = st.sampled_from(['timeout', 'config', 'retry', 'parse', 'the', 'data', 'SIGHUP', 'x = 1', '17 ms', '{'])
block = st.lists(words, min_size=1, max_size=8).map(' '.join)
step_blocks = st.lists(block, min_size=0, max_size=7)


def history(steps: list[list[str]]) -> list[ModelMessage]:
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')])]
    for index, blocks in enumerate(steps):
        parts: list[ModelResponsePart] = [ThinkingPart('\n\n'.join(blocks))] if blocks else []
        messages.append(ModelResponse(parts=[*parts, ToolCallPart('read_file', {'path': 'f'}, f'c{index}')]))
        messages.append(ModelRequest(parts=[ToolReturnPart('read_file', SOURCE, f'c{index}')]))
    return messages


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step_blocks, min_size=1, max_size=5), share=st.floats(0, 1), in_progress=st.booleans())
def test_score_invariants(steps: list[list[str]], share: float, in_progress: bool) -> None:
    capability: ForgetReasoning[None] = ForgetReasoning(policy='score', drop_share=share)
    messages = history(steps)
    if in_progress:
        messages.pop()  # the last step's results are not in: it is the step in progress
    decided = capability.decide(messages) or messages
    assert len(decided) == len(messages)
    for index, (before, after) in enumerate(zip(messages, decided, strict=True)):
        if not isinstance(before, ModelResponse) or index == len(messages) - 1:
            assert dump(after) == dump(before)  # requests and the step in progress are never touched
            continue
        assert isinstance(after, ModelResponse)
        assert [p for p in after.parts if not isinstance(p, ThinkingPart)] == [
            p for p in before.parts if not isinstance(p, ThinkingPart)
        ]
        blocks = split_blocks(thinking_of(before))
        kept = split_blocks(thinking_of(after))
        assert len(kept) == len(blocks)
        skipped = sum(b == SKIP for b in kept)
        assert skipped == skipped_count(share, len(blocks))
        # share × blocks rounded down, except a product a float rounding put just under an integer (0.7 × 10).
        exact = share * len(blocks)
        assert skipped == math.floor(exact) or (skipped == math.ceil(exact) and math.isclose(exact, skipped))
        assert all(k in (SKIP, b) for k, b in zip(kept, blocks, strict=True))  # the rest stays, in order
    assert capability.decide(decided) is None  # idempotent: a decided step is never scored again


@pytest.mark.bench
def test_the_cost_simulator_measures_the_score_policy_between_keep_and_drop() -> None:
    from dataclasses import replace

    from pydantic_ai_compaction_bench.costsim import SimulationConfig, break_even_multiplier, simulate

    seed = SimulationConfig()
    keep, drop, score = (simulate(seed, policy).total_cost for policy in ('keep', 'drop', 'score'))
    assert drop < score < keep
    assert score == pytest.approx(1.07114, abs=1e-5)  # -16.1 % against keep (docs/reasoning-scorer.md)
    assert simulate(replace(seed, drop_share=1.0), 'score').total_cost == pytest.approx(drop, abs=1e-12)
    assert simulate(replace(seed, drop_share=0.0), 'score').total_cost == pytest.approx(keep, abs=1e-12)
    assert break_even_multiplier(seed, 'score') == pytest.approx(1.316, abs=1e-3)
    with pytest.raises(ValueError, match='drop_share'):
        SimulationConfig(drop_share=math.nan)
