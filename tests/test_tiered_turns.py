"""`ClearThenSummarize` over a chat: each turn is a new run, and the view carries on from the last one."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    CompactionPart,
    InstructionDeltaPart,
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
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.tools import RunContext

from pydantic_ai_compaction import Archive, ClearThenSummarize, InMemoryArchiveStore, Notes, Recall
from pydantic_ai_compaction.protocols.metadata import VIEW_RECORD, ours
from pydantic_ai_compaction.protocols.types import METADATA_KEY
from pydantic_ai_compaction.runtime.stores.access import RUN_SCOPE_PREFIX

from .support import log_text

WINDOW = 10_000
HANDOFF = '[pydantic-ai-compaction: handoff note request]'


class Chat:
    """A user who asks for one log per turn; the model reads it, then answers."""

    def __init__(
        self, view: ClearThenSummarize[Any], *, reload: bool = False, opening: str = '', before: list[Any] | None = None
    ) -> None:
        self.sent: list[list[ModelMessage]] = []
        self.handoffs: list[str] = []
        self.history: list[ModelMessage] = []
        self.reload = reload
        self.agent = Agent(FunctionModel(self._respond), capabilities=[*(before or []), view])

        @self.agent.tool_plain
        def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
            return opening + log_text(index, 60)

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        prompt = ' '.join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        if HANDOFF in prompt:
            self.handoffs.append(prompt)
            # As a real writer may, it copies what the user said about a password into its note.
            quoted = [line.strip('- ') for line in prompt.splitlines() if 'password' in line][:1]
            return ModelResponse(parts=[TextPart('\n'.join([f'Done: note {len(self.handoffs)}.', *quoted]))])
        self.sent.append(list(messages))
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart('read it')])
        index = int(prompt.split()[-1])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': index})])

    def turn(self, index: int) -> None:
        history = self.history
        if self.reload:  # as an application that keeps the chat in a database between turns
            history = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(history))
        result = self.agent.run_sync(f'read log {index}', message_history=history)
        self.history = result.all_messages()


class StreamedChat(Chat):
    """The same chat, each turn streamed (a chat interface shows the answer as it comes): with `agent.run_stream`,
    or `agent.run_stream_events` (what pydantic-ai's UI adapters run)."""

    def __init__(self, view: ClearThenSummarize[Any], *, reload: bool = False, events: bool = False) -> None:
        super().__init__(view, reload=reload)
        self.events = events
        self.agent = Agent(
            FunctionModel(self._respond, stream_function=self._stream), capabilities=[view], tools=[self.read_log]
        )

    @staticmethod
    def read_log(index: int) -> str:
        return log_text(index, 60)

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        for part in self._respond(messages, info).parts:
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                yield {0: DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)}

    def turn(self, index: int) -> None:
        history = self.history
        if self.reload:
            history = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(history))

        async def run() -> list[ModelMessage]:
            prompt = f'read log {index}'
            if self.events:
                async with self.agent.run_stream_events(prompt, message_history=history) as events:
                    ends = [event async for event in events if isinstance(event, AgentRunResultEvent)]
                return ends[-1].result.all_messages()
            async with self.agent.run_stream(prompt, message_history=history) as result:
                await result.get_output()
            return result.all_messages()

        self.history = asyncio.run(run())


def boundaries(messages: list[ModelMessage]) -> list[str]:
    return [p.content or '' for m in messages for p in m.parts if isinstance(p, CompactionPart)]


def cleared(messages: list[ModelMessage]) -> int:
    return sum(
        isinstance(p, ToolReturnPart) and str(p.content).startswith('[cleared:')
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
    )


def prefix_breaks(sent: list[list[ModelMessage]]) -> int:
    """Requests that do not begin with the whole request before them (the provider's cache misses from there)."""
    return sum(later[: len(earlier)] != earlier for earlier, later in itertools.pairwise(sent))


def summarizing() -> ClearThenSummarize[Any]:
    return ClearThenSummarize(context_window=WINDOW, clear_at=0.5, summarize_at=0.5, summarize_to=0.2)


@pytest.mark.parametrize('reload', [False, True], ids=['same-objects', 'reloaded-from-json'])
def test_a_new_turn_sends_the_view_the_last_turn_ended_with_and_updates_the_note(reload: bool) -> None:
    chat = Chat(summarizing(), reload=reload)
    for index in range(30):
        chat.turn(index)
    # One note per summary, not one per turn (each turn from the first summary on wrote one, from scratch), and
    # each note after the first updates the one before it, which the turn before wrote.
    assert len(chat.handoffs) == 4
    assert ['<previous-note>' in h for h in chat.handoffs] == [False, True, True, True]
    for number, handoff in enumerate(chat.handoffs[1:], start=1):
        assert f'<previous-note>\nDone: note {number}.\n</previous-note>' in handoff
    # Every request begins with the one before it, across turns too, except where a summary replaced the start.
    assert prefix_breaks(chat.sent) == 4
    # The saved history keeps every message: the projection's records ride in its responses' metadata.
    assert not boundaries(chat.history) and cleared(chat.history) == 0
    assert len(chat.history) == 30 * 4


