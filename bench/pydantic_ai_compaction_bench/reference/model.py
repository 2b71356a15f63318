"""The reference model: an offline, deterministic `FunctionModel` that plays a task and answers compactions.

Every decision uses only what is literally visible in the messages it receives: raw tool output,
summaries, restated instructions, checkpoints. It never invents: what it cannot see, it does not
know. Compaction requests (fork, stateless summary, native emulation, harness's summarizer) get
valid, extractive replies under one rule (`summary_rule`), the same for every request kind and
whichever library sent it, so information can really be lost. Usage is reported for every request,
with cache reads and writes from a prefix-cache simulator.

Results obtained with it measure information flow and cost, not LLM behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import orjson
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.native import NATIVE_MARKER
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.processors.views.curation import CURATOR_MARKER
from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER
from pydantic_ai_compaction.runtime.transcript import user_text
from pydantic_ai_compaction_bench.reference.cache import PrefixCacheSimulator

RequestKind = Literal['agent', 'fork', 'summary', 'native', 'harness-summary', 'curator', 'probe']

DISCLAIMER = 'Reference-model results measure information flow and cost, not LLM behaviour.'
"""Printed with every report made from reference-model runs."""

CHARS_PER_TOKEN = 4
_HARNESS_SUMMARY = re.compile(r'<messages>.*</messages>', re.DOTALL)
_LISTING_LINE = re.compile(r'^(g\d+) \[(\w+)[^\]]*\] (.*)$', re.MULTILINE)


def tokens(text: str) -> int:
    """Estimated tokens of *text* (the same 4-characters heuristic the trigger uses)."""
    return len(text) // CHARS_PER_TOKEN


class Player(Protocol):
    """The task-specific half of the reference model."""

    def act(self, messages: Sequence[ModelMessage], visible: str, info: AgentInfo) -> list[ModelResponsePart]:
        """The agent's next step: a tool call, the final report, or an answer."""
        ...

    def facts(self, text: str) -> list[str]:
        """Notable lines an extractive summary of *text* carries, oldest first, each readable on its own.

        Which lines are notable is domain knowledge (not routine traffic), never a task's instruction
        markers: a summarizer is not told which lines change the rules.
        """
        ...

    def progress(self, visible: str) -> tuple[str, str]:
        """`(progress, next step)` as the player can tell them from *visible*."""
        ...


def part_text(part: object) -> str:
    """The text a part puts in front of the model."""
    if isinstance(part, SystemPromptPart):
        return part.content
    if isinstance(part, UserPromptPart):
        return user_text(part)
    if isinstance(part, ToolReturnPart):
        return part.model_response_str()
    if isinstance(part, CompactionPart):
        return part.content or ''
    if isinstance(part, TextPart):
        return part.content
    if isinstance(part, ThinkingPart):
        return part.content
    if isinstance(part, ToolCallPart):
        return f'{part.tool_name}({part.args_as_json_str()})'
    return ''


def visible_text(messages: Sequence[ModelMessage]) -> str:
    """Everything the model can read in a request, in order."""
    return '\n'.join(text for message in messages for part in message.parts if (text := part_text(part)))


def request_kind(messages: Sequence[ModelMessage], info: AgentInfo) -> RequestKind:
    """Which kind of request this is, from the text of the last request."""
    last = messages[-1]
    prompt = '\n'.join(part_text(part) for part in last.parts if isinstance(part, UserPromptPart))
    if CURATOR_MARKER in prompt:
        return 'curator'
    if FORK_MARKER in prompt:
        return 'fork'
    if SUMMARY_MARKER in prompt or HANDOFF_MARKER in prompt:
        return 'summary'
    if NATIVE_MARKER in prompt:
        return 'native'
    if _HARNESS_SUMMARY.search(prompt) and not info.function_tools:
        return 'harness-summary'
    if not info.output_tools and not info.function_tools:
        return 'probe'
    return 'agent'


@dataclass
class RequestLog:
    """One request the reference model answered."""

    kind: RequestKind
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reply: str = ''
    """The reply's text (summaries, fork replies and answers; empty for a bare tool call)."""


