"""`Pipeline`: several strategies in order, each with its own trigger, on the previous one's result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, cast

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.runtime.capability import CompactionCapability
from pydantic_ai_compaction.runtime.checks import check_instance, fail

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext


@dataclass
class Pipeline(AbstractCapability[AgentDepsT]):
    """Run strategies one after another before each request; each fires only on its own trigger.

    A later step measures the history the earlier ones left (right after a compaction the stale
    usage anchor is ignored), so a cheap first step that brings the request under the limit spares
    the expensive second one.

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

    async def before_model_request(
        self,
        ctx: RunContext[AgentDepsT],
        request_context: ModelRequestContext,
    ) -> ModelRequestContext:
        """Run every step whose trigger the current history crosses (on the persisted history)."""
        messages = list(ctx.messages)
        changed = False
        for step in self.steps:
            compacted = await step.maybe_compact(
                messages,
                ctx,
                model=request_context.model,
                model_settings=request_context.model_settings,
                parameters=request_context.model_request_parameters,
            )
            if compacted is not None:
                messages, changed = compacted, True
        if not changed:
            return request_context
        ctx.messages[:] = messages
        return replace(request_context, messages=list(messages))

    async def compact(self, messages: list[ModelMessage], ctx: RunContext[AgentDepsT]) -> list[ModelMessage]:
        """Every step, unconditionally, in order (harness `CompactionStrategy` protocol)."""
        for step in self.steps:
            messages = await step.compact(messages, ctx)
        return messages