class Answer(BaseModel):
    said: str


class StructuredChat(StreamedChat):
    """The chat with structured output: the model answers through the output tool, and pydantic-ai ends each turn's
    history with a request (its "Final result processed." return), which the next turn's prompt follows."""

    def __init__(self, view: ClearThenSummarize[Any], *, stream: bool) -> None:
        super().__init__(view, reload=True)
        self.stream = stream
        self.agent = Agent(
            FunctionModel(self._respond, stream_function=self._stream),
            capabilities=[view],
            tools=[self.read_log],
            output_type=Answer,
        )

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if not info.output_tools or any(
            isinstance(p, ToolReturnPart) and p.tool_name == 'read_log' for p in last.parts
        ):
            response = super()._respond(messages, info)  # the handoff note, or the answer once the log is read
            if info.output_tools:
                return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'said': 'read it'})])
            return response
        # The turn's prompt may follow the last turn's "Final result processed." in one request.
        prompt = next(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        self.sent.append(list(messages))
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': int(prompt.split()[-1])})])

    def turn(self, index: int) -> None:
        if self.stream:
            super().turn(index)
            return
        history = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(self.history))
        self.history = self.agent.run_sync(f'read log {index}', message_history=history).all_messages()


@pytest.mark.parametrize('stream', [False, True], ids=['run', 'run_stream'])
def test_a_chat_with_structured_output_carries_its_view_to_the_next_turn(stream: bool) -> None:
    chat = StructuredChat(summarizing(), stream=stream)
    for index in range(30):
        chat.turn(index)
    # As many notes as with text output (`run_stream` reports its usage otherwise: one more), each an update.
    # pydantic-ai merges a turn's last request ("Final result processed.") with the next turn's prompt when the next
    # run starts: a record naming the messages as the run that wrote it held them named the wrong ones there, and
    # each turn past the threshold built its projection again (23 notes, none an update, 23 breaks of the cached
    # prefix). The record names them as the next run holds them (`carry.settled`).
    notes = 5 if stream else 4
    assert len(chat.handoffs) == notes and ['<previous-note>' in h for h in chat.handoffs] == [False] + [True] * (
        notes - 1
    )
    assert prefix_breaks(chat.sent) == notes
    # No saved message is copied into a record (a user's prompt, a file): the merged request is named, and the parts
    # of it shown. The only messages written whole are the view's own handoff boundaries.
    records = [ours(m.metadata)[VIEW_RECORD] for m in chat.history if VIEW_RECORD in ours(m.metadata)]
    made = [part['part_kind'] for record in records for message in record['new'].values() for part in message['parts']]
    assert len(records) == notes and made == ['compaction'] * notes


class PastingChat(StructuredChat):
    """The structured chat where every other prompt pastes a log: the view summarizes at a turn's first request,
    whose record goes onto that request under `run_stream`; with *at_once*, the model then answers through the
    output tool at once, and the run makes no request after it."""

    def __init__(self, view: ClearThenSummarize[Any], *, stream: bool, at_once: bool) -> None:
        super().__init__(view, stream=stream)
        self.at_once = at_once

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = ' '.join(str(p.content) for p in messages[-1].parts if isinstance(p, UserPromptPart))
        if self.at_once and 'pasted' in prompt and HANDOFF not in prompt:
            self.sent.append(list(messages))
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'said': 'seen'})])
        return super()._respond(messages, info)

    def turn(self, index: int) -> None:
        history = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(self.history))
        prompt = f'pasted:\n{log_text(1_000 + index, 60)}\nread log {index}' if index % 2 else f'read log {index}'

        async def run() -> list[ModelMessage]:
            if self.stream:
                async with self.agent.run_stream(prompt, message_history=history) as result:
                    await result.get_output()
                return result.all_messages()
            return (await self.agent.run(prompt, message_history=history)).all_messages()

        self.history = asyncio.run(run())


@pytest.mark.parametrize(
    ('stream', 'at_once'),
    [
        (False, False),
        (False, True),
        (True, False),
        pytest.param(
            True,
            True,
            marks=pytest.mark.xfail(
                strict=True,
                reason='the run makes no request after the summary, and the response it ends with is built from '
                'the stream after the hooks: no message that outlives the next run start holds the record '
                '(docs/archive.md)',
            ),
        ),
    ],
    ids=['run', 'run-answers-at-once', 'run_stream', 'run_stream-answers-at-once'],
)
def test_a_record_on_a_streamed_prompt_that_the_next_run_merges_is_written_again(stream: bool, at_once: bool) -> None:
    chat = PastingChat(summarizing(), stream=stream, at_once=at_once)
    for index in range(30):
        chat.turn(index)
    # Under `run_stream`, a summary made at a turn's first request was recorded on that request, which the next run
    # merges into the last turn's "Final result processed." keeping neither's metadata: every turn from the first
    # summary on wrote its note from scratch (25 notes, none an update, 25 breaks of the cached prefix). The record
    # goes again with the next step, or onto the run's last response when the run makes no other request.
    plain = PastingChat(summarizing(), stream=False, at_once=at_once)
    for index in range(30):
        plain.turn(index)
    assert len(chat.handoffs) == len(plain.handoffs) <= 8
    assert ['<previous-note>' in h for h in chat.handoffs] == [False] + [True] * (len(chat.handoffs) - 1)
    assert prefix_breaks(chat.sent) == len(chat.handoffs)


