"""`ForgetReasoning` over OpenAI Responses' wire format: what a request sends once a step's reasoning is dropped."""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_compaction import ForgetReasoning

from .providers import Mock, OpenAIResponses, Say


def test_forgetting_keeps_the_reasoning_of_a_call_stored_with_a_combined_id() -> None:
    """A history stored before `ToolCallPart.id` holds `call_id|fc_id` in `tool_call_id`: pydantic-ai sends the item
    id from it, so dropping that step's reasoning would send `fc_1` without `rs_1`, which OpenAI refuses."""
    mock = Mock(OpenAIResponses(), lambda text, body: Say(text='You are welcome.'))
    issued = {'id': 'rs_1', 'type': 'reasoning', 'encrypted_content': 'gAAAA', 'followed_by': 'call_1'}
    mock.issued.opaque['rs_1'] = issued
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Write a.py.')]),
        ModelResponse(
            parts=[
                ThinkingPart('', id='rs_1', signature='gAAAA', provider_name='openai'),
                ToolCallPart('write_file', {'path': 'a.py'}, tool_call_id='call_1|fc_1', provider_name='openai'),
            ],
            provider_name='openai',
        ),
        ModelRequest(parts=[ToolReturnPart('write_file', 'written', tool_call_id='call_1|fc_1')]),
        ModelResponse(parts=[TextPart('Done.')], provider_name='openai'),
    ]
    agent = Agent(mock.model(), capabilities=[ForgetReasoning(policy='after_artifact')])
    agent.run_sync('Thanks.', message_history=history)
    sent = mock.payloads[0]['input']
    assert [item.get('id') for item in sent if item.get('type') in ('reasoning', 'function_call')] == ['rs_1', 'fc_1']
    assert mock.problems() == []
