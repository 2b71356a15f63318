"""`Pipeline`: several strategies in order, each with its own trigger, on the previous one's result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.types import Proposal
from pydantic_ai_compaction.runtime.capability import CompactionCapability, RuntimeSettings, is_ours
from pydantic_ai_compaction.runtime.checks import check_instance, fail
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView


@dataclass
class Pipeline(CompactionCapability[AgentDepsT]):
    """Run strategies one after another before each request; each fires only on its own trigger.

    A later step measures the history the earlier ones left (right after a compaction the stale
    usage anchor is ignored), so a cheap first step that brings the request under the limit spares
    the expensive second one. A pipeline is itself a compaction strategy: it can be a branch of
    `Switch` or be wrapped by `Reassert` or `Verified`, which then wrap each step.

    Example:
        ```python
        Pipeline([ResetToCheckpoint(trigger=Trigger(tokens=60_000)), Fork(trigger=Trigger(tokens=80_000))])
        ```
    """

    steps: Sequence[CompactionCapability[AgentDepsT]]
    """Strategies in the order they run."""

    def __post_init__(self) -> None:
        steps = cast('object', self.steps)
        if isinstance(steps, CompactionCapability | str) or not isinstance(steps, Sequence) or not steps:
            raise fail('Pipeline', 'steps', 'a non-empty list of compaction strategies', self.steps)
        for index, step in enumerate(cast('Sequence[object]', steps)):
            check_instance('Pipeline', f'steps[{index}]', step, CompactionCapability, 'a compaction strategy')

    @property
    def strategy_name(self) -> str:
        """`pipeline(<first>><second>...)`."""
        return f'pipeline({">".join(step.strategy_name for step in self.steps)})'

    def children(self) -> tuple[CompactionCapability[AgentDepsT], ...]:
        """The steps."""
        return tuple(self.steps)

    def each_wrapped(
        self, wrap: Callable[[CompactionCapability[AgentDepsT]], CompactionCapability[AgentDepsT]]
    ) -> CompactionCapability[AgentDepsT] | None:
        """The same pipeline of each step wrapped (`Reassert(Pipeline([a, b]))` runs as `Pipeline([Reassert(a),
        Reassert(b)])`): each still fires on its own trigger. `None` for a subclass of yours, which a copy may not
        rebuild: it is then wrapped as one strategy."""
        if not is_ours(self):
            return None
        return replace(self, steps=[wrap(step) for step in self.steps])

    @property
    def runtime(self) -> RuntimeSettings:
        """The first step's settings (what a wrapper such as `Reassert` triggers on)."""
        return self.steps[0].runtime

    async def maybe_compact(
        self,
        messages: list[ModelMessage],
        ctx: RunContext[Any],
        *,
        model: Model,
        model_settings: Any,
        parameters: ModelRequestParameters,
    ) -> list[ModelMessage] | None:
        """Every step whose trigger the history crosses, in order, each on the previous one's result."""
        changed = False
        for step in self.steps:
            compacted = await step.maybe_compact(
                messages, ctx, model=model, model_settings=model_settings, parameters=parameters
            )
            if compacted is not None:
                messages, changed = compacted, True
        return messages if changed else None

    async def compact(self, messages: list[ModelMessage], ctx: RunContext[AgentDepsT]) -> list[ModelMessage]:
        """Every step, unconditionally, in order (harness `CompactionStrategy` protocol)."""
        self.check_settings()  # before the steps are read (see `CompactionCapability.compact`)
        for step in self.steps:
            messages = await step.compact(messages, ctx)
        return messages

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """One proposal for one view (when wrapped or driven directly): the first step's that is usable.

        Steps are asked in order; a step that declines or fails hands over to the next, as a fallback
        chain. When none is usable, the last one's answer stands.
        """
        proposal = Proposal.decline('no step')
        for step in self.steps:
            proposal = await step.propose(view, ctx)
            if proposal.declined is None and proposal.malformed is None:
                return proposal
        return proposal
