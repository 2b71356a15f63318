"""Tiered: a request-only view (clear at 50 %, summarize at 75 %), the log keeps everything."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import InMemoryArchiveStore, Notes, Recall
from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER, Tiered
from pydantic_ai_compaction.protocols.archive import ArchiveError
from pydantic_ai_compaction.runtime.segment import our_record

from .support import log_text

WINDOW = 10_000


def run(
    tiered: Tiered[Any], steps: int, *, lines: int = 60, note: bool = False
) -> tuple[list[list[ModelMessage]], list[str], Any]:
    seen: list[list[ModelMessage]] = []
    handoff_prompts: list[str] = []
    state = {'step': 0, 'notes': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = ' '.join(str(p.content) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        if HANDOFF_MARKER in prompt:
            handoff_prompts.append(prompt)
            return ModelResponse(parts=[TextPart(f'Goal: audit. Done: {len(handoff_prompts)} handoffs so far.')])
        seen.append(list(messages))
        if note and state['notes'] == 0:
            state['notes'] = 1
            return ModelResponse(parts=[ToolCallPart('note', {'kind': 'decision', 'text': 'skip legacy logs'})])
        step = state['step']
        state['step'] += 1
        if step >= steps:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])

    capabilities: list[Any] = [Notes(), tiered] if note else [tiered]
    agent = Agent(FunctionModel(respond), capabilities=capabilities)

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, lines)

    result = agent.run_sync('Audit the logs, ignore legacy.')
    return seen, handoff_prompts, result


def cleared_count(messages: list[ModelMessage]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and str(p.content).startswith('[cleared:')
    )


def test_clearing_is_a_view_and_the_log_keeps_everything() -> None:
    seen, handoffs, result = run(Tiered(context_window=WINDOW, summarize_at=1.0), steps=10)
    assert not handoffs
    assert cleared_count(seen[-1]) >= 1  # the model was sent one-line stubs...
    assert cleared_count(result.all_messages()) == 0  # ...while the persisted log kept every output
    stub = next(
        p for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart) and str(p.content).startswith('[cleared:')
    )
    # The call stays in the view beside its stub, so the stub does not repeat it; no recall tool, no pointer at one.
    assert str(stub.content).startswith('[cleared: 2,575 chars, began "log 0 00-0000 service=api')
    assert str(stub.content).endswith('; run it again for details]') and 'recall' not in str(stub.content)
    assert any(isinstance(p, ToolCallPart) and p.tool_call_id == stub.tool_call_id for m in seen[-1] for p in m.parts)
    # Newest results stay verbatim.
    verbatim = [p for p in seen[-1][-1].parts if isinstance(p, ToolReturnPart)]
    assert verbatim and not str(verbatim[0].content).startswith('[cleared:')


def test_the_projection_is_reused_between_compactions() -> None:
    seen, _, _ = run(Tiered(context_window=WINDOW, summarize_at=1.0), steps=12)
    first_cleared = next(i for i, request in enumerate(seen) if cleared_count(request))
    # The request after a compaction starts with exactly the messages the compaction produced.
    for earlier, later in zip(seen[first_cleared:], seen[first_cleared + 1 :], strict=False):
        if cleared_count(later) == cleared_count(earlier):
            assert later[: len(earlier)] == earlier


def test_clearing_only_in_batches_that_save_enough() -> None:
    seen, _, _ = run(Tiered(context_window=WINDOW, summarize_at=1.0, clear_min_saving=0.9), steps=10)
    assert all(cleared_count(request) == 0 for request in seen)


def rewritten_results(seen: list[list[ModelMessage]]) -> list[int]:
    """Per request: tool results sent again verbatim after the first part that differs from the previous request.

    A provider's prompt cache holds a request's longest prefix shared with an earlier one; everything after the
    first changed part is written to the cache again, so a result counted here is paid for again in full.
    """
    counts: list[int] = []
    for earlier, later in itertools.pairwise(seen):
        before = [(type(p).__name__, str(getattr(p, 'content', p))) for m in earlier for p in m.parts]
        after = [(type(p).__name__, str(getattr(p, 'content', p))) for m in later for p in m.parts]
        first = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), len(before))
        counts.append(
            sum(1 for kind, text in after[first:] if kind == 'ToolReturnPart' and (kind, text) in before[first:])
        )
    return counts


def test_clearing_does_not_rewrite_kept_results_at_every_request() -> None:
    # Three logs of about 2,000 tokens are over the 5,000-token clearing threshold by themselves.
    seen, _, _ = run(Tiered(context_window=WINDOW, summarize=False, clear_min_saving=0.05), steps=14, lines=160)
    assert cleared_count(seen[-1]) >= 10
    # Only the log of the request in progress stays verbatim, and no clearing sends a kept log again.
    assert next(p for p in seen[-1][-1].parts if isinstance(p, ToolReturnPart)).content == log_text(13, 160)
    assert sum(rewritten_results(seen)) == 0
    # Keeping the three newest whatever their size clears again at every request, sending two logs again each time.
    kept, _, _ = run(
        Tiered(context_window=WINDOW, summarize=False, clear_min_saving=0.05, fit_kept_results=False),
        steps=14,
        lines=160,
    )
    assert rewritten_results(kept)[-8:] == [2] * 8


def test_clearing_leaves_room_for_the_next_step_instead_of_clearing_one_result_per_request() -> None:
    # Three logs of about 1,400 tokens fit under the 5,000-token threshold, four do not: keeping the three
    # newest would cross it again at the next request, clear one more log, and send the two kept older ones again.
    seen, _, _ = run(Tiered(context_window=WINDOW, summarize=False, clear_min_saving=0.05), steps=16, lines=130)
    assert cleared_count(seen[-1]) >= 12
    assert sum(rewritten_results(seen)) == 0
    # Each clearing leaves only the log in progress verbatim, so the next one comes three requests later.
    runs = [i for i, (a, b) in enumerate(itertools.pairwise(seen), 1) if cleared_count(b) > cleared_count(a)]
    assert runs == [4, 7, 10, 13, 16]


def test_a_stub_never_repeats_the_call_and_a_short_result_is_not_cleared() -> None:
    # A write tool is given a whole file and answers "ok"; a read tool returns a long output.
    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(list(messages))
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        if step >= 8:
            return ModelResponse(parts=[TextPart('done')])
        if step % 2:
            return ModelResponse(parts=[ToolCallPart('write_file', {'path': f'f{step}.py', 'content': 'x' * 4_000})])
        return ModelResponse(parts=[ToolCallPart('read_file', {'path': f'f{step}.py'})])

    agent = Agent(
        FunctionModel(respond),
        capabilities=[Tiered(context_window=8_000, summarize=False, clear_min_saving=0.01)],
    )

    @agent.tool_plain
    def write_file(path: str, content: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return 'ok'

    @agent.tool_plain
    def read_file(path: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return 'y' * 8_000

    agent.run_sync('Rewrite the files.')
    returns = [p for m in sent[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [p.tool_name for p in returns] == ['read_file', 'write_file'] * 4
    # Every read was cleared to a short stub; each write's "ok" was left as it was (its stub would be longer).
    assert [p.content for p in returns[1::2]] == ['ok'] * 4
    assert all(str(p.content).startswith('[cleared: 8,000 chars') and len(str(p.content)) < 150 for p in returns[::2])


def test_a_stub_points_at_recall_only_when_the_model_is_offered_it() -> None:
    seen, _, _ = run(Tiered(context_window=WINDOW, summarize_at=1.0), steps=10)
    without = [str(p.content) for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert without[0].endswith('; run it again for details]')
    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(list(messages))
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        if step >= 10:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])

    agent = Agent(FunctionModel(respond), capabilities=[Recall(), Tiered(context_window=WINDOW, summarize_at=1.0)])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    agent.run_sync('Audit the logs.')
    stubs = [str(p.content) for m in sent[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert stubs[0].endswith('; use recall or run it again for details]')
    assert stubs[0].removesuffix('use recall or run it again for details]') == without[0].removesuffix(
        'run it again for details]'
    )


def test_fit_kept_results_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match=r'ClearThenSummarize\.fit_kept_results must be True or False'):
        Tiered(fit_kept_results=1)  # pyright: ignore[reportArgumentType]


def test_summarizing_writes_then_updates_the_handoff_note() -> None:
    seen, handoffs, result = run(
        Tiered(context_window=WINDOW, clear_at=0.5, summarize_at=0.5, summarize_to=0.2), steps=16, note=True
    )
    assert len(handoffs) >= 2
    assert '<previous-note>' not in handoffs[0]
    # The second note updates the first instead of rewriting it.
    assert 'UPDATE it' in handoffs[1] and 'Done: 1 handoffs so far.' in handoffs[1]
    boundary = next(p for m in seen[-1] for p in m.parts if isinstance(p, CompactionPart))
    content = boundary.content or ''
    assert content.startswith('Handoff note:') and 'use recall' in content
    assert f'Done: {len(handoffs)} handoffs so far.' in content
    assert '- Audit the logs, ignore legacy.' in content  # user messages, verbatim
    assert '- [decision] skip legacy logs' in content  # notes, verbatim
    assert not any(isinstance(p, CompactionPart) for m in result.all_messages() for p in m.parts)
    # The boundary carries the record a strategy's boundary carries, not a record of its own shape.
    record = our_record(boundary)
    assert record is not None
    assert (record['strategy'], record['sequence'], record['boundary_id'][0]) == ('tiered', len(handoffs), 'g')
    assert record['extra'] == {'handoff': True, 'notes': ['[decision] skip legacy logs']}
    assert record['dropped'] and record['tokens_after'] < record['tokens_before']


def test_bad_thresholds_fail_at_construction() -> None:
    with pytest.raises(ValueError, match='summarize_to < clear_at <= summarize_at'):
        Tiered(clear_at=0.8, summarize_at=0.6)
    with pytest.raises(ValueError, match=r'ClearThenSummarize\.clear_at must be a finite number > 0 ≤ 1, got 0'):
        Tiered(clear_at=0)


def test_cleared_outputs_are_archived_and_recoverable_with_a_store() -> None:
    from pydantic_ai_compaction import Archive, InMemoryArchiveStore

    store = InMemoryArchiveStore()
    seen: list[list[ModelMessage]] = []
    state = {'step': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        step = state['step']
        state['step'] += 1
        if step < 10:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])
        if step == 10:
            stub = next(
                str(p.content)
                for m in messages
                for p in m.parts
                if isinstance(p, ToolReturnPart) and str(p.content).startswith('[cleared:')
            )
            ref = stub.split('context_recover("')[1].split('"')[0]
            return ModelResponse(parts=[ToolCallPart('context_recover', {'archive_ref': ref})])
        return ModelResponse(parts=[TextPart('done')])

    conversation = 'tiered-archive'
    tiered = Tiered(context_window=WINDOW, summarize=False, store=store, conversation=lambda ctx: conversation)
    agent = Agent(
        FunctionModel(respond), capabilities=[Archive(store=store, conversation=lambda ctx: conversation), tiered]
    )

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    agent.run_sync('Audit.')
    recovered = next(
        p for p in seen[-1][-1].parts if isinstance(p, ToolReturnPart) and p.tool_name == 'context_recover'
    )
    # The exact original of the cleared output, with a fresh result id in front.
    assert str(recovered.content).split('\n', 1)[1] == log_text(0, 60)


class _Bare(ArchiveError):
    """A store's own error that never calls `ArchiveError.__init__` (no `reported`)."""

    def __init__(self, message: str) -> None:
        self.message = message


