"""`replay_views`: what a view capability would send at each checkpoint of a recorded history (seed 003).

Seed 003 compared context conditions by *teacher-forced replay*: at each eligible checkpoint of a
recorded conversation, each condition builds its request from the same recorded prefix and the exact
recorded user message; the recorded answer is withheld from generation and kept as evidence, and
the generated answer is never fed into the next checkpoint. A checkpoint was eligible when it began
with a textual user message, its recorded response episode held non-empty assistant text and no tool
call or result (answer-only), the prior history held at least 30,000 estimated tokens, and the whole
request at most 250,000. Budgets of 5,000, 10,000 and 20,000 tokens calibrated the bounded conditions.

`replay_views` runs a real `Agent` per checkpoint (and budget) with the capability under test, so
whatever the capability does on a live request (selection, curation, orientation, Tiered, forgetting
reasoning) is what is measured, its own model calls included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage, RunUsage

from pydantic_ai_compaction.runtime.checks import check_int
from pydantic_ai_compaction.runtime.instructions import tool_provided
from pydantic_ai_compaction.runtime.segment import is_restatement, message_tokens
from pydantic_ai_compaction.runtime.transcript import user_text
from pydantic_ai_compaction.testing.replay import load_history

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

BUDGET_PRESETS = (5_000, 10_000, 20_000)
"""Seed 003's history budgets: 10,000 for the primary matrix, 5,000 and 20,000 for calibration."""

MIN_PRIOR_TOKENS = 30_000
"""A checkpoint's prior history holds at least this many estimated tokens (seed 003)."""

MAX_TOTAL_TOKENS = 250_000
"""A checkpoint's whole request (system prompt, prior history, user message) holds at most this many (seed 003)."""

CapabilityFactory = Callable[[int], AbstractCapability[Any]]
"""Builds the capability for one budget (`lambda budget: BoundedSelection(budget=budget)`)."""


@dataclass(frozen=True)
class Checkpoint:
    """An answer-only point of a recorded history where a request can be replayed."""

    index: int
    """Index of the user's request in the recorded history."""

    request: str
    """The user's message, exactly as recorded."""

    recorded_answer: str
    """The recorded assistant answer: withheld from generation, kept as evidence."""

    prior_tokens: int
    """Estimated tokens of everything before the request."""

    total_tokens: int
    """Estimated tokens of the prior history plus the request."""


@dataclass(frozen=True)
class ViewReplay:
    """What one capability sent at one checkpoint (and budget), and what it cost."""

    checkpoint: Checkpoint
    """Where in the recorded history this is."""

    budget: int | None
    """The budget the capability was built for, or `None` for a fixed capability."""

    sent: list[ModelMessage]
    """The messages of the answer request, after every capability's view."""

    sent_tokens: int
    """Their estimated tokens."""

    answer: str
    """The text the model answered with."""

    answer_usage: RequestUsage
    """Usage of the answer request alone."""

    auxiliary_usage: RunUsage
    """Usage of the capability's own model calls (a curator, a handoff note): the pipeline's extra cost."""


def checkpoints(
    history: Sequence[ModelMessage] | str | bytes | Path,
    *,
    min_prior_tokens: int = MIN_PRIOR_TOKENS,
    max_total_tokens: int = MAX_TOTAL_TOKENS,
) -> list[Checkpoint]:
    """The answer-only checkpoints of a recorded history, by seed 003's eligibility rules.

    A request qualifies when it holds text the user wrote (not only tool content), the response
    episode that follows it (up to the next user request) holds non-empty assistant text and no tool
    call or result, the history before it is at least *min_prior_tokens* and the whole at most
    *max_total_tokens* estimated tokens.
    """
    check_int('checkpoints', 'min_prior_tokens', min_prior_tokens, minimum=0)
    check_int('checkpoints', 'max_total_tokens', max_total_tokens, minimum=1)
    messages = load_history(history)
    tokens = [message_tokens(message) for message in messages]
    starts = [index for index, message in enumerate(messages) if _user_request(message) is not None]
    found: list[Checkpoint] = []
    for position, index in enumerate(starts):
        end = starts[position + 1] if position + 1 < len(starts) else len(messages)
        episode = messages[index + 1 : end]
        if not episode or any(
            isinstance(part, ToolCallPart) or (isinstance(message, ModelRequest) and not _is_prompt_only(message))
            for message in episode
            for part in message.parts
        ):
            continue
        answer = '\n'.join(
            part.content
            for message in episode
            if isinstance(message, ModelResponse)
            for part in message.parts
            if isinstance(part, TextPart) and part.content.strip()
        )
        prior = sum(tokens[:index])
        total = prior + tokens[index]
        if answer and prior >= min_prior_tokens and total <= max_total_tokens:
            request = _user_request(messages[index]) or ''
            found.append(Checkpoint(index, request, answer, prior, total))
    return found


