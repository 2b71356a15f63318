"""`StatelessSummary`: a separate summarizer call, with no tools and no agent instructions, reads a transcript.

`request='sent'` asks in the conversation instead (see `StatelessSummary.request`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import Exchange, Proposal, Summary
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.checks import (
    ConfigurationError,
    check_choice,
    check_instance,
    check_int,
    check_model,
    check_optional_int,
)
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.encoding import clean_text
from pydantic_ai_compaction.runtime.segment import ConversationView
from pydantic_ai_compaction.runtime.tokens import DEFAULT_CONTEXT_WINDOW, resolve_context_window
from pydantic_ai_compaction.runtime.transcript import render_messages
from pydantic_ai_compaction.runtime.trigger import text_tokens
from pydantic_ai_compaction.runtime.wrappers import neutralize

SUMMARY_MARKER = '[pydantic-ai-compaction: summary request]'
"""First line of the summarizer's prompt, so logs and test models can recognize the call."""

SUMMARY_INSTRUCTIONS = (
    'You summarize part of an agent conversation for the agent that continues it. The transcript you '
    'read will be removed from its context and replaced by your summary.'
)

SUMMARY_PROMPT = """{marker}
Summarize the transcript below so the agent can continue without it. Keep, with exact values:
- every instruction and rule in force, including any change to an earlier one (quote the latest wording);
- facts later steps need (identifiers, numbers, owners, names, file paths);
- what is done and what the next step is.
Answer with the summary only.

<transcript>
{transcript}
</transcript>"""

SUMMARY_SENT_PROMPT = f"""{SUMMARY_MARKER}
Your context is about to be compacted. Pause the task: do not call tools and do not answer the task now.
Most of the conversation above will be removed from your context and replaced by the summary you write now;
earlier summaries stay in place, so do not repeat what they already say. Keep, with exact values:
- every instruction and rule in force, including any change to an earlier one (quote the latest wording);
- facts later steps need (identifiers, numbers, owners, names, file paths);
- what is done and what the next step is.
Answer with the summary only."""
"""The message appended to the conversation when `StatelessSummary.request` is `'sent'`."""

SummaryRequest = Literal['transcript', 'sent']


@dataclass
class StatelessSummary(ConfiguredCompaction[AgentDepsT]):
    """Replace every unprotected, finished exchange with a summary written by a separate call.

    Example:
        ```python
        agent = Agent(model, capabilities=[StatelessSummary(trigger=Trigger(fraction=0.5))])
        ```
    """

    model: Model | str | None = None
    """Summarizer model; `None` uses the model of the request being compacted."""

    model_settings: ModelSettings | None = None
    """Settings for the summarizer call."""

    keep_last: int = 0
    """Finished exchanges to keep verbatim (the most recent ones), besides protected and unfinished."""

    max_transcript_tokens: int | None = None
    """Largest transcript sent to the summarizer, in estimated tokens. `None`: 60 % of the summarizer's
    context window (harness's default window when the model's is unknown). When the exchanges to drop
    are larger, the oldest ones are left out of the transcript (still dropped, listed in the record's
    `extra['not_summarized']` and named at the top of the transcript), and a single exchange larger than
    the budget is cut, its tail kept."""

    request: SummaryRequest = 'transcript'
    """What the summarizer is sent. `'transcript'` (the stateless summary): a separate request with no tools
    and no agent instructions, holding a transcript of the exchanges being dropped. `'sent'`: the conversation
    as the agent already sent it (its instructions, tool definitions and messages, up to the last exchange
    being dropped), then the summary prompt, answered in text (asked as the fork asks: `compactor.text_only`).
    The summarizer then reads the conversation as the agent does, no longer without its instructions: a
    different strategy, so not the default. What it buys is cost under a prompt cache: a provider can serve
    that prefix from its cache (cache reads cost about a tenth of input), where a transcript is new text every
    time and is written to the cache whole. Only with the conversation's own model (`model=None`); `instructions`
    and `max_transcript_tokens` do not apply (the request is the conversation, which already fits its window)."""

    instructions: str = field(default=SUMMARY_INSTRUCTIONS, kw_only=True)
    """System instructions of the summarizer call (`request='transcript'`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int('StatelessSummary', 'keep_last', self.keep_last, minimum=0)
        check_optional_int('StatelessSummary', 'max_transcript_tokens', self.max_transcript_tokens, minimum=100)
        check_model('StatelessSummary', 'model', self.model)
        check_instance('StatelessSummary', 'instructions', self.instructions, str, 'a string')
        check_instance(
            'StatelessSummary',
            'model_settings',
            self.model_settings,
            (dict, type(None)),
            'a ModelSettings dict or None',
        )
        check_choice('StatelessSummary', 'request', self.request, ('transcript', 'sent'))
        if self.request == 'sent':
            # Each of these would be silently ignored by a request that is the conversation itself.
            for name, value, default in (
                ('model', self.model, None),
                ('max_transcript_tokens', self.max_transcript_tokens, None),
                ('instructions', self.instructions, SUMMARY_INSTRUCTIONS),
            ):
                if value != default:
                    raise ConfigurationError(
                        f"StatelessSummary.{name} does not apply with request='sent' (the summary request is "
                        f'the conversation as the agent sent it, to its own model), got {value!r}.'
                    )

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'summary'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Summarize the exchanges that will be dropped; keep the `keep_last` newest ones."""
        candidates = [exchange for exchange in view.exchanges if not exchange.forced]
        kept = candidates[len(candidates) - self.keep_last :] if self.keep_last else []
        dropped = candidates[: len(candidates) - len(kept)]
        if not dropped:
            return Proposal.failed('empty', 'nothing to summarize')
        if self.request == 'sent':
            return await self._propose_sent(view, ctx, kept)
        budget = self.max_transcript_tokens or transcript_budget(compactor.resolve_model(self.model, ctx))
        transcript, left_out, cut = bounded_transcript(view, dropped, budget)
        # Tool output must not be able to close the transcript and speak as the prompt.
        prompt = clean_text(SUMMARY_PROMPT.format(marker=SUMMARY_MARKER, transcript=neutralize(transcript)))
        request = ModelRequest(parts=[UserPromptPart(prompt)], instructions=self.instructions)
        response = await compactor.request(ctx, [request], model=self.model, settings=self.model_settings)
        text = compactor.response_text(response)
        if (unusable := compactor.unusable(response, text, 'the summarizer')) is not None:
            return Proposal.failed(*unusable)
        extra: dict[str, Any] = {}
        if left_out:
            extra['not_summarized'] = list(left_out)
        if cut:
            extra['transcript_cut'] = list(cut)
        return Proposal.keep(kept, summary=Summary(text), extra=extra)

    async def _propose_sent(self, view: ConversationView, ctx: CompactionContext, kept: list[Exchange]) -> Proposal:
        """Ask the conversation itself, as already sent, for the summary; what stays verbatim is not sent."""
        settings, parameters = compactor.text_only(ctx, settings=self.model_settings)
        stays = {exchange.id for exchange in kept}
        sent = compactor.sent_prefix(view, lambda exchange: exchange.forced or exchange.id in stays)
        messages = compactor.with_appended_prompt(sent, SUMMARY_SENT_PROMPT)
        response = await compactor.request(ctx, messages, settings=settings, parameters=parameters)
        text = compactor.response_text(response)
        if (unusable := compactor.unusable(response, text, 'the summarizer')) is not None:
            return Proposal.failed(*unusable, variant='sent')
        return Proposal.keep(kept, summary=Summary(text), variant='sent')


