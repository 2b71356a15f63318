"""`Recall`: search the full log of everything ever sent, including what was cleared, archived or summarized.

Every part is indexed line by line the first time it is about to be sent, with its provenance (the
tool and arguments of the call it answers, the result id; a call's own arguments and the assistant's reasoning
too, each said to be what it is). A query matches words, not phrases, and
also against the call a line came from, so "media timeout" finds `timeout_ms = 1050` in the output of
`diag.py media` whose header names media forty lines above. Tool output ranks first.

Put `Recall` before compaction strategies in `capabilities=[...]`: the first capability's
`before_model_request` runs first, so lines are indexed before anything is removed.
"""

from __future__ import annotations

import hashlib
import operator
import re
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
    ThinkingPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import FunctionToolset
from pydantic_core import to_jsonable_python

from pydantic_ai_compaction.processors.memory.results import args_json, cleared_by_harness, original_part, result_id_of
from pydantic_ai_compaction.protocols.archive import ArchiveError, ArchiveStore, Hit, LineSource, LogLine
from pydantic_ai_compaction.protocols.metadata import MessageMarks, ResultMarks
from pydantic_ai_compaction.protocols.names import RECALL_TOOL
from pydantic_ai_compaction.runtime.checks import check_instance, check_int
from pydantic_ai_compaction.runtime.degraded import described, warn_degraded
from pydantic_ai_compaction.runtime.encoding import from_json, strip_nul, to_bytes, to_json
from pydantic_ai_compaction.runtime.project import rewrites_accepted
from pydantic_ai_compaction.runtime.scoring import SKIP
from pydantic_ai_compaction.runtime.segment import tool_content_parts
from pydantic_ai_compaction.runtime.stores._query import SEARCH_CANDIDATES, word_pattern, words
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

    _conversation: str | None = field(init=False, repr=False, compare=False)
    """The conversation `_indexed` and `_seen` are about: another one (`index` given another key, a key function
    answering otherwise) starts them over, or its parts would be skipped as indexed."""

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
        self._conversation = None

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
            conversation = self.conversation_id(ctx)
            if self._switch_to(conversation):
                pending, start = self._pending(messages)
            await call_store(
                'index_lines', self._index_pending, conversation, messages, pending, (ctx.prompt, ctx.run_id)
            )
        except ArchiveError as error:
            # Recall degrades; the run goes on (the next request indexes what this one could not). A failure the
            # store reported itself (a setup mistake, a server that cannot be reached) is not said again every request.
            if not error.reported:
                warn_degraded(f'Recall could not index this request: {error}', stacklevel=2)
        else:
            self._advance(messages, start)
        return request_context

    def index(self, conversation_id: str, messages: Sequence[ModelMessage]) -> int:
        """Add the lines of parts not yet in *conversation_id*'s log; returns lines added (blocking: it calls the
        store)."""
        self._switch_to(conversation_id)
        pending, start = self._pending(messages)
        added = self._index_pending(conversation_id, messages, pending)
        self._advance(messages, start)
        return added

    def _switch_to(self, conversation_id: str) -> bool:
        """Make *conversation_id* the one the memo is about; whether it was about another (then it starts over)."""
        if self._conversation == conversation_id:
            return False
        changed = self._conversation is not None
        self._conversation = conversation_id
        if changed:
            self._indexed = set()
            self._seen = []
            self._rewrites = (-1, -1)
        return changed

    def _pending(self, messages: Sequence[ModelMessage]) -> tuple[list[_Pending], int]:
        """Parts this run has not indexed yet, with their fingerprints, and the index the search started at.

        Parts this run already indexed are skipped without asking the store: a request after one new step
        asks only about that step's parts, and reads only the messages after those of the last indexed
        history still at their index.
        """
        generation = rewrites_accepted()
        start = self._unchanged(messages, every=generation != self._rewrites[0])
        self._rewrites = (self._rewrites[0], generation)
        pending: list[_Pending] = []
        for index in range(start, len(messages)):
            message = messages[index]
            # `ForgetReasoning(policy='score')` writes a step's thinking again with `[SKIP]` for the blocks it leaves
            # out. When this run indexed the step before (its other parts, kept as they were, are known), the
            # rewrite is not new reasoning; otherwise (listed after `ForgetReasoning`, a history read anew) it is
            # all of the step's reasoning there is, and is indexed, its `[SKIP]` lines left out.
            rewritten = self._indexed_before_scoring(message)
            for part in message.parts:
                if rewritten and isinstance(part, ThinkingPart):
                    continue
                fingerprint = self._fingerprint(part)
                if fingerprint is not None and fingerprint not in self._indexed:
                    pending.append((fingerprint, part, message, index))
        return pending, start

    def _indexed_before_scoring(self, message: ModelMessage) -> bool:
        """Whether *message* is a step `ForgetReasoning(policy='score')` rewrote after this run indexed it: marked
        `scored`, and a part of it besides its thinking is one this run fingerprinted (the same object)."""
        if message.metadata is None or MessageMarks.from_metadata(message.metadata).reasoning != 'scored':
            return False
        memo = self._fingerprints
        return any(
            (known := memo.get(id(part))) is not None and known[0] is part
            for part in message.parts
            if not isinstance(part, ThinkingPart)
        )

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
        self,
        conversation_id: str,
        messages: Sequence[ModelMessage],
        pending: list[_Pending],
        run: tuple[object, str | None] = (None, None),
    ) -> int:
        """Store the lines of *pending* parts the store does not have yet (*run*: the prompt and id of the run
        indexing them, when one is). Blocking: called in a worker thread."""
        calls = _calls_of(messages, pending)
        known = self.store.indexed(conversation_id, [fingerprint for fingerprint, *_ in pending])
        lines: list[LogLine] = []
        supplied: dict[int, _Supplied] = {}  # per request: its user parts a tool supplied (`ToolReturn.content`)
        for fingerprint, part, message, index in pending:
            if fingerprint not in known:
                if isinstance(part, UserPromptPart) and isinstance(message, ModelRequest) and index not in supplied:
                    supplied[index] = _supplied_parts(messages, index, *run)
                lines.extend(_lines(conversation_id, fingerprint, part, message, calls, supplied.get(index)))
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
        if isinstance(candidate, ToolReturnPart | ToolCallPart):
            tool_part = cast('ToolReturnPart | ToolCallPart', candidate)
            if tool_part.tool_name == RECALL_TOOL:
                # Recall's own answers are lines found already (or "No match"), and its calls the queries: indexed,
                # each search would find the ones before it, nested ever deeper, and outrank the lines they quote.
                return None
            call_id = tool_part.tool_call_id
            if isinstance(tool_part, ToolReturnPart):
                if cleared_by_harness(tool_part):
                    # Harness's placeholder says nothing of the output (indexed as it arrived): indexed, it took a hit
                    # of each search that matched its call's arguments, and every one asking for `cleared`.
                    return None
                source = original_part(tool_part)
        text = _text_of(source)
        if not text:
            return None
        if isinstance(candidate, UserPromptPart) and not isinstance(candidate.content, str):
            # A prompt of several items is fingerprinted by its items run together, as it was before they were read
            # one a line: a store that indexed it then knows it, and a conversation resumed does not index it again.
            text = ''.join(user_text(replace(candidate, content=[item])) for item in candidate.content)
        key = f'{kind}:{call_id}:{text}'
        fingerprint = hashlib.blake2b(to_bytes(key), digest_size=16).hexdigest()
        # Keeping the part referenced makes the id() key safe for the run's duration.
        self._fingerprints[id(part)] = (part, fingerprint)
        return fingerprint

    async def _recall(self, ctx: RunContext[AgentDepsT], query: str) -> ToolReturn[str]:
        """Search everything this conversation has seen, including what is no longer in context.

        Args:
            query: A few words, e.g. "media timeout".
        """
        # Marked as ours (metadata is never sent to the model): a reset checkpoint leaves recall's answers out, which
        # quote lines found already, but not those of a user's own tool that happens to be named `recall`.
        # `ToolReturn[str]`: the tool's return schema stays a string (what `IncludeToolReturnSchemas` shows).
        answer = await self._answer(ctx, query)
        return ToolReturn(return_value=answer, metadata=ResultMarks(recall_answer=True).to_metadata())

    async def _answer(self, ctx: RunContext[AgentDepsT], query: str) -> str:
        """What `_recall` answers *query* with."""
        try:
            hits = await call_store('search', self.store.search, self.conversation_id(ctx), query, self.limit)
        except ArchiveError as error:
            failed = tool_failed('Recall could not search', error)
            return f'Recall is unavailable right now ({failed}); say you are not sure rather than guess.'

        try:
            if not isinstance(hits, list | tuple):  # pyright: ignore[reportUnnecessaryIsInstance]
                # `None` from a `search` that forgot its `return` is no answer, not "no match": the model would be
                # told, with certainty, that nothing was ever said.
                raise TypeError(f'search returned {clip(described(hits), 80)}, not a list of hits')
            if not hits:
                return f'No match for {query!r} anywhere in this conversation.'
            wanted = words(query)
            return '\n'.join(_render(hit, wanted) for hit in hits)
        except Exception as error:  # a store of your own may answer with anything
            failed = tool_failed('Recall could not search', unreadable_answer('search', error))
            return f'Recall is unavailable right now ({failed}); say you are not sure rather than guess.'


