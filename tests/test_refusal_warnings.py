"""The per-request table's clock, a refusal's one warning line through real runs, and the warnings `_runs` compares."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage
from pydantic_ai_compaction_bench import perf

from pydantic_ai_compaction import CompactionEvent
from pydantic_ai_compaction.processors.memory.recall import Recall
from pydantic_ai_compaction.runtime import project as runtime_project
from pydantic_ai_compaction.runtime.project import Unchanged
from pydantic_ai_compaction.runtime.project import project as checked_project
from pydantic_ai_compaction.runtime.stores import SQLiteArchiveStore

from . import test_selection_whole


@pytest.fixture
def handed_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every hand-off of work to another thread (a thread started, anyio's worker, the loop's executor)."""
    seen: list[str] = []
    start, run_sync = threading.Thread.start, anyio.to_thread.run_sync
    in_executor = asyncio.BaseEventLoop.run_in_executor

    def thread_start(self: threading.Thread) -> None:
        seen.append(f'thread {self.name}')
        start(self)

    async def worker(function: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(f'anyio worker {function!r:.60}')
        return await run_sync(function, *args, **kwargs)

    def executor(self: asyncio.BaseEventLoop, pool: Any, function: Any, *args: Any) -> Any:
        seen.append(f'executor {function!r:.60}')
        return in_executor(self, pool, function, *args)

    monkeypatch.setattr(threading.Thread, 'start', thread_start)
    monkeypatch.setattr(anyio.to_thread, 'run_sync', worker)
    monkeypatch.setattr(asyncio.BaseEventLoop, 'run_in_executor', executor)
    yield seen


async def _requests(path: perf._Path, steps: int, more: int) -> None:  # pyright: ignore[reportPrivateUsage]
    """What `per_request_scaling` does with one path: a first request, then *more* requests of one new step each."""
    pool = 'abcdefghij 0123456789' * 100
    current = perf.tool_loop(steps, 400)
    carried = await path(current)
    current = carried if carried is not None else current
    for offset in range(more):
        current = [*current, *perf._step(steps + 1 + offset, 400, pool)]  # pyright: ignore[reportPrivateUsage]
        carried = await path(current)
        current = carried if carried is not None else current


@pytest.mark.parametrize('name', perf._PER_REQUEST_PATHS)  # pyright: ignore[reportPrivateUsage]
@pytest.mark.anyio
async def test_every_per_request_path_works_in_the_thread_whose_cpu_time_is_read(
    name: str, handed_off: list[str]
) -> None:
    """The table reads the calling thread's CPU time: a path that handed work to a worker thread (the hooks of
    `Recall` and `Archive` reach their store so) would be measured without that work, and look cheaper."""
    path, close = perf._per_request_path(name)  # pyright: ignore[reportPrivateUsage]
    try:
        await _requests(path, 6, 3)
    finally:
        close()
    assert handed_off == []


@pytest.mark.anyio
async def test_the_hand_off_check_sees_a_store_reached_from_a_worker_thread(handed_off: list[str]) -> None:
    """The check above can fail: `Recall`'s own hook indexes in a worker thread, which the table's row (the
    blocking `Recall.index`) does not, and the instrument sees it."""
    store = SQLiteArchiveStore(':memory:')
    recall = Recall[None](store=store)
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), run_step=2, prompt='Audit.')  # pyright: ignore[reportArgumentType]

    async def hook(messages: list[ModelMessage]) -> None:
        await recall.before_model_request(ctx, perf._request_context(messages))  # pyright: ignore[reportPrivateUsage]

    try:
        await _requests(hook, 6, 1)
    finally:
        store.close()
    # Both requests index in anyio's worker (a first use in the process also starts its thread).
    assert [seen for seen in handed_off if not seen.startswith('thread')] == [
        'anyio worker functools.partial(<bound method Recall._index_pending of Rec'
    ] * 2


def test_the_verdict_is_the_cpu_ratio_and_the_wall_ratio_is_shown_beside_it() -> None:
    """Met / not met is read from the CPU columns; the wall-clock ratio of the same requests is printed, unjudged."""
    names = perf._PER_REQUEST_PATHS  # pyright: ignore[reportPrivateUsage]
    measured = {size: {name: perf.PerRequest(1.0, 1.0) for name in names} for size in perf.SCALE_SIZES}
    # Even rows: CPU within the limit, the wall clock far over it; odd rows: the other way round.
    measured['5M'] = {
        name: perf.PerRequest(3.0, 1.0) if i % 2 else perf.PerRequest(1.9, 4.0) for i, name in enumerate(names)
    }
    rows = [line.strip('| ').split(' | ') for line in perf.scaling_table(measured).splitlines()[2:]]
    assert [(row[0], row[5], row[6], row[11]) for row in rows] == [
        (name, '3.0×', 'not met', '1.0×') if i % 2 else (name, '1.9×', 'met', '4.0×') for i, name in enumerate(names)
    ]


