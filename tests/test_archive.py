"""Archive, Notes and Recall through real `Agent` runs, on every store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
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

from pydantic_ai_compaction import Archive, Fork, Notes, Recall, Trigger
from pydantic_ai_compaction.processors.archive import archived_ref_of, result_id_of
from pydantic_ai_compaction.protocols.archive import ArchiveError
from pydantic_ai_compaction.runtime import our_record
from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore

from .support import fork_json, log_text

CONV_IDS = f'conv-ids-{uuid.uuid4().hex}'
CONV_BYTES = f'conv-bytes-{uuid.uuid4().hex}'
CONV_RECALL = f'conv-recall-{uuid.uuid4().hex}'
PNG = b'\x89PNG\r\n\x1a\n' + bytes(range(256))


def scripted(steps: list[list[ModelResponsePart]], seen: list[list[ModelMessage]] | None = None) -> FunctionModel:
    queue: Iterator[list[ModelResponsePart]] = iter(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if seen is not None:
            seen.append(list(messages))
        prompt = ' '.join(str(p.content) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        if 'fork request' in prompt:
            return ModelResponse(parts=[TextPart(fork_json([]))])
        return ModelResponse(parts=next(queue))

    return FunctionModel(respond)


def agent_with(model: FunctionModel, capabilities: list[Any]) -> Agent[None, str]:
    agent = Agent(model, capabilities=capabilities)

    @agent.tool_plain
    def read(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'content of file {index}\n' + 'x = 1\n' * 5

    @agent.tool_plain
    def screenshot() -> BinaryContent:  # pyright: ignore[reportUnusedFunction]
        return BinaryContent(data=PNG, media_type='image/png')

    return agent


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


def apply(*items: tuple[str, str]) -> list[ModelResponsePart]:
    return [ToolCallPart('context_apply', {'items': [{'result_id': r, 'note': n} for r, n in items]})]


def test_results_get_stable_ids_and_a_rejected_batch_changes_nothing(store: Any) -> None:
    seen: list[list[ModelMessage]] = []
    steps = [
        [ToolCallPart('read', {'index': 1})],
        [ToolCallPart('read', {'index': 2})],
        apply(('r1', 'file 1 read')),
        # Unknown, duplicated, already archived, protected (r3 is context_apply's own result):
        # one error listing each problem, and nothing changes.
        apply(('r9', 'x'), ('r2', 'file 2'), ('r2', 'again'), ('r1', 'twice'), ('r3', 'mine')),
        [TextPart('done')],
    ]
    archive = Archive(store=store, conversation=lambda ctx: CONV_IDS)
    result = agent_with(scripted(steps, seen), [archive]).run_sync('go')
    history = result.all_messages()
    parts = returns(history)
    assert [result_id_of(p) for p in parts if p.outcome != 'retried'] == ['r1', 'r2', 'r3']
    assert parts[0].content == '[result r1 archived as a1: file 1 read context_recover("a1") returns the original.]'
    error = next(p for p in parts if p.outcome == 'retried')
    text = error.model_response_str()
    for problem in (
        'r9: no tool result has this id',
        'r2: listed twice',
        'r1: already archived as a1',
        'r3: protected',
    ):
        assert problem in text
    # r2 stayed verbatim and only a1 exists in the store.
    assert parts[1].content == '[result r2]\ncontent of file 2\n' + 'x = 1\n' * 5
    assert archived_ref_of(parts[1]) is None
    assert store.get_archived(CONV_IDS, 'a1') is not None and store.get_archived(CONV_IDS, 'a2') is None
    # The stub kept its tool call: the call before it is unchanged.
    assert any(
        isinstance(p, ToolCallPart) and p.tool_call_id == parts[0].tool_call_id for m in history for p in m.parts
    )


def test_recovery_is_byte_exact_for_text_and_images(store: Any) -> None:
    seen: list[list[ModelMessage]] = []
    steps = [
        [ToolCallPart('read', {'index': 7})],
        [ToolCallPart('screenshot', {})],
        apply(('r1', 'file 7'), ('r2', 'the screenshot')),
        [ToolCallPart('context_recover', {'archive_ref': 'a1'})],
        [ToolCallPart('context_recover', {'archive_ref': 'a2'})],
        [TextPart('done')],
    ]
    agent_with(scripted(steps, seen), [Archive(store=store, conversation=lambda ctx: CONV_BYTES)]).run_sync('go')
    final = seen[-1]
    recovered = [p for p in returns(final) if p.tool_name == 'context_recover']
    assert recovered[0].content == '[result r4]\ncontent of file 7\n' + 'x = 1\n' * 5  # a fresh id, exact text
    images = [
        c
        for m in final
        for p in m.parts
        if isinstance(p, UserPromptPart)
        for c in p.content
        if isinstance(c, BinaryContent)
    ]
    images += [
        c
        for p in recovered[1:]
        for c in (p.content if isinstance(p.content, list) else [p.content])
        if isinstance(c, BinaryContent)
    ]
    assert any(image.data == PNG and image.media_type == 'image/png' for image in images)


def test_user_system_and_assistant_text_are_never_selectable() -> None:
    seen: list[list[ModelMessage]] = []
    steps = [[ToolCallPart('read', {'index': 1})], apply(('g0', 'the prompt'), ('r1', 'ok')), [TextPart('done')]]
    agent_with(scripted(steps, seen), [Archive()]).run_sync('go')
    error = next(p for p in returns(seen[-1]) if p.outcome == 'retried')
    assert 'g0: no tool result has this id' in error.model_response_str()


class FailingStore(InMemoryArchiveStore):
    def put_archived(self, entries: Any) -> None:
        raise ArchiveError('disk full')


def test_a_store_error_is_a_clear_tool_error_and_nothing_changes() -> None:
    seen: list[list[ModelMessage]] = []
    steps = [[ToolCallPart('read', {'index': 1})], apply(('r1', 'file 1')), [TextPart('done')]]
    agent_with(scripted(steps, seen), [Archive(store=FailingStore())]).run_sync('go')
    parts = returns(seen[-1])
    assert parts[0].content.startswith('[result r1]\ncontent of file 1')  # not stubbed
    assert 'archive store failed and nothing was archived: disk full' in parts[1].model_response_str()


def test_reminder_schedule_is_request_only() -> None:
    seen: list[list[ModelMessage]] = []
    steps = [[ToolCallPart('read', {'index': i})] for i in range(1, 8)] + [[TextPart('done')]]
    archive = Archive(reminder_tokens=40, reminder_every_chars=80)
    result = agent_with(scripted(steps, seen), [archive]).run_sync('go')

    def reminded(messages: list[ModelMessage]) -> bool:
        return any(isinstance(p, UserPromptPart) and 'Context check' in str(p.content) for p in messages[-1].parts)

    pattern = [reminded(request) for request in seen]
    # Each result adds ~43 characters: a reminder at the threshold, then only after 80 more characters.
    assert pattern == [False, True, False, True, False, True, False, True]
    assert not any('Context check' in str(getattr(p, 'content', '')) for m in result.all_messages() for p in m.parts)
    # A new user prompt starts the schedule over; an image triggers a reminder at once.
    seen.clear()
    steps2 = [[ToolCallPart('screenshot', {})], [TextPart('done')]]
    agent_with(scripted(steps2, seen), [Archive(reminder_tokens=10**6)]).run_sync('again')
    assert [reminded(request) for request in seen] == [False, True]


def test_notes_are_copied_verbatim_into_every_later_boundary() -> None:
    notes_then_reads: list[list[ModelResponsePart]] = [
        [ToolCallPart('note', {'kind': 'decision', 'text': 'Use the v2 endpoint; v1 drops fields.'})],
        *[[ToolCallPart('read_log', {'index': i})] for i in range(6)],
        [TextPart('done')],
    ]
    model = scripted(notes_then_reads)
    agent = Agent(model, capabilities=[Notes(), Fork(trigger=Trigger(tokens=3_000))])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index)

    result = agent.run_sync('go')
    boundaries = [p for m in result.all_messages() for p in m.parts if our_record(p)]
    assert len(boundaries) >= 2
    for boundary in boundaries:
        assert '- [decision] Use the v2 endpoint; v1 drops fields.' in (boundary.content or '')


def test_recall_finds_a_value_by_words_and_the_call_it_came_from(store: Any) -> None:
    report = '== diag.py media ==\n' + '\n'.join(f'check disk_{n} ... ok' for n in range(40)) + '\ntimeout_ms = 1050\n'
    seen: list[list[ModelMessage]] = []
    steps = [
        [ToolCallPart('diag', {'service': 'media'})],
        [ToolCallPart('context_apply', {'items': [{'result_id': 'r1', 'note': 'media report read'}]})],
        [ToolCallPart('recall', {'query': 'media timeout'})],
        [TextPart('1050')],
    ]
    conversation: Callable[[Any], str] = lambda ctx: CONV_RECALL  # noqa: E731
    agent = Agent(
        scripted(steps, seen),
        capabilities=[Archive(store=store, conversation=conversation), Recall(store=store, conversation=conversation)],
    )

    @agent.tool_plain
    def diag(service: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return report

    agent.run_sync('What is the media timeout?')
    answer = next(p for p in returns(seen[-1]) if p.tool_name == 'recall').model_response_str()
    # Found although the report was archived out of the context; ranked first, with provenance.
    lines = answer.splitlines()
    assert lines[0] == '[result r3]'  # the recall result is a tool result with an id of its own
    first = lines[1]
    assert first.endswith('timeout_ms = 1050')
    assert first.startswith('[diag({"service":"media"}) r1, line 42]')


def test_a_restatement_is_not_a_new_user_prompt_for_the_reminder() -> None:
    from pydantic_ai_compaction.runtime.apply import restatement_message

    archive = Archive(reminder_tokens=1, reminder_every_chars=10**6)
    numbered = ToolReturnPart(
        'read', 'x' * 400, tool_call_id='c1', metadata={'pydantic_ai_compaction': {'result_id': 'r1'}}
    )
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('go')]),
        ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id='c1')]),
        ModelRequest(parts=[numbered]),
    ]
    assert archive._reminder(history) is not None  # pyright: ignore[reportPrivateUsage]
    # A restated instruction arrives: it is not the user's new prompt, so the schedule is not reset.
    assert archive._reminder([*history, restatement_message(('CHANGE: x',))]) is None  # pyright: ignore[reportPrivateUsage]
    # A real new prompt does reset it.
    assert archive._reminder([*history, ModelRequest(parts=[UserPromptPart('next')])]) is not None  # pyright: ignore[reportPrivateUsage]
