"""A note is restated once, by the boundary that drops its last verbatim copy, and kept in place after.

Real `Agent` runs with `Notes`: every request shows every note written so far exactly once (as the agent's own
`note` call, or in one boundary's notes section), so nothing the agent wrote is lost and nothing is written twice.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import Notes, ResetToCheckpoint, StatelessSummary, Trigger
from pydantic_ai_compaction.protocols.metadata import METADATA_KEY, record_extra, record_strings
from pydantic_ai_compaction.runtime import our_record
from pydantic_ai_compaction.runtime.notes import NOTES_HEADER, gather_notes_fresh, notes_in_place, with_notes
from pydantic_ai_compaction.runtime.segment import segment

from .support import log_text

Step = tuple[str, int]
"""One scripted agent step: `('note', n)` writes note n, `('read', n)` reads log n, `('say', n)` answers in text."""


def _note_text(index: int) -> str:
    return f'log {index} holds threshold={index * 7}; keep it'


def _run(
    steps: list[Step],
    capabilities: list[Any],
    history: list[ModelMessage] | None = None,
    prompt: str = 'Go.',
) -> tuple[list[list[ModelMessage]], list[str], list[ModelMessage]]:
    """Run *steps* (then a final answer) from *history*; return every request the model saw, the notes written,
    the whole history."""
    seen: list[list[ModelMessage]] = []
    written: list[str] = []
    queue = iter(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        text = ' '.join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        if 'summar' in text.lower() and prompt not in text:
            return ModelResponse(parts=[TextPart('Progress: reading logs.\nNext step: read the next log.')])
        seen.append(list(messages))
        step = next(queue, None)
        if step is None:
            return ModelResponse(parts=[TextPart('done')])
        kind, index = step
        if kind == 'note':
            written.append(f'[fact] {_note_text(index)}')
            return ModelResponse(parts=[ToolCallPart('note', {'kind': 'fact', 'text': _note_text(index)})])
        if kind == 'say':
            return ModelResponse(parts=[TextPart(f'log {index} read'), ToolCallPart('read_log', {'index': index})])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': index})])

    agent = Agent(FunctionModel(respond), capabilities=capabilities)

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_text(index, lines=60)

    # `asyncio.run` closes its loop: a loop `run_sync` leaves set would be reported unclosed in a later test.
    result = asyncio.run(agent.run(prompt, message_history=history))
    return seen, written, result.all_messages()


def _shown(messages: list[ModelMessage]) -> Counter[str]:
    """Every note a request shows verbatim: the agent's `note` calls, and each line of a boundary's notes section."""
    shown = Counter[str]()
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_name == 'note':
                args = part.args_as_dict()
                shown[f'[{args["kind"]}] {args["text"]}'] += 1
            elif isinstance(part, CompactionPart) and part.content and NOTES_HEADER in part.content:
                section = part.content.split(NOTES_HEADER, 1)[1]
                shown.update(line[2:] for line in section.splitlines() if line.startswith('- '))
    return shown


def _check_every_request(seen: list[list[ModelMessage]], written: list[str]) -> None:
    notes_so_far: list[str] = []
    for messages in seen:
        shown = _shown(messages)
        # A note shown before stays shown: the requests only ever add notes, never lose one.
        assert set(notes_so_far) <= set(shown), set(notes_so_far) - set(shown)
        notes_so_far = list(shown)
        # ...and each once: never restated while a verbatim copy is kept.
        assert all(count == 1 for count in shown.values()), shown
    assert set(notes_so_far) <= set(written)


def _steps(count: int) -> list[Step]:
    return [('note', n) if n % 3 == 0 else ('read', n) for n in range(count)]


def test_appended_checkpoints_restate_each_note_once_and_keep_the_earlier_ones_byte_identical() -> None:
    seen, written, history = _run(_steps(24), [Notes(), ResetToCheckpoint(trigger=Trigger(tokens=1_500))])
    boundaries = [part for message in history for part in message.parts if isinstance(part, CompactionPart)]
    assert len(boundaries) >= 4
    _check_every_request(seen, written)
    # Every note written is in the final history once: none lost, none restated twice.
    assert _shown(history) == Counter(written)
    restated = [record_strings(record_extra(our_record(part) or {}), 'notes') for part in boundaries]
    assert sum(map(len, restated)) == len(set(note for notes in restated for note in notes))
    assert any(len(notes) == 1 for notes in restated)
    # The checkpoints before the newest one are sent as they were first sent (a prompt cache still holds them).
    first: dict[int, str | None] = {}
    for messages in seen:
        parts = [p for m in messages for p in m.parts if isinstance(p, CompactionPart)]
        for at, part in enumerate(parts):
            assert first.setdefault(at, part.content) == part.content


def test_a_rewrite_of_every_checkpoint_restates_the_notes_the_checkpoints_it_replaces_held() -> None:
    seen, written, history = _run(
        _steps(30), [Notes(), ResetToCheckpoint(trigger=Trigger(tokens=1_500), max_chars=1_200)]
    )
    records = [r for m in history for p in m.parts if (r := our_record(p)) is not None]
    assert any(record_extra(r).get('rewrote') for r in records), 'the small max_chars forces a rewrite'
    _check_every_request(seen, written)
    assert _shown(history) == Counter(written)


def test_a_summary_boundary_restates_only_the_notes_the_layout_does_not_keep() -> None:
    steps: list[Step] = [('note' if n in (0, 3, 9) else 'read', n) for n in range(14)]
    seen, written, history = _run(steps, [Notes(), StatelessSummary(trigger=Trigger(tokens=1_500), keep_last=2)])
    records = [r for m in history for p in m.parts if (r := our_record(p)) is not None]
    assert records and len(written) == 3
    _check_every_request(seen, written)
    assert _shown(history) == Counter(written)


def test_the_agents_own_text_is_not_a_note_and_notes_beside_it_are_kept() -> None:
    steps: list[Step] = [('note', 0), ('say', 1), ('say', 2), ('note', 3), ('say', 4), ('read', 5), ('say', 6)]
    seen, written, history = _run(steps, [Notes(), ResetToCheckpoint(trigger=Trigger(tokens=1_500))])
    _check_every_request(seen, written)
    assert _shown(history) == Counter(written)
    assert written == [f'[fact] {_note_text(0)}', f'[fact] {_note_text(3)}']


def _boundary(text: str, notes: list[str], *, shown: bool) -> ModelRequest:
    record = {'strategy': 'reset', 'boundary_id': 'g9', 'extra': {'notes': notes}}
    content = with_notes(text, notes) if shown else text
    return ModelRequest(parts=[CompactionPart(content=content, metadata={METADATA_KEY: record})])


def test_a_kept_boundary_holds_its_notes_only_when_its_text_shows_them() -> None:
    """A provider's opaque summary lists the notes in its record but shows none: the next boundary restates them."""
    notes = ['[fact] a', '[decision] b']
    for shown, held in ((True, set(notes)), (False, set[str]())):
        history: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart('Go.')]),
            _boundary('Earlier work.', notes, shown=shown),
            ModelResponse(parts=[ToolCallPart('read_log', {'index': 1}, tool_call_id='c1')]),
            ModelRequest(parts=[ToolReturnPart('read_log', 'log 1', tool_call_id='c1')]),
        ]
        view = segment(history, prompt='Go.')
        assert gather_notes_fresh(view) == notes
        assert notes_in_place(view, view.ids) == held
        assert notes_in_place(view, ()) == set()


