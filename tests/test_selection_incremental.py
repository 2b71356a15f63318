"""Incremental selection: each request extends the last one's bundles, choice and projection, and always sends
exactly what a selection computed from scratch sends."""

from __future__ import annotations

import copy
import importlib
import operator
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
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

from pydantic_ai_compaction import BoundedSelection, CompactionEvent
from pydantic_ai_compaction.processors.views.selection import current_request_text, project, select
from pydantic_ai_compaction.runtime.project import project_request
from pydantic_ai_compaction.runtime.segment import segment, segment_fresh
from pydantic_ai_compaction.runtime.shape import ShapeCheck, shape_problems

from .reliability import histories

selection_module = importlib.import_module('pydantic_ai_compaction.processors.views.selection')

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SETTINGS = st.tuples(
    st.sampled_from([1, 15, 60, 250, 10_000]),  # budget: from nothing fits to everything fits
    st.sampled_from([0, 1, 12]),  # retrieve
    st.sampled_from([0.3, 1.0]),  # retrieval share
    st.sampled_from([None, 'continue', 'alpha beta']),  # the run's prompt
)


def fresh(messages: Sequence[ModelMessage], capability: BoundedSelection[Any], prompt: object) -> list[ModelMessage]:
    """The selection computed from scratch: nothing remembered by segmentation or by the capability."""
    view = segment_fresh(messages, prompt=prompt)
    request = current_request_text(messages)
    chosen = select(view, request, capability.budget, retrieve=capability.retrieve, share=capability.retrieval_share)
    return project(view, chosen)


def capability(budget: int, retrieve: int, share: float) -> BoundedSelection[Any]:
    return BoundedSelection[Any](budget=budget, retrieve=retrieve, retrieval_share=share)


def grown(selection: BoundedSelection[Any], history: list[ModelMessage], prompt: object) -> None:
    for end in range(1, len(history) + 1):
        prefix = history[:end]
        assert selection.selection(prefix, prompt=prompt) == fresh(prefix, selection, prompt)


@EXAMPLES
@given(histories(), SETTINGS)
def test_a_history_grown_message_by_message_selects_as_if_fresh(
    history: list[ModelMessage], setting: tuple[int, int, float, str | None]
) -> None:
    budget, retrieve, share, prompt = setting
    grown(capability(budget, retrieve, share), history, prompt)


@EXAMPLES
@given(histories(), histories(), st.integers(0, 30), SETTINGS)
def test_a_replaced_or_edited_history_selects_as_if_fresh(
    history: list[ModelMessage], other: list[ModelMessage], keep: int, setting: tuple[int, int, float, str | None]
) -> None:
    budget, retrieve, share, prompt = setting
    selection = capability(budget, retrieve, share)
    grown(selection, history, prompt)
    # A compaction rewrote the history, or another history was passed that starts with the same opening object.
    keep = min(keep, len(history) - 1)
    replaced = [*history[: max(keep, 1)], *other[1:]]
    assert selection.selection(replaced, prompt=prompt) == fresh(replaced, selection, prompt)
    grown(selection, replaced, prompt)
    # A message in the middle swapped for a copy with more content, a shorter history, then the original again.
    if len(history) > 2:
        middle = len(history) // 2
        edited = list(history)
        edited[middle] = _edited(history[middle])
        assert selection.selection(edited, prompt=prompt) == fresh(edited, selection, prompt)
        assert selection.selection(history[:middle], prompt=prompt) == fresh(history[:middle], selection, prompt)
    assert selection.selection(history, prompt=prompt) == fresh(history, selection, prompt)