def summary_rule(cap: int) -> str:
    """The one summarization rule, as recorded with every run."""
    return (
        'every summarizer (fork, stateless summary, native emulation, harness SummarizingCompaction): progress, '
        'next step, then every notable line of what it is asked to carry, earlier summaries included, newest kept '
        f'first; budget = min(tokens of that content, cap {cap}); no exchange kept verbatim by the fork'
    )


@dataclass
class ReferenceModel:
    """A deterministic model for one conversation (one run): a player plus compaction replies."""

    player: Player
    """The task-specific policy."""

    summary_budget: int = 500
    """Cap on the tokens of any summary it writes. Below the cap a summary carries everything notable it
    is asked to carry; above it, the oldest notable lines are left out. The same for every request kind."""

    cache: PrefixCacheSimulator = field(default_factory=PrefixCacheSimulator)
    """Prefix cache shared by every request of the conversation."""

    log: list[RequestLog] = field(default_factory=list[RequestLog])
    """Every request answered, in order."""

    think_tokens: int = 0
    """Reasoning written before each agent step (a `ThinkingPart`), to measure carrying or forgetting it."""

    def __post_init__(self) -> None:
        if self.summary_budget < 1:
            raise ValueError(f'summary_budget must be positive, got {self.summary_budget!r}')

    def model(self) -> FunctionModel:
        """The pydantic-ai model to give an `Agent`."""
        return FunctionModel(self.respond, model_name='reference')

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """Answer one request."""
        kind = request_kind(messages, info)
        if kind == 'curator':
            parts: list[ModelResponsePart] = [TextPart(self._curate(messages))]
        elif kind == 'fork':
            parts = [TextPart(self._fork(messages))]
        elif kind == 'harness-summary' or (kind == 'summary' and '<transcript>' in _compaction_prompt(messages[-1])):
            parts = [TextPart(self.summarize(visible_text(messages[-1:])))]
        elif kind in ('native', 'summary'):
            # A summary asked in the conversation (`StatelessSummary(request='sent')`) reads it like native.
            parts = [TextPart(self.summarize(visible_text(messages[:-1]) + '\n' + _without_prompt(messages[-1])))]
        else:
            visible = visible_text(messages)
            parts = self.player.act(messages, visible, info)
            if self.think_tokens and kind == 'agent':
                parts = [ThinkingPart(_reasoning(visible, self.think_tokens)), *parts]
        return ModelResponse(parts=parts, usage=self._usage(kind, messages, info, parts), model_name='reference')

    def summarize(self, source: str) -> str:
        """The summary of *source* every request kind gets (see `summary_rule`): a pure function of the text."""
        progress, next_step, facts = self._content(source)
        return '\n'.join([progress, f'Next step: {next_step}', *facts])

    def _content(self, source: str) -> tuple[str, str, list[str]]:
        progress, next_step = self.player.progress(source)
        head = tokens(f'{progress}\nNext step: {next_step}')
        return progress, next_step, self._facts(source, budget=self.summary_budget - head)

    def _usage(
        self, kind: RequestKind, messages: Sequence[ModelMessage], info: AgentInfo, parts: Sequence[ModelResponsePart]
    ) -> RequestUsage:
        blocks: list[tuple[str, int]] = []
        if info.instructions:
            blocks.append((f'instructions:{info.instructions}', tokens(info.instructions)))
        tool_defs = [
            {'name': tool.name, 'description': tool.description, 'parameters': tool.parameters_json_schema}
            for tool in (*info.function_tools, *info.output_tools)
        ]
        if tool_defs:
            encoded = orjson.dumps(tool_defs).decode()
            blocks.append((f'tools:{encoded}', tokens(encoded)))
        for message in messages:
            for part in message.parts:
                text = part_text(part)
                blocks.append((f'{message.kind}:{type(part).__name__}:{text}', max(tokens(text), 1)))
        outcome = self.cache.account(blocks)
        output = sum(max(tokens(part_text(part)), 1) for part in parts)
        reply = '\n'.join(part.content for part in parts if isinstance(part, TextPart))
        self.log.append(
            RequestLog(kind, outcome.input_tokens, outcome.cache_read_tokens, outcome.cache_write_tokens, output, reply)
        )
        return RequestUsage(
            input_tokens=outcome.input_tokens,
            cache_read_tokens=outcome.cache_read_tokens,
            cache_write_tokens=outcome.cache_write_tokens,
            output_tokens=output,
        )

    def _facts(self, text: str, *, budget: int) -> list[str]:
        facts = list(dict.fromkeys(self.player.facts(text)))
        kept: list[str] = []
        used = 0
        for line in reversed(facts):
            cost = tokens(line) + 1
            if used + cost > budget:
                break
            kept.append(line)
            used += cost
        return list(reversed(kept))

    def _curate(self, messages: Sequence[ModelMessage]) -> str:
        """Focal bundles: listed exchanges holding facts that share a word with the current request."""
        prompt = visible_text(messages[-1:])
        request = re.search(r'<current-request>\n(.*?)\n</current-request>', prompt, re.DOTALL)
        wanted = set(re.findall(r'[a-z0-9]+', (request.group(1) if request else '').lower())) - _COMMON
        focal: list[str] = []
        for match in _LISTING_LINE.finditer(prompt):
            exchange_id, kind, description = match.groups()
            if kind in ('tools', 'turn') and wanted & set(re.findall(r'[a-z0-9]+', description.lower())):
                focal.append(exchange_id)
        conversation = visible_text(messages)
        progress, _ = self.player.progress(conversation)
        orientation: dict[str, str | list[str]] = {'relevant_state': progress, 'required': [], 'prohibited': []}
        return orjson.dumps({'focal': focal[-10:], 'orientation': orientation}).decode()

    def _fork(self, messages: Sequence[ModelMessage]) -> str:
        """The same summary as every other request kind, in the format the fork asks for; nothing kept verbatim.

        Which exchange a model keeps verbatim is its own judgement; any rule the reference applied here
        would be a hint the other strategies do not get, so the reference fork keeps none.
        """
        prompt = _fork_prompt(messages[-1])
        conversation = visible_text(messages[:-1]) + '\n' + _without_prompt(messages[-1])
        variant = re.search(r'variant=(\w+)', prompt)
        variant_name = variant.group(1) if variant else 'json'
        progress, next_step, facts = self._content(conversation)
        if variant_name == 'json':
            summary = {'rules': [], 'facts': facts, 'progress': progress, 'next_step': next_step}
            return orjson.dumps({'keep': [], 'summary': summary}).decode()
        text = self.summarize(conversation)
        if variant_name == 'free':
            return f'KEEP: none\n{text}'
        return text


