"""`segment` recognises the remembered segmentation by comparing the messages' addresses (`_State.holds`).

It must give what a fresh segmentation gives for any history, and must see any message replaced (by an equal
copy too), removed, inserted or moved, anywhere in the history, exactly as the identity pass does.
"""

from __future__ import annotations

import asyncio
import copy
import ctypes
import importlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import BoundedSelection
from pydantic_ai_compaction.runtime.segment import segment, segment_fresh

from .reliability import histories
from .test_incremental import same, tool_loop
from .test_selection_incremental import Recorder, fresh

segment_module = importlib.import_module('pydantic_ai_compaction.runtime.segment')

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EDITS = ('equal copy', 'edited copy', 'removed', 'inserted', 'moved', 'none')


def _states_agree(history: list[ModelMessage], prompt: object) -> int:
    """Check every remembered state of *history*'s opening: each address test answers as the identity pass does.

    Returns how many states it compared."""
    held = tuple(history)
    states: list[Any] = segment_module._STATES.get((held[0],)) or []  # pyright: ignore[reportPrivateUsage]
    comparers = [compare for compare in COMPARERS if compare is not None]
    for state in states:
        if len(held) > state.cut and state.last() is held[state.cut - 1]:
            by_identity = state.holds(held, None)
            assert all(state.holds(held, compare) == by_identity for compare in comparers)
    return len(states)


def _edit(history: list[ModelMessage], kind: str, position: int, other: int) -> list[ModelMessage]:
    edited = list(history)
    message = edited[position]
    if kind == 'equal copy':
        edited[position] = copy.deepcopy(message)  # equal, not the same object
    elif kind == 'edited copy':
        if isinstance(message, ModelRequest):
            edited[position] = replace(message, parts=[*message.parts, UserPromptPart('an edit')])
        else:
            edited[position] = replace(message, parts=[*message.parts])
    elif kind == 'removed':
        del edited[position]
    elif kind == 'inserted':
        edited.insert(position, ModelRequest(parts=[UserPromptPart('inserted')]))
    elif kind == 'moved':
        edited.insert(other, edited.pop(position))
    return edited


@pytest.mark.skipif(sys.implementation.name != 'cpython', reason='addresses are compared on CPython only')
def test_addresses_are_compared_on_cpython() -> None:
    # A layout check that failed would make every request pay the identity pass again, silently.
    assert segment_module._same_addresses() is not None  # pyright: ignore[reportPrivateUsage]
    assert all(compare is not None for compare in COMPARERS)


def _comparers() -> list[Any]:
    """The address comparison with the C library's `memcmp`, and without it (the bytes copied out)."""
    with_memcmp = segment_module._addresses_compared()  # pyright: ignore[reportPrivateUsage]
    with pytest.MonkeyPatch.context() as patch:

        def unloadable(name: object) -> Any:
            raise OSError(name)

        patch.setattr(ctypes, 'PyDLL', unloadable)
        copied = segment_module._addresses_compared()  # pyright: ignore[reportPrivateUsage]
    return [with_memcmp, copied]


COMPARERS = _comparers()


@pytest.mark.skipif(COMPARERS[0] is None, reason='addresses are not comparable here')
def test_addresses_are_compared_exactly_with_memcmp_or_copied_out() -> None:
    # The tests below would otherwise compare `segment` with itself.
    items = [object() for _ in range(50)]
    equal = [copy.copy(item) for item in items]
    for compare in COMPARERS:
        assert compare is not None
        assert compare((object(), *items), items, 50)
        assert compare((object(), *items, object()), items[:20], 20)
        assert compare((object(),), [], 0)
        for position in (0, 17, 49):
            changed = list(items)
            changed[position] = equal[position]
            assert not compare((object(), *items), changed, 50)
            assert compare((object(), *items), changed, position)
        assert not compare((object(), *reversed(items)), items, 50)