@EXAMPLES
@given(histories(), st.data(), SETTINGS)
def test_messages_copied_or_swapped_select_as_if_fresh(
    history: list[ModelMessage], data: st.DataObject, setting: tuple[int, int, float, str | None]
) -> None:
    budget, retrieve, share, prompt = setting
    selection = capability(budget, retrieve, share)
    grown(selection, history, prompt)
    # The same opening object with every later message an equal copy (a history loaded again): the same messages.
    copied = [history[0], *copy.deepcopy(history[1:])]
    assert selection.selection(copied, prompt=prompt) == fresh(copied, selection, prompt)
    if len(history) > 1:
        # One message swapped for a copy with other parts (`dataclasses.replace`), then the history grown on.
        position = data.draw(st.integers(1, len(history) - 1))
        swapped = list(copied)
        swapped[position] = _edited(copied[position])
        assert selection.selection(swapped, prompt=prompt) == fresh(swapped, selection, prompt)
        longer = [*swapped, *copy.deepcopy(history[1:])]
        grown(selection, longer, prompt)


@EXAMPLES
@given(histories(), histories(), st.integers(0, 30), st.sampled_from([None, 'continue']))
def test_the_reused_prefix_found_from_the_end_is_the_one_compared_position_by_position(
    history: list[ModelMessage], other: list[ModelMessage], keep: int, prompt: str | None
) -> None:
    reused = selection_module._reused  # pyright: ignore[reportPrivateUsage]
    by_identity = selection_module._reused_by_identity  # pyright: ignore[reportPrivateUsage]
    keep = min(keep, len(history) - 1)
    replaced = [*history[: max(keep, 1)], *other[1:]]
    views = [segment(history[:end], prompt=prompt) for end in range(1, len(history) + 1)]
    views += [segment(replaced, prompt=prompt), segment(history, prompt=prompt)]
    for before, after in pairwise(views):
        assert reused(before, after) == by_identity(before.exchanges, after.exchanges)
    # A view copied with other exchanges carries a note that no longer applies: compared position by position.
    last = views[-1]
    narrowed = replace(last, exchanges=tuple(replace(e, tokens=e.tokens + 1) for e in last.exchanges))
    assert reused(last, narrowed) == 0


def test_a_bundle_whose_exchange_is_no_longer_in_progress_is_rebuilt() -> None:
    # A retry request that also opens a new user turn: the response before it is in progress while that request
    # is the last message, and no longer once a response follows. The bundle holding that response started
    # before the first changed exchange and ends after it: kept as it was, it stayed forced and was sent.
    def turn(text: str) -> ModelRequest:
        return ModelRequest(parts=[UserPromptPart(text)])

    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # RetryPromptPart is deprecated, yet legal in a stored history
        retry = ModelRequest(parts=[RetryPromptPart('answer in JSON'), UserPromptPart('an edit about alpha beta')])
    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You audit logs.'), UserPromptPart('alpha alpha alpha')]),
        ModelResponse(parts=[TextPart('alpha')]),
        turn('alpha alpha'),
        ModelResponse(parts=[TextPart('alpha')]),
        retry,
        ModelResponse(parts=[TextPart('{}')]),
    ]
    selection = capability(1, 0, 0.3)
    assert selection.selection(history[:5]) == fresh(history[:5], selection, None)
    sent = selection.selection(history)
    assert sent == fresh(history, selection, None)
    assert not any(message is history[2] for message in sent)  # the older turn is over the budget of 1


def _edited(message: ModelMessage) -> ModelMessage:
    if isinstance(message, ModelRequest):
        return replace(message, parts=[*message.parts, UserPromptPart('an edit about alpha beta')])
    return replace(message, parts=[*message.parts, TextPart('an edit about alpha beta')])


def _context(prompt: object) -> RunContext[None]:
    return RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt=prompt)  # pyright: ignore[reportArgumentType]


def _request(messages: list[ModelMessage]) -> ModelRequestContext:
    return ModelRequestContext(
        model=TestModel(), messages=messages, model_settings=None, model_request_parameters=ModelRequestParameters()
    )


@EXAMPLES
@given(histories(), histories(), SETTINGS)
@pytest.mark.anyio
async def test_the_hook_sends_what_a_fresh_checked_selection_sends(
    history: list[ModelMessage], other: list[ModelMessage], setting: tuple[int, int, float, str | None]
) -> None:
    budget, retrieve, share, prompt = setting
    selection = capability(budget, retrieve, share)
    ctx = _context(prompt)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # a refused projection warns; both paths refuse alike
        for messages in [history[:end] for end in range(1, len(history) + 1)] + [[*history[:1], *other[1:]], history]:
            sent = (await selection.before_model_request(ctx, _request(list(messages)))).messages
            expected = project_request(messages, fresh(messages, selection, prompt), 'BoundedSelection', reason='x')
            assert sent == expected