@pytest.mark.parametrize(
    ('reload', 'events'),
    [(False, False), (True, False), (True, True)],
    ids=['run_stream', 'run_stream-reloaded-from-json', 'run_stream_events-reloaded-from-json'],
)
def test_a_streamed_chat_carries_its_view_to_the_next_turn(reload: bool, events: bool) -> None:
    chat = StreamedChat(summarizing(), reload=reload, events=events)
    for index in range(30):
        chat.turn(index)
    # `run_stream` ends the history with the response pydantic-ai built from the stream, not the one the view wrote
    # its record into: each summary made at a turn's last request was written again from scratch at the next turn
    # (10 notes, 10 breaks of the cached prefix, the second note not an update). The record rides on the step's
    # saved request.
    assert len(chat.handoffs) == 5
    assert ['<previous-note>' in h for h in chat.handoffs] == [False, True, True, True, True]
    assert prefix_breaks(chat.sent) == 5
    holders = [m for m in chat.history if VIEW_RECORD in str(m.metadata)]
    assert len(holders) == 5 and all(isinstance(m, ModelRequest) for m in holders)
    assert not boundaries(chat.history) and cleared(chat.history) == 0 and len(chat.history) == 30 * 4


def test_a_record_in_a_response_another_capability_rejected_is_written_with_the_next_one() -> None:
    from pydantic_ai.exceptions import ModelRetry

    @dataclass
    class Guardrail(AbstractCapability[Any]):
        """Listed before the view, so its `after_model_request` sees the record; rejects every other such response."""

        rejected: int = 0
        checked: int = 0

        async def after_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
        ) -> ModelResponse:
            if VIEW_RECORD in str(response.metadata):
                self.checked += 1
                if self.checked % 2:
                    self.rejected += 1
                    raise ModelRetry('answer again')
            return response

    class RetriedChat(Chat):
        def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if 'answer again' in str(messages[-1].parts) and HANDOFF not in str(messages[-1].parts):
                self.sent.append(list(messages))
                return ModelResponse(parts=[TextPart('read it again')])
            return super()._respond(messages, info)

    guardrail = Guardrail()
    chat = RetriedChat(summarizing(), reload=True, before=[guardrail])
    for index in range(30):
        chat.turn(index)
    # pydantic-ai saves a rejected response as the model sent it, without the record: the turn after each such one
    # started from the whole history again (8 notes, the second written from scratch, 8 breaks of the cached prefix).
    assert guardrail.rejected == 4
    assert len(chat.handoffs) == 4 and ['<previous-note>' in h for h in chat.handoffs] == [False, True, True, True]
    assert prefix_breaks(chat.sent) == 4