# A refusal through real `Agent` runs.


def _broken_history() -> list[ModelMessage]:
    return [
        ModelRequest(parts=[UserPromptPart('read the log')]),
        ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id='c1')]),
        ModelRequest(parts=[ToolReturnPart('read', 'alpha', tool_call_id='c1')]),
        ModelResponse(parts=[TextPart('read')]),
    ]


@dataclass
class Breaker(AbstractCapability[Any]):
    """A capability listed first that drops the first tool call from the second request (its return stays)."""

    requests: int = 0

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        self.requests += 1
        if self.requests == 2:
            messages = request_context.messages
            request_context.messages = [messages[0], *messages[2:]]
        return request_context


@dataclass
class Orphaning(AbstractCapability[Any]):
    """A view whose projection drops the first tool call (its return stays): always refused. When the request it
    is given lacks that call already, the projection is the request itself (`Unchanged`), refused the same way."""

    events: list[CompactionEvent]

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = request_context.messages

        async def build() -> list[ModelMessage] | Unchanged:
            if not any(isinstance(part, ToolCallPart) for part in messages[1].parts):
                return Unchanged(tuple(messages))
            return [messages[0], *messages[2:]]

        return await checked_project('Orphaning', ctx, request_context, build, reason='x', observer=self.events.append)


def _calls_until_three() -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls = sum(isinstance(p, ToolCallPart) for m in messages for p in m.parts)
        if calls < 3:
            return ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id=f'n{calls}')])
        return ModelResponse(parts=[TextPart(f'done after {len(messages)} messages')])

    return FunctionModel(respond)


async def _run(capability: AbstractCapability[Any], seen: list[list[ModelMessage]]) -> str:
    @dataclass
    class Sent(AbstractCapability[Any]):
        async def before_model_request(
            self, ctx: RunContext[Any], request_context: ModelRequestContext
        ) -> ModelRequestContext:
            seen.append(list(request_context.messages))
            return request_context

    agent = Agent(_calls_until_three(), capabilities=[Breaker(), capability, Sent()])

    @agent.tool_plain
    def read() -> str:
        return 'beta'

    result = await agent.run('and beta?', message_history=_broken_history())
    return result.output


@pytest.mark.anyio
async def test_a_refusal_repeated_over_a_run_shows_once_under_the_default_filter() -> None:
    """Every request of the run is refused with the same text, the second one's as `Unchanged` (the request it was
    given was broken already), the others' as copies; the `default` filter shows it once, and each request goes out
    as it arrived, with an `ignored` event per request."""
    events: list[CompactionEvent] = []
    seen: list[list[ModelMessage]] = []
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter('default')
        output = await _run(Orphaning(events=events), seen)
    shown = [w for w in warned if issubclass(w.category, RuntimeWarning)]
    assert output == 'done after 9 messages'
    assert len(shown) == 1
    assert 'Orphaning sent the request unprojected' in str(shown[0].message)
    assert shown[0].filename.endswith('project.py')
    assert [(e.kind, e.reason) for e in events] == [('ignored', 'shape')] * 3
    assert [len(s) for s in seen] == [5, 6, 9]
    assert [isinstance(s[1].parts[0], ToolCallPart) for s in seen] == [True, False, True]


@pytest.mark.anyio
async def test_error_filter_turns_a_refusal_into_the_runs_error_from_project() -> None:
    """Under `-W error` the refusal is raised where it is warned, in `project`, and ends the run: what a user who
    asked warnings to be errors gets, with no `ignored` event emitted (the warning comes first)."""
    events: list[CompactionEvent] = []
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with pytest.raises(RuntimeWarning, match='Orphaning sent the request unprojected') as raised:
            await _run(Orphaning(events=events), [])
    assert raised.traceback[-1].frame.code.name == '_refuse'
    assert any(entry.frame.code.name == 'project' for entry in raised.traceback)
    assert events == []


@pytest.mark.anyio
async def test_an_unchanged_projection_is_sent_as_the_same_request_and_a_copy_as_a_new_list() -> None:
    """`Unchanged` returns the request context itself; an accepted copy sends a new list of the projected objects;
    a refused copy sends a new list of the request's own objects."""
    history = [*_broken_history(), ModelRequest(parts=[UserPromptPart('and beta?')])]
    ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt=None)  # pyright: ignore[reportArgumentType]

    def request() -> ModelRequestContext:
        return ModelRequestContext(
            model=TestModel(),
            messages=list(history),
            model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )

    whole = request()

    async def itself() -> Unchanged:
        return Unchanged(tuple(whole.messages))

    assert await checked_project('V', ctx, whole, itself, reason='x') is whole
    shorter = history[2:]
    copy_of = request()

    async def copied() -> list[ModelMessage]:
        return list(shorter)

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter('always')
        refused = await checked_project('V', ctx, copy_of, copied, reason='x')
    assert len(warned) == 1
    assert refused is not copy_of
    assert refused.messages is not copy_of.messages
    assert all(a is b for a, b in zip(refused.messages, history, strict=True))
    kept = [history[0], *history[3:]]

    async def accepted() -> list[ModelMessage]:
        return kept

    fine = request()
    sent = await checked_project('V', ctx, fine, accepted, reason='x')
    assert sent.messages is not kept
    assert all(a is b for a, b in zip(sent.messages, kept, strict=True))