def _shuffled(history: list[ModelMessage], drops: list[int]) -> list[ModelMessage]:
    """*history* with some messages left out: pairing, order and adjacency problems appear."""
    return [message for index, message in enumerate(history) if index not in drops]


@EXAMPLES
@given(histories(), histories(), st.lists(st.integers(0, 40), max_size=4))
def test_the_shape_check_finds_what_shape_problems_finds(
    history: list[ModelMessage], other: list[ModelMessage], drops: list[int]
) -> None:
    check = ShapeCheck()
    broken = _shuffled(history, drops)
    lists = [
        *(history[:end] for end in range(len(history) + 1)),
        *(broken[:end] for end in range(len(broken) + 1)),
        [*history[:2], *other],
        other,
        [],
        history,
    ]
    for messages in lists:
        for before in (None, history, other):
            assert check.problems(messages, before=before) == shape_problems(messages, before=before)


def test_the_shape_check_trusts_kept_messages_only_from_the_list_it_checked_last() -> None:
    """`kept` is a claim about the list checked last: told about another list, the check compares everything."""
    check = ShapeCheck()
    first: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('read')]),
        ModelResponse(parts=[TextPart('ok')]),
        ModelRequest(parts=[UserPromptPart('go on')]),
    ]
    assert check.problems(first) == []
    # As long, but its second message now holds a call that no return answers.
    unpaired = [first[0], ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id='c1')]), first[2]]
    check.kept(3, since=list(first))  # an equal list, not the one handed to the check
    assert check.problems(unpaired) == shape_problems(unpaired)
    assert any("'c1'" in problem for problem in check.problems(unpaired))
    # Told about the list it did check, the check skips the kept messages (the owner vouches for them).
    check = ShapeCheck()
    assert check.problems(first) == []
    check.kept(3, since=first)
    assert check.problems(unpaired) == []


def tool_loop(steps: int) -> list[ModelMessage]:
    messages: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart('read alpha')])]
    for step in range(steps):
        messages.append(ModelResponse(parts=[ToolCallPart('read', {'i': step}, tool_call_id=f'c{step}')]))
        messages.append(ModelRequest(parts=[ToolReturnPart('read', f'log {step} beta', tool_call_id=f'c{step}')]))
        if step % 10 == 9:
            messages.append(ModelResponse(parts=[TextPart(f'done with {step}')]))
            messages.append(ModelRequest(parts=[UserPromptPart(f'now read beta {step}')]))
    return messages