def _calls_of(messages: Sequence[ModelMessage], pending: list[_Pending]) -> dict[int, ToolCallPart]:
    """The call each tool result of the requests holding *pending* parts answers, by the result's `id`: the nearest
    call with its id before it (a provider may give the same id to calls of different turns), read from the end.

    A call sits just before its result, so the read stops soon after the new parts; only a result whose call the
    history does not hold reads it whole (once: it is indexed then).
    """
    results: dict[int, list[ToolReturnPart]] = {}
    for _, _, message, index in pending:
        if index not in results and isinstance(message, ModelRequest):
            results[index] = [part for part in message.parts if isinstance(part, ToolReturnPart)]
    waiting: dict[str, list[ToolReturnPart]] = {}  # by call id: results after the position read, their call not found
    calls: dict[int, ToolCallPart] = {}
    first = min(results, default=0)
    for index in range(max(results, default=-1), -1, -1):
        if index < first and not waiting:
            break
        if waiting:
            for part in reversed(messages[index].parts):
                if isinstance(part, ToolCallPart) and (answered := waiting.pop(part.tool_call_id, None)) is not None:
                    calls.update((id(result), part) for result in answered)
        for result in results.get(index, ()):
            waiting.setdefault(result.tool_call_id, []).append(result)
    return calls


