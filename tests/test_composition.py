"""Capabilities together: what one persists is never another's view; ids, turns and stores hold up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    Archive,
    BoundedSelection,
    ForgetReasoning,
    InMemoryArchiveStore,
    Recall,
    Tiered,
)
from pydantic_ai_compaction.processors.memory.results import result_id_of
from pydantic_ai_compaction.runtime.stores.postgres import PostgresArchiveStore

from .support import log_text


def run(
    capabilities: list[Any], steps: list[list[ModelResponsePart]], seen: list[list[ModelMessage]], **kwargs: Any
) -> Any:
    queue: Iterator[list[ModelResponsePart]] = iter(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=next(queue))

    agent = Agent(FunctionModel(respond), capabilities=capabilities)

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    return agent.run_sync(kwargs.pop('prompt', 'Audit the logs carefully, every one of them.'), **kwargs)


READS: list[list[ModelResponsePart]] = [[ToolCallPart('read_log', {'index': i})] for i in range(8)] + [
    [TextPart('done')]
]


@pytest.mark.parametrize('view', [BoundedSelection(budget=60), Tiered(context_window=4_000, summarize=False)])
@pytest.mark.parametrize('persisting', [Archive, lambda: ForgetReasoning(policy='drop')])
def test_a_persisting_capability_never_saves_another_capabilitys_view(view: Any, persisting: Any) -> None:
    seen: list[list[ModelMessage]] = []
    result = run([view, persisting()], READS, seen)
    history = result.all_messages()
    returns = [p for m in history if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(returns) == 8  # every result is in the saved history...
    assert not any(str(p.content).startswith('[cleared:') for p in returns)  # ...verbatim


def test_ids_are_never_given_twice_when_a_history_moves_to_a_new_store() -> None:
    seen: list[list[ModelMessage]] = []
    first = run([Archive(store=InMemoryArchiveStore())], [*READS[:2], [TextPart('done')]], seen)
    second = run(
        [Archive(store=InMemoryArchiveStore())], [*READS[2:4], [TextPart('done')]], seen,
        prompt='More.', message_history=first.all_messages(),
    )  # fmt: skip
    ids = [result_id_of(p) for m in second.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert ids == ['r1', 'r2', 'r3', 'r4']


def test_selection_always_sends_the_current_user_request() -> None:
    seen: list[list[ModelMessage]] = []
    prompt = 'Please audit every log and report each incident id you find. ' * 20
    run([BoundedSelection(budget=100)], READS, seen, prompt=prompt)
    for request in seen:
        assert any(isinstance(p, UserPromptPart) and p.content == prompt for m in request for p in m.parts)


def test_recall_with_odd_input_never_fails_a_run(store: Any) -> None:
    seen: list[list[ModelMessage]] = []
    steps: list[list[ModelResponsePart]] = [
        [ToolCallPart('echo', {'text': 'nul \x00 byte, ошибка подключения, größe, mail@example.com /var/log/x'})],
        [ToolCallPart('recall', {'query': 'ошибка'})],
        [ToolCallPart('recall', {'query': 'example com'})],
        [ToolCallPart('recall', {'query': '" OR 1=1; DROP TABLE x; -- NEAR(a b) *'})],
        [TextPart('done')],
    ]
    queue = iter(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=next(queue))

    conversation = f'odd-{id(seen)}'
    agent = Agent(FunctionModel(respond), capabilities=[Recall(store=store, conversation=lambda ctx: conversation)])

    @agent.tool_plain
    def echo(text: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return text

    agent.run_sync('go')
    answers = [str(p.content) for p in seen[-1][-1].parts if isinstance(p, ToolReturnPart)]
    recalls = [
        str(p.content) for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == 'recall'
    ]
    assert 'ошибка подключения' in recalls[0]  # any script
    assert 'mail@example.com' in recalls[1]  # the same words in every store
    assert recalls[2].startswith('No match') or recalls[2]  # query syntax is never an error
    assert answers


def test_postgres_store_errors_leave_the_connection_usable() -> None:
    from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveError

    from .stores import postgres_store

    store = postgres_store()
    assert isinstance(store, PostgresArchiveStore)
    conversation = f'pg-error-{id(store)}'
    entry = ArchivedResult(conversation, 'a1', 'r1', 'read', 'c1', '{}', b'x', 'n', 't')
    store.put_archived([entry])
    with pytest.raises(ArchiveError, match='PostgreSQL archive: put_archived failed'):
        store.put_archived([entry])  # the same reference again: a constraint violation
    # The connection is not left in an aborted transaction.
    assert store.get_archived(conversation, 'a1') == entry
    assert store.next_numbers(conversation, 'result', 2) == [1, 2]
    store.close()