@EXAMPLES
@given(histories(), st.sampled_from(EDITS), st.data(), st.sampled_from([None, 'continue']))
def test_a_history_grown_edited_and_grown_again_segments_as_if_fresh(
    history: list[ModelMessage], kind: str, data: st.DataObject, prompt: str | None
) -> None:
    for end in range(1, len(history) + 1):
        same(segment(history[:end], prompt=prompt), segment_fresh(history[:end], prompt=prompt))
    position = data.draw(st.integers(0, len(history) - 1))
    other = data.draw(st.integers(0, len(history) - 1))
    edited = _edit(history, kind, position, other)
    compared = _states_agree(edited, prompt) if edited else 0
    if edited:
        same(segment(edited, prompt=prompt), segment_fresh(edited, prompt=prompt))
    # Grown on after the edit (new objects), then the original history again.
    longer = [*edited, *copy.deepcopy(history[1:])]
    if longer:
        same(segment(longer, prompt=prompt), segment_fresh(longer, prompt=prompt))
    same(segment(history, prompt=prompt), segment_fresh(history, prompt=prompt))
    assert compared >= 0


@pytest.mark.parametrize('kind', EDITS[:-1])
@pytest.mark.parametrize('position', [1, 2, 7, 20, 37])
def test_any_message_changed_in_a_long_tool_loop_is_seen(kind: str, position: int) -> None:
    history = tool_loop(20)
    for end in range(3, len(history) + 1, 2):
        segment(history[:end])
    longer = [*history, *tool_loop(2)[1:]]
    edited = _edit(longer, kind, position, len(longer) - 3)
    # A state of this history is remembered, and the address test declines it exactly where the identity pass does.
    assert _states_agree(edited, None) > 0
    states = segment_module._STATES.get((history[0],))  # pyright: ignore[reportPrivateUsage]
    held = tuple(edited)
    if kind == 'equal copy':
        # Every state reaching past the copied message declines (those ending before it still apply).
        assert not any(state.matches(held, None) for state in states if state.cut > position)
        assert any(state.cut > position for state in states)
    same(segment(edited), segment_fresh(edited))


def test_an_equal_copy_that_reads_differently_is_segmented_again() -> None:
    # `1 == 1.0`: the copy is equal, and its estimate differs (its arguments are a longer text).
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart('go')])]
    history += tool_loop(30)[1:]
    for end in range(3, len(history) + 1, 2):
        segment(history[:end])
    response = history[5]
    assert isinstance(response, ModelResponse)
    call = response.parts[0]
    wider = replace(call, args={f'k{key}': 1.0 for key in range(40)})  # pyright: ignore[reportArgumentType]
    equal = replace(response, parts=[replace(call, args={f'k{key}': 1 for key in range(40)})])  # pyright: ignore[reportArgumentType]
    edited = list(history)
    edited[5] = replace(response, parts=[wider])
    base = list(history)
    base[5] = equal
    segment(base)
    assert edited[5] == base[5]
    view = segment(edited)
    same(view, segment_fresh(edited))
    assert view.exchanges[3].tokens != segment_fresh(base).exchanges[3].tokens


def test_where_addresses_cannot_be_read_the_identity_pass_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_module, '_same_addresses', lambda: None)
    history = tool_loop(12)
    for end in range(3, len(history) + 1, 2):
        same(segment(history[:end]), segment_fresh(history[:end]))
    edited = _edit(history, 'equal copy', 9, 0)
    same(segment(edited), segment_fresh(edited))


