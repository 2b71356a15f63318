"""`ResetToCheckpoint`: no model call; the history becomes g0, the checkpoints and the exchange in progress.

The default checkpoint is built by code, the way seed 004 describes its runtime checkpoint: what was
read, what was found in it, what was changed, the conversation so far (the user's requests and the
assistant's own answers), progress and the next step. "What was found" comes from a pluggable
extractor; the default keeps the lines of each result whose shape is rare in it (an incident among
request logs, an error among passing tests), which is where a task's facts usually are. Facts are read
from the newest results back, until they fill the checkpoints' bound or the checkpoint is sure to fold the oldest of
them: a checkpoint shows the newest facts and folds the older ones first, so the results before those are not
read, and Found says how many.

Each reset appends a checkpoint of what the earlier ones do not hold and leaves them byte-identical, so
under a provider's prompt cache a reset writes only what is new. A checkpoint is never larger than what
it replaces: when it would be, its oldest entries are folded into counts, deterministically, the largest
section first and the instruction changes last. When the checkpoints together would pass their bound
(`max_chars`, by default half of what the trigger lets the history hold), they are rewritten into one (rarely:
it is folded to half of the bound, leaving room to append).
"""

from __future__ import annotations

import operator
import re
import threading
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from typing import Any, TypeGuard, cast

from orjson import OPT_SORT_KEYS, JSONEncodeError, dumps
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.metadata import MAX_EXCHANGE_NUMBER, ResultMarks, ours, record_extra, str_dict
from pydantic_ai_compaction.protocols.names import RECALL_ANSWER_LINE, RECALL_TOOL, WRITE_TOOLS
from pydantic_ai_compaction.protocols.types import Exchange, Proposal, Summary
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.checks import (
    check_callable,
    check_instance,
    check_int,
    check_optional_int,
    check_patterns,
    is_str,
)
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.degraded import described
from pydantic_ai_compaction.runtime.encoding import PLAIN_SCALARS, args_text, clean_text
from pydantic_ai_compaction.runtime.instructions import (
    InstructionSources,
    gather_instructions,
    line_body,
    tool_provided,
)
from pydantic_ai_compaction.runtime.memo import IdentityMemo
from pydantic_ai_compaction.runtime.segment import (
    ConversationView,
    fragment,
    is_restatement,
    our_record,
    settled_prefix,
)
from pydantic_ai_compaction.runtime.transcript import clip, cut_to, return_text, user_text
from pydantic_ai_compaction.runtime.validate import (
    boundary_exchanges,
    droppable_tokens,
    forced_exchanges,
    note_start,
    view_starts_with,
    written_by,
)

CheckpointFn = Callable[[RunContext[Any], ConversationView], str]
"""Renders the checkpoint from the run (typed state in `ctx.deps`) and the history."""

FactExtractor = Callable[[ToolCallPart, str], Sequence[str]]
"""Task-specific facts from one tool result: receives the call and the result's text, returns lines to carry (a
`str` returned is taken as its lines)."""

CHECKPOINT_HEADER = 'Checkpoint: the conversation so far was reset to this record, written by the runtime.'

CONTINUED_HEADER = 'Checkpoint, continued (what happened since the one above, written by the runtime):'
"""First line of a checkpoint appended after earlier ones (which stay as they were)."""

REWRITE_SHARE = 2
"""A rewrite of every checkpoint into one folds it to `bound // REWRITE_SHARE`, leaving room to append."""

MIN_BOUND_CHARS = 16_000
"""The checkpoints' least default bound (`ResetToCheckpoint.max_chars` unset), and theirs under a trigger with no
token limit."""

MAX_BOUND_CHARS = 64_000
"""The checkpoints' most default bound (about 16,000 tokens): the checkpoints go with every request and a compaction
reads facts until they fill the bound, so under a trigger of a million tokens two characters per token would read
every result's facts at each compaction (four times the time at 1M tokens) to send a 500,000-token record."""

CHARS_PER_TRIGGER_TOKEN = 2
"""The default bound, in characters per token of the trigger's limit: at about four characters a token, the
checkpoints may fill half of what the trigger lets the history hold, and the other half is the work between two
resets."""

SAID_MIN_CHARS = 16
"""A fact shorter than this is kept even when the agent's words state it: cheap, and too generic to match."""

SECTIONS = ('instructions', 'conversation', 'read', 'found', 'changed')
"""The checkpoint's sections, in the order they are rendered."""

_TITLES = {
    'instructions': 'Instruction changes (verbatim, latest last)',
    'conversation': 'Conversation so far (the user and your answers, oldest first)',
    'read': 'Read (tool calls completed, each with the facts found in its result)',
    'found': 'Found (facts in results of calls listed earlier)',
    'changed': 'Changed (calls that wrote, each with the facts found in its result)',
}

_CONTINUED_TITLES = {
    'instructions': 'Instruction changes',
    'conversation': 'Conversation',
    'read': 'Read',
    'found': 'Found',
    'changed': 'Changed',
}
"""A continued checkpoint's titles: the first checkpoint, above it, says what each section holds."""

_Entry = tuple[str, str, int, str]
"""An exchange's checkpoint entry: `(section, line, at, label)` (see `ResetToCheckpoint._exchange_entries`)."""

_ENTRY_KINDS = frozenset({'tools', 'turn', 'response'})
"""Exchange kinds a checkpoint has entries for (the others are kept verbatim or are ours)."""

_LISTED_TURN_CHARS = 160
"""Characters of a user's turn the conversation's lines keep when the turn is listed whole under Instruction changes."""

_FOLD_ORDER = ('found', 'read', 'conversation', 'changed')
"""Sections folded first when the checkpoint is over its budget; instruction changes go last."""


