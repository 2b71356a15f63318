"""`ResetToCheckpoint`: no model call; the history becomes g0, a checkpoint and the exchange in progress."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelRequest, ToolCallPart, ToolReturnPart
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.types import Proposal, Summary
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.encoding import to_json
from pydantic_ai_compaction.runtime.instructions import InstructionSources, gather_instructions
from pydantic_ai_compaction.runtime.segment import ConversationView, str_dict
from pydantic_ai_compaction.runtime.transcript import clip, return_text

CheckpointFn = Callable[[RunContext[Any], ConversationView], str]
"""Renders the checkpoint from the run (typed state in `ctx.deps`) and the history."""

CHECKPOINT_HEADER = 'Checkpoint: the conversation so far was reset to this record, written by the runtime.'


@dataclass
class ResetToCheckpoint(ConfiguredCompaction[AgentDepsT]):
    """Reset the history to the opening request plus a deterministic checkpoint.

    The default checkpoint lists every completed tool call (name, arguments, outcome and the start
    of its result) and every instruction change, carried over from earlier checkpoints, so nothing
    it recorded is forgotten at the next reset. Pass `checkpoint=` to render your own typed state.

    Example:
        ```python
        def checkpoint(ctx: RunContext[AuditState], view) -> str:
            return ctx.deps.render()

        agent = Agent(model, deps_type=AuditState, capabilities=[ResetToCheckpoint(checkpoint=checkpoint)])
        ```
    """

    checkpoint: CheckpointFn | None = None
    """Custom renderer; `None` uses the deterministic default."""

    sources: InstructionSources = field(default_factory=InstructionSources)
    """Instruction changes to include in the default checkpoint."""

    excerpt_chars: int = 300
    """Characters of each tool result the default checkpoint keeps."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.excerpt_chars < 0:
            raise ValueError(f'ResetToCheckpoint.excerpt_chars must not be negative, got {self.excerpt_chars!r}.')

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'reset'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Keep nothing but what the runtime forces; the checkpoint replaces the rest (earlier checkpoints included)."""
        if self.checkpoint is not None:
            text = self.checkpoint(ctx.run, view)
            return Proposal(summary=Summary(text), supersedes=self.strategy_name, variant='custom')
        entries = self.tool_entries(view)
        instructions = gather_instructions(view, self.sources)
        return Proposal(
            summary=Summary(render_checkpoint(entries, instructions)),
            supersedes=self.strategy_name,
            variant='default',
            extra={'checkpoint_entries': entries, 'instructions': list(instructions)},
        )

    def tool_entries(self, view: ConversationView) -> list[str]:
        """Entries of earlier checkpoints, then one line per completed tool call still in the history."""
        entries: list[str] = []
        for record in view.records():
            if record.get('strategy') == self.strategy_name:
                extra = str_dict(record.get('extra'))
                entries.extend(str(entry) for entry in extra.get('checkpoint_entries') or ())
        for exchange in view.exchanges:
            if exchange.unfinished or exchange.kind != 'tools':
                continue
            messages = view.messages_of(exchange)
            returns = {
                part.tool_call_id: part
                for message in messages
                if isinstance(message, ModelRequest)
                for part in message.parts
                if isinstance(part, ToolReturnPart)
            }
            for message in messages:
                for part in message.parts:
                    if isinstance(part, ToolCallPart) and part.tool_call_id in returns:
                        entries.append(self._entry(part, returns[part.tool_call_id]))
        return list(dict.fromkeys(entries))

    def _entry(self, call: ToolCallPart, result: ToolReturnPart) -> str:
        args = to_json(call.args_as_dict())
        content = return_text(result)
        excerpt = clip(content, self.excerpt_chars) if self.excerpt_chars else ''
        return f'{call.tool_name}({args}) → {result.outcome}, {len(content):,} chars: {excerpt}'.rstrip(': ')


def render_checkpoint(entries: list[str], instructions: tuple[str, ...]) -> str:
    """The default checkpoint text."""
    lines = [CHECKPOINT_HEADER]
    if instructions:
        lines.append('Instruction changes (verbatim, latest last):')
        lines.extend(f'- {text}' for text in instructions)
    lines.append(f'Completed tool calls ({len(entries)}):' if entries else 'Completed tool calls: none yet.')
    lines.extend(f'- {entry}' for entry in entries)
    return '\n'.join(lines)