_Pending = tuple[str, object, ModelMessage, int]
"""A part not indexed yet: its fingerprint, the part, the message holding it and that message's position."""


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
    if hit.source == 'call':
        origin = f'call to {hit.tool_name}'  # the line is the call's own arguments
    elif hit.source == 'user_or_tool':
        origin = 'user or tool output'  # a run's prompt or a deferred tool's content: the history cannot tell
    elif hit.tool_name:
        origin = f'{hit.tool_name}({args})'
    else:
        origin = hit.source
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
        at = word_pattern(word, False).find(lowered)
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
    if isinstance(part, ToolCallPart):
        return _call_text(cast('ToolCallPart', part))
    if isinstance(part, UserPromptPart):
        return user_text(part)
    if isinstance(part, TextPart | CompactionPart | ThinkingPart):
        return part.content or ''
    return ''


def _call_text(call: ToolCallPart) -> str:
    """A call's arguments as lines: each argument as `name: value`, a text value with its own lines (a file's
    content a tool is given), anything else as JSON. In JSON a text's line breaks are `\\n`, which would glue
    the words on either side of them together."""
    args = call.args
    if isinstance(args, str):
        try:
            value: object = from_json(args) if args.strip() else None  # JSON text: parsed once
        except ValueError:
            return args  # arguments that are not JSON: as they were sent
    else:
        # A dict a model of the user's built may hold keys and values JSON has not (`True`, a datetime): read as
        # the JSON it is sent as, so it reads as the same call given as text.
        value = from_json(args_json(call))
    if not isinstance(value, dict) or not value:
        return args_json(call)
    items = sorted(cast('dict[str, object]', value).items())
    return '\n'.join(f'{key}: {item if isinstance(item, str) else to_json(item)}' for key, item in items)


def _numbered_lines(text: str) -> list[str]:
    """*text*'s lines as a reader counts them: split at each `\\n` (a `\\r` before it dropped), not at the other
    breaks `str.splitlines` knows (a form feed, `\\u2028`), which a model reading the output does not count."""
    return [line.removesuffix('\r') for line in text.split('\n')]


