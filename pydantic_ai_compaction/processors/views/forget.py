"""`ForgetReasoning`: decide once, when a step completes, whether to keep that step's thinking.

A reasoning agent pays to carry every old thought on every later turn. Dropping a step's reasoning
when the step is appended keeps the history append-only, so the cached prefix is never rewritten
(seed 002: -20.1 % on a 40-step simulated bill; keeping only the latest step's reasoning rewrites the
previous step every turn and costs +0.9 %). Forgetting backfires when the agent has to think its way
back (a code task re-derived what it forgot), so `after_artifact` drops reasoning only once the step
has externalized its conclusion: a successful write/edit, or a tool error the agent can still see.

Provider rules (why signed thinking is treated differently):

- Anthropic signs thinking blocks (`ThinkingPart.signature`): they may be omitted, never edited, and the
  blocks of the tool loop in progress must be sent back. Signed or provider-bound thinking (a signature,
  an id or provider details, as OpenAI Responses' encrypted reasoning items have) is therefore dropped only
  for steps before the latest user prompt, never inside the tool loop still running.
- Unsigned reasoning (DeepSeek's `reasoning_content`, open models) can be dropped as soon as its step
  completes.

A signed step inside the running tool loop is marked `deferred` and dropped at the next user turn;
Anthropic already leaves earlier turns' thinking out of what it bills, so that does not move the
cached prefix it charges for.

`score` (seed 002's ICLR method) keeps a completed step's reasoning but replaces its most predictable
blocks (split at blank lines, scored by `scorer` against the conversation before the step) with
`[SKIP]`: `drop_share` of them, rounded down. Signed thinking cannot be edited, so it is kept whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.metadata import MessageMarks, with_ours
from pydantic_ai_compaction.protocols.names import WRITE_TOOLS
from pydantic_ai_compaction.runtime.checks import (
    ConfigurationError,
    check_callable,
    check_choice,
    check_number,
    fail,
)
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.project import never_fails, rewrite_log
from pydantic_ai_compaction.runtime.scoring import (
    CONTEXT_CHARS,
    SKIP,
    ReasoningScorer,
    choose_skips,
    split_blocks,
)
from pydantic_ai_compaction.runtime.scoring import compression_gain as default_scorer
from pydantic_ai_compaction.runtime.segment import is_restatement

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

ForgetPolicy = Literal['keep', 'drop', 'after_artifact', 'score']


def reasoning_decision(message: ModelResponse) -> str | None:
    """`kept`, `dropped`, `scored` or `deferred` once decided for a step, else `None`."""
    return MessageMarks.from_metadata(message.metadata).reasoning


def _signed(part: ThinkingPart) -> bool:
    return bool(part.signature or part.id or part.provider_details)


@dataclass
class ForgetReasoning(AbstractCapability[AgentDepsT]):
    """Drop completed steps' thinking at append time, by policy; never rewrite what was already sent.

    Example:
        ```python
        agent = Agent(model, capabilities=[ForgetReasoning(policy='after_artifact')])
        ```
    """

    policy: ForgetPolicy = 'after_artifact'
    """`keep` (baseline), `drop` (every completed step), `after_artifact` (only externalized steps) or
    `score` (the most predictable blocks of every completed step, see `scorer` and `drop_share`)."""

    write_tools: str = WRITE_TOOLS
    """Regular expression over tool names: a successful call to one externalizes the step."""

    scorer: ReasoningScorer | None = None
    """For `score`: `(context, blocks) -> scores`, higher is more predictable. `None` is the dependency-free
    zlib proxy (`runtime.scoring.compression_gain`); an LM scorer (negative mean token entropy) plugs in here."""

    drop_share: float = 0.8
    """For `score`: the share of a step's blocks replaced with `[SKIP]`, rounded down (0.8 is the paper's)."""

    observer: EventObserver | None = None
    """Called with a `CompactionEvent` for every decision written to the history (and every refused one)."""

    _writes: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_choice('ForgetReasoning', 'policy', self.policy, ('keep', 'drop', 'after_artifact', 'score'))
        check_number('ForgetReasoning', 'drop_share', self.drop_share, minimum=0, maximum=1)
        check_callable('ForgetReasoning', 'scorer', self.scorer)
        check_callable('ForgetReasoning', 'observer', self.observer)
        if not isinstance(self.write_tools, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise fail('ForgetReasoning', 'write_tools', 'a regular expression string', self.write_tools)
        try:
            self._writes = re.compile(self.write_tools, re.IGNORECASE)
        except re.error as error:
            raise ConfigurationError(
                f'ForgetReasoning.write_tools is not a valid regular expression: {self.write_tools!r} ({error}).'
            ) from None

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Decide the steps completed since the last request; persist the decision with the step.

        Works on the persisted history (`ctx.messages`), never on a request-only view.
        """
        messages = list(ctx.messages)
        try:
            decided = self.decide(messages)
        except Exception as error:  # forgetting must never fail the run: keep the step as it was
            never_fails('ForgetReasoning', error, 'kept the history as it was')
            return request_context
        if decided is None:
            return request_context
        # Its contract is to rewrite the log: only thinking may go, and only metadata may change otherwise.
        decided = rewrite_log(
            messages,
            decided,
            'ForgetReasoning',
            reason='reasoning',
            may_drop=(ThinkingPart,),
            tracer=ctx.tracer,
            observer=self.observer,
        )
        if decided is None:
            return request_context
        ctx.messages[:] = decided
        return replace(request_context, messages=list(decided))

    def decide(self, messages: list[ModelMessage]) -> list[ModelMessage] | None:
        """The history with every newly completed step decided, or `None` when nothing changed."""
        last_prompt = max(
            (
                index
                for index, message in enumerate(messages)
                if isinstance(message, ModelRequest)
                and any(isinstance(p, UserPromptPart) and not is_restatement(p) for p in message.parts)
            ),
            default=-1,
        )
        # One pass: which calls have their results in, and where.
        results_of: dict[str, ToolReturnPart] = {}
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, ToolReturnPart):
                        results_of[part.tool_call_id] = part
        out = list(messages)
        changed = False
        for index, message in enumerate(messages):
            if not isinstance(message, ModelResponse) or reasoning_decision(message) in ('kept', 'dropped', 'scored'):
                continue
            if index + 1 >= len(messages):
                continue  # the step in progress: nothing follows it yet
            calls = [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]
            if any(call not in results_of for call in calls):
                continue  # not complete: its tool results are not all in
            results = [results_of[call] for call in calls]
            thinking = [p for p in message.parts if isinstance(p, ThinkingPart)]
            decision = 'kept'
            extra: dict[str, object] = {}
            if self.policy == 'score':
                scored = self._score(out[:index], message) if thinking else None
                if scored is not None:
                    parts, skipped, blocks = scored
                    decision = 'scored'
                    extra = {'skipped_blocks': skipped, 'blocks': blocks}
                    message = replace(message, parts=parts)
            elif thinking and len(thinking) < len(message.parts) and self._should_drop(message, results):
                # A reply of reasoning alone keeps it: dropping it would leave an empty turn, which providers refuse.
                decision = 'dropped'
                if any(_signed(p) for p in thinking) and index > last_prompt:
                    # Inside the tool loop still running: the provider needs the signed blocks back.
                    decision = 'deferred'
            if decision == reasoning_decision(message):
                continue
            parts = (
                message.parts
                if decision != 'dropped'
                else [p for p in message.parts if not isinstance(p, ThinkingPart)]
            )
            thinking_chars = sum(len(p.content) for p in thinking)
            marks = MessageMarks(
                reasoning=decision, thinking_chars=thinking_chars, output_tokens=message.usage.output_tokens
            )
            metadata = marks.to_metadata(message.metadata)
            if extra:  # `score`: how many blocks were skipped, of how many
                metadata = with_ours(metadata, extra)
            out[index] = replace(message, parts=list(parts), metadata=metadata)
            changed = True
        return out if changed else None

    def _score(
        self, before: list[ModelMessage], response: ModelResponse
    ) -> tuple[list[ModelResponsePart], int, int] | None:
        """The step's parts with its most predictable blocks skipped, the count skipped and the block count.

        `None` when the step has no unsigned reasoning to score (signed thinking may not be edited).
        """
        editable = [p for p in response.parts if isinstance(p, ThinkingPart) and not _signed(p)]
        split = {id(part): split_blocks(part.content) for part in editable}
        blocks = [block for part in editable for block in split[id(part)]]
        if not blocks:
            return None
        scorer = self.scorer if self.scorer is not None else default_scorer
        scores = list(scorer(context_text(before), blocks))
        if len(scores) != len(blocks):
            raise ValueError(f'the reasoning scorer returned {len(scores)} scores for {len(blocks)} blocks')
        skips = choose_skips(scores, self.drop_share)
        parts: list[ModelResponsePart] = []
        position = 0
        for part in response.parts:
            if isinstance(part, ThinkingPart) and id(part) in split:
                kept = [SKIP if position + offset in skips else block for offset, block in enumerate(split[id(part)])]
                position += len(kept)
                if SKIP in kept:  # a part with nothing skipped stays byte for byte as the model wrote it
                    part = replace(part, content='\n\n'.join(kept))
            parts.append(part)
        return parts, len(skips), len(blocks)

    def _should_drop(self, response: ModelResponse, results: list[ToolReturnPart]) -> bool:
        if self.policy == 'keep':
            return False
        if self.policy == 'drop':
            return True
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        errored = any(r.outcome in ('failed', 'retried') for r in results)
        wrote = any(self._writes.search(call.tool_name) for call in calls)
        succeeded = bool(results) and all(r.outcome == 'success' for r in results)
        return (wrote and succeeded) or errored


def context_text(messages: list[ModelMessage], limit: int = CONTEXT_CHARS) -> str:
    """The conversation's text, oldest first, as a scorer conditions on it: its last *limit* characters."""
    pieces: list[str] = []
    size = 0
    for message in reversed(messages):
        for part in reversed(message.parts):
            if isinstance(part, ToolCallPart):
                text = f'{part.tool_name}({part.args_as_json_str()})'
            elif isinstance(part, ToolReturnPart):
                text = part.model_response_str()
            else:
                content = getattr(part, 'content', '')
                text = content if isinstance(content, str) else str(content)
            pieces.append(text)
            size += len(text) + 2
            if size >= limit:
                return '\n\n'.join(reversed(pieces))[-limit:]
    return '\n\n'.join(reversed(pieces))
