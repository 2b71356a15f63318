"""The protocol a compaction strategy implements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pydantic_ai_compaction.protocols.types import Proposal
    from pydantic_ai_compaction.runtime.context import CompactionContext
    from pydantic_ai_compaction.runtime.segment import ConversationView


@runtime_checkable
class Strategy(Protocol):
    """Proposes a layout for a history. It never edits messages: the runtime validates and applies."""

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records and reports."""
        ...

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Suggest which exchanges stay and what replaces the rest.

        Args:
            view: The segmented history (exchange ids, protected and unfinished flags, sizes).
            ctx: Model access, usage accounting and retry policy for any model call.
        """
        ...