_Supplied = tuple[frozenset[int], frozenset[int]]
"""The user parts of a request a tool supplied, and those that may be a tool's or the user's (`_supplied_parts`)."""


def _supplied_parts(messages: Sequence[ModelMessage], index: int, prompt: object, run: str | None) -> _Supplied:
    """The user parts of the request at *index* a tool supplied (`ToolReturn(content=...)`), and those that may be a
    tool's or the user's.

    pydantic-ai marks neither: a tool's content and the prompt that resumes a run after deferred tools both follow
    the request's returns, a moment after them, the prompt last (`tool_content_parts` tells them apart by the
    *prompt* of the run indexing them, *run*). Read again from a history (a later run, `Recall.index`), the
    request that starts another run holds that run's prompt if it was given one, which is not known here: its
    last such part is told as either, unless more parts follow the returns than tools could have supplied.
    """
    message = messages[index]
    assert isinstance(message, ModelRequest)
    own = message.run_id
    starts = own is not None and (index == 0 or messages[index - 1].run_id != own)
    if not starts or (run is not None and own == run):
        return tool_content_parts(message, prompt), frozenset()
    found = tool_content_parts(message)
    if not found:
        return found, found
    last = max(found)
    if any(isinstance(part, UserPromptPart) for part in message.parts[last + 1 :]):
        return found, frozenset()  # a part after as many as the tools could supply: the prompt, and these theirs
    return found - {last}, frozenset({last})


def _indexed_args(call: ToolCallPart | None) -> str:
    """A call's arguments as they are indexed beside each line of its output: up to `INDEXED_ARGS_CHARS`."""
    args = args_json(call) if call is not None else ''
    return args if len(args) <= INDEXED_ARGS_CHARS else args[: INDEXED_ARGS_CHARS - 1] + '…'


def _lines(
    conversation_id: str,
    fingerprint: str,
    part: object,
    message: ModelMessage,
    calls: dict[int, ToolCallPart],
    supplied: _Supplied | None,
) -> list[LogLine]:
    """The log lines of *part* with their provenance (*supplied*: `_supplied_parts` of its request)."""
    source: LineSource
    tool_name = args = result_id = ''
    text_part: object = part
    own: re.Pattern[str] | None = None
    if isinstance(part, ToolReturnPart):
        returned = cast('ToolReturnPart', part)
        source = 'tool'
        tool_name, args = returned.tool_name, _indexed_args(calls.get(id(returned)))
        result_id = result_id_of(returned) or ''
        text_part = original_part(returned)  # numbered lines are the output's own, without `Archive`'s id line
    elif isinstance(part, ToolCallPart):
        source = 'call'
        tool_name = cast('ToolCallPart', part).tool_name
    elif isinstance(part, CompactionPart):
        source = 'summary'
        own = _OWN_CALL_ENTRY
    elif isinstance(part, ThinkingPart):
        source = 'reasoning'
    elif isinstance(part, UserPromptPart) and isinstance(message, ModelRequest):
        # A tool's `ToolReturn(content=...)` travels as a user part: tool output, never the user's words.
        at = next((i for i, other in enumerate(message.parts) if other is part), None)
        tool, unclear = supplied if supplied is not None else (frozenset[int](), frozenset[int]())
        source = 'tool' if at in tool else 'user_or_tool' if at in unclear else 'user'
        if source == 'tool':
            returned_parts = [p for p in message.parts if isinstance(p, ToolReturnPart) and p.outcome == 'success']
            if len(returned_parts) == 1:  # the only tool that returned in this request supplied it
                only = returned_parts[0]
                tool_name, args = only.tool_name, _indexed_args(calls.get(id(only)))
    else:
        source = 'assistant'
    # PostgreSQL text cannot hold NUL; the line stays findable without it.
    text = strip_nul(_text_of(text_part))
    return [
        LogLine(conversation_id, fingerprint, number, line, source, tool_name, args, result_id)
        for number, line in enumerate(_numbered_lines(text))
        if line.strip()
        and not (source == 'reasoning' and line.strip() == SKIP)  # a block scoring left out
        and not (own is not None and own.match(line))
    ]


_OWN_CALL_ENTRY = re.compile(rf'\s*- {RECALL_TOOL}\(')
"""A checkpoint's entry of a recall call (`- recall({"query":...}) → success, 51 chars`): its query, which is not
indexed from the call either."""