async def test_a_rejected_record_of_a_projection_the_view_no_longer_sends_is_not_written_again() -> None:
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    def context(messages: list[ModelMessage]) -> tuple[RunContext[Any], ModelRequestContext]:
        run = RunContext[Any](deps=None, model=TestModel(), usage=RunUsage(), messages=messages)
        parameters = ModelRequestParameters()
        request = ModelRequestContext(
            model=TestModel(), messages=list(messages), model_settings=None, model_request_parameters=parameters
        )
        return run, request

    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('read the logs')])]
    for index in range(12):
        history.append(ModelResponse(parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{index}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read_log', log_text(index, 60), tool_call_id=f'c{index}')]))
    view = await ClearThenSummarize[Any](context_window=6_000, summarize=False).for_run(context(history)[0])
    run, request = context(history)
    sent = await view.before_model_request(run, request)
    assert cleared(sent.messages) > 0
    answer = ModelResponse(parts=[TextPart('read them')])
    assert VIEW_RECORD in str((await view.after_model_request(run, request_context=sent, response=answer)).metadata)
    # That response was rejected (saved without the record), and the history the next request carries is another
    # one, short: the projection the record stands for is not sent, and its record must not be written with the
    # next response (the next run would send what this one stopped sending).
    short: list[ModelMessage] = [history[0], answer, ModelRequest(parts=[UserPromptPart('go on')])]
    run, request = context(short)
    sent = await view.before_model_request(run, request)
    assert sent.messages == short
    reply = await view.after_model_request(run, request_context=sent, response=ModelResponse(parts=[TextPart('ok')]))
    assert VIEW_RECORD not in str(reply.metadata)


def test_after_a_rejected_call_the_view_still_clears_and_does_not_warn() -> None:
    # pydantic-ai keeps the rejected response's call without a result in the saved history (and gives it one before
    # sending): every later projection was refused for it, with a warning at each request, and nothing was cleared.
    from pydantic_ai.exceptions import ModelRetry

    @dataclass
    class RejectFirstCall(AbstractCapability[Any]):
        rejected: bool = False

        async def after_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
        ) -> ModelResponse:
            if response.tool_calls and not self.rejected:
                self.rejected = True
                raise ModelRetry('use another tool')
            return response

    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(messages)
        if len(sent) > 14:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': len(sent)}, tool_call_id=f'c{len(sent)}')])

    guard = RejectFirstCall()
    agent = Agent(FunctionModel(respond), capabilities=[guard, ClearThenSummarize(context_window=6_000)])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        # Another test's unclosed event loop, collected meanwhile, is not this run's warning.
        warnings.simplefilter('ignore', ResourceWarning)
        saved = agent.run_sync('Audit the logs.').all_messages()
    assert guard.rejected and [str(w.message)[:80] for w in caught] == []
    assert 'c1' in [p.tool_call_id for m in saved for p in m.parts if isinstance(p, ToolCallPart)]
    assert 'c1' not in [p.tool_call_id for m in saved for p in m.parts if isinstance(p, ToolReturnPart)]
    assert cleared(sent[-1]) >= 5


def test_a_chat_whose_tool_call_was_rejected_once_keeps_updating_its_note() -> None:
    # The records a run writes after the rejection stand for the call without its result; the next run's history
    # has the result pydantic-ai gives it, so they are not used. The record before them is: the note chain goes on
    # (it was written from scratch when only the newest record was read), at the cost of one summary more.
    from pydantic_ai.exceptions import ModelRetry

    @dataclass
    class RejectOnce(AbstractCapability[Any]):
        turn: list[int]
        done: bool = False

        async def after_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
        ) -> ModelResponse:
            if self.turn[0] == 13 and response.tool_calls and not self.done:
                self.done = True
                raise ModelRetry('not that call; try again')
            return response

    class RejectedChat(Chat):
        def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if 'not that call' in str(messages[-1].parts) and HANDOFF not in str(messages[-1].parts):
                self.sent.append(list(messages))
                return ModelResponse(parts=[ToolCallPart('read_log', {'index': turn[0]})])
            return super()._respond(messages, info)

    turn = [0]
    guard = RejectOnce(turn)
    chat = RejectedChat(summarizing(), reload=True, before=[guard])
    for index in range(30):
        turn[0] = index
        chat.turn(index)
    assert guard.done
    assert ['<previous-note>' in h for h in chat.handoffs] == [False, True, True, True, True]
    assert prefix_breaks(chat.sent) == 5


def test_after_a_rejection_early_in_a_long_loop_the_next_run_reads_the_record_before_it() -> None:
    # The run writes many records after the rejection, none of which the next run's history matches (it holds
    # pydantic-ai's result for the call): every record is checked, not only the newest few.
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.messages import repair_messages

    from pydantic_ai_compaction.processors.views.tiered import CARRY_OWNER, _restub  # pyright: ignore[reportPrivateUsage]
    from pydantic_ai_compaction.runtime import carry

    turn = [0]

    @dataclass
    class RejectOnce(AbstractCapability[Any]):
        done: bool = False

        async def after_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
        ) -> ModelResponse:
            if turn[0] == 2 and response.tool_calls and not self.done:
                self.done = True
                raise ModelRetry('not that call')
            return response

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        steps = 0
        for message in reversed(messages):
            if any(isinstance(p, UserPromptPart) for p in message.parts):
                break
            steps += isinstance(message, ModelResponse)
        if steps >= 40:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': steps})])

    view = ClearThenSummarize[Any](context_window=12_000, summarize=False)
    agent = Agent(FunctionModel(respond), capabilities=[RejectOnce(), view])

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 40)

    history: list[ModelMessage] = []
    for index in range(3):
        turn[0] = index
        history = agent.run_sync(f'turn {index}', message_history=history).all_messages()
    rejected = next(i for i, m in enumerate(history) if 'not that call' in str(m.parts))
    later = [i for i, m in enumerate(history) if i > rejected and VIEW_RECORD in str(m.metadata)]
    assert len(later) > 3
    carried = carry.read(repair_messages(history, repair_last_response=False), CARRY_OWNER, _restub)
    assert carried is not None and carried.covers < rejected and cleared(carried.messages) > 0


def test_with_memory_in_front_a_reloaded_chat_writes_a_note_per_summary_only() -> None:
    store = InMemoryArchiveStore()
    memory = [Archive(store=store, conversation='c'), Recall(store=store, conversation='c'), Notes(store=store)]
    view = replace(summarizing(), store=store, conversation='c')
    chat = Chat(view, reload=True, before=memory)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        for index in range(30):
            chat.turn(index)
    assert len(chat.handoffs) == 5  # 23 when each turn started from the whole history
    assert prefix_breaks(chat.sent) == 5