@pytest.mark.parametrize(
    ('error', 'said'),
    [(RuntimeError('backend down'), 'RuntimeError: backend down'), (_Bare('disk full'), '_Bare: disk full')],
)
def test_a_store_of_your_own_that_raises_anything_still_lets_results_be_cleared_and_says_so(
    error: Exception, said: str
) -> None:
    class Broken(InMemoryArchiveStore):
        def put_archived(self, entries: Any) -> None:
            raise error

    tiered = Tiered(context_window=WINDOW, summarize=False, clear_min_saving=0.05, store=Broken())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        seen, _, result = run(tiered, steps=14, lines=160)
    assert result.output == 'done'
    # Cleared without a reference (the stub points at running the call again), not sent unprojected.
    assert cleared_count(seen[-1]) > 0
    contents = [str(p.content) for m in seen[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert all(c.endswith('run it again for details]') for c in contents if c.startswith('[cleared:'))
    assert {str(w.message) for w in caught} == {f'ClearThenSummarize cleared results without archiving them: {said}'}


async def test_clearing_numbers_its_references_past_those_a_resumed_history_shows() -> None:
    # Run 2 resumes a history holding `Archive`'s stub of run 1's `a1` (run 2 is a conversation of its own): the
    # clearing's references started at `a1` again, so one request showed two originals under `a1`.
    import re

    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from pydantic_ai_compaction import Archive

    def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
        return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]

    def first(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        names = [r.tool_name for r in returns(messages)]
        if 'fetch' not in names:
            return ModelResponse(parts=[ToolCallPart('fetch', {'n': 0})])
        if 'context_apply' not in names:
            items = [{'result_id': 'r1', 'note': 'report 0'}]
            return ModelResponse(parts=[ToolCallPart('context_apply', {'items': items})])
        return ModelResponse(parts=[TextPart('done')])

    shown: list[list[str]] = []

    def second(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        shown.append([str(r.content) for r in returns(messages)])
        fetched = sum(r.tool_name == 'fetch' for r in returns(messages))
        if fetched < 5:
            return ModelResponse(parts=[ToolCallPart('fetch', {'n': fetched})])
        return ModelResponse(parts=[TextPart('done')])

    store = InMemoryArchiveStore()

    def agent(respond: Any) -> Agent[None, str]:
        tiered = Tiered[None](store=store, summarize=False, context_window=4_000, keep_results=1)
        made = Agent(FunctionModel(respond), capabilities=[Archive[None](store=store), tiered])

        @made.tool_plain
        def fetch(n: int) -> str:  # pyright: ignore[reportUnusedFunction]
            return f'REPORT {n}\n' + f'line of report {n}\n' * 250

        return made

    ran = await agent(first).run('fetch report 0, then archive it')
    history = ModelMessagesTypeAdapter.validate_json(ran.all_messages_json())
    await agent(second).run('fetch more reports', message_history=history)
    last = shown[-1]
    refs = [ref for content in last for ref in re.findall(r'context_recover\("(a\d+)"\)', content)]
    assert refs[0] == 'a1' and 'archived as a1' in last[0]  # `Archive`'s stub of run 1
    assert refs[1:] == ['a2', 'a3', 'a4']  # the clearing's own, past it


def _audit_with_reminders(reminder_tokens: int) -> tuple[int, list[int]]:
    """Handoff notes written, and per agent request the `[Context check` reminders it holds, in a run of `Archive`
    (reminding at *reminder_tokens*) and `Tiered` after it, as docs/archive.md orders them."""
    from pydantic_ai_compaction import Archive

    notes, reminders, steps = [0], list[int](), itertools.count(1)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not info.function_tools:  # the handoff note's writer
            notes[0] += 1
            return ModelResponse(parts=[TextPart('Goal: audit\nDone: logs read\nNext steps: continue')])
        reminders.append(
            sum('[Context check' in str(p.content) for m in messages for p in m.parts if isinstance(p, UserPromptPart))
        )
        step = next(steps)
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})] if step <= 12 else [TextPart('done')])

    store = InMemoryArchiveStore()
    archive = Archive(store=store, conversation='c', reminder_tokens=reminder_tokens, reminder_every_chars=2_000)
    agent = Agent(
        FunctionModel(respond), capabilities=[archive, Tiered(context_window=20_000, store=store, conversation='c')]
    )

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'log {index}\n' + f'{index} event ok\n' * 150

    history: list[ModelMessage] = []
    for turn in range(30):  # an earlier conversation past `summarize_at` from the first request
        history += [ModelRequest(parts=[UserPromptPart(f'question {turn} ' + 'context ' * 300)])]
        history += [ModelResponse(parts=[TextPart(f'answer {turn} ' + 'detail ' * 300)])]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        agent.run_sync('Audit logs 1-12.', message_history=history)
    return notes[0], reminders


