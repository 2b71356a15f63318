"""What a strategy is given (the view and a context: model access, accounting, retries), and what it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from pydantic_ai_compaction.protocols.types import CompactorUsage, Proposal
from pydantic_ai_compaction.runtime.retry import RetryPolicy
from pydantic_ai_compaction.runtime.segment import ConversationView


@dataclass
class CompactionContext:
    """Everything a strategy may use to build a proposal."""

    run: RunContext[Any]
    """The agent run's context (deps, usage, tracer, run step)."""

    model: Model
    """The model the request being compacted is going to."""

    model_settings: ModelSettings | None
    """That request's settings."""

    parameters: ModelRequestParameters
    """That request's tool definitions, output mode and instruction parts."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How model calls made for compaction are retried."""

    usage: CompactorUsage = field(default_factory=CompactorUsage)
    """Usage of the model calls made for this compaction (also added to the run's usage)."""

    trigger_tokens: int | None = None
    """What the trigger measured, or `None` when compaction was forced (`compact`, `replay`)."""


def for_request(ctx: RunContext[Any], request_context: ModelRequestContext, retry: RetryPolicy) -> CompactionContext:
    """The compaction context of a `before_model_request` hook: the request's model, settings and parameters."""
    return CompactionContext(
        run=ctx,
        model=request_context.model,
        model_settings=request_context.model_settings,
        parameters=request_context.model_request_parameters,
        retry=retry,
    )


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
