"""Log rewrites handed over as their changed positions give exactly what the whole-list rewrite gives.

`rewrite_log_at` checks and writes only the positions a capability changed; `rewrite_log` compares the whole
rewritten list with the log. For any change (allowed or not, under any contract) both accept or refuse alike,
with the same problems, events and resulting log. `ForgetReasoning` and `Archive` write their changes in place
through it: a run's history, request after request (grown, refused, numbered, truncated, compacted, copied),
equals what a reading of the whole history gives, and every message they did not change stays the same object.
"""

from __future__ import annotations

import asyncio
import os
import re
import warnings
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import Archive, CompactionEvent, ForgetReasoning, InMemoryArchiveStore
from pydantic_ai_compaction.processors.memory import archive as archive_module
from pydantic_ai_compaction.processors.memory.results import archived_ref_of, result_id_of, with_marks
from pydantic_ai_compaction.protocols.types import METADATA_KEY
from pydantic_ai_compaction.runtime import project as runtime_project
from pydantic_ai_compaction.runtime.project import rewrite_log, rewrite_log_at, rewrites_accepted
from pydantic_ai_compaction.runtime.segment import is_restatement

from .reliability import histories
from .test_incremental_requests import ACTIONS, between, decide_whole, reasoning_steps, scorer

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '25')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

CONTRACTS: list[tuple[type[Any], ...]] = [(), (ThinkingPart,), (ToolReturnPart,), (ThinkingPart, ToolCallPart)]
"""`may_drop` of a contract that keeps the shape (the fast path) and of ones that may change it (the shape walk)."""

EDITS = st.sampled_from(
    ['same', 'metadata', 'drop thinking', 'drop first', 'reverse', 'empty', 'other role', 'content', 'copy']
)
"""What a change does to the log's message at its position (most keep the rule, some break it)."""


def edited(message: ModelMessage, edit: str) -> ModelMessage:
    parts = list(message.parts)
    if edit == 'same':
        return message
    if edit == 'metadata':
        return replace(message, metadata={'note': 'kept'})
    if edit == 'drop thinking':
        return replace(message, parts=[p for p in parts if not isinstance(p, ThinkingPart)])  # pyright: ignore[reportArgumentType]
    if edit == 'drop first':
        return replace(message, parts=parts[1:])  # pyright: ignore[reportArgumentType]
    if edit == 'reverse':
        return replace(message, parts=parts[::-1])  # pyright: ignore[reportArgumentType]
    if edit == 'empty':
        return replace(message, parts=[])
    if edit == 'other role':
        if isinstance(message, ModelRequest):
            return ModelResponse(parts=[TextPart('a reply where a request was')])
        return ModelRequest(parts=[UserPromptPart('a request where a reply was')])
    if edit == 'content':
        texts = (TextPart, ToolReturnPart)
        return replace(
            message, parts=[replace(p, content=f'{p.content}!') if isinstance(p, texts) else p for p in parts]
        )  # pyright: ignore[reportArgumentType]
    return replace(message, parts=[replace(p) for p in parts])  # pyright: ignore[reportArgumentType]


def outcome(call: Any) -> tuple[Any, list[str], list[tuple[Any, ...]], bool]:
    """What a rewrite call gives: its result, its warnings, its events (as plain values), whether it counted."""
    events: list[CompactionEvent] = []
    generation = rewrites_accepted()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        result = call(events.append)
    seen = [
        (e.kind, e.strategy, e.reason, e.detail, e.messages_before, e.messages_after, e.history, e.record)
        for e in events
    ]
    return result, [str(w.message) for w in caught], seen, rewrites_accepted() != generation


@EXAMPLES
@given(histories(), st.lists(st.tuples(st.integers(0, 60), EDITS), max_size=6), st.sampled_from(CONTRACTS))
def test_a_rewrite_at_positions_is_judged_as_the_whole_rewrite_is(
    history: list[ModelMessage], picks: list[tuple[int, str]], may_drop: tuple[type[Any], ...]
) -> None:
    changes = {position % len(history): edited(history[position % len(history)], edit) for position, edit in picks}
    rewritten = list(history)
    for index, message in changes.items():
        rewritten[index] = message
    whole, whole_warnings, whole_events, whole_counted = outcome(
        lambda observe: rewrite_log(history, rewritten, 'Demo', reason='test', may_drop=may_drop, observer=observe)
    )
    log = list(history)
    at, at_warnings, at_events, at_counted = outcome(
        lambda observe: rewrite_log_at(log, changes, 'Demo', reason='test', may_drop=may_drop, observer=observe)
    )
    assert runtime_project.change_problems(history, changes, may_drop) == runtime_project.log_problems(
        history, rewritten, may_drop
    )
    assert at == (whole is not None)
    assert log == (whole if whole is not None else history)
    assert all(a is b for a, b in zip(log, whole if whole is not None else history, strict=True))
    assert at_warnings == whole_warnings
    if changes:  # an empty change writes nothing, where the whole path still reports a rewrite of the same list
        assert at_events == whole_events
        assert at_counted == whole_counted


