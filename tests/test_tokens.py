"""Token estimates and context windows on pydantic-ai's public API: the same numbers as pydantic-ai-harness.

The comparison with harness runs where harness is installed (`pydantic-ai-compaction[harness]`); the
behaviour tests run everywhere, harness or not.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    AgentInstructionSource,
    BinaryContent,
    CapabilityInstructionSource,
    CompactionPart,
    InstructionBaselinePart,
    InstructionDeltaPart,
    InstructionId,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction.runtime.pins import PIN_METADATA, is_pinned, pin
from pydantic_ai_compaction.runtime.tokens import (
    DEFAULT_CONTEXT_WINDOW,
    context_input_tokens,
    estimate_context_tokens,
    estimate_token_count,
    measure_message_text,
    resolve_context_window,
)

from .reliability import histories
from .support import recorded_history

PNG = BinaryContent(data=b'\x89PNG\r\n\x1a\n' + bytes(range(32)), media_type='image/png')
LOADED = InstructionId(CapabilityInstructionSource('memory'))
"""A loaded capability's block: its changes outlive instruction windows until a compaction."""
AGENT_BLOCK = InstructionId(AgentInstructionSource(), name='clock')


def usage(input_tokens: int, output_tokens: int = 5) -> RequestUsage:
    return RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens)


def every_part_kind() -> list[ModelMessage]:
    """A history holding every part kind the estimate distinguishes, instruction windows and usage anchors."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart('You audit logs.'),
                UserPromptPart(['Look at this', PNG, TextContent('and this note')]),
                InstructionDeltaPart(id=AGENT_BLOCK, content='It is 09:00.'),
                InstructionDeltaPart(id=LOADED, content='Memory tools are loaded.'),
            ],
            instructions='Be brief.',
        ),
        ModelResponse(
            parts=[
                ThinkingPart('first I read the log'),
                ThinkingPart('', signature='opaque'),
                ToolCallPart('read_log', {'index': 1}, tool_call_id='c1'),
                NativeToolCallPart('web_search', {'query': 'error 503'}, tool_call_id='n1', provider_name='openai'),
                NativeToolReturnPart('web_search', {'hits': ['a', 'b']}, tool_call_id='n1', provider_name='openai'),
            ],
            usage=usage(400, 30),
        ),
        ModelRequest(
            parts=[
                ToolReturnPart('read_log', ['line one', PNG, 'line two'], tool_call_id='c1'),
                ToolAvailabilityDeltaPart(tools_added=['archive_search']),
                # Merged ahead of the baseline: an earlier window's change, no longer sent.
                InstructionDeltaPart(id=AGENT_BLOCK, content='It is 09:04.'),
                InstructionBaselinePart(instructions=[]),
                InstructionDeltaPart(id=AGENT_BLOCK, content='It is 09:05.'),
            ],
            instructions='Be brief. Cite lines.',
        ),
        ModelResponse(parts=[TextPart('{"answer": 1'), SpeechPart(speaker='assistant', transcript='spoken answer')]),
        ModelRequest(
            parts=[
                RetryFeedbackPart(content='answer in JSON', retry=RetryInfo(cause='no_output')),
                SpeechPart(speaker='user', transcript='please continue'),
                pin('The audit covers March only.'),
            ]
        ),
        ModelResponse(
            parts=[TextPart('done')],
            usage=usage(900, 40),
            # A Google long decode: usage sums two requests; the first one's input measures the context.
            metadata={'__pydantic_ai__': {'context_input_tokens': 700}},
        ),
        ModelRequest(
            parts=[CompactionPart(content='Summary so far.'), InstructionDeltaPart(id=LOADED, content='Memory v2.')]
        ),
        ModelRequest(parts=[UserPromptPart('Next question.')], instructions='Be brief, cite lines.'),
    ]


def agent_history() -> list[ModelMessage]:
    """A history recorded from a real agent run: instructions, tool calls, usage from the model."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if calls < 3:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': calls})])
        return ModelResponse(parts=[TextPart('report: done')])

    agent = Agent(FunctionModel(reply), instructions='You audit logs.')

    @agent.tool_plain
    def read_log(index: int) -> str:
        return f'log {index}: ' + 'ok ' * 200

    return agent.run_sync('Audit.').all_messages()


RECORDED = {
    'recorded_history': recorded_history,
    'every_part_kind': every_part_kind,
    'agent_history': agent_history,
}

PARAMETERS = ModelRequestParameters(
    function_tools=[
        ToolDefinition(
            name='archive_search', description='Search the archive.', parameters_json_schema={'type': 'object'}
        )
    ]
)