def rare_lines(call: ToolCallPart, text: str, *, limit: int = 20) -> list[str]:
    """The default extractor: lines of a result whose shape is rare in it, in order, at most *limit*.

    A line's shape keeps its upper-case words and `key=` names and reduces everything else to a
    placeholder, so the hundreds of lines a log repeats share a few shapes and the handful of events
    among them (an `INCIDENT`, an `UPDATE`, a marked `CHANGE:` line) stand out.
    """
    lines = [line for piece in _lines_of(text) if (line := piece.strip())]
    if not lines:
        return []
    if len(lines) <= 2:
        # No shape can be shared by more than `rare` (at least 2) lines: every line is rare, no shape is read.
        return lines if len(lines) <= limit else [*lines[:limit], f'(+{len(lines) - limit} more such lines)']
    shapes = _shapes(lines)
    if len(shapes) > _COUNTED_IN_C:
        counts: dict[tuple[str, ...], int] = Counter(shapes)
    else:
        # A few lines (a log's header and one long line): a plain count costs less than building a `Counter`.
        counts = {}
        for shape in shapes:
            counts[shape] = counts.get(shape, 0) + 1
    rare = max(2, len(lines) // 10)
    found = [line for line, shape in zip(lines, shapes, strict=True) if counts[shape] <= rare]
    if len(found) > limit:
        found = [*found[:limit], f'(+{len(found) - limit} more such lines)']
    return found


_COUNTED_IN_C = 16
"""Lines past which `rare_lines` counts shapes with a `Counter` (its fixed cost pays off)."""

_BREAKS = ('\r', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\x85', '\u2028', '\u2029')
"""The line boundaries `str.splitlines` knows besides `\\n`."""


def _lines_of(text: str) -> list[str]:
    """`text.splitlines()`, give or take empty pieces (blank lines are dropped anyway).

    `splitlines` looks up every character in a table; a text whose only breaks are `\\n` (most tool
    output, found by a few scans in C) is split at them at about half its cost.
    """
    for mark in _BREAKS:
        if mark in text:
            return text.splitlines()
    # `split` also compares every character; `find` scans for one in C at memory speed, which a result of a
    # line or two (a JSON value, a header and a long line) takes.
    first = text.find('\n')
    if first < 0:
        return [text]
    if text.find('\n', first + 1) < 0:
        return [text[:first], text[first + 1 :]]
    return text.split('\n')


_SHAPE_READ = 256
"""Characters of a line's body `_shapes` reads first: its first eight words are usually in them."""


def _shapes(lines: list[str]) -> list[tuple[str, ...]]:
    """The first eight words of `line_body(line)` of each of *lines* (stripped, not empty), each reduced to its kind.

    One loop for a result's lines: a log has thousands, and a call per line cost as much as the rest of a line's
    reading. A stripped line starts with neither blank, so its body is itself unless a timestamp opens it, which
    starts with `[` or a digit (`\\d`, `str.isdecimal`).
    """
    kinds = _KINDS.__getitem__
    shapes: list[tuple[str, ...]] = []
    for line in lines:
        head = line[0]
        stamped = head == '[' or head.isdecimal()
        body = line_body(line) if stamped else line
        if len(line) > _SHAPE_READ:
            # A long line's first words, without copying the rest of it (`split` copies what follows the eighth).
            # A timestamp is under 50 characters and, the line not starting blank, starts it: within the first
            # `_SHAPE_READ` it is matched as in the whole line, unless the blanks after it reach past them, and
            # then no ninth word is read there. A ninth word means the eighth is whole.
            first = line[:_SHAPE_READ]
            words = (line_body(first) if stamped else first).split(maxsplit=8)
            if len(words) < 9:
                words = body.split(maxsplit=8)
        else:
            words = body.split(maxsplit=8)
        # A log repeats its words (levels, names, `key=`s) far more than its lines: a word seen is looked up in C.
        # Only a plain `str`'s words (plain too) are: a subclass's `==` and `hash` may make words of other kinds
        # equal, and a word it left in the store would be told its kind for a later text's equal word.
        shapes.append(tuple(map(kinds if type(line) is str else _kind, words[:8])))
    return shapes


def _kind(token: str) -> str:
    """A word's kind in a shape: itself if upper-case letters, its `key=` name, `0` if it holds a digit, else `w`."""
    if token.isalpha():  # letters only: no digit and no `=` among them
        return token if token.isupper() else 'w'
    if '=' in token:
        return token.partition('=')[0] + '='
    if token.isascii():  # the ASCII characters `str.isdigit` accepts are 0 to 9: one search in C
        return 'w' if _ASCII_DIGIT.search(token) is None else '0'
    return '0' if any(map(str.isdigit, token)) else 'w'


class _Kinds(dict[str, str]):
    """`_kind` of the words seen, told once each: a word missing is told by `_kind` and kept if short.

    At most `_KINDS_KEPT` words of at most `_KIND_WORD_CHARS` characters, emptied when full (a word missing is
    told again, so what it holds changes the time a shape takes, never the shape), and emptied when a reset's
    reading ends (a compaction's, or a request's read-ahead): words of tool output (ids, keys, tokens) are not
    held after the results holding them are read. A direct call of `rare_lines` leaves its words until the next.
    """

    def __missing__(self, token: str) -> str:
        # `_kind(token)`, its body inlined: a log of words never repeated (ids, hashes) misses for most of its words,
        # and a call per word was about a sixth of what reading such a log cost.
        if token.isalpha():
            kind = token if token.isupper() else 'w'
        elif '=' in token:
            kind = token.partition('=')[0] + '='
        elif token.isascii():
            kind = 'w' if _ASCII_DIGIT.search(token) is None else '0'
        else:
            kind = '0' if any(map(str.isdigit, token)) else 'w'
        if len(token) <= _KIND_WORD_CHARS:
            if len(self) >= _KINDS_KEPT:
                self.clear()
            self[token] = kind
        return kind


_KINDS_KEPT = 16_384
"""Words `_KINDS` holds at most."""

_KIND_WORD_CHARS = 64
"""Longest word `_KINDS` keeps: a long word is seldom seen twice, and holding it costs memory for the process's life."""

_KINDS = _Kinds()
"""The kinds of the words seen (see `_Kinds`)."""


_ASCII_DIGIT = re.compile('[0-9]')
"""What `str.isdigit` accepts among ASCII characters."""


def _no_entries(exchange: Exchange) -> bool:
    """Whether a reset reads no entries from *exchange*: kept verbatim by the runtime (the opening, the turn in
    progress, pins), or of a kind that holds none."""
    return exchange.protected is not None or exchange.unfinished or exchange.kind not in _ENTRY_KINDS


_TOOL_LABELS: dict[str, str] = {}
"""The label of a call's entries (`_label_of` of their `_head`), per tool name."""

_TOOL_LABELS_KEPT = 1_024
"""Tool names `_TOOL_LABELS` holds at most (names past them are labelled each time)."""

_TOOL_LABEL_NAME_CHARS = 256
"""Longest tool name `_TOOL_LABELS` keeps: a model's made-up name of a megabyte is not held for the process's life."""

_FLAT_ARGS = 8
"""Arguments a step read in one loop holds at most (`_short_step`): more go the general way."""

_READ_KEPT = 4
"""Histories whose reading a reset keeps (conversations sharing one capability each keep theirs)."""

_ARRIVED_STEPS = 8
"""Newest tool steps a request reads ahead at most (`_read_arrived`): a run adds one a request; a history passed in
whole is read by its first compaction."""

_READING = threading.RLock()
"""Held while a history is read: the readings in `_read` are changed in place, and runs in threads (one agent
serving several conversations) may share them. One for every reset, so a reset stays copyable."""


def _starts_with(view: ConversationView, before: tuple[Exchange, ...]) -> bool:
    """`same_prefix(before, view.exchanges, _no_entries)`, told false at once when the last of *before* differs."""
    exchanges = view.exchanges
    count = len(before)
    if count > len(exchanges):
        return False
    last, other = (before[-1], exchanges[count - 1]) if count else (None, None)
    if last is not other and not (_no_entries(last) and _no_entries(other)):  # pyright: ignore[reportArgumentType]
        return False
    return view_starts_with(view, before, _no_entries)


class _Reading:
    """What reading a history's settled exchanges gives after the entries earlier checkpoints held, kept in one place
    that grows: a longer history extends it in place, and a history that shares less of it cuts it back.

    Only appended to (or cut back to a length it had), so going from one history to the next copies nothing: at
    50k messages, a copy of the entries seen (25k calls) cost more than reading a new step. Facts are not read here:
    a compaction reads those of the newest results only (`ResetToCheckpoint._found`).
    """

    __slots__ = ('added', 'calls', 'carried', 'counts', 'labels', 'seen', 'sizes')

    def __init__(self, carried: dict[str, list[str]]) -> None:
        self.carried = {name: list(lines) for name, lines in carried.items()}
        """The earlier checkpoints' entries it started from."""
        self.seen = {name: set(lines) for name, lines in carried.items()}
        """Every entry seen by now, per section (those carried and those added)."""
        self.added: dict[str, list[str]] = {name: [] for name in SECTIONS}
        """The new entries, per section, in the order they were read (none in `found`)."""
        self.labels: dict[str, list[str]] = {name: [] for name in SECTIONS}
        """Each new entry's label (`label_counts`), alongside `added`."""
        self.counts: dict[str, Counter[str]] = {name: Counter[str]() for name in SECTIONS}
        """The new entries counted per label, per section."""
        self.sizes: dict[str, int] = dict.fromkeys(SECTIONS, 0)
        """The new entries' `_entries_size`, per section."""
        self.calls: list[int] = []
        """Per exchange read, the completed calls listed by then (new Read and Changed entries: a call repeated with
        the same outcome and size is listed once, as Progress counts it): how many results a compaction did not
        read facts from."""

    def size(self) -> tuple[int, ...]:
        """How many new entries each section holds, then how many exchanges were read: where to cut back to."""
        return (*(len(self.added[name]) for name in SECTIONS), len(self.calls))

    def read(self, entries: tuple[_Entry, ...]) -> None:
        """Read those of one exchange's *entries* not `seen` yet, in order (a call per exchange, not per entry)."""
        seen, added, labels, counts, sizes = self.seen, self.added, self.labels, self.counts, self.sizes
        calls = self.calls[-1] if self.calls else 0
        for name, line, _, label in entries:
            known = seen[name]
            if line in known:
                continue
            known.add(line)
            if name == 'read' or name == 'changed':
                calls += 1
            added[name].append(line)
            labels[name].append(label)
            counts[name][label] += 1
            sizes[name] += len(line) + 3
        self.calls.append(calls)

    def cut(self, size: tuple[int, ...]) -> None:
        """Back to *size* (an earlier `size()`): the entries read after it are forgotten, as never seen."""
        for name, keep in zip(SECTIONS, size, strict=False):
            lines = self.added[name]
            if len(lines) == keep:
                continue
            seen, counts, labels = self.seen[name], self.counts[name], self.labels[name]
            for line, label in zip(lines[keep:], labels[keep:], strict=True):
                seen.discard(line)
                self.sizes[name] -= len(line) + 3
                counts[label] -= 1
                if not counts[label]:
                    del counts[label]
            del lines[keep:], labels[keep:]
        del self.calls[size[len(SECTIONS)] :]


@dataclass(frozen=True)
class _Read:
    """A point of a `_Reading`: where it stood after reading *exchanges*."""

    reading: _Reading
    """The reading (shared with the other points of it)."""
    exchanges: tuple[Exchange, ...]
    """The exchanges read by then (strong references: an exchange holds no message)."""
    size: tuple[int, ...]
    """The reading's `size()` by then."""


@dataclass
class _Carried:
    """What the reset's earlier checkpoints in the history hold."""

    sections: dict[str, list[str]] = field(default_factory=lambda: {name: [] for name in SECTIONS})
    """Their entries, per section, oldest first."""

    omitted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SECTIONS, 0))
    """Entries they folded into counts, per section."""

    digests: dict[str, dict[str, int]] = field(default_factory=lambda: {name: {} for name in SECTIONS})
    """Their folded entries counted per label, per section."""

    unread: int = 0
    """Completed calls whose results they did not read facts from (`ResetToCheckpoint._found`)."""

    pieces: int = 0
    """Checkpoints a rewrite would replace (boundaries holding nothing but the reset's records)."""

    chars: int = 0
    """Their text's length."""

    tokens: int = 0
    """Their estimated tokens."""

    def add(self, extra: dict[str, Any]) -> None:
        """Count one checkpoint record's entries, folded counts and digests."""
        carried = str_dict(extra.get('checkpoint'))
        omitted = str_dict(extra.get('omitted'))
        digests = str_dict(extra.get('digests'))
        for name in SECTIONS:
            self.sections[name].extend(_strings(carried.get(name)))
            if _count(omitted.get(name)):
                self.omitted[name] += omitted[name]
            for label, count in str_dict(digests.get(name)).items():
                if _count(count):
                    self.digests[name][label] = self.digests[name].get(label, 0) + count
        if _count(unread := extra.get('unread')):
            self.unread += unread
        # Checkpoints written before sections existed: one line per completed call.
        self.sections['read'].extend(_strings(extra.get('checkpoint_entries')))