_COMMON = frozenset({'the', 'a', 'of', 'what', 'is', 'and', 'to', 'in', 'on', 'for', 'read', 'log', 'logs', 'service'})


def _reasoning(visible: str, tokens_wanted: int) -> str:
    """Deterministic reasoning text of about *tokens_wanted* tokens, derived from what is visible."""
    seed = f'Working through what I can see ({len(visible):,} characters so far) and deciding the next step. '
    return (seed * (tokens_wanted * CHARS_PER_TOKEN // len(seed) + 1))[: tokens_wanted * CHARS_PER_TOKEN]


def _fork_prompt(message: ModelMessage) -> str:
    return '\n'.join(
        part_text(p) for p in message.parts if isinstance(p, UserPromptPart) and FORK_MARKER in part_text(p)
    )


def _compaction_prompt(message: ModelMessage) -> str:
    """The text of the last request's user parts (where a compaction prompt is appended)."""
    return '\n'.join(part_text(p) for p in message.parts if isinstance(p, UserPromptPart))


def _without_prompt(message: ModelMessage) -> str:
    """The last request's text without an appended compaction prompt."""
    markers = (FORK_MARKER, NATIVE_MARKER, SUMMARY_MARKER, HANDOFF_MARKER)
    return '\n'.join(
        part_text(part)
        for part in message.parts
        if not (isinstance(part, UserPromptPart) and any(marker in part_text(part) for marker in markers))
    )
