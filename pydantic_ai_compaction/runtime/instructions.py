"""Instruction sources: where instruction changes come from, for restating them verbatim."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai_harness.compaction import is_pinned

from pydantic_ai_compaction.runtime.segment import ConversationView, is_restatement, str_dict
from pydantic_ai_compaction.runtime.transcript import return_text, user_text


@dataclass(frozen=True)
class InstructionSources:
    """Which texts count as instruction changes. Unmarked tool output never does.

    Example:
        ```python
        InstructionSources(markers=('CHANGE:', re.compile(r'^POLICY CHANGE\\b')))
        ```
    """

    user_prompts: bool = True
    """Treat every user prompt after the opening one as an instruction change."""

    markers: Sequence[str | re.Pattern[str]] = field(default_factory=tuple[str | re.Pattern[str], ...])
    """A tool-output line is an instruction change when it contains one of these strings or matches one of
    these patterns."""

    def __post_init__(self) -> None:
        for marker in self.markers:
            if isinstance(marker, str) and not marker.strip():
                raise ValueError('InstructionSources.markers must not contain empty strings.')
            if not isinstance(marker, str | re.Pattern):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise TypeError(f'InstructionSources.markers takes strings or compiled patterns, got {marker!r}.')

    def marked(self, line: str) -> bool:
        """Whether a tool-output line carries a marker."""
        return any(
            (marker in line) if isinstance(marker, str) else marker.search(line) is not None for marker in self.markers
        )


def gather_instructions(view: ConversationView, sources: InstructionSources) -> tuple[str, ...]:
    """Every instruction change seen so far, oldest first, without repeats.

    Changes restated by earlier compactions come first (their originals may be gone), then user
    prompts after the opening one (not the one in progress, which the model reads anyway) and marked
    tool-output lines still in the history.
    """
    found: list[str] = []
    for record in view.records():
        found.extend(text for text in record.get('restated') or () if isinstance(text, str))
        extra = str_dict(record.get('extra'))
        found.extend(text for text in extra.get('instructions') or () if isinstance(text, str))
    for exchange in view.exchanges:
        if exchange.kind in ('opening', 'boundary', 'restatement'):
            continue
        for message in view.messages_of(exchange):
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                # The turn in progress is kept verbatim anyway: restating it would only repeat it.
                in_progress = exchange.unfinished or exchange.protected == 'current_turn'
                if isinstance(part, UserPromptPart) and sources.user_prompts and not in_progress:
                    if not is_restatement(part) and not is_pinned(part):
                        text = user_text(part).strip()
                        if text:
                            found.append(text)
                elif isinstance(part, ToolReturnPart) and sources.markers:
                    found.extend(line.strip() for line in return_text(part).splitlines() if sources.marked(line))
    return tuple(dict.fromkeys(found))
