"""The incremental paths on inputs that once answered unlike a fresh computation; known limits are strict xfails."""

from __future__ import annotations

import copy
import gc
import importlib
import weakref
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext

from pydantic_ai_compaction import BoundedSelection
from pydantic_ai_compaction.runtime.segment import segment, segment_fresh

from .test_selection_incremental import fresh
from .test_tiered_turns import cleared

AT = datetime(2024, 1, 1, tzinfo=UTC)


def _history(result: object) -> list[ModelMessage]:
    """A user turn, four tool steps (the second returns *result*), an answer and a new user turn."""
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('hi', timestamp=AT)])]
    for step in range(4):
        history.append(ModelResponse(parts=[ToolCallPart('t', {'a': step}, tool_call_id=f'c{step}')], timestamp=AT))
        content = result if step == 1 else 'x'
        history.append(ModelRequest(parts=[ToolReturnPart('t', content, tool_call_id=f'c{step}', timestamp=AT)]))
    history.append(ModelResponse(parts=[TextPart('done')], timestamp=AT))
    history.append(ModelRequest(parts=[UserPromptPart('next', timestamp=AT)]))
    return history


def test_an_equal_copy_that_measures_differently_is_segmented_as_fresh() -> None:
    first = _history(0)
    segment(first)
    # The same first message, every other one replaced by a copy holding False where it held 0 (0 == False).
    later = [first[0], *_history(False)[1:], ModelResponse(parts=[TextPart('ok')], timestamp=AT)]
    view, expected = segment(later), segment_fresh(later)
    assert (view.text_chars, view.estimated_tokens) == (expected.text_chars, expected.estimated_tokens)
    assert [e.tokens for e in view.exchanges] == [e.tokens for e in expected.exchanges]


@dataclass
class _Recorder(AbstractCapability[Any]):
    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self.seen.append(list(request_context.messages))
        return request_context


@dataclass
class _Zone:
    offset: timedelta = timedelta(0)


