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
  for steps before the latest user prompt, never inside the tool loop still running. A turn that ended with
  a call (an output tool's) is that loop still when the next prompt is sent with the call's result: the
  history's last response, when it made calls, is never dropped.
- Unsigned reasoning (no signature, id or provider details: an open model's `<think>` text) can be dropped as
  soon as its step completes. DeepSeek's `reasoning_content` carries an id from pydantic-ai: provider-bound.
- OpenAI Responses refuses an item sent by its id without the reasoning item it came with: a step whose reasoning
  is dropped sends its texts and calls without their item ids (`_without_thinking`), and a step holding an item
  replayed by its id alone keeps its reasoning (`_replayed_by_id`).

A signed step inside the running tool loop is marked `deferred` and dropped at the next user turn;
Anthropic already leaves earlier turns' thinking out of what it bills, so that does not move the
cached prefix it charges for.

`score` (seed 002's ICLR method) keeps a completed step's reasoning but replaces its most predictable
blocks (split at blank lines, scored by `scorer` against the conversation before the step) with
`[SKIP]`: `drop_share` of them, rounded down. Signed thinking cannot be edited, so it is kept whole.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, overload

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    TextPart,
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
from pydantic_ai_compaction.runtime.encoding import args_text
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.project import never_fails, rewrite_log_at, rewritten_request
from pydantic_ai_compaction.runtime.scoring import (
    CONTEXT_CHARS,
    SKIP,
    ReasoningScorer,
    choose_skips,
    split_blocks,
)
from pydantic_ai_compaction.runtime.scoring import compression_gain as default_scorer
from pydantic_ai_compaction.runtime.segment import is_restatement, tool_content_parts
from pydantic_ai_compaction.runtime.shape import makes_calls
from pydantic_ai_compaction.runtime.transcript import return_text

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

ForgetPolicy = Literal['keep', 'drop', 'after_artifact', 'score']


def reasoning_decision(message: ModelResponse) -> str | None:
    """`kept`, `dropped`, `scored` or `deferred` once decided for a step, else `None`."""
    return MessageMarks.from_metadata(message.metadata).reasoning


def _signed(part: ThinkingPart) -> bool:
    return bool(part.signature or part.id or part.provider_details)


_FINAL = ('kept', 'dropped', 'scored')
"""Decisions never revisited (`deferred` is, at the next user prompt)."""


@dataclass
class _Decided:
    """What the previous history `ForgetReasoning.decide` saw leaves for the next one.

    A run's history grows at its end, so a call reads only the messages after those of the previous history
    (as `decide` left them) still at their index, plus the steps that history left undecided. Read from the end:
    pydantic-ai appends, and a rewrite either replaces messages at the end (a numbered result) or moves what
    follows it (a summary in place of older messages), which shows at the end as well; the first message, the
    steps decided last time and the undecided ones are checked by identity too (a history saved without the
    decisions is read again from there). A rewrite that leaves every later message at its index (one message
    swapped for one further back) is not seen: checking every message by identity would cost more than the
    rest of a request.
    """

    seen: list[weakref.ref[ModelMessage]] = field(default_factory=list['weakref.ref[ModelMessage]'])
    """The messages of the previous history as decided, in order (weak: never keeps a history alive)."""

    open: list[int] = field(default_factory=list[int])
    """Indices of its responses not decided for good (in progress, incomplete or deferred), ascending."""

    decided: list[int] = field(default_factory=list[int])
    """Indices of the responses the previous call decided."""

    prompts: list[int] = field(default_factory=list[int])
    """Indices of its requests with a user prompt (not a restatement), ascending."""

    returns: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    """Each call id's result outcomes, oldest first (the newest one counts)."""

    log: list[tuple[int, str]] = field(default_factory=list[tuple[int, str]])
    """Every result as (message index, call id), in order: what to take back when messages are read again."""

    def rewind(self, messages: list[ModelMessage]) -> int:
        """Forget what was read from messages *messages* no longer holds; returns the index to read from."""
        seen = self.seen
        start = 0
        if seen and messages and seen[0]() is messages[0]:
            for index in range(min(len(seen), len(messages)) - 1, -1, -1):
                if seen[index]() is messages[index]:
                    start = index + 1
                    break
            for index in (*self.decided, *self.open):
                if index < start and seen[index]() is not messages[index]:
                    start = index
        del seen[start:]
        self.open = [index for index in self.open if index < start]
        prompts = self.prompts
        while prompts and prompts[-1] >= start:
            prompts.pop()
        log, returns = self.log, self.returns
        while log and log[-1][0] >= start:
            _, call = log.pop()
            outcomes = returns[call]
            outcomes.pop()
            if not outcomes:
                del returns[call]
        return start

    def advance(self, messages: Sequence[ModelMessage], start: int, candidates: list[int], decided: list[int]) -> None:
        """Remember *messages* (as decided) after reading from *start*; *candidates* were the steps looked at."""
        seen = self.seen
        for index in decided:
            if index < start:
                seen[index] = weakref.ref(messages[index])
        seen.extend(weakref.ref(messages[index]) for index in range(start, len(messages)))
        self.open = [index for index in candidates if reasoning_decision(_response(messages[index])) not in _FINAL]
        self.decided = decided


class _Written(Sequence[ModelMessage]):
    """*messages* as they read with *changes* (position → new message) written in, without copying them."""

    def __init__(self, messages: Sequence[ModelMessage], changes: dict[int, ModelMessage]) -> None:
        self._messages = messages
        self._changes = changes

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> ModelMessage: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ModelMessage]: ...

    def __getitem__(self, index: int | slice) -> ModelMessage | Sequence[ModelMessage]:
        if isinstance(index, slice):
            return [self[position] for position in range(len(self))[index]]
        if index < 0:
            index += len(self._messages)
        changed = self._changes.get(index)
        return changed if changed is not None else self._messages[index]


def _response(message: ModelMessage) -> ModelResponse:
    assert isinstance(message, ModelResponse)
    return message


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

    _decided: _Decided = field(init=False, repr=False, compare=False)
    """What the previous `decide` read (per run: `for_run` gives each run its own)."""

    def __post_init__(self) -> None:
        check_choice('ForgetReasoning', 'policy', self.policy, ('keep', 'drop', 'after_artifact', 'score'))
        check_number('ForgetReasoning', 'drop_share', self.drop_share, minimum=0, maximum=1)
        check_callable('ForgetReasoning', 'scorer', self.scorer, arguments=2)
        check_callable('ForgetReasoning', 'observer', self.observer, arguments=1)
        if not isinstance(self.write_tools, str) or not self.write_tools:  # pyright: ignore[reportUnnecessaryIsInstance]
            # Empty, it would match every tool name (as `ResetToCheckpoint` and `Tiered` refuse it too).
            raise fail('ForgetReasoning', 'write_tools', 'a non-empty regular expression string', self.write_tools)
        try:
            self._writes = re.compile(self.write_tools, re.IGNORECASE)
        except re.error as error:
            raise ConfigurationError(
                f'ForgetReasoning.write_tools is not a valid regular expression: {self.write_tools!r} ({error}).'
            ) from None
        self._decided = _Decided()

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """A copy with its own memory of the history decided so far."""
        return replace(self)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Decide the steps completed since the last request; persist the decision with the step.

        Works on the persisted history (`ctx.messages`), never on a request-only view.
        """
        log = ctx.messages
        try:
            changes = self.decisions(log)
        except Exception as error:  # forgetting must never fail the run: keep the step as it was
            never_fails('ForgetReasoning', error, 'kept the history as it was')
            return request_context
        if not changes:
            return request_context
        # Its contract is to rewrite the log: only thinking may go, and only metadata may change otherwise. Only
        # the decided steps are checked and written: the rest of the log stays as it is, object for object.
        replaced = {index: (log[index], message) for index, message in changes.items()}
        accepted = rewrite_log_at(
            log,
            changes,
            'ForgetReasoning',
            reason='reasoning',
            may_drop=(ThinkingPart,),
            tracer=ctx.tracer,
            observer=self.observer,
        )
        if not accepted:
            return request_context
        # The request shows the decided steps, keeping what a capability listed before this one projected.
        return replace(request_context, messages=rewritten_request(request_context.messages, log, replaced))

    def decide(self, messages: list[ModelMessage]) -> list[ModelMessage] | None:
        """The history with every newly completed step decided, or `None` when nothing changed.

        Reads only what is new since the previous call's history (see `_Decided`): the cost of a request does
        not grow with the history. Gives exactly what a first call on the same history gives.
        """
        changes = self.decisions(messages)
        if not changes:
            return None
        out = list(messages)
        for index, message in changes.items():
            out[index] = message
        return out

    def decisions(self, messages: list[ModelMessage]) -> dict[int, ModelMessage]:
        """The steps `decide` would rewrite, by position, with their decision written (empty when none).

        What `decide` changes without copying the history: what a request pays does not depend on its length.
        """
        state = self._decided
        try:
            return self._decide(state, messages)
        except BaseException:
            self._decided = _Decided()  # read everything again next time rather than trust a half-made state
            raise

    def _decide(self, state: _Decided, messages: list[ModelMessage]) -> dict[int, ModelMessage]:
        start = state.rewind(messages)
        prompts, returns = state.prompts, state.returns
        candidates = list(state.open)
        for index in range(start, len(messages)):
            message = messages[index]
            if isinstance(message, ModelResponse):
                candidates.append(index)
                continue
            prompted = False
            supplied: frozenset[int] | None = None  # the user parts a tool supplied, read once a request needs it
            for at, part in enumerate(message.parts):
                if isinstance(part, ToolReturnPart):
                    returns.setdefault(part.tool_call_id, []).append(part.outcome)
                    state.log.append((index, part.tool_call_id))
                elif not prompted and isinstance(part, UserPromptPart) and not is_restatement(part):
                    # `ToolReturn(content=...)` travels as a user part beside the returns: the tool loop goes on,
                    # and the thinking the provider needs back in it must stay.
                    if supplied is None:
                        supplied = tool_content_parts(message)
                    prompted = at not in supplied
            if prompted:
                prompts.append(index)
        last_prompt = prompts[-1] if prompts else -1
        last_response = next(
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], ModelResponse)), -1
        )
        changes: dict[int, ModelMessage] = {}
        for index in candidates:
            running = index > last_prompt or (index == last_response and makes_calls(messages[index]))
            decided = self._decide_step(_Written(messages, changes), index, running, returns)
            if decided is not None:
                changes[index] = decided
        state.advance(_Written(messages, changes), start, candidates, list(changes))
        return changes

    def _decide_step(
        self, messages: Sequence[ModelMessage], index: int, running: bool, returns: dict[str, list[str]]
    ) -> ModelResponse | None:
        """The step at *index* with its decision written, or `None` when it is decided or cannot be yet.

        *running*: the step is in the tool loop a provider sees as running, whose signed thinking it needs back:
        after the latest user prompt, or the history's last response when it made calls (a new prompt follows a
        turn that ended with a call, such as an output tool's, and is sent in the same request as its result).
        """
        message = messages[index]
        if not isinstance(message, ModelResponse) or reasoning_decision(message) in _FINAL:
            return None
        if index + 1 >= len(messages):
            return None  # the step in progress: nothing follows it yet
        calls = [p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)]
        if any(call not in returns for call in calls):
            return None  # not complete: its tool results are not all in
        outcomes = _outcomes(messages, index, calls, returns)
        thinking = [p for p in message.parts if isinstance(p, ThinkingPart)]
        decision = 'kept'
        extra: dict[str, object] = {}
        if self.policy == 'score':
            scored = self._score(messages, index, message) if thinking else None
            if scored is not None:
                parts, skipped, blocks = scored
                decision = 'scored'
                extra = {'skipped_blocks': skipped, 'blocks': blocks}
                message = replace(message, parts=parts)
        elif (
            thinking
            and len(thinking) < len(message.parts)
            and not _replayed_by_id(message)
            and self._should_drop(message, outcomes)
        ):
            # A reply of reasoning alone keeps it: dropping it would leave an empty turn, which providers refuse.
            decision = 'dropped'
            if any(_signed(p) for p in thinking) and running:
                # Inside the tool loop still running: the provider needs the signed blocks back.
                decision = 'deferred'
        if decision == reasoning_decision(message):
            return None
        parts = message.parts if decision != 'dropped' else _without_thinking(message.parts)
        thinking_chars = sum(len(p.content) for p in thinking)
        marks = MessageMarks(
            reasoning=decision,
            thinking_chars=thinking_chars,
            output_tokens=message.usage.output_tokens,
            unsigned_thinking=decision == 'dropped' and not any(_signed(p) for p in thinking),
        )
        metadata = marks.to_metadata(message.metadata)
        if extra:  # `score`: how many blocks were skipped, of how many
            metadata = with_ours(metadata, extra)
        return replace(message, parts=list(parts), metadata=metadata)

    def _score(
        self, messages: Sequence[ModelMessage], index: int, response: ModelResponse
    ) -> tuple[list[ModelResponsePart], int, int] | None:
        """The step's parts with its most predictable blocks skipped, the count skipped and the block count.

        Scored against the conversation before *index* in *messages* (the step itself is *response*).

        `None` when the step has no unsigned reasoning to score (signed thinking may not be edited).
        """
        editable = [p for p in response.parts if isinstance(p, ThinkingPart) and not _signed(p)]
        split = {id(part): split_blocks(part.content) for part in editable}
        blocks = [block for part in editable for block in split[id(part)]]
        if not blocks:
            return None
        scorer = self.scorer if self.scorer is not None else default_scorer
        scores = list(scorer(_context_before(messages, index), blocks))
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

    def _should_drop(self, response: ModelResponse, outcomes: list[str]) -> bool:
        if self.policy == 'keep':
            return False
        if self.policy == 'drop':
            return True
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        errored = any(outcome in ('failed', 'retried') for outcome in outcomes)
        wrote = any(self._writes.search(call.tool_name) for call in calls)
        succeeded = bool(outcomes) and all(outcome == 'success' for outcome in outcomes)
        return (wrote and succeeded) or errored


def _outcomes(
    messages: Sequence[ModelMessage], index: int, calls: list[str], returns: dict[str, list[str]]
) -> list[str]:
    """The outcome of each of *calls*, made by the step at *index*: its result in the requests right after the step,
    else the newest result to that id (a provider may use a call id again in a later step, whose result is not this
    one's)."""
    answered: dict[str, str] = {}
    for position in range(index + 1, len(messages)):
        message = messages[position]
        if isinstance(message, ModelResponse):
            break
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                answered.setdefault(part.tool_call_id, part.outcome)
    return [answered.get(call) or returns[call][-1] for call in calls]


def _without_thinking(parts: Sequence[ModelResponsePart]) -> list[ModelResponsePart]:
    """*parts* without their thinking, and without the item ids that tied the rest to it.

    OpenAI's Responses API refuses a text or call sent with the id of an output item whose reasoning item is not
    sent with it (`Item 'fc_…' of type 'function_call' was provided without its required 'reasoning' item`):
    pydantic-ai sends those ids only when a part has one, so once the reasoning goes the rest is sent as plain
    input (a text as an assistant message, a call by its call id), which the provider accepts from any history.
    """
    out: list[ModelResponsePart] = []
    for part in parts:
        if isinstance(part, ThinkingPart):
            continue
        if isinstance(part, TextPart | ToolCallPart) and part.id:
            part = replace(part, id=None)
        out.append(part)
    return out


def _replayed_by_id(message: ModelResponse) -> bool:
    """Whether *message* holds a part a provider replays by its id alone (a web search or code run on OpenAI's
    side, a call whose id is part of its call id): sent without the reasoning item before it, OpenAI refuses it,
    and without its id it is not sent at all, so that step's reasoning stays."""
    for part in message.parts:
        if isinstance(part, ThinkingPart | TextPart):
            continue
        if isinstance(part, ToolCallPart) and type(part) is ToolCallPart:
            if '|' in part.tool_call_id:
                # pydantic-ai's older `call_id|fc_id` (histories stored before `ToolCallPart.id`): the item id is sent
                # from the call id whether or not `id` is set, and cannot be taken without changing the call id the
                # result answers.
                return True
            continue
        if getattr(part, 'id', None):
            return True
    return False


def context_text(messages: list[ModelMessage], limit: int = CONTEXT_CHARS) -> str:
    """The conversation's text, oldest first, as a scorer conditions on it: its last *limit* characters."""
    return _context_before(messages, len(messages), limit)


def _context_before(messages: Sequence[ModelMessage], end: int, limit: int = CONTEXT_CHARS) -> str:
    """`context_text(messages[:end], limit)`, reading back from *end* only as far as *limit* needs."""
    pieces: list[str] = []
    size = 0
    for index in range(end - 1, -1, -1):
        for part in reversed(messages[index].parts):
            if isinstance(part, ToolCallPart):
                text = f'{part.tool_name}({args_text(part.args)})'
            elif isinstance(part, ToolReturnPart):
                text = return_text(part)
            else:
                content = getattr(part, 'content', '')
                text = content if isinstance(content, str) else str(content)
            pieces.append(text)
            size += len(text) + 2
            if size >= limit:
                return '\n\n'.join(reversed(pieces))[-limit:]
    return '\n\n'.join(reversed(pieces))
