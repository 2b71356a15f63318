"""The shared trigger, and configuration errors raised at construction."""

from __future__ import annotations

import math
import re
import warnings

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.test import TestModel

from pydantic_ai_compaction import (
    Fork,
    InstructionSources,
    Proposal,
    Reassert,
    ResetToCheckpoint,
    RetryPolicy,
    StatelessSummary,
    Summary,
    Switch,
    Trigger,
)
from pydantic_ai_compaction.processors import Pipeline
from pydantic_ai_compaction.runtime import apply_layout, segment, validate
from pydantic_ai_compaction.runtime.tokens import estimate_context_tokens, estimate_token_count

from .support import recorded_history


@pytest.mark.parametrize(
    ('build', 'message'),
    [
        (lambda: Trigger(), 'Trigger needs a limit'),
        (lambda: Trigger(tokens=0), 'Trigger.tokens must be an integer ≥ 1 or None, got 0'),
        (lambda: Trigger(tokens=-5), 'Trigger.tokens must be an integer ≥ 1 or None, got -5'),
        (lambda: Trigger(fraction=0), r'Trigger.fraction must be a finite number > 0 ≤ 1 or None, got 0'),
        (lambda: Trigger(fraction=1.5), r'Trigger.fraction must be a finite number > 0 ≤ 1 or None, got 1.5'),
        (lambda: Trigger(tokens=10, fraction=0.5), 'at most one of `tokens` and `fraction`'),
        (lambda: Trigger(messages=0), 'Trigger.messages must be an integer ≥ 1 or None, got 0'),
        (lambda: Trigger(tokens=10, context_window=1000), 'context_window only applies together with `fraction`'),
        (
            lambda: Trigger(fraction=0.5, context_window=0),
            'Trigger.context_window must be an integer from 1 to 1000000000000 or None, got 0',
        ),
        (lambda: Fork(variant='yaml'), "Fork.variant must be one of 'json', 'free', 'fixed', got 'yaml'"),  # pyright: ignore[reportArgumentType]
        (lambda: Fork(fallback_keep_last=0), r'Fork.fallback_keep_last must be an integer ≥ 1, got 0'),
        (lambda: StatelessSummary(keep_last=-1), 'StatelessSummary.keep_last must be an integer ≥ 0, got -1'),
        (lambda: ResetToCheckpoint(excerpt_chars=-1), r'ResetToCheckpoint\.excerpt_chars must be an integer ≥ 0'),
        (lambda: RetryPolicy(attempts=0), 'RetryPolicy.attempts must be an integer from 1 to 100, got 0'),
        (lambda: InstructionSources(markers=('  ',)), 'markers must not contain empty strings'),
        (lambda: Pipeline([]), 'Pipeline.steps must be a non-empty list of compaction strategies, got'),
    ],
)
def test_bad_configuration_fails_at_construction_naming_the_field(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # pyright: ignore[reportCallIssue]


@pytest.mark.parametrize(
    ('build', 'message'),
    [
        (lambda: Reassert('native'), 'Reassert.inner must be a compaction strategy'),  # pyright: ignore[reportArgumentType]
        (lambda: Fork(trigger=18_000), 'Fork.trigger must be a Trigger, got 18000'),  # pyright: ignore[reportArgumentType]
        (
            lambda: Switch(when=lambda s: True, then=Fork(), otherwise=None),
            'Switch.otherwise must be a compaction strategy',
        ),  # pyright: ignore[reportArgumentType]
    ],
)
def test_wrong_types_fail_at_construction(build: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        build()  # pyright: ignore[reportCallIssue]


def test_limits() -> None:
    history = recorded_history()
    tokens = estimate_context_tokens(history)
    assert Trigger(tokens=tokens - 1).crossed(history, None) is not None
    assert Trigger(tokens=tokens).crossed(history, None) is None
    crossing = Trigger(messages=len(history) - 1).crossed(history, None)
    assert crossing is not None and crossing.reason == 'messages'
    assert Trigger(fraction=0.5, context_window=2 * tokens + 2).crossed(history, None) is None
    assert Trigger(fraction=0.5, context_window=2 * tokens - 2).crossed(history, None) is not None


def test_fraction_resolves_the_model_window() -> None:
    model = TestModel(profile={'context_window': 10_000})  # pyright: ignore[reportArgumentType]
    assert Trigger(fraction=0.25).token_limit(model) == 2_500
    assert Trigger(fraction=0.25, context_window=4_000).token_limit(model) == 1_000
    assert Trigger(fraction=0.5, fallback_context_window=1_000).token_limit(None) == 500


def test_a_kept_response_with_pre_compaction_usage_is_not_used_as_anchor() -> None:
    history = recorded_history()
    view = segment(history)
    layout = validate(Proposal(kept=(), summary=Summary('short summary')), view)
    compacted = apply_layout(
        view, layout, {'strategy': 'fork', 'boundary_id': 'g7', 'next_id': 8, 'kept': list(layout.keep)}
    )
    anchored = estimate_context_tokens(compacted)  # anchors on usage reported before compaction
    measured = Trigger(tokens=1).measure(compacted)
    assert measured == estimate_token_count(compacted) < anchored
    # Once a new response arrives, its usage is trusted again.
    fresh: list[ModelMessage] = [*history]
    assert Trigger(tokens=1).measure(fresh) == estimate_context_tokens(fresh)


def test_a_fraction_of_an_unknown_window_warns_and_names_the_model() -> None:
    from pydantic_ai.models.function import FunctionModel

    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('ok')]), model_name='local-8k')
    with pytest.warns(RuntimeWarning, match=r'context window of function:local-8k is not known; assuming 200,000'):
        assert Trigger(fraction=0.5).token_limit(model) == 100_000
    # A `FunctionModel`'s own name already starts with its system: it is not said twice.
    unnamed = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('ok')]))
    with pytest.warns(RuntimeWarning) as caught:
        Trigger(fraction=0.5).token_limit(unnamed)
    assert f'context window of {unnamed.model_name} is not known' in str(caught[0].message)
    assert 'function:function:' not in str(caught[0].message)
    # A window the user states is used as it is, silently.
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert Trigger(fraction=0.5, context_window=8_000).token_limit(model) == 4_000


@pytest.mark.parametrize('count', [math.nan, -1, 'many', None, math.inf])
def test_a_tokenizer_that_returns_no_count_is_said_at_each_request_and_the_run_goes_on(count: object) -> None:
    # NaN compares false with every threshold: compaction was off for good, and nothing said so.
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from pydantic_ai_compaction import ResetToCheckpoint

    steps = iter([*([ToolCallPart('read', {'i': i})] for i in range(4)), [TextPart('done')]])

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=next(steps), usage=RequestUsage(input_tokens=10, output_tokens=1))

    trigger = Trigger(tokens=30, tokenizer=lambda text: count)  # pyright: ignore[reportArgumentType, reportUnknownLambdaType]
    agent = Agent(FunctionModel(respond), capabilities=[ResetToCheckpoint(trigger=trigger)])

    @agent.tool_plain
    def read(i: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return 'line of output ' * 40

    with pytest.warns(RuntimeWarning, match=f'the tokenizer returned {re.escape(repr(count))} for a text of') as caught:
        assert agent.run_sync('go').output == 'done'
    assert len([w for w in caught if 'the tokenizer returned' in str(w.message)]) == 5  # each request