@dataclass
class _Localize(AbstractCapability[_Zone]):
    """Shows every datetime a tool returned in the user's zone (which a tool can change during the run)."""

    async def before_model_request(
        self, ctx: RunContext[_Zone], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        zone = timezone(ctx.deps.offset)
        messages: list[ModelMessage] = []
        for message in request_context.messages:
            if isinstance(message, ModelRequest) and any(
                isinstance(p, ToolReturnPart) and isinstance(p.content, datetime) for p in message.parts
            ):
                parts = [
                    replace(p, content=p.content.astimezone(zone))
                    if isinstance(p, ToolReturnPart) and isinstance(p.content, datetime)
                    else p
                    for p in message.parts
                ]
                message = replace(message, parts=parts)
            messages.append(message)
        request_context.messages = messages
        return request_context


@pytest.mark.anyio
async def test_selection_sends_the_history_it_is_given_after_an_equal_rewrite() -> None:
    calls = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls['n'] += 1
        if calls['n'] <= 3:
            return ModelResponse(parts=[ToolCallPart('clock', {})])
        if calls['n'] == 4:
            return ModelResponse(parts=[ToolCallPart('set_zone', {'hours': 1})])
        return ModelResponse(parts=[TextPart('done')])

    given, sent = _Recorder(), _Recorder()
    selection = BoundedSelection[_Zone](budget=10_000)
    agent = Agent(FunctionModel(respond), deps_type=_Zone, capabilities=[_Localize(), given, selection, sent])

    @agent.tool_plain
    def clock() -> datetime:
        return datetime(2024, 1, 1, 12, tzinfo=UTC)

    @agent.tool
    def set_zone(ctx: RunContext[_Zone], hours: int) -> str:
        ctx.deps.offset = timedelta(hours=hours)
        return 'ok'

    await agent.run('what time is it', deps=_Zone())
    last_given, last_sent = given.seen[-1], sent.seen[-1]
    expected = fresh(last_given, BoundedSelection[Any](budget=10_000), 'what time is it')
    assert last_sent == expected  # equal by ==: the same instants
    # What the model is sent: the clock results in the zone the history now shows them in.
    assert ModelMessagesTypeAdapter.dump_json(last_sent) == ModelMessagesTypeAdapter.dump_json(expected)


SHARED_OPENING = ModelRequest(parts=[UserPromptPart('You are the support desk. Greet the customer.')])
"""A first message an application keeps at module level and starts every conversation with."""


def test_a_finished_run_is_not_kept_alive_by_a_shared_first_message() -> None:
    calls = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls['n'] += 1
        return ModelResponse(parts=[ToolCallPart('fetch', {})] if calls['n'] < 4 else [TextPart('done')])

    agent = Agent(FunctionModel(respond), capabilities=[BoundedSelection[Any](budget=10**9)])

    @agent.tool_plain
    def fetch() -> str:
        return 'a customer record ' * 10_000

    history: list[ModelMessage] = [SHARED_OPENING, ModelResponse(parts=[TextPart('Hello!')])]
    result = agent.run_sync('look up my orders', message_history=history)
    assert result.all_messages()[0] is SHARED_OPENING
    records = [
        weakref.ref(m)
        for m in result.all_messages()
        if isinstance(m, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in m.parts)
    ]
    assert len(records) == 3
    del result, history
    gc.collect()
    assert [ref() for ref in records] == [None, None, None]


@pytest.mark.xfail(
    strict=True,
    reason='segmentation remembers four histories per first message: five interleaved conversations sharing a '
    'first message object push each other out, and every request segments its whole history again',
)
def test_five_conversations_sharing_a_first_message_are_each_segmented_incrementally(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = importlib.import_module('pydantic_ai_compaction.runtime.segment')
    original = module._segment_raw
    reused = {'yes': 0, 'no': 0}

    def spy(history: Any, prompt: object, state: Any) -> Any:
        reused['yes' if state is not None else 'no'] += 1
        return original(history, prompt, state)

    monkeypatch.setattr(module, '_segment_raw', spy)
    conversations: list[list[ModelMessage]] = [
        [SHARED_OPENING, ModelResponse(parts=[TextPart(f'Hello {c}')])] for c in range(5)
    ]
    for step in range(10):
        for c, history in enumerate(conversations):  # a server answering five customers in turn
            call = f'{c}-{step}'
            history.append(ModelRequest(parts=[UserPromptPart(f'question {step}')]))
            history.append(ModelResponse(parts=[ToolCallPart('t', {'s': step}, tool_call_id=call)]))
            history.append(ModelRequest(parts=[ToolReturnPart('t', 'r', tool_call_id=call)]))
            history.append(ModelResponse(parts=[TextPart('answer')]))
            assert segment(history) == segment_fresh(history)
    assert reused['no'] <= 5  # each conversation's first segmentation; every later one extends a remembered one


def test_notes_gathered_after_an_equal_rewrite_are_the_history_s_own() -> None:
    from pydantic_ai_compaction.protocols.names import NOTE_TOOL
    from pydantic_ai_compaction.runtime.notes import gather_notes, gather_notes_fresh

    def history(value: object) -> list[ModelMessage]:
        messages: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart('hi', timestamp=AT)]),
            ModelResponse(
                parts=[ToolCallPart(NOTE_TOOL, {'text': value, 'kind': 'fact'}, tool_call_id='n1')], timestamp=AT
            ),
            ModelRequest(parts=[ToolReturnPart(NOTE_TOOL, 'ok', tool_call_id='n1', timestamp=AT)]),
        ]
        for step in range(3):
            messages.append(ModelResponse(parts=[TextPart(f'answer {step}')], timestamp=AT))
            messages.append(ModelRequest(parts=[UserPromptPart(f'question {step}', timestamp=AT)]))
        return messages

    first = history(1)
    assert gather_notes(segment(first)) == ['[fact] 1']
    later = [first[0], *history(1.0)[1:], ModelResponse(parts=[TextPart('ok')], timestamp=AT)]
    view = segment(later)
    assert gather_notes(view) == gather_notes_fresh(view) == ['[fact] 1.0']


@dataclass(eq=False)
class _Compared:
    """A tool result value that counts how often it is compared with `==`."""

    text: str
    counter: list[int]

    def __eq__(self, other: object) -> bool:
        self.counter[0] += 1
        return isinstance(other, _Compared) and other.text == self.text

    __hash__ = None  # pyright: ignore[reportAssignmentType]


