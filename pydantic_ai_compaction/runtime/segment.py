"""Segmentation: a message list becomes an ordered list of exchanges with stable ids.

An exchange is the smallest unit that can be dropped without breaking a provider's rules: a
response together with every part of a later request that answers its tool calls (parallel calls
and retries included), a user turn, an earlier compaction boundary, or a restatement. Links between
a call and its return form a graph; any exchange whose span covers another's start is merged with
it, so a deferred return that arrives several messages later keeps the whole span together.

Requests are split at part level because pydantic-ai merges consecutive requests when a history
is passed to a new run: a request can then hold tool returns for one exchange, a boundary, and a
user prompt for the next.

Segmentations are remembered by object identity, so each request costs about the new messages, and so
are the token estimates of messages whose text must be converted to be measured (a message of plain
strings is measured again: reading its lengths costs less than remembering them). A history is
recognised by its message objects, in order: a message swapped for another object (`dataclasses.replace`
with new parts, say) is seen, and the history is segmented again from the start. What a message holds is
not read again up to where the last exchange starts (the history's tail from there is always read again,
which is where pydantic-ai adds parts to the current step's request), so sent messages and parts must not
be changed in place (`message.parts = ...`, `message.parts[0] = ...`, `part.content = ...`): replace them
(`dataclasses.replace`), as pydantic-ai asks of history processors. A message changed in place keeps its
old exchanges and estimate until the message object is replaced. Token estimates are remembered per
message object and its part objects, so a part replaced in a message is measured again.
"""

from __future__ import annotations

import copy
import functools
import operator
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice, repeat
from typing import Any, cast