def test_clearing_carries_on_across_turns() -> None:
    chat = Chat(ClearThenSummarize(context_window=WINDOW))
    for index in range(40):
        chat.turn(index)
    counts = [cleared(s) for s in chat.sent]
    # Results cleared stay cleared from turn to turn (a new turn started again from the whole history: none
    # cleared at its first request, all of them in one batch at once, under new references), so the count only grows.
    assert counts == sorted(counts) and counts[-1] >= 30
    assert prefix_breaks(chat.sent) == len(set(counts)) - 1
    assert not chat.handoffs


def records(history: list[ModelMessage]) -> list[dict[str, Any]]:
    ours = [(m.metadata or {}).get(METADATA_KEY, {}) for m in history if isinstance(m, ModelResponse)]
    return [values[VIEW_RECORD] for values in ours if VIEW_RECORD in values]


def test_each_handoff_boundary_is_saved_whole_once_and_the_records_stay_small() -> None:
    chat = Chat(summarizing())
    for index in range(30):
        chat.turn(index)
    saved = records(chat.history)
    written = [key for record in saved for key in record['new']]
    assert len(written) == len(set(written)) == len(chat.handoffs)
    size = len(ModelMessagesTypeAdapter.dump_json(chat.history))
    assert len(json.dumps(saved)) < size // 10


def test_over_a_long_chat_each_record_holds_what_changed_not_every_line_so_far() -> None:
    chat = Chat(ClearThenSummarize(context_window=WINDOW, summarize=False))
    for index in range(100):
        chat.turn(index)
    sizes = [len(json.dumps(record)) for record in records(chat.history)]
    # 37 records; each names the one before it and adds the lines that changed (every record repeating every
    # cleared line so far made the newest ones grow with the chat).
    assert len(sizes) > 30 and max(sizes) < 1_500 and max(sizes[-10:]) <= min(sizes[:3])
    assert sum(sizes) < len(ModelMessagesTypeAdapter.dump_json(chat.history)) // 15


def _forge(chat: Chat, change: Callable[[dict[str, Any]], None]) -> None:
    newest = max(i for i, m in enumerate(chat.history) if isinstance(m, ModelResponse) and records([m]))
    response = chat.history[newest]
    assert isinstance(response, ModelResponse)
    metadata = copy.deepcopy(response.metadata or {})
    change(metadata[METADATA_KEY][VIEW_RECORD])
    chat.history[newest] = replace(response, metadata=metadata)


FORGERIES: dict[str, Callable[[dict[str, Any]], None]] = {
    'covers-text': lambda r: r.update(covers='12'),
    'covers-past-the-record': lambda r: r.update(covers=10**6),
    'digest': lambda r: r.update(digest='0' * 32),
    'messages-not-a-list': lambda r: r.update(messages={'a': 1}),
    'run-out-of-range': lambda r: r['messages'].insert(0, [5, 10**6]),
    'part-out-of-range': lambda r: r['messages'].append({'at': 0, 'parts': [99], 'stubs': {}}),
    'stub-on-a-prompt': lambda r: r['messages'].append({'at': 0, 'parts': [0], 'stubs': {'0': 'x'}}),
    'made-message-missing': lambda r: r['messages'].append({'new': 'nosuchkey'}),
    'unknown-entry': lambda r: r['messages'].append(7),
    'run-repeated': lambda r: r['messages'].append(r['messages'][0]),
    'runs-reversed': lambda r: r['messages'].reverse(),
    'made-key-a-list': lambda r: r['messages'].append({'new': ['k']}),
    'base-unknown': lambda r: r['messages'].insert(0, {'base': 'nosuchrecord', 'count': 2}),
    'base-itself': lambda r: r['messages'].insert(0, {'base': r['id'], 'count': 1}),
}


UNMATCHED = ('covers-text', 'covers-past-the-record', 'digest', 'messages-not-a-list')
"""Forgeries that make the record read as one whose history changed since: the record before it is read."""


@pytest.mark.parametrize('forgery', FORGERIES.values(), ids=FORGERIES.keys())
def test_a_forged_record_is_not_used(forgery: Callable[[dict[str, Any]], None], request: pytest.FixtureRequest) -> None:
    from pydantic_ai_compaction.processors.views.tiered import CARRY_OWNER, _restub  # pyright: ignore[reportPrivateUsage]
    from pydantic_ai_compaction.runtime import carry

    chat = Chat(summarizing())
    for index in range(20):
        chat.turn(index)
    notes = len(chat.handoffs)
    earlier = records(chat.history)[-2]['covers']
    _forge(chat, forgery)
    carried = carry.read(chat.history, CARRY_OWNER, _restub)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        chat.turn(20)
    sent = chat.sent[-2]
    assert len({id(m) for m in sent}) == len(sent) and prefix_breaks(chat.sent[-2:]) == 0
    if request.node.callspec.id in UNMATCHED:
        # Nothing of it is used: the turn starts from the record before it, and updates that record's note.
        assert carried is not None and carried.covers == earlier
        assert len(chat.handoffs) == notes + 1 and '<previous-note>' in chat.handoffs[-1]
        return
    # Nothing is built from the record, nothing of it is sent: the turn starts from the whole history again, and
    # writes its note from it (no message sent twice, none out of order).
    assert carried is None
    assert len(chat.handoffs) == notes + 1 and '<previous-note>' not in chat.handoffs[-1]