# What `test_selection_whole._runs` compares.


@dataclass
class Warns(AbstractCapability[Any]):
    """Warns *category* with *text* before each request."""

    category: type[Warning]
    text: str

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        warnings.warn(self.text, self.category, stacklevel=2)
        return request_context


@pytest.mark.anyio
async def test_the_compared_warnings_still_hold_every_warning_but_resource_ones() -> None:
    """Dropping `ResourceWarning` leaves the comparison able to fail: runs that send the same requests but warn
    differently (a `RuntimeWarning`, a `UserWarning`) give different warnings; only a `ResourceWarning` is left out."""
    runs = [('read the beta logs', ['tool'], 'same')]
    quiet = await test_selection_whole._runs(Warns(ResourceWarning, 'unclosed'), 'none', 'none', runs)  # pyright: ignore[reportPrivateUsage]
    loud = await test_selection_whole._runs(Warns(RuntimeWarning, 'refused'), 'none', 'none', runs)  # pyright: ignore[reportPrivateUsage]
    user = await test_selection_whole._runs(Warns(UserWarning, 'refused'), 'none', 'none', runs)  # pyright: ignore[reportPrivateUsage]
    assert quiet[2] == []
    assert loud[2] == ['RuntimeWarning: refused'] * 2
    assert user[2] == ['UserWarning: refused'] * 2
    assert quiet[0] == loud[0] == user[0]


# The library's own views, given a request that is broken already.


@dataclass
class BreakEvery(AbstractCapability[Any]):
    """Listed first: drops the first tool call from every request (its return stays), so every projection a view
    makes of it, the request itself or a copy, is refused."""

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
        messages = request_context.messages
        request_context.messages = [messages[0], *messages[2:]]
        return request_context


@pytest.mark.parametrize('budget', [100_000, 30])
@pytest.mark.anyio
async def test_a_selection_given_a_broken_request_sends_it_as_it_arrived_and_warns_each_text_once(
    budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`BoundedSelection` projects the request itself (`Unchanged`, a large budget) or a copy (a small one); either way
    the refusal leaves the request as it arrived, object for object, and the `default` filter shows each text once."""
    from pydantic_ai_compaction import BoundedSelection

    given: list[list[ModelMessage]] = []
    sent: list[list[ModelMessage]] = []

    @dataclass
    class Seen(AbstractCapability[Any]):
        into: list[list[ModelMessage]]

        async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> Any:
            self.into.append(list(request_context.messages))
            return request_context

    def history() -> list[ModelMessage]:
        # Later turns on other subjects, which a small budget leaves out: its projection is then a copy.
        later = [
            message
            for n in range(4)
            for message in (
                ModelRequest(parts=[UserPromptPart(f'gamma delta {n} ' * 30)]),
                ModelResponse(parts=[TextPart(f'gamma noted {n} ' * 30)]),
            )
        ]
        return [*_broken_history(), *later]

    kinds: list[bool] = []
    accepted_projection = runtime_project._accepted_projection  # pyright: ignore[reportPrivateUsage]

    def spy(*args: Any, unchanged: bool, **kwargs: Any) -> bool:
        kinds.append(unchanged)
        return accepted_projection(*args, unchanged=unchanged, **kwargs)

    monkeypatch.setattr(runtime_project, '_accepted_projection', spy)
    events: list[CompactionEvent] = []
    selection = BoundedSelection[Any](budget=budget, observer=events.append)
    agent = Agent(_calls_until_three(), capabilities=[BreakEvery(), Seen(given), selection, Seen(sent)])

    @agent.tool_plain
    def read() -> str:
        return 'beta ' * 40

    with warnings.catch_warnings(record=True) as always:
        warnings.simplefilter('always')
        await agent.run('and beta?', message_history=history())
    texts = [str(w.message) for w in always if issubclass(w.category, RuntimeWarning)]
    given.clear()
    sent.clear()
    with warnings.catch_warnings(record=True) as default:
        warnings.simplefilter('default')
        await agent.run('and beta?', message_history=history())
    shown = [str(w.message) for w in default if issubclass(w.category, RuntimeWarning)]
    assert len(texts) == 4  # the model, sent one call fewer, asks for one more
    assert all(text.startswith('BoundedSelection sent the request unprojected') for text in texts)
    assert sorted(shown) == sorted(set(texts))
    assert [[id(m) for m in s] for s in sent] == [[id(m) for m in g] for g in given]
    assert [e.kind for e in events] == ['ignored'] * 8
    assert kinds == [budget == 100_000] * 8  # the request itself, or a copy of it