def test_a_note_that_another_notes_text_contains_is_not_held_by_it() -> None:
    """Held means listed as an item of a shown section: `[fact] a` inside `[fact] a and b` is not `[fact] a`."""
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Go.')]),
        _boundary('Earlier work.', ['[fact] a and b'], shown=True),
        ModelResponse(parts=[ToolCallPart('note', {'kind': 'fact', 'text': 'a'}, tool_call_id='n1')]),
        ModelRequest(parts=[ToolReturnPart('note', 'Noted.', tool_call_id='n1')]),
    ]
    view = segment(history, prompt='Go.')
    boundary, call = view.exchanges[1], view.exchanges[2]
    assert notes_in_place(view, (boundary.id,)) == {'[fact] a and b'}
    assert notes_in_place(view, (call.id,)) == {'[fact] a'}


_EXAMPLES = int(os.environ.get('PAC_EXAMPLES', '8'))


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(['note', 'read', 'read', 'say']), min_size=4, max_size=22),
    trigger=st.sampled_from([900, 1_500, 2_500]),
    max_chars=st.sampled_from([900, 2_000, 16_000]),
)
def test_every_request_shows_every_note_written_so_far_once(kinds: list[str], trigger: int, max_chars: int) -> None:
    steps: list[Step] = [(kind, n) for n, kind in enumerate(kinds)]
    seen, written, history = _run(
        steps, [Notes(), ResetToCheckpoint(trigger=Trigger(tokens=trigger), max_chars=max_chars)]
    )
    _check_every_request(seen, written)
    assert _shown(history) == Counter(written)