def test_a_history_swapped_once_for_equal_copies_is_compared_by_identity_again() -> None:
    compared = [0]
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('start')])]
    for step in range(20):
        history.append(ModelResponse(parts=[ToolCallPart('t', {'s': step}, tool_call_id=f'c{step}')]))
        content = _Compared(f'result {step}', compared)
        history.append(ModelRequest(parts=[ToolReturnPart('t', content, tool_call_id=f'c{step}')]))
    segment(history)
    # Once, every message but the first is swapped for an equal copy (a processor rebuilt them, a reload).
    history = [history[0], *copy.deepcopy(history[1:])]
    for step in range(20, 24):
        history.append(ModelResponse(parts=[ToolCallPart('t', {'s': step}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('t', f'result {step}', tool_call_id=f'c{step}')]))
        assert segment(history) == segment_fresh(history)
        if step == 20:
            compared[0] = 0  # the first request after the swap compares the copies once
    assert compared[0] == 0  # the later requests hold the same objects as the one before them


@pytest.mark.parametrize('rewriter', ['archive', 'forget'])
def test_a_log_rewrite_after_a_selection_keeps_the_selection(rewriter: str) -> None:
    from pydantic_ai.messages import ThinkingPart

    from pydantic_ai_compaction import Archive, ForgetReasoning

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('read the logs')])]
    for step in range(30):  # a history from a run without the rewriter: no ids on results, no decided steps
        call = ToolCallPart('read_log', {'i': step}, tool_call_id=f'c{step}')
        history.append(ModelResponse(parts=[ThinkingPart('hmm ' * 100), call]))
        content = f'log {step} ' + 'lorem ipsum ' * 200
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', content, tool_call_id=f'c{step}')]))
    history.append(ModelResponse(parts=[TextPart('read them all')]))

    def sent_with(capabilities: list[AbstractCapability[Any]]) -> int:
        sent: list[int] = []

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            sent.append(len(messages))
            return ModelResponse(parts=[TextPart('ok')])

        Agent(FunctionModel(respond), capabilities=capabilities).run_sync('what did log 3 say', message_history=history)
        return sent[0]

    alone = sent_with([BoundedSelection[Any](budget=2_000)])
    assert alone < 10
    after: AbstractCapability[Any] = Archive() if rewriter == 'archive' else ForgetReasoning(policy='drop')
    assert sent_with([BoundedSelection[Any](budget=2_000), after]) == alone


@dataclass
class _Rewrite(AbstractCapability[Any]):
    """From request *start* on, every tool result in the history is sent as *content* (new messages each time)."""

    start: int
    content: object

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if ctx.run_step < self.start:
            return request_context
        request_context.messages = [
            replace(
                m, parts=[replace(p, content=self.content) if isinstance(p, ToolReturnPart) else p for p in m.parts]
            )
            if isinstance(m, ModelRequest)
            else m
            for m in request_context.messages
        ]
        return request_context


def _tiered_run(rewrite: _Rewrite, steps: int = 16) -> list[list[ModelMessage]]:
    from pydantic_ai_compaction import ClearThenSummarize

    from .support import log_text

    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(seen) > steps:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': len(seen)})])

    agent = Agent(
        FunctionModel(respond), capabilities=[rewrite, ClearThenSummarize(context_window=10_000, summarize=False)]
    )

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    agent.run_sync('Audit the logs.')
    return seen


def test_clear_then_summarize_measures_results_another_capability_shortened_after_it_cleared() -> None:
    # Results of about 3,000 characters are cleared once the request nears 5,000 tokens; from step 10 on another
    # capability sends each as 1,000 characters (new messages): 16 of them, about 4,000 tokens, under the
    # threshold. The view measures what it is given, not what it measured of the messages they replaced: it
    # sends them as they are, with no stub (a stale estimate would clear them again).
    seen = _tiered_run(_Rewrite(start=10, content='y' * 1_000))
    assert any(cleared(request) for request in seen[:9])
    late = seen[10:]
    assert late and all(cleared(request) == 0 for request in late)
    assert all(
        p.content == 'y' * 1_000
        for m in late[-1]
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    )