def test_a_history_the_application_trimmed_between_turns_is_projected_again() -> None:
    chat = Chat(summarizing())
    for index in range(20):
        chat.turn(index)
    notes = len(chat.handoffs)
    chat.history = chat.history[4:]  # the two oldest turns dropped, records and all
    chat.turn(20)
    # The note is written again from what the history now holds: the last one may quote what was taken out.
    assert len(chat.handoffs) == notes + 1 and '<previous-note>' not in chat.handoffs[-1]
    first = chat.sent[-2]  # the turn's first request, after its note
    assert '- read log 1' in boundaries(first)[0] and '- read log 0' not in boundaries(first)[0]


def test_a_stub_quoting_a_lone_surrogate_is_saved_in_a_record_that_encodes_as_json() -> None:
    chat = Chat(ClearThenSummarize(context_window=WINDOW), opening='\udc80 raw bytes ')
    for index in range(20):
        chat.turn(index)
    assert cleared(chat.sent[-1]) >= 5
    # The responses are the messages a record changed: they still encode (the tool results themselves are the
    # application's, and pydantic-ai's own JSON refuses their surrogate).
    responses: list[ModelMessage] = [m for m in chat.history if isinstance(m, ModelResponse)]
    assert '\ufffd raw bytes'.encode() in ModelMessagesTypeAdapter.dump_json(responses)


def test_with_a_store_and_the_run_s_key_every_stub_sent_names_an_entry_the_run_can_recover() -> None:
    store = InMemoryArchiveStore()
    view = ClearThenSummarize(context_window=WINDOW, summarize=False, store=store)  # the default key: the run's
    chat = Chat(view, before=[Archive(store=store)])
    for index in range(16):
        chat.turn(index)
    named = 0
    for request in chat.sent:
        key = RUN_SCOPE_PREFIX + (request[-1].run_id or '')
        for stub in (str(p.content) for m in request for p in m.parts if isinstance(p, ToolReturnPart)):
            if 'context_recover("' in stub:
                named += 1
                assert store.get_archived(key, stub.split('"')[-2]) is not None, stub
    assert named > 50  # each turn clears again under its own key, as it did before the view carried on


def _secret_chat() -> Chat:
    chat = Chat(summarizing())
    for index in range(8):
        chat.turn(index)
    # The next turn's prompt holds a secret the application later takes out.
    result = chat.agent.run_sync('my password is hunter2, read log 8', message_history=chat.history)
    chat.history = result.all_messages()
    for index in range(9, 20):
        chat.turn(index)
    return chat


def test_a_turn_the_application_deletes_is_never_sent_again() -> None:
    chat = _secret_chat()
    assert any('hunter2' in h for h in chat.handoffs)  # the notes and copied prompts held it
    start = next(i for i, m in enumerate(chat.history) if 'hunter2' in str(getattr(m.parts[0], 'content', '')))
    chat.history = chat.history[:start] + chat.history[start + 4 :]
    sent, handoffs = len(chat.sent), len(chat.handoffs)
    chat.turn(20)
    said = [str(part) for request in chat.sent[sent:] for m in request for part in m.parts]
    assert not any('hunter2' in text for text in said + chat.handoffs[handoffs:])


def test_a_result_the_application_masked_between_turns_is_not_quoted_from_the_record() -> None:
    chat = Chat(ClearThenSummarize(context_window=WINDOW))
    for index in range(20):
        chat.turn(index)
    (at, part) = next(
        (i, p)
        for i, m in enumerate(chat.history)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and str(p.content).startswith('log 0\n')
    )
    masked = replace(part, content='x' * len(str(part.content)))  # the same length: only its text changed
    message = chat.history[at]
    chat.history[at] = replace(message, parts=[masked if p is part else p for p in message.parts])
    sent = len(chat.sent)
    chat.turn(20)
    assert not any('log 0 00-0000' in str(p) for request in chat.sent[sent:] for m in request for p in m.parts)


def test_timestamps_a_store_moved_to_another_zone_do_not_stop_the_view_carrying_on() -> None:
    chat = Chat(summarizing())
    zone = timezone(timedelta(hours=5))
    for index in range(30):
        chat.turn(index)
        chat.history = [replace(m, timestamp=m.timestamp.astimezone(zone)) for m in chat.history]
    assert len(chat.handoffs) == 4