def test_each_request_of_a_run_reads_only_what_is_new(monkeypatch: pytest.MonkeyPatch) -> None:
    history = tool_loop(55)  # the last user turn came after step 49: a tool loop of five steps follows it
    calls: dict[str, int] = {}
    for name in ('user_prompts', 'is_user_request', 'choose'):
        original = getattr(selection_module, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(selection_module, name, counted)
    selection = BoundedSelection[Any](budget=200)
    selection.selection(history[:-4])
    assert calls['choose'] == 1 and calls['user_prompts'] == len(history) - 4  # the first request reads everything
    for end in (-2, None):
        calls.clear()
        sent = selection.selection(history[:end])
        # The new step and the exchange it finished are read; the choice is kept (no new user turn).
        assert calls.get('choose', 0) == 0
        assert 2 <= calls['user_prompts'] <= 4 and 1 <= calls['is_user_request'] <= 2
        assert sent == fresh(history[:end], selection, None)


@dataclass
class Recorder(AbstractCapability[Any]):
    """Listed before and after the selection: what it was given and what it sent."""

    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self.seen.append(list(request_context.messages))
        return request_context


@pytest.mark.anyio
async def test_a_real_run_sends_the_fresh_selection_at_every_request() -> None:
    steps = {'n': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        steps['n'] += 1
        if steps['n'] < 12:
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': steps['n']})])
        return ModelResponse(parts=[TextPart('all read')])

    given, sent = Recorder(), Recorder()
    selection = BoundedSelection[Any](budget=120)
    agent = Agent(FunctionModel(respond), capabilities=[given, selection, sent])

    @agent.tool_plain
    def read_log(index: int) -> str:
        return f'log {index}: ' + 'alpha beta gamma ' * 20

    earlier = tool_loop(25)[:-1]  # ends on a tool return: the run's prompt starts a new turn
    earlier.append(ModelResponse(parts=[TextPart('paused')]))
    result = await agent.run('read the logs about beta', message_history=earlier)
    assert result.output == 'all read'
    assert len(given.seen) == len(sent.seen) == 12
    for before, after in zip(given.seen, sent.seen, strict=True):
        assert after == fresh(before, selection, 'read the logs about beta')
    assert len(sent.seen[-1]) < len(given.seen[-1])  # the budget left earlier bundles out


@pytest.mark.anyio
async def test_each_run_gets_its_own_memory() -> None:
    selection = BoundedSelection[Any](budget=100)
    ctx = _context(None)
    first, second = await selection.for_run(ctx), await selection.for_run(ctx)
    assert isinstance(first, BoundedSelection) and isinstance(second, BoundedSelection)
    assert first is not second and first == selection
    history = tool_loop(12)
    first.selection(history)
    assert first._run.view is not None and second._run.view is None  # pyright: ignore[reportPrivateUsage]


def test_a_new_request_with_the_same_candidates_is_chosen_for_again() -> None:
    from pydantic_ai_compaction.runtime.pins import pin

    alpha = ModelResponse(parts=[TextPart('alpha facts: alpha alpha')])
    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart('start')]),
        alpha,
        ModelRequest(parts=[UserPromptPart('tell me about beta')]),
        ModelResponse(parts=[TextPart('beta facts: beta beta')]),
        ModelRequest(parts=[pin('remember the deadline')]),  # a pinned turn: always sent, never a candidate
    ]
    selection = BoundedSelection[Any](budget=12, retrieve=1, retrieval_share=1.0)
    first = selection.selection(history)
    assert alpha not in first  # nothing matches the pinned request: the newest bundle that fits is sent
    # The next turn leaves the candidates as they were (the pinned bundle stays forced); only the request changed.
    later = [*history, ModelResponse(parts=[TextPart('noted')]), ModelRequest(parts=[UserPromptPart('alpha?')])]
    sent = selection.selection(later)
    assert sent == fresh(later, selection, None)
    assert alpha in sent


def test_a_replaced_last_request_is_read_again() -> None:
    alpha = ModelResponse(parts=[TextPart('alpha facts: alpha alpha')])
    beta = ModelResponse(parts=[TextPart('beta facts: beta beta')])
    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart('start')]),
        alpha,
        ModelRequest(parts=[UserPromptPart('tell me')]),
        beta,
        ModelRequest(parts=[UserPromptPart('beta?')]),
    ]
    selection = BoundedSelection[Any](budget=8, retrieve=1, retrieval_share=1.0)  # one bundle fits
    assert beta in selection.selection(history) and alpha not in selection.selection(history)
    # The same length, the last request replaced (a retried turn): its prompt is the request now.
    edited = [*history[:-1], ModelRequest(parts=[UserPromptPart('alpha?')])]
    sent = selection.selection(edited)
    assert sent == fresh(edited, selection, None)
    assert alpha in sent and beta not in sent


@pytest.mark.anyio
async def test_a_curated_selection_run_has_its_own_fallback_memory() -> None:
    from pydantic_ai_compaction import CuratedSelection

    curated = CuratedSelection[Any](fallback=BoundedSelection[Any](budget=50))
    run = await curated.for_run(_context(None))
    assert isinstance(run, CuratedSelection)
    assert run.fallback is not curated.fallback and run.fallback == curated.fallback
    run.fallback.selection(tool_loop(5))
    assert run.fallback._run.view is not None and curated.fallback._run.view is None  # pyright: ignore[reportPrivateUsage]


