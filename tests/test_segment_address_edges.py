"""Segmentation's address comparison and the validator's per-view facts, attacked as a demanding user would.

A collection that runs in the middle of a segmentation (a finalizer, a `gc` callback) may segment another history:
it must never wait for the lock its own thread holds. The facts the validator carries from one view to the next
(the prefix two views share) must give, through whole compactions, what a computation that never saw the views
before gives, whatever the user did to the history between them.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage, RunUsage

from pydantic_ai_compaction import Fork, ResetToCheckpoint, StatelessSummary, Trigger
from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import run_compaction, shrink
from pydantic_ai_compaction.runtime.segment import ConversationView, same_prefix, segment, settled_prefix
from pydantic_ai_compaction.runtime.validate import Outcome, Skipped

from .reliability import NO_WAIT, histories

# The module, not the function `validate` the package re-exports under the same name.
_validate: Any = importlib.import_module('pydantic_ai_compaction.runtime.validate')

_SEGMENT_DURING_COLLECTIONS = """
import gc, os, sys, threading
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart
from pydantic_ai.messages import ToolCallPart, ToolReturnPart
from pydantic_ai_compaction.runtime.segment import segment, segment_fresh

segment_module = sys.modules['pydantic_ai_compaction.runtime.segment']

def conversation(steps, tag):
    history = [ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart(f'go {tag}')])]
    for step in range(steps):
        history.append(ModelResponse(parts=[ToolCallPart('read', {'i': step}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read', f'log {step}', tool_call_id=f'c{step}')]))
    # A user turn after the tool loop: its segmentation extends the lists of the state it starts from.
    return [*history, ModelResponse(parts=[TextPart('done')]), ModelRequest(parts=[UserPromptPart('next')])]

inside, fired, checked = [False], [0], []

def collected(phase, info):
    # A collection while this thread holds the lock (comparing addresses, or extending the lists) segments
    # another conversation, as a finalizer that segments would.
    if phase != 'start' or inside[0] or fired[0] >= 25 or not segment_module._EXTENDING.locked():
        return
    inside[0] = True
    try:
        fired[0] += 1
        other = conversation(3, fired[0])
        checked.append(segment(other) == segment_fresh(other))
    finally:
        inside[0] = False

def run():
    history = conversation(25, 'main')
    segment(history[:5])
    gc.callbacks.append(collected)
    gc.set_threshold(1, 1, 1)
    try:
        for end in range(7, len(history) + 1, 2):
            checked.append(segment(history[:end]) == segment_fresh(history[:end]))
    finally:
        gc.set_threshold(700, 10, 10)
        gc.callbacks.remove(collected)

worker = threading.Thread(target=run, daemon=True)
worker.start()
worker.join(30)
print('hung' if worker.is_alive() else f'{fired[0] > 0} {len(checked)} {all(checked)}', flush=True)
os._exit(0)
"""


def test_a_collection_that_segments_while_the_lock_is_held_never_waits_for_it() -> None:
    # Found: `_State.holds` takes `_EXTENDING` for its comparison, and `_extended` waited for it; a collection
    # inside the comparison (or inside `_extended`) whose finalizer segmented a history to extend then waited for
    # the lock its own thread held, for ever.
    done = subprocess.run(
        [sys.executable, '-c', _SEGMENT_DURING_COLLECTIONS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.split()
    assert out != ['hung']
    fired, checked, agreed = out
    assert (fired, agreed) == ('True', 'True')  # the collections ran with the lock held, and nothing changed
    assert int(checked) > 25


# --- The validator's facts, carried from view to view -------------------------------------------------------------

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '10'))

ACTIONS = st.sampled_from(
    ['grow', 'grow', 'equal copy', 'content', 'remove', 'insert', 'replace', 'branch', 'other run', 'shrink', 'protect']
)


def _edited(history: list[ModelMessage], other: list[ModelMessage], action: str, at: int) -> list[ModelMessage]:
    """*history* after the user's change between two requests (the views made from it are read in order)."""
    index = 1 + at % max(len(history) - 1, 1)
    if action == 'grow':
        start = 1 + at % max(len(other) - 1, 1)
        return [*history, *other[start : start + 1 + at % 5]]
    if action == 'replace':  # `message_history` replaced by an equal history of other objects
        return copy.deepcopy(history)
    if action == 'branch':  # a conversation going on from an earlier point of this one
        return [*history[:index], *other[1:]]
    if action == 'other run':  # another run whose opening request is the same object (kept at module level)
        return [history[0], *other[1:]]
    if len(history) < 2:
        return history
    changed = list(history)
    if action == 'equal copy':
        changed[index] = copy.deepcopy(history[index])
    elif action == 'content':
        message = history[index]
        if isinstance(message, ModelRequest):
            changed[index] = replace(message, parts=[*message.parts, UserPromptPart(f'edited {at}')])
        else:
            changed[index] = replace(message, parts=[*message.parts, TextPart(f'edited {at}')])
    elif action == 'remove':
        del changed[index]
    elif action == 'insert':
        changed.insert(index, ModelRequest(parts=[UserPromptPart(f'inserted {at}')]))
    return changed


def _protect(exchange: Exchange, messages: list[ModelMessage]) -> bool:
    return exchange.kind == 'tools' and len(messages) > 1


def _views_read_in_order(
    history: list[ModelMessage], other: list[ModelMessage], actions: list[tuple[str, int]]
) -> list[tuple[list[ModelMessage], ConversationView]]:
    """The views a run reads, one after the other, with the history each was made from."""
    views: list[tuple[list[ModelMessage], ConversationView]] = [(history, segment(history))]
    for action, at in actions:
        if action == 'shrink':  # the compactor's view after a context overflow
            reduced, _ = shrink(views[-1][1])
            views.append((list(reduced.messages), reduced))
            continue
        history = _edited(history, other, action, at)
        views.append((history, segment(history, _protect if action == 'protect' else None)))
    return views


def _reset_shaped(ids: tuple[str, ...], at: int) -> list[set[str]]:
    """Sets of kept ids: a reset's (the first and the newest few), a few scattered ones, none."""
    head, tail = at % 3, at % 7
    return [{*ids[:head], *ids[len(ids) - tail :]}, set(ids[at % 5 :: 9]), set()]


@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), histories(), st.lists(st.tuples(ACTIONS, st.integers(0, 60)), min_size=1, max_size=8))
def test_the_facts_read_on_views_in_turn_are_each_view_s_own(
    history: list[ModelMessage], other: list[ModelMessage], actions: list[tuple[str, int]]
) -> None:
    """Each view's facts are read right after the view before's, so each takes over what they share: what it gives
    is what the view's own exchanges say, read alone (ids, forced exchanges, tokens, boundaries, positions, the
    split of a layout and its last dropped position, the starts found before)."""
    views = _views_read_in_order(history, other, actions)
    starts: list[tuple[Exchange, ...]] = []
    for number, (_, view) in enumerate(views):
        exchanges = view.exchanges
        assert _validate.exchange_ids(view) == view.ids
        assert _validate.view_tokens(view) == view.tokens
        forced = _validate.forced_exchanges(view)
        assert len(forced) == sum(e.forced for e in exchanges)
        assert all(a is b for a, b in zip(forced, [e for e in exchanges if e.forced], strict=True))
        assert _validate.boundary_exchanges(view) == tuple(e for e in exchanges if e.kind == 'boundary')
        if len(set(view.ids)) == len(view.ids):
            assert _validate.exchange_positions(view) == {e.id: p for p, e in enumerate(exchanges)}
        assert _validate.first_unfinished(view) == next(
            (p for p, e in enumerate(exchanges) if e.unfinished), len(exchanges)
        )
        assert _validate.view_records(view) == view.records()
        for keep in _reset_shaped(view.ids, number + len(exchanges)):
            kept, dropped = _validate._split(view, keep)
            assert kept == tuple(i for i in view.ids if i in keep)
            assert dropped == tuple(i for i in view.ids if i not in keep)
            expected = max((p for p, i in enumerate(view.ids) if i not in keep), default=None)
            assert _validate.last_dropped(view, dropped) == expected
        # The starts read on the views before: found (or not) exactly as a comparison of every position finds them.
        for before in starts:
            for ignored in (_ignore_nothing, _ignore_forced):
                assert _validate.view_starts_with(view, before, ignored) == same_prefix(before, exchanges, ignored)
        cut = settled_prefix(exchanges)
        if cut:
            _validate.note_start(view, exchanges[:cut], _ignore_nothing)
            starts = [exchanges[:cut], *starts][:4]


def _ignore_nothing(exchange: Exchange) -> bool:
    return False


def _ignore_forced(exchange: Exchange) -> bool:
    return exchange.forced


# --- Whole compactions, live against cold -------------------------------------------------------------------------

REPLIES = st.sampled_from(
    [
        json.dumps({'keep': ['g1', 'g3', 'g4'], 'summary': {'rules': ['use UTC'], 'facts': ['f'], 'progress': 'p',
                                                            'next_step': 'n'}}),
        json.dumps({'keep': [], 'summary': 'nothing worth keeping'}),
        'KEEP: g2, g5\nthe work so far',
        'not a reply any parser reads',  # the fallback layout
        '',
    ]
)  # fmt: skip

STRATEGIES_COMPARED = {
    'reset': lambda: ResetToCheckpoint[None](trigger=Trigger(tokens=1), excerpt_chars=40),
    'summary': lambda: StatelessSummary(retry=NO_WAIT, keep_last=2),
    'fork-json': lambda: Fork(variant='json', retry=NO_WAIT, keep_last=1),
}


def _context(reply: str) -> CompactionContext:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(reply)], usage=RequestUsage(input_tokens=100, output_tokens=10))

    model = FunctionModel(respond)
    run = RunContext[None](deps=None, model=model, usage=RunUsage(), prompt=None)
    return CompactionContext(run=run, model=model, model_settings=None, parameters=ModelRequestParameters())