@dataclass
class _Reminder(AbstractCapability[Any]):
    """Before the view: ends each request with a request-only reminder (never saved)."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        request_context.messages = [*request_context.messages, ModelRequest(parts=[UserPromptPart('Be thorough.')])]
        return request_context


@dataclass
class _Spy(AbstractCapability[Any]):
    """After the view: what it hands on (the model class turns instruction changes into instructions)."""

    sent: list[list[ModelMessage]]

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self.sent.append(list(request_context.messages))
        return request_context


def _phased_loop(
    capabilities: list[Any], steps: int, phase_text: Callable[[int], str] = lambda step: f'Phase {step}.'
) -> tuple[list[list[ModelMessage]], list[ModelMessage]]:
    """A tool loop whose `on_change='append'` instructions change at every step; what each request sent, and the
    saved history."""
    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(sent) > steps:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': len(sent)}, tool_call_id=f'c{len(sent)}')])

    agent = Agent(FunctionModel(respond), instructions='Audit.', capabilities=[*capabilities, _Spy(sent)])

    @agent.instructions(name='phase', on_change='append')
    def phase(ctx: RunContext[Any]) -> str:  # pyright: ignore[reportUnusedFunction]
        return phase_text(ctx.run_step)

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    return sent, agent.run_sync('Audit the logs.').all_messages()


def test_a_reminder_after_the_request_in_progress_does_not_get_its_results_cleared() -> None:
    # The results the model asked for last are after the newest response, with the reminder after them: they were
    # taken for older ones (only the view's last message counted as the request in progress) and sent as stubs the
    # model had never seen in full; and the copy clearing made of the step's request missed the instruction change
    # pydantic-ai adds to the saved request after the hooks.
    # Instructions that grow from step 8 on: the newest results alone then hold the request over the threshold, and
    # clearing keeps only those of the request in progress.
    sent, saved = _phased_loop(
        [_Reminder(), ClearThenSummarize(context_window=6_000)],
        steps=14,
        phase_text=lambda step: (
            'Phase 1.' if step < 3 else 'Phase 2.' if step < 8 else 'Phase 3. ' + 'x ' * (step * 20)
        ),
    )
    assert any(cleared(request) for request in sent)  # clearing ran
    for request in sent:
        newest = max((i for i, m in enumerate(request) if isinstance(m, ModelResponse)), default=0)
        in_progress = [p for m in request[newest:] for p in m.parts if isinstance(p, ToolReturnPart)]
        assert not any(str(p.content).startswith('[cleared:') for p in in_progress)

    def changes(messages: list[ModelMessage]) -> int:
        return sum(isinstance(p, InstructionDeltaPart) for m in messages for p in m.parts)

    # The last request holds every change the saved history does (its own step's, which pydantic-ai records after
    # the hooks, lands on the messages sent: the same objects, not a copy clearing made before it).
    assert changes(sent[-1]) == changes(saved) > 5


def test_a_projection_made_at_a_step_with_an_instruction_change_is_carried_to_the_next_turn() -> None:
    # The record's digest was taken in the hook, before pydantic-ai added the step's instruction change to the saved
    # request in place: the next run found the history changed and built its projection again.
    from pydantic_ai_compaction.processors.views.tiered import CARRY_OWNER, _restub  # pyright: ignore[reportPrivateUsage]
    from pydantic_ai_compaction.runtime import carry

    _, saved = _phased_loop([ClearThenSummarize(context_window=6_000, summarize=False)], steps=12)
    assert any(VIEW_RECORD in str(m.metadata) for m in saved if isinstance(m, ModelResponse))
    carried = carry.read(saved, CARRY_OWNER, _restub)
    assert carried is not None and carried.covers > 0
    assert cleared(carried.messages) > 0


@pytest.mark.parametrize('breaking', ['rejected', 'orphaned'])
def test_every_record_saved_reads_back_as_what_its_request_sent_when_a_request_is_broken(breaking: str) -> None:
    # `orphaned`: a capability before the view drops a call from two requests (its result stays), so the runtime
    # refuses the view's projections of them and they go out as they arrived. A record of such a projection was
    # written all the same, and a next run would have sent cleared results the model had been sent whole.
    # `rejected`: another capability rejects two responses (`ModelRetry` from its `after_model_request`), whose
    # calls pydantic-ai keeps without a result: the projections that follow are sent, and recorded.
    from pydantic_ai.exceptions import ModelRetry

    from pydantic_ai_compaction.processors.views.tiered import CARRY_OWNER, _restub  # pyright: ignore[reportPrivateUsage]
    from pydantic_ai_compaction.runtime import carry

    sent: list[list[ModelMessage]] = []
    answered: dict[int, ModelResponse] = {}  # request number → the response with the view's record

    @dataclass
    class Tap(AbstractCapability[Any]):
        """Before the view: its `after_model_request` runs after the view's and sees the record."""

        async def after_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
        ) -> ModelResponse:
            answered[len(sent) - 1] = response
            return response

    @dataclass
    class Reject(AbstractCapability[Any]):
        rejected: set[int]

        async def after_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
        ) -> ModelResponse:
            if breaking == 'rejected' and len(sent) in (10, 15) and len(sent) not in self.rejected:
                self.rejected.add(len(sent))
                raise ModelRetry('rejected')
            return response

    @dataclass
    class Orphan(AbstractCapability[Any]):
        async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
            if breaking == 'orphaned' and len(sent) in (10, 15):
                messages = request_context.messages
                request_context.messages = [messages[0], *messages[2:]]
            return request_context

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(sent) > 20:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': len(sent)}, tool_call_id=f'c{len(sent)}')])

    view = ClearThenSummarize(context_window=6_000, summarize=False)
    agent = Agent(FunctionModel(respond), capabilities=[Tap(), Orphan(), view, _Spy(sent), Reject(set())], retries=5)

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, 60)

    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # the refused projections say so
        saved = agent.run_sync('Audit the logs.').all_messages()
    records = 0
    for position, message in enumerate(saved):
        if not (isinstance(message, ModelResponse) and VIEW_RECORD in str(message.metadata)):
            continue
        records += 1
        carried = carry.read(saved[: position + 1], CARRY_OWNER, _restub)
        request = next(number for number, response in answered.items() if response is message)
        assert carried is not None
        assert carried.messages == sent[request][: len(carried.messages)]
    assert records >= (1 if breaking == 'orphaned' else 3)  # none of a refused projection


