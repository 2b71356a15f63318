"""`StatelessSummary`: a separate summarizer call, with no tools and no agent instructions, reads a transcript."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import Proposal, Summary
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView
from pydantic_ai_compaction.runtime.transcript import render_messages

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

    keep_recent: int = 0
    """Finished exchanges to keep verbatim (the most recent ones), besides protected and unfinished."""

    instructions: str = field(default=SUMMARY_INSTRUCTIONS, kw_only=True)
    """System instructions of the summarizer call."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.keep_recent < 0:
            raise ValueError(f'StatelessSummary.keep_recent must not be negative, got {self.keep_recent!r}.')

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'summary'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Summarize the exchanges that will be dropped; keep the `keep_recent` newest ones."""
        candidates = [exchange for exchange in view.exchanges if not exchange.forced]
        kept = candidates[len(candidates) - self.keep_recent :] if self.keep_recent else []
        dropped = [exchange for exchange in candidates if exchange not in kept]
        if not dropped:
            return Proposal.failed('empty', 'nothing to summarize')
        transcript = render_messages(message for exchange in dropped for message in view.messages_of(exchange))
        prompt = compactor.fill(SUMMARY_PROMPT, marker=SUMMARY_MARKER, transcript=transcript)
        request = ModelRequest(parts=[UserPromptPart(prompt)], instructions=self.instructions)
        response = await compactor.request(ctx, [request], model=self.model, settings=self.model_settings)
        text = compactor.response_text(response)
        if not text:
            return Proposal.failed('empty', 'the summarizer returned no text')
        return Proposal(keep=tuple(exchange.id for exchange in kept), summary=Summary(text))
