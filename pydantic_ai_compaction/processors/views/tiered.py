"""`ClearThenSummarize` (formerly `Tiered`): compaction as a view. Clear old tool output at 50 %, summarize at 75 %.

The persisted history is never changed: only what the model is sent is. The projection is reused
across requests until the next compaction, so the provider's cached prefix stays stable between
compactions. Tier 1 turns older tool outputs into one line each (its size, its opening words, how to
get it back), only in batches that save at least 10 % of the window. Tier 2 replaces older exchanges by a
handoff note the model writes, and *updates* at the next compaction instead of rewriting, followed by
parts copied by code: the user's messages (newest first, within 5 % of the window), the files changed and the notes.
With `Recall` in front, every cleared or summarized detail stays searchable.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, count
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
from pydantic_ai.messages import (
    BaseToolReturnPart,
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    MultiModalContent,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    is_multi_modal_content,
)
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.processors.memory.results import archive_results, archived_ref_of, shown_number
from pydantic_ai_compaction.protocols.archive import ArchiveError, ArchiveStore
from pydantic_ai_compaction.protocols.metadata import ResultMarks, is_handoff
from pydantic_ai_compaction.protocols.names import RECALL_TOOL, WRITE_TOOLS
from pydantic_ai_compaction.protocols.types import METADATA_KEY, CompactionRecord
from pydantic_ai_compaction.runtime import carry, compactor
from pydantic_ai_compaction.runtime.checks import (
    MAX_WINDOW,
    ConfigurationError,
    check_callable,
    check_instance,
    check_int,
    check_model,
    check_number,
    check_optional_int,
    check_pattern,
)
from pydantic_ai_compaction.runtime.context import CompactionContext, for_request
from pydantic_ai_compaction.runtime.degraded import described, warn_degraded, warn_if_setup_error
from pydantic_ai_compaction.runtime.encoding import clean_text
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.instructions import tool_provided
from pydantic_ai_compaction.runtime.memo import same_objects
from pydantic_ai_compaction.runtime.notes import NOTES_HEADER, gather_notes
from pydantic_ai_compaction.runtime.project import project
from pydantic_ai_compaction.runtime.retry import RetryPolicy
from pydantic_ai_compaction.runtime.segment import (
    ConversationView,
    Exchange,
    compactions_so_far,
    is_restatement,
    segment,
)
from pydantic_ai_compaction.runtime.shape import ShapeCheck
from pydantic_ai_compaction.runtime.stores.access import (
    ConversationKey,
    check_conversation,
    conversation_key,
    readable_error,
)
from pydantic_ai_compaction.runtime.tokens import (
    DEFAULT_CONTEXT_WINDOW,
    GrowingEstimate,
    estimate_token_count,
    resolve_context_window,
    step_start,
)
from pydantic_ai_compaction.runtime.transcript import clip, render_messages, return_text, user_text
from pydantic_ai_compaction.runtime.trigger import text_tokens
from pydantic_ai_compaction.runtime.wrappers import neutralize

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult

HANDOFF_MARKER = '[pydantic-ai-compaction: handoff note request]'
"""First line of the handoff-note request."""

HANDOFF_HEADER = (
    'Handoff note: earlier work in this conversation was compacted. Re-read files before editing them, and use '
    'recall for exact details (values, ids, error messages) instead of answering from memory.'
)

HANDOFF_PROMPT = """{marker}
Write the handoff note that will replace the transcript below, for yourself, under these headings:
Goal / Done / Decisions / Rejected approaches / Next steps.
{update}
<transcript>
{transcript}
</transcript>"""

UPDATE_INSTRUCTION = """A previous handoff note exists. UPDATE it: keep what is still true, add what the transcript
adds, remove what is obsolete. Do not rewrite it from scratch.
<previous-note>
{previous}
</previous-note>"""

CLEARED = 'cleared'

HANDOFF_STRATEGY = 'tiered'
"""`CompactionRecord.strategy` of the handoff note's boundary (the name reports have always used)."""


@dataclass
class _Projection:
    """What the model is sent in place of the first `covers` persisted messages."""

    covers: int = 0
    messages: list[ModelMessage] = field(default_factory=list[ModelMessage])
    note: str | None = None
    covered: list[ModelMessage] = field(default_factory=list[ModelMessage])
    """The persisted messages the projection stands for, to notice when another capability changed them (never
    changed in place: a new projection gets a new list)."""

    written: set[str] = field(default_factory=set[str])
    """Keys of the messages it made (its handoff boundary) that the saved history holds whole already."""

    base: carry.Base | None = None
    """The last record the saved history holds (read back, or written in this run), for the next to build on."""


@dataclass(frozen=True)
class _Unwritten:
    """A projection made for the request in progress, to be recorded with its response (`runtime.carry.record`)."""

    covered: list[ModelMessage]
    """The saved messages it stands for, from the first (the same objects: the digest reads them as they are when
    the response arrives)."""
    shown: list[ModelMessage]
    """What is sent in their place."""
    ops: list[Any]
    """Its entries (`carry.encode`)."""
    new: dict[str, Any]
    """The messages it made, written whole once (`carry.encode`)."""
    state: dict[str, Any]
    """What is saved beside it: the handoff note, the archive key."""
    base: carry.Base | None
    """The record before it, which it starts from."""


