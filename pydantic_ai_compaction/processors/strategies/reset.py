"""`ResetToCheckpoint`: no model call; the history becomes g0, a checkpoint and the exchange in progress.

The default checkpoint is built by code, the way seed 004 describes its runtime checkpoint: what was
read, what was found in it, what was changed, the conversation so far (the user's requests and the
assistant's own answers), progress and the next step. "What was found" comes from a pluggable
extractor; the default keeps the lines of each result whose shape is rare in it (an incident among
request logs, an error among passing tests), which is where a task's facts usually are.

A checkpoint is never larger than what it replaces: when it would be, its oldest entries are folded
into counts, deterministically, the largest section first and the instruction changes last.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.metadata import ours, record_extra, str_dict
from pydantic_ai_compaction.protocols.names import WRITE_TOOLS
from pydantic_ai_compaction.protocols.types import Exchange, Proposal, Summary
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.checks import check_callable, check_instance, check_int, check_patterns
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.encoding import args_text, clean_text
from pydantic_ai_compaction.runtime.instructions import (
    InstructionSources,
    gather_instructions,
    line_body,
    tool_provided,
)
from pydantic_ai_compaction.runtime.segment import ConversationView, is_restatement
from pydantic_ai_compaction.runtime.transcript import clip, return_text, user_text

CheckpointFn = Callable[[RunContext[Any], ConversationView], str]
"""Renders the checkpoint from the run (typed state in `ctx.deps`) and the history."""

FactExtractor = Callable[[ToolCallPart, str], Sequence[str]]
"""Task-specific facts from one tool result: receives the call and the result's text, returns lines to carry."""

CHECKPOINT_HEADER = 'Checkpoint: the conversation so far was reset to this record, written by the runtime.'

SECTIONS = ('instructions', 'conversation', 'read', 'found', 'changed')
"""The checkpoint's sections, in the order they are rendered."""

_TITLES = {
    'instructions': 'Instruction changes (verbatim, latest last)',
    'conversation': 'Conversation so far (the user and your answers, oldest first)',
    'read': 'Read (tool calls completed)',
    'found': 'Found (facts in those results)',
    'changed': 'Changed (calls that wrote)',
}

_FOLD_ORDER = ('found', 'read', 'conversation', 'changed')
"""Sections folded first when the checkpoint is over its budget; instruction changes go last."""


