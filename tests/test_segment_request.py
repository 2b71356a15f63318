"""`segment_request`: a view's segmentation of every request, recognising the remembered one by the messages' addresses.

It must give what a fresh segmentation gives for any history, and must see any message replaced (by an equal
copy too), removed, inserted or moved, anywhere in the history, exactly as the identity pass of `segment` does.
"""

from __future__ import annotations

import copy
import ctypes
import importlib
import sys
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart

from pydantic_ai_compaction.runtime.segment import segment_fresh, segment_request

from .reliability import histories
from .test_incremental import same, tool_loop

segment_module = importlib.import_module('pydantic_ai_compaction.runtime.segment')

EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EDITS = ('equal copy', 'edited copy', 'removed', 'inserted', 'moved', 'none')


def _states_agree(history: list[ModelMessage], prompt: object) -> int:
    """Check every remembered state of *history*'s opening: the address test answers as the identity pass does.

    Returns how many states it compared."""
    held = tuple(history)
    states: list[Any] = segment_module._STATES.get((held[0],)) or []  # pyright: ignore[reportPrivateUsage]
    for state in states if segment_module._SAME_ADDRESSES is not None else ():  # pyright: ignore[reportPrivateUsage]
        assert segment_module._same_objects(state, held, prompt) == state.matches(held, prompt)  # pyright: ignore[reportPrivateUsage]
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
    assert segment_module._SAME_ADDRESSES is not None  # pyright: ignore[reportPrivateUsage]


def _comparers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The address comparison with the C library's `memcmp`, and without it (the bytes copied out)."""
    with_memcmp = segment_module._addresses_compared()  # pyright: ignore[reportPrivateUsage]

    def unloadable(name: object) -> Any:
        raise OSError(name)

    monkeypatch.setattr(ctypes, 'PyDLL', unloadable)
    copied = segment_module._addresses_compared()  # pyright: ignore[reportPrivateUsage]
    monkeypatch.undo()
    return [with_memcmp, copied]


@pytest.mark.skipif(segment_module._SAME_ADDRESSES is None, reason='addresses are not comparable here')  # pyright: ignore[reportPrivateUsage]
def test_addresses_are_compared_exactly_with_memcmp_or_copied_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests below would otherwise compare `segment` with itself.
    items = [object() for _ in range(50)]
    equal = [copy.copy(item) for item in items]
    for compare in _comparers(monkeypatch):
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
        same(segment_request(history[:end], prompt=prompt), segment_fresh(history[:end], prompt=prompt))
    position = data.draw(st.integers(0, len(history) - 1))
    other = data.draw(st.integers(0, len(history) - 1))
    edited = _edit(history, kind, position, other)
    compared = _states_agree(edited, prompt) if edited else 0
    if edited:
        same(segment_request(edited, prompt=prompt), segment_fresh(edited, prompt=prompt))
    # Grown on after the edit (new objects), then the original history again.
    longer = [*edited, *copy.deepcopy(history[1:])]
    if longer:
        same(segment_request(longer, prompt=prompt), segment_fresh(longer, prompt=prompt))
    same(segment_request(history, prompt=prompt), segment_fresh(history, prompt=prompt))
    assert compared >= 0


@pytest.mark.parametrize('kind', EDITS[:-1])
@pytest.mark.parametrize('position', [1, 2, 7, 20, 37])
def test_any_message_changed_in_a_long_tool_loop_is_seen(kind: str, position: int) -> None:
    history = tool_loop(20)
    for end in range(3, len(history) + 1, 2):
        segment_request(history[:end])
    longer = [*history, *tool_loop(2)[1:]]
    edited = _edit(longer, kind, position, len(longer) - 3)
    # A state of this history is remembered, and the address test declines it exactly where the identity pass does.
    assert _states_agree(edited, None) > 0
    states = segment_module._STATES.get((history[0],))  # pyright: ignore[reportPrivateUsage]
    held = tuple(edited)
    if kind == 'equal copy':
        # Every state reaching past the copied message declines (those ending before it still apply).
        assert not any(segment_module._same_objects(state, held, None) for state in states if state.cut > position)  # pyright: ignore[reportPrivateUsage]
        assert any(state.cut > position for state in states)
    same(segment_request(edited), segment_fresh(edited))


def test_an_equal_copy_that_reads_differently_is_segmented_again() -> None:
    # `1 == 1.0`: the copy is equal, and its estimate differs (its arguments are a longer text).
    history: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart('go')])]
    history += tool_loop(30)[1:]
    for end in range(3, len(history) + 1, 2):
        segment_request(history[:end])
    response = history[5]
    assert isinstance(response, ModelResponse)
    call = response.parts[0]
    wider = replace(call, args={f'k{key}': 1.0 for key in range(40)})  # pyright: ignore[reportArgumentType]
    equal = replace(response, parts=[replace(call, args={f'k{key}': 1 for key in range(40)})])  # pyright: ignore[reportArgumentType]
    edited = list(history)
    edited[5] = replace(response, parts=[wider])
    base = list(history)
    base[5] = equal
    segment_request(base)
    assert edited[5] == base[5]
    view = segment_request(edited)
    same(view, segment_fresh(edited))
    assert view.exchanges[3].tokens != segment_fresh(base).exchanges[3].tokens


def test_where_addresses_cannot_be_read_it_is_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_module, '_SAME_ADDRESSES', None)
    history = tool_loop(12)
    for end in range(3, len(history) + 1, 2):
        same(segment_request(history[:end]), segment_fresh(history[:end]))
    edited = _edit(history, 'equal copy', 9, 0)
    same(segment_request(edited), segment_fresh(edited))
