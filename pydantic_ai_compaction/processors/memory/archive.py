"""`Archive`: the agent forgets tool results on purpose, behind short notes, and can get the originals back.

Every tool result gets a stable id (`r1`, `r2`, ...) when it enters the conversation. The agent calls
`context_apply` with a batch of `{result_id, note}` items; the runtime checks the whole batch, stores
the originals, then replaces each result by a stub that keeps its tool call and shows the note and an
archive reference. `context_recover(ref)` returns the exact original as a new result. Nothing is ever
re-run, and nothing but tool results can be archived.
"""

from __future__ import annotations

import operator
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, compress, count
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import FunctionToolset

from pydantic_ai_compaction.processors.memory.results import (
    archive_results,
    archived_ref_of,
    cleared_by_harness,
    deserialize_part,
    markable,
    reserve,
    result_id_of,
    shown_number,
    with_marks,
)
from pydantic_ai_compaction.protocols.archive import ArchiveError, ArchiveStore
from pydantic_ai_compaction.protocols.metadata import ResultMarks
from pydantic_ai_compaction.runtime.checks import check_callable, check_instance, check_int
from pydantic_ai_compaction.runtime.degraded import warn_degraded
from pydantic_ai_compaction.runtime.encoding import clean_text
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.project import project_request, rewrite_log, rewrite_log_at, rewritten_request
from pydantic_ai_compaction.runtime.segment import ProtectPredicate, is_restatement, segment
from pydantic_ai_compaction.runtime.stores.access import (
    MEMORY_TOOL_RETRIES,
    ConversationKey,
    call_store,
    check_conversation,
    conversation_key,
    readable_error,
    tool_failed,
    unreadable_answer,
)
from pydantic_ai_compaction.runtime.stores.memory import InMemoryArchiveStore
from pydantic_ai_compaction.runtime.tokens import estimate_token_count
from pydantic_ai_compaction.runtime.transcript import result_chars

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

APPLY_TOOL = 'context_apply'
RECOVER_TOOL = 'context_recover'

_RESULT_ID = re.compile(r'^r\d{1,18}$')
_ARCHIVE_REF = re.compile(r'^a\d{1,18}$')
"""Result ids and references as this library writes them (a larger number than `MAX_SHOWN_NUMBER` is read as
forged: `shown_number`)."""

ARCHIVE_INSTRUCTIONS = """\
Every tool result carries an id such as [result r7]. Your context is limited, so curate it:
- when a result has served its purpose (you have drawn the conclusion, or written it down), archive it with
  context_apply, a short note each saying what it held and what you concluded:
  {"items": [{"result_id": "<the result's id>", "note": "<what it held; what you concluded>"}]};
- archive in batches, after diagnostic progress, not one result at a time;
- keep results that are still evidence for an open question;
- context_recover("<archive reference from the stub>") brings back the exact original of an archived result
  whenever you need it again."""


class ArchiveItem(BaseModel):
    """One result to archive."""

    result_id: str = Field(description='The id shown with the result, e.g. "r7".')
    note: str = Field(description='What the result held and what you concluded from it (one or two lines).')


@dataclass
class _ReminderState:
    """Per run: when the last reminder fired."""

    reminded: bool = False
    known_at_reminder: frozenset[str] = frozenset()
    """Result ids that existed when the last reminder fired: only output arriving after it counts as new."""
    user_prompts: int = -1


@dataclass(frozen=True)
class _Facts:
    """What the reminder reads in one message: its user prompts and its archivable results, in order."""

    prompts: int = 0
    """User prompt parts (a restatement is not the user's)."""

    eligible: tuple[tuple[ToolReturnPart, int, str], ...] = ()
    """Each numbered, not archived result with its rendered size and its id."""


_NO_FACTS = _Facts()