_LOOP = """
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart
from pydantic_ai.messages import ToolCallPart, ToolReturnPart
history = [ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart('go')])]
for step in range(12):
    history.append(ModelResponse(parts=[ToolCallPart('read', {'i': step}, tool_call_id=f'c{step}')]))
    history.append(ModelRequest(parts=[ToolReturnPart('read', f'log {step}', tool_call_id=f'c{step}')]))
"""


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_segmentation_imports_and_answers_where_ctypes_is_missing() -> None:
    # Some sandboxed or embedded builds ship without `ctypes`: the import must not fail, the answers must not change.
    out = _python(
        "import sys\nsys.modules['ctypes'] = None\n"
        + _LOOP
        + "s = __import__('importlib').import_module('pydantic_ai_compaction.runtime.segment')\n"
        + 'assert s._same_addresses() is None\n'
        + 'for end in range(3, len(history) + 1, 2):\n'
        + '    assert s.segment(history[:end]) == s.segment_fresh(history[:end])\n'
        + "print(len(s.segment(history).exchanges), 'ctypes' in sys.modules and sys.modules['ctypes'] is not None)"
    )
    assert out == '13 False'


def test_importing_the_segmentation_does_not_import_ctypes() -> None:
    # `ctypes` costs milliseconds to import: it is loaded with the first comparison, not with the package.
    out = _python(
        'import sys\nimport pydantic_ai_compaction.runtime.segment\n'
        + "import pydantic_ai_compaction.processors.views.selection\nprint('ctypes' in sys.modules)"
    )
    assert out == 'False'


def test_threads_growing_and_branching_one_history_agree_with_fresh() -> None:
    # Runs in threads (`asyncio.to_thread`, a thread pool of agents) segment histories sharing their opening object
    # at once: one extends the shared lists while another compares its addresses, often switching mid-request.
    history = tool_loop(40)
    branches = [history, [*history[:21], *tool_loop(12)[1:]], [*history[:41], *tool_loop(15)[1:]]]
    cases = [branch[:end] for branch in branches for end in range(3, len(branch) + 1, 2)]
    expected = [segment_fresh(case) for case in cases]
    order = list(range(len(cases)))

    def work(seed: int) -> int:
        # Each thread grows the branches in its own interleaving; every answer is checked against the fresh one.
        rotated = order[seed * 7 :] + order[: seed * 7] if seed % 2 else order
        for index in rotated:
            same(segment(cases[index]), expected[index])
        return len(rotated)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(4) as pool:
            assert sum(pool.map(work, range(8))) == 8 * len(cases)
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.anyio
async def test_agents_in_threads_sharing_a_history_send_the_fresh_selection() -> None:
    # Runs of one saved history in worker threads (`asyncio.to_thread`): their segmentations share the opening's
    # remembered lists, which one run extends while another compares against them.
    earlier = tool_loop(30)[:-1]
    earlier.append(ModelResponse(parts=[TextPart('paused')]))

    def run(seed: int) -> tuple[int, list[list[ModelMessage]], list[list[ModelMessage]], BoundedSelection[Any]]:
        steps = [0]

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            steps[0] += 1
            step = steps[0]
            if step < 8 + seed % 3:
                return ModelResponse(parts=[ToolCallPart('read_log', {'index': step})])
            return ModelResponse(parts=[TextPart('all read')])

        given, sent = Recorder(), Recorder()
        selection = BoundedSelection[Any](budget=40)
        agent = Agent(FunctionModel(respond), capabilities=[given, selection, sent])

        @agent.tool_plain
        def read_log(index: int) -> str:
            return f'log {index} of {seed}: ' + 'alpha beta gamma ' * 20

        result = agent.run_sync('read the logs about beta', message_history=earlier)
        assert result.output == 'all read'
        return len(given.seen), given.seen, sent.seen, selection

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        runs = await asyncio.gather(*(asyncio.to_thread(run, seed) for seed in range(6)))
    finally:
        sys.setswitchinterval(interval)
    assert sorted(count for count, *_ in runs) == [8, 8, 9, 9, 10, 10]
    for _, received, sent, selection in runs:
        for before, after in zip(received, sent, strict=True):
            assert after == fresh(before, selection, 'read the logs about beta')
        assert len(sent[-1]) < len(received[-1])  # the budget left earlier bundles out


def _remembered_states() -> tuple[list[ModelMessage], list[Any]]:
    """A tool loop of 10 steps segmented as it grew, and the states segmentation remembers of it."""
    history = tool_loop(10)
    for end in range(3, len(history) + 1, 2):
        segment(history[:end])
    return history, segment_module._STATES.get((history[0],)) or []  # pyright: ignore[reportPrivateUsage]


