"""Instruction sources: where instruction changes come from, for restating them verbatim.

Only two kinds of text are ever restated: what the user wrote (their prompts after the opening one),
and lines of tool output that start with a marker the user configured. Content a tool supplies as a
user-role part (`ToolReturn(content=...)`) is tool output, never a user prompt, and unmarked tool
output never counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai_harness.compaction import is_pinned

from pydantic_ai_compaction.protocols.metadata import record_extra, record_strings
from pydantic_ai_compaction.runtime.checks import ConfigurationError, check_instance
from pydantic_ai_compaction.runtime.segment import ConversationView, is_restatement, tool_content_parts
from pydantic_ai_compaction.runtime.transcript import return_text, user_text

_TIMESTAMP = re.compile(
    r'[ \t]*(?:'
    r'\[[^\]\n]{1,40}\]'  # [12:00:01], [2026-03-15 08:01:05]
    r'|\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?'  # ISO 8601 and close
    r'|\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?'  # 08:01:05
    r')[ \t]+'
)
"""An optional timestamp a log line may start with before its marker."""


@dataclass(frozen=True)
class InstructionSources:
    """Which texts count as instruction changes. Unmarked tool output never does.

    `markers` has no default on purpose: reading instructions from tool output is a decision about
    trust, so it is made explicitly. `InstructionSources(markers=())` restates only what the user
    wrote; `InstructionSources(markers=('CHANGE:',))` also restates tool-output lines that start with
    `CHANGE:` (after an optional timestamp), as in the seed study's logs.

    Example:
        ```python
        InstructionSources(markers=('CHANGE:', re.compile(r'POLICY CHANGE\\b')))
        ```
    """

    markers: Sequence[str | re.Pattern[str]]
    """A tool-output line is an instruction change when, after an optional leading timestamp, it starts with
    one of these strings or one of these patterns matches there. `()` reads no tool output at all."""

    user_prompts: bool = True
    """Treat every user prompt after the opening one as an instruction change (only text the user wrote:
    content a tool attached to its result is not a user prompt)."""

    _compiled: tuple[str | re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        markers: object = self.markers
        if isinstance(markers, str | bytes | bytearray) or not isinstance(markers, Iterable):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                'InstructionSources.markers must be a sequence of strings or compiled patterns (a bare string would '
                f'be split into one-character markers), got {markers!r}'
                + (f'; write markers=({markers!r},).' if isinstance(markers, str) else '.')  # pyright: ignore[reportUnnecessaryIsInstance]
            )
        items: list[str | re.Pattern[str]] = []
        for index, marker in enumerate(cast('Iterable[object]', markers)):
            if isinstance(marker, str):
                if not marker.strip():
                    raise ConfigurationError(
                        f'InstructionSources.markers must not contain empty strings: item {index} is {marker!r}.'
                    )
                items.append(marker.strip())
            elif isinstance(marker, re.Pattern):
                pattern = cast('re.Pattern[str]', marker)
                if not isinstance(pattern.pattern, str):  # pyright: ignore[reportUnnecessaryIsInstance]
                    raise ConfigurationError(
                        f'InstructionSources.markers[{index}] must be a str pattern, got {marker!r}.'
                    )
                items.append(pattern)
            else:
                raise ConfigurationError(
                    f'InstructionSources.markers[{index}] must be a string or a compiled pattern, got {marker!r} '
                    f'({type(marker).__name__}).'
                )
        check_instance('InstructionSources', 'user_prompts', self.user_prompts, bool, 'True or False')
        object.__setattr__(self, '_compiled', tuple(items))

    def marked(self, line: str) -> bool:
        """Whether a tool-output line starts with a marker (after an optional timestamp)."""
        if not self._compiled:
            return False
        rest = line_body(line)
        for marker in self._compiled:
            if isinstance(marker, str):
                if rest.startswith(marker) or line.lstrip().startswith(marker):
                    return True
            elif marker.match(rest) is not None or marker.match(line.lstrip()) is not None:
                return True
        return False


def line_body(line: str) -> str:
    """*line* without its leading whitespace and optional leading timestamp."""
    stamp = _TIMESTAMP.match(line)
    return line[stamp.end() :] if stamp else line.lstrip()


def tool_provided(message: ModelMessage, part: object) -> bool:
    """Whether *part* is a user-role part a tool supplied (`ToolReturn(content=...)`) rather than text the user wrote.

    *message* is the whole persisted request holding *part*; the runtime's `tool_content_parts` decides.
    """
    if not isinstance(part, UserPromptPart) or not isinstance(message, ModelRequest):
        return False
    index = next((i for i, other in enumerate(message.parts) if other is part), None)
    return index is not None and index in tool_content_parts(message)


def gather_instructions(view: ConversationView, sources: InstructionSources) -> tuple[str, ...]:
    """Every instruction change seen so far, oldest first, without repeats.

    Changes restated by earlier compactions come first (their originals may be gone), then user
    prompts after the opening one (not the one in progress, which the model reads anyway) and marked
    tool-output lines still in the history.
    """
    found: list[str] = []
    for record in view.records():
        found.extend(record_strings(record, 'restated'))
        found.extend(record_strings(record_extra(record), 'instructions'))
    owner = {
        id(part): message for message in view.messages if isinstance(message, ModelRequest) for part in message.parts
    }
    for exchange in view.exchanges:
        if exchange.kind in ('opening', 'boundary', 'restatement'):
            continue
        # The turn in progress is kept verbatim anyway: restating it would only repeat it.
        in_progress = exchange.unfinished or exchange.protected == 'current_turn'
        for message in view.messages_of(exchange):
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    found.extend(_marked_lines(return_text(part), sources))
                elif not isinstance(part, UserPromptPart) or is_restatement(part):
                    continue
                elif tool_provided(owner.get(id(part), message), part):
                    # Tool output in a user-role part: read like any tool output, never as the user's words.
                    found.extend(_marked_lines(user_text(part), sources))
                elif sources.user_prompts and not in_progress and not is_pinned(part):
                    text = user_text(part).strip()
                    if text:
                        found.append(text)
    return tuple(dict.fromkeys(found))


def _marked_lines(text: str, sources: InstructionSources) -> list[str]:
    return [line.strip() for line in text.splitlines() if sources.marked(line)] if sources.markers else []