def _outcome(outcome: Outcome | Skipped) -> object:
    """What a compaction gives, comparable across equal histories of other objects."""
    if isinstance(outcome, Skipped):
        return outcome
    return outcome.messages, outcome.record.to_metadata()


def _cold(name: str, history: list[ModelMessage], reply: str) -> object:
    """A compaction by a new strategy of a copy of *history*, in a thread of its own (no view read before)."""

    def run() -> object:
        copied = copy.deepcopy(history)
        return _outcome(asyncio.run(run_compaction(STRATEGIES_COMPARED[name](), copied, _context(reply))))

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


@pytest.mark.parametrize('name', sorted(STRATEGIES_COMPARED))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    other=histories(),
    actions=st.lists(st.tuples(ACTIONS, st.integers(0, 60)), min_size=1, max_size=6),
    reply=REPLIES,
)
def test_compactions_of_views_read_in_turn_are_cold_compactions(
    name: str, history: list[ModelMessage], other: list[ModelMessage], actions: list[tuple[str, int]], reply: str
) -> None:
    """A strategy compacting the views of a run in turn (each taking the facts of the one before over) gives, each
    time, what a new strategy gives on a copy of the history in a thread that never read a view."""
    live = STRATEGIES_COMPARED[name]()
    for messages, _ in _views_read_in_order(history, other, actions):
        got = _outcome(asyncio.run(run_compaction(live, messages, _context(reply))))
        assert got == _cold(name, messages, reply)


