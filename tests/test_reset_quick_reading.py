"""A reset's quick reading of an exchange of one call (labels, extractors, shared state)."""

from __future__ import annotations

import asyncio
import enum
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import ResetToCheckpoint, Trigger
from pydantic_ai_compaction.processors.strategies import reset as reset_module
from pydantic_ai_compaction.processors.strategies.reset import (
    _head,  # pyright: ignore[reportPrivateUsage]
    _label_of,  # pyright: ignore[reportPrivateUsage]
    label_counts,
)
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction
from pydantic_ai_compaction.runtime.segment import segment

from .test_reset_scale import _context, _fingerprint

EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '15'))

_LOG = '\n'.join(['GET /health 200'] * 80 + ['INCIDENT payments down owner=ops'])
"""A result longer than `excerpt_chars`: read through the extractor, its one rare line is its fact."""


class ToolName(str, enum.Enum):  # noqa: UP042 - a user's enum of tool names, formatting as `ToolName.READ` (a `StrEnum` formats as its value)
    READ = 'read_log'


class _FalsyExtractor:
    """An extractor object that is falsy (it holds no patterns), as a user may write one."""

    def __call__(self, call: ToolCallPart, text: str) -> Sequence[str]:
        return ['USER FACT from ' + call.tool_name]

    def __len__(self) -> int:
        return 0


def _exchange(step: int, name: str, content: object, *, second: bool = False) -> list[ModelMessage]:
    calls = [ToolCallPart(name, {'step': step}, tool_call_id=f'c{step}')]
    returns = [ToolReturnPart(name, content, tool_call_id=f'c{step}')]
    if second:
        calls.append(ToolCallPart('grep', {'step': step}, tool_call_id=f'd{step}'))
        returns.append(ToolReturnPart('grep', content, tool_call_id=f'd{step}'))
    return [ModelResponse(parts=calls), ModelRequest(parts=returns)]


def _history(*exchanges: list[ModelMessage]) -> list[ModelMessage]:
    opening: ModelMessage = ModelRequest(parts=[UserPromptPart('Audit the logs.')])
    return [opening, *(message for exchange in exchanges for message in exchange), ModelResponse([TextPart('done')])]


def _entries(reset: ResetToCheckpoint[None], history: list[ModelMessage]) -> list[tuple[str, str, int, str]]:
    """Each tool exchange's entries, then its facts."""
    view = segment(history)
    return [
        entry
        for exchange in view.exchanges
        if exchange.kind == 'tools'
        for entry in (*reset._exchange_entries(view, exchange), *reset._exchange_facts(view, exchange))  # pyright: ignore[reportPrivateUsage]
    ]


# --- findings -----------------------------------------------------------------------------------------------


def test_a_tool_name_of_a_str_enum_is_labelled_as_its_entries_read() -> None:
    """A user's `class ToolName(str, Enum)` member as `tool_name` formats as `ToolName.READ` in its entries: the quick
    reading labelled them by the member's value (`read_log`), so a fold's digest named a tool no entry names, and
    differently from the plain reading (two calls in one response) and from the code before it."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1))
    # A plain `read_log` read first must not lend its label to the enum member equal to it.
    history = _history(
        _exchange(0, 'read_log', 'ok'), _exchange(1, ToolName.READ, 'ok'), _exchange(2, ToolName.READ, _LOG)
    )
    entries = _entries(reset, history)
    assert [label for *_, label in entries] == [
        'read_log',
        'read_log',
        'ToolName.READ',
        'ToolName.READ',
        'ToolName.READ',
        'ToolName.READ',
    ]
    assert all(label == _label_of(_head(line)) for _, line, _, label in entries)
    # Through a compaction that folds: the digest counts the calls under the name their entries show.
    view = segment(history)
    added, labels, _ = reset._additions(view, reset._carried(view), reset._bound())  # pyright: ignore[reportPrivateUsage]
    assert labels['read'] == label_counts(added['read']) == {'read_log': 1, 'ToolName.READ': 2}
    assert labels['found'] == label_counts(added['found'])


def test_a_falsy_extractor_is_called_for_every_exchange() -> None:
    """`extract` documents `None` as the default: a falsy extractor object was ignored for an exchange of two calls
    (`self.extract or default`) and called for an exchange of one (`self.extract is None`), so the same result gave
    the user's facts or `rare_lines`' depending on how many calls its response held."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), extract=_FalsyExtractor())
    entries = _entries(reset, _history(_exchange(0, 'read_log', _LOG), _exchange(1, 'read_log', _LOG, second=True)))
    found = [line for name, line, *_ in entries if name == 'found']
    assert found == [
        'read_log({"step":0}): USER FACT from read_log',
        'read_log({"step":1}): USER FACT from read_log',
        'grep({"step":1}): USER FACT from grep',
    ]


def test_a_very_long_tool_name_is_not_kept_for_the_life_of_the_process() -> None:
    """The labels kept per tool name are module state: a model's made-up name of a megabyte stayed in memory for
    as long as the process ran (up to 1,024 of them), though labelling it again costs one scan."""
    name = 'n' * 1_000_000
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1))
    entries = _entries(reset, _history(_exchange(0, name, 'ok')))
    assert {label for *_, label in entries} == {'n' * 39 + '…'}
    assert name not in reset_module._TOOL_LABELS  # pyright: ignore[reportPrivateUsage]


