"""What `context_recover` gives back is sent as the original was: a tuple stays one value, a dict keeps its order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction import Archive, InMemoryArchiveStore
from pydantic_ai_compaction.processors.memory.results import deserialize_part, serialize_part
from pydantic_ai_compaction.runtime.encoding import from_json, to_json_in_order


def archived_then_recovered(value: Callable[[], Any]) -> tuple[ToolReturnPart, ToolReturnPart]:
    """A tool's result as first sent, and as `context_recover` brings it back after `context_apply` archived it."""
    seen: list[list[ModelMessage]] = []
    steps = iter(
        [
            [ToolCallPart('fetch', {}, tool_call_id='f')],
            [ToolCallPart('context_apply', {'items': [{'result_id': 'r1', 'note': 'fetched'}]})],
            [ToolCallPart('context_recover', {'archive_ref': 'a1'}, tool_call_id='back')],
            [TextPart('done')],
        ]
    )

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=next(steps), usage=RequestUsage(input_tokens=10, output_tokens=10))

    agent = Agent(FunctionModel(respond), capabilities=[Archive(store=InMemoryArchiveStore(), conversation='c')])
    agent.tool_plain(name='fetch')(value)
    agent.run_sync('Fetch it.')

    def returned(request: list[ModelMessage], call_id: str) -> ToolReturnPart:
        last = request[-1]
        assert isinstance(last, ModelRequest)
        return next(p for p in last.parts if isinstance(p, ToolReturnPart) and p.tool_call_id == call_id)

    return returned(seen[1], 'f'), returned(seen[3], 'back')


def test_a_recovered_tuple_is_sent_as_one_value_as_the_original_was() -> None:
    original, recovered = archived_then_recovered(lambda: ('first', 'second'))
    # pydantic-ai sends a list as one block per item (Anthropic: two blocks) and a tuple as one JSON value.
    assert recovered.content == ('first', 'second') == original.content
    assert recovered.content_items(mode='str') == original.content_items(mode='str') == ['["first","second"]']


def test_a_recovered_dict_keeps_its_key_order_when_it_holds_a_lone_surrogate() -> None:
    value = {'zeta \udc80': 1, 'alpha': [2, 3], 'mid': {'y': 1, 'b': 2}}
    original, recovered = archived_then_recovered(lambda: value)
    assert original.content == value
    content = cast('dict[str, Any]', recovered.content)
    assert list(content) == ['zeta \udc80', 'alpha', 'mid']  # not sorted: the model reads them in order
    assert list(content['mid']) == ['y', 'b'] and content == value


@pytest.mark.parametrize(
    'content',
    [('a', 1), ['a', 1], ('\udc80', {'k': (1, 2)}), 'plain', {'b\udc80': 10**5000, 'a': 1}],
    ids=['tuple', 'list', 'tuple-with-surrogate', 'text', 'dict-long-integer'],
)
def test_a_stored_result_reads_back_with_its_content_s_type_and_order(content: Any) -> None:
    part = ToolReturnPart('t', content, tool_call_id='c')
    back = deserialize_part(serialize_part(part))
    assert type(back.content) is type(content)
    assert to_json_in_order(back.content) == to_json_in_order(from_json(to_json_in_order(content)))
    if isinstance(content, dict):
        assert list(cast('dict[str, Any]', back.content)) == list(cast('dict[str, Any]', content))
