"""Review of the plain tool-loop reading of a history never seen and the instruction gathering's shortcut."""

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