@pytest.mark.harness
@pytest.mark.parametrize('name', sorted(RECORDED))
@pytest.mark.parametrize('tokenizer', [None, lambda text: len(text.split())], ids=['heuristic', 'words'])
def test_estimates_equal_harness_on_recorded_histories(name: str, tokenizer: Any) -> None:
    """Exactly equal, at every prefix of the history (each prefix is a request the run would send)."""
    from pydantic_ai_harness.compaction import estimate_context_tokens as harness_context
    from pydantic_ai_harness.compaction import estimate_token_count as harness_count

    history = RECORDED[name]()
    for end in range(1, len(history) + 1):
        prefix = history[:end]
        assert estimate_token_count(prefix, tokenizer) == harness_count(prefix, tokenizer)
        assert estimate_context_tokens(prefix, tokenizer) == harness_context(prefix, tokenizer)
        assert estimate_context_tokens(prefix, tokenizer, model_request_parameters=PARAMETERS) == harness_context(
            prefix, tokenizer, model_request_parameters=PARAMETERS
        )


@pytest.mark.harness
@settings(max_examples=40, deadline=None)
@given(history=histories(), anchor=st.integers(0, 30), input_tokens=st.integers(1, 50_000))
def test_estimates_equal_harness_on_generated_histories(
    history: list[ModelMessage], anchor: int, input_tokens: int
) -> None:
    from dataclasses import replace

    from pydantic_ai_harness.compaction import estimate_context_tokens as harness_context
    from pydantic_ai_harness.compaction import estimate_token_count as harness_count

    responses = [i for i, m in enumerate(history) if isinstance(m, ModelResponse)]
    if responses:
        # Put provider usage on one response, so the anchored path is compared too.
        at = responses[anchor % len(responses)]
        response = history[at]
        assert isinstance(response, ModelResponse)
        history = [*history[:at], replace(response, usage=usage(input_tokens)), *history[at + 1 :]]
    assert estimate_token_count(history) == harness_count(history)
    assert estimate_context_tokens(history) == harness_context(history)


def odd_parts() -> list[ModelMessage]:
    """Messages whose texts are not plain strings: structured results and arguments, a `str` subclass, an empty
    thinking block."""

    class Note(str):
        pass

    return [
        ModelRequest(
            parts=[
                ToolReturnPart('read_log', {'lines': ['a', 'b'], 'count': 2}, tool_call_id='c1'),
                ToolReturnPart('read_log', Note('a note'), tool_call_id='c2'),
                ToolReturnPart('read_log', 42, tool_call_id='c3'),
                UserPromptPart(Note('a user note')),
            ],
            instructions='Be brief.',
        ),
        ModelResponse(
            parts=[
                ToolCallPart('read_log', '{"index": 3}', tool_call_id='c4'),
                ToolCallPart('read_log', None, tool_call_id='c5'),
                ThinkingPart(''),
                TextPart(Note('said')),
            ]
        ),
    ]


@settings(max_examples=30, deadline=None)
@given(history=histories())
def test_a_message_measured_without_building_its_texts_counts_every_character_the_estimate_reads(
    history: list[ModelMessage],
) -> None:
    from dataclasses import replace

    for message in [*history, *every_part_kind(), *odd_parts()]:
        alone = replace(message, instructions=None) if isinstance(message, ModelRequest) else message
        measured = measure_message_text(message)
        if isinstance(message, ModelRequest) and any(isinstance(p, InstructionDeltaPart) for p in message.parts):
            assert measured is None  # its text depends on the instruction window around it
        else:
            assert measured is not None
            assert measured[0] == estimate_token_count([alone], len)
            assert 0 <= measured[1] <= measured[0]


@pytest.mark.harness
def test_pins_and_windows_agree_with_harness() -> None:
    from pydantic_ai_harness.compaction import DEFAULT_CONTEXT_WINDOW as HARNESS_DEFAULT
    from pydantic_ai_harness.compaction import is_pinned as harness_is_pinned
    from pydantic_ai_harness.compaction import pin as harness_pin
    from pydantic_ai_harness.compaction import resolve_context_window as harness_window

    assert is_pinned(harness_pin('keep me')) and harness_is_pinned(pin('keep me'))
    assert pin('keep me').content == harness_pin('keep me').content
    assert DEFAULT_CONTEXT_WINDOW == HARNESS_DEFAULT
    for model in ['openai:gpt-4o', 'anthropic:claude-sonnet-4-5', 'gpt-4o', 'nobody:nothing', 'x']:
        assert resolve_context_window(model) == harness_window(model)
    sized = TestModel(profile={'context_window': 12_345})  # pyright: ignore[reportArgumentType]
    assert resolve_context_window(sized) == harness_window(sized) == 12_345


def test_anchor_is_usage_plus_what_came_after() -> None:
    history = recorded_history()
    last = max(i for i, m in enumerate(history) if isinstance(m, ModelResponse))
    response = history[last]
    assert isinstance(response, ModelResponse)
    tail = [p for m in history[last + 1 :] for p in m.parts]
    assert tail and all(isinstance(p, ToolReturnPart) for p in tail)
    after = sum(len(str(p.content)) for p in tail if isinstance(p, ToolReturnPart)) // 4
    assert estimate_context_tokens(history) == response.usage.input_tokens + response.usage.output_tokens + after


def test_heuristic_counts_text_the_provider_is_sent_and_nothing_binary() -> None:
    request = ModelRequest(parts=[UserPromptPart(['abcd' * 10, PNG, TextContent('efgh' * 5)])], instructions='ijkl')
    # 40 + 20 characters of prompt and 4 of instructions; the image's bytes count nothing.
    assert estimate_token_count([request]) == (40 + 20 + 4) // 4
    assert estimate_token_count([request], tokenizer=lambda text: 1) == 2  # one prompt segment, one instructions


