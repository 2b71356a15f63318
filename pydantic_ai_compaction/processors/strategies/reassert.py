"""`Reassert`: after any compaction, restate every instruction change verbatim before the current exchange.

A model that still *knows* a changed rule after compaction does not always *apply* it (seed study:
9 of 15 failed native runs broke a rule they could recite). Restating the change next to the work
in progress is cheap and closes most of that gap.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import Proposal
from pydantic_ai_compaction.runtime.capability import CompactionCapability, WrappingCompaction
from pydantic_ai_compaction.runtime.checks import ConfigurationError, check_instance, check_int
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.instructions import InstructionSources, gather_instructions
from pydantic_ai_compaction.runtime.segment import ConversationView
from pydantic_ai_compaction.runtime.transcript import before_cut, cut_to


@dataclass
class Reassert(WrappingCompaction[AgentDepsT]):
    """Wrap any strategy; its compactions also restate instruction changes verbatim.

    The restatement replaces the previous one (never duplicates it) and carries changes whose
    original text an earlier compaction removed. Only user prompts after the first and tool-output
    lines that start with a configured marker count: unmarked text is never restated, and content a
    tool attached to its result is never taken for the user's words.

    `sources` is required: in the seed study the changes arrived in tool output behind a marker, and
    reading tool output is a decision about trust the user makes explicitly.

    Example:
        ```python
        agent = Agent(model, capabilities=[Reassert(Native(trigger=Trigger(fraction=0.5)),
                                                    sources=InstructionSources(markers=('CHANGE:',)))])
        ```
    """

    inner: CompactionCapability[AgentDepsT]
    """The strategy that compacts; its trigger and settings apply."""

    sources: InstructionSources | None = None
    """Which texts count as instruction changes. Required: `InstructionSources(markers=('CHANGE:',))` restates
    marked tool-output lines too (the seed study's setup), `InstructionSources(markers=())` only user prompts."""

    change_chars: int = 2_000
    """Characters of each instruction change restated verbatim; a longer one is cut there and says how much more it
    had. A marked line can be anything a tool printed (a whole JSON record on one line): restated whole at every
    compaction, it alone could hold the context over its trigger, and every request would compact again."""

    def __post_init__(self) -> None:
        check_instance('Reassert', 'inner', self.inner, CompactionCapability, 'a compaction strategy')
        check_int('Reassert', 'change_chars', self.change_chars, minimum=1)
        if self.sources is None:
            raise ConfigurationError(
                "Reassert.sources is required: pass sources=InstructionSources(markers=('CHANGE:',)) to restate "
                'tool-output lines that start with a marker (how the seed study delivered instruction changes), or '
                'sources=InstructionSources(markers=()) to restate only what the user wrote.'
            )
        check_instance('Reassert', 'sources', self.sources, InstructionSources, 'an InstructionSources')

    @property
    def strategy_name(self) -> str:
        """`reassert+<inner>`."""
        return f'reassert+{self.inner.strategy_name}'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """The inner proposal plus the instruction changes to restate."""
        assert self.sources is not None  # checked at construction
        gathered = gather_instructions(view, self.sources)
        # A change restated earlier comes back from its record as it was cut, beside its original text: cut alike,
        # the two are one. One cut shorter (`change_chars` raised since) is the start of the other, which says more.
        # Each at its latest place, as `gather_instructions` orders them: a rule set back to its earlier wording last.
        cut = list(reversed(dict.fromkeys(reversed([cut_to(text, self.change_chars) for text in gathered]))))
        starts = [before_cut(text) for text in cut]
        restate = tuple(
            text
            for text, start in zip(cut, starts, strict=True)
            if start == text or not any(other != start and other.startswith(start) for other in starts)
        )
        proposal = await self.inner.propose(view, ctx)
        extra: dict[str, Any] = dict(proposal.extra)
        return replace(proposal, restate=restate, extra=extra)
