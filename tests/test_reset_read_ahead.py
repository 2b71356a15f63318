"""The reset's read-ahead (`ResetToCheckpoint._read_arrived`), the `rare_lines` shortcut for one or two
lines, the flat-dict path of `_orjson_writes_as_json` and `IdentityMemo.get`.

Each compaction's checkpoint is compared with the one a fresh `ResetToCheckpoint` proposes for the same history.
"""

from __future__ import annotations

import enum
import gc
import math
import os
import threading
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, ToolReturn
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies import reset as reset_module
from pydantic_ai_compaction.processors.strategies.reset import rare_lines
from pydantic_ai_compaction.protocols.types import Proposal
from pydantic_ai_compaction.runtime import segment
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.encoding import _orjson_writes_as_json  # pyright: ignore[reportPrivateUsage]
from pydantic_ai_compaction.runtime.memo import IdentityMemo

from .test_reset_reading import reference_rare_lines

EXAMPLES = settings(
    max_examples=int(os.environ.get('PAC_EXAMPLES', '30')), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

LOG = '\n'.join(['log 1', *(f'INFO ok id={n}' for n in range(40)), 'ERROR disk full', 'CHANGE: use UTC'])


def _context() -> CompactionContext:
    run = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), prompt='Audit.')
    return CompactionContext(run=run, model=TestModel(), model_settings=None, parameters=ModelRequestParameters())


async def _proposal(reset: ResetToCheckpoint[None], messages: list[ModelMessage]) -> Proposal:
    return await reset.propose(segment(messages), _context())


async def _same_as_fresh(reset: ResetToCheckpoint[None], history: list[ModelMessage], **fields: Any) -> Proposal:
    ours = await _proposal(reset, history)
    fresh = await _proposal(ResetToCheckpoint[None](trigger=Trigger(tokens=1), **fields), history)
    assert ours == fresh
    return ours


def _text(proposal: Proposal) -> str:
    summary: Any = proposal.summary
    return summary.text


def _loop_model(count: int, *, parallel: bool = False) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if done >= count:
            return ModelResponse(parts=[TextPart('All read.')])
        calls = [ToolCallPart('read_log', {'index': done}, tool_call_id=f'c{done}')]
        if parallel and done % 2 == 0:
            calls.append(ToolCallPart('read_log', {'index': done + 1}, tool_call_id=f'c{done + 1}'))
        return ModelResponse(parts=[TextPart(f'Reading {done}.'), *calls])

    return FunctionModel(model)


def read_log(index: int) -> str:
    """A long multi-line log whose rare lines name the index."""
    return LOG.replace('disk full', f'disk full on node {index}')


# --- 1. read-ahead -------------------------------------------------------------------------------------------------


IN_PLACE = (
    'the memo of entries is keyed by the identity of the parts (runtime/memo.py): a part edited in place keeps '
    'its entries. Editing parts in place breaks the rule pydantic-ai and this library follow; the read-ahead only '
    'moves the read from the first compaction to the request the result arrives with'
)


@pytest.mark.xfail(strict=True, reason=IN_PLACE)
@pytest.mark.anyio
async def test_a_result_edited_in_place_after_it_was_read_ahead_reads_as_a_fresh_reset_does() -> None:
    """The memo is keyed by the parts' identity: content reassigned in place after arrival is not seen.

    Editing a part in place breaks pydantic-ai's own contract too, but before the read-ahead a run's first
    compaction read the result as it then was; now it reads the content the result had when it arrived.
    """
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(_loop_model(3), tools=[read_log], capabilities=[reset])
    history = (await agent.run('Audit every log.')).all_messages()
    result = history[2].parts[0]
    assert isinstance(result, ToolReturnPart)
    result.content = LOG.replace('disk full', 'REDACTED')  # a user's redaction, in place
    await _same_as_fresh(reset, history)