# --- what held ----------------------------------------------------------------------------------------------


class _Named(str):
    """A `str` subclass formatting as its value (it must be labelled as a plain name is)."""


_NAMES = st.one_of(
    st.sampled_from(['read_log', 'write_file', 'a(b', 'x:y', 'a b', ' lead ', '', '(', ':', 'édit', '名前', '\ud800']),
    st.text(max_size=8),
    st.builds(_Named, st.text(max_size=8)),
    st.just(ToolName.READ),
)


@settings(max_examples=EXAMPLES * 4, deadline=None)
@given(st.lists(st.tuples(_NAMES, st.sampled_from(['ok', '', _LOG, 'x' * 500]), st.booleans()), min_size=1, max_size=6))
def test_every_entry_is_labelled_by_the_head_of_its_line(calls: list[tuple[str, str, bool]]) -> None:
    """Whatever the tool name (odd characters, empty, unicode, a subclass), quick and plain readings alike."""
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1), write_tools='^write')
    history = _history(*(_exchange(step, name, text, second=two) for step, (name, text, two) in enumerate(calls)))
    entries = _entries(reset, history)
    assert entries
    assert all(label == _label_of(_head(line)) for _, line, _, label in entries)


def test_tool_names_past_the_kept_labels_are_labelled_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once 1,024 names are kept, a new name is labelled each time, the same way, and nothing more is kept."""
    full = {f'tool{index}': f'tool{index}' for index in range(reset_module._TOOL_LABELS_KEPT)}  # pyright: ignore[reportPrivateUsage]
    monkeypatch.setattr(reset_module, '_TOOL_LABELS', full)
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1))
    entries = _entries(reset, _history(_exchange(0, 'x:y', _LOG), _exchange(1, ' spaced ', 'ok')))
    assert [label for *_, label in entries] == ['x', 'x', 'spaced', 'spaced']
    assert len(full) == reset_module._TOOL_LABELS_KEPT  # pyright: ignore[reportPrivateUsage]


def _run(reset: ResetToCheckpoint[None], seed: int) -> Any:
    """A real run whose tools return odd results; what it wrote (timestamps aside)."""
    names = ['read_log', 'a(b', 'x:y', 'édit']
    step = [0]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step[0] += 1
        if step[0] > 8:
            return ModelResponse(parts=[TextPart('done')])
        name = names[(seed + step[0]) % len(names)]
        return ModelResponse(parts=[ToolCallPart(name, {'i': step[0]}, tool_call_id=f'c{step[0]}')])

    def result(i: int) -> str:
        breaks = ['\n', '\r\n', '\x85', '\u2028'][(seed + i) % 4]
        return breaks.join(['\t[12:00:01] GET / 200 ٣ ²'] * 40 + [f'INCIDENT {seed}-{i} ① owner=x' + 'y' * 300])

    tools = [Tool[None](result, name=name, takes_ctx=False) for name in names]
    agent = Agent(FunctionModel(respond), deps_type=type(None), tools=tools, capabilities=[reset])
    messages = agent.run_sync('Audit the logs.').all_messages()
    return [(type(p).__name__, getattr(p, 'content', None)) for m in messages for p in m.parts]


def _runs_into(reset: ResetToCheckpoint[None], seed: int, into: list[Any]) -> None:
    into.extend(_run(reset, seed) for _ in range(2))


def test_runs_in_threads_sharing_one_reset_write_what_runs_alone_write() -> None:
    """Several conversations compacted at once by one capability (its readings and the labels shared)."""
    seeds = range(4)
    alone = {seed: _run(ResetToCheckpoint[None](trigger=Trigger(tokens=600)), seed) for seed in seeds}
    assert all(any(kind == 'CompactionPart' for kind, _ in written) for written in alone.values())
    shared = ResetToCheckpoint[None](trigger=Trigger(tokens=600))
    got: dict[int, list[Any]] = {seed: [] for seed in seeds}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=_runs_into, args=(shared, seed, got[seed])) for seed in seeds]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert all(got[seed] == [alone[seed], alone[seed]] for seed in seeds)


def test_a_repeated_compaction_writes_the_same_checkpoint_from_a_fresh_reset() -> None:
    """The quick reading is not memoized for a short string result; a long one is: either way a second compaction
    of the same history by the same reset writes what a new reset writes."""
    history = _history(
        *(_exchange(step, ['read_log', 'x:y'][step % 2], ['ok', _LOG][step % 3 % 2]) for step in range(30))
    )
    cctx = _context()
    reset = ResetToCheckpoint[None](trigger=Trigger(tokens=1))
    first = asyncio.run(run_compaction(reset, history, cctx, min_saving=0.0))
    again = asyncio.run(run_compaction(reset, history, cctx, min_saving=0.0))
    fresh = asyncio.run(
        run_compaction(ResetToCheckpoint[None](trigger=Trigger(tokens=1)), history, cctx, min_saving=0.0)
    )
    assert isinstance(first, Outcome)
    assert _fingerprint(first) == _fingerprint(again) == _fingerprint(fresh)
    assert 'INCIDENT payments down owner=ops' in str(_fingerprint(first))
