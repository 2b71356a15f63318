"""`KeepWithin`: keep recent exchanges by a token or message budget, and summarize only the rest.

`StatelessSummary.keep_last` and `Fork.keep_last` count exchanges. The agents the presets reproduce
budget what stays verbatim differently: Codex by tokens of user messages, pi and OpenCode by tokens of
the newest turns, Gemini CLI by a share of the history, OpenHands by events at both ends. `KeepWithin`
marks those exchanges protected in the view its inner strategy reads, so the inner strategy neither
summarizes nor drops them, and adds them to the proposal's keep list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import Exchange, Proposal
from pydantic_ai_compaction.runtime.capability import CompactionCapability, WrappingCompaction
from pydantic_ai_compaction.runtime.checks import (
    ConfigurationError,
    check_instance,
    check_int,
    check_optional_int,
    check_optional_number,
)
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView

KEPT_BY_BUDGET = 'predicate'
"""Protection reason the inner strategy sees on the exchanges `KeepWithin` keeps (as if a user predicate kept them)."""


@dataclass
class KeepWithin(WrappingCompaction[AgentDepsT]):
    """Keep the newest exchanges within a budget verbatim; the inner strategy summarizes what is left.

    Example (pi: the newest 20,000 tokens stay, cut at exchange boundaries):
        ```python
        KeepWithin(StatelessSummary(trigger=Trigger(tokens=183_616)), recent_tokens=20_000)
        ```
    """

    inner: CompactionCapability[AgentDepsT]
    """The strategy that summarizes what the budgets leave; its trigger and runtime settings apply."""

    recent_tokens: int | None = None
    """Keep the newest finished exchanges whose estimated tokens fit in this budget (whole exchanges only)."""

    recent_share: float | None = None
    """Keep the newest finished exchanges within this share of the history's estimated tokens, in (0, 1)."""

    recent_messages: int | None = None
    """Keep the newest finished exchanges whose messages fit in this count."""

    user_tokens: int | None = None
    """Keep the newest user turns (exchanges holding a user prompt) within this many estimated tokens."""

    first: int = 0
    """Keep the first this many finished exchanges after the opening (OpenHands' `keep_first`)."""

    def __post_init__(self) -> None:
        check_instance('KeepWithin', 'inner', self.inner, CompactionCapability, 'a compaction strategy')
        check_optional_int('KeepWithin', 'recent_tokens', self.recent_tokens, minimum=0)
        check_optional_number(
            'KeepWithin', 'recent_share', self.recent_share, minimum=0, maximum=1, exclusive_minimum=True
        )
        if self.recent_share is not None and self.recent_share >= 1:
            raise ConfigurationError(f'KeepWithin.recent_share must be below 1, got {self.recent_share!r}.')
        check_optional_int('KeepWithin', 'recent_messages', self.recent_messages, minimum=0)
        check_optional_int('KeepWithin', 'user_tokens', self.user_tokens, minimum=0)
        check_int('KeepWithin', 'first', self.first, minimum=0)

    @property
    def strategy_name(self) -> str:
        """The inner strategy's name: the budget changes what it reads, not what it is."""
        return self.inner.strategy_name

    def kept(self, view: ConversationView) -> tuple[str, ...]:
        """Ids of the finished exchanges the budgets keep, in history order."""
        finished = [exchange for exchange in view.exchanges if not exchange.forced]
        chosen: set[str] = {exchange.id for exchange in finished[: self.first]}
        if self.recent_tokens is not None:
            chosen |= _newest(finished, self.recent_tokens, lambda e: e.tokens)
        if self.recent_share is not None:
            chosen |= _newest(finished, int(self.recent_share * view.tokens), lambda e: e.tokens)
        if self.recent_messages is not None:
            chosen |= _newest(finished, self.recent_messages, lambda e: len(e.refs))
        if self.user_tokens is not None:
            turns = [exchange for exchange in finished if exchange.kind == 'turn']
            chosen |= _newest(turns, self.user_tokens, lambda e: e.tokens)
        return tuple(exchange.id for exchange in finished if exchange.id in chosen)

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """The inner proposal on a view where the kept exchanges are protected, with them added to `keep`."""
        kept = self.kept(view)
        if not kept:
            return await self.inner.propose(view, ctx)
        keep = set(kept)
        narrowed = replace(
            view,
            exchanges=tuple(
                replace(exchange, protected=KEPT_BY_BUDGET) if exchange.id in keep else exchange
                for exchange in view.exchanges
            ),
        )
        if all(exchange.forced for exchange in narrowed.exchanges):
            return Proposal.decline('every finished exchange is within the kept budget')
        proposal = await self.inner.propose(narrowed, ctx)
        if proposal.malformed is not None or proposal.declined is not None:
            return proposal
        extra = {**proposal.extra, 'kept_by_budget': list(kept)}
        return replace(proposal, kept=tuple(dict.fromkeys([*proposal.kept, *kept])), extra=extra)


def _newest(exchanges: list[Exchange], budget: int, measure: Callable[[Exchange], int]) -> set[str]:
    """The newest *exchanges* whose sizes add up to at most *budget* (stopping at the first that does not fit)."""
    chosen: set[str] = set()
    used = 0
    for exchange in reversed(exchanges):
        cost = int(measure(exchange))
        if used + cost > budget:
            break
        chosen.add(exchange.id)
        used += cost
    return chosen
