"""`Recall`: search the full log of everything ever sent, including what was cleared, archived or summarized.

Every part is indexed line by line the first time it is about to be sent, with its provenance (the
tool and arguments of the call it answers, the result id). A query matches words, not phrases, and
also against the call a line came from, so "media timeout" finds `timeout_ms = 1050` in the output of
`diag.py media` whose header names media forty lines above. Tool output ranks first.

Put `Recall` before compaction strategies in `capabilities=[...]`: the first capability's
`before_model_request` runs first, so lines are indexed before anything is removed.
"""

from __future__ import annotations

import hashlib
import operator
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, count
from typing import TYPE_CHECKING, cast

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import FunctionToolset
from pydantic_core import to_jsonable_python

from pydantic_ai_compaction.processors.memory.results import args_json, original_part, result_id_of
from pydantic_ai_compaction.protocols.archive import ArchiveError, ArchiveStore, Hit, LineSource, LogLine
from pydantic_ai_compaction.protocols.names import RECALL_TOOL
from pydantic_ai_compaction.runtime.checks import check_instance, check_int
from pydantic_ai_compaction.runtime.degraded import warn_degraded
from pydantic_ai_compaction.runtime.encoding import strip_nul, to_bytes, to_json
from pydantic_ai_compaction.runtime.project import rewrites_accepted
from pydantic_ai_compaction.runtime.stores._query import SEARCH_CANDIDATES, words
from pydantic_ai_compaction.runtime.stores.access import (
    MEMORY_TOOL_RETRIES,
    ConversationKey,
    call_store,
    check_conversation,
    conversation_key,
    tool_failed,
    unreadable_answer,
)
from pydantic_ai_compaction.runtime.stores.memory import InMemoryArchiveStore
from pydantic_ai_compaction.runtime.transcript import clip, user_text

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

RECALL_INSTRUCTIONS = """\
The recall tool searches everything this conversation has seen, including what is no longer in your
context. When a question needs an exact value you do not see, search for it instead of answering from
memory; if nothing is found, say you are not sure."""