@pytest.mark.xfail(strict=True, reason=IN_PLACE)
@pytest.mark.anyio
async def test_a_result_edited_in_place_after_a_compaction_read_it_reads_as_a_fresh_reset_does() -> None:
    """The same staleness before the read-ahead: a second compaction reuses what the first read."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9), checkpoint=None)
    agent = Agent(_loop_model(3), tools=[read_log])
    history = (await agent.run('Audit every log.')).all_messages()
    await _same_as_fresh(reset, history)
    result = history[2].parts[0]
    assert isinstance(result, ToolReturnPart)
    result.content = LOG.replace('disk full', 'REDACTED')
    await _same_as_fresh(reset, history)


@pytest.mark.anyio
async def test_a_result_replaced_by_a_copy_after_it_was_read_ahead_reads_as_a_fresh_reset_does() -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(_loop_model(3), tools=[read_log], capabilities=[reset])
    history = (await agent.run('Audit every log.')).all_messages()
    assert len(reset._facts) == 3  # pyright: ignore[reportPrivateUsage]
    message = history[2]
    assert isinstance(message, ModelRequest)
    history[2] = replace(message, parts=[replace(message.parts[0], content=LOG.replace('disk full', 'REDACTED'))])
    proposal = await _same_as_fresh(reset, history)
    assert 'ERROR REDACTED' in _text(proposal)


@pytest.mark.anyio
async def test_settings_changed_between_runs_read_again() -> None:
    """The same message objects, a second run with other settings: no entry read with the first ones is used."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(_loop_model(4), tools=[read_log], capabilities=[reset])
    history = (await agent.run('Audit every log.')).all_messages()
    reset.facts_per_result = 1
    reset.write_tools = 'read_log'
    again = (await agent.run('And again.', message_history=history)).all_messages()
    proposal = await _same_as_fresh(reset, again, facts_per_result=1, write_tools='read_log')
    assert 'Changed' in _text(proposal) and 'more such lines' in _text(proposal)


@pytest.mark.anyio
async def test_two_conversations_sharing_the_messages_and_the_capability() -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(_loop_model(3), tools=[read_log], capabilities=[reset])
    first = (await agent.run('Audit every log.')).all_messages()
    second = (await agent.run('Audit them again.', message_history=first[:3])).all_messages()
    await _same_as_fresh(reset, first)
    await _same_as_fresh(reset, second)


@pytest.mark.anyio
async def test_parallel_calls_retries_tool_return_content_and_prompts_read_as_a_fresh_reset_does() -> None:
    """Two results, a retried call (a `retried` return in pydantic-ai 2), a result with a user part."""
    bad: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if done >= 8:
            return ModelResponse(parts=[TextPart('All read.')])
        if done == 3 and not bad:  # arguments that fail validation: a `RetryPromptPart` comes back
            bad.append(done)
            return ModelResponse(parts=[ToolCallPart('read_log', {'index': 'three'}, tool_call_id='bad')])
        tool = ['read_log', 'shot'][done % 2]
        calls = [ToolCallPart(tool, {'index': done}, tool_call_id=f'c{done}')]
        if done % 4 == 0:
            calls.append(ToolCallPart('read_log', {'index': done + 100}, tool_call_id=f'p{done}'))
        return ModelResponse(parts=calls)

    def shot(index: int) -> ToolReturn:
        return ToolReturn(return_value=read_log(index), content=f'the screenshot of {index}')

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(FunctionModel(model), tools=[read_log, shot], capabilities=[reset])
    history = (await agent.run('Audit every log.')).all_messages()
    assert any(isinstance(p, ToolReturnPart) and p.outcome == 'retried' for m in history for p in m.parts)
    assert any(len(m.parts) > 1 and isinstance(m, ModelRequest) for m in history)
    await _same_as_fresh(reset, history)


@pytest.mark.anyio
async def test_huge_results_and_lone_surrogates_read_as_a_fresh_reset_does() -> None:
    """pydantic-ai cannot send a lone surrogate through a run, so the requests are replayed as a run makes them."""
    contents: list[Any] = [
        {'rows': [f'INFO ok id={n}' for n in range(5_000)], 'bad': '\ud800 lone', 'big': 2**80},
        'x\ud83d\n' * 50_000 + 'ERROR \udfff broken',
        '\u2028'.join(['INFO a=1'] * 100 + ['\udc80 odd'] * 2),
        'y' * 2_000_000,
    ]
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Go.')])]
    for n, content in enumerate(contents):
        history = [
            *history,
            ModelResponse(parts=[ToolCallPart('read_odd', {'index': n, 'k': '\ud800'}, tool_call_id=f'c{n}')]),
            ModelRequest(parts=[ToolReturnPart('read_odd', content, tool_call_id=f'c{n}')]),
        ]
        reset._read_arrived(history)  # pyright: ignore[reportPrivateUsage]
    assert len(reset._facts) == len(contents)  # pyright: ignore[reportPrivateUsage]
    await _same_as_fresh(reset, history)