TRANSCRIPT_SHARE = 0.6
"""Share of the summarizer's window a transcript may fill, leaving room for instructions and the answer."""


def transcript_budget(model: Model) -> int:
    """Estimated tokens of transcript the summarizer *model* can read."""
    window = resolve_context_window(model) or DEFAULT_CONTEXT_WINDOW
    return max(100, int(window * TRANSCRIPT_SHARE))


def bounded_transcript(
    view: ConversationView, exchanges: list[Exchange], budget: int
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """A transcript of *exchanges* within *budget* estimated tokens, newest kept first.

    Returns the transcript, the ids left out (oldest first) and the ids whose text was cut.
    """
    # Newest first, each exchange rendered only when it is reached: the work follows the budget, not the
    # history. What fits is measured on the text sent, not on `Exchange.tokens`: a response's reported
    # output tokens include hidden reasoning the transcript does not carry.
    rendered: list[str] = []
    sizes: list[int] = []
    used = 0
    for exchange in reversed(exchanges):
        text = render_messages(view.messages_of(exchange))
        size = text_tokens(text)
        if rendered and used + size > budget:
            break
        rendered.append(text)
        sizes.append(size)
        used += size
    rendered.reverse()
    sizes.reverse()
    first = len(exchanges) - len(rendered)
    left_out = tuple(exchange.id for exchange in exchanges[:first])
    pieces: list[str] = []
    cut: list[str] = []
    if left_out:
        # Only named, never sent: their remembered sizes say how much is missing without rendering them.
        tokens = sum(exchange.tokens for exchange in exchanges[:first])
        span = left_out[0] if len(left_out) == 1 else f'{left_out[0]}–{left_out[-1]}'
        pieces.append(
            f'[{len(left_out)} earlier exchange(s) ({span}, about {tokens:,} tokens) did not fit in this '
            'transcript and are not shown.]'
        )
    for exchange, text, size in zip(exchanges[first:], rendered, sizes, strict=True):
        if size > budget:
            # One exchange larger than the whole budget: keep its end, where results and answers are.
            keep_chars = max(1, len(text) * budget // max(size, 1))
            note = f'[… the first {len(text) - keep_chars:,} characters of this exchange are cut …]'
            text = f'{note}\n{text[-keep_chars:]}'
            cut.append(exchange.id)
        pieces.append(text)
    return '\n'.join(pieces), left_out, tuple(cut)