class _Listed(list[object]):
    """A list subclass: `same_objects` compares it object by object, never through the array it may not use."""


@pytest.mark.parametrize('through', ['memcmp', 'bytes copied out', 'identity pass'])
def test_same_objects_answers_by_identity_whichever_way_it_compares(
    through: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctypes

    memo = importlib.import_module('pydantic_ai_compaction.runtime.memo')
    if through == 'identity pass':
        monkeypatch.setattr(memo, '_list_arrays', lambda: None)
    elif through == 'bytes copied out':  # no C library to load by name (Windows refuses `PyDLL(None)`)

        def refused(name: object) -> Any:
            raise TypeError(name)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ctypes, 'PyDLL', refused)
            copied = memo._list_arrays.__wrapped__()  # pyright: ignore[reportPrivateUsage, reportFunctionMemberAccess]
        assert copied is not None
        monkeypatch.setattr(memo, '_list_arrays', lambda: copied)
    else:
        assert memo._list_arrays() is not None  # pyright: ignore[reportPrivateUsage]  # CPython with its lock
    same = memo.same_objects
    items: list[object] = [object() for _ in range(1_000)]
    zero = ModelRequest(parts=[UserPromptPart('flag: 0')], metadata={'flag': 0})
    false = replace(zero, metadata={'flag': False})
    assert zero == false  # equal in Python's eyes...
    assert not same([zero], [false])  # ...and not the same message
    assert same([zero], [zero]) and same([], []) and same(items, list(items))
    assert not same(items, [*items[:-1], object()]) and not same(items, [object(), *items[1:]])
    assert not same(items, items[:-1])  # lengths differ
    assert same(items, tuple(items)) and not same(items, tuple([*items[:500], object(), *items[501:]]))
    assert same(_Listed(items), items) and not same(_Listed([*items[:3], object(), *items[4:]]), items)
