"""What `context_recover` gives back is sent as the original was: a tuple stays one value, a dict keeps its order."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction import Archive, InMemoryArchiveStore
from pydantic_ai_compaction.processors.memory.results import deserialize_part, serialize_part
from pydantic_ai_compaction.protocols.archive import ArchivedResult
from pydantic_ai_compaction.runtime.encoding import from_json, to_json_in_order

from .stores import make_store


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


@pytest.mark.parametrize('kind', ['memory', 'sqlite', 'postgres'])
def test_every_store_gives_back_a_dict_s_keys_as_they_were_lone_surrogates_and_order_included(
    kind: str, tmp_path: Path
) -> None:
    # pydantic-core writes a key holding a lone surrogate as U+FFFD, and the lossless form sorted the keys.
    value = {'zeta \udc80': 1, 'alpha': [2, 3], 'mid': {'y': 'text \udc81', 'b': 2}}
    store = make_store(kind, tmp_path)
    conversation = f'shape-{uuid.uuid4().hex}'
    payload = serialize_part(ToolReturnPart('fetch', value, tool_call_id='f'))
    store.put_archived([ArchivedResult(conversation, 'a1', 'r1', 'fetch', 'f', '{}', payload, 'n', 't')])
    entry = store.get_archived(conversation, 'a1')
    assert entry is not None
    content = cast('dict[str, Any]', deserialize_part(entry.payload).content)
    assert list(content) == ['zeta \udc80', 'alpha', 'mid'] and list(content['mid']) == ['y', 'b']
    assert content == value


@pytest.mark.parametrize(
    'content',
    [
        ('a', 1),
        ['a', 1],
        ('\udc80', {'k': (1, 2)}),
        'plain',
        {'b\udc80': 10**5000, 'a': 1},
        {'zeta': 'value \udc80', 'alpha': {'y': 1, 'b': 2}},
    ],
    ids=['tuple', 'list', 'tuple-with-surrogate', 'text', 'dict-long-integer', 'dict-surrogate-value'],
)
def test_a_stored_result_reads_back_with_its_content_s_type_and_order(content: Any) -> None:
    part = ToolReturnPart('t', content, tool_call_id='c')
    back = deserialize_part(serialize_part(part))
    assert type(back.content) is type(content)
    assert to_json_in_order(back.content) == to_json_in_order(from_json(to_json_in_order(content)))
    if isinstance(content, dict):
        assert list(cast('dict[str, Any]', back.content)) == list(cast('dict[str, Any]', content))