def test_a_rewrite_at_a_position_outside_the_log_is_refused() -> None:
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('go')]), ModelResponse(parts=[TextPart('ok')])]
    log = list(history)
    for position in (2, -1):
        with pytest.warns(RuntimeWarning, match=re.escape(f'message {position} is not in the log of 2 messages')):
            assert not rewrite_log_at(log, {position: ModelRequest(parts=[UserPromptPart('x')])}, 'Demo', reason='t')
        assert log == history


def _run_context(messages: list[ModelMessage], step: int) -> RunContext[None]:
    return RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), messages=messages, run_step=step)


def _request(messages: list[ModelMessage]) -> ModelRequestContext:
    # pydantic-ai hands the hooks a copy of the history as the request.
    parameters = ModelRequestParameters()
    return ModelRequestContext(
        model=TestModel(), messages=list(messages), model_settings=None, model_request_parameters=parameters
    )


def run_forget_hook(history: list[ModelMessage], policy: str, actions: list[tuple[str, int]]) -> None:
    capability = ForgetReasoning[None](policy=policy, scorer=scorer, drop_share=0.5)  # pyright: ignore[reportArgumentType]
    reference = ForgetReasoning[None](policy=policy, scorer=scorer, drop_share=0.5)  # pyright: ignore[reportArgumentType]
    current: list[ModelMessage] = []
    for position, message in enumerate(history):
        sent = [*current, message]
        log = list(sent)
        ctx = _run_context(log, position + 1)
        request = asyncio.run(capability.before_model_request(ctx, _request(log)))
        expected = decide_whole(reference, sent) or sent
        assert ctx.messages is log  # written in place: the run's history object is the one it holds
        assert log == expected
        assert request.messages == expected
        # What the decision did not touch is the very message the run had: nothing else was rebuilt.
        assert all(a is b for a, b, c in zip(log, sent, expected, strict=True) if c is b)
        action, cut = actions[position % len(actions)] if actions else ('save', 0)
        current = between(action, log, sent, cut)


@EXAMPLES
@given(
    reasoning_steps(),
    st.sampled_from(['drop', 'after_artifact', 'score', 'keep']),
    st.lists(st.tuples(ACTIONS, st.integers(0, 30)), max_size=8),
)
def test_the_forget_hook_writes_each_request_as_a_reading_of_the_whole_history(
    history: list[ModelMessage], policy: str, actions: list[tuple[str, int]]
) -> None:
    run_forget_hook(history, policy, actions)


@EXAMPLES
@given(
    histories(), st.sampled_from(['drop', 'after_artifact', 'score']), st.lists(st.tuples(ACTIONS, st.integers(0, 30)))
)
def test_the_forget_hook_on_generated_histories_equals_the_whole_reading(
    history: list[ModelMessage], policy: str, actions: list[tuple[str, int]]
) -> None:
    run_forget_hook(history, policy, actions)


def number_whole(messages: list[ModelMessage], first: int) -> list[ModelMessage]:
    """Every result without an id numbered from *first*, in order, as a reading of the whole history numbers."""
    out = list(messages)
    number = first
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest):
            continue
        parts = list(message.parts)
        for part_index, part in enumerate(parts):
            if type(part) is ToolReturnPart and part.outcome != 'retried' and result_id_of(part) is None:
                prefix = f'[result r{number}]\n'
                content = prefix + part.content if isinstance(part.content, str) else part.content
                marks: dict[str, object] = {'result_id': f'r{number}'}
                if isinstance(part.content, str):
                    marks['id_prefix'] = prefix
                metadata = {**(part.metadata or {}), METADATA_KEY: marks}
                parts[part_index] = replace(part, content=content, metadata=metadata)
                number += 1
        if parts != list(message.parts):
            out[index] = replace(message, parts=parts)
    return out


