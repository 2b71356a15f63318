"""`NoCompaction`: the baseline. It never changes the history and records every crossing it ignores."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import Proposal
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView


@dataclass
class NoCompaction(ConfiguredCompaction[AgentDepsT]):
    """Leave the history whole; emit an `ignored` event each time the trigger is crossed.

    Example:
        ```python
        events = []
        agent = Agent(model, capabilities=[NoCompaction(trigger=Trigger(tokens=18_000), observer=events.append)])
        ```
    """

    @property
    def strategy_name(self) -> str:
        """Name recorded in events and reports."""
        return 'none'

    @property
    def acts_on_crossing(self) -> bool:
        """Never: crossings are only recorded."""
        return False

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Decline: the baseline leaves every history as it is, even when driven directly (`replay`)."""
        del view, ctx
        return Proposal.decline('baseline')