def _facts(message: ModelMessage) -> _Facts:
    if not isinstance(message, ModelRequest):
        return _NO_FACTS
    prompts = 0
    eligible: list[tuple[ToolReturnPart, int, str]] = []
    for part in message.parts:
        if isinstance(part, UserPromptPart) and not is_restatement(part):
            prompts += 1
        elif isinstance(part, ToolReturnPart):
            # The marks are read once a part (both the id and the archive reference live there).
            marks = ResultMarks.from_metadata(part.metadata)
            if marks.result_id and not marks.archived:
                # As the model reads it: a structured result holding a lone surrogate is measured in its lossless
                # encoding (`model_response_str` refuses it, and the run ended here).
                eligible.append((part, result_chars(part), marks.result_id))
    return _Facts(prompts, tuple(eligible)) if prompts or eligible else _NO_FACTS


@dataclass
class _Scanned:
    """Per run: the reminder's reading of the previous request, message by message.

    A message's facts depend on that message alone (messages and parts are never changed in place), so a request
    reads only the messages that are not the very objects read at their position last time. Which ones those are
    is found by one identity pass in C over every position, exact wherever a message changed (at the end, in the
    middle, or everywhere in a copied history); only the changed ones are read in Python.
    """

    refs: list[weakref.ref[ModelMessage]] = field(default_factory=list['weakref.ref[ModelMessage]'])
    """The message read at each position (weak: never keeps a history alive)."""

    facts: list[_Facts] = field(default_factory=list[_Facts])
    """What was read in it."""

    def read(self, messages: Sequence[ModelMessage]) -> tuple[int, list[tuple[ToolReturnPart, int, str]]]:
        """The user prompts of *messages* and their archivable results (`(part, size, id)`, in order)."""
        refs, facts = self.refs, self.facts
        del refs[len(messages) :]
        del facts[len(messages) :]
        held = map(operator.call, refs)
        for index in list(compress(count(), map(operator.is_not, held, messages))):
            message = messages[index]
            refs[index] = weakref.ref(message)
            facts[index] = _facts(message)
        for message in messages[len(refs) :]:
            refs.append(weakref.ref(message))
            facts.append(_facts(message))
        prompts = sum(map(_PROMPTS, facts))
        eligible = list(chain.from_iterable(map(_ELIGIBLE, facts)))
        return prompts, eligible


_PROMPTS = operator.attrgetter('prompts')
_ELIGIBLE = operator.attrgetter('eligible')