@dataclass
class Recall(AbstractCapability[AgentDepsT]):
    """The `recall(query)` tool over the full conversation log.

    Example:
        ```python
        store = SQLiteArchiveStore('agent.sqlite3')
        agent = Agent(model, capabilities=[Recall(store=store), Fork()])
        ```
    """

    store: ArchiveStore = field(default_factory=InMemoryArchiveStore)
    """Where the log is indexed (SQLite FTS5 or PostgreSQL full-text in production)."""

    conversation: ConversationKey = None
    """The key lines are filed under: a string, or a function of the run context; `None` files them under
    the run. Never read from the submitted history (see `Archive.conversation`)."""

    limit: int = 8
    """Lines returned per query, at most `SEARCH_CANDIDATES` (500)."""

    instructions: str = RECALL_INSTRUCTIONS
    """What the agent is taught about recall."""

    _fingerprints: dict[int, tuple[object, str]] = field(init=False, repr=False, compare=False)
    """Per run: each part's fingerprint by its identity (the part is kept referenced, so the id stays its own)."""

    _indexed: set[str] = field(init=False, repr=False, compare=False)
    """Per run: fingerprints of parts already in the store, so only a request's new parts ask it."""

    _seen: list[weakref.ref[ModelMessage]] = field(init=False, repr=False, compare=False)
    """Per run: the last indexed history's messages, in order (weak). Every part of those still at their
    index is in `_indexed` (or has no text), so a request reads only what follows them."""

    _rewrites: tuple[int, int] = field(init=False, repr=False, compare=False)
    """Per run: `rewrites_accepted()` when `_seen` was last advanced, and when the pending parts were read."""

    def __post_init__(self) -> None:
        check_instance('Recall', 'store', self.store, ArchiveStore, 'an ArchiveStore')
        check_conversation('Recall', self.conversation)
        # A store ranks at most `SEARCH_CANDIDATES` lines per word; a larger limit asks for nothing more, and past
        # 2**63 PostgreSQL refused every search (`bigint out of range`).
        check_int('Recall', 'limit', self.limit, minimum=1, maximum=SEARCH_CANDIDATES)
        check_instance('Recall', 'instructions', self.instructions, str, 'a string')
        self._fingerprints = {}
        self._indexed = set()
        self._seen = []
        self._rewrites = (-1, -1)

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """A copy with its own memo of parts already fingerprinted."""
        return replace(self)

    def get_instructions(self) -> str:
        """When to search."""
        return self.instructions

    def get_toolset(self) -> FunctionToolset[AgentDepsT]:
        """The `recall` tool."""
        # Arguments that fail validation are retried, as many times as `Archive` allows (pydantic-ai's default is 1).
        toolset: FunctionToolset[AgentDepsT] = FunctionToolset(max_retries=MEMORY_TOOL_RETRIES)
        toolset.add_function(self._recall, name=RECALL_TOOL, takes_ctx=True)
        return toolset

    def conversation_id(self, ctx: RunContext[AgentDepsT]) -> str:
        """The key this run's lines are filed under (see `conversation`)."""
        return conversation_key(ctx, self.conversation)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Index every part not indexed yet (the request itself is unchanged)."""
        messages = list(request_context.messages)
        # Which parts are new is known from the run's memo, here; only a request that brings new parts pays
        # for a worker thread and the store (this hook runs before every request).
        pending, start = self._pending(messages)
        if not pending:
            self._advance(messages, start)
            return request_context
        try:
            await call_store('index_lines', self._index_pending, self.conversation_id(ctx), messages, pending)
        except ArchiveError as error:
            # Recall degrades; the run goes on (the next request indexes what this one could not). A failure the
            # store reported itself (a setup mistake, a server that cannot be reached) is not said again every request.
            if not error.reported:
                warn_degraded(f'Recall could not index this request: {error}', stacklevel=2)
        else:
            self._advance(messages, start)
        return request_context

    def index(self, conversation_id: str, messages: Sequence[ModelMessage]) -> int:
        """Add the lines of parts not yet in the log; returns lines added (blocking: it calls the store)."""
        pending, start = self._pending(messages)
        added = self._index_pending(conversation_id, messages, pending)
        self._advance(messages, start)
        return added

    def _pending(self, messages: Sequence[ModelMessage]) -> tuple[list[tuple[str, object, ModelMessage]], int]:
        """Parts this run has not indexed yet, with their fingerprints, and the index the search started at.

        Parts this run already indexed are skipped without asking the store: a request after one new step
        asks only about that step's parts, and reads only the messages after those of the last indexed
        history still at their index.
        """
        generation = rewrites_accepted()
        start = self._unchanged(messages, every=generation != self._rewrites[0])
        self._rewrites = (self._rewrites[0], generation)
        pending: list[tuple[str, object, ModelMessage]] = []
        for index in range(start, len(messages)):
            message = messages[index]
            for part in message.parts:
                fingerprint = self._fingerprint(part)
                if fingerprint is not None and fingerprint not in self._indexed:
                    pending.append((fingerprint, part, message))
        return pending, start

    def _unchanged(self, messages: Sequence[ModelMessage], *, every: bool) -> int:
        """How many leading messages are the last indexed history's, at their index (0 when it was replaced).

        Read from the end: pydantic-ai appends to the history, and a rewrite either replaces messages at its
        end (a numbered result) or moves what follows it (a summary in place of older messages), which shows
        at the end as well. The first message is checked too, so a history that starts anew is read whole.
        A rewrite that swaps one message for one further back leaves every later message at its index: when
        the runtime accepted a log rewrite since the last look (*every*), every message is compared (in C),
        so `Archive`'s stub for an older result is indexed. An edit made outside the runtime that swaps one
        message for one in the middle is not seen: comparing every message on every request would cost more
        than the rest of it.
        """
        seen = self._seen
        if not seen or not messages or seen[0]() is not messages[0]:
            return 0
        if every:
            same = map(operator.is_, map(operator.call, seen), messages)
            return next(compress(count(), map(operator.not_, same)), min(len(seen), len(messages)))
        for index in range(min(len(seen), len(messages)) - 1, -1, -1):
            if seen[index]() is messages[index]:
                return index + 1
        return 0  # pragma: no cover - index 0 matched above

    def _advance(self, messages: Sequence[ModelMessage], start: int) -> None:
        """Remember *messages* as indexed: the first *start* are the ones already remembered."""
        del self._seen[start:]
        self._seen.extend(weakref.ref(messages[index]) for index in range(start, len(messages)))
        self._rewrites = (self._rewrites[1], self._rewrites[1])

    def _index_pending(
        self, conversation_id: str, messages: Sequence[ModelMessage], pending: list[tuple[str, object, ModelMessage]]
    ) -> int:
        """Store the lines of *pending* parts the store does not have yet. Blocking: called in a worker thread."""
        calls = _calls_of(messages, pending)
        known = self.store.indexed(conversation_id, [fingerprint for fingerprint, *_ in pending])
        lines: list[LogLine] = []
        for fingerprint, part, message in pending:
            if fingerprint not in known:
                lines.extend(_lines(conversation_id, fingerprint, part, message, calls))
        added = self.store.index_lines(lines)
        self._indexed.update(fingerprint for fingerprint, *_ in pending)
        return added

    def _fingerprint(self, candidate: object) -> str | None:
        part: object = candidate  # kept as `object`: isinstance below must not narrow it for the key
        memo = self._fingerprints.get(id(part))
        if memo is not None and memo[0] is part:
            return memo[1]
        # The original text: Archive's id prefix must not make a numbered result look new.
        call_id = ''
        source: object = part
        kind = type(part).__name__
        if isinstance(candidate, ToolReturnPart):
            returned = cast('ToolReturnPart', candidate)
            if returned.tool_name == RECALL_TOOL:
                # Recall's own answers are lines found already (or "No match"): indexed, each search would find the
                # answers before it, nested ever deeper, and outrank the lines they quote.
                return None
            call_id = returned.tool_call_id
            source = original_part(returned)
        text = _text_of(source)
        if not text:
            return None
        key = f'{kind}:{call_id}:{text}'
        fingerprint = hashlib.blake2b(to_bytes(key), digest_size=16).hexdigest()
        # Keeping the part referenced makes the id() key safe for the run's duration.
        self._fingerprints[id(part)] = (part, fingerprint)
        return fingerprint

    async def _recall(self, ctx: RunContext[AgentDepsT], query: str) -> str:
        """Search everything this conversation has seen, including what is no longer in context.

        Args:
            query: A few words, e.g. "media timeout".
        """
        try:
            hits = await call_store('search', self.store.search, self.conversation_id(ctx), query, self.limit)
        except ArchiveError as error:
            failed = tool_failed('Recall could not search', error)
            return f'Recall is unavailable right now ({failed}); say you are not sure rather than guess.'

        try:
            if not hits:
                return f'No match for {query!r} anywhere in this conversation.'
            wanted = words(query)
            return '\n'.join(_render(hit, wanted) for hit in hits)
        except Exception as error:  # a store of your own may answer with anything
            failed = tool_failed('Recall could not search', unreadable_answer('search', error))
            return f'Recall is unavailable right now ({failed}); say you are not sure rather than guess.'


def _calls_of(
    messages: Sequence[ModelMessage], pending: list[tuple[str, object, ModelMessage]]
) -> dict[str, ToolCallPart]:
    """The newest call with each id a pending tool result answers, read from the end.

    A call sits just before its result, so the read stops soon after the new parts; only a result whose call
    the history does not hold reads it whole (once: it is indexed then).
    """
    wanted = {part.tool_call_id for _, part, _ in pending if isinstance(part, ToolReturnPart)}
    calls: dict[str, ToolCallPart] = {}
    for index in range(len(messages) - 1, -1, -1):
        if len(calls) == len(wanted):
            break
        for part in reversed(messages[index].parts):
            if isinstance(part, ToolCallPart) and part.tool_call_id in wanted and part.tool_call_id not in calls:
                calls[part.tool_call_id] = part
    return calls


SHOWN_ARGS_CHARS = 200
"""A hit's call arguments are shown up to this many characters: its provenance, not the call again (a script
or a patch a tool was given would be repeated in every hit of its output)."""

SHOWN_LINE_CHARS = 500
"""A hit's line is shown up to this many characters, around the first query word it holds: a line of minified
JSON or a one-line log can run to megabytes, and recall is there to fetch a value without refilling the
context."""

INDEXED_ARGS_CHARS = 500
"""A call's arguments are indexed with each line of its output up to this many characters (a path, a URL, a
query): in full, a 60 KB script run for 1,000 lines of output wrote 60 MB of index."""


def _render(hit: Hit, wanted: Sequence[str]) -> str:
    """One hit as the model reads it: provenance, then the line (both cut to what a hit needs)."""
    args = clip(hit.args, SHOWN_ARGS_CHARS)
    origin = f'{hit.tool_name}({args})' if hit.tool_name else hit.source
    result = f' {hit.result_id}' if hit.result_id else ''
    return f'[{origin}{result}, line {hit.line_no}] {_excerpt(hit.text, wanted)}'


def _excerpt(text: str, wanted: Sequence[str]) -> str:
    """*text*, or for a line longer than `SHOWN_LINE_CHARS`, that many characters of it around the first query
    word it holds (its start when it holds none itself: the word was in its call), and its length."""
    if len(text) <= SHOWN_LINE_CHARS:
        return text
    at = _first_word_at(text, wanted)
    start = max(0, min(at - SHOWN_LINE_CHARS // 4, len(text) - SHOWN_LINE_CHARS))
    end = start + SHOWN_LINE_CHARS
    before = '…' if start else ''
    after = '…' if end < len(text) else ''
    return f'{before}{text[start:end]}{after} (a line of {len(text):,} characters, cut)'


def _first_word_at(text: str, wanted: Sequence[str]) -> int:
    """Where in *text* the first of *wanted* (lowercased query words) starts a word, as the stores match one (`port`
    in `"port": 8443`, not in `support`); 0 when none does."""
    lowered = text.lower()
    first: int | None = None
    for word in wanted:
        at = lowered.find(word) if word else -1
        while at > 0 and lowered[at - 1].isalnum():
            at = lowered.find(word, at + 1)
        if at >= 0 and (first is None or at < first):
            first = at
    if first is None:
        return 0
    if len(lowered) == len(text):
        return first
    # A letter lengthened when lowercased (`İ` is `i` and a combining dot): back to the text's own positions.
    seen = 0
    for index, character in enumerate(text):
        seen += len(character.lower())
        if seen > first:
            return index
    return len(text)


def _text_of(part: object) -> str:
    if isinstance(part, ToolReturnPart):
        try:
            return part.model_response_str()
        except ValueError:
            # pydantic will not write lone surrogates in structured output; the lossless encoding will.
            try:
                return to_json(to_jsonable_python(part.content))
            except ValueError:
                return str(part.content)
    if isinstance(part, UserPromptPart):
        return user_text(part)
    if isinstance(part, TextPart | CompactionPart):
        return part.content or ''
    return ''


def _lines(
    conversation_id: str, fingerprint: str, part: object, message: ModelMessage, calls: dict[str, ToolCallPart]
) -> list[LogLine]:
    # PostgreSQL text cannot hold NUL; the line stays findable without it.
    text = strip_nul(_text_of(part))
    source: LineSource
    tool_name = args = result_id = ''
    if isinstance(part, ToolReturnPart):
        returned = cast('ToolReturnPart', part)
        source = 'tool'
        call = calls.get(returned.tool_call_id)
        tool_name = returned.tool_name
        args = args_json(call) if call is not None else ''
        if len(args) > INDEXED_ARGS_CHARS:
            args = args[: INDEXED_ARGS_CHARS - 1] + '…'
        result_id = result_id_of(returned) or ''
    elif isinstance(part, CompactionPart):
        source = 'summary'
    elif isinstance(part, UserPromptPart) and isinstance(message, ModelRequest):
        source = 'user'
    else:
        source = 'assistant'
    return [
        LogLine(conversation_id, fingerprint, number, line, source, tool_name, args, result_id)
        for number, line in enumerate(text.splitlines())
        if line.strip()
    ]
