"""`Notes`: the agent writes decisions, rejected approaches and progress when they happen.

Notes are stored, stay in the history as ordinary tool calls, and the runtime copies each note, verbatim,
into the compaction boundary that drops its last verbatim copy (the call, or an earlier boundary), so no
summary can lose them and none is written again at every compaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import FunctionToolset

from pydantic_ai_compaction.protocols.archive import ArchiveError, ArchiveStore, Note, NoteKind
from pydantic_ai_compaction.protocols.names import NOTE_TOOL
from pydantic_ai_compaction.runtime.checks import check_instance
from pydantic_ai_compaction.runtime.stores.access import (
    MEMORY_TOOL_RETRIES,
    ConversationKey,
    call_store,
    check_conversation,
    conversation_key,
    tool_failed,
)
from pydantic_ai_compaction.runtime.stores.memory import InMemoryArchiveStore

NOTES_INSTRUCTIONS = """\
Write a note with the note tool when something happens that you must not forget, at the moment it happens:
a decision and why (kind "decision"), an approach you tried and rejected and why ("rejected"), progress
("progress"), or a fact you will need later ("fact"). Notes survive every compaction verbatim."""


@dataclass
class Notes(AbstractCapability[AgentDepsT]):
    """The `note(kind, text)` tool.

    Example:
        ```python
        agent = Agent(model, capabilities=[Notes(store=store), Fork()])
        ```
    """

    store: ArchiveStore = field(default_factory=InMemoryArchiveStore)
    """Where notes are kept (shared with `Archive` and `Recall` if you like)."""

    conversation: ConversationKey = None
    """The key notes are filed under: a string, or a function of the run context; `None` files them under
    the run. Never read from the submitted history (see `Archive.conversation`)."""

    instructions: str = NOTES_INSTRUCTIONS
    """What the agent is taught about notes."""

    def __post_init__(self) -> None:
        check_instance('Notes', 'store', self.store, ArchiveStore, 'an ArchiveStore')
        check_conversation('Notes', self.conversation)
        check_instance('Notes', 'instructions', self.instructions, str, 'a string')

    def get_instructions(self) -> str:
        """When to write a note."""
        return self.instructions

    def get_toolset(self) -> FunctionToolset[AgentDepsT]:
        """The `note` tool."""
        # Arguments that fail validation are retried: as many times as `Archive` allows, so a model that gets the
        # `kind` wrong twice does not end the run.
        toolset: FunctionToolset[AgentDepsT] = FunctionToolset(max_retries=MEMORY_TOOL_RETRIES)
        toolset.add_function(self._note, name=NOTE_TOOL, takes_ctx=True)
        return toolset

    async def _note(self, ctx: RunContext[AgentDepsT], kind: NoteKind, text: str) -> str:
        """Write down a decision, a rejected approach, progress or a fact, verbatim.

        Args:
            kind: decision, rejected, progress or fact.
            text: The note, self-contained.
        """
        if not text.strip():
            # An answer, not a retry (as `context_apply` answers an empty note): a blank note would be restated by
            # every boundary that drops it, saying nothing.
            return 'Nothing was noted: the note is empty. Call note again with what to remember.'
        try:
            note = Note(kind, text.strip())
            await call_store('add_note', self.store.add_note, conversation_key(ctx, self.conversation), note)
        except ArchiveError as error:
            # An answer, not a retry: the note stays in the history as this call, and boundaries copy it from there.
            failed = tool_failed('Notes could not store a note', error)
            return f'The note could not be stored ({failed}); it stays in this conversation as written.'
        return 'Noted.'
