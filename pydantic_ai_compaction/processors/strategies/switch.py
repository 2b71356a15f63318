"""`Switch`: pick a strategy per compaction from a small state (compactions so far, tokens, step)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import CompactionState, Proposal
from pydantic_ai_compaction.runtime.capability import CompactionCapability, RuntimeSettings
from pydantic_ai_compaction.runtime.checks import check_callable, check_instance
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView, compactions_so_far


@dataclass
class Switch(CompactionCapability[AgentDepsT]):
    """Use `then` while `when(state)` holds, `otherwise` after.

    Example (seed 004's untested hybrid: reassert+native on short horizons, fork on long ones):
        ```python
        changes = InstructionSources(markers=('CHANGE:',))
        Switch(when=lambda s: s.compactions < 3, then=Reassert(Native(), sources=changes), otherwise=Fork())
        ```
    """

    when: Callable[[CompactionState], bool]
    """Predicate over the state of the request being compacted."""

    then: CompactionCapability[AgentDepsT]
    """Strategy while the predicate holds. Its trigger's estimator measures the request."""

    otherwise: CompactionCapability[AgentDepsT]
    """Strategy when it does not."""

    def __post_init__(self) -> None:
        check_callable('Switch', 'when', self.when, optional=False, arguments=1)
        for name in ('then', 'otherwise'):
            check_instance('Switch', name, getattr(self, name), CompactionCapability, 'a compaction strategy')

    def children(self) -> tuple[CompactionCapability[AgentDepsT], ...]:
        """Both branches."""
        return (self.then, self.otherwise)

    @property
    def strategy_name(self) -> str:
        """`switch(<then>|<otherwise>)`."""
        return f'switch({self.then.strategy_name}|{self.otherwise.strategy_name})'

    @property
    def runtime(self) -> RuntimeSettings:
        """The `then` branch's settings (used to measure; the chosen branch's trigger decides)."""
        return self.then.runtime

    @property
    def uses_state(self) -> bool:
        """Always: the predicate reads it."""
        return True

    def resolve(self, state: CompactionState) -> CompactionCapability[AgentDepsT]:
        """The branch for *state*, itself resolved."""
        branch = self.then if self.when(state) else self.otherwise
        return branch.resolve(state)

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Delegate to the branch for the view's state (when driven directly)."""
        state = CompactionState(compactions_so_far(view.messages), view.tokens, ctx.run.run_step, len(view.messages))
        return await self.resolve(state).propose(view, ctx)