@EXAMPLES
@given(reasoning_steps(), st.lists(st.sampled_from(['save', 'save', 'copy']), max_size=6))
def test_archive_numbers_each_request_in_place_as_a_reading_of_the_whole_history(
    history: list[ModelMessage], actions: list[str]
) -> None:
    archive = Archive[None](store=InMemoryArchiveStore(), conversation='c', reminder_tokens=10**9)
    current: list[ModelMessage] = []
    numbered = 0
    for position, message in enumerate(history):
        sent = [*current, message]
        log = list(sent)
        ctx = _run_context(log, position + 1)
        request = asyncio.run(archive.before_model_request(ctx, _request(log)))
        expected = number_whole(sent, numbered + 1)
        assert ctx.messages is log
        assert log == expected
        assert request.messages == expected
        assert all(a is b for a, b, c in zip(log, sent, expected, strict=True) if c is b)
        numbered = sum(1 for m in log for p in m.parts if isinstance(p, ToolReturnPart) and result_id_of(p))
        action = actions[position % len(actions)] if actions else 'save'
        current = [replace(m, parts=[replace(p) for p in m.parts]) for m in log] if action == 'copy' else log  # pyright: ignore[reportArgumentType]


def test_archive_numbering_a_refused_rewrite_leaves_the_log_and_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The runtime refuses (here: every change); the hook must leave the run's history object and the request alone.
    monkeypatch.setattr(runtime_project, 'change_problems', lambda log, changes, may_drop=(): ['refused for test'])
    log: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('go')]),
        ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id='a')]),
        ModelRequest(parts=[ToolReturnPart('read', 'found', tool_call_id='a')]),
    ]
    before = list(log)
    archive = Archive[None](store=InMemoryArchiveStore(), conversation='c', reminder_tokens=10**9)
    sent = _request(log)
    with pytest.warns(RuntimeWarning, match='refused for test'):
        request = asyncio.run(archive.before_model_request(_run_context(log, 2), sent))
    assert log == before and all(a is b for a, b in zip(log, before, strict=True))
    assert request is sent


def scan_whole(messages: list[ModelMessage]) -> tuple[int, list[tuple[int, int, str]]]:
    """The reminder's reading of a whole request, as before it was incremental: prompts, and each archivable
    result (its part's identity, rendered size and id)."""
    prompts = 0
    eligible: list[tuple[int, int, str]] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart) and not is_restatement(part):
                prompts += 1
            elif isinstance(part, ToolReturnPart) and (rid := result_id_of(part)) and not archived_ref_of(part):
                eligible.append((id(part), len(part.model_response_str()), rid))
    return prompts, eligible


def stubbed(messages: list[ModelMessage], pick: int) -> list[ModelMessage]:
    """One numbered result replaced by `context_apply`'s stub, wherever it is (often in the middle)."""
    spots = [
        (index, part_index)
        for index, message in enumerate(messages)
        if isinstance(message, ModelRequest)
        for part_index, part in enumerate(message.parts)
        if isinstance(part, ToolReturnPart) and result_id_of(part)
    ]
    if not spots:
        return messages
    index, part_index = spots[pick % len(spots)]
    request = messages[index]
    parts = list(request.parts)
    part = parts[part_index]
    assert isinstance(part, ToolReturnPart)
    parts[part_index] = replace(part, content='[archived]', metadata=with_marks(part, archived=f'a{pick}'))
    out = list(messages)
    out[index] = replace(request, parts=parts)
    return out


REMINDER_ACTIONS = st.sampled_from(['save', 'save', 'number', 'number', 'stub', 'copy', 'truncate', 'compact'])