@dataclass(frozen=True)
class _Written:
    """A record written into a response, until the next request finds that response saved (`_confirm`)."""

    id: str
    """The record's id."""
    unwritten: _Unwritten
    """What it records, to be written again if the response was not saved (its `new`: the made messages it was the
    first to write whole, none of which the history held when it was made)."""
    projection: _Projection
    """The projection it records (written again only while the view sends it)."""


@dataclass
class ClearThenSummarize(AbstractCapability[AgentDepsT]):
    """Clear, then summarize, as a request-only view over a history that keeps everything.

    Not harness's `TieredCompaction` (which tries compaction strategies in turn until one reaches a
    target, and rewrites the history): this is one view with two thresholds, and the persisted history
    is never changed. `Tiered` is the name it had before, kept as an alias.

    Example:
        ```python
        store = SQLiteArchiveStore('agent.sqlite3')
        agent = Agent(model, capabilities=[Recall(store=store), Notes(store=store), ClearThenSummarize()])
        ```
    """

    context_window: int | None = None
    """Window in tokens; `None` resolves it from the model (harness `resolve_context_window`)."""

    fallback_context_window: int = DEFAULT_CONTEXT_WINDOW
    """Window assumed when the model's cannot be resolved."""

    clear_at: float = 0.5
    """Clear older tool output once the request reaches this fraction of the window."""

    clear_min_saving: float = 0.10
    """Clear only in batches that save at least this fraction of the window."""

    keep_results: int = 3
    """Newest tool results that clearing leaves verbatim. It counts tool results, not exchanges (one step
    that calls three tools brings three), which is why it is not called `keep_last`. See `fit_kept_results`."""

    fit_kept_results: bool = True
    """When the request would still be at or over `clear_at` with the `keep_results` newest results verbatim,
    now or at the next request if that one brings results as large as the request in progress does, keep
    only the results of the request in progress (`True`). With `False` they are all kept anyway, and clearing
    then runs again at every request, one result at a time: each run changes the request before the kept
    results, so the provider writes them to its cache again every time (the presets that reproduce a
    published policy keep it)."""

    file_tokens: int = 1_600
    """Tokens each file in a request (an image or a document, in a tool result or a prompt) is taken to cost. The
    text estimate counts a file by its reference alone, as harness's does, while a provider bills an image by its
    size (Anthropic about width × height / 750 tokens, up to about 1,600; OpenAI up to 765 at high detail): without
    this, results holding screenshots would fill the window without crossing a threshold and never be cleared."""

    summarize: bool = True
    """`False` keeps only the clearing tier (the seed study's "clearing alone" setup)."""

    summarize_at: float = 0.75
    """Summarize once the request reaches this fraction of the window..."""

    summarize_max_tokens: int = 200_000
    """...or this many tokens, whichever comes first."""

    summarize_to: float = 0.40
    """After summarizing, keep the newest exchanges that fit in this fraction of the window."""

    user_messages_share: float = 0.05
    """Budget, as a fraction of the window, for the user's messages copied verbatim (newest first)."""

    model: Model | str | None = None
    """Model that writes the handoff note; `None` uses the request's model."""

    model_settings: ModelSettings | None = None
    """Settings for the handoff-note call."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retries for the handoff-note call."""

    store: ArchiveStore | None = None
    """When set, cleared outputs are archived there and their one-line stub names the archive reference,
    so `Archive`'s `context_recover` (same store and conversation) brings back the exact original."""

    conversation: ConversationKey = None
    """The key archived outputs are filed under (as `Archive.conversation`); default: the run."""

    write_tools: str = WRITE_TOOLS
    """Tool names whose calls changed files; the handoff note lists their `path` arguments."""

    handoff_input_share: float = 0.8
    """Share of the window the transcript given to the handoff-note writer may take. Tool outputs are given
    whole when they fit; otherwise the longest are shortened evenly, and the transcript says so."""

    observer: EventObserver | None = None
    """Called with a `CompactionEvent` for every request this view changed (and every projection refused)."""

    _projection: _Projection = field(init=False, repr=False, compare=False)
    """Per run: what the model is sent in place of the persisted history's start."""

    _writes: re.Pattern[str] = field(init=False, repr=False, compare=False)

    _size: GrowingEstimate = field(init=False, repr=False, compare=False)
    """Per run: the view's estimate and its files, read only for the messages after the previous request's."""

    _check: ShapeCheck = field(init=False, repr=False, compare=False)
    """Per run: the projection's shape check, which scans only what follows the previous request's."""

    _measured: _Projection | None = field(init=False, repr=False, compare=False)
    """Per run: the projection the view `_size` measured last was built on (a compaction then changes it)."""

    _sent: tuple[_Projection, list[ModelMessage]] | None = field(init=False, repr=False, compare=False)
    """Per run: the projection the previous request was built on and the messages built for it, so a request on the
    same projection has its projected messages neither measured nor checked again (`_reused`)."""

    _read_back: bool = field(init=False, repr=False, compare=False)
    """Per run: whether the projection an earlier run saved with the history was looked for."""

    _pending: _Unwritten | None = field(init=False, repr=False, compare=False)
    """Per run: a projection made for the request in progress, recorded with its response."""

    _written: _Written | None = field(init=False, repr=False, compare=False)
    """Per run: the record the previous response carries, until the next request finds that response saved."""

    _key: str | None = field(init=False, repr=False, compare=False)
    """Per run: the key cleared results are archived under (with `store`), saved with the projection's record: its
    lines name entries a run under another key (the default key is the run's) cannot read."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_optional_int(owner, 'context_window', self.context_window, minimum=1, maximum=MAX_WINDOW)
        check_int(owner, 'fallback_context_window', self.fallback_context_window, minimum=1, maximum=MAX_WINDOW)
        for name in (
            'clear_at',
            'clear_min_saving',
            'summarize_at',
            'summarize_to',
            'user_messages_share',
            'handoff_input_share',
        ):
            check_number(owner, name, getattr(self, name), minimum=0, maximum=1, exclusive_minimum=True)
        if not self.summarize_to < self.clear_at <= self.summarize_at:
            raise ConfigurationError(
                f'{owner} thresholds must satisfy summarize_to < clear_at <= summarize_at, got '
                f'summarize_to={self.summarize_to!r}, clear_at={self.clear_at!r}, summarize_at={self.summarize_at!r}.'
            )
        check_int(owner, 'keep_results', self.keep_results, minimum=0)
        check_int(owner, 'file_tokens', self.file_tokens, minimum=0)
        check_instance(owner, 'summarize', self.summarize, bool, 'True or False')
        check_instance(owner, 'fit_kept_results', self.fit_kept_results, bool, 'True or False')
        check_int(owner, 'summarize_max_tokens', self.summarize_max_tokens, minimum=1)
        check_model(owner, 'model', self.model)
        check_instance(owner, 'model_settings', self.model_settings, (dict, type(None)), 'a ModelSettings dict or None')
        check_instance(owner, 'retry', self.retry, RetryPolicy, 'a RetryPolicy')
        check_conversation(owner, self.conversation)
        check_instance(owner, 'store', self.store, (ArchiveStore, type(None)), 'an ArchiveStore or None')
        check_callable(owner, 'observer', self.observer, arguments=1)
        self._writes = check_pattern(owner, 'write_tools', self.write_tools)
        self._projection = _Projection()
        self._size = GrowingEstimate(_message_files)
        self._check = ShapeCheck()
        self._measured = self._sent = None
        self._read_back = False
        self._pending = self._written = None
        self._key = None

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """A copy with its own projection for this run."""
        return replace(self)

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """The run; then the models its compactions built from names are closed (`compactor.close_models`)."""
        try:
            return await handler()
        finally:
            await compactor.close_models(ctx)

    def window(self, model: Model | None) -> int:
        """The context window the fractions apply to."""
        if self.context_window is not None:
            return self.context_window
        resolved = resolve_context_window(model) if model is not None else None
        return resolved or self.fallback_context_window

    def view(self, persisted: Sequence[ModelMessage]) -> list[ModelMessage]:
        """What the model is sent: the projection, then everything persisted after it.

        A run's first request reads back the projection an earlier run saved with the history (a chat's every turn
        is a run), so the turn sends what the last one ended with and updates its handoff note.
        """
        if not self._read_back:
            self._read_back = True
            carried = carry.read(persisted, CARRY_OWNER, _restub, self._key)
            if carried is not None:
                note = carried.state.get('note')
                self._projection = _Projection(
                    covers=carried.covers,
                    messages=carried.messages,
                    note=note if isinstance(note, str) else None,
                    covered=list(persisted[: carried.covers]),
                    written=carried.written,
                    base=carried.base,
                )
        projection = self._projection
        # By identity, in C (`same_objects`): this runs at every request. Not `==`: a copy equal to a message only
        # in Python's eyes (`0 == False`) says something else, and the projection would go on sending the old one.
        stale = projection.covers > len(persisted) or not same_objects(
            persisted[: projection.covers], projection.covered
        )
        if stale:
            # Another capability rewrote what the projection stands for (an archive stub, a compaction):
            # start again from the persisted history, keeping the handoff note to update.
            self._projection = projection = _Projection(
                note=projection.note, written=projection.written, base=projection.base
            )
        # `+` of two lists (unpacking both into a display cost twice as much at 5,000 messages).
        tail = persisted[projection.covers :]
        return (
            projection.messages + (tail if isinstance(tail, list) else list(tail))
            if projection.covers
            else list(persisted)
        )

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Send the projection; move to the next tier when the projected request crosses its threshold."""
        # Not copied (every message touched, at every request): only read, and sliced where held.
        persisted = request_context.messages
        projected = await project(
            type(self).__name__,
            ctx,
            request_context,
            lambda: self._project(ctx, request_context, persisted),
            reason='clear then summarize',
            observer=self.observer,
            checker=self._check,
        )
        if self._pending is not None and (self._sent is None or not same_objects(projected.messages, self._sent[1])):
            # The runtime refused the projection (it would break the history's shape) or it failed: the request went
            # out as it arrived, and a record of the projection would have the next run send what was never sent.
            self._pending = None
        return projected

    async def _project(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext, persisted: list[ModelMessage]
    ) -> list[ModelMessage]:
        window = self.window(request_context.model)
        if self.store is not None and not self._read_back:
            try:
                self._key = conversation_key(ctx, self.conversation)
            except ArchiveError:  # clearing says so when it archives; a record made under a key is not carried
                self._key = None
        view = self.view(persisted)
        self._confirm(persisted)
        tokens = self._tokens(view, self._reused())
        self._measured = self._projection
        summarized: list[ModelMessage] | None = None
        if self.summarize and tokens >= min(self.summarize_at * window, self.summarize_max_tokens):
            summarized = await self._summarize(view, persisted, window, for_request(ctx, request_context, self.retry))
        if summarized is not None:
            view = summarized
            self._remember(view, persisted, ctx.messages)
        elif tokens >= self.clear_at * window:
            recall = any(tool.name == RECALL_TOOL for tool in request_context.model_request_parameters.function_tools)
            if self.store is None:
                # Nothing to archive, nothing that blocks: a worker thread would only add its hand-off.
                cleared = self._clear(view, window, ctx, tokens, recall)
            else:
                # In a worker thread: clearing archives the outputs it clears, and a store call may block.
                cleared = await anyio.to_thread.run_sync(self._clear, view, window, ctx, tokens, recall)
            if cleared is not None:
                view = cleared
                self._remember(view, persisted, ctx.messages)
        self._sent = (self._projection, view)
        return view

    def _confirm(self, persisted: Sequence[ModelMessage]) -> None:
        """Check that the response the previous record went into was saved; if not, write that record again.

        A capability listed before this one (its `after_model_request` runs after this one's) may reject the
        response with `ModelRetry`: pydantic-ai then saves the response as the model sent it, without the record.
        A record on a streamed step's request that the next run merges into the one before it is lost too (no
        response holds it: `after_model_request`).
        While the view still sends the projection it records, that record goes with the next response; either way
        the messages it wrote whole are written again by the next record (one naming them, or starting from it,
        could not be read back).
        """
        written, self._written = self._written, None
        if written is None:
            return
        newest = next((m for m in reversed(persisted) if isinstance(m, ModelResponse)), None)
        if newest is not None and carry.record_id(newest, CARRY_OWNER) == written.id:
            return
        projection = self._projection
        projection.written.difference_update(written.unwritten.new)
        if projection.base is not None and projection.base.id == written.id:
            projection.base = written.unwritten.base
        if self._pending is None and projection is written.projection:
            self._pending = written.unwritten

    def _reused(self) -> int:
        """How many leading messages of this request's view are those of the view `_size` measured last, as the same
        objects: its projection's, when the view measured last was built on it (its `kept`). Also tells the shape
        check (`ShapeCheck.kept`) the same of the messages the previous request sent, when they were. Both then
        compare only the rest."""
        projection = self._projection
        if not projection.covers:
            return 0
        sent = self._sent
        if sent is not None and sent[0] is projection:
            self._check.kept(len(projection.messages), sent[1])
        return len(projection.messages) if self._measured is projection else 0

    def _remember(self, view: list[ModelMessage], sent: list[ModelMessage], saved: Sequence[ModelMessage]) -> None:
        """Keep *view* as the projection of the messages *sent* to this request that the history *saved* holds.

        A capability before this one may change this request only (`Archive`'s reminder, added to the last request
        and never saved): a projection standing for that copy would read as stale at the next request, whose saved
        history holds the message without it, and be built again (a new handoff note, a model call, at every
        reminder); it would also carry the reminder on. So when the messages sent after the saved ones are the view's
        own last messages, unchanged, the projection stands for the saved messages before them alone.
        """
        # Compared in C (`operator.is_` over both lists): this runs at every request past the clearing threshold.
        differ = compress(count(), map(operator.is_not, sent, saved))
        shared = next(differ, min(len(sent), len(saved)))
        tail = sent[shared:]
        if tail and len(view) > len(tail) and all(a is b for a, b in zip(view[-len(tail) :], tail, strict=True)):
            covers, messages = shared, view[: -len(tail)]
        else:
            covers, messages = len(sent), view
        covered = sent[:covers]
        self._projection = projection = replace(self._projection, covers=covers, messages=messages, covered=covered)
        # Written with the response (`after_model_request`), so the next run starts from this projection.
        ops, new = carry.encode(messages, covered, _restub, projection.written)
        state: dict[str, Any] = {'note': projection.note} if projection.note is not None else {}
        if self._key is not None:
            state['key'] = self._key
        self._pending = _Unwritten(covered, messages, ops, new, state, projection.base)

    async def after_model_request(
        self, ctx: RunContext[AgentDepsT], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """The response, carrying the record of the projection its request was the first to send, if any (a streamed
        response's goes onto its request)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return response
        value, base = self._record(pending)
        saved = ctx.messages[-1] if ctx.messages else None
        if request_context.streaming and isinstance(saved, ModelRequest):
            # `run_stream` ends its history with the response it built from the stream, not with this one: the
            # record goes onto the step's saved request instead (`carry.on_request`), which that history holds.
            carry.on_request(saved, value)
            if len(ctx.messages) > 1 and isinstance(ctx.messages[-2], ModelRequest):
                # The next run starts by merging this request into the one before it (a structured output's "Final
                # result processed." and this turn's prompt), keeping the metadata of neither: the record goes again
                # with the next step (`_confirm` finds no response holding it). When the run makes no other request,
                # it is lost: the response the run ends with is built after the hooks, from the stream.
                self._written = _Written(base.id, pending, self._projection)
            return response
        self._written = _Written(base.id, pending, self._projection)
        return carry.with_record(response, value)

    def _record(self, pending: _Unwritten) -> tuple[dict[str, Any], carry.Base]:
        """The record of *pending*, and the base it is for the next one (the projection's from now on)."""
        # The digest is taken now, not when the projection was made: after the hooks, pydantic-ai adds to the saved
        # request of the step in progress in place (the changes of instructions, tools and settings it records),
        # and a digest taken before would not match the saved history the next run reads. The record names the
        # messages as that run will hold them (`carry.settled`); as this run holds them when it cannot tell.
        settled = carry.settled(pending.ops, pending.shown, pending.covered, _restub)
        ops, covered = settled or (pending.ops, pending.covered)
        value, base = carry.record(
            CARRY_OWNER,
            len(covered),
            carry.content_digest(covered),
            ops,
            pending.new,
            pending.state,
            pending.base,
        )
        self._projection.written.update(value['new'])
        self._projection.base = base
        return value, base

    def _tokens(self, view: Sequence[ModelMessage], kept: int = 0) -> int:
        """*view*'s estimate, each file in it counted as `file_tokens`: the run's, carried from the view measured last
        (*kept*: as `GrowingEstimate.measure`'s)."""
        tokens, files = self._size.measure(view, kept=kept)
        return tokens + files * self.file_tokens

    def _chars(self, part: ToolReturnPart) -> int:
        """The characters a result takes in the request, each file in it counted as `file_tokens` × 4."""
        return len(return_text(part)) + len(_files(part)) * self.file_tokens * 4

    def _clear(
        self,
        view: list[ModelMessage],
        window: int,
        ctx: RunContext[AgentDepsT],
        tokens: int | None = None,
        recall: bool = False,
    ) -> list[ModelMessage] | None:
        """*view* with older tool results cleared (*tokens*: its estimate, measured when not given), or `None`.

        *recall*: whether the model is offered the `recall` tool, which the stubs then point at.
        """
        if tokens is None:  # measured apart: the run's estimate carries on from the views its requests send
            tokens = estimate_token_count(view) + sum(map(_message_files, view)) * self.file_tokens
        calls = {p.tool_call_id: p for m in view for p in m.parts if isinstance(p, ToolCallPart)}
        results = [
            (index, part_index)
            for index, message in enumerate(view)
            if isinstance(message, ModelRequest)
            for part_index, part in enumerate(message.parts)
            if isinstance(part, ToolReturnPart) and not _is_cleared(part) and part.outcome != 'retried'
        ]
        chars = {at: self._chars(_part_at(view, *at)) for at in results}
        # The newest results and those of the request in progress stay verbatim. The request in progress is every
        # message after the newest response: a capability before this one may have put a request-only message (a
        # reminder) after the step's request, whose results the model has not seen yet.
        step = step_start(view)
        last = len(view) - 1
        if step < last and tokens - _saving(chars, [(i, p) for i, p in results if i < step]) >= window:
            # The results after the newest response alone fill the window (a history passed in that ends with many
            # results no response has read yet): only those of the last message stay, or the request overflows.
            step = last
        older = [(i, p) for i, p in results[: max(len(results) - self.keep_results, 0)] if i < step]
        # Room for the next step, taken to bring as much as the request in progress did.
        incoming = sum(chars[i, p] for i, p in results if i >= step) // 4
        if self.fit_kept_results and tokens - _saving(chars, older) + incoming >= self.clear_at * window:
            # The newest results alone hold the request over the threshold, or leave no room for the next
            # step's: clearing would run again at the next request and, since everything after the first
            # changed part is written to the provider's cache again, rewrite those same results every time.
            # Only the request in progress's results stay.
            older = [(i, p) for i, p in results if i < step]
        # A result no longer than its stub would be is left as it is (it still counts among the kept ones):
        # clearing it would grow the request, and change it, for nothing.
        older = [(i, p) for i, p in older if chars[i, p] > _STUB_CHARS]
        if not older:
            return None
        out = list(view)
        saved = _saving(chars, older)
        if saved < self.clear_min_saving * window:
            return None  # not worth breaking the cached prefix for
        refs = self._archive(ctx, [_part_at(view, i, p) for i, p in older], calls, _highest_ref(view))
        for (index, part_index), ref in zip(older, refs, strict=True):
            request = out[index]
            assert isinstance(request, ModelRequest)
            part = request.parts[part_index]
            assert isinstance(part, ToolReturnPart)
            content = return_text(part)
            if ref:
                where = f'context_recover("{ref}") returns it'
            else:
                where = 'use recall or run it again for details' if recall else 'run it again for details'
            # The call this result answers stays in the view, paired with the stub by its id: the stub names it
            # only when it is not there, and never repeats its arguments (a file a write tool was given).
            call = calls.get(part.tool_call_id)
            named = '' if call else f'output of {part.tool_name}, '
            text = f'{len(content):,} chars, began "{clip(content, 80)}"' if content.strip() or not part.files else ''
            shown = ' and '.join(filter(None, (_files_said(_files(part)), text)))
            stub = f'[cleared: {named}{shown}; {where}]'
            parts = list(request.parts)
            parts[part_index] = _restub(part, clean_text(stub))
            out[index] = replace(request, parts=parts)
        return out

    def _archive(
        self,
        ctx: RunContext[AgentDepsT],
        cleared: list[ToolReturnPart],
        calls: dict[str, ToolCallPart],
        highest: int = 0,
    ) -> list[str | None]:
        """Archive cleared outputs when a store is set; their references (past *highest*, the highest the view
        shows already), or `None` each."""
        if self.store is None or not cleared:
            return [None] * len(cleared)
        try:
            conversation = conversation_key(ctx, self.conversation)
            entries = archive_results(
                self.store,
                conversation,
                [(part, f'cleared by {type(self).__name__}') for part in cleared],
                calls,
                highest,
            )
        except Exception as error:
            # The stub then points at recall (when the model has it) or at running the tool again; clearing is a
            # view, nothing is lost from the log. A store of your own may raise anything, not only `ArchiveError`:
            # the clearing goes on without references all the same, and the failure is said unless the store
            # said it already.
            if not (isinstance(error, ArchiveError) and readable_error(error, 'put_archived').reported):
                shown = f'{type(error).__name__}: {described(error, text=True)}'
                warn_degraded(f'{type(self).__name__} cleared results without archiving them: {clip(shown, 500)}')
            return [None] * len(cleared)
        return [entry.ref for entry in entries]

    async def _summarize(
        self, view: list[ModelMessage], persisted: Sequence[ModelMessage], window: int, ctx: CompactionContext
    ) -> list[ModelMessage] | None:
        """The view with older exchanges replaced by the updated handoff note, or `None` when nothing older
        than what must stay is left to summarize (the exchange in progress alone crossed the threshold):
        a note call would then have nothing to read."""
        segmented = segment(view)
        keep = _newest_within(segmented, int(self.summarize_to * window), self.file_tokens)
        # What the runtime keeps for every strategy stays here too: `pin()`ned content, the user's turn in progress,
        # other strategies' boundaries (this view's own earlier note is replaced by the new one).
        keep |= {
            e.id
            for e in segmented.exchanges
            if e.protected is not None
            and e.kind != 'opening'
            and not any(_is_our_boundary(m) for m in segmented.messages_of(e))
        }
        replaced = [e for e in segmented.exchanges if e.id not in keep and not e.unfinished and e.kind != 'opening']
        summarized = [m for e in replaced for m in segmented.messages_of(e) if not _is_our_boundary(m)]
        if not summarized:
            return None
        # The note writer reads what clearing stubbed out in full, from the log: a summary written from
        # one-line stubs would lose exactly what clearing set aside.
        transcript = handoff_transcript(_uncleared(summarized, persisted), int(self.handoff_input_share * window) * 4)
        previous = self._projection.note
        update = UPDATE_INSTRUCTION.format(previous=neutralize(previous)) if previous else ''
        prompt = HANDOFF_PROMPT.format(marker=HANDOFF_MARKER, update=update, transcript=neutralize(transcript))
        try:
            response = await compactor.request(
                ctx, [ModelRequest(parts=[UserPromptPart(prompt)])], model=self.model, settings=self.model_settings
            )
            note = compactor.response_text(response)
            if compactor.unusable(response, note, 'the note writer') is not None:
                note = previous or ''  # a refusal is no note: the previous one still holds
        except Exception as error:  # the note is best effort; the copied parts below still carry the essentials
            owner = type(self).__name__  # `Tiered` is another name of `ClearThenSummarize`
            warn_if_setup_error(error, owner, 'the handoff note cannot be written', owner, stacklevel=2)
            failed = f'[handoff note could not be updated: {type(error).__name__}]'
            kept = (previous or '').removesuffix(f'\n{failed}')  # said once, not once more at every summary
            note = f'{kept}\n{failed}'
        note = clean_text(note)  # it is saved with the history (`runtime.carry`), which must encode as JSON
        self._projection = replace(self._projection, note=note)
        # Copied by code from the full log, not from the view: after the first summary the view holds only
        # the opening and the newest exchanges, and what is copied must not depend on what was summarized.
        log = segment(persisted)
        notes = list(dict.fromkeys([*gather_notes(log), *gather_notes(segmented)]))
        body = '\n\n'.join(
            part
            for part in (
                HANDOFF_HEADER,
                note.strip(),
                _user_messages(persisted, int(self.user_messages_share * window)),
                _files_changed([*persisted, *view], self._writes),
                ('\n'.join([NOTES_HEADER, *(f'- {n}' for n in notes)])) if notes else '',
            )
            if part
        )
        opening = [m for e in segmented.exchanges if e.kind == 'opening' for m in segmented.messages_of(e)]
        kept_ids = [e.id for e in segmented.exchanges if (e.id in keep or e.unfinished) and e.kind != 'opening']
        kept = [
            m
            for e in segmented.exchanges
            if e.id in kept_ids
            for m in segmented.messages_of(e)
            if not _is_our_boundary(m)
        ]
        # The same record a strategy's boundary carries; the notes ride in it too, so the next summary finds them.
        tokens_before = estimate_token_count(view)
        record = CompactionRecord(
            strategy=HANDOFF_STRATEGY,
            variant=None,
            boundary_id=f'g{segmented.next_id}',
            next_id=segmented.next_id + 1,
            sequence=compactions_so_far(view) + 1,
            tokens_before=tokens_before,
            tokens_after=0,
            trigger_tokens=tokens_before,
            kept=tuple(kept_ids),
            dropped=tuple(e.id for e in replaced),
            rejected=(),
            fallback_reason=None,
            detail=None,
            compactor_usage=replace(ctx.usage),
            extra={'handoff': True, 'notes': notes},
        )
        body = clean_text(body)  # saved with the response's record (`runtime.carry`), which must encode as JSON
        boundary = ModelRequest(parts=[CompactionPart(content=body, metadata={METADATA_KEY: record.to_metadata()})])
        out: list[ModelMessage] = [*opening, boundary, *kept]
        record = replace(record, tokens_after=estimate_token_count(out))
        out[len(opening)] = ModelRequest(
            parts=[CompactionPart(content=body, metadata={METADATA_KEY: record.to_metadata()})]
        )
        return out


CARRY_OWNER = 'ClearThenSummarize'
"""The owner its saved projection records name (`runtime.carry`), whichever of its names built it."""

_Result = TypeVar('_Result', bound=BaseToolReturnPart)

_STUB_CHARS = 150
"""About the length of a stub: a result no longer than this is never cleared."""


def _saving(chars: dict[tuple[int, int], int], results: Sequence[tuple[int, int]]) -> int:
    """Estimated tokens clearing *results* (of *chars* characters each) saves: each stub is about `_STUB_CHARS`
    characters, the rest goes."""
    return sum(max(chars[at] - _STUB_CHARS, 0) for at in results) // 4


def _files(part: ModelRequestPart | ModelResponsePart) -> Sequence[MultiModalContent]:
    """The files (images, documents, audio, video) in a tool result or a prompt."""
    if isinstance(part, ToolReturnPart) and not isinstance(part.content, str):
        return part.files
    if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
        return [item for item in part.content if is_multi_modal_content(item)]
    return ()


def _message_files(message: ModelMessage) -> int:
    """How many files *message* sends (those in a request's tool results and prompts)."""
    if not isinstance(message, ModelRequest):
        return 0
    return sum(len(_files(part)) for part in message.parts)


def _files_said(files: Sequence[MultiModalContent]) -> str:
    """`1 file (image/png)`, `3 files (image/png, application/pdf)`, or nothing."""
    if not files:
        return ''
    kinds = ', '.join(dict.fromkeys(file.media_type for file in files))
    return f'{len(files)} file{"s" if len(files) > 1 else ""} ({kinds})'


def _restub(part: _Result, stub: str) -> _Result:
    """*part* cleared: *stub* for its content, marked `cleared`."""
    return replace(part, content=stub, metadata=ResultMarks(cleared=True).to_metadata(part.metadata))


def _part_at(view: Sequence[ModelMessage], index: int, part_index: int) -> ToolReturnPart:
    part = view[index].parts[part_index]
    assert isinstance(part, ToolReturnPart)
    return part


def _files_changed(view: Sequence[ModelMessage], writes: re.Pattern[str]) -> str:
    paths = [
        str(path)
        for message in view
        for part in message.parts
        if isinstance(part, ToolCallPart)
        and writes.search(part.tool_name)
        and (path := part.args_as_dict().get('path') or part.args_as_dict().get('file'))
    ]
    paths = list(dict.fromkeys(paths))
    return ('Files changed: ' + ', '.join(paths)) if paths else ''


_SHOWN_REF = re.compile(r'; context_recover\("a(\d{1,18})"\) returns it\]$')
"""The reference a clearing stub ends with (`...; context_recover("a7") returns it]`; not one in the output's
opening words the stub quotes)."""
_ARCHIVED_REF = re.compile(r'a\d{1,18}')
"""A reference `Archive` marks a result with (longer ones are forged: no store counts that far)."""


def _highest_ref(view: Sequence[ModelMessage]) -> int:
    """The highest archive reference *view* shows: `Archive`'s stubs (a resumed history may hold those of another
    store, or of another key) and clearing stubs. New references continue past it, so one never names two
    originals in the same request."""
    highest = 0
    for message in view:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, ToolReturnPart):
                continue
            ref = archived_ref_of(part)
            if ref is not None and _ARCHIVED_REF.fullmatch(ref):
                highest = max(highest, shown_number(ref[1:]) or 0)
            elif (
                _is_cleared(part)
                and isinstance(part.content, str)
                and (shown := _SHOWN_REF.search(part.content)) is not None
            ):
                highest = max(highest, shown_number(shown.group(1)) or 0)
    return highest


def _is_cleared(part: ToolReturnPart) -> bool:
    return ResultMarks.from_metadata(part.metadata).cleared


def _is_our_boundary(message: ModelMessage) -> bool:
    return any(isinstance(part, CompactionPart) and is_handoff(part.metadata) for part in message.parts)


def _newest_within(view: ConversationView, budget: int, file_tokens: int) -> set[str]:
    """Ids of the newest finished exchanges that fit in *budget* tokens together with the unfinished ones, each
    file in them counted as *file_tokens* (images a user attached cannot be cleared: only a summary takes them)."""

    def tokens(exchange: Exchange) -> int:
        files = sum(len(_files(part)) for message in view.messages_of(exchange) for part in message.parts)
        return exchange.tokens + files * file_tokens

    used = sum(tokens(e) for e in view.exchanges if e.unfinished or e.kind == 'opening')
    keep: set[str] = set()
    for exchange in reversed(view.exchanges):
        if exchange.unfinished or exchange.kind in ('opening', 'boundary'):
            continue
        cost = tokens(exchange)
        if used + cost > budget:
            break
        keep.add(exchange.id)
        used += cost
    return keep


def handoff_transcript(messages: Sequence[ModelMessage], limit: int) -> str:
    """The transcript the handoff-note writer reads: tool outputs whole when the transcript fits *limit*
    characters, else every output longer than the largest length that fits is cut to it, and the
    transcript begins by saying which outputs were cut and how much of each is shown."""
    whole = render_messages(messages)
    if len(whole) <= limit:
        return whole
    sizes = [
        len(return_text(part))
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    low, high = 200, max(sizes, default=200)
    while low < high:  # the largest per-output length whose transcript fits
        middle = (low + high + 1) // 2
        if len(render_messages(messages, tool_limit=middle)) <= limit:
            low = middle
        else:
            high = middle - 1
    cut = sum(1 for size in sizes if size > low)
    notice = (
        f'[{cut:,} of {len(sizes):,} tool outputs below are longer than {low:,} characters and show only their '
        'first part (each says how many characters follow); recall finds their full text.]'
    )
    return notice + '\n' + render_messages(messages, tool_limit=low)


def _uncleared(messages: Sequence[ModelMessage], log: Sequence[ModelMessage]) -> list[ModelMessage]:
    """*messages* with every cleared tool output replaced by the original the log still holds."""
    originals = {
        part.tool_call_id: part
        for message in log
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and not _is_cleared(part)
    }
    out: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest) and any(
            isinstance(p, ToolReturnPart) and _is_cleared(p) and p.tool_call_id in originals for p in message.parts
        ):
            parts = [
                originals[p.tool_call_id]
                if isinstance(p, ToolReturnPart) and _is_cleared(p) and p.tool_call_id in originals
                else p
                for p in message.parts
            ]
            message = replace(message, parts=parts)
        out.append(message)
    return out


def _user_messages(log: Sequence[ModelMessage], budget: int) -> str:
    # Only what the user wrote: not restatements, not content a tool attached to its result.
    prompts = [
        user_text(part)
        for message in log
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and not is_restatement(part) and not tool_provided(message, part)
    ]
    chosen: list[str] = []
    used = 0
    for prompt in reversed(prompts):
        cost = text_tokens(prompt) + 1
        if used + cost > budget:
            break
        chosen.append(prompt)
        used += cost
    if not chosen:
        return ''
    return 'Your user wrote (newest first, verbatim):\n' + '\n'.join(f'- {text}' for text in chosen)


Tiered = ClearThenSummarize
"""The name the README gave `ClearThenSummarize` before it was renamed; the same class."""
