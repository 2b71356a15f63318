"""Types and protocols of the archive (reversible forgetting), the notes and the recall log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

NoteKind = Literal['decision', 'rejected', 'progress', 'fact']
LineSource = Literal['tool', 'user', 'assistant', 'summary', 'note', 'call', 'reasoning', 'user_or_tool']
"""Where a log line came from: a tool's output (or content a tool supplied), the user, the assistant's text, a
compaction's summary, a note, a tool call's own arguments, the assistant's reasoning, or either the user or a tool
(a part read again from a history that cannot tell the prompt resuming a run from a deferred tool's content)."""


@dataclass(frozen=True)
class ArchivedResult:
    """One archived tool result: everything needed to give the model back the exact original."""

    conversation_id: str
    ref: str
    """Archive reference shown in the stub (`a1`, `a2`, ...)."""

    result_id: str
    """The result's id (`r7`)."""

    tool_name: str
    tool_call_id: str
    args_json: str
    """The call's arguments as JSON."""

    payload: bytes
    """The original `ToolReturnPart`, serialized by pydantic-ai (text, images and files byte-exact)."""

    note: str
    """What the agent wrote about it when archiving."""

    created_at: str
    """ISO 8601 time of archiving."""


@dataclass(frozen=True)
class LogLine:
    """One line of the full conversation log, with where it came from."""

    conversation_id: str
    fingerprint: str
    """Identity of the part the line belongs to, so a part is indexed once however often it is sent."""

    line_no: int
    text: str
    source: LineSource
    tool_name: str = ''
    args: str = ''
    result_id: str = ''


@dataclass(frozen=True)
class Hit:
    """A recall result: one line, with provenance."""

    text: str
    source: LineSource
    tool_name: str
    args: str
    result_id: str
    line_no: int
    score: float


@dataclass(frozen=True)
class Note:
    """A note the agent wrote (decision, rejected approach, progress, fact)."""

    kind: NoteKind
    text: str


class ArchiveError(RuntimeError):
    """A store could not complete an operation; nothing was changed.

    Every store raises this, and only this, for any failure of its database (full, read-only, locked,
    missing, corrupt, disconnected). The message names the operation and the file or server, never a
    password, so it can be shown to the model as it is.
    """

    def __init__(
        self, message: str, *, operation: str = '', target: str = '', setup: bool = False, reported: bool = False
    ) -> None:
        """Build the error.

        Args:
            message: What went wrong, in a few words.
            operation: The store operation that failed (`put_archived`, `search`, `open`, ...).
            target: The database: a file path, or a PostgreSQL DSN without its password.
            setup: A mistake in the store's setup (a login refused, a database missing), which the store
                reported once with a `SetupWarning`: capabilities do not warn about it again at every call.
            reported: A failure the store has already reported once with a warning (a PostgreSQL server that
                cannot be reached): capabilities do not warn about it again at every call. Implied by *setup*.
        """
        super().__init__(message)
        self.operation = operation
        """The store operation that failed."""
        self.target = target
        """The database the operation ran on (path, or DSN without password)."""
        self.setup = setup
        """Whether the failure is a mistake in the store's setup, already reported with a `SetupWarning`."""
        self.reported = reported or setup
        """Whether the store has already reported this failure with a warning (a setup mistake, or a server that
        cannot be reached): said once by the store, not again by every capability at every call."""


@runtime_checkable
class ArchiveStore(Protocol):
    """Where archived originals, the result-id counter, notes and the recall log live, per conversation.

    A conversation can only ever read its own entries: every method takes the conversation id and
    every query is filtered by it.
    """

    def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
        """Reserve *count* consecutive numbers of a per-conversation counter (`result`, `archive`)."""
        ...

    def put_archived(self, entries: Sequence[ArchivedResult]) -> None:
        """Store a batch atomically: all of it or, on error, none of it (raise `ArchiveError`)."""
        ...

    def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
        """The entry, or `None` when this conversation has no such reference."""
        ...

    def add_note(self, conversation_id: str, note: Note) -> None:
        """Append a note."""
        ...

    def notes(self, conversation_id: str) -> list[Note]:
        """Every note, oldest first."""
        ...

    def index_lines(self, lines: Sequence[LogLine]) -> int:
        """Add lines to the recall log, skipping parts already indexed; returns lines added."""
        ...

    def indexed(self, conversation_id: str, fingerprints: Sequence[str]) -> set[str]:
        """Which of these part fingerprints are already in the log."""
        ...

    def search(self, conversation_id: str, query: str, limit: int = 8) -> list[Hit]:
        """Lines matching every word of *query* (any word if none match all), tool output first."""
        ...