def test_a_history_given_as_a_list_is_compared_one_message_at_a_time() -> None:
    # The addresses are read where an exact tuple keeps its items: any other sequence is never read so.
    history, states = _remembered_states()
    assert states
    edited = list(history)
    edited[3] = copy.deepcopy(edited[3])
    for compare in COMPARERS:
        for state in states:
            assert state.holds(history, compare)
            assert state.holds(tuple(history), compare)
            assert state.holds(edited, compare) is (state.cut <= 4)
            assert state.holds(tuple(edited), compare) is (state.cut <= 4)


@pytest.mark.parametrize('interpreter', ['pypy', 'graalpy', 'free-threaded', 'no C library'])
def test_other_interpreters_compare_one_message_at_a_time_or_copy_the_bytes(
    interpreter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another interpreter's objects have no such addresses, and a build without the interpreter's lock could see a
    # list move while it is read: both use the identity pass. Windows refuses `PyDLL(None)` with a `TypeError`.
    if interpreter == 'free-threaded':
        monkeypatch.setattr(sys, '_is_gil_enabled', lambda: False, raising=False)
    elif interpreter == 'no C library':

        def refused(name: object) -> Any:
            raise TypeError(name)

        monkeypatch.setattr(ctypes, 'PyDLL', refused)
    else:
        monkeypatch.setattr(sys, 'implementation', SimpleNamespace(**{**vars(sys.implementation), 'name': interpreter}))
    compare = segment_module._addresses_compared()  # pyright: ignore[reportPrivateUsage]
    monkeypatch.undo()
    if interpreter != 'no C library':
        assert compare is None
    elif COMPARERS[0] is not None:
        items = [object() for _ in range(9)]
        assert compare is not None and compare((object(), *items), items, 9)
        assert not compare((object(), *items), [*items[:8], object()], 9)


def test_the_list_s_array_is_compared_under_the_lock_that_extending_it_takes() -> None:
    # A list that grows moves its array: between reading its address and comparing, no thread may extend it (the
    # interpreter switches threads between the two; a race a stress test meets too rarely to show).
    history, states = _remembered_states()
    held: list[bool] = []

    def compare(history: tuple[ModelMessage, ...], listed: list[ModelMessage], count: int) -> bool:
        held.append(segment_module._EXTENDING.locked())  # pyright: ignore[reportPrivateUsage]
        return COMPARERS[-1](history, listed, count) if COMPARERS[-1] is not None else True

    assert all(state.holds(tuple(history), compare) for state in states)
    assert held and all(held)


def test_a_comparison_while_the_lock_is_held_never_waits_and_is_as_exact() -> None:
    # Held by another thread extending, or by this one (a finalizer run inside `_extended` that segments): waiting
    # would deadlock the latter, so the identity pass answers instead, without reading the list's array.
    history, states = _remembered_states()
    assert states
    called: list[int] = []

    def compare(history: tuple[ModelMessage, ...], listed: list[ModelMessage], count: int) -> bool:
        called.append(count)
        return True  # would say "same" for the changed history below: it must not be asked

    changed = list(history)
    changed[1] = replace(history[1])
    lock = segment_module._EXTENDING  # pyright: ignore[reportPrivateUsage]
    compared = [state for state in states if state.length >= 1]  # those that hold the changed message
    assert compared

    def answers() -> tuple[bool, bool]:
        same = all(state.holds(tuple(history), compare) for state in states)
        return same, any(state.holds(tuple(changed), compare) for state in compared)

    with ThreadPoolExecutor(1) as pool, lock:  # the lock released first, then the thread joined
        # Asked from another thread, so a comparison that waited for the lock fails here instead of hanging.
        assert pool.submit(answers).result(timeout=10) == (True, False)
    assert called == []
    assert any(state.holds(tuple(history), compare) for state in states) and called
