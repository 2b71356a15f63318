"""`Native`: the provider compacts the conversation itself; an emulation where it cannot."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import Proposal, ProviderSummary, Summary
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.runtime.apply import assemble
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.checks import check_bool
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView

NATIVE_MARKER = '[pydantic-ai-compaction: native compaction request]'
"""First line of the emulation's prompt."""

NATIVE_PROMPT = f"""{NATIVE_MARKER}
Compact this conversation. Write a summary that replaces all of the conversation above and lets you
continue the task without it: instructions in force, facts gathered, progress, next step. Answer with the
summary only; do not call tools."""


@dataclass
class Native(ConfiguredCompaction[AgentDepsT]):
    """Provider-side compaction through `Model.compact_messages` (OpenAI Responses, Anthropic).

    Models without it get an emulation: the same model, in the same conversation, compacts the
    whole of it into an opaque summary. The boundary record's `variant` says which ran
    (`provider` or `emulated`). Like a provider's compaction, each one covers the whole
    conversation, its own earlier compactions included, so it replaces them.

    Example:
        ```python
        agent = Agent('openai-responses:gpt-5.2', capabilities=[Native(trigger=Trigger(fraction=0.5))])
        ```
    """

    emulate: bool = True
    """Use the emulation when the model has no provider compaction; `False` gives the fallback layout instead."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool('Native', 'emulate', self.emulate)

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'native'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Everything but protected and unfinished exchanges is replaced by the compaction."""
        finished = assemble(view, {exchange.id for exchange in view.exchanges if not exchange.unfinished})
        try:
            response = await compactor.provider_compact(ctx, finished)
        except (NotImplementedError, UserError):
            # Anthropic models without on-demand compaction raise `UserError` rather than
            # `NotImplementedError`: the model has no provider compaction either way.
            if not self.emulate:
                return Proposal.failed(
                    'unsupported', f'{ctx.model.model_name} has no provider compaction', variant='provider'
                )
        else:
            return Proposal(summary=ProviderSummary(response), supersedes=self.strategy_name, variant='provider')
        settings, parameters = compactor.text_only(ctx)
        messages = compactor.with_appended_prompt(view.messages, NATIVE_PROMPT)
        reply = await compactor.request(ctx, messages, settings=settings, parameters=parameters)
        text = compactor.response_text(reply)
        if (unusable := compactor.unusable(reply, text, 'the model')) is not None:
            return Proposal.failed(*unusable, variant='emulated')
        return Proposal(summary=Summary(text), supersedes=self.strategy_name, variant='emulated')