async def replay_views(
    capability: AbstractCapability[Any] | CapabilityFactory,
    history: Sequence[ModelMessage] | str | bytes | Path,
    *,
    model: Model,
    budgets: Sequence[int] | None = None,
    at: Sequence[Checkpoint] | None = None,
    deps: Any = None,
) -> list[ViewReplay]:
    """Replay each checkpoint through an `Agent` with *capability*, teacher-forced.

    Args:
        capability: The capability under test, or a factory called with each budget.
        history: The recorded history (messages, JSON, or a path to a JSON file).
        model: The agent's model: it answers, and serves the capability's own calls unless the capability
            names another (a `FunctionModel` or `TestModel` offline).
        budgets: Budgets to build the capability for (a factory only); default `BUDGET_PRESETS`.
        at: Checkpoints to replay; default every eligible one (`checkpoints(history)`).
        deps: Dependencies for the agent run.
    """
    messages = load_history(history)
    points = list(at) if at is not None else checkpoints(messages)
    if isinstance(capability, AbstractCapability):
        if budgets is not None:
            raise ValueError('replay_views: budgets need a capability factory, not a built capability.')
        builds: list[tuple[int | None, AbstractCapability[Any]]] = [(None, capability)]
    else:
        builds = [(budget, capability(budget)) for budget in (budgets if budgets is not None else BUDGET_PRESETS)]
    out: list[ViewReplay] = []
    for point in points:
        for budget, built in builds:
            recorder = _Recorder()
            agent: Agent[Any, str] = Agent(model, capabilities=[built, recorder])
            # The exact recorded request is the last message: the agent sends it as recorded.
            result = await agent.run(None, message_history=messages[: point.index + 1], deps=deps)
            total = result.usage
            auxiliary = RunUsage(
                requests=max(total.requests - 1, 0),
                input_tokens=total.input_tokens - recorder.usage.input_tokens,
                output_tokens=total.output_tokens - recorder.usage.output_tokens,
                cache_read_tokens=total.cache_read_tokens - recorder.usage.cache_read_tokens,
                cache_write_tokens=total.cache_write_tokens - recorder.usage.cache_write_tokens,
            )
            out.append(
                ViewReplay(
                    checkpoint=point,
                    budget=budget,
                    sent=recorder.sent,
                    sent_tokens=sum(message_tokens(message) for message in recorder.sent),
                    answer=result.output,
                    answer_usage=recorder.usage,
                    auxiliary_usage=auxiliary,
                )
            )
    return out


def _user_request(message: ModelMessage) -> str | None:
    """The text the user wrote in *message*, or `None` when it holds none (tool content, restatements)."""
    if not isinstance(message, ModelRequest):
        return None
    texts = [
        user_text(part)
        for part in message.parts
        if isinstance(part, UserPromptPart)
        and isinstance(part.content, str)
        and not is_restatement(part)
        and not tool_provided(message, part)
        and part.content.strip()
    ]
    return '\n'.join(texts) if texts else None


def _is_prompt_only(message: ModelRequest) -> bool:
    """A request without tool results (only prompts, system parts or boundaries)."""
    return not any(isinstance(part, ToolReturnPart) or tool_provided(message, part) for part in message.parts)


@dataclass
class _Recorder(AbstractCapability[Any]):
    """Records the answer request after every other capability's view, and the answer's usage."""

    sent: list[ModelMessage] = field(default_factory=list[ModelMessage])
    usage: RequestUsage = field(default_factory=RequestUsage)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self.sent = list(request_context.messages)
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        self.usage = replace(response.usage)
        return response
