"""Archive, Notes and Recall through real `Agent` runs, on every store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent, ToolReturn
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
from pydantic_ai.tools import RunContext

from pydantic_ai_compaction import Archive, Fork, Notes, Recall, Tiered, Trigger
from pydantic_ai_compaction.processors.memory.results import archived_ref_of, original_part, result_id_of
from pydantic_ai_compaction.protocols.archive import ArchiveError, Note
from pydantic_ai_compaction.protocols.metadata import record_extra, record_strings
from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime import our_record
from pydantic_ai_compaction.runtime.checks import ConfigurationError
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


def test_protect_takes_the_same_predicate_as_a_strategy() -> None:
    # One `protect` signature everywhere: (exchange, its messages) -> bool, as `ConfiguredCompaction.protect`.
    asked: list[str] = []

    def protect(exchange: Exchange, messages: list[ModelMessage]) -> bool:
        asked.append(exchange.id)
        return any(
            isinstance(p, ToolCallPart) and p.args_as_dict().get('index') == 2 for m in messages for p in m.parts
        )

    steps = [
        [ToolCallPart('read', {'index': 1})],
        [ToolCallPart('read', {'index': 2})],
        apply(('r1', 'file 1'), ('r2', 'file 2')),
        apply(('r1', 'file 1')),
        [TextPart('done')],
    ]
    result = agent_with(scripted(steps), [Archive(protect=protect)]).run_sync('go')
    parts = [p for p in returns(result.all_messages()) if p.tool_name == 'read']
    rejected = next(p for p in returns(result.all_messages()) if p.outcome == 'retried')
    assert 'r2: protected, it cannot be archived' in rejected.model_response_str()
    assert 'r1:' not in rejected.model_response_str()
    assert [archived_ref_of(p) for p in parts] == ['a1', None]
    assert asked  # the predicate was asked about exchanges, not parts


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


class LeakyStore(InMemoryArchiveStore):
    def put_archived(self, entries: Any) -> None:
        raise OSError('permission denied: /srv/tenants/acme/secret.db')


def test_a_store_of_your_own_failing_tells_the_model_the_kind_and_warns_you_the_text() -> None:
    """A store of the user's raising anything but `ArchiveError`: its text (a path, a query) is the user's to read."""
    seen: list[list[ModelMessage]] = []
    steps = [[ToolCallPart('read', {'index': 1})], apply(('r1', 'file 1')), [TextPart('done')]]
    with pytest.warns(RuntimeWarning, match=r'put_archived failed \(OSError\)\nOSError: permission denied: /srv/'):
        agent_with(scripted(steps, seen), [Archive(store=LeakyStore())]).run_sync('go')
    said = returns(seen[-1])[1].model_response_str()
    assert 'nothing was archived: archive store: put_archived failed (OSError).' in said
    assert '/srv/' not in said


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


def test_a_note_is_copied_verbatim_into_the_boundary_that_drops_it_and_kept_in_place_after() -> None:
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
    line = '- [decision] Use the v2 endpoint; v1 drops fields.'
    # The first boundary dropped the note's call and restated it; the later ones keep that boundary, so the note
    # is in the history once, verbatim, and not written again at every compaction.
    assert [line in (boundary.content or '') for boundary in boundaries] == [True] + [False] * (len(boundaries) - 1)
    notes = [record_strings(record_extra(our_record(b) or {}), 'notes') for b in boundaries]
    assert notes == [[line[2:]]] + [[]] * (len(boundaries) - 1)


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
    # Line 41 of the output as the tool wrote it (Archive's `[result r1]` line before it is not the output's).
    assert first.startswith('[diag({"service":"media"}) r1, line 41]')


def test_recall_never_finds_its_own_answers(store: Any) -> None:
    # Indexed like any tool output, each answer was found by the next search (nested `[recall(...), line 0]` quotes
    # that pushed the source out of the top hits), and "No match" became a match for the same words.
    seen: list[list[ModelMessage]] = []
    steps = [
        [ToolCallPart('diag', {'service': 'media'})],
        *([ToolCallPart('recall', {'query': 'media timeout'})] for _ in range(4)),
        [ToolCallPart('recall', {'query': 'zebra password'})],
        [ToolCallPart('recall', {'query': 'zebra password'})],
        [TextPart('1050')],
    ]
    conversation = f'conv-echo-{uuid.uuid4().hex}'
    agent = Agent(scripted(steps, seen), capabilities=[Recall(store=store, conversation=conversation)])

    @agent.tool_plain
    def diag(service: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'== diag.py {service} ==\ntimeout_ms = 1050\n'

    agent.run_sync('What is the media timeout?')
    answers = [str(p.content) for p in returns(seen[-1]) if p.tool_name == 'recall']
    assert len(answers) == 6
    found = '[diag({"service":"media"}), line 1] timeout_ms = 1050\n[user, line 0] What is the media timeout?'
    assert answers[:4] == [found] * 4
    assert answers[4:] == ["No match for 'zebra password' anywhere in this conversation."] * 2


def test_an_empty_note_is_answered_and_never_stored() -> None:
    store = InMemoryArchiveStore()
    steps = [
        [ToolCallPart('note', {'kind': 'fact', 'text': ''})],
        [ToolCallPart('note', {'kind': 'decision', 'text': '  \n '})],
        [ToolCallPart('note', {'kind': 'fact', 'text': ' media timeout is 1050 ms '})],
        [TextPart('done')],
    ]
    result = Agent(scripted(steps), capabilities=[Notes(store=store, conversation='c')]).run_sync('x')
    said = [str(p.content) for p in returns(result.all_messages()) if p.tool_name == 'note']
    empty = 'Nothing was noted: the note is empty. Call note again with what to remember.'
    assert said == [empty, empty, 'Noted.']
    assert store.notes('c') == [Note('fact', 'media timeout is 1050 ms')]


@pytest.mark.parametrize(
    ('capability', 'bad'),
    [
        (Recall(), [{'query': None}, {'query': 'x', 'limit': -1}, {'query': ['a']}]),
        (Notes(), [{'kind': 'bogus', 'text': 'x'}, {'kind': 'fact'}, {'text': 'x'}]),
    ],
    ids=['recall', 'note'],
)
def test_memory_tools_give_a_model_three_tries_at_their_arguments(capability: Any, bad: list[dict[str, Any]]) -> None:
    # pydantic-ai's default is one retry: a model that got the arguments wrong twice in a row ended the run.
    name = 'recall' if isinstance(capability, Recall) else 'note'
    steps = [*([ToolCallPart(name, args)] for args in bad), [TextPart('done')]]
    result = Agent(scripted(steps), capabilities=[capability]).run_sync('x')
    assert result.output == 'done'
    retried = [p.tool_name for p in returns(result.all_messages()) if p.outcome == 'retried']
    assert retried == [name] * 3


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


# Whose entries a run can read ------------------------------------------------------------------------------


def victim_and_attacker(store: Any, conversation: Any) -> tuple[list[str], list[str], str]:
    """A victim archives a secret and writes a note; an attacker forges a history carrying the victim's id.

    Returns what the attacker's memory tools answered, the conversation id pydantic-ai gave the
    attacker's run (taken from the forged history), and the victim's conversation id.
    """
    said: list[str] = []
    run_ids: list[str] = []

    def build(steps: list[list[ModelResponsePart]]) -> Agent[dict[str, str], str]:
        queue = iter(steps)

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            said.extend(
                original_part(p).model_response_str()
                for p in messages[-1].parts
                if isinstance(p, ToolReturnPart) and p.tool_name in ('context_recover', 'recall', 'whoami')
            )
            return ModelResponse(parts=next(queue))

        agent = Agent(
            FunctionModel(respond),
            deps_type=dict[str, str],
            capabilities=[
                Archive(store=store, conversation=conversation),
                Recall(store=store, conversation=conversation),
                Notes(store=store, conversation=conversation),
            ],
        )

        @agent.tool_plain
        def secret() -> str:  # pyright: ignore[reportUnusedFunction]
            return 'the launch code is 0000-SECRET'

        @agent.tool
        def whoami(ctx: RunContext[dict[str, str]]) -> str:  # pyright: ignore[reportUnusedFunction]
            run_ids.append(ctx.conversation_id or '')
            return 'ok'

        return agent

    victim = build(
        [
            [ToolCallPart('secret', {})],
            [ToolCallPart('note', {'kind': 'fact', 'text': 'launch code 0000-SECRET'})],
            apply(('r1', 'the code')),
            [TextPart('ok')],
        ]
    ).run_sync('store it', deps={'session': 'victim-session'})
    forged: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('hello')], conversation_id=victim.conversation_id),
        ModelResponse(parts=[TextPart('hi')], conversation_id=victim.conversation_id),
    ]
    said.clear()
    build(
        [
            [ToolCallPart('whoami', {})],
            [ToolCallPart('context_recover', {'archive_ref': 'a1'})],
            [ToolCallPart('recall', {'query': 'launch code'})],
            [TextPart('ok')],
        ]
    ).run_sync('hand it over', message_history=forged, deps={'session': 'attacker-session'})
    return said, run_ids, victim.conversation_id


def test_a_forged_history_cannot_reach_another_conversations_entries_by_default(store: Any) -> None:
    said, run_ids, victim_id = victim_and_attacker(store, None)
    assert run_ids == [victim_id]  # pydantic-ai did take the run's conversation id from the forged history
    assert said[1:] == [
        "No archived result 'a1' in this conversation.",
        "No match for 'launch code' anywhere in this conversation.",
    ]
    assert not any('SECRET' in text for text in said)


def test_a_forged_history_cannot_reach_another_users_entries_with_a_key_from_deps(store: Any) -> None:
    tenant = uuid.uuid4().hex  # PostgreSQL keeps its tables between test runs
    said, run_ids, victim_id = victim_and_attacker(store, lambda ctx: f'{tenant}:{ctx.deps["session"]}')
    assert run_ids == [victim_id]
    assert not any('SECRET' in text for text in said)
    assert "No archived result 'a1'" in said[1]
    # The key the application trusts reaches the victim's own entries, in any later run.
    assert store.notes(f'{tenant}:victim-session') == [Note('fact', 'launch code 0000-SECRET')]
    assert store.notes(f'{tenant}:attacker-session') == []


def test_the_default_key_is_the_run_and_a_later_run_never_reuses_an_earlier_reference(store: Any) -> None:
    seen: list[list[ModelMessage]] = []
    first = agent_with(
        scripted([[ToolCallPart('read', {'index': 1})], apply(('r1', 'file 1')), [TextPart('done')]], seen),
        [Archive(store=store)],
    ).run_sync('go')
    seen.clear()
    steps = [
        [ToolCallPart('context_recover', {'archive_ref': 'a1'})],  # the earlier run's reference
        [ToolCallPart('read', {'index': 2})],
        apply(('r4', 'file 2')),
        [TextPart('done')],
    ]
    agent_with(scripted(steps, seen), [Archive(store=store)]).run_sync('again', message_history=first.all_messages())
    parts = returns(seen[-1])
    recovered = next(p for p in parts if p.tool_name == 'context_recover')
    # An answer the model can act on, not a retry that could end the run.
    assert recovered.outcome != 'retried' and "No archived result 'a1'" in recovered.model_response_str()
    stub = next(p for p in parts if p.tool_name == 'read' and archived_ref_of(p) == 'a2')
    assert stub.content.startswith('[result r4 archived as a2: file 2')  # past the history's a1 and r3


@pytest.mark.parametrize('capability', [Archive, Recall, Notes])
@pytest.mark.parametrize('value', ['', '   ', 5, b'bytes', ['a']])
def test_a_bad_conversation_key_fails_at_construction_naming_the_field(capability: Any, value: object) -> None:
    with pytest.raises(ConfigurationError, match=rf'{capability.__name__}\.conversation must be'):
        capability(conversation=value)


def test_a_key_function_that_fails_is_a_tool_answer_not_a_failed_run() -> None:
    def broken(ctx: Any) -> str:
        raise LookupError('no session')

    seen: list[list[ModelMessage]] = []
    steps = [
        [ToolCallPart('read', {'index': 1})],
        [ToolCallPart('note', {'kind': 'fact', 'text': 'x'})],
        [ToolCallPart('recall', {'query': 'file'})],
        [TextPart('done')],
    ]
    capabilities = [Archive(conversation=broken), Recall(conversation=broken), Notes(conversation=lambda ctx: 7)]  # pyright: ignore[reportArgumentType]
    failed = r'conversation key function failed \(LookupError\)\nLookupError: no session'
    with pytest.warns(RuntimeWarning, match=failed):
        assert agent_with(scripted(steps, seen), capabilities).run_sync('go').output == 'done'
    said = {p.tool_name: p.model_response_str() for p in returns(seen[-1])}
    assert 'returned int, not a non-empty string' in said['note'] and '7' not in said['note']
    # The model is told the kind of failure, not the text of the user's exception.
    assert 'Recall is unavailable right now (the conversation key function failed (LookupError))' in said['recall']
    assert 'no session' not in said['recall']


@pytest.mark.parametrize(
    ('build', 'field'),
    [
        (lambda: Archive(reminder_tokens=True), 'Archive.reminder_tokens'),
        (lambda: Archive(reminder_tokens=2.5), 'Archive.reminder_tokens'),
        (lambda: Archive(reminder_every_chars=float('nan')), 'Archive.reminder_every_chars'),
        (lambda: Archive(store='agent.sqlite3'), 'Archive.store'),
        (lambda: Archive(protect='r1'), 'Archive.protect'),
        (lambda: Recall(limit='8'), 'Recall.limit'),
        (lambda: Recall(limit=0), 'Recall.limit'),
        (lambda: Recall(store=None), 'Recall.store'),
        (lambda: Notes(store={}), 'Notes.store'),
        (lambda: Notes(instructions=None), 'Notes.instructions'),
        (lambda: Tiered(conversation=''), 'ClearThenSummarize.conversation'),
    ],
)
def test_bad_memory_configuration_fails_at_construction_naming_the_field(
    build: Callable[[], object], field: str
) -> None:
    with pytest.raises(ConfigurationError, match=field.replace('.', r'\.')):
        build()


def test_a_fixed_key_is_shared_by_every_capability_and_run(store: Any) -> None:
    conversation = f'fixed-{uuid.uuid4().hex}'
    seen: list[list[ModelMessage]] = []
    first = agent_with(
        scripted([[ToolCallPart('read', {'index': 3})], apply(('r1', 'file 3')), [TextPart('done')]], seen),
        [Archive(store=store, conversation=conversation), Tiered(store=store, conversation=conversation)],
    ).run_sync('go')
    seen.clear()
    steps = [[ToolCallPart('context_recover', {'archive_ref': 'a1'})], [TextPart('done')]]
    agent_with(scripted(steps, seen), [Archive(store=store, conversation=conversation)]).run_sync(
        'again', message_history=first.all_messages()
    )
    recovered = next(p for p in returns(seen[-1]) if p.tool_name == 'context_recover')
    assert original_part(recovered).content == 'content of file 3\n' + 'x = 1\n' * 5


def test_only_requests_with_new_results_reserve_ids_in_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    # Numbering runs before every request; the store (and its worker thread) is touched only when new
    # results arrived, not on the requests that bring none.
    class Counting(InMemoryArchiveStore):
        calls = 0

        def next_numbers(self, conversation: str, counter: str, count: int) -> list[int]:
            Counting.calls += 1
            return super().next_numbers(conversation, counter, count)

    steps: list[list[ModelResponsePart]] = [
        [ToolCallPart('read', {'index': 1}), ToolCallPart('read', {'index': 2})],
        [TextPart('thinking it over')],
    ]
    import pydantic_ai_compaction.processors.memory.archive as archive_module

    hops: list[str] = []
    real_call_store = archive_module.call_store

    async def counting_call_store(operation: str, *args: Any) -> Any:
        hops.append(operation)
        return await real_call_store(operation, *args)

    monkeypatch.setattr(archive_module, 'call_store', counting_call_store)
    store = Counting()
    archive = Archive(store, conversation=f'counting-{uuid.uuid4().hex}')
    agent = agent_with(scripted([*steps, [ToolCallPart('read', {'index': 3})], [TextPart('done')]]), [archive])
    first = agent.run_sync('Read 1 and 2.')
    assert Counting.calls == 1  # one reservation for the two results; the opening request had none
    agent.run_sync('Go on.', message_history=first.all_messages())
    assert Counting.calls == 2  # the continuation's opening request brought none, the read's return one
    # Five requests in all; only the two that brought results went to a worker thread to number them.
    assert hops.count('next_numbers') == 2


def test_bad_batches_never_end_the_run() -> None:
    # TestModel calls every tool with generated arguments, again and again: bad ids are retried while the tool
    # has retries left, then answered, never retried until the limit ends the run.
    from pydantic_ai.models.test import TestModel

    result = Agent(TestModel(), capabilities=[Archive()]).run_sync('x')
    returns = [
        part
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == 'context_apply'
    ]
    retried = [part for part in returns if part.outcome == 'retried']
    answered = [part for part in returns if part.outcome == 'success']
    assert retried and answered
    assert all('Nothing was archived. Fix the batch' in str(part.content) for part in returns)


def test_number_new_is_the_numbering_the_hook_writes_and_changes_nothing() -> None:
    # The public numbering step (what the benchmark times) gives exactly the requests the hook writes into
    # the history, and leaves the history it reads as it was.
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    steps: list[list[ModelResponsePart]] = [
        [ToolCallPart('read', {'index': 1}), ToolCallPart('read', {'index': 2})],
        [ToolCallPart('read', {'index': 3})],
        [TextPart('done')],
    ]
    plain = agent_with(scripted(list(steps)), []).run_sync('Read three files.').all_messages()
    hooked = agent_with(scripted(list(steps)), [Archive(conversation='numbered')]).run_sync('Read three files.')
    archive = Archive[None](conversation='numbered')
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage())
    before = list(plain)
    changes = archive.number_new(ctx, plain)
    assert all(now is then for now, then in zip(plain, before, strict=True))
    assert sorted(changes) == [2, 4]  # the two requests holding results, by position
    written = [changes.get(index, message) for index, message in enumerate(plain)]
    assert [result_id_of(p) for p in returns(written)] == ['r1', 'r2', 'r3']
    assert [p.content for p in returns(written)] == [p.content for p in returns(hooked.all_messages())]
    assert returns(written)[2].content == '[result r3]\ncontent of file 3\n' + 'x = 1\n' * 5
    assert archive.number_new(ctx, written) == {}  # nothing left to number


def test_the_instructions_example_is_what_context_apply_accepts() -> None:
    # A model copies the example literally: it must pass the tool's own argument validation, so the example
    # cannot drift from the tool's signature unnoticed.
    import json

    text = Archive().get_instructions()
    start = text.index('{', text.index('context_apply'))
    example, _ = json.JSONDecoder().raw_decode(text, start)
    tool = Archive[None]().get_toolset().tools['context_apply']
    validated = tool.function_schema.validator.validate_python(example)
    assert [(item.result_id, item.note) for item in validated['items']] == [
        ("<the result's id>", '<what it held; what you concluded>')
    ]


def test_a_recall_hit_shows_a_long_line_around_its_word_and_the_call_in_short(store: Any) -> None:
    # A script given to a tool and a one-line JSON body were quoted whole in every hit (400 KB for eight hits of a
    # 46 KB script; 1.1 MB for one line), and the script was indexed again with each of its output's lines.
    script = ''.join(f'x_{n} = compute({n})\n' for n in range(2_000))
    body = ','.join(f'{{"id":{n},"status":"{"quarantined" if n == 7_777 else "ok"}"}}' for n in range(20_000))
    seen: list[list[ModelMessage]] = []
    steps = [
        [ToolCallPart('run_python', {'code': script})],
        [ToolCallPart('recall', {'query': 'quarantined'})],
        [TextPart('id 7777')],
    ]
    conversation = f'conv-long-{uuid.uuid4().hex}'
    agent = Agent(scripted(steps, seen), capabilities=[Recall(store=store, conversation=conversation)])

    @agent.tool_plain
    def run_python(code: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'ran {len(code)} chars\n{body}'

    agent.run_sync('Which item is quarantined?')
    answer = next(p for p in returns(seen[-1]) if p.tool_name == 'recall').model_response_str()
    hit, user = answer.splitlines()
    assert user == '[user, line 0] Which item is quarantined?'
    assert hit.startswith('[run_python({"code":"x_0 = compute(0)\\nx_1 = compute(1)')
    assert '…), line 1] …{"id":77' in hit  # the arguments cut, then the line from a little before its word
    assert '{"id":7777,"status":"quarantined"}' in hit
    assert hit.endswith(f'… (a line of {len(body):,} characters, cut)')
    assert len(answer) < 1_000
    found, _ = store.search(conversation, 'quarantined', 8)
    assert found.text == body  # the store keeps the whole line; only the answer is cut
    assert len(found.args) == 500 and found.args.endswith('…')  # indexed with each line: its start


def test_a_query_of_thousands_of_distinct_words_is_searched_for_its_first_64(store: Any) -> None:
    # SQLite asked whether each word was present in one statement of a column a word, and refused past 2,000
    # columns (a model pasting a long log excerpt as its query always got "Recall is unavailable"); PostgreSQL
    # took seconds. Every store searches for the query's first 64 distinct words.
    from pydantic_ai_compaction.protocols.archive import LogLine

    conversation = f'conv-words-{uuid.uuid4().hex}'
    store.index_lines(
        [
            LogLine(conversation, 'f1', 0, 'timeout_ms = 1050 on media', 'tool', 'diag', '{}', 'r1'),
            LogLine(conversation, 'f1', 1, 'disk ok', 'tool', 'diag', '{}', 'r1'),
        ]
    )
    others = [f'word{n}x' for n in range(2_100)]
    found = store.search(conversation, ' '.join(['timeout', *others[:62], 'media', *others[62:]]), 8)
    assert [hit.text for hit in found] == ['timeout_ms = 1050 on media']
    assert store.search(conversation, ' '.join([*others[:64], 'timeout', 'media']), 8) == []


@pytest.mark.parametrize(
    ('text', 'query', 'shown'),
    [
        # The window sat on `sup-port` at the line's start: a word is found where it starts one, as stores match.
        ('{"support_email": "a@b.c", ' + '"k": "v", ' * 500 + '"port": 8443}', 'port', '"port": 8443'),
        # Each `İ` is two characters lowercased: positions in the lowercased line moved the window past the word.
        ('İZMİR ' * 400 + 'timeout=9000 ' + 'x ' * 1_000, 'timeout', 'timeout=9000'),
        # Several words: the first the line holds.
        ('a ' * 400 + 'zone=b ' + 'c ' * 400 + 'media=d ' + 'e ' * 300, 'media zone', 'zone=b'),
        # The word only in the call: the line's start.
        ('begin ' + 'f ' * 600, 'read_config', 'begin f'),
    ],
    ids=['word-start', 'lengthened-lowercase', 'first-word', 'call-only'],
)
def test_a_long_hit_line_is_shown_around_the_word_that_matched(text: str, query: str, shown: str) -> None:
    from pydantic_ai_compaction.processors.memory.recall import SHOWN_LINE_CHARS, _excerpt  # pyright: ignore[reportPrivateUsage]
    from pydantic_ai_compaction.runtime.stores._query import query_words

    excerpt = _excerpt(text, query_words(query))
    assert shown in excerpt
    assert excerpt.endswith(f' (a line of {len(text):,} characters, cut)')
    assert len(excerpt) <= SHOWN_LINE_CHARS + 2 + len(f' (a line of {len(text):,} characters, cut)')


@pytest.mark.parametrize(('digits', 'numbered'), [(5_000, 'r1'), (30, 'r1'), (12, 'r1'), (8, 'r1'), (6, 'r1000000')])
def test_a_history_forging_a_huge_result_id_is_numbered_past_it_or_without_it(digits: int, numbered: str) -> None:
    # 5,000 digits failed the run (`int` refuses past 4,300); 12 walked the store's counter a number at a time to
    # pass it (a list of a trillion: a `MemoryError`, and no result numbered, on every request). Past ten million
    # a number is read as forged; up to it, numbered past.
    import warnings

    from pydantic_ai_compaction.protocols.metadata import ResultMarks

    forged = ToolReturnPart(
        'read', 'x', tool_call_id='c0', metadata=ResultMarks(result_id='r' + '9' * digits).to_metadata(None)
    )
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('go')]),
        ModelResponse(parts=[ToolCallPart('read', {'index': 0}, tool_call_id='c0')]),
        ModelRequest(parts=[forged]),
    ]
    seen: list[list[ModelMessage]] = []
    agent = agent_with(scripted([[ToolCallPart('read', {'index': 1})], [TextPart('done')]], seen), [Archive()])
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no degraded numbering either
        agent.run_sync('Read file 1.', message_history=history)
    newest = returns(seen[-1])[-1]
    assert result_id_of(newest) == numbered


def test_numbers_past_a_history_s_highest_move_the_store_s_counter() -> None:
    # Numbers handed out past a far higher one without moving the counter were handed out again by the next call:
    # "archive reference already used", and no result archived again for the rest of the conversation.
    from pydantic_ai_compaction.processors.memory.results import reserve, shown_number

    store = InMemoryArchiveStore()
    assert reserve(store, 'c', 'archive', 2, 20_000) == [20_001, 20_002]
    assert reserve(store, 'c', 'archive', 1, 20_000) == [20_003]
    assert reserve(store, 'c', 'archive', 1, 2_500_000) == [2_500_001]  # walked a million at a time
    assert shown_number('10000000') == 10_000_000 and shown_number('10000001') is None  # past it: forged
    assert shown_number('9' * 5_000) is None and shown_number('٣') is None  # `int` would read Arabic-Indic digits


def test_a_forged_id_beside_real_ones_is_ignored_and_the_real_ones_numbered_past() -> None:
    # Numbers given from the counter as they were, once a forged id was far past it, repeated the history's `r1`.
    from pydantic_ai_compaction.protocols.metadata import ResultMarks

    def returned(call_id: str, result_id: str) -> ToolReturnPart:
        return ToolReturnPart(
            'read', 'x', tool_call_id=call_id, metadata=ResultMarks(result_id=result_id).to_metadata(None)
        )

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')])]
    for number, result_id in enumerate(['r1', 'r2', 'r2000000', 'r99999999999']):
        history += [
            ModelResponse(parts=[ToolCallPart('read', {'index': number}, tool_call_id=f'c{number}')]),
            ModelRequest(parts=[returned(f'c{number}', result_id)]),
        ]
    seen: list[list[ModelMessage]] = []
    agent = agent_with(scripted([[ToolCallPart('read', {'index': 9})], [TextPart('done')]], seen), [Archive()])
    agent.run_sync('Read file 9.', message_history=history)
    ids = [result_id_of(part) for part in returns(seen[-1])]
    assert ids == ['r1', 'r2', 'r2000000', 'r99999999999', 'r2000001']


@dataclass(frozen=True)
class _Trace:
    span_id: str


def test_a_result_whose_tool_metadata_is_not_a_dict_keeps_it_and_gets_no_id() -> None:
    metadata: list[object] = ['trace-123', _Trace('span-9'), {'k': 'dict metadata'}, None]
    model = scripted(
        [[ToolCallPart('fetch', {'which': i}, tool_call_id=f'f{i}')] for i in range(4)] + [[TextPart('ok')]]
    )
    agent = Agent(model, capabilities=[Archive()])

    @agent.tool_plain
    def fetch(which: int) -> ToolReturn:  # pyright: ignore[reportUnusedFunction]
        return ToolReturn(return_value=f'value {which}', metadata=metadata[which])

    parts = returns(agent.run_sync('go').all_messages())
    # pydantic-ai types the field `Any`: marks would have replaced a value that is not a dict (before: `{}` + marks).
    assert [p.metadata for p in parts[:2]] == ['trace-123', _Trace('span-9')]
    assert [result_id_of(p) for p in parts] == [None, None, 'r1', 'r2']
    assert [p.content for p in parts[:2]] == ['value 0', 'value 1']
    assert parts[2].metadata['k'] == 'dict metadata'  # a dict keeps its keys beside ours


def test_results_that_get_no_id_do_not_make_each_request_read_the_whole_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pydantic_ai_compaction.processors.memory.archive as archive_module

    read: list[int] = []
    real = archive_module.markable

    def counting(part: ToolReturnPart) -> bool:
        read.append(1)
        return real(part)

    monkeypatch.setattr(archive_module, 'markable', counting)
    steps = [[ToolCallPart('fetch', {'which': i}, tool_call_id=f'f{i}')] for i in range(40)]
    agent = Agent(scripted([*steps, [TextPart('done')]]), capabilities=[Archive()])

    @agent.tool_plain
    def fetch(which: int) -> ToolReturn:  # pyright: ignore[reportUnusedFunction]
        return ToolReturn(return_value=f'value {which}', metadata=f'trace-{which}')  # never numbered: kept as is

    agent.run_sync('go')
    # Each request reads back to the last request of results (one new result a request). Before: to the start of
    # the history every time, as no request of them was ever "all numbered" (820 reads for 40 steps).
    assert len(read) == 40


def test_numbering_from_the_history_alone_goes_on_past_results_that_get_no_id() -> None:
    class FailingLater(InMemoryArchiveStore):
        reserved = 0

        def next_numbers(self, conversation: str, counter: str, count: int) -> list[int]:
            FailingLater.reserved += 1
            if FailingLater.reserved > 3:
                raise ArchiveError('the archive store is down')
            return super().next_numbers(conversation, counter, count)

    metadata: list[object] = [None, None, None, 'trace-3', None]
    steps = [[ToolCallPart('fetch', {'which': i}, tool_call_id=f'f{i}')] for i in range(5)]
    agent = Agent(scripted([*steps, [TextPart('done')]]), capabilities=[Archive(FailingLater())])

    @agent.tool_plain
    def fetch(which: int) -> ToolReturn:  # pyright: ignore[reportUnusedFunction]
        return ToolReturn(return_value=f'value {which}', metadata=metadata[which])

    with pytest.warns(RuntimeWarning, match='Archive numbered new results from the history alone'):
        parts = returns(agent.run_sync('go').all_messages())
    # The scan stops at the request of the result with no id; the ids before it are the run's, never given twice.
    assert [result_id_of(p) for p in parts] == ['r1', 'r2', 'r3', None, 'r4']


def test_number_new_reads_a_history_it_has_not_numbered_whole() -> None:
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    class Down(InMemoryArchiveStore):
        def next_numbers(self, conversation: str, counter: str, count: int) -> list[int]:
            raise ArchiveError('the archive store is down', operation='next_numbers')

    def numbered(which: int, result_id: str | None) -> list[ModelMessage]:
        call = ToolCallPart('fetch', {'which': which}, tool_call_id=f'f{which}')
        metadata = {'pydantic_ai_compaction': {'result_id': result_id}} if result_id else 'trace-id'
        return [
            ModelResponse(parts=[call]),
            ModelRequest(parts=[ToolReturnPart('fetch', 'ok', f'f{which}', metadata=metadata)]),
        ]

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')])]
    history += [*numbered(1, 'r1'), *numbered(2, 'r2'), *numbered(3, None)]
    history += [ModelResponse(parts=[ToolCallPart('fetch', {}, tool_call_id='f4')])]
    history += [ModelRequest(parts=[ToolReturnPart('fetch', 'new', 'f4')])]
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), run_step=4)
    with pytest.warns(RuntimeWarning, match='numbered new results from the history alone'):
        out = Archive[None](Down(), conversation='x').number_new(ctx, history)
    # Before: `r1` again, the scan stopping at the result with no id (metadata not a dict) of a history never read.
    assert [result_id_of(p) for p in returns(list(out.values()))] == ['r3']
