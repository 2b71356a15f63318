"""Tool results pydantic-ai cannot write as JSON (a lone surrogate in structured content, or in an error's text)
are read by every reader in the lossless encoding, never as an error that stops a compaction or a view."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_core import PydanticSerializationError

from pydantic_ai_compaction.processors.views.forget import context_text
from pydantic_ai_compaction.runtime.encoding import to_json
from pydantic_ai_compaction.runtime.transcript import result_chars, return_text


@pytest.mark.parametrize(
    ('content', 'outcome', 'expected'),
    [
        ({'rows': 'a\ud800b'}, 'success', '{"rows":"a\\ud800b"}'),
        (['x', '\udfff', 12345678901234567890123], 'success', '["x","\\udfff",12345678901234567890123]'),
        ('bad \ud800 input', 'failed', '{"error":"bad \\ud800 input"}'),
        ({'k': '\ud800'}, 'failed', to_json({'error': '{"k":"\\ud800"}'})),
    ],
)
def test_a_result_pydantic_cannot_write_is_read_in_the_lossless_encoding(
    content: Any, outcome: Any, expected: str
) -> None:
    part = ToolReturnPart('read', content, tool_call_id='c1', outcome=outcome)
    with pytest.raises(ValueError):
        part.model_response_str()  # what the readers used to call, and what made them fail
    assert return_text(part) == expected
    assert result_chars(part) == len(expected)


def test_a_result_pydantic_writes_reads_as_pydantic_writes_it() -> None:
    for part in (
        ToolReturnPart('read', {'b': 1, 'a': [1.5, None]}, tool_call_id='c1'),
        ToolReturnPart('read', 'plain \ud800 text', tool_call_id='c1'),  # a string is sent as it is
        ToolReturnPart('read', 'boom', tool_call_id='c1', outcome='failed'),
        ToolReturnPart('read', None, tool_call_id='c1'),
    ):
        content = part.content
        expected = content if isinstance(content, str) and part.outcome == 'success' else part.model_response_str()
        assert return_text(part) == expected
        assert result_chars(part) == len(expected)


def test_forget_reasoning_context_reads_odd_calls_and_results() -> None:
    call = ToolCallPart('lookup', {'q': 'x\ud800'}, tool_call_id='c1')
    messages: list[ModelMessage] = [
        ModelResponse(parts=[call]),
        ModelRequest(parts=[ToolReturnPart('lookup', {'hit': '\udc00'}, tool_call_id='c1')]),
    ]
    with pytest.raises(ValueError):
        call.args_as_json_str()
    assert context_text(messages) == 'lookup({"q":"x\\ud800"})\n\n{"hit":"\\udc00"}'


def _run_over_a_resumed_history(capability: Any) -> list[ModelMessage]:
    """What the model was last sent when *capability* compacts a resumed 30-step history whose second result is
    structured and holds a lone surrogate (the run must answer `done`)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import TextPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(messages)
        return ModelResponse(parts=[TextPart('done')])

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')])]
    for step in range(30):
        content: object = {'rows': 'a\ud800b' * 300} if step == 1 else 'ok ' * 300
        history.append(ModelResponse(parts=[ToolCallPart('read', {'i': step}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read', content, tool_call_id=f'c{step}')]))
    history.append(ModelResponse(parts=[TextPart('read them all')]))
    agent = Agent(FunctionModel(respond), capabilities=[capability])
    assert agent.run_sync('next', message_history=history).output == 'done'
    last = sent[-1]
    # The compaction dropped the exchange holding the result, so the agent's own request could be sent.
    assert not [
        part
        for message in last
        for part in message.parts
        if isinstance(part, ToolReturnPart) and not isinstance(part.content, str)
    ]
    return last


def test_a_fork_that_cannot_send_such_a_result_falls_back_and_the_run_goes_on() -> None:
    from pydantic_ai_compaction import CompactionEvent, Fork, Trigger

    events: list[CompactionEvent] = []
    _run_over_a_resumed_history(Fork(trigger=Trigger(tokens=100), observer=events.append))
    records = [event.record for event in events if event.record is not None]
    assert [record.fallback_reason for record in records] == ['compactor_error']
    assert 'surrogates not allowed' in (records[0].detail or '')


def test_a_reset_of_a_resumed_history_holding_such_a_result_checkpoints_it_and_the_run_goes_on() -> None:
    from pydantic_ai_compaction import CompactionEvent, ResetToCheckpoint, Trigger

    events: list[CompactionEvent] = []
    last = _run_over_a_resumed_history(
        ResetToCheckpoint(trigger=Trigger(tokens=1_000), max_chars=200_000, observer=events.append)
    )
    records = [event.record for event in events if event.record is not None]
    assert records and [record.fallback_reason for record in records] == [None] * len(records)
    # The call is listed in the checkpoint, with its result's size as the model read it (the lossless encoding).
    checkpoint = '\n'.join(str(getattr(part, 'content', '')) for message in last for part in message.parts)
    assert 'read({"i":1}) → success, 2,411 chars' in checkpoint


def test_reassert_reads_a_failed_result_holding_a_lone_surrogate_as_it_reads_any_failed_result() -> None:
    from pydantic_ai.messages import UserPromptPart

    from pydantic_ai_compaction.runtime.instructions import InstructionSources, gather_instructions
    from pydantic_ai_compaction.runtime.segment import segment

    def gathered(text: str, outcome: Any) -> tuple[str, ...]:
        history: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart('go')]),
            ModelResponse(parts=[ToolCallPart('deploy', {}, tool_call_id='c1')]),
            ModelRequest(parts=[ToolReturnPart('deploy', text, tool_call_id='c1', outcome=outcome)]),
            ModelResponse(parts=[ToolCallPart('deploy', {}, tool_call_id='c2')]),
            ModelRequest(parts=[ToolReturnPart('deploy', 'ok', tool_call_id='c2')]),
        ]
        return tuple(gather_instructions(segment(history), InstructionSources(markers=('CHANGE:',))))

    # A failed result is read inside its `{"error": ...}` wrapper, where no marker starts a line; the surrogate
    # used to raise instead.
    assert gathered('CHANGE: use port 8\ud800\nrest', 'failed') == gathered('CHANGE: use port 8\nrest', 'failed') == ()
    assert gathered('CHANGE: use port 8\ud800\nrest', 'success') == ('CHANGE: use port 8\ud800',)


def test_archive_numbers_and_lists_such_a_result_and_the_run_goes_on() -> None:
    # Its reminder measured each result with `model_response_str`, which refuses the surrogate: the run ended.
    from pydantic_ai import Agent
    from pydantic_ai.messages import TextPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from pydantic_ai_compaction import Archive

    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(messages)
        # Usage given, as a provider reports it: `FunctionModel` would estimate it from the text, and refuse it.
        return ModelResponse(parts=[TextPart('done')], usage=RequestUsage(input_tokens=10, output_tokens=1))

    content = {'s': 'a\udfffb' * 400}
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('read it')]),
        ModelResponse(parts=[ToolCallPart('read', {'index': 1}, tool_call_id='c1')]),
        ModelRequest(parts=[ToolReturnPart('read', content, tool_call_id='c1')]),
        ModelResponse(parts=[TextPart('read')]),
    ]

    def run(capabilities: list[Any]) -> str:
        try:
            return (
                Agent(FunctionModel(respond), capabilities=capabilities)
                .run_sync('go on', message_history=history)
                .output
            )
        except PydanticSerializationError as error:
            # pydantic-ai from 2.6x on writes the result itself when preparing the request, and refuses it there:
            # the run ends with or without Archive, which must not end one pydantic-ai finishes.
            return type(error).__name__

    without = run([])
    assert run([Archive(reminder_tokens=100)]) == without
    if without != 'done':
        return
    (numbered,) = [p for m in sent[-1] for p in m.parts if isinstance(p, ToolReturnPart)]  # Archive's run's request
    assert result_chars(numbered) > 2_400  # its size as the model reads it, the lossless encoding
    said = ' '.join(str(p.content) for m in sent[-1] for p in m.parts if isinstance(p, UserPromptPart))
    assert f'Results you can archive: r1 read ({result_chars(numbered):,} chars)' in said