@dataclass
class Archive(AbstractCapability[AgentDepsT]):
    """Agent-controlled, reversible forgetting of tool results (`context_apply` / `context_recover`).

    Example:
        ```python
        agent = Agent(model, capabilities=[Archive(store=SQLiteArchiveStore('agent.sqlite3'))])
        ```
    """

    store: ArchiveStore = field(default_factory=InMemoryArchiveStore)
    """Where originals are kept (`SQLiteArchiveStore` or `PostgresArchiveStore` in production)."""

    conversation: ConversationKey = None
    """The key entries are filed under: a string, or a function of the run context (e.g. reading your own
    session from `deps`); `None` files them under the run, so a later run cannot recover them. Never read
    from the submitted history: see docs/archive.md, "Whose entries a run can read"."""

    protect: ProtectPredicate | None = None
    """Results the agent may not archive: called with each exchange and its messages (as a strategy's
    `protect`); `True` protects every tool result in that exchange."""

    reminder_tokens: int = 40_000
    """Remind the agent to curate once the request reaches about this many tokens (or holds an image)."""

    reminder_every_chars: int = 20_000
    """Remind again only after this many more characters of archivable output (or a new image)."""

    instructions: str = ARCHIVE_INSTRUCTIONS
    """What the agent is taught about curating its context."""

    observer: EventObserver | None = None
    """Called with a `CompactionEvent` for every numbering, reminder and archived batch (and refused change)."""

    _state: _ReminderState = field(init=False, repr=False, compare=False)
    """Per run: when the last reminder fired."""

    _applying: anyio.Lock = field(init=False, repr=False, compare=False)
    """One `context_apply` batch at a time: a batch is checked against the history its stubs change."""

    _scanned: _Scanned = field(init=False, repr=False, compare=False)
    """Per run: what the reminder read in the previous request, message by message."""

    _highest: tuple[weakref.ref[ModelMessage] | None, int] = field(init=False, repr=False, compare=False)
    """Per run: the first message of the history last numbered, and the highest result id it has shown (ids only
    grow: a compaction that drops one leaves it). Another history (another first message) is scanned whole."""

    def __post_init__(self) -> None:
        check_instance('Archive', 'store', self.store, ArchiveStore, 'an ArchiveStore')
        check_conversation('Archive', self.conversation)
        check_callable('Archive', 'protect', self.protect, arguments=2)
        check_int('Archive', 'reminder_tokens', self.reminder_tokens, minimum=1)
        check_int('Archive', 'reminder_every_chars', self.reminder_every_chars, minimum=1)
        check_instance('Archive', 'instructions', self.instructions, str, 'a string')
        check_callable('Archive', 'observer', self.observer, arguments=1)
        self._state = _ReminderState()
        self._applying = anyio.Lock()
        self._scanned = _Scanned()
        self._highest = (None, 0)

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """A copy with its own reminder schedule and batch lock for this run."""
        return replace(self)

    def get_instructions(self) -> str:
        """Teach the agent when and how to curate."""
        return self.instructions

    def get_toolset(self) -> FunctionToolset[AgentDepsT]:
        """`context_apply` and `context_recover`."""
        # A rejected batch is a retry; leave room for the model to fix a batch more than once.
        toolset: FunctionToolset[AgentDepsT] = FunctionToolset(max_retries=MEMORY_TOOL_RETRIES)
        toolset.add_function(self._apply, name=APPLY_TOOL, takes_ctx=True)
        toolset.add_function(self._recover, name=RECOVER_TOOL, takes_ctx=True)
        return toolset

    def conversation_id(self, ctx: RunContext[AgentDepsT]) -> str:
        """The key this run's entries are filed under (see `conversation`)."""
        return conversation_key(ctx, self.conversation)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Give new tool results their ids (persisted once, before they are first sent); maybe remind.

        Works on the persisted history (`ctx.messages`), never on a request-only view.
        """
        log = ctx.messages
        # The scan for new results is cheap and runs here; only reserving ids touches the store, so only a
        # request that brings new results pays for a worker thread (this hook runs before every request).
        todo, highest = self._unnumbered(ctx, log)
        numbered: dict[int, ModelMessage] | None = None
        if todo:
            try:
                numbered = await call_store('next_numbers', self._number_results, ctx, log, todo, highest)
            except ArchiveError as error:
                # No key (its function failed): results go out without ids now; the next request numbers them.
                if not error.reported:  # a setup mistake or an unreachable server: reported once, by the store
                    warn_degraded(f'Archive could not number new results this request: {error}', stacklevel=2)
        # Only the numbered requests are checked and written: the rest of the log stays as it is, object for object.
        replaced = {index: (log[index], message) for index, message in (numbered or {}).items()}
        if numbered and rewrite_log_at(
            log, numbered, 'Archive', reason='numbered', tracer=ctx.tracer, observer=self.observer
        ):
            # The request shows the ids, keeping what a capability listed before this one projected.
            request_context = replace(
                request_context, messages=rewritten_request(request_context.messages, log, replaced)
            )
        reminder = self._reminder(request_context.messages)
        if reminder is not None:
            # Ephemeral: the reminder goes to this request only and is never saved in the history.
            messages = list(request_context.messages)
            last = messages[-1]
            if isinstance(last, ModelRequest):
                messages[-1] = replace(last, parts=[*last.parts, UserPromptPart(reminder)])
                sent = project_request(
                    request_context.messages,
                    messages,
                    'Archive',
                    reason='reminder',
                    tracer=ctx.tracer,
                    observer=self.observer,
                )
                request_context = replace(request_context, messages=sent)
        return request_context

    def _unnumbered(
        self, ctx: RunContext[AgentDepsT], messages: list[ModelMessage]
    ) -> tuple[list[tuple[int, int]], int]:
        """Where results without an id are (`(message, part)`, oldest first), and the highest id the history holds."""
        todo: list[tuple[int, int]] = []
        highest = 0
        # New results arrive at the end: scan back to the last request whose results are all numbered
        # (the whole history only on a run's first request, which may bring in an older history). The
        # newest ids sit where the scan stops, so `highest` is the highest id the history holds.
        first, known = self._highest
        if not messages or first is None or first() is not messages[0]:
            known = None  # a history not numbered here before: read whole, its highest id may sit anywhere
        full_scan = ctx.run_step <= 1 or known is None
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if not isinstance(message, ModelRequest):
                continue
            fresh: list[int] = []
            numbered = unmarked = False
            for part_index, part in enumerate(message.parts):
                if not isinstance(part, ToolReturnPart):
                    continue
                result_id = result_id_of(part)
                if result_id is not None:
                    if _RESULT_ID.match(result_id) and (number := shown_number(result_id[1:])) is not None:
                        # Only an id read as a number stops the scan: one read as forged says nothing of the
                        # highest the history holds, which may sit further back.
                        numbered = True
                        highest = max(highest, number)
                elif type(part) is ToolReturnPart and part.outcome != 'retried':
                    if markable(part):
                        fresh.append(part_index)
                    else:
                        unmarked = True
            todo.extend((index, part_index) for part_index in reversed(fresh))
            # A request of results that get no id (`markable`) stops it too, once this history was read whole: the
            # highest id before it is known (`_highest`), and a tool that always sets such metadata would otherwise
            # have every request read the whole history.
            if (numbered or unmarked) and not fresh and not full_scan:
                break
        todo.reverse()
        highest = max(highest, known or 0)
        self._highest = (weakref.ref(messages[0]), highest) if messages else (None, 0)
        return todo, highest

    def number_new(self, ctx: RunContext[AgentDepsT], messages: list[ModelMessage]) -> dict[int, ModelMessage]:
        """The numbering step of `before_model_request`, in one blocking call, without writing anything.

        Finds the tool results of *messages* that have no id yet and reserves their ids in the store.
        *messages* is left as it is.

        Returns:
            Each request holding such a result, by its position in *messages*, as a copy with an id on each
            of those results (`{}` when every result is numbered already). The hook writes these into the
            run's history (checked, with a `numbered` event) before the request is sent.
        """
        todo, highest = self._unnumbered(ctx, messages)
        return self._number_results(ctx, messages, todo, highest) if todo else {}

    def _number_results(
        self, ctx: RunContext[AgentDepsT], messages: list[ModelMessage], todo: list[tuple[int, int]], highest: int
    ) -> dict[int, ModelMessage]:
        """The requests of *messages* that hold a result in *todo*, by position, with an id on each such result.

        Blocking (reserves ids): called in a worker thread.
        """
        try:
            numbers = reserve(self.store, self.conversation_id(ctx), 'result', len(todo), highest)
        except ArchiveError as error:
            # Numbering degrades rather than stops: ids that follow the history's own are unique in it, so
            # the agent can still name results; the store's counter moves past them once it answers again.
            error = readable_error(error, 'next_numbers')  # the store's own, read here before `call_store`
            if not error.reported:  # a setup mistake or an unreachable server: reported once, by the store
                warn_degraded(
                    f'Archive numbered new results from the history alone, the store failed: {error}', stacklevel=2
                )
            numbers = list(range(highest + 1, highest + len(todo) + 1))
        first, known = self._highest  # the next scan may stop before these (`_unnumbered`)
        self._highest = (first, max(known, *numbers))
        out: dict[int, ModelMessage] = {}
        for (index, part_index), number in zip(todo, numbers, strict=True):
            request = out.get(index, messages[index])
            assert isinstance(request, ModelRequest)
            part = request.parts[part_index]
            assert isinstance(part, ToolReturnPart)
            result_id = f'r{number}'
            prefix = f'[result {result_id}]\n'
            marks = {'result_id': result_id}
            content = part.content
            if isinstance(content, str):
                content = prefix + content
                marks['id_prefix'] = prefix
            parts = list(request.parts)
            parts[part_index] = replace(part, content=content, metadata=with_marks(part, **marks))
            out[index] = replace(request, parts=parts)
        return out

    def _reminder(self, messages: list[ModelMessage]) -> str | None:
        # This runs before every request: user prompts (restatements are not the user's) and archivable results
        # with their sizes are read once a message, and only for messages the previous request did not hold.
        state = self._state
        prompts, eligible = self._scanned.read(messages)
        if prompts != state.user_prompts:
            # A new user prompt starts the schedule over.
            self._state = state = _ReminderState(user_prompts=prompts)
        if not eligible:
            return None
        tokens: int | None = None
        if state.reminded:
            # Seed 000: another reminder needs 20,000 characters (or an image) of eligible output that is *new*
            # since the last one. Comparing totals instead would let archiving after a reminder (which lowers
            # the total) silence the next one.
            fresh = [(part, size) for part, size, rid in eligible if rid not in state.known_at_reminder]
            due = sum(size for _, size in fresh) >= self.reminder_every_chars or any(
                _image_count(part.content) for part, _ in fresh
            )
        else:
            tokens = estimate_token_count(messages)
            due = any(_image_count(part.content) for part, _, _ in eligible) or tokens >= self.reminder_tokens
        if not due:
            return None
        known = frozenset(rid for _, _, rid in eligible)
        self._state = replace(state, reminded=True, known_at_reminder=state.known_at_reminder | known)
        tokens = tokens if tokens is not None else estimate_token_count(messages)
        listing = ', '.join(f'{rid} {p.tool_name} ({size:,} chars)' for p, size, rid in eligible)
        return (
            f'[Context check: about {tokens:,} tokens in context. Results you can archive: '
            f'{listing}. Archive what you no longer need verbatim with {APPLY_TOOL}, in one batch.]'
        )

    def _locate(self, messages: list[ModelMessage]) -> dict[str, tuple[int, int, ToolReturnPart]]:
        found: dict[str, tuple[int, int, ToolReturnPart]] = {}
        for index, message in enumerate(messages):
            if isinstance(message, ModelRequest):
                for part_index, part in enumerate(message.parts):
                    if isinstance(part, ToolReturnPart) and (result_id := result_id_of(part)) is not None:
                        found[result_id] = (index, part_index, part)
        return found

    def _protected(self, messages: list[ModelMessage]) -> set[str]:
        """Tool call ids of the results in exchanges `protect` protects."""
        if self.protect is None:
            return set()
        view = segment(messages)
        return {
            part.tool_call_id
            for exchange in view.exchanges
            if self.protect(exchange, chosen := view.messages_of(exchange))
            for message in chosen
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        }

    async def _apply(self, ctx: RunContext[AgentDepsT], items: list[ArchiveItem]) -> str:
        """Archive tool results behind short notes; context_recover brings the originals back.

        Args:
            items: The results to archive, each with a note saying what it held and what you concluded.
        """
        async with self._applying:
            return await self._apply_batch(ctx, items)

    async def _apply_batch(self, ctx: RunContext[AgentDepsT], items: list[ArchiveItem]) -> str:
        messages = ctx.messages
        located = self._locate(messages)
        calls = {
            part.tool_call_id: part for message in messages for part in message.parts if isinstance(part, ToolCallPart)
        }
        protected = self._protected(messages)
        problems: list[str] = []
        seen: set[str] = set()
        if not items:
            problems.append('the batch is empty')
        for item in items:
            rid = item.result_id.strip()
            if rid in seen:
                problems.append(f'{rid}: listed twice')
                continue
            seen.add(rid)
            where = located.get(rid)
            if not _RESULT_ID.match(rid) or where is None:
                problems.append(f'{rid}: no tool result has this id (ids look like r7)')
            elif archived_ref_of(where[2]) is not None:
                problems.append(f'{rid}: already archived as {archived_ref_of(where[2])}')
            elif where[2].tool_name == APPLY_TOOL or where[2].tool_call_id in protected:
                problems.append(f'{rid}: protected, it cannot be archived')
            elif cleared_by_harness(where[2]):
                # Archived, it would be recovered as the placeholder: the original is not in the conversation.
                problems.append(f'{rid}: already cleared by another compaction (only a placeholder is left)')
            elif not item.note.strip():
                problems.append(f'{rid}: the note is empty')
        if problems:
            message = 'Nothing was archived. Fix the batch and call context_apply again:\n- ' + '\n- '.join(problems)
            if ctx.retry + 1 >= ctx.max_retries:
                # The last retry the tool has: an answer instead, because a model that keeps sending bad ids would
                # otherwise exhaust the retries and end the run, and memory tools never fail a run.
                return message
            raise ModelRetry(message)

        try:
            conversation = self.conversation_id(ctx)
            shown = (shown_number(ref[1:]) for ref in _archived_refs(located) if _ARCHIVE_REF.match(ref))
            highest = max((number for number in shown if number is not None), default=0)
            chosen = [(located[item.result_id.strip()][2], item.note.strip()) for item in items]
            # Originals are stored (one transaction) before any stub replaces a result.
            entries = await call_store(
                'put_archived', archive_results, self.store, conversation, chosen, calls, highest
            )
        except ArchiveError as error:
            # An answer, not a retry: a store that is down must not use up the tool's retries and end the run.
            failed = tool_failed('Archive could not archive', error)
            return (
                f'The archive store failed and nothing was archived: {failed}. '
                'Keep working with the results as they are.'
            )

        stubbed = list(messages)
        for archived in entries:
            index, part_index, part = located[archived.result_id]
            request = stubbed[index]
            assert isinstance(request, ModelRequest)
            stub = (
                f'[result {archived.result_id} archived as {archived.ref}: {clean_text(archived.note)} '
                f'{RECOVER_TOOL}("{archived.ref}") returns the original.]'
            )
            parts = list(request.parts)
            parts[part_index] = replace(part, content=stub, metadata=with_marks(part, archived=archived.ref))
            stubbed[index] = replace(request, parts=parts)
        checked = rewrite_log(
            messages, stubbed, 'Archive', reason='archived', tracer=ctx.tracer, observer=self.observer
        )
        if checked is None:
            return 'The originals were stored, but the results stay in the conversation as they were.'
        messages[:] = checked
        return 'Archived ' + ', '.join(f'{e.result_id} as {e.ref}' for e in entries) + '.'

    async def _recover(self, ctx: RunContext[AgentDepsT], archive_ref: str) -> Any:
        """Bring back the exact original of an archived result, as a new result.

        Args:
            archive_ref: The reference shown in the stub, e.g. "a3".
        """
        ref = archive_ref.strip()
        try:
            entry = await call_store('get_archived', self.store.get_archived, self.conversation_id(ctx), ref)
        except ArchiveError as error:
            failed = tool_failed(f'Archive could not recover {clean_text(ref)!r}', error)
            return f'The archive store failed, {clean_text(ref)!r} could not be recovered now: {failed}.'
        if entry is None:
            # An answer, not a retry: a reference from another conversation or an earlier run is simply absent.
            return f'No archived result {clean_text(ref)!r} in this conversation.'
        try:
            payload = entry.payload  # a store's lazy entry may fail here, with anything: the store failed
        except Exception as error:  # a store of your own may answer with anything (not an `ArchivedResult`)
            return self._unreadable(ref, error)
        try:
            return deserialize_part(payload).content
        except ValueError as error:
            return f'The archived result {clean_text(ref)!r} could not be read back: {type(error).__name__}.'
        except Exception as error:  # a payload of the store's own type whose conversion raises
            return self._unreadable(ref, error)

    @staticmethod
    def _unreadable(ref: str, error: Exception) -> str:
        """What `context_recover` answers for an entry the store gave back that cannot be read (warned)."""
        failed = tool_failed(f'Archive could not recover {clean_text(ref)!r}', unreadable_answer('get_archived', error))
        return f'The archive store failed, {clean_text(ref)!r} could not be recovered now: {failed}.'


def _archived_refs(located: dict[str, tuple[int, int, ToolReturnPart]]) -> list[str]:
    return [ref for _, _, part in located.values() if (ref := archived_ref_of(part)) is not None]


def _image_count(content: object) -> int:
    if isinstance(content, BinaryContent):
        return 1 if content.is_image else 0
    if isinstance(content, list | tuple):
        return sum(_image_count(item) for item in content)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return 0