def test_results_no_response_read_yet_are_cleared_when_they_alone_fill_the_window() -> None:
    # A history passed in ends with twenty results of parallel calls that no response has read yet, then the user's
    # new turn. They are the request in progress, which clearing keeps whole; but together they hold more than the
    # window: kept whole, the first request was sent at 12,984 tokens to a 10,000-token window.
    from pydantic_ai_compaction.runtime.tokens import estimate_token_count

    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('read all logs')]),
        ModelResponse(parts=[ToolCallPart('read_log', {'index': i}, tool_call_id=f'c{i}') for i in range(20)]),
        *(ModelRequest(parts=[ToolReturnPart('read_log', log_text(i), tool_call_id=f'c{i}')]) for i in range(20)),
    ]
    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(list(messages))
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(respond), capabilities=[ClearThenSummarize(context_window=10_000, summarize=False)])
    agent.run_sync('go on', message_history=history)
    assert estimate_token_count(history) > 10_000
    assert cleared(sent[0]) > 0 and estimate_token_count(sent[0]) < 10_000


@pytest.mark.parametrize('kind', ['huge integer', 'lone surrogate', 'ToolReturn.content', 'empty request'])
def test_odd_but_legal_results_are_cleared_and_the_projection_carried_across_turns(kind: str) -> None:
    # Results a tool may legally return (an integer past 4,300 digits, a lone surrogate, `ToolReturn` with content
    # beside its value) and a history that opens with an empty request: clearing, the record and its digest must
    # take them, and the next turn must read the projection back. pydantic-ai cannot save the first two as JSON, so
    # the chat keeps its history in memory.
    from pydantic_ai import ToolReturn

    from pydantic_ai_compaction.processors.views.tiered import CARRY_OWNER, _restub  # pyright: ignore[reportPrivateUsage]
    from pydantic_ai_compaction.runtime import carry

    def value(index: int) -> object:
        body = 'x' * 3_000
        if kind == 'huge integer':
            return {'n': 10**5_000 + index, 'body': body}
        if kind == 'lone surrogate':
            return f'lone \ud800 {body}'
        if kind == 'ToolReturn.content':
            return ToolReturn(return_value=body, content=[f'see also {index}'], metadata={'index': index})
        return body

    sent: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(messages)
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts) and len(sent) % 6 == 0:
            return ModelResponse(parts=[TextPart('ok')])
        return ModelResponse(parts=[ToolCallPart('read', {'index': len(sent)})])

    agent = Agent(FunctionModel(respond), capabilities=[ClearThenSummarize(context_window=6_000)])

    @agent.tool_plain
    def read(index: int) -> object:  # pyright: ignore[reportUnusedFunction]
        return value(index)

    history: list[ModelMessage] = [ModelRequest(parts=[])] if kind == 'empty request' else []
    for turn in range(3):
        history = agent.run_sync(f'turn {turn}', message_history=history).all_messages()
    stubs = (
        [
            p
            for m in sent[-1]
            for p in m.parts
            if isinstance(p, ToolReturnPart) and str(p.content).startswith('[cleared:')
        ]
        if kind != 'huge integer'
        else [p for m in sent[-1] for p in m.parts if isinstance(p, ToolReturnPart) and isinstance(p.content, str)]
    )  # `str()` of the huge integer itself raises: the stubs are the results that became text
    assert stubs and all(str(p.content).startswith('[cleared:') for p in stubs)
    assert carry.read(history, CARRY_OWNER, _restub) is not None