def _text(proposal: Proposal) -> str:
    return proposal.summary.text if isinstance(proposal.summary, Summary) else ''


def _count(value: object) -> TypeGuard[int]:
    """Whether a value read back from a record is a positive count (one past `MAX_EXCHANGE_NUMBER` is forged or
    corrupt: carried forward, it would grow past what `int` writes as text, and every later reset would fail)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_EXCHANGE_NUMBER


@dataclass
class ResetToCheckpoint(ConfiguredCompaction[AgentDepsT]):
    """Reset the history to the opening request plus a deterministic checkpoint.

    The default checkpoint carries what was read, what was found in it (through `extract`, in the newest results until
    their facts fill what the checkpoint shows), what was changed, the user's requests and the assistant's own answers,
    every instruction change, progress and the next step. Earlier checkpoints stay as they were and the next one holds
    only what they do not, so nothing recorded is forgotten and nothing is written twice; a fact that a line of the
    agent's own words states exactly is not restated. Each checkpoint stays within what it replaces, and all of them
    within `max_chars` (by default half of what the trigger lets the history hold; above the floor of its fixed lines,
    about 750 characters). Pass `checkpoint=` to render your own typed state instead (it replaces the earlier one at
    each reset).

    Example:
        ```python
        def checkpoint(ctx: RunContext[AuditState], view) -> str:
            return ctx.deps.render()

        agent = Agent(model, deps_type=AuditState, capabilities=[ResetToCheckpoint(checkpoint=checkpoint)])
        ```
    """

    checkpoint: CheckpointFn | None = None
    """Custom renderer; `None` uses the deterministic default."""

    sources: InstructionSources = field(default_factory=lambda: InstructionSources(markers=()))
    """Instruction changes to list verbatim (default: the user's prompts after the opening one)."""

    extract: FactExtractor | None = None
    """What each tool result contributes under "Found"; `None` uses `rare_lines`. Called at a compaction, for the newest
    results first, until their facts fill the checkpoints' bound (`max_chars`) or the checkpoint is sure to fold the
    oldest of them (the results before them are counted, not read)."""

    excerpt_chars: int = 400
    """Results up to this many characters are carried whole under "Found" instead of through `extract`."""

    facts_per_result: int = 20
    """Lines the default extractor keeps per result."""

    answer_chars: int = 2_000
    """Characters of each user request or assistant answer carried verbatim (longer ones are clipped, marked)."""

    max_chars: int | None = None
    """Upper bound on the checkpoints' length together; each is also kept to about three quarters of what it replaces (a
    rewrite folds them to half of it). `None` ties it to the trigger: two characters per token of its limit (36,000 at
    the default 18,000 tokens: at about four characters a token, half of what the trigger lets the history hold), at
    least 16,000 and at most 64,000 (set it for more: the checkpoints go with every request, and a compaction reads
    facts until they fill it); 16,000 under a message-count trigger, and under a trigger with its own `tokenizer`,
    whose characters per token the bound cannot know. A fixed bound does not grow with the window: the
    checkpoints of a long task fold their oldest facts into counts once they fill it. The bound cannot go under the
    fixed lines (header, fold lines, progress: 500 to 2,000 characters)."""

    write_tools: str = WRITE_TOOLS
    """Regular expression over tool names whose calls changed something (listed under "Changed")."""

    _writes: re.Pattern[str] = field(init=False, repr=False, compare=False)

    _entries: IdentityMemo[tuple[_Entry, ...]] = field(
        init=False, repr=False, compare=False, default_factory=IdentityMemo[tuple['_Entry', ...]]
    )
    """Each exchange's `(section, line, at, label)` entries by the identity of its parts (weak): an exchange a
    reset already read (a retried or repeated compaction of the same history) is not read again."""

    _facts: IdentityMemo[tuple[_Entry, ...]] = field(
        init=False, repr=False, compare=False, default_factory=IdentityMemo[tuple['_Entry', ...]]
    )
    """Each exchange's Found entries (`_exchange_facts`) by the identity of its parts (weak), read as the steps
    arrive (`_read_arrived`) or by a compaction."""

    _read: list[_Read] = field(init=False, repr=False, compare=False, default_factory=list['_Read'])
    """The entries of the settled exchanges of the last few histories read: a longer history starting with the
    same exchanges reads only the ones after them."""

    _read_with: tuple[object, ...] = field(init=False, repr=False, compare=False, default=())
    """The settings `_entries` and `_read` were read with (`_settings`): both are forgotten when a field they
    depend on is set again between runs (and `_writes` is compiled again from a new `write_tools`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = 'ResetToCheckpoint'
        check_callable(owner, 'checkpoint', self.checkpoint, arguments=2)
        check_instance(owner, 'sources', self.sources, InstructionSources, 'an InstructionSources')
        check_callable(owner, 'extract', self.extract, arguments=2)
        check_int(owner, 'excerpt_chars', self.excerpt_chars, minimum=0)
        check_int(owner, 'facts_per_result', self.facts_per_result, minimum=1)
        check_int(owner, 'answer_chars', self.answer_chars, minimum=1)
        check_optional_int(owner, 'max_chars', self.max_chars, minimum=200)
        (self._writes,) = check_patterns(owner, 'write_tools', (self.write_tools,))

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'reset'

    def _bound(self, model: Model | None = None) -> int:
        """The checkpoints' bound in characters for a request to *model*: `max_chars`, or the one the trigger gives
        (*model* resolves a `fraction` trigger's window; without it, the trigger's fallback window)."""
        if self.max_chars is not None:
            return self.max_chars
        if self.trigger.tokenizer is not None:
            # Characters per token are the tokenizer's: on dense text (Chinese, about one a character) two
            # characters per token of the limit would let the checkpoints alone pass the trigger, and every step
            # reset again.
            return MIN_BOUND_CHARS
        limit = self.trigger.token_limit(model, warn=False)  # the trigger warned of an unknown window already
        if limit is None:
            return MIN_BOUND_CHARS
        return min(max(MIN_BOUND_CHARS, limit * CHARS_PER_TRIGGER_TOKEN), MAX_BOUND_CHARS)

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Append a checkpoint of what is new after the earlier ones; rewrite them into one only past the bound.

        Earlier checkpoints stay byte-identical, so a provider's prompt cache still holds them and a reset writes only
        the entries no earlier checkpoint holds. Each checkpoint is kept to about three quarters of the exchanges it
        replaces (an estimated token is about four characters), folding its own oldest entries if it must. When the
        checkpoints together would pass their bound (`max_chars`, or the trigger's) (or nothing but them is left to
        drop) they are rewritten into one, folded to half of the bound, so the resets after a rewrite append again for a
        while: rewrites are rare, and the record says when one happened (`rewrote`).
        """
        if self.checkpoint is not None:
            try:
                text = self.checkpoint(ctx.run, view)
            except Exception as error:
                _warn_failed('checkpoint', f'raised {described(error)}')
                raise
            if not is_str(text):  # typed `str`, but a user's function returns anything
                raise TypeError(_warn_failed('checkpoint', f'returned {clip(described(text), 80)}, not a str'))
            return Proposal(summary=Summary(text), supersedes=self.strategy_name, variant='custom')
        carried = self._carried(view)
        bound = self._bound(ctx.model)
        try:
            added, labels, unread = self._additions(view, carried, bound)
        finally:
            _KINDS.clear()  # the words of the results read are not held after the reading (see `_Kinds`)
        dropped = self._dropped_tokens(view)
        room = bound - carried.chars
        if dropped and room > 0 and (dropped * 3 <= room or _entries_size(added) <= room):
            limit = min(dropped * 3, room)
            appended = self._checkpoint(view, added, carried, budget=limit, appended=True, labels=labels, unread=unread)
            # Bound by what it replaces, a checkpoint folds its own oldest entries; bound by the room the bound
            # leaves, it is appended only if nothing folds (folding there would lose entries a rewrite keeps).
            folded = any(appended.extra['omitted'].values())
            if len(_text(appended)) <= limit and (dropped * 3 <= room or not folded):
                return appended
        # The checkpoints would pass their bound together: one checkpoint of everything, folded with room to spare.
        sections: dict[str, list[str]] = {
            name: _Lines([*carried.sections[name], *added[name]], _size(carried.sections[name]) + _size(added[name]))
            if carried.sections[name]
            else added[name]  # a copy already
            for name in SECTIONS
        }
        for name in SECTIONS:
            labels[name].update(label_counts(carried.sections[name]))
        budget = min(bound // REWRITE_SHARE, (dropped + carried.tokens) * 3)
        return self._checkpoint(
            view, sections, carried, budget=budget, appended=False, labels=labels, unread=carried.unread + unread
        )

    def _checkpoint(
        self,
        view: ConversationView,
        sections: dict[str, list[str]],
        carried: _Carried,
        *,
        budget: int,
        appended: bool,
        labels: dict[str, Counter[str]] | None = None,
        unread: int = 0,
    ) -> Proposal:
        """A checkpoint of *sections* within *budget* characters (appended after *carried*, or replacing it).

        *labels* are the entries of *sections* counted per label (`label_counts`), when the caller carried them;
        *unread* counts the completed calls whose results were not read for facts (`_found`).
        """
        omitted: dict[str, int] = dict.fromkeys(SECTIONS, 0) if appended else dict(carried.omitted)
        digests: dict[str, dict[str, int]] = {name: {} for name in SECTIONS} if appended else carried.digests
        before = carried if appended and carried.pieces else None
        header = CONTINUED_HEADER if before is not None else CHECKPOINT_HEADER

        def render() -> str:
            return render_checkpoint(
                sections,
                omitted,
                progress=self._progress(view, sections, omitted, before),
                digests=digests,
                header=header,
                unread=unread,
            )

        # A lower bound of the rendered length: every entry but a fact is a line `- entry` of its own, and every fact
        # a line of at least three characters (under its call, or under Found). Past the budget, rendering tens of
        # thousands of entries only to measure that they do not fit is skipped.
        facts = sections['found']
        least = _entries_size({name: lines for name, lines in sections.items() if name != 'found'}) + 3 * len(facts)
        text = render() if least <= budget else ''
        if not text or len(text) > budget:
            # Folding estimates the fixed lines (header, titles, progress); fold only a checkpoint that does not fit
            # as it is, so an appended one is not folded, or turned into a rewrite, against a guess.
            sections, omitted, digests = fold_with_digests(sections, omitted, budget, digests, labels=labels)
            text = render()
        while len(text) > budget and any(sections[name] for name in SECTIONS):
            # Titles, notes and digests took more than estimated (long labels, a long latest call): fold the excess.
            excess = len(text) - budget
            sections, omitted, digests = fold_with_digests(
                sections, omitted, _entries_size(sections) - excess, digests, room=0
            )
            text = render()
        extra: dict[str, Any] = {'checkpoint': sections, 'omitted': omitted, 'instructions': sections['instructions']}
        if any(digests.values()):
            extra['digests'] = digests
        if unread:
            extra['unread'] = unread
        if before is not None:
            extra['appended'] = before.pieces
            return Proposal(summary=Summary(text), variant='default', extra=extra)
        if carried.pieces:
            extra['rewrote'] = carried.pieces
        return Proposal(summary=Summary(text), supersedes=self.strategy_name, variant='default', extra=extra)

    def _carried(self, view: ConversationView) -> _Carried:
        """What the earlier checkpoints hold: their entries, folded counts and digests, and their size."""
        carried = _Carried()
        for exchange in boundary_exchanges(view):
            parts = [part for message in view.messages_of(exchange) for part in message.parts]
            records = [(part, record) for part in parts if (record := our_record(part)) is not None]
            mine = [(part, record) for part, record in records if self._wrote(record)]
            for _, record in mine:
                carried.add(record_extra(record))
            # Only a boundary made of nothing but our records is replaced by a rewrite (the validator's rule):
            # anything else stays, so it does not count against the room the checkpoints take.
            if mine and len(mine) == len(parts) and not exchange.unfinished:
                carried.pieces += 1
                carried.tokens += exchange.tokens
                carried.chars += sum(len(getattr(part, 'content', None) or '') for part, _ in mine)
        return carried

    def _wrote(self, record: dict[str, Any]) -> bool:
        """Whether this strategy wrote *record*, alone or wrapped (`reassert+reset`), as the validator reads it."""
        return written_by(record.get('strategy'), self.strategy_name)

    def _dropped_tokens(self, view: ConversationView) -> int:
        """Estimated tokens of the exchanges a reset drops (everything the runtime does not keep)."""
        return droppable_tokens(view)

    def replaced_tokens(self, view: ConversationView) -> int:
        """Estimated tokens a rewrite stands in for: everything not forced, and our earlier checkpoints."""
        return self._dropped_tokens(view) + self._carried(view).tokens

    def sections(
        self, view: ConversationView, model: Model | None = None
    ) -> tuple[dict[str, list[str]], dict[str, int]]:
        """Every entry the checkpoints hold after this reset: those earlier checkpoints carried, then the new ones
        (for a request to *model*, whose window may set the checkpoints' bound: it says how many results are read
        for facts)."""
        carried = self._carried(view)
        added, _, _ = self._additions(view, carried, self._bound(model))
        return {name: [*carried.sections[name], *added[name]] for name in SECTIONS}, dict(carried.omitted)

    def _additions(
        self, view: ConversationView, carried: _Carried, bound: int
    ) -> tuple[dict[str, list[str]], dict[str, Counter[str]], int]:
        """The entries the dropped exchanges add that no earlier checkpoint holds, their `label_counts`, and the
        completed calls whose results were not read for facts (`_found`).

        The labels are counted as the entries are read and carried forward with them, so folding tens of
        thousands of entries does not read each one again.
        """
        # The exchanges' entries are read before the lock is taken, and their facts after it is let go: `extract` is
        # the user's, and may wait for another run (in another thread) that needs the lock. Should another thread
        # move the reading back meanwhile, the few exchanges before are read the same way and the reading is
        # resumed again.
        self._check_settings()
        exchanges = view.exchanges
        have, want = len(exchanges), self._peek(carried, view)
        entries: list[tuple[_Entry, ...]] = []  # those of `exchanges[have:]`
        while True:
            entries[:0] = self._entries_of(view, exchanges[want:have])
            have = want
            with _READING:
                reading, start = self._resume(carried, view)
                if start >= have:
                    added, labels = self._read_additions(view, carried, reading, entries[start - have :], start)
                    calls = list(reading.calls)  # the reading may be cut back by another thread once let go
                    break
            want = start
        added['found'], unread = self._found(view, carried, added, calls, bound)
        labels['found'] = label_counts(added['found'])
        return added, labels, unread

    def _check_settings(self) -> None:
        """Forget what was read with other settings (a field `_settings` names was set again since)."""
        settings = self._settings()
        if settings != self._read_with:
            if self.write_tools != self._writes.pattern:  # set again since: checked as `__post_init__` checks it
                (self._writes,) = check_patterns('ResetToCheckpoint', 'write_tools', (self.write_tools,))
            with _READING:
                self._entries, self._facts = IdentityMemo[tuple[_Entry, ...]](), IdentityMemo[tuple[_Entry, ...]]()
                self._read[:], self._read_with = [], settings

    def _settings(self) -> tuple[object, ...]:
        """The fields an exchange's entries are read with (`_exchange_entries`)."""
        return (self.extract, self.excerpt_chars, self.facts_per_result, self.answer_chars, self.write_tools)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Read the facts of the newest tool steps as they arrive, then compact when the trigger is crossed.

        A run's first compaction then finds the facts of the newest results read already, which is most of what
        it reads of them (`_found`), instead of reading them all at once.
        """
        try:
            self._read_arrived(ctx.messages)
        finally:
            _KINDS.clear()  # the words of the results read are not held after the reading (see `_Kinds`)
        return await super().before_model_request(ctx, request_context)

    def _read_arrived(self, messages: Sequence[ModelMessage]) -> None:
        """Put in `_facts` the facts of the newest tool steps of *messages* (a response, then a request of one long
        result to it), as `_exchange_facts` reads and keeps them, from the newest back to one already kept (at most
        `_ARRIVED_STEPS`): a request costs what its new messages do, whatever the history's length."""
        if self.checkpoint is not None or self.extract is not None:
            return  # a custom checkpoint reads no facts, and a user's `extract` is called at a compaction only
        try:
            self._check_settings()
            end = len(messages)
            for _ in range(_ARRIVED_STEPS):
                if end < 2:
                    return
                response, request = messages[end - 2], messages[end - 1]
                end -= 2
                if type(response) is not ModelResponse or type(request) is not ModelRequest or len(request.parts) != 1:
                    return
                result = request.parts[0]
                if not isinstance(result, ToolReturnPart):
                    return
                content = result.content
                if content is None or (isinstance(content, str) and len(content) <= self.excerpt_chars):
                    return  # not a step `_exchange_facts` keeps (a short result is read again: as cheap)
                call_id = result.tool_call_id
                if not any(type(part) is ToolCallPart and part.tool_call_id == call_id for part in response.parts):
                    return  # not a step: segmentation would not make the two one exchange of tools
                parts = (*response.parts, result)
                if self._facts.get(parts) is not None:
                    return  # read at an earlier request, and so were the steps before it
                found = self._call_facts(response, result)
                if found is None:
                    return
                self._facts.put(parts, found)
        except Exception:
            # Only a head start: a compaction reads the same step again, and reports what fails there.
            pass

    def _peek(self, carried: _Carried, view: ConversationView) -> int:
        """How many of *view*'s exchanges `_resume` would find read (nothing is cut back here)."""
        for read in tuple(self._read):
            if read.reading.carried == carried.sections and _starts_with(view, read.exchanges):
                return len(read.exchanges)
        return 0

    def _read_additions(
        self,
        view: ConversationView,
        carried: _Carried,
        reading: _Reading,
        entries: Sequence[tuple[_Entry, ...]],
        start: int,
    ) -> tuple[dict[str, list[str]], dict[str, Counter[str]]]:
        """`_additions` but the facts, from *reading*, which has read *view*'s first *start* exchanges (*entries*:
        the others')."""
        exchanges = view.exchanges
        seen = reading.seen
        settled = settled_prefix(exchanges)
        for position in range(start, len(exchanges)):
            if position == settled and settled > start:
                point = _Read(reading, exchanges[:settled], reading.size())
                self._read[:] = [point, *self._read][:_READ_KEPT]
                note_start(view, point.exchanges, _no_entries)  # the next view sharing them is not checked again
            reading.read(entries[position - start])
        # Copies: the reading goes on growing (a pointer copy each, in C); their sizes are known.
        added: dict[str, list[str]] = {name: _Lines(reading.added[name], reading.sizes[name]) for name in SECTIONS}
        labels = {name: Counter(counts) for name, counts in reading.counts.items()}
        # A user's turn that changes an instruction is listed under Instruction changes, which a fold takes last (the
        # rule given in turn 5 was folded away by turn 40 as one of the conversation's lines, which go first). Among
        # the conversation's lines it stays where it was said, cut short when long: the whole of it is listed above.
        # One an earlier checkpoint wrote as a conversation line only is not listed again.
        said = set(carried.sections['conversation'])
        gathered = gather_instructions(view, self.sources)
        again = _said_again(gathered, carried.sections['instructions'])
        instructions = [
            text
            for text in gathered
            if text in again or (text not in seen['instructions'] and f'user: {text}' not in said)
        ]
        added['instructions'] = instructions
        labels['instructions'] = label_counts(instructions)
        long = {
            line: 'user: ' + cut_to(line[6:], _LISTED_TURN_CHARS)
            for text in instructions
            if len(line := 'user: ' + self._clip(text)) > len('user: ') + _LISTED_TURN_CHARS
        }
        if long:
            conversation = [long.get(line, line) for line in added['conversation']]
            added['conversation'] = _Lines(conversation, sum(map(len, conversation)) + 3 * len(conversation))
        return added, labels

    def _found(
        self, view: ConversationView, carried: _Carried, added: dict[str, list[str]], calls: list[int], bound: int
    ) -> tuple[list[str], int]:
        """The facts of the newest results, and how many completed calls before them were not read for facts (*calls*:
        per exchange, the completed calls up to it, `_Reading.calls`; *bound*: the checkpoints' bound in characters).

        Results are read newest first until their facts fill the bound, more than any checkpoint shows of them,
        or until the checkpoint is sure to fold the oldest of the facts read (`_folds_found`): Found is folded
        oldest first, so the facts of older results would be folded too. Reading every result of a long history
        to show a few of them cost up to 18 times what clearing it costs. A fact is listed once, under the newest
        result that gives it, and not at all when an earlier checkpoint holds it or the agent's own words state it
        (a note it wrote, in an earlier checkpoint, in this one or in the exchanges kept verbatim) or an
        instruction change does: the checkpoint does not restate the agent's notes.
        """
        exchanges = view.exchanges
        seen = set(carried.sections['found'])
        stated: set[str] | None = None
        newest: list[list[str]] = []
        size, first = 0, len(exchanges)
        # The fold is certain only when the text cannot fit unfolded (`least`, at least: the header, the other
        # sections' lines, each fact's own text under its call) in the largest budget this reset may take.
        # Checked as Found grows by a tenth, from the size under which no fold takes a fact (each section keeps
        # at least a fifth of the room).
        budget = self._largest_budget(view, carried, bound)
        others = {name: lines for name, lines in added.items() if name != 'found'}
        least, room = len(CONTINUED_HEADER) + _entries_size(others), max(budget - FIXED_LINES, 0)
        check = room // len(SECTIONS)
        for position in range(len(exchanges) - 1, -1, -1):
            if size >= bound:
                break
            first = position
            exchange = exchanges[position]
            if exchange.kind != 'tools' or _no_entries(exchange):
                continue
            lines: list[str] = []
            for _, line, at, _ in self._exchange_facts(view, exchange):
                if line in seen:
                    continue
                seen.add(line)
                if at:
                    if stated is None:
                        stated = self._stated(view, carried, added)
                    if (key := _fact_key(line[at:])) and key in stated:
                        continue
                lines.append(line)
                size += len(line) + 3
                least += len(line) - at + 3 if at else 3  # `  - fact` under its call, or a loose `- call: fact`
            if lines:
                newest.append(lines)
                if size >= check and least > budget:
                    check = size + size // 10
                    if _folds_found(others, newest, room):
                        break
        unread = calls[first - 1] if first else 0
        return [line for lines in reversed(newest) for line in lines], unread

    def _largest_budget(self, view: ConversationView, carried: _Carried, bound: int) -> int:
        """The largest budget `propose` may give this reset's checkpoint under *bound*: appended, or rewriting the
        earlier ones."""
        dropped = self._dropped_tokens(view)
        left = bound - carried.chars
        appended = min(dropped * 3, left) if dropped and left > 0 else 0
        return max(appended, min(bound // REWRITE_SHARE, (dropped + carried.tokens) * 3))

    def _resume(self, carried: _Carried, view: ConversationView) -> tuple[_Reading, int]:
        """The reading to go on from for *view*'s exchanges after *carried*, and how many exchanges it has read.

        A reading that went further on another history is cut back to where the two part (a point of it kept
        in `_read`): what was read after is forgotten, and so are the points after it, and the points of other
        histories that held more entries than it (on a branch that read nothing new, a point with fewer
        exchanges can hold more entries: its entries would be read back as another branch's).
        """
        for read in self._read:
            if read.reading.carried == carried.sections and _starts_with(view, read.exchanges):
                reading = read.reading
                if reading.size() != read.size:
                    reading.cut(read.size)
                    count, size = len(read.exchanges), read.size
                    self._read[:] = [
                        r
                        for r in self._read
                        if r.reading is not reading
                        or (len(r.exchanges) <= count and all(map(operator.le, r.size, size)))
                    ]
                return reading, len(read.exchanges)
        return _Reading(carried.sections), 0

    def _stated(self, view: ConversationView, carried: _Carried, added: dict[str, list[str]]) -> set[str]:
        """Lines the agent's own words and the instruction changes already state, normalized."""
        stated: set[str] = set()
        for line in (*carried.sections['conversation'], *added['conversation']):
            if line.startswith('you: '):
                stated.update(_said_lines(line[5:]))
        for text in (*carried.sections['instructions'], *added['instructions']):
            stated.update(_said_lines(text))
        for exchange in forced_exchanges(view):
            if exchange.kind in ('opening', 'boundary', 'restatement'):
                continue
            for message in view.messages_of(exchange):
                if isinstance(message, ModelResponse):
                    for part in message.parts:
                        if isinstance(part, TextPart) and part.content.strip():
                            stated.update(_said_lines(self._clip(part.content)))
        return stated

    def _exchange_entries(self, view: ConversationView, exchange: Exchange) -> tuple[_Entry, ...]:
        """The `(section, line, at, label)` entries one exchange adds besides its facts (`_exchange_facts`), read
        once per exchange (memoized by its parts).

        `at` is 0 (where a fact's own text starts in a Found entry); `label` is what a fold counts the entry
        under (`label_counts`).
        """
        return self._exchange_reading(view, exchange, facts=False)

    def _exchange_facts(self, view: ConversationView, exchange: Exchange) -> tuple[_Entry, ...]:
        """The Found entries of one exchange's results, `(found, 'call: fact', at, label)`, read once per exchange
        (memoized by its parts): `at` is where the fact's own text starts (0 for a failed call's output), to tell
        whether the agent's own words already state it."""
        return self._exchange_reading(view, exchange, facts=True)

    def _exchange_reading(self, view: ConversationView, exchange: Exchange, *, facts: bool) -> tuple[_Entry, ...]:
        """`_exchange_facts` if *facts*, else `_exchange_entries`."""
        history = view.messages
        refs = exchange.refs
        read = self._call_facts if facts else self._call_entries
        memo = self._facts if facts else self._entries
        if exchange.kind == 'tools' and len(refs) == 2 and refs[0][1] is None and refs[1][1] is None:
            # The common exchange: a response and the request returning its call, read without building the
            # sections and the exchange's parts (`_tool_entries` reads it alike; `_call_entries` says when).
            response, request = history[refs[0][0]], history[refs[1][0]]
            if type(response) is ModelResponse and type(request) is ModelRequest and len(request.parts) == 1:
                result = request.parts[0]
                if isinstance(result, ToolReturnPart):
                    content = result.content
                    if isinstance(content, str) and len(content) <= self.excerpt_chars:
                        # Read whole, as cheaply as it is found in the memo: not kept there.
                        found = read(response, result)
                        if found is not None:
                            return found
                    else:
                        parts = (*response.parts, result)
                        cached = memo.get(parts)
                        if cached is not None:
                            return cached
                        found = read(response, result)
                        if found is not None:
                            return memo.put(parts, found)
        # The parts are read through the refs, without building the exchange's message fragments: most
        # exchanges were read by an earlier reset, and only a new one needs its messages.
        parts = tuple(
            chain.from_iterable(
                history[index].parts if chosen is None else [history[index].parts[p] for p in chosen]
                for index, chosen in exchange.refs
            )
        )
        cached = memo.get(parts)
        if cached is not None:
            return cached
        # `view.messages_of`, without a call per whole message (most refs are whole messages).
        messages = [
            history[index] if chosen is None else fragment(history, (index, chosen)) for index, chosen in exchange.refs
        ]
        sections: dict[str, list[tuple[str, int]]] = {name: [] for name in SECTIONS}
        if exchange.kind != 'tools':
            if not facts:
                sections['conversation'].extend((line, 0) for line in self._conversation(messages))
        elif facts:
            sections['found'] = self._tool_facts(messages)
        else:
            self._tool_entries(messages, sections)
        # In the order the section lines were produced (each section keeps its own order). An exchange's entries
        # mostly share one label (the tool called): each distinct head is labelled once.
        labels: dict[str, str] = {}

        def label(line: str) -> str:
            head = _head(line)
            known = labels.get(head)
            return known if known is not None else labels.setdefault(head, _label_of(head))

        entries = tuple((name, line, fact, label(line)) for name in SECTIONS for line, fact in sections[name])
        return memo.put(parts, entries) if parts else entries

    def _entries_of(self, view: ConversationView, exchanges: Sequence[Exchange]) -> list[tuple[_Entry, ...]]:
        """`_exchange_entries` of each of *exchanges* (`()` for one `_no_entries` holds), in one loop.

        A history never seen is mostly tool steps of one call and its result (50k messages of them are 25k steps):
        those are read here with what each costs cut to what its entries need (`_short_step`).
        Every other exchange goes to `_exchange_entries`, which gives the same entries for these too.
        """
        history = view.messages
        short = self._short_step
        search = self._writes.search
        writes: dict[str, bool] = {}  # per name read in this loop: the pattern is the one the loop started with
        out: list[tuple[_Entry, ...]] = []
        add = out.append
        for exchange in exchanges:
            kind = exchange.kind
            if exchange.protected is not None or exchange.unfinished or kind not in _ENTRY_KINDS:
                add(())  # `_no_entries`
                continue
            refs = exchange.refs
            if kind == 'tools' and len(refs) == 2:
                (at, chosen), (then, also) = refs
                if chosen is None and also is None:
                    response, request = history[at], history[then]
                    if type(response) is ModelResponse and type(request) is ModelRequest and len(request.parts) == 1:
                        result = request.parts[0]
                        if type(result) is ToolReturnPart:
                            content = result.content
                            if type(content) is str and result.outcome == 'success':
                                found = short(response, result.tool_call_id, content, search, writes)
                                if found is not None:
                                    add(found)
                                    continue
            add(self._exchange_entries(view, exchange))
        return out

    @staticmethod
    def _short_step(
        response: ModelResponse,
        call_id: str,
        content: str,
        search: Callable[[str], object],
        writes: dict[str, bool],
    ) -> tuple[_Entry, ...] | None:
        """`_call_entries` of a step whose result (to *call_id*) is a successful plain `str`, *content*, when the
        response holds thinking and calls only, one of them answered, with a plain name already labelled and plain
        arguments (a few `str` keys to plain scalars); `None` for any other step.

        What each costs is cut to what its entries need: the arguments' JSON written by `orjson` as `to_json` writes
        them, whether a tool writes told once per name (*writes*, by *search*), a size under a thousand written
        without grouping.
        """
        call_part: ToolCallPart | None = None
        for part in response.parts:
            if type(part) is ToolCallPart:
                if part.tool_call_id == call_id:
                    if call_part is not None:
                        return None
                    call_part = part
            elif type(part) is not ThinkingPart:
                return None  # a text is said: `_call_entries` reads it
        if call_part is None:
            return None
        name = call_part.tool_name
        label = _TOOL_LABELS.get(name) if type(name) is str else None
        args = call_part.args
        if label is None or type(args) is not dict or len(args) > _FLAT_ARGS:
            return None
        for key, value in args.items():  # `encoding._plain_flat`, without its fixed cost for a few items
            if type(key) is not str or type(value) not in PLAIN_SCALARS:
                return None
        try:
            # `to_json`'s own first path for such arguments; `orjson` writes no lone surrogate (it refuses one), so
            # the text is clean as it is.
            call = f'{name}({dumps(args, option=OPT_SORT_KEYS).decode()})'
        except JSONEncodeError:
            return None  # an integer beyond 64 bits, a lone surrogate: `to_json`'s other path
        written = writes.get(name)
        if written is None:
            written = writes[name] = search(name) is not None
        # `clean_text` replaces each lone surrogate by one character: the size is the text's own.
        size = len(content)
        # `,` groups digits from a thousand on: below, the size is written as `str` writes it.
        entry = f'{call} → success, {size} chars' if size < 1_000 else f'{call} → success, {size:,} chars'
        return (('changed', entry, 0, label),) if written else (('read', entry, 0, label),)

    def _tool_entries(self, messages: list[ModelMessage], sections: dict[str, list[tuple[str, int]]]) -> None:
        """The entries of an exchange of tool calls besides their facts, into *sections* (`_tool_facts` reads those)."""
        returns = _returns(messages)
        for message in messages:
            if not isinstance(message, ModelResponse):
                continue
            for part in message.parts:
                if isinstance(part, TextPart) and part.content.strip():
                    sections['conversation'].append(('you: ' + self._clip(part.content), 0))
                if not isinstance(part, ToolCallPart) or part.tool_call_id not in returns:
                    continue
                result = returns[part.tool_call_id]
                call, _ = _called(part)
                content = clean_text(return_text(result))
                entry = f'{call} → {result.outcome}, {len(content):,} chars'
                sections['changed' if self._writes.search(part.tool_name) else 'read'].append((entry, 0))

    def _tool_facts(self, messages: list[ModelMessage]) -> list[tuple[str, int]]:
        """The facts of an exchange of tool calls, `(call: fact, at)` in the order of the calls."""
        returns = _returns(messages)
        facts: list[tuple[str, int]] = []
        for message in messages:
            if not isinstance(message, ModelResponse):
                continue
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id in returns:
                    call, _ = _called(part)
                    facts.extend(self._facts_of(part, call, returns[part.tool_call_id]))
        return facts

    def _facts_of(self, call_part: ToolCallPart, call: str, result: ToolReturnPart) -> list[tuple[str, int]]:
        """The Found lines of one call's *result*, `(call: fact, at)`: a failed call's output (clipped), a short
        result whole, a longer one through `extract` (`rare_lines` by default). `Recall`'s answers give none: they
        quote lines found already (or say nothing matched), which recall would find again inside the checkpoint. A
        result of a user's own tool named `recall` is read as any other: only the ones `Recall` marked are left out,
        and, in a history saved before the mark, those whose every line reads as one of its answers."""
        if call_part.tool_name == RECALL_TOOL and _is_recall_answer(result):
            return []
        content = clean_text(return_text(result))
        if result.outcome != 'success':
            return [(f'{call}: {clip(content, self.excerpt_chars or 200)}', 0)]
        at = len(call) + 2
        if len(content) <= self.excerpt_chars:
            fact = ' '.join(content.split())
            return [(f'{call}: {fact}', at)] if fact else []
        if self.extract is None:
            # Lines of the cleaned result, stripped and never blank: nothing to clean or leave out.
            return [(f'{call}: {fact}', at) for fact in rare_lines(call_part, content, limit=self.facts_per_result)]
        try:
            lines: object = self.extract(call_part, content)
        except Exception as error:
            _warn_failed('extract', f'raised {described(error)}')
            raise
        if isinstance(lines, str):
            lines = lines.splitlines()  # a text returned whole is its lines, not its characters
        if isinstance(lines, bytes | bytearray | memoryview) or not isinstance(lines, Iterable):  # pyright: ignore[reportUnnecessaryIsInstance]  # a user's function returns anything
            shown = clip(described(lines), 80)
            raise TypeError(_warn_failed('extract', f'returned {shown}, not a sequence of str'))
        try:
            # A generator runs the user's code as it is read, and a line's `str` is the user's (a `str` subclass's):
            # what either raises is the function's failure too.
            items = list(cast('Iterable[object]', lines))
            # Typed `str`: a `None` or a number among them would be listed as a fact.
            wrong = [item for item in items if not isinstance(item, str)]
            facts = [] if wrong else [clean_text(str(line)) for line in items]
        except Exception as error:
            _warn_failed('extract', f'raised {described(error)} while its lines were read')
            raise
        if wrong:
            raise TypeError(_warn_failed('extract', f'returned a line {clip(described(wrong[0]), 80)}, not a str'))
        return [(f'{call}: {fact}', at) for fact in facts if fact.strip()]

    def _call_entries(self, response: ModelResponse, result: ToolReturnPart) -> tuple[_Entry, ...] | None:
        """`_exchange_entries` of an exchange of *response* and the one request returning *result*, or `None`
        when *response* holds more than one call *result* returns (`_tool_entries` reads those).

        What `_tool_entries` and the labels give for it, in the same order, with fewer steps: every entry of one
        call has the call's label.
        """
        said: list[_Entry] = []
        call_part: ToolCallPart | None = None
        for part in response.parts:
            if isinstance(part, TextPart):
                if part.content.strip():
                    said.append(('conversation', 'you: ' + self._clip(part.content), 0, 'you'))
            elif isinstance(part, ToolCallPart) and part.tool_call_id == result.tool_call_id:
                if call_part is not None:
                    return None
                call_part = part
        if call_part is None:
            return tuple(said)
        call, label = _called(call_part)
        content = clean_text(return_text(result))
        entry = f'{call} → {result.outcome}, {len(content):,} chars'
        section = 'changed' if self._writes.search(call_part.tool_name) is not None else 'read'
        return (*said, (section, entry, 0, label))

    def _call_facts(self, response: ModelResponse, result: ToolReturnPart) -> tuple[_Entry, ...] | None:
        """`_exchange_facts` of an exchange of *response* and the one request returning *result*, or `None`
        when *response* holds more than one call *result* returns (`_tool_facts` reads those)."""
        call_part: ToolCallPart | None = None
        for part in response.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id == result.tool_call_id:
                if call_part is not None:
                    return None
                call_part = part
        if call_part is None:
            return ()
        call, label = _called(call_part)
        return tuple(('found', line, at, label) for line, at in self._facts_of(call_part, call, result))

    def _conversation(self, messages: list[ModelMessage]) -> list[str]:
        lines: list[str] = []
        for message in messages:
            for part in message.parts:
                if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                    if not is_restatement(part) and not tool_provided(message, part) and user_text(part).strip():
                        lines.append('user: ' + self._clip(user_text(part)))
                elif isinstance(part, TextPart) and part.content.strip():
                    lines.append('you: ' + self._clip(part.content))
        return lines

    def _clip(self, text: str) -> str:
        return cut_to(clean_text(text.strip()), self.answer_chars)

    def _progress(
        self,
        view: ConversationView,
        sections: dict[str, list[str]],
        omitted: dict[str, int],
        before: _Carried | None = None,
    ) -> str:
        """Progress and the next step, counting what the earlier checkpoints (*before*) hold too."""
        held = before.sections if before is not None else dict[str, list[str]]()
        calls = sum(len(sections[n]) + len(held.get(n, ())) + omitted[n] for n in ('read', 'changed'))
        if before is not None:
            calls += before.omitted['read'] + before.omitted['changed']
        conversation = (*held.get('conversation', ()), *sections['conversation'])
        newest = _newest_call(view)
        if newest and not sections['changed'] and sections['read'] and _call_of(sections['read'][-1]) == newest:
            newest = None  # it is the last call listed just above
        answers = sum(1 for line in conversation if line.startswith('you: '))
        lines = [
            f'Progress: {calls:,} tool call{"s" if calls != 1 else ""} completed'
            + (f' (the latest: {newest})' if newest else '')
            + (f'; {answers:,} of your earlier messages are listed above.' if answers else '.')
        ]
        if before is not None and calls and any(before.sections[n] or before.omitted[n] for n in ('read', 'changed')):
            # An earlier checkpoint, still in the history as it was, already gave this next step.
            return lines[0]
        lines.append(
            (
                'Next step: continue the request in progress from where the latest call left it; the calls listed '
                'are done and their facts are listed with them, so do not repeat them unless you need their exact '
                'output.'
            )
            if calls
            else 'Next step: answer the request in progress; the conversation above is what came before it.'
        )
        return '\n'.join(lines)

    def _is_ours(self, view: ConversationView, exchange: Exchange) -> bool:
        for message in view.messages_of(exchange):
            for part in message.parts:
                record = ours(getattr(part, 'metadata', None))
                if record.get('strategy') == self.strategy_name:
                    return True
        return False


def _said_again(gathered: Sequence[str], carried: Sequence[str]) -> set[str]:
    """The changes earlier checkpoints list (*carried*, in their order) that *gathered* (in the order they were said)
    has after a change the checkpoints list later: said again, they are listed again, at their latest place
    (lowercase, uppercase, then lowercase again ends with lowercase, which a checkpoint listing it once, before
    uppercase, did not say)."""
    places = {text: place for place, text in enumerate(carried)}
    again: set[str] = set()
    latest = -1
    for text in gathered:
        place = places.get(text)
        if place is None:
            continue
        if place < latest:
            again.add(text)
        else:
            latest = place
    return again


def _warn_failed(field: str, what: str) -> str:
    """Warn that the user's `ResetToCheckpoint.<field>` failed this compaction (*what* it did); the message.

    The runtime falls back, as for any strategy that fails: without the warning a function that fails every time
    would leave the run compacting by the fallback alone, and its author none the wiser.
    """
    message = f'ResetToCheckpoint.{field} {what}: this compaction falls back to keeping the newest exchanges'
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    return message


_RECALL_ANSWER_LINE = re.compile(RECALL_ANSWER_LINE)


def _is_recall_answer(result: ToolReturnPart) -> bool:
    """Whether a `recall` result is `Recall`'s answer: marked so, or, saved by a version before the mark, every line
    of it reading as one of its answer's lines."""
    marks = ResultMarks.from_metadata(result.metadata)
    if marks.recall_answer:
        return True
    if not isinstance(result.content, str):
        return False
    content = result.content
    if marks.id_prefix and content.startswith(marks.id_prefix):
        content = content[len(marks.id_prefix) :]  # `Archive`'s number shown before it
    lines = [line for line in content.splitlines() if line.strip()]
    return bool(lines) and all(_RECALL_ANSWER_LINE.fullmatch(line) for line in lines)


def _returns(messages: list[ModelMessage]) -> dict[str, ToolReturnPart]:
    """The results *messages* return, by call id (the last of several with one id)."""
    return {
        part.tool_call_id: part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


def _called(call_part: ToolCallPart) -> tuple[str, str]:
    """A call as its entries write it, `name(arguments)`, and the label a fold counts them under."""
    name = call_part.tool_name
    call = f'{name}({clean_text(args_text(call_part.args))})'
    # Kept per plain name only: a `str` subclass (an enum member) may format unlike its value, and an entry is
    # labelled by the name as formatted in it.
    plain = type(name) is str and len(name) <= _TOOL_LABEL_NAME_CHARS
    label = _TOOL_LABELS.get(name) if plain else None
    if label is None:
        label = _label_of(_head(call))  # every entry starts with the call
        if plain and len(_TOOL_LABELS) < _TOOL_LABELS_KEPT:
            _TOOL_LABELS[name] = label
    return call, label


def _strings(value: object) -> list[str]:
    """Strings of a list read back from a record (anything else is ignored: records are read defensively)."""
    if not isinstance(value, list | tuple):
        return []
    return [item for item in value if isinstance(item, str)]  # pyright: ignore[reportUnknownVariableType]


def _said_lines(text: str) -> list[str]:
    """The lines of *text*, normalized as `_fact_key` normalizes a fact."""
    return [key for line in text.splitlines() if (key := _fact_key(line))]


def _fact_key(text: str) -> str:
    """*text* with its whitespace collapsed and a leading list bullet removed ('' when too short to match)."""
    key = ' '.join(text.split())
    if key.startswith(('- ', '* ')):
        key = key[2:]
    return key if len(key) >= SAID_MIN_CHARS else ''


def _newest_call(view: ConversationView) -> str | None:
    for exchange in reversed(view.exchanges):
        if exchange.kind != 'tools' or exchange.unfinished:
            continue
        for message in reversed(view.messages_of(exchange)):
            for part in reversed(message.parts):
                if isinstance(part, ToolCallPart):
                    return clip(f'{part.tool_name}({clean_text(args_text(part.args))})', 200)
    return None


def fold(
    sections: dict[str, list[str]], omitted: dict[str, int], budget: int
) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Sections whose rendering fits *budget* characters: oldest entries become counts, largest section first.

    Deterministic: the same sections and budget always fold the same way. Instruction changes are folded
    only when nothing else is left to fold.
    """
    folded, counts, _ = fold_with_digests(sections, omitted, budget)
    return folded, counts


FIXED_LINES = 900
"""What a fold leaves of its budget for titles, omission notes, digests, header and the progress lines (at most)."""


def _folds_found(others: dict[str, list[str]], newest: list[list[str]], room: int) -> bool:
    """Whether a fold of *others* and the facts read so far (*newest*: per result, newest first) into *room* takes
    the oldest fact: then it takes every fact of an older result too (a longer Found is folded at least as far, and
    its older entries first), and so does a fold into less room or of more entries (a rewrite's, a smaller budget's).
    """
    found = [line for lines in reversed(newest) for line in lines]
    sections = {**others, 'found': found}
    return _fold_cuts(sections, {name: _size(lines) for name, lines in sections.items()}, room)['found'] > 0


DIGEST_LABELS = 6
"""Labels a section's digest names (the most frequent); the rest are counted together as `other`."""


def fold_with_digests(
    sections: dict[str, list[str]],
    omitted: dict[str, int],
    budget: int,
    digests: dict[str, dict[str, int]] | None = None,
    *,
    room: int | None = None,
    labels: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[dict[str, list[str]], dict[str, int], dict[str, dict[str, int]]]:
    """`fold`, also counting the folded entries per label (the tool, or who spoke) into one-line digests.

    The newest entries stay verbatim; the older ones become counts in *digests*, added to those earlier
    checkpoints carried. Deterministic, like `fold`. *labels*, when given, are each section's entries counted
    per label (`label_counts`, exactly): a section folded for the most part is then counted from the entries
    it keeps (the result is the same).
    """
    omitted = dict(omitted)
    digests = {name: dict((digests or {}).get(name) or {}) for name in sections}
    sizes = {name: _size(lines) for name, lines in sections.items()}
    room = max(budget - FIXED_LINES, 0) if room is None else max(budget - room, 0)
    cuts = _fold_cuts(sections, sizes, room)
    for name, cut in cuts.items():
        if not cut:
            continue
        omitted[name] = omitted.get(name, 0) + cut
        counts = digests[name]
        lines = sections[name]
        total = labels.get(name) if labels is not None else None
        if total is not None and 2 * cut > len(lines):
            folded = Counter(total)
            folded.subtract(label_counts(lines[cut:]))
        else:
            folded = label_counts(lines[:cut])
        for label, count in folded.items():
            if count > 0:
                counts[label] = counts.get(label, 0) + count
    folded = {name: lines[cuts[name] :] if cuts[name] else list(lines) for name, lines in sections.items()}
    return folded, omitted, {name: _top(counts) for name, counts in digests.items()}


def _fold_cuts(sections: dict[str, list[str]], sizes: dict[str, int], room: int) -> dict[str, int]:
    """How many of each section's oldest entries to fold so the entries fit *room*, counted, not simulated.

    The rule is a greedy one entry at a time: the largest section (ties: the first in `_FOLD_ORDER`) gives its
    oldest entry, until the entries fit; instruction changes go only when nothing else is left. The sizes a
    section has before each of its folds decrease, so the greedy folds, in decreasing order of those sizes, a
    prefix of all of them: every fold at a size above some level *v*, then those at exactly *v* in section
    order. *v* is found by bisection on the sections' prefix sums, so the cost is a few bisections per section
    rather than a step per folded entry.

    An entry whose section, from it to the end, is larger than *room* on its own is folded whatever the other
    sections hold (the greedy folds every such entry before any other); those are counted from the newest end,
    so the prefix sums cover only the entries that may stay (a rewrite at 50k messages folds tens of thousands).
    """
    total = sum(sizes.values())
    if total <= room:
        return dict.fromkeys(sections, 0)
    certain: dict[str, int] = {}
    for name in _FOLD_ORDER:
        lines = sections.get(name)
        if lines is None:
            continue
        kept, at = 0, len(lines)
        while at and kept + len(lines[at - 1]) + 3 <= room:
            at -= 1
            kept += len(lines[at]) + 3
        certain[name] = at
    if not any(certain.values()):
        return _fold_rest(sections, sizes, room)
    rest = {name: lines[certain.get(name, 0) :] for name, lines in sections.items()}
    cuts = _fold_rest(rest, {name: sum(map(len, lines)) + 3 * len(lines) for name, lines in rest.items()}, room)
    return {name: cut + certain.get(name, 0) for name, cut in cuts.items()}


def _fold_rest(sections: dict[str, list[str]], sizes: dict[str, int], room: int) -> dict[str, int]:
    """`_fold_cuts` by bisection on the levels, over every entry of *sections*."""
    cuts = dict.fromkeys(sections, 0)
    total = sum(sizes.values())
    if total <= room:
        return cuts
    order = [name for name in _FOLD_ORDER if name in sections]
    # costs[name][k]: what folding the k oldest entries saves; the section's size before its k-th fold is
    # sizes[name] - costs[name][k].
    costs = {name: [0, *accumulate(map(operator.add, map(len, sections[name]), repeat(3)))] for name in order}

    def folds_at_least(level: int) -> dict[str, int]:
        """Per section, how many of its folds happen at a size of at least *level*."""
        return {name: min(bisect_right(costs[name], sizes[name] - level), len(sections[name])) for name in order}

    def fits(level: int) -> bool:
        return total - sum(costs[name][count] for name, count in folds_at_least(level).items()) <= room

    if not fits(0):
        # Everything else folded still does not fit: instruction changes go too, oldest first.
        cuts.update({name: len(sections[name]) for name in order})
        left = total - sum(costs[name][-1] for name in order)
        instructions = sections.get('instructions') or []
        while left > room and cuts.get('instructions', 0) < len(instructions):
            left -= len(instructions[cuts['instructions']]) + 3
            cuts['instructions'] += 1
        return cuts
    low, high = 0, max(sizes[name] for name in order)  # fits(low) holds; find the largest level that fits
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    counts = folds_at_least(low + 1)  # every fold above the level; then those at the level, in section order
    left = total - sum(costs[name][count] for name, count in counts.items())
    for name in order:
        count = counts[name]
        if left <= room:
            break
        if count < len(sections[name]) and sizes[name] - costs[name][count] == low:
            left -= costs[name][count + 1] - costs[name][count]
            counts[name] = count + 1
    cuts.update(counts)
    return cuts


def label_counts(entries: Sequence[str]) -> Counter[str]:
    """*entries* counted per label, as a fold counts them into its digest (the tool called, or who spoke)."""
    counts = Counter[str]()
    for head, count in Counter(map(_head, entries)).items():
        counts[_label_of(head)] += count
    return counts


def _head(entry: str) -> str:
    """An entry's text before its first `(` or `:` (the tool it called, or who spoke)."""
    match = _HEAD.match(entry)
    assert match is not None  # the pattern matches any text, if only its empty start
    return match.group()


_HEAD = re.compile(r'[^(:]*')
"""What `_head` keeps: one scan in C per folded entry (a rewrite at 50k messages folds tens of thousands)."""


def _label_of(head: str) -> str:
    """What a folded entry is counted under, from its `_head`."""
    head = head.strip()
    return clip(head, 40) if head else 'other'


def _top(counts: dict[str, int]) -> dict[str, int]:
    """At most `DIGEST_LABELS` labels (the most frequent, ties by name), the rest summed under `other`."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    if len(ordered) <= DIGEST_LABELS:
        return dict(ordered)
    kept = dict(ordered[: DIGEST_LABELS - 1])
    kept['other'] = kept.get('other', 0) + sum(count for _, count in ordered[DIGEST_LABELS - 1 :])
    return kept


def _entries_size(sections: dict[str, list[str]]) -> int:
    return sum(map(_size, sections.values()))


class _Lines(list[str]):
    """A section's entries with their `_size` known: a copy of a reading's 25k entries is not measured again."""

    __slots__ = ('size',)

    def __init__(self, lines: Sequence[str], size: int) -> None:
        super().__init__(lines)
        self.size = size


def _size(lines: list[str]) -> int:
    """What *lines* take in a checkpoint, besides titles: each entry and its `- ` and line end."""
    return lines.size if type(lines) is _Lines else sum(map(len, lines)) + 3 * len(lines)


def render_checkpoint(
    sections: dict[str, list[str]],
    omitted: dict[str, int],
    *,
    progress: str = '',
    digests: dict[str, dict[str, int]] | None = None,
    header: str = CHECKPOINT_HEADER,
    unread: int = 0,
) -> str:
    """The default checkpoint text (*header* first: `CONTINUED_HEADER` for one appended after earlier ones).

    A fact found in a call's result is listed under that call when the call is listed too (the call is not
    repeated on every fact); the others stay under Found with their call. A continued checkpoint uses short
    titles: the first one says what each section holds. *unread* counts the completed calls whose results were
    not read for facts (those before the newest results, whose facts filled the room): Found says so first.
    """
    titles = _CONTINUED_TITLES if header == CONTINUED_HEADER else _TITLES
    grouped, loose = _group_facts(sections)
    lines = [header]
    for name in SECTIONS:
        entries = loose if name == 'found' else sections.get(name) or []
        folded = omitted.get(name, 0)
        skipped = unread if name == 'found' else 0
        if not entries and not folded and not skipped:
            continue
        lines.append(f'{titles[name]}:')
        # Results whose facts were not read, then entries folded: one line, which takes room from the entries.
        not_read = (
            f'facts of {skipped:,} earlier result' + ('s' if skipped != 1 else '') + ' not read' if skipped else ''
        )
        digest = (digests or {}).get(name) or {}
        if folded:
            counted = ': ' + ', '.join(f'{label} ×{count:,}' for label, count in digest.items()) if digest else ''
            before = f'{not_read}; ' if not_read else ''
            lines.append(
                f'- ({before}{folded:,} earlier entries folded to fit{counted}; recall or re-read for their details)'
            )
        elif not_read:
            lines.append(f'- ({not_read}: recall or re-read for their details)')
        for entry in entries:
            lines.append(f'- {entry}')
            if name != 'found' and (facts := grouped.pop(_call_of(entry), None)):
                lines.extend(f'  - {fact}' for fact in facts)
    if progress:
        lines.append(progress)
    return '\n'.join(lines)


def _call_of(entry: str) -> str:
    """The call a Read or Changed entry (`call → outcome, N chars`) names."""
    return entry.rpartition(' → ')[0]


def _group_facts(sections: dict[str, list[str]]) -> tuple[dict[str, list[str]], list[str]]:
    """The Found entries by the listed call they come from (`call: fact`), and those of calls not listed."""
    calls = {_call_of(entry) for name in ('read', 'changed') for entry in sections.get(name) or ()}
    grouped: dict[str, list[str]] = {}
    loose: list[str] = []
    for entry in sections.get('found') or ():
        at = entry.find('): ')
        # Arguments may hold '): ' themselves: the call is the shortest prefix that is a listed call.
        while at != -1 and entry[: at + 1] not in calls:
            at = entry.find('): ', at + 1)
        if at == -1:
            loose.append(entry)
        else:
            grouped.setdefault(entry[: at + 1], []).append(entry[at + 3 :])
    return grouped, loose