from pydantic_ai.messages import (
    CompactionPart,
    InstructionBaselinePart,
    InstructionDeltaPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelSettingsDeltaPart,
    RetryFeedbackPart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_compaction.protocols.metadata import (
    exchange_stamp,
    is_restatement_mark,
    record_from_metadata,
)
from pydantic_ai_compaction.protocols.types import Exchange, ExchangeKind, PartRef
from pydantic_ai_compaction.runtime.memo import IdentityMemo, address_arrays
from pydantic_ai_compaction.runtime.pairing import answers_call as _answers_call
from pydantic_ai_compaction.runtime.pins import is_pinned
from pydantic_ai_compaction.runtime.tokens import (
    CHARS_PER_TOKEN,
    estimate_token_count,
    measure_message_text,
    tool_return_text,
    value_text,
)

ProtectPredicate = Callable[[Exchange, list[ModelMessage]], bool]
"""User hook: return `True` to protect an exchange (it receives the exchange and its messages)."""

_ID_PATTERN = re.compile(r'^g(\d{1,12})$')
"""Exchange ids: `g` and up to twelve digits. Longer numbers come from no history this library wrote, and
converting thousands of digits fails (CPython's limit) or inflates every later id."""


def exchange_number(exchange_id: str) -> int | None:
    """The number in an exchange id (`g12` → 12), or `None` when it is not one."""
    match = _ID_PATTERN.match(exchange_id)
    return int(match.group(1)) if match else None


def our_record(part: object) -> dict[str, Any] | None:
    """The boundary record this library stored on a `CompactionPart` (every field type-checked), or `None`."""
    return record_from_metadata(part.metadata) if isinstance(part, CompactionPart) else None


def compactions_so_far(messages: Sequence[ModelMessage]) -> int:
    """Compactions this library made in the conversation, counting those whose boundary was later replaced.

    Scans backwards: the newest record carries the running count, so the scan usually stops early.
    """
    without_sequence = 0
    for message in reversed(messages):
        for part in reversed(message.parts):
            record = our_record(part)
            if record is None:
                continue
            sequence = record.get('sequence')
            if isinstance(sequence, int):
                return sequence + without_sequence
            without_sequence += 1
    return without_sequence


def compactions_recorded(records: Sequence[dict[str, Any]]) -> int:
    """`compactions_so_far` from a history's boundary records, oldest first (`ConversationView.records()`)."""
    without_sequence = 0
    for record in reversed(records):
        sequence = record.get('sequence')
        if isinstance(sequence, int):
            return sequence + without_sequence
        without_sequence += 1
    return without_sequence


def is_restatement(part: object) -> bool:
    """Whether *part* is a restatement `Reassert` wrote."""
    if not isinstance(part, UserPromptPart) or isinstance(part.content, str):
        return False
    return any(isinstance(item, TextContent) and is_restatement_mark(item.metadata) for item in part.content)


def message_stamp(message: ModelMessage) -> str | None:
    """The exchange id stamped on a message's metadata, if any."""
    return exchange_stamp(message.metadata)


class _Unit:
    """The parts of one exchange in the making.

    `parts` maps a message index to part indices. Both are only ever added in ascending order (the builder
    walks the history forward and a unit only takes parts of the message being read), so a unit's first
    and last entries are its start and end (an empty request's entry is an empty list: part -1), and units
    are created in the order of their starts.
    """

    __slots__ = ('kind', 'parts', 'stamp')

    def __init__(self, kind: ExchangeKind, stamp: str | None = None) -> None:
        self.kind: ExchangeKind = kind
        self.parts: dict[int, list[int]] = {}
        """message index → part indices."""
        self.stamp = stamp

    def add(self, message_index: int, part_index: int) -> None:
        held = self.parts.get(message_index)
        if held is None:
            self.parts[message_index] = [part_index]
        else:
            held.append(part_index)


@dataclass(frozen=True)
class ConversationView:
    """A segmented history: what strategies read and the runtime validates against."""

    messages: tuple[ModelMessage, ...]
    """The history, unchanged."""

    exchanges: tuple[Exchange, ...]
    """Its exchanges, in order."""

    next_id: int
    """The next exchange number to hand out."""

    text_chars: int | None = field(default=None, compare=False)
    """Characters of every text the messages are sent with, instructions excluded (what `estimate_token_count`
    sums before adding the latest instructions), carried from the last segmentation so a compaction's estimate
    of the whole history costs only the new messages; `None` when unknown or when a message holds an
    instruction change (its text depends on the messages around it: estimate the history instead)."""

    instructions: str | None = field(default=None, compare=False)
    """The instructions the next request is sent with (the newest non-empty set a request holds), carried like
    `text_chars` and read only where that is known."""

    copies: tuple[tuple[Exchange, ...], tuple[int, ...]] | None = field(
        default=None, init=False, compare=False, repr=False
    )
    """Segmentation's note for what is computed from views: its `exchanges` tuple and the positions in it of the
    exchanges it marked on copies (the current turn, those in progress). Every other exchange is the object
    segmentation remembers for the messages it covers, placed only after the same objects: two such views
    holding the same object at a position hold the same objects (or these copies) before it. `None`, or a
    tuple that is not `exchanges`, when unknown. Set by segmentation only: a view built or copied
    (`dataclasses.replace`) has none, since a wrong note would mislead the validator's shared prefix."""

    @property
    def estimated_tokens(self) -> int:
        """`estimate_token_count(self.messages)`, from `text_chars` when known (always the same number)."""
        if self.text_chars is None:
            return estimate_token_count(self.messages)
        return (self.text_chars + len(self.instructions or '')) // CHARS_PER_TOKEN

    @functools.cached_property
    def by_id(self) -> dict[str, Exchange]:
        """Exchanges keyed by id (built when first read: a request that reads none costs no dict of the history)."""
        exchanges = self.exchanges
        return dict(zip(map(_ID, exchanges), exchanges, strict=True))

    @property
    def ids(self) -> tuple[str, ...]:
        """Exchange ids in order."""
        return tuple(exchange.id for exchange in self.exchanges)

    @property
    def unfinished(self) -> Exchange | None:
        """The exchange in progress, if the history has one."""
        last = self.exchanges[-1] if self.exchanges else None
        return last if last is not None and last.unfinished else None

    @property
    def tokens(self) -> int:
        """Sum of the exchanges' estimated tokens (instructions and tool definitions excluded)."""
        return sum(exchange.tokens for exchange in self.exchanges)

    def messages_of(self, exchange: Exchange) -> list[ModelMessage]:
        """The messages (or message fragments) that make up *exchange*, in order."""
        return [fragment(self.messages, ref) for ref in exchange.refs]

    def records(self) -> list[dict[str, Any]]:
        """Boundary records this library wrote, oldest first.

        Only boundary exchanges hold a `CompactionPart` (segmentation makes any exchange with one a
        boundary), so only their messages are read, not the whole history.
        """
        found: list[dict[str, Any]] = []
        seen: set[int] = set()
        for exchange in self.exchanges:
            if exchange.kind != 'boundary':
                continue
            for index, _ in exchange.refs:
                if index in seen:
                    continue  # a request split between two boundary exchanges is read once, whole
                seen.add(index)
                for part in self.messages[index].parts:
                    record = our_record(part)
                    if record is not None:
                        found.append(record)
        return found


def settled_prefix(exchanges: Sequence[Exchange]) -> int:
    """How many leading *exchanges* the next segmentation of a longer history reuses as the same objects.

    Segmentation's own cut: everything before the last exchange, moved back past those sharing its first message.
    A result carried forward from these exchanges (checked by identity with `same_prefix`) is then reused.
    """
    if not exchanges:
        return 0
    settled = len(exchanges) - 1
    cut = exchanges[settled].refs[0][0]
    while settled > 0 and exchanges[settled - 1].refs[-1][0] >= cut:
        settled -= 1
        cut = exchanges[settled].refs[0][0]
    return settled


def same_prefix(before: Sequence[Exchange], exchanges: Sequence[Exchange], ignored: Callable[[Exchange], bool]) -> bool:
    """Whether *exchanges* start with *before*: the same objects, except where both are *ignored*.

    An exchange object is only ever reused by a segmentation of the same messages (same objects holding the same
    parts), so what was read from it still holds. One that a computation skips (*ignored*) may be a new object
    (the current turn is marked on a copy) without changing what it gives.
    """
    count = len(before)
    if len(exchanges) < count:
        return False
    head = exchanges[:count]
    if all(map(operator.is_, before, head)):
        return True
    return all(old is new or (ignored(old) and ignored(new)) for old, new in zip(before, head, strict=True))


def fragment(messages: Sequence[ModelMessage], ref: PartRef) -> ModelMessage:
    """The message a ref points at, narrowed to its parts when the ref names some."""
    from dataclasses import replace

    index, parts = ref
    message = messages[index]
    if parts is None:
        return message
    if isinstance(message, ModelRequest):
        return replace(message, parts=[message.parts[p] for p in parts])
    return replace(message, parts=[message.parts[p] for p in parts])


def segment(
    messages: Sequence[ModelMessage], protect: ProtectPredicate | None = None, *, prompt: object = None
) -> ConversationView:
    """Split *messages* into exchanges with stable ids.

    Incremental: the exchanges of a history segmented before (the same message objects, in the same
    order, up to where its last exchange started) are reused, and only what follows is segmented again,
    so a request that adds a few messages costs O(new messages). A history that was replaced (a
    compaction rewrote it, another history was passed) or whose new messages reach back into the reused
    part (a deferred return, a higher id stamp) is segmented from the start; the result is always the
    one `segment_fresh` gives.

    Args:
        messages: The history, oldest first.
        protect: Optional user predicate; exchanges it returns `True` for are always kept.
        prompt: The run's user prompt (`RunContext.prompt`), when known: a user part with this content is
            the user speaking even where it follows tool returns in the same request.
    """
    history = tuple(messages)
    reused = _reusable(history, prompt)
    # A history never seen: its leading run of plain tool steps is read by `_tool_loop_state`, without the general
    # builder's units, and the rest is segmented from there as a history extended since its last request is.
    state = reused if reused is not None else _tool_loop_state(history, prompt)
    raw: _Raw | None = None
    if state is not None:
        try:
            raw = _segment_raw(history, prompt, state)
        except _Stale:
            raw = None
    if raw is None:
        raw = _segment_raw(history, prompt, None)
    if raw.state is not None and raw.state is not reused:
        _remember(history, raw.state)
    return _finish(history, raw, protect)


def segment_fresh(
    messages: Sequence[ModelMessage], protect: ProtectPredicate | None = None, *, prompt: object = None
) -> ConversationView:
    """`segment` from the start, reusing nothing remembered (the reference the incremental path must equal)."""
    history = tuple(messages)
    return _finish(history, _segment_raw(history, prompt, None), protect)


class _Stale(Exception):
    """The new messages reach back into the reused exchanges: segment from the start."""


_FROZEN = -1
"""A builder position standing for a unit before the cut (reused as is, so it must not change)."""


@dataclass(frozen=True)
class _State:
    """A segmentation's reusable part: every exchange before the start of its last one (the cut).

    Kept in `_STATES` under a weak reference to the history's first message. It holds the messages between the
    first and the last before the cut strongly: comparing them with the next history is then one comparison of
    their addresses in C (`holds`; a weak reference would cost a call per message, which made this check the
    largest cost of a request on a long history). The last message before the cut is held weakly, and the state
    leaves `_STATES` when it is collected: a history nobody holds any more (a finished run) is freed with it, even
    when its first message lives on (a module-level opening request shared by every run). The states of one history
    share their lists (`_Shared`), which hold the newest state's messages, so the older states leave with the
    newest one (`_leave`). When the newest state's own last message lives on elsewhere (a canned reply kept at
    module level, answered at once), the history stays until newer states push it out.
    """

    cut: int
    """Messages before this index are reused."""

    first: weakref.ref[ModelMessage]
    """The history's first message (its key in `_STATES`, so never held strongly)."""

    last: weakref.ref[ModelMessage]
    """The last message before the cut (weak: the state is forgotten when it goes)."""

    shared: _Shared
    """The lists this state reads the first `length` messages and `count` exchanges of (shared with the states
    it extends and that extend it)."""

    length: int
    """Its messages: those after the first one and before the last before the cut (`shared.messages[:length]`)."""

    count: int
    """Its exchanges: those before the cut, before the final passes (`shared.exchanges[:count]`)."""

    prompt: object
    """The prompt the segmentation was made with (it decides which user parts are tool output); a list is copied
    (`__post_init__`)."""

    assigned_from: int
    """The highest number in the whole history when their ids were handed out."""

    highest_before_cut: int
    """The highest number stamped or recorded before the cut."""

    counter: int
    """The id counter after the last of them."""

    chars: int | None
    """Characters of the messages before the cut, as `estimate_token_count` measures them without instructions
    (`None`: one holds an instruction change, whose text depends on the messages around it)."""

    instructions: str | None
    """The newest non-empty instructions a request before the cut holds (`None`: none does)."""

    top_number: int
    """The highest exchange number among them."""

    last_turn: int | None
    """Index of the latest `turn` or `opening` exchange among them."""

    response: bool
    """Whether a response precedes the cut (a later return with an unknown call id may belong to it)."""

    retrying: bool
    """Whether the unit a retry answer would join lies before the cut."""

    opening: bool
    """Whether the opening exchange lies before the cut."""

    def __post_init__(self) -> None:
        # A prompt of several parts is a list, which its owner may change in place between two segmentations
        # (a direct `segment` caller reusing it): the same object would then pass for the same prompt. A copy is
        # compared by `==` instead, a comparison of addresses while its items are the same objects.
        prompt = self.prompt
        if isinstance(prompt, list):
            object.__setattr__(self, 'prompt', copy.copy(cast('list[object]', prompt)))

    def matches(self, history: tuple[ModelMessage, ...], prompt: object) -> bool:
        """Whether *history* starts with the same message objects and was segmented with the same prompt.

        An identity test in C (`holds`). Not `==`: an equal copy can read differently
        (`0 == False`, `1 == 1.0`, a dict's key order, a datetime in another zone), and the exchanges and
        estimates reused here would then be the old objects'. What a message or a part holds is not read: sent
        messages and parts are never changed in place (see the module docstring); the messages from the cut on,
        where pydantic-ai adds parts to the request of the current step, are always read again.
        """
        cut = self.cut
        if len(history) <= cut or not _same_prompt(self.prompt, prompt) or self.first() is not history[0]:
            return False
        if self.last() is not history[cut - 1]:
            return False
        return self.holds(history, _same_addresses())

    def holds(self, history: tuple[ModelMessage, ...], same: _SameAddresses | None) -> bool:
        """Whether *history*'s messages after the first are its messages (`shared.messages[:length]`), by identity.

        *history* must be longer than the cut. With *same*, the two arrays of addresses are compared at once in C
        (a fraction of the identity pass's cost per message, which was most of what a request on a long history
        paid for its length); both sides hold their messages, so no address can have been reused by another
        object, and equal addresses are the same objects.
        """
        # Under the lock that extending the lists takes: a list that grows moves its array, and the address read
        # before the comparison must still be the array's. Never waited for: while it is held (another thread
        # extending, or a finalizer run in the middle of `_extended` that segments) the pass below is as exact.
        if same is not None and type(history) is tuple and _EXTENDING.acquire(blocking=False):
            try:
                listed = self.shared.messages
                # The lists only grow, and the history is longer than the cut: no read past either end.
                return len(listed) >= self.length and same(history, listed, self.length)
            finally:
                _EXTENDING.release()
        # Compared in place: a slice of either side would touch every message once more (and free them again).
        after_first = iter(history)
        next(after_first)
        held = self.shared.messages
        # The newest state reads the whole list (an `islice` costs a step per message): should another thread
        # extend it meanwhile, the pass reads further along the history, which only ever makes it decline.
        mine = held if len(held) == self.length else islice(held, self.length)
        return all(map(operator.is_, mine, after_first))

    def is_tip(self) -> bool:
        """Whether its lists end where it does (the next state may then extend them in place)."""
        return len(self.shared.messages) == self.length and len(self.shared.exchanges) == self.count

    def exchanges(self) -> list[Exchange]:
        """Its exchanges (a copy)."""
        return self.shared.exchanges[: self.count]

    def known(self, exchange_id: str) -> bool:
        """Whether one of its exchanges has this id."""
        return self.shared.positions.get(exchange_id, self.count) < self.count


class _Shared:
    """What the states of one history have in common, held once: each state reads its own prefix of them.

    Segmentation moves its cut forward on every request that adds a step, and the new state's messages and
    exchanges are the old state's followed by a few more. Copying them into each state cost a copy (and its
    release) of the whole history per request; instead the state that ends where these lists end (the tip)
    appends to them, and any other state that is extended (a conversation branching from an earlier point
    of another one) gets lists of its own. The lists only ever grow, so a prefix a state reads never changes.
    """

    __slots__ = ('exchanges', 'messages', 'positions')

    def __init__(self, messages: list[ModelMessage], exchanges: list[Exchange]) -> None:
        self.messages = messages
        """Messages after the first one, by identity (held)."""
        self.exchanges: list[Exchange] = list(exchanges)
        """Exchanges, before the final passes."""
        count = len(exchanges)
        # Built from the end, so that an id held twice keeps its first position, as `extend` does (in C: a
        # history never seen fills it with every exchange at once).
        self.positions: dict[str, int] = dict(zip(map(_ID, reversed(exchanges)), range(count - 1, -1, -1), strict=True))
        """Where each id first occurs in `exchanges` (whether a state's prefix holds it)."""

    def extend(self, exchanges: Sequence[Exchange]) -> None:
        """Append *exchanges*."""
        positions, position = self.positions, len(self.exchanges)
        for exchange in exchanges:
            positions.setdefault(exchange.id, position)
            position += 1
        self.exchanges.extend(exchanges)


_EXTENDING = threading.Lock()
"""Held while a state's lists are checked for being its own and extended in place (runs in other threads
segment too: two extending the same lists at once would interleave), and while `holds` compares a list's array.
Never waited for: a finalizer that segments may run while its own thread holds it."""


_STATES: IdentityMemo[list[_State]] = IdentityMemo()
"""Reusable segmentations by the identity of their history's first message (weak: dropped with it)."""

_STATES_KEPT = 4
"""Segmentations remembered per first message (histories sharing an opening object share the list)."""


def _same_prompt(a: object, b: object) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an exotic prompt object: never reuse on a doubt
        return False


def _reusable(history: tuple[ModelMessage, ...], prompt: object) -> _State | None:
    if not history:
        return None
    states = _STATES.get((history[0],))
    for state in states or ():
        if state.matches(history, prompt):
            return state
    return None


def _forget_state(first: weakref.ref[ModelMessage], last: weakref.ref[ModelMessage]) -> None:
    """Drop the state remembered under *first* whose last message before the cut was collected (*last*)."""
    opening = first()
    states = _STATES.get((opening,)) if opening is not None else None
    if states is not None:
        gone = [state for state in states if state.last is last]
        states[:] = [state for state in states if state.last is not last]
        _leave(states, gone)


def _leave(states: list[_State], gone: Sequence[_State]) -> None:
    """The states that share their lists with a tip that left *states* leave with it.

    Their histories are prefixes of the tip's, and the lists now hold the tip's messages: an older state would
    keep its own last message alive through them, and with it the whole history it was meant to free.
    """
    tips = {id(state.shared) for state in gone if state.is_tip()}
    tips.difference_update(id(state.shared) for state in states if state.is_tip())
    if tips:
        states[:] = [state for state in states if id(state.shared) not in tips]


def _remember(history: tuple[ModelMessage, ...], state: _State) -> None:
    states = _STATES.get((history[0],))
    if states is None:
        states = _STATES.put((history[0],), [])
    before = list(states)
    states[:] = [state, *(kept for kept in before if not _same_messages(kept, state))][:_STATES_KEPT]
    _leave(states, [old for old in before if not any(old is other for other in states)])


def _same_messages(a: _State, b: _State) -> bool:
    """Whether two states hold the same messages before the same cut."""
    if a.cut != b.cut:
        return False
    if a.shared is b.shared:
        return True
    return all(map(operator.is_, islice(a.shared.messages, a.length), islice(b.shared.messages, b.length)))


@dataclass
class _Raw:
    """Exchanges before the final passes, with what `_finish` and the memo need."""

    exchanges: list[Exchange]
    highest: int
    """The highest exchange number handed out or seen (the next id is one more)."""
    last_turn: int | None
    state: _State | None
    tail_start: int
    """Index in `exchanges` of the first exchange segmented in this call."""
    chars: int | None
    """Characters of the whole history without instructions (`ConversationView.text_chars`)."""
    instructions: str | None
    """The newest non-empty instructions in the history (`ConversationView.instructions`)."""


def _segment_raw(history: tuple[ModelMessage, ...], prompt: object, state: _State | None) -> _Raw:
    start = state.cut if state is not None else 0
    units, snapshots, compacted, notable = _build_units(history, prompt, start=start, state=state)
    groups = _merge_linked(units)
    tail_highest, stamped, record_highest = _id_counter(history, units, compacted)
    stamped_numbers = {number for _, number in stamped}
    if state is not None:
        if max(state.highest_before_cut, tail_highest) != state.assigned_from:
            raise _Stale  # a higher stamp or record arrived (or left): earlier ids would be numbered differently
        next_number = state.counter
        assigned_from = state.assigned_from
        offset = state.count
    else:
        next_number = assigned_from = tail_highest
        offset = 0
    token_counts, sizes = _measure(history[start:])

    exchanges: list[Exchange] = []
    # Only a stamped group reads the ids handed out before it: a history without stamps keeps no set of them.
    used: set[str] | None = set() if any(group[0].stamp is not None for group in groups) else None
    counters: list[int] = []
    starts: list[int] = []
    numbers: list[int] = []
    turns: list[int] = []
    for group_index, group in enumerate(groups, start=offset):
        first = group[0]
        kind: ExchangeKind = first.kind
        if len(group) == 1:
            merged = first.parts  # built in order, one entry per message
        else:
            merged = _merge_parts(group)
            if any(unit.kind == 'boundary' for unit in group):
                kind = 'boundary'
        stamp = first.stamp
        if group_index == 0:
            exchange_id, number = 'g0', 0
        elif (
            stamp is not None
            and used is not None
            and stamp not in used
            and (state is None or not state.known(stamp))
            and (number := exchange_number(stamp)) is not None
        ):
            exchange_id = stamp
        else:
            next_number += 1
            if stamped_numbers:
                while next_number in stamped_numbers:
                    next_number += 1
            exchange_id, number = f'g{next_number}', next_number
        if used is not None:
            used.add(exchange_id)
        counters.append(next_number)
        numbers.append(number)
        refs: list[PartRef] = []
        tokens = 0
        check = kind == 'opening' or kind == 'boundary' or group_index == 0
        for index, parts in merged.items():
            if index in notable:
                check = True
            if len(parts) == len(history[index].parts):
                refs.append((index, None))
                tokens += token_counts[index - start]
            else:
                refs.append((index, tuple(parts)))
                tokens += _share(history, index, parts, token_counts[index - start])
        starts.append(refs[0][0])
        if kind == 'opening' or (kind == 'turn' and not _only_bookkeeping(history, merged)):
            # A request part that records a state change (a tool made available as the run goes on) is a turn
            # exchange of its own, but not the user's: the turn being worked on is the one before it.
            turns.append(len(exchanges))
        # Responses hold no pin or state change: only an exchange with a request holding more than tool returns
        # (or one protected for its kind or place) needs a look at its parts.
        protected = _protection(kind, history, refs, group_index) if check else None
        exchanges.append(_exchange(exchange_id, kind, tuple(refs), tokens, protected))

    top = max([*numbers, next_number, 0])
    last_turn = offset + turns[-1] if turns else (state.last_turn if state is not None else None)
    if state is not None:
        top = max(top, state.top_number)
        all_exchanges = state.exchanges()
        all_exchanges.extend(exchanges)
    else:
        all_exchanges = exchanges

    # The newest request with instructions, read once from the end for the view and for the state below.
    earlier = state.instructions if state is not None else None
    newest = _newest_request_with_instructions(history, start, len(history))
    new_state = state
    # The cut: where the last exchange starts, moved back past any exchange that shares its first message
    # (a request can hold the returns of one exchange and the next user turn), so the messages before the
    # cut belong to the reused exchanges alone.
    frozen_count = len(exchanges) - 1
    cut = starts[-1] if exchanges else 0
    while frozen_count > 0 and exchanges[frozen_count - 1].refs[-1][0] >= cut:
        frozen_count -= 1
        cut = starts[frozen_count]
    added = history[max(start, 1) : cut]
    # A history holding its first message again would keep itself alive through its own memo entry.
    if frozen_count > 0 and cut > start and not any(map(operator.is_, added, repeat(history[0]))):
        frozen = exchanges[:frozen_count]
        before = snapshots[cut - start]
        shared = _extended(state, history, cut, frozen)
        frozen_turn = state.last_turn if state is not None else None
        for position in reversed(turns):
            if position < frozen_count:
                frozen_turn = offset + position
                break
        first = state.first if state is not None else weakref.ref(history[0])
        new_state = _State(
            cut=cut,
            first=first,
            last=weakref.ref(history[cut - 1], functools.partial(_forget_state, first)),
            shared=shared,
            length=max(cut - 2, 0),
            count=len(shared.exchanges),
            prompt=prompt,
            assigned_from=assigned_from,
            highest_before_cut=max(
                [
                    state.highest_before_cut if state is not None else 0,
                    *(number for index, number in stamped if index < cut),
                    *(number for index, number in record_highest if index < cut),
                ]
            ),
            counter=counters[frozen_count - 1],
            chars=_add_sizes(state.chars if state is not None else 0, sizes[: cut - start]),
            instructions=(
                newest[1]
                if newest is not None and newest[0] < cut
                else _newest_instructions(history, start, cut if newest is not None else start, earlier)
            ),
            top_number=max([state.top_number if state is not None else 0, *numbers[:frozen_count]]),
            last_turn=frozen_turn,
            response=before[0] is not None,
            retrying=before[1] is not None,
            opening=before[2] is not None,
        )
    return _Raw(
        exchanges=all_exchanges,
        highest=top,
        last_turn=last_turn,
        state=new_state,
        tail_start=offset,
        chars=_add_sizes(state.chars if state is not None else 0, sizes),
        instructions=newest[1] if newest is not None else earlier,
    )


def _tool_loop_state(history: tuple[ModelMessage, ...], prompt: object) -> _State | None:
    """The state `_segment_raw` leaves after reading the plain opening and tool steps *history* starts with, or `None`.

    A plain opening is a request of system prompts and string user prompts, without an exchange stamp; a plain tool
    step is a response without one holding only texts, thinking and at least one tool call, followed by a request
    holding only tool returns (not retries) to that response's calls (a request's stamp is read only for its user
    parts). Each step is then its own exchange, numbered in order,
    spanning both messages whole, protected by nothing: what the general builder gives them, read here without its
    units, snapshots and merges (most of the cost of a long tool loop never seen). The cut is put at the last such
    step's response, so that the rest (a request that also answers it with a user prompt, a deferred return, a stamp
    or a record anywhere after it) is segmented by `_segment_raw` from this state as for any extended history, which
    declines with `_Stale` wherever it must read the history from the start.
    """
    count = len(history)
    if count < 5:
        return None
    opening = history[0]
    if type(opening) is not ModelRequest or not opening.parts or (opening.metadata and message_stamp(opening)):
        return None
    prompts = 0
    for part in opening.parts:
        if not (type(part) is SystemPromptPart or (type(part) is UserPromptPart and type(part.content) is str)):
            return None
        prompts += type(part) is UserPromptPart
    if prompts > 1:
        return None  # a turn merged into the opening (`_build_units` reads it as a turn of its own)
    # Each plain message is measured as it is read (`_measure`'s figures, without a second pass over the history), and
    # each step's exchange is built as it is read: as `_exchange` builds it (the same object, its fields set in the
    # same order), without a call per step.
    memo = _TOKENS
    remembered = memo.entries
    tokens, chars = _measure((opening,))
    total = before_last = chars[0]
    newest = opening.instructions or None  # `_newest_instructions` of the messages read
    newest_before_last = newest
    new = _NEW
    opening_exchange = new(Exchange)
    fields = opening_exchange.__dict__
    fields['id'] = 'g0'
    fields['kind'] = 'opening'
    fields['refs'] = ((0, None),)
    fields['tokens'] = tokens[0]
    fields['protected'] = 'opening'
    fields['unfinished'] = False
    exchanges = [opening_exchange]
    add = exchanges.append
    index = 1
    while index + 1 < count:
        response = history[index]
        if type(response) is not ModelResponse or (response.metadata and message_stamp(response)):
            break
        calls: set[str] = set()
        size = 0
        structured = False  # arguments that are not text: converted only if the memo does not know the message
        for part in response.parts:
            if type(part) is ToolCallPart:
                calls.add(part.tool_call_id)
                # `measure_message_text`'s reading of a call: its name and its arguments' text.
                args = part.args
                if isinstance(args, str):
                    size += len(part.tool_name) + len(args)
                else:
                    size += len(part.tool_name)
                    structured = True
            elif type(part) is TextPart:
                size += len(part.content)
            elif type(part) is ThinkingPart:
                size += len(part.content or '')
            else:
                calls.clear()
                break
        if not calls:
            break
        request = history[index + 1]
        if type(request) is not ModelRequest or not request.parts:
            break
        returned = 0
        structured_results = False
        for part in request.parts:
            if type(part) is not ToolReturnPart or part.tool_call_id not in calls or part.outcome == 'retried':
                break
            content = part.content
            if type(content) is str:
                returned += len(content)
            else:
                structured_results = True
        else:
            # As `_measure` reads them: a remembered estimate first, a measured one remembered past a threshold.
            before_last = total
            if id(response) in remembered and (entry := memo.entry(response)) is not None:
                step_tokens = entry[2]
                total = None if total is None or entry[3] is None else total + entry[3]
            else:
                converted = 0
                if structured:
                    for part in response.parts:
                        if type(part) is ToolCallPart and not isinstance(part.args, str):
                            converted += len(value_text(part.args))
                    size += converted
                step_tokens = max(size // CHARS_PER_TOKEN, response.usage.output_tokens)
                if converted >= _REMEMBER_CONVERTED:
                    memo.put(response, step_tokens, size)
                total = None if total is None else total + size
            if id(request) in remembered and (entry := memo.entry(request)) is not None:
                step_tokens += entry[2]
                total = None if total is None or entry[3] is None else total + entry[3]
            else:
                returned_converted = 0
                if structured_results:
                    for part in cast('list[ToolReturnPart]', request.parts):  # all tool returns: checked above
                        if type(part.content) is not str:
                            returned_converted += len(tool_return_text(part))
                    returned += returned_converted
                tokens = returned // CHARS_PER_TOKEN
                if returned_converted >= _REMEMBER_CONVERTED:
                    memo.put(request, tokens, returned)
                step_tokens += tokens
                total = None if total is None else total + returned
            newest_before_last = newest
            if request.instructions:
                newest = request.instructions
            exchange = new(Exchange)
            fields = exchange.__dict__
            fields['id'] = f'g{len(exchanges)}'
            fields['kind'] = 'tools'
            fields['refs'] = ((index, None), (index + 1, None))
            fields['tokens'] = step_tokens
            fields['protected'] = None
            fields['unfinished'] = False
            add(exchange)
            index += 2
            continue
        break
    cut = index - 2  # the last plain step's response: that step is read again with whatever follows it
    if cut < 3:
        return None
    # The last plain step is read again from the cut: its exchange, sizes and instructions are not the state's.
    exchanges.pop()
    total = before_last
    first = weakref.ref(history[0])
    steps = len(exchanges) - 1
    return _State(
        cut=cut,
        first=first,
        last=weakref.ref(history[cut - 1], functools.partial(_forget_state, first)),
        shared=_Shared(list(history[1 : cut - 1]), exchanges),
        length=cut - 2,
        count=len(exchanges),
        prompt=prompt,
        assigned_from=0,
        highest_before_cut=0,
        counter=steps,
        chars=total,
        instructions=newest_before_last,
        top_number=steps,
        last_turn=0,
        response=True,
        retrying=False,
        opening=True,
    )


def _extended(state: _State | None, history: tuple[ModelMessage, ...], cut: int, frozen: Sequence[Exchange]) -> _Shared:
    """The lists of a new state with cut *cut*: *state*'s extended in place when it is their tip, else new ones.

    New ones too while `_EXTENDING` is held: by another thread (a rare, short wait saved for a copy), or by this
    one, when a collection inside `holds` or here runs a finalizer that segments; waiting would then never end.
    """
    if state is not None and _EXTENDING.acquire(blocking=False):
        try:
            if state.is_tip():
                shared = state.shared
                shared.messages.extend(history[max(state.cut - 1, 1) : cut - 1])
                shared.extend(frozen)
                return shared
        finally:
            _EXTENDING.release()
    exchanges = state.exchanges() if state is not None else []
    exchanges.extend(frozen)
    return _Shared(list(history[1 : cut - 1]), exchanges)


def _newest_request_with_instructions(
    history: tuple[ModelMessage, ...], start: int, end: int
) -> tuple[int, str] | None:
    """The index and instructions of the newest request in `history[start:end]` with non-empty ones, or `None`."""
    for index in range(end - 1, start - 1, -1):
        message = history[index]
        if isinstance(message, ModelRequest) and message.instructions:
            return index, message.instructions
    return None


def _newest_instructions(history: tuple[ModelMessage, ...], start: int, end: int, before: str | None) -> str | None:
    """The newest non-empty instructions of the requests in `history[start:end]`, else *before* (those earlier)."""
    for index in range(end - 1, start - 1, -1):
        message = history[index]
        if isinstance(message, ModelRequest) and message.instructions:
            return message.instructions
    return before


def _add_sizes(total: int | None, sizes: Sequence[int | None]) -> int | None:
    """*total* plus *sizes*, or `None` when any of them is."""
    if total is None or None in sizes:
        return None
    return total + sum(cast('Sequence[int]', sizes))


def _exchange(
    exchange_id: str, kind: ExchangeKind, refs: tuple[PartRef, ...], tokens: int, protected: str | None
) -> Exchange:
    """`Exchange(exchange_id, kind, refs, tokens, protected)`, the object its `__init__` builds, in a third of the time.

    A frozen dataclass sets each field through `object.__setattr__`, which made building one exchange per tool
    step the largest single cost of segmenting a history never seen. `Exchange` has no `__post_init__` and no
    slots: filling its `__dict__` gives the same object (a test holds this to every field `Exchange` declares).
    """
    exchange = _NEW(Exchange)
    vars(exchange).update(id=exchange_id, kind=kind, refs=refs, tokens=tokens, protected=protected, unfinished=False)
    return exchange


_NEW = object.__new__

_ID = operator.attrgetter('id')


def _finish(history: tuple[ModelMessage, ...], raw: _Raw, protect: ProtectPredicate | None) -> ConversationView:
    """The final passes: the exchanges in progress, the current turn, the user's predicate."""
    from dataclasses import replace

    exchanges = raw.exchanges  # this call's own list: updated in place
    copies: list[int] = []
    if history:
        # The exchanges in progress: every one that owns part of the last message (only exchanges segmented in
        # this call can). That is the response whose returns the current request carries together with that
        # request, a new user turn, both, or a response still waiting for its tool results (or suspended).
        # Exchanges are ordered by their last message (their spans never overlap), so those are the last ones.
        last = len(history) - 1
        for position in range(len(exchanges) - 1, raw.tail_start - 1, -1):
            exchange = exchanges[position]
            if exchange.refs[-1][0] != last:
                break
            exchanges[position] = replace(exchange, unfinished=True)
            copies.append(position)
    if raw.last_turn is not None and exchanges[raw.last_turn].protected is None:
        # The latest user turn is what the agent is working on: dropping it would lose the question itself.
        exchange = replace(exchanges[raw.last_turn], protected='current_turn')
        exchanges[raw.last_turn] = exchange
        copies.append(raw.last_turn)
    if protect is not None:
        exchanges = _apply_predicate(history, exchanges, protect)
    final = tuple(exchanges)
    view = ConversationView(
        messages=history,
        exchanges=final,
        next_id=raw.highest + 1,
        text_chars=raw.chars,
        instructions=raw.instructions,
    )
    if protect is None:
        object.__setattr__(view, 'copies', (final, tuple(copies)))  # not a constructor argument: see the field
    return view


TOOL_CONTENT_WINDOW = timedelta(seconds=2)
"""How long after a tool return a user part can have been created by pydantic-ai for that tool's content."""


def tool_content_parts(message: ModelRequest, prompt: object = None) -> frozenset[int]:
    """Indices of the user parts of *message* that carry tool output (`ToolReturn.content`), not the user.

    pydantic-ai marks nothing: it appends one `UserPromptPart` per tool that returned content, right
    after the request's tool returns and created a moment after them. A user prompt can also follow
    returns in the same request (a prompt enqueued during the run, or a new run's prompt merged into a
    trailing request), so a part counts as tool output only when all of these hold: it is among the
    first *k* user parts directly after the returns, *k* being the number of successful returns; its
    timestamp is no earlier than the first return's and at most `TOOL_CONTENT_WINDOW` after the last
    one's; and its content is not the run's own *prompt*. Errors on the side of "tool output" are safe
    for restatement (never restated) and keep the part with the call that produced it.
    """
    parts = message.parts
    end = len(parts)
    while end and isinstance(parts[end - 1], _BOOKKEEPING):
        end -= 1  # pydantic-ai appends a tool made available mid-run after everything else in the request
    if end < 2 or not isinstance(parts[end - 1], UserPromptPart):
        return frozenset()  # tool content comes last in its request
    returns = [part for part in parts if isinstance(part, ToolReturnPart) and part.outcome == 'success']
    if not returns:
        return frozenset()
    last_result = max(index for index, part in enumerate(parts) if _answers_call(part) is not None)
    stamps = [_utc(part.timestamp) for part in returns]
    earliest, latest = min(stamps), max(stamps)
    found: set[int] = set()
    for index in range(last_result + 1, len(parts)):
        part = parts[index]
        if isinstance(part, _BOOKKEEPING):
            continue  # a tool that reveals tools adds their availability between its return and its content
        if not isinstance(part, UserPromptPart) or is_restatement(part) or len(found) == len(returns):
            break
        if prompt is not None and part.content == prompt:
            break
        if not earliest <= _utc(part.timestamp) <= latest + TOOL_CONTENT_WINDOW:
            break
        found.add(index)
    return frozenset(found)


_BOOKKEEPING = (ToolAvailabilityDeltaPart, ModelSettingsDeltaPart, InstructionDeltaPart, InstructionBaselinePart)
"""Request parts that record state changes rather than carry content from the user or a tool."""


def _only_bookkeeping(history: Sequence[ModelMessage], merged: Mapping[int, Sequence[int]]) -> bool:
    """Whether the parts *merged* names (message index → part indices) are all `_BOOKKEEPING`."""
    return all(
        isinstance(history[index].parts[part], _BOOKKEEPING) for index, parts in merged.items() for part in parts
    )


def _utc(moment: datetime) -> datetime:
    """*moment* comparable with any other: a history loaded from JSON can mix naive and aware timestamps."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


_NO_PARTS: frozenset[int] = frozenset()

_Snapshot = tuple[int | None, int | None, int | None]
"""The builder's `last_response`, `retrying` and `opening` before a message."""


def _build_units(
    messages: Sequence[ModelMessage], prompt: object = None, *, start: int = 0, state: _State | None = None
) -> tuple[list[_Unit], list[_Snapshot], list[int], set[int]]:
    """The units of `messages[start:]`, the builder's state before each of those messages, the indices of
    the messages holding a `CompactionPart` (the only ones a boundary record can be read from), and of the
    requests holding anything but tool returns (the only ones a pin or a state change can be in).

    From a cut (*state* given), units before it are reused as they are: a message that would add to one
    of them (a return whose call is not after the cut, feedback or a retry answer for a response before
    it) raises `_Stale`, and the caller segments from the start.
    """
    units: list[_Unit] = []
    snapshots: list[_Snapshot] = []
    compacted: list[int] = []
    notable: set[int] = set()
    owner_of_call: dict[str, int] = {}
    calls_before = state is not None and state.response
    last_response: int | None = _FROZEN if calls_before else None
    retrying: int | None = _FROZEN if state is not None and state.retrying else None
    opening: int | None = _FROZEN if state is not None and state.opening else None
    for index in range(start, len(messages)):
        message = messages[index]
        snapshots.append((last_response, retrying, opening))
        if isinstance(message, ModelResponse):
            parts = message.parts
            boundary = False
            calls: list[str] = []
            for part in parts:
                if isinstance(part, ToolCallPart):
                    calls.append(part.tool_call_id)
                elif isinstance(part, CompactionPart):
                    boundary = True
            if boundary:
                compacted.append(index)
            if retrying is not None and not boundary:
                # The model's answer to a retry belongs with the call it retries.
                if retrying == _FROZEN:
                    raise _Stale
                position = retrying
                unit = units[position]
                if calls:
                    unit.kind = 'tools'
            else:
                kind: ExchangeKind = 'boundary' if boundary else ('tools' if calls else 'response')
                stamp = message_stamp(message) if message.metadata else None
                if not stamp:
                    stamp = _boundary_stamp(message) if boundary else None
                unit = _Unit(kind, stamp)
                units.append(unit)
                position = len(units) - 1
            unit.parts[index] = list(range(len(parts)))
            last_response = position
            for call_id in calls:
                owner_of_call[call_id] = position
            continue

        parts = message.parts
        if len(parts) == 1 and type(part := parts[0]) is ToolReturnPart:
            # A tool loop's usual request, one return answering a known call: what the loop below does for it.
            owner = owner_of_call.get(part.tool_call_id)
            if owner is not None:
                held = units[owner].parts.get(index)
                if held is None:
                    units[owner].parts[index] = [0]
                else:
                    held.append(0)
                retrying = last_response if part.outcome == 'retried' and last_response is not None else None
                continue
        if not parts:
            # A request with no parts (an agent with `instructions=` only, or `run(None, ...)` continuing
            # after a response) still belongs to exactly one exchange: the opening when it is first,
            # else the exchange it continues. Dropping it would leave two responses side by side or a
            # history that ends on a response.
            owner = len(units) - 1 if units else None
            if owner is None:
                if state is not None:
                    raise _Stale  # it would continue the exchange before the cut
                units.append(_Unit('opening', message_stamp(message)))
                opening = owner = 0
            units[owner].parts[index] = []
            retrying = None
            continue

        retries_only = True
        prompted = False  # the opening holds a user prompt of this message already
        run_kind: ExchangeKind | None = None
        owned: list[int] = []
        tool_owner: int | None = None
        from_tools = tool_content_parts(message, prompt) if len(parts) > 1 else _NO_PARTS
        has_compaction = False
        plain = True  # every part a return: no pin, no bookkeeping, nothing to protect
        for part_index, part in enumerate(parts):
            if isinstance(part, ToolReturnPart):
                call_id: str | None = part.tool_call_id
                retry = part.outcome == 'retried'
            else:
                call_id = _answers_call(part)
                retry = True  # a legacy retry prompt naming its tool: the only other part that answers a call
            if call_id is not None:
                owner = owner_of_call.get(call_id)
                if owner is None:
                    if calls_before:
                        raise _Stale  # its call may be before the cut (a deferred return), or it joins a response there
                    owner = last_response
                if owner is not None:
                    held = units[owner].parts.get(index)
                    if held is None:
                        units[owner].parts[index] = [part_index]
                    else:
                        held.append(part_index)
                    if not retry:
                        retries_only = False
                    tool_owner = owner
                    continue
            plain = False
            if last_response is not None and _is_feedback(part):
                # Retry feedback (and a legacy retry prompt without a tool name) answers the model's
                # last response; it is not the user speaking.
                if last_response == _FROZEN:
                    raise _Stale
                units[last_response].add(index, part_index)
                continue
            if tool_owner is not None and part_index in from_tools:
                # `ToolReturn(content=...)` puts its content in a user part right after the returns of the
                # same request: it is tool output, and travels with the call that produced it.
                units[tool_owner].add(index, part_index)
                retries_only = False
                continue
            retries_only = False
            if isinstance(part, CompactionPart):
                kind = 'boundary'
                has_compaction = True
            elif is_restatement(part):
                kind = 'restatement'
            elif (opening is None or (run_kind == 'opening' and units[opening].parts.get(index))) and not (
                prompted and isinstance(part, UserPromptPart)
            ):
                # The first request's own content (up to any boundary merged into it, and up to a second prompt) is
                # the opening. pydantic-ai merges consecutive requests of a history it is given: a turn a compaction
                # left right after the opening came back inside it, kept verbatim for good as the opening.
                kind = 'opening'
                prompted = prompted or isinstance(part, UserPromptPart)
            else:
                kind = 'turn'
            if kind != run_kind:
                units.append(_Unit(kind))
                owned.append(len(units) - 1)
                if kind == 'opening':
                    opening = len(units) - 1
                run_kind = kind
            units[owned[-1]].add(index, part_index)
        if has_compaction:
            compacted.append(index)
        if not plain:
            notable.add(index)
        retrying = last_response if retries_only and last_response is not None else None
        for position in owned:
            unit = units[position]
            if len(unit.parts[index]) == len(parts):
                unit.stamp = message_stamp(message)
            if unit.kind == 'boundary' and unit.stamp is None:
                unit.stamp = _boundary_stamp(message)
    return units, snapshots, compacted, notable


def _is_feedback(part: ModelRequestPart) -> bool:
    """Retry feedback that answers the model's last response rather than a tool call."""
    if isinstance(part, RetryFeedbackPart):
        return True
    return isinstance(part, RetryPromptPart) and part.tool_name is None  # pyright: ignore[reportDeprecated]


def _boundary_stamp(message: ModelMessage) -> str | None:
    for part in message.parts:
        record = our_record(part)
        if record is not None and isinstance(record.get('boundary_id'), str):
            return record['boundary_id']
    return None


def _merge_linked(units: list[_Unit]) -> list[list[_Unit]]:
    """Group units whose spans interleave (a deferred return after other units) into one exchange.

    In start order (the order units are created in), a unit joins the current group when it starts before
    the furthest end reached so far; otherwise it opens a new group. That is the connected components of the
    overlap graph, which are always contiguous runs in start order, found in one sweep (a graph library
    would only repeat it). The groups' spans never overlap, so exchanges are ordered by start and by end.
    """
    groups: list[list[_Unit]] = []
    # The furthest end so far, as (message, part): compared message first, and the part only on the same message
    # (a tuple per unit cost more than the rest of the sweep).
    reach_message = reach_part = -1
    for unit in units:
        parts = unit.parts
        first = next(iter(parts))
        if first < reach_message or (first == reach_message and _first_part(parts[first]) <= reach_part):
            groups[-1].append(unit)
        else:
            groups.append([unit])
        last = next(reversed(parts))
        if last >= reach_message:
            held = parts[last]
            part = held[-1] if held else -1
            if last > reach_message or part > reach_part:
                reach_message, reach_part = last, part
    return groups


def _first_part(held: list[int]) -> int:
    """The first part index a unit holds in a message (-1 for an empty request, held whole)."""
    return held[0] if held else -1


def _merge_parts(group: list[_Unit]) -> dict[int, list[int]]:
    if len(group) == 1:
        return group[0].parts  # built in order, one entry per message
    merged: dict[int, list[int]] = {}
    for unit in group:
        for message_index, parts in unit.parts.items():
            merged.setdefault(message_index, []).extend(parts)
    return {index: sorted(set(parts)) for index, parts in sorted(merged.items())}


def _id_counter(
    messages: Sequence[ModelMessage], units: list[_Unit], compacted: list[int]
) -> tuple[int, list[tuple[int, int]], list[tuple[int, int]]]:
    """The highest exchange number ever handed out in the messages the units cover, from stamps and records.

    Also returns each stamped unit's first message and number, and each message in *compacted* (those
    holding a `CompactionPart`, the only parts a record is read from) with the highest number its records name.
    """
    stamped = [
        (next(iter(unit.parts)), number)
        for unit in units
        if unit.stamp and (number := exchange_number(unit.stamp)) is not None
    ]
    highest = max((number for _, number in stamped), default=0)
    per_message: list[tuple[int, int]] = []
    for index in compacted:
        in_message = 0
        for part in messages[index].parts:
            record = our_record(part)
            if record is None:
                continue
            next_id = record.get('next_id')
            if isinstance(next_id, int):
                in_message = max(in_message, next_id - 1)
            for key in ('kept', 'dropped'):
                for exchange_id in record.get(key) or ():
                    if isinstance(exchange_id, str) and (number := exchange_number(exchange_id)) is not None:
                        in_message = max(in_message, number)
        per_message.append((index, in_message))
        highest = max(highest, in_message)
    return highest, stamped, per_message


class _TokenMemo:
    """Token estimates by message object, valid while it holds the same part objects, in order.

    One weak reference per message (the entry goes with it); its parts are held strongly by the entry,
    which keeps a part replaced in the message alive (so its id is never reused by another object) only
    as long as the message itself. pydantic-ai assigns a new `parts` list to a persisted request when it
    adds a part to it, and a processor may replace a part in a reused list: either way the parts differ.
    A part's content changed in place is not seen (parts are never mutated in place, see the module
    docstring).
    """

    def __init__(self) -> None:
        self.entries: dict[int, tuple[weakref.ref[ModelMessage], tuple[object, ...], int, int | None]] = {}
        """By the message's `id()`: a weak reference to it, its parts, its estimate and its characters
        (`measure_message_text`'s first figure; `None` for a message holding an instruction change)."""

    def get(self, message: ModelMessage) -> int | None:
        entry = self.entry(message)
        return None if entry is None else entry[2]

    def entry(
        self, message: ModelMessage
    ) -> tuple[weakref.ref[ModelMessage], tuple[object, ...], int, int | None] | None:
        """The entry of *message*, while it holds the same part objects."""
        entry = self.entries.get(id(message))
        if entry is None or entry[0]() is not message:
            return None
        parts = message.parts
        held = entry[1]
        if len(held) != len(parts) or not all(map(operator.is_, held, parts)):
            return None
        return entry

    def put(self, message: ModelMessage, tokens: int, chars: int | None) -> int:
        key = id(message)
        entries = self.entries

        def forget(ref: weakref.ref[ModelMessage]) -> None:
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(message, forget), tuple(message.parts), tokens, chars)
        return tokens

    def __len__(self) -> int:
        return len(self.entries)


_TOKENS = _TokenMemo()
"""Token estimates of the messages seen (never keeps a message alive)."""


def message_tokens(message: ModelMessage) -> int:
    """Estimated tokens a message adds (`runtime.tokens`' text estimate; a response at least its output tokens)."""
    cached = _TOKENS.get(message)
    if cached is not None:
        return cached
    measured = measure_message_text(message)
    if measured is None:
        tokens = estimate_token_count([_without_instructions(message)])
    else:
        tokens = measured[0] // CHARS_PER_TOKEN  # the same texts the estimate reads (`measure_message_text`)
    if isinstance(message, ModelResponse):
        tokens = max(tokens, message.usage.output_tokens)
    return _TOKENS.put(message, tokens, None if measured is None else measured[0])


_REMEMBER_CONVERTED = 256
"""Characters converted from structured values (`str(...)` of a dict, a list, a file reference) from which a
measured message is remembered: below, measuring it again costs about what a lookup does."""


def messages_tokens(messages: Sequence[ModelMessage]) -> list[int]:
    """`message_tokens` of each message, the ones not seen before measured without building their texts.

    A message's estimate depends on the others only through instruction changes (`InstructionDeltaPart`):
    every other message is measured by `measure_message_text`, which sums the same texts the estimator reads,
    and a message holding one is estimated alone. A message measured from plain strings is not remembered:
    reading their lengths again is as cheap as finding it, and a history never seen pays for no entries.
    """
    return _measure(messages)[0]


def _measure(messages: Sequence[ModelMessage]) -> tuple[list[int], list[int | None]]:
    """`messages_tokens`, and each message's characters (`None` for one holding an instruction change)."""
    memo = _TOKENS
    entries = memo.entries
    measure = measure_message_text
    response = ModelResponse
    out: list[int] = []
    sizes: list[int | None] = []
    add_tokens = out.append
    add_size = sizes.append
    for message in messages:
        # The lookup is inlined: a history never seen misses it for every message.
        if id(message) in entries and (entry := memo.entry(message)) is not None:
            add_tokens(entry[2])
            add_size(entry[3])
            continue
        measured = measure(message)
        if measured is None:
            add_tokens(message_tokens(message))
            add_size(None)
            continue
        chars, converted = measured
        tokens = chars // CHARS_PER_TOKEN
        if isinstance(message, response):
            tokens = max(tokens, message.usage.output_tokens)
        if converted >= _REMEMBER_CONVERTED:
            memo.put(message, tokens, chars)
        add_tokens(tokens)
        add_size(chars)
    return out, sizes


def _share(messages: Sequence[ModelMessage], index: int, parts: list[int], count: int) -> int:
    """The part of message *index*'s *count* tokens its *parts* hold (a request split between exchanges)."""
    message = messages[index]
    whole = max(estimate_token_count([_without_instructions(message)]), 1)
    share = estimate_token_count([_without_instructions(fragment(messages, (index, tuple(parts))))])
    return count * share // whole


def _without_instructions(message: ModelMessage) -> ModelMessage:
    from dataclasses import replace

    if isinstance(message, ModelRequest) and message.instructions:
        return replace(message, instructions=None)
    return message


def _protection(
    kind: ExchangeKind, messages: Sequence[ModelMessage], refs: Sequence[PartRef], position: int
) -> str | None:
    if kind == 'opening' or position == 0:
        return 'opening'
    if kind == 'boundary':
        return 'boundary'
    for index, part_indices in refs:
        message = messages[index]
        if not isinstance(message, ModelRequest):
            continue  # pins are user content: only requests can hold them
        parts = message.parts if part_indices is None else [message.parts[i] for i in part_indices]
        bookkeeping = False
        for part in parts:
            if type(part) is ToolReturnPart:
                continue  # most parts: neither a pin nor bookkeeping
            if isinstance(part, UserPromptPart):
                if is_pinned(part):
                    return 'pinned'
            elif isinstance(part, _BOOKKEEPING):
                bookkeeping = True
        if bookkeeping:
            # A tool reveal, a settings or an instruction change: pydantic-ai reads the run's state back
            # from these parts, so dropping one would, say, make a revealed tool unavailable again.
            return 'state'
    return None


def _apply_predicate(
    messages: Sequence[ModelMessage], exchanges: list[Exchange], protect: ProtectPredicate
) -> list[Exchange]:
    from dataclasses import replace

    out: list[Exchange] = []
    for exchange in exchanges:
        if exchange.protected is None and protect(exchange, [fragment(messages, ref) for ref in exchange.refs]):
            exchange = replace(exchange, protected='predicate')
        out.append(exchange)
    return out


_SameAddresses = Callable[[tuple[ModelMessage, ...], list[ModelMessage], int], bool]
"""`same(history, listed, count)`: whether `history[1 : count + 1]` and `listed[:count]` hold the same objects."""


def _addresses_compared() -> _SameAddresses | None:
    """A `_SameAddresses` that compares the two sequences' arrays of addresses in C, or `None` where it cannot.

    CPython lays a tuple's items out after its header and a list's in an array its header points to; both layouts
    are read from the types' sizes and then checked on a tuple and a list of known objects, so an interpreter
    that lays them out otherwise (or has no such addresses, or no `ctypes`) falls back to the identity pass. The
    arrays are compared by the C library's `memcmp` (called without releasing the interpreter's lock: a short
    call), or, where it cannot be loaded, copied out as bytes and compared. What keeps the list's array where its
    address was read is `_EXTENDING`, held by the caller from the read to the comparison (other threads may run
    between them); a build without the interpreter's lock is left out all the same.
    """
    found = address_arrays()
    if found is None:
        return None
    import ctypes  # loaded by `address_arrays` already

    equal, word = found
    items_of_tuple = tuple.__basicsize__ + word  # the first item is the opening, compared on its own
    array_of_list = list.__basicsize__ - 2 * word  # `ob_item` then `allocated` end the list's header
    pointer = ctypes.c_void_p

    def compared(history: tuple[ModelMessage, ...], listed: list[ModelMessage], count: int) -> bool:
        if not count:
            return True
        array = pointer.from_address(id(listed) + array_of_list).value or 0
        return equal(array, id(history) + items_of_tuple, count * word)

    try:
        probe = [object() for _ in range(4)]
        held = cast('tuple[ModelMessage, ...]', (object(), *probe))
        listed = cast('list[ModelMessage]', list(probe))
        other = cast('list[ModelMessage]', [*probe[:3], object()])
        if not compared(held, listed, 4) or compared(held, other, 4) or not compared(held, other, 3):
            return None
    except Exception:  # an unexpected layout: use the identity pass
        return None
    return compared


@functools.cache
def _same_addresses() -> _SameAddresses | None:
    """`_addresses_compared()`, made at the first comparison: importing `ctypes` costs milliseconds, which a program
    importing the package without segmenting anything should not pay. Two threads making it at once make two equal
    ones, either of which is kept."""
    return _addresses_compared()