def test_clear_then_summarize_sends_what_an_equal_but_different_rewrite_holds() -> None:
    # Every result is sent as a long record holding 0, then, from step 10, holding False: 0 == False, yet the
    # rewrite says something else. Compared by equality, it was taken for the messages the projection stands for,
    # and the results the projection kept verbatim went on holding 0 (`[stubs..., 0, 0, 0, False, False, False]`).
    class _Flip(_Rewrite):
        async def before_model_request(
            self, ctx: RunContext[Any], request_context: ModelRequestContext
        ) -> ModelRequestContext:
            self.content = {'flag': False if ctx.run_step >= 10 else 0, 'log': 'z' * 3_000}
            return await super().before_model_request(ctx, request_context)

    seen = _tiered_run(_Flip(start=1, content=None), steps=10)
    assert cleared(seen[8]) > 0  # a projection stood for the history before the rewrite
    flags: list[object] = [
        cast('dict[str, object]', p.content)['flag']  # pyright: ignore[reportUnknownMemberType]
        for m in seen[-1]
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and isinstance(p.content, dict)
    ]
    assert flags and all(flag is False for flag in flags)


@dataclass
class _Reminder(AbstractCapability[Any]):
    """Ends each request with a request-only reminder (never saved), before the view."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        request_context.messages = [
            *request_context.messages,
            ModelRequest(parts=[UserPromptPart('Reminder: be thorough.')]),
        ]
        return request_context


def test_clear_then_summarize_measures_an_instruction_change_pydantic_ai_records_after_the_hooks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pydantic-ai records a changed `on_change='append'` instruction on the step's saved request in place, after the
    # `before_model_request` hooks; with a reminder after it, that request is not the view's last message. Each
    # estimate the view makes must still be the whole list's (it was short by the instruction's size, and clearing
    # came a request late).
    from pydantic_ai_compaction import ClearThenSummarize
    from pydantic_ai_compaction.runtime import tokens

    from .support import log_text

    answers: list[tuple[int, int]] = []
    measure = tokens.GrowingEstimate.measure

    def checked(self: tokens.GrowingEstimate, messages: Any, *, kept: int = 0) -> tuple[int, int]:
        got = measure(self, messages, kept=kept)
        answers.append((got[0], tokens.estimate_token_count(messages)))
        return got

    monkeypatch.setattr(tokens.GrowingEstimate, 'measure', checked)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(answers) > 12:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': len(answers)})])

    agent = Agent(
        FunctionModel(respond),
        instructions='Audit the logs.',
        capabilities=[_Reminder(), ClearThenSummarize(context_window=10_000)],
    )

    @agent.instructions(name='phase', on_change='append')
    def phase(ctx: RunContext[Any]) -> str:  # pyright: ignore[reportUnusedFunction]
        return 'Phase 1.' if ctx.run_step < 3 else 'Phase 2. ' + 'Mind the latency column. ' * 40

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    agent.run_sync('Audit the logs.')
    assert len(answers) > 10
    assert [got for got, _ in answers] == [whole for _, whole in answers]


@dataclass
class _GrowFirstPrompt(AbstractCapability[Any]):
    """Appends to the first prompt's text in place at every request (what the library's rules forbid)."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        first = request_context.messages[0].parts[0]
        assert isinstance(first, UserPromptPart) and isinstance(first.content, str)
        first.content = first.content + ' observed' * 300
        return request_context


@pytest.mark.xfail(
    strict=True,
    reason='documented limitation: ClearThenSummarize measures each message once, up to the newest response; a '
    'message before it whose text a capability edits in place keeps its first size (replace parts with '
    'dataclasses.replace, never edit them)',
)
def test_clear_then_summarize_sees_a_prompt_grown_in_place() -> None:
    from pydantic_ai_compaction import ClearThenSummarize
    from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER
    from pydantic_ai_compaction.runtime.tokens import estimate_token_count

    sent: list[int] = []
    notes: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, UserPromptPart) and HANDOFF_MARKER in str(last.content):
            notes.append(str(last.content))
            return ModelResponse(parts=[TextPart('Goal: audit.')])
        sent.append(estimate_token_count(messages))
        if len(sent) > 14:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read', {'i': len(sent)})])

    agent = Agent(FunctionModel(respond), capabilities=[_GrowFirstPrompt(), ClearThenSummarize(context_window=10_000)])

    @agent.tool_plain
    def read(i: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return f'result {i} ' + 'data ' * 60

    agent.run_sync('go')
    # The prompt alone grows by 675 tokens a request, and the requests pass 7,500 tokens (summarizing's threshold):
    # measured each time, the view writes a handoff note; with the prompt's first size, it never does.
    assert max(sent) > 7_500
    assert notes