def test_archive_s_reminder_does_not_make_tiered_write_its_note_again() -> None:
    # The reminder is added to one request and never saved: the projection stood for that copy, read as stale at the
    # next request, and the handoff note was written again at every reminder (8 notes where 3 were due).
    quiet_notes, quiet = _audit_with_reminders(10**9)
    notes, reminded = _audit_with_reminders(1)
    assert sum(quiet) == 0 and sum(reminded) > 2  # reminders fired on several requests
    assert notes == quiet_notes >= 1
    assert max(reminded) == 1  # a reminder goes to its own request: the projection does not carry it on


def test_a_handoff_note_the_model_refuses_keeps_the_previous_note() -> None:
    # A refusal took the note's place: the next summary's boundary said "I'm sorry, I can't help with that."
    seen: list[list[ModelMessage]] = []
    notes: list[str] = []
    state = {'step': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = ' '.join(str(p.content) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        if HANDOFF_MARKER in prompt:
            notes.append(prompt)
            first = 'Goal: audit. Done: logs read, INC-4471 open.'
            return ModelResponse(parts=[TextPart(first if len(notes) == 1 else "I'm sorry, I can't help with that.")])
        seen.append(list(messages))
        state['step'] += 1
        if state['step'] > 16:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': state['step']})])

    tiered = Tiered[Any](context_window=WINDOW, clear_at=0.5, summarize_at=0.5, summarize_to=0.2)
    agent = Agent(FunctionModel(respond), capabilities=[tiered])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    agent.run_sync('Audit the logs, ignore legacy.')
    assert len(notes) >= 2
    boundary = next(p for m in seen[-1] for p in m.parts if isinstance(p, CompactionPart))
    assert 'Done: logs read, INC-4471 open.' in (boundary.content or '')
    assert 'sorry' not in (boundary.content or '')


def test_a_pinned_part_is_kept_when_tiered_summarizes() -> None:
    # Tiered lays its view out itself: the pin was summarized away with the older turns, which no strategy does.
    from pydantic_ai_compaction import ClearThenSummarize
    from pydantic_ai_compaction.runtime.pins import pin

    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('OPENING: audit the logs')]),
        ModelResponse(parts=[TextPart('ok')]),
        ModelRequest(parts=[pin('PINNED: the audit covers March only')]),
        ModelResponse(parts=[TextPart('noted')]),
        ModelRequest(parts=[UserPromptPart('here is the log: ' + 'line ' * 4000)]),
        ModelResponse(parts=[TextPart('read it')]),
        ModelRequest(parts=[UserPromptPart('continue')]),
    ]
    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(list(messages))
        return ModelResponse(parts=[TextPart('The user sent a log.')])

    agent = Agent(FunctionModel(respond), capabilities=[ClearThenSummarize[Any](context_window=4000)])
    agent.run_sync(None, message_history=list(history))
    final = sent[-1]
    assert any(isinstance(p, CompactionPart) for m in final for p in m.parts)  # it summarized
    assert 'PINNED: the audit covers March only' in repr(final)
    assert 'line line line' not in repr(final)