def _requests(
    history: list[ModelMessage], other: list[ModelMessage], keep: int, middle: int
) -> list[list[ModelMessage]]:
    """A run's requests: grown step by step, replaced from a point on, truncated, edited in the middle, then loaded
    again as equal copies (other objects: an old object sent in their place would be another request)."""
    keep = min(keep, len(history) - 1)
    replaced = [*history[: max(keep, 1)], *other[1:]]
    middle = min(middle, len(history) - 1)
    edited = [*history[:middle], _edited(history[middle]), *history[middle + 1 :]] if middle else list(history)
    copied = [history[0], *copy.deepcopy(history[1:])]
    return [
        *(history[:end] for end in range(1, len(history) + 1)),
        replaced,
        *(replaced[:end] for end in range(max(keep, 1), len(replaced) + 1)),
        history[: max(middle, 1)],
        edited,
        history,
        copied,
        [*copied, *copy.deepcopy(other[1:])],
    ]


def _same(sent: ModelMessage, expected: ModelMessage) -> bool:
    """The same message object, or a fragment of one (a request split between exchanges is sent narrowed to its
    parts, a new message each time it is built) holding the very same part objects."""
    if sent is expected:
        return True
    return (
        type(sent) is type(expected)
        and len(sent.parts) == len(expected.parts)
        and all(map(operator.is_, sent.parts, expected.parts))
        and sent == expected
    )


@EXAMPLES
@given(histories(), histories(), st.integers(0, 30), st.integers(0, 30), SETTINGS)
@pytest.mark.anyio
async def test_the_hook_sends_the_very_messages_a_fresh_checked_selection_sends(
    history: list[ModelMessage],
    other: list[ModelMessage],
    keep: int,
    middle: int,
    setting: tuple[int, int, float, str | None],
) -> None:
    """Message by message the same objects, the same events and warnings; a projection that is the whole history
    sends the request as it arrived (the same request object, nothing copied)."""
    budget, retrieve, share, prompt = setting
    events: list[CompactionEvent] = []
    selection = BoundedSelection[Any](budget=budget, retrieve=retrieve, retrieval_share=share, observer=events.append)
    ctx = _context(prompt)
    for messages in _requests(history, other, keep, middle):
        request = _request(list(messages))
        expected_events: list[CompactionEvent] = []
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter('always', RuntimeWarning)
            projected = fresh(messages, selection, prompt)
            expected = project_request(
                messages, projected, 'BoundedSelection', reason='selection', observer=expected_events.append
            )
            events.clear()
            sent = await selection.before_model_request(ctx, request)
        assert len(sent.messages) == len(expected)
        assert all(map(_same, sent.messages, expected))
        assert events == expected_events
        said = [str(w.message) for w in warned if issubclass(w.category, RuntimeWarning)]
        assert said[: len(said) // 2] == said[len(said) // 2 :]  # the fresh check's warnings, then the hook's
        whole = len(projected) == len(messages) and all(map(operator.is_, projected, messages))
        assert (sent is request) == whole


@pytest.mark.anyio
async def test_a_tool_loop_sent_whole_is_the_request_as_it_arrived() -> None:
    """Each request of the running tool loop goes out as it arrived (it is sent whole, outside the budget); once a
    new user turn makes the loop a candidate that does not fit the budget, a new list is sent."""
    selection = BoundedSelection[Any](budget=1)
    ctx = _context(None)
    history = tool_loop(3)
    first = _request(list(history[:5]))
    assert await selection.before_model_request(ctx, first) is first
    grown_request = _request(list(history))
    assert await selection.before_model_request(ctx, grown_request) is grown_request
    # A new user turn: the earlier tool loop is now a candidate, and it does not fit the budget.
    later = [*history, ModelResponse(parts=[TextPart('done')]), ModelRequest(parts=[UserPromptPart('now beta')])]
    sent = await selection.before_model_request(ctx, _request(list(later)))
    assert len(sent.messages) < len(later)
    assert sent.messages == fresh(later, selection, None)
