"""The plain tool-loop reading of a history never seen and the instruction gathering's shortcut."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

from pydantic_ai_compaction import InstructionSources
from pydantic_ai_compaction.runtime.instructions import gather_instructions
from pydantic_ai_compaction.runtime.segment import segment


@dataclass(frozen=True)
class AnyCaseSources(InstructionSources):
    """Reads marked lines whatever their case: `lines_in` is public, and a subclass may read lines its own way."""

    def lines_in(self, text: str) -> tuple[str, ...]:
        return tuple(line.strip() for line in text.splitlines() if line.strip().lower().startswith('change:'))


def test_a_subclass_reading_lines_its_own_way_is_called_for_every_result() -> None:
    # The marker's first character ('C') is in none of these results: the shortcut before `lines_in` skipped
    # them, so the subclass's lines were lost (before the shortcut it found all three).
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Audit the logs.')])]
    for step in range(3):
        history.append(ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id=f'c{step}')]))
        result = ToolReturnPart('read', f'ok\nchange: rule {step}', tool_call_id=f'c{step}')
        history.append(ModelRequest(parts=[result]))
    found = gather_instructions(segment(history), AnyCaseSources(markers=('CHANGE:',)))
    assert found == ('change: rule 0', 'change: rule 1', 'change: rule 2')
    # The plain class still reads only what its markers start.
    assert gather_instructions(segment(history), InstructionSources(markers=('CHANGE:',))) == ()


class _AuditReturn(ToolReturnPart):
    """A `ToolReturnPart` subclass: the plain reading takes only the class itself."""


def _step(call_ids: list[str], returns: list[ToolReturnPart] | None = None) -> list[ModelMessage]:
    response = ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id=call_id) for call_id in call_ids])
    answered = returns if returns is not None else [ToolReturnPart('read', 'ok', tool_call_id=c) for c in call_ids]
    return [response, ModelRequest(parts=list(answered))]


def _odd_loops() -> dict[str, list[ModelMessage]]:
    opening: ModelMessage = ModelRequest(parts=[UserPromptPart('Audit the logs.')])
    repeated = _step(['r'])
    split_response, split_first = _step(['a', 'b'], [ToolReturnPart('read', 'a', tool_call_id='a')])
    return {
        'ids reused across steps': [opening, *_step(['same']), *_step(['same']), *_step(['same']), *_step(['same'])],
        'returns reversed': [
            opening,
            *_step(
                ['a', 'b'],
                [ToolReturnPart('read', 'b', tool_call_id='b'), ToolReturnPart('read', 'a', tool_call_id='a')],
            ),
            *_step(['c']),
            *_step(['d']),
        ],
        'answered across two requests': [
            opening,
            *_step(['x']),
            split_response,
            split_first,
            *_step(['c']),
            ModelResponse(parts=[ToolCallPart('read', {}, tool_call_id='d')]),
            ModelRequest(
                parts=[ToolReturnPart('read', 'd', tool_call_id='d'), ToolReturnPart('read', 'b', tool_call_id='b')]
            ),
        ],
        'subclass and outcomes': [
            opening,
            *_step(['a']),
            *_step(['b'], [ToolReturnPart('read', 'no', tool_call_id='b', outcome='failed')]),
            *_step(['c'], [ToolReturnPart('read', 'no', tool_call_id='c', outcome='denied')]),
            *_step(['d'], [_AuditReturn('read', 'ok', tool_call_id='d')]),
            *_step(['e']),
        ],
        'the same objects twice': [opening, *_step(['q']), *repeated, *repeated, *repeated],
    }


def test_odd_plain_loops_segment_as_the_reference_cold_grown_truncated_and_replaced() -> None:
    from .segment_reference import segment_fresh as reference_fresh
    from .test_segment_cold import as_reference, fresh

    for name, history in _odd_loops().items():
        for cut in range(1, len(history) + 1):
            prefix = history[:cut]
            as_reference(segment(prefix), reference_fresh(fresh(prefix)))
            as_reference(segment(tuple(prefix)), reference_fresh(fresh(prefix)))
        truncated = history[: len(history) // 2]
        as_reference(segment(truncated), reference_fresh(fresh(truncated)))
        replaced = [*history[:3], *fresh(_odd_loops()['ids reused across steps'][1:])]
        as_reference(segment(replaced), reference_fresh(fresh(replaced)))
        view = segment(fresh(history))
        assert [e.id for e in view.exchanges][:2] == ['g0', 'g1'], name