def test_instructions_count_once_and_a_change_swaps_the_anchor_estimate() -> None:
    first = ModelRequest(parts=[UserPromptPart('q' * 40)], instructions='a' * 400)
    answer = ModelResponse(parts=[TextPart('r' * 40)], usage=usage(1_000, 10))
    same = ModelRequest(parts=[UserPromptPart('s' * 40)], instructions='a' * 400)
    changed = ModelRequest(parts=[UserPromptPart('s' * 40)], instructions='b' * 800)
    assert estimate_token_count([first, answer, same]) == (40 + 40 + 40 + 400) // 4
    assert estimate_context_tokens([first, answer, same]) == 1_010 + 10
    # New instructions replace the old ones in the next request: +200 for the new set, -100 for the old.
    assert estimate_context_tokens([first, answer, changed]) == 1_010 + 10 + 200 - 100


def test_context_input_tokens_reads_what_pydantic_ai_records_for_summed_usage() -> None:
    plain = ModelResponse(parts=[TextPart('x')], usage=usage(900))
    marked = ModelResponse(
        parts=[TextPart('x')], usage=usage(900), metadata={'__pydantic_ai__': {'context_input_tokens': 700}}
    )
    legacy = ModelResponse(
        parts=[TextPart('x')], usage=usage(900), metadata={'__pydantic_ai__': {'initial_input_tokens': 650}}
    )
    junk = ModelResponse(parts=[TextPart('x')], usage=usage(900), metadata={'__pydantic_ai__': 'not a dict'})
    assert [context_input_tokens(r) for r in (plain, marked, legacy, junk)] == [900, 700, 650, 900]


def test_revealed_tools_add_their_schema_after_the_anchor() -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('hi')]),
        ModelResponse(parts=[TextPart('ok')], usage=usage(100, 0)),
        ModelRequest(parts=[ToolAvailabilityDeltaPart(tools_added=['archive_search'])]),
    ]
    schema = len('archive_search' + 'Search the archive.' + '{"type": "object"}') // 4
    assert estimate_context_tokens(history) == 100
    assert estimate_context_tokens(history, model_request_parameters=PARAMETERS) == 100 + schema


def test_context_window_from_the_profile_the_registry_or_unknown() -> None:
    assert resolve_context_window(TestModel(profile={'context_window': 4_096})) == 4_096  # pyright: ignore[reportArgumentType]
    known = resolve_context_window('openai:gpt-4o')
    assert known is not None and known >= 128_000
    assert resolve_context_window('nobody:no-such-model') is None


def test_pins_use_harness_marker() -> None:
    part = pin('keep')
    assert is_pinned(part)
    assert isinstance(part.content, list) and part.content[0] == TextContent('keep', metadata=PIN_METADATA)
    assert PIN_METADATA == 'pydantic-ai-harness.compaction.pin.v1'
    assert not is_pinned(UserPromptPart('keep')) and not is_pinned(UserPromptPart([TextContent('keep')]))
    assert not is_pinned(SystemPromptPart('keep'))


def test_a_trigger_counts_with_its_tokenizer_where_usage_does_not_reach() -> None:
    from pydantic_ai_compaction import Trigger

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('word ' * 100)])]
    assert Trigger(tokens=1).measure(history) == 500 // 4
    per_character = Trigger(tokens=200, tokenizer=len)
    assert per_character.measure(history) == 500
    assert per_character.crossed(history, None) is not None and Trigger(tokens=200).crossed(history, None) is None
    # After a response with usage, only what follows it is counted with the tokenizer.
    history += [
        ModelResponse(parts=[TextPart('ok')], usage=usage(90, 3)),
        ModelRequest(parts=[UserPromptPart('abcdef')]),
    ]
    assert per_character.measure(history) == 90 + 3 + 6


def test_a_tokenizer_counting_in_fractions_gives_whole_tokens_to_events_and_records() -> None:
    # `len(text) / 4` was summed as a float: events and boundary records typed `int` held 3038.25.
    from pydantic_ai_compaction import CompactionEvent, StatelessSummary, Trigger

    from .support import ScriptedAgentModel, audit_agent

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('word ' * 100 + 'ab')])]
    quarter = Trigger(tokens=1, tokenizer=lambda text: len(text) / 4)
    assert quarter.measure(history) == 125 and type(quarter.measure(history)) is int  # 502 / 4 = 125.5
    events: list[CompactionEvent] = []
    summary = StatelessSummary(trigger=Trigger(tokens=3_000, tokenizer=lambda text: len(text) / 4))
    summary.observer = events.append
    audit_agent(ScriptedAgentModel(logs=8), [summary]).run_sync('Audit logs 0-7.')
    compacted = [event for event in events if event.record is not None]
    assert compacted and all(type(event.trigger_tokens) is int for event in compacted)
    assert all(type(event.record.trigger_tokens) is int for event in compacted if event.record is not None)