@pytest.mark.anyio
async def test_an_extractor_that_raises_is_swallowed_ahead_and_reported_by_the_compaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in reading a result hides nowhere: the read-ahead skips it, the compaction raises it."""

    def broken(call: ToolCallPart, text: str, *, limit: int = 20) -> list[str]:
        raise ZeroDivisionError('a bug')

    monkeypatch.setattr(reset_module, 'rare_lines', broken)
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(_loop_model(2), tools=[read_log], capabilities=[reset])
    history = (await agent.run('Audit every log.')).all_messages()
    assert len(reset._facts) == 0  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(ZeroDivisionError):
        await _proposal(reset, history)


def test_runs_in_threads_sharing_the_capability_read_as_a_fresh_reset_does() -> None:
    import anyio

    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agents = [Agent(_loop_model(6, parallel=n % 2 == 1), tools=[read_log], capabilities=[reset]) for n in range(4)]
    histories: list[list[ModelMessage]] = [[] for _ in agents]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            histories[n] = agents[n].run_sync(f'Audit every log, pass {n}.').all_messages()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(agents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []

    async def check() -> None:
        for history in histories:
            await _same_as_fresh(reset, history)

    anyio.run(check)


def test_facts_read_ahead_die_with_their_messages() -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(_loop_model(5), tools=[read_log], capabilities=[reset])
    for n in range(20):
        agent.run_sync(f'Conversation {n}.')
    gc.collect()
    assert len(reset._facts) == 0  # pyright: ignore[reportPrivateUsage]
    kept = agent.run_sync('Kept.').all_messages()
    assert len(reset._facts) == 5  # pyright: ignore[reportPrivateUsage]
    del kept
    gc.collect()
    assert len(reset._facts) == 0  # pyright: ignore[reportPrivateUsage]


def test_a_custom_checkpoint_reads_nothing_ahead() -> None:
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9), checkpoint=lambda ctx, view: 'mine')
    agent = Agent(_loop_model(3), tools=[read_log], capabilities=[reset])
    history = agent.run_sync('Go.').all_messages()
    assert len(history) == 8 and len(reset._facts) == 0  # pyright: ignore[reportPrivateUsage]


# --- 2. rare_lines with one or two lines ---------------------------------------------------------------------------


BREAKS = ['\n', '\r', '\r\n', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\x85', '\u2028', '\u2029']
PIECES = ['', ' ', '\t', 'INFO ok id=7', 'INFO ok id=8', 'a=b', 'ERROR x', 'w w', '٣ digits', 'É=1', '  x  ', '\u3000']


@EXAMPLES
@given(
    pieces=st.lists(st.sampled_from(PIECES), min_size=0, max_size=5),
    breaks=st.lists(st.sampled_from(BREAKS), min_size=4, max_size=4),
    limit=st.integers(-3, 3),
)
def test_rare_lines_of_one_or_two_lines_are_those_the_shapes_give(
    pieces: list[str], breaks: list[str], limit: int
) -> None:
    text = ''.join(piece + brk for piece, brk in zip(pieces, breaks * 2, strict=False))
    call = ToolCallPart('read_log', {})
    assert rare_lines(call, text, limit=limit) == reference_rare_lines(call, text, limit=limit)


def test_facts_per_result_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r'ResetToCheckpoint\.facts_per_result'):
        ResetToCheckpoint[None](facts_per_result=0)


@pytest.mark.bench
def test_the_bench_tool_loop_results_are_two_lines() -> None:
    """The cold 1M bench row reads only two-line results (the shortcut); its 80-line row does not take it."""
    from pydantic_ai_compaction_bench.perf import tool_loop

    def line_counts(history: list[ModelMessage]) -> set[int]:
        return {len(p.content.splitlines()) for m in history for p in m.parts if isinstance(p, ToolReturnPart)}

    assert line_counts(tool_loop(6)) == {2, 3}  # the marked step has a `CHANGE:` line more
    assert line_counts(tool_loop(6, line_chars=100)) == {81, 82}  # `log N` and 8,000 characters in 80 lines


# --- 3. `_orjson_writes_as_json` and `IdentityMemo.get` -----------------------------------------------------------


def _old_writes_as_json(value: Any) -> bool:
    kind = type(value)
    if kind in (str, int, bool, type(None)):
        return True
    if kind is dict:
        return all(type(key) is str and _old_writes_as_json(item) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_old_writes_as_json(item) for item in value)
    return False


class S(str):
    pass


class I(int):  # noqa: E742
    pass


class F(float):
    pass


class Color(enum.Enum):
    RED = 'red'


class Level(enum.IntEnum):
    LOW = 1


class Name(str, enum.Enum):  # noqa: UP042 - a str mixin, as users still write it
    A = 'a'


SCALARS = st.one_of(
    st.text(max_size=3),
    st.integers(),
    st.integers(min_value=2**64, max_value=2**90),
    st.booleans(),
    st.none(),
    st.floats(),
    st.sampled_from([math.nan, math.inf, -math.inf, S('s'), I(3), F(1.5), Color.RED, Level.LOW, Name.A, b'x', 1j]),
)
KEYS = st.one_of(st.text(max_size=3), st.sampled_from([S('k'), 1, True, None, 1.5, Name.A, (1, 2)]))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(KEYS, inner, max_size=3),
    ),
    max_leaves=8,
)


@EXAMPLES
@given(value=VALUES)
def test_orjson_writes_as_json_answers_as_before(value: Any) -> None:
    assert _orjson_writes_as_json(value) == _old_writes_as_json(value)


@pytest.mark.parametrize(
    ('value', 'expected'),
    [
        ({'a': 1, 'b': 's', 'c': None, 'd': True}, True),
        ({'a': S('s')}, False),
        ({S('a'): 1}, False),
        ({'a': I(1)}, False),
        ({'a': 1.0}, False),
        ({'a': math.nan}, False),
        ({'a': Name.A}, False),
        ({'a': Level.LOW}, False),
        ({'a': 2**70}, True),
        ({1: 'a'}, False),
        ({'a': {'b': 1}}, True),
        ({'a': {'b': 1.5}}, False),
        ({}, True),
    ],
)
def test_flat_dicts_answer_as_before(value: dict[Any, Any], expected: bool) -> None:
    assert _orjson_writes_as_json(value) is expected is _old_writes_as_json(value)


def test_identity_memo_reads_only_the_same_live_objects() -> None:
    class Box:
        pass

    memo = IdentityMemo[str]()
    a, b = Box(), Box()
    memo.put((a, b), 'ab')
    assert (memo.get((a, b)), memo.get((b, a)), memo.get((a,)), memo.get(())) == ('ab', None, None, None)
    memo.put((), 'none')
    assert memo.get(()) == 'none'
    key = (id(a), id(b))
    del b
    gc.collect()
    assert memo.get((a,)) is None and key not in memo._entries  # pyright: ignore[reportPrivateUsage]
    # A stale entry whose referent died (its callback not run yet) reads as nothing, even if the id is reused.
    c = Box()
    memo.put((a, c), 'ac')
    refs, _ = memo._entries[(id(a), id(c))]  # pyright: ignore[reportPrivateUsage]
    impostor = Box()
    memo._entries[(id(a), id(impostor))] = (refs, 'stale')  # pyright: ignore[reportPrivateUsage]
    assert memo.get((a, impostor)) is None and memo.get((a, c)) == 'ac'


@pytest.mark.anyio
async def test_a_bad_write_tools_set_between_runs_is_reported_by_the_compaction() -> None:
    """The read-ahead swallows the check's error; the next run refuses it when it starts (`check_settings`), and
    the compaction, which reads the same settings, raises it too."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=10**9))
    agent = Agent(_loop_model(2), tools=[read_log], capabilities=[reset])
    history = (await agent.run('Audit every log.')).all_messages()
    reset.write_tools = '(unclosed'
    with pytest.raises(ValueError, match=r'ResetToCheckpoint\.write_tools'):
        await agent.run('Again.', message_history=history)
    with pytest.raises(ValueError, match=r'ResetToCheckpoint\.write_tools'):
        await _proposal(reset, history)