def test_a_provider_tool_result_holding_a_lone_surrogate_is_measured_and_compacted() -> None:
    # Its estimate raised (`model_response_str`), and every strategy and view skipped every request for good.
    import warnings

    from pydantic_ai import Agent
    from pydantic_ai.messages import NativeToolCallPart, NativeToolReturnPart, TextPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from pydantic_ai_compaction import ResetToCheckpoint, Trigger
    from pydantic_ai_compaction.runtime import our_record
    from pydantic_ai_compaction.runtime.tokens import estimate_token_count

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('done')], usage=RequestUsage(input_tokens=10, output_tokens=1))

    found = NativeToolReturnPart('web_search', {'s': 'x\udfff' * 50}, tool_call_id='b1', provider_name='openai')
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('search ' * 100)]),
        ModelResponse(
            parts=[
                NativeToolCallPart('web_search', {'q': 'x'}, tool_call_id='b1', provider_name='openai'),
                found,
                TextPart('found ' * 100),
            ]
        ),
        ModelRequest(parts=[UserPromptPart('next ' * 100)]),
        ModelResponse(parts=[TextPart('answer ' * 100)]),
    ]
    assert estimate_token_count(history) > estimate_token_count(history[:1]) + 100
    agent = Agent(FunctionModel(respond), capabilities=[ResetToCheckpoint(trigger=Trigger(tokens=30))])
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no "compaction was skipped for this request"
        result = agent.run_sync('go on', message_history=history)
    assert sum(1 for m in result.all_messages() for p in m.parts if our_record(p) is not None) == 1