def rare_lines(call: ToolCallPart, text: str, *, limit: int = 20) -> list[str]:
    """The default extractor: lines of a result whose shape is rare in it, in order, at most *limit*.

    A line's shape keeps its upper-case words and `key=` names and reduces everything else to a
    placeholder, so the hundreds of lines a log repeats share a few shapes and the handful of events
    among them (an `INCIDENT`, an `UPDATE`, a marked `CHANGE:` line) stand out.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    shapes = [_shape(line) for line in lines]
    counts = Counter(shapes)
    rare = max(2, len(lines) // 10)
    found = [line for line, shape in zip(lines, shapes, strict=True) if counts[shape] <= rare]
    if len(found) > limit:
        found = [*found[:limit], f'(+{len(found) - limit} more such lines)']
    return found


def _shape(line: str) -> tuple[str, ...]:
    tokens: list[str] = []
    for token in line_body(line).split()[:8]:
        if '=' in token:
            tokens.append(token.split('=', 1)[0] + '=')
        elif token.isalpha() and token.isupper():
            tokens.append(token)
        else:
            tokens.append('0' if any(ch.isdigit() for ch in token) else 'w')
    return tuple(tokens)


@dataclass
class ResetToCheckpoint(ConfiguredCompaction[AgentDepsT]):
    """Reset the history to the opening request plus a deterministic checkpoint.

    The default checkpoint carries what was read, what was found in it (through `extract`), what was
    changed, the user's requests and the assistant's own answers, every instruction change, progress and
    the next step. Earlier checkpoints' entries are carried over, so nothing recorded is forgotten at the
    next reset, and the checkpoint never grows beyond what it replaces. Pass `checkpoint=` to render your
    own typed state instead.

    Example:
        ```python
        def checkpoint(ctx: RunContext[AuditState], view) -> str:
            return ctx.deps.render()

        agent = Agent(model, deps_type=AuditState, capabilities=[ResetToCheckpoint(checkpoint=checkpoint)])
        ```
    """

    checkpoint: CheckpointFn | None = None
    """Custom renderer; `None` uses the deterministic default."""

    sources: InstructionSources = field(default_factory=lambda: InstructionSources(markers=()))
    """Instruction changes to list verbatim (default: the user's prompts after the opening one)."""

    extract: FactExtractor | None = None
    """What each tool result contributes under "Found"; `None` uses `rare_lines`."""

    excerpt_chars: int = 400
    """Results up to this many characters are carried whole under "Found" instead of through `extract`."""

    facts_per_result: int = 20
    """Lines the default extractor keeps per result."""

    answer_chars: int = 2_000
    """Characters of each user request or assistant answer carried verbatim (longer ones are clipped, marked)."""

    max_chars: int = 16_000
    """Upper bound on the checkpoint's length; it is also kept to about three quarters of what it replaces."""

    write_tools: str = WRITE_TOOLS
    """Regular expression over tool names whose calls changed something (listed under "Changed")."""

    _writes: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = 'ResetToCheckpoint'
        check_callable(owner, 'checkpoint', self.checkpoint)
        check_instance(owner, 'sources', self.sources, InstructionSources, 'an InstructionSources')
        check_callable(owner, 'extract', self.extract)
        check_int(owner, 'excerpt_chars', self.excerpt_chars, minimum=0)
        check_int(owner, 'facts_per_result', self.facts_per_result, minimum=1)
        check_int(owner, 'answer_chars', self.answer_chars, minimum=1)
        check_int(owner, 'max_chars', self.max_chars, minimum=200)
        (self._writes,) = check_patterns(owner, 'write_tools', (self.write_tools,))

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'reset'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Keep nothing but what the runtime forces; the checkpoint replaces the rest (earlier checkpoints included)."""
        if self.checkpoint is not None:
            text = self.checkpoint(ctx.run, view)
            return Proposal(summary=Summary(text), supersedes=self.strategy_name, variant='custom')
        sections, omitted = self.sections(view)
        # About three quarters of what it replaces (an estimated token is about four characters).
        budget = min(self.max_chars, self.replaced_tokens(view) * 3)
        sections, omitted = fold(sections, omitted, budget)
        text = render_checkpoint(sections, omitted, progress=self._progress(view, sections, omitted))
        return Proposal(
            summary=Summary(text),
            supersedes=self.strategy_name,
            variant='default',
            extra={'checkpoint': sections, 'omitted': omitted, 'instructions': sections['instructions']},
        )

    def replaced_tokens(self, view: ConversationView) -> int:
        """Estimated tokens the checkpoint stands in for: everything not forced, and our earlier checkpoints."""
        total = 0
        for exchange in view.exchanges:
            if not exchange.forced or (exchange.kind == 'boundary' and self._is_ours(view, exchange)):
                total += exchange.tokens
        return total

    def sections(self, view: ConversationView) -> tuple[dict[str, list[str]], dict[str, int]]:
        """The checkpoint's entries: those earlier checkpoints carried, then what the history adds."""
        sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
        omitted: dict[str, int] = dict.fromkeys(SECTIONS, 0)
        for record in view.records():
            if record.get('strategy') != self.strategy_name:
                continue
            extra = record_extra(record)
            carried = str_dict(extra.get('checkpoint'))
            for name in SECTIONS:
                sections[name].extend(_strings(carried.get(name)))
                count = str_dict(extra.get('omitted')).get(name)
                if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                    omitted[name] += count
            # Checkpoints written before sections existed: one line per completed call.
            sections['read'].extend(_strings(extra.get('checkpoint_entries')))
        extract: FactExtractor = self.extract or self._default_extract
        for exchange in view.exchanges:
            if exchange.forced:
                continue  # kept verbatim by the runtime: the opening, the turn in progress, pins
            if exchange.kind == 'tools':
                self._tool_entries(view, exchange, sections, extract)
            elif exchange.kind in ('turn', 'response'):
                sections['conversation'].extend(self._conversation(view, exchange))
        sections['instructions'] = [
            text for text in gather_instructions(view, self.sources) if f'user: {text}' not in sections['conversation']
        ]
        return {name: list(dict.fromkeys(lines)) for name, lines in sections.items()}, omitted

    def _tool_entries(
        self, view: ConversationView, exchange: Exchange, sections: dict[str, list[str]], extract: FactExtractor
    ) -> None:
        messages = view.messages_of(exchange)
        returns = {
            part.tool_call_id: part
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        }
        for message in messages:
            if not isinstance(message, ModelResponse):
                continue
            for part in message.parts:
                if isinstance(part, TextPart) and part.content.strip():
                    sections['conversation'].append('you: ' + self._clip(part.content))
                if not isinstance(part, ToolCallPart) or part.tool_call_id not in returns:
                    continue
                result = returns[part.tool_call_id]
                call = f'{part.tool_name}({clean_text(args_text(part.args))})'
                content = clean_text(return_text(result))
                entry = f'{call} → {result.outcome}, {len(content):,} chars'
                sections['changed' if self._writes.search(part.tool_name) else 'read'].append(entry)
                if result.outcome != 'success':
                    sections['found'].append(f'{call}: {clip(content, self.excerpt_chars or 200)}')
                    continue
                if len(content) <= self.excerpt_chars:
                    facts = [' '.join(content.split())] if content.strip() else []
                else:
                    facts = [str(line) for line in extract(part, content)]
                sections['found'].extend(f'{call}: {clean_text(fact)}' for fact in facts if fact.strip())

    def _default_extract(self, call: ToolCallPart, text: str) -> list[str]:
        return rare_lines(call, text, limit=self.facts_per_result)

    def _conversation(self, view: ConversationView, exchange: Exchange) -> list[str]:
        lines: list[str] = []
        for message in view.messages_of(exchange):
            for part in message.parts:
                if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                    if not is_restatement(part) and not tool_provided(message, part) and user_text(part).strip():
                        lines.append('user: ' + self._clip(user_text(part)))
                elif isinstance(part, TextPart) and part.content.strip():
                    lines.append('you: ' + self._clip(part.content))
        return lines

    def _clip(self, text: str) -> str:
        text = clean_text(text.strip())
        if len(text) <= self.answer_chars:
            return text
        return text[: self.answer_chars] + f'… [{len(text) - self.answer_chars:,} more chars]'

    def _progress(self, view: ConversationView, sections: dict[str, list[str]], omitted: dict[str, int]) -> str:
        calls = len(sections['read']) + len(sections['changed']) + omitted['read'] + omitted['changed']
        newest = _newest_call(view)
        answers = sum(1 for line in sections['conversation'] if line.startswith('you: '))
        lines = [
            f'Progress: {calls:,} tool call{"s" if calls != 1 else ""} completed'
            + (f' (the latest: {newest})' if newest else '')
            + (f'; {answers:,} of your earlier messages are listed above.' if answers else '.'),
            (
                'Next step: continue the request in progress from where the latest call left it; the calls under '
                'Read are done and their facts are under Found, so do not repeat them unless you need their exact '
                'output.'
            )
            if calls
            else 'Next step: answer the request in progress; the conversation above is what came before it.',
        ]
        return '\n'.join(lines)

    def _is_ours(self, view: ConversationView, exchange: Exchange) -> bool:
        for message in view.messages_of(exchange):
            for part in message.parts:
                record = ours(getattr(part, 'metadata', None))
                if record.get('strategy') == self.strategy_name:
                    return True
        return False


def _strings(value: object) -> list[str]:
    """Strings of a list read back from a record (anything else is ignored: records are read defensively)."""
    if not isinstance(value, list | tuple):
        return []
    return [item for item in value if isinstance(item, str)]  # pyright: ignore[reportUnknownVariableType]


def _newest_call(view: ConversationView) -> str | None:
    for exchange in reversed(view.exchanges):
        if exchange.kind != 'tools' or exchange.unfinished:
            continue
        for message in reversed(view.messages_of(exchange)):
            for part in reversed(message.parts):
                if isinstance(part, ToolCallPart):
                    return f'{part.tool_name}({clean_text(args_text(part.args))})'
    return None


def fold(
    sections: dict[str, list[str]], omitted: dict[str, int], budget: int
) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Sections whose rendering fits *budget* characters: oldest entries become counts, largest section first.

    Deterministic: the same sections and budget always fold the same way. Instruction changes are folded
    only when nothing else is left to fold.
    """
    sections = {name: list(lines) for name, lines in sections.items()}
    omitted = dict(omitted)
    sizes = {name: sum(len(line) + 3 for line in lines) for name, lines in sections.items()}
    # Titles, omission notes, header and the progress lines are about 900 characters at most.
    room = max(budget - 900, 0)
    while sum(sizes.values()) > room:
        candidates = [name for name in _FOLD_ORDER if sections[name]]
        name = max(candidates, key=lambda n: sizes[n]) if candidates else 'instructions'
        if not sections[name]:
            break
        dropped = sections[name].pop(0)
        sizes[name] -= len(dropped) + 3
        omitted[name] = omitted.get(name, 0) + 1
    return sections, omitted


def render_checkpoint(sections: dict[str, list[str]], omitted: dict[str, int], *, progress: str = '') -> str:
    """The default checkpoint text."""
    lines = [CHECKPOINT_HEADER]
    for name in SECTIONS:
        entries = sections.get(name) or []
        folded = omitted.get(name, 0)
        if not entries and not folded:
            continue
        lines.append(f'{_TITLES[name]}:')
        if folded:
            lines.append(f'- ({folded:,} earlier entries folded to fit; recall or re-read for their details)')
        lines.extend(f'- {entry}' for entry in entries)
    if progress:
        lines.append(progress)
    return '\n'.join(lines)