@EXAMPLES
@given(reasoning_steps(), st.lists(st.tuples(REMINDER_ACTIONS, st.integers(0, 30)), max_size=8))
def test_the_reminder_reads_each_request_as_a_reading_of_the_whole_history(
    history: list[ModelMessage], actions: list[tuple[str, int]]
) -> None:
    archive = Archive[None](reminder_tokens=40, reminder_every_chars=25)
    whole = Archive[None](reminder_tokens=40, reminder_every_chars=25)
    current: list[ModelMessage] = []
    for position, message in enumerate(history):
        sent = [*current, message]
        prompts, eligible = archive._scanned.read(sent)  # pyright: ignore[reportPrivateUsage]
        assert (prompts, [(id(part), size, rid) for part, size, rid in eligible]) == scan_whole(sent)
        whole._scanned = archive_module._Scanned()  # pyright: ignore[reportPrivateUsage]
        reminder = archive._reminder(sent)  # pyright: ignore[reportPrivateUsage]
        assert reminder == whole._reminder(sent)  # pyright: ignore[reportPrivateUsage]
        action, cut = actions[position % len(actions)] if actions else ('number', 0)
        if action == 'number':
            current = number_whole(sent, position * 10 + 1)
        elif action == 'stub':
            current = stubbed(sent, cut)
        else:
            current = between(action, sent, sent, cut)


@EXAMPLES
@given(histories(), st.data())
def test_the_rewritten_request_replaces_each_old_message_wherever_the_request_holds_it(
    history: list[ModelMessage], data: st.DataObject
) -> None:
    # A request as a capability listed earlier may leave it: some of the log's messages, in any order, and
    # messages of its own (never the same object twice, as in a real request).
    chosen = data.draw(st.lists(st.integers(0, len(history) - 1), unique=True))
    foreign: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('a note of its own')])]
    request = [history[index] for index in chosen] + foreign * data.draw(st.integers(0, 1))
    if data.draw(st.booleans()):
        request = list(history)  # not projected: the log's own messages at their positions
    positions = data.draw(st.lists(st.integers(0, len(history) - 1), unique=True, max_size=4))
    replaced = {index: (history[index], edited(history[index], 'copy')) for index in positions}
    rewritten = [*history]
    for index, (_, new) in replaced.items():
        rewritten[index] = new
    if data.draw(st.booleans()):
        request = rewritten  # the request is the log's own list, which the rewrite changed in place
    # Only a rebuilt last message gives way to the log: an older one the request lacks was left out or copied.
    last = len(history) - 1
    holds_last = last not in replaced or any(m is replaced[last][0] or m is replaced[last][1] for m in request)
    fresh = (
        [next((new for old, new in replaced.values() if old is message), message) for message in request]
        if holds_last
        else rewritten
    )
    out = runtime_project.rewritten_request(request, rewritten, replaced)
    assert len(out) == len(fresh) and all(a is b for a, b in zip(out, fresh, strict=True))


@pytest.mark.parametrize('archive', [False, True])
def test_a_projection_listed_before_forget_survives_its_rewrite(archive: bool) -> None:
    from dataclasses import dataclass as _dataclass

    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    @_dataclass
    class Note(AbstractCapability[None]):
        async def before_model_request(
            self, ctx: RunContext[None], request_context: ModelRequestContext
        ) -> ModelRequestContext:
            messages = list(request_context.messages)
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            messages[-1] = replace(last, parts=[*last.parts, UserPromptPart('request-only note')])
            return replace(request_context, messages=messages)

    received: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(messages)
        if len(received) < 3:
            return ModelResponse(
                parts=[ThinkingPart('next?'), ToolCallPart('read', {}, tool_call_id=f'c{len(received)}')]
            )
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(
        FunctionModel(respond),
        capabilities=[
            Note(),
            ForgetReasoning[None](policy='drop'),
            *([Archive[None](reminder_tokens=10**9)] if archive else []),
        ],
    )

    @agent.tool_plain
    def read() -> str:  # pyright: ignore[reportUnusedFunction]
        return 'found'

    result = agent.run_sync('go')
    assert len(received) == 3
    noted = [
        any(isinstance(p, UserPromptPart) and p.content == 'request-only note' for p in m[-1].parts) for m in received
    ]
    # The request shows the rewrite: the earlier step's thinking is gone.
    assert not any(isinstance(p, ThinkingPart) for p in received[2][1].parts)
    if not archive:
        # The note the first capability projected is in every request, though ForgetReasoning rewrote the log.
        assert noted == [True, True, True]
    else:
        # Archive numbers the newest result, in the request the note rebuilt: a result goes out with its id, so
        # that request is the numbered log (the note gives way), as when a single capability projects.
        assert noted == [True, False, False]
        ids = [result_id_of(p) for m in received[2] for p in m.parts if isinstance(p, ToolReturnPart)]
        assert ids == ['r1', 'r2']
    assert 'request-only note' not in str(result.all_messages())
