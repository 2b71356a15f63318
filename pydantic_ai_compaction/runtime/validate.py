"""The validator: the runtime, not the model, has the last word on what the next history holds.

`decide` is that last word: it applies every layout rule, once, in order, and returns either the
history to send or why the history stays as it is. `validate` and `fallback_layout` are its steps.
"""

from __future__ import annotations

import operator
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import chain, compress, count
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart

from pydantic_ai_compaction.protocols.types import (
    CompactionRecord,
    Exchange,
    Layout,
    Proposal,
    ProviderSummary,
    Summary,
)
from pydantic_ai_compaction.runtime.segment import ConversationView, our_record
from pydantic_ai_compaction.runtime.shape import forgotten_loop, is_compaction_response, shape_problems

DEFAULT_FALLBACK_KEEP_LAST = 4
"""Exchanges the fallback layout keeps (besides protected and unfinished ones)."""


def validate(
    proposal: Proposal, view: ConversationView, *, fallback_keep_last: int = DEFAULT_FALLBACK_KEEP_LAST
) -> Layout:
    """Turn a proposal into a layout that is always safe to apply.

    Unknown or repeated ids are rejected and reported; protected and unfinished exchanges are kept
    even when the proposal leaves them out; the kept ids come back in the history's own order. A
    malformed or empty proposal gives the fallback layout: the last `fallback_keep_last` exchanges plus
    everything protected, with a boundary that says what was dropped.
    """
    if proposal.malformed is not None:
        return fallback_layout(
            view, proposal.malformed, fallback_keep_last=fallback_keep_last, restate=proposal.restate
        )

    accepted: set[str] = set()
    rejected: list[str] = []
    for exchange_id in proposal.kept:
        if exchange_id in accepted or exchange_id not in view.by_id:
            rejected.append(exchange_id)
        else:
            accepted.add(exchange_id)

    # A provider's compaction read every earlier boundary, and its item is where pydantic-ai and the provider start
    # reading: it stands for them all, whichever strategy wrote them (kept, a summary of another strategy would sit
    # after it, its older record after the newer one, or before it with the pins the item must come before).
    every = isinstance(proposal.summary, ProviderSummary)
    superseded = _superseded(view, proposal.supersedes, every=every)
    keep = accepted | {e.id for e in forced_exchanges(view) if e.id not in superseded}
    if (
        proposal.summary is None
        and not proposal.restate
        and not proposal.explicit
        and not (accepted - keep_forced(view))
    ):
        # A parsed reply that names nothing to keep and says nothing is empty, not a choice to drop everything.
        return fallback_layout(view, 'empty', fallback_keep_last=fallback_keep_last, rejected=tuple(rejected))

    keep = settle(view, keep, restate=bool(proposal.restate))
    ordered, dropped = _split(view, keep)
    return Layout(
        keep=ordered,
        dropped=dropped,
        rejected=tuple(rejected),
        summary=proposal.summary,
        restate=proposal.restate,
        fallback_reason=None,
        superseded=tuple(sorted(superseded, key=lambda i: view.ids.index(i))),
    )


def keep_forced(view: ConversationView) -> set[str]:
    """Ids the validator keeps whatever a proposal says."""
    return {exchange.id for exchange in forced_exchanges(view)}


class _Facts:
    """What the validator and the strategies read from every exchange of one view, read once per view.

    A compaction of 50k messages has 25k exchanges, read by the engine, the validator, the strategy and layout
    application, so each reading is made once (when first asked for) and shared. A view that starts with the
    exchanges of the view read before (the same objects: segmentation reuses them for the messages it saw) takes
    what was read of that one up to where the two part, found by a pass in C, and reads only what follows.
    """

    __slots__ = (
        '_boundaries',
        '_copies',
        '_forced',
        '_ids',
        '_positions',
        '_records',
        '_tokens',
        'exchanges',
        'split',
        'verified',
        'view',
    )

    def __init__(self, view: ConversationView, previous: _Facts | None) -> None:
        self.view = weakref.ref(view)
        exchanges = view.exchanges
        self.exchanges = exchanges
        self._copies = _marked_copies(view)
        """Segmentation's marked copies in *view* (`ConversationView.copies`), when its note applies."""
        self._records: tuple[dict[str, Any], ...] | None = None
        self._ids: tuple[str, ...] | None = None
        self._tokens: int | None = None
        self._forced: _Found | None = None
        self._boundaries: _Found | None = None
        self._positions: dict[str, int] | None = None
        self.split: tuple[tuple[str, ...], int | None] | None = None
        """The dropped ids `_split` gave last, and the last one's position."""
        self.verified: list[tuple[tuple[Exchange, ...], Callable[[Exchange], bool]]] = []
        """Exchanges `view_starts_with` found *view* starts with, each with what it ignored."""
        if previous is None:
            return
        old = previous.exchanges
        shared = _identical_prefix(old, previous._copies, exchanges, self._copies)
        if 2 * shared < len(exchanges):
            return
        # What the previous view was found to start with, this one starts with too when it is within the shared part.
        self.verified = [(before, ignored) for before, ignored in previous.verified if len(before) <= shared]
        new = exchanges[shared:]
        if previous._ids is not None:
            ids = previous._ids if shared == len(previous._ids) else previous._ids[:shared]  # a slice is a copy
            self._ids = ids + tuple([e.id for e in new])
        if previous._tokens is not None:
            self._tokens = previous._tokens - sum([e.tokens for e in old[shared:]]) + sum([e.tokens for e in new])
        if previous._forced is not None:
            self._forced = previous._forced.extended(shared, new, _is_forced)
        if previous._boundaries is not None:
            self._boundaries = previous._boundaries.extended(shared, new, _is_boundary)
        positions = previous._positions
        if positions is not None and previous._ids is not None and self._ids is not None:
            # Handed over (the previous facts are not read again: `_LAST` keeps one), cut back and extended, when
            # the ids are told apart (always, from segmentation).
            previous._positions = None
            if len(positions) == len(previous._ids):
                for exchange_id in previous._ids[shared:]:
                    del positions[exchange_id]
                positions.update(zip(self._ids[shared:], count(shared)))
                if len(positions) == len(self._ids):
                    self._positions = positions

    @property
    def ids(self) -> tuple[str, ...]:
        if self._ids is None:
            self._ids = tuple([e.id for e in self.exchanges])
        return self._ids

    @property
    def tokens(self) -> int:
        if self._tokens is None:
            self._tokens = sum([e.tokens for e in self.exchanges])
        return self._tokens

    @property
    def forced(self) -> tuple[Exchange, ...]:
        if self._forced is None:
            self._forced = _Found.of(self.exchanges, _is_forced)
        return self._forced.exchanges

    @property
    def boundaries(self) -> tuple[Exchange, ...]:
        if self._boundaries is None:
            self._boundaries = _Found.of(self.exchanges, _is_boundary)
        return self._boundaries.exchanges

    @property
    def positions(self) -> dict[str, int]:
        if self._positions is None:
            self._positions = dict(zip(self.ids, count()))
        return self._positions

    def records(self, view: ConversationView) -> tuple[dict[str, Any], ...]:
        if self._records is None:
            # `view.records()`, from the boundaries (read once) instead of a pass over every exchange.
            found: list[dict[str, Any]] = []
            seen: set[int] = set()
            for exchange in self.boundaries:
                for index, _ in exchange.refs:
                    if index in seen:
                        continue  # a request split between two boundary exchanges is read once, whole
                    seen.add(index)
                    found.extend(r for part in view.messages[index].parts if (r := our_record(part)) is not None)
            self._records = tuple(found)
        return self._records


def _marked_copies(view: ConversationView) -> frozenset[int] | None:
    """The positions of *view*'s marked copies, when segmentation's note applies to its exchanges."""
    note = view.copies
    return frozenset(note[1]) if note is not None and note[0] is view.exchanges else None


def _identical_prefix(
    old: tuple[Exchange, ...],
    old_copies: frozenset[int] | None,
    new: tuple[Exchange, ...],
    new_copies: frozenset[int] | None,
) -> int:
    """The first position where *old* and *new* hold different objects (the shorter length when none).

    With segmentation's note on both (`ConversationView.copies`), an object both hold at a position that neither
    marked as a copy says every position before it holds the same objects, the marked copies aside. So the last such
    position is looked for from the end, where a history that grew by a step differs, and before it only the marked
    copies are compared: a history of 25k exchanges that grew by one costs a few steps instead of a pass over all.
    Without the note, the objects are compared position by position (in C).
    """
    length = min(len(old), len(new))
    if old_copies is None or new_copies is None:
        return next(compress(count(), map(operator.is_not, old, new)), length)
    marked = old_copies | new_copies
    same = 0
    position, step = length - 1, 1
    while position >= 0:
        if position not in marked and old[position] is new[position]:
            same = position + 1
            break
        position = min(position - 1, length - 1 - step)
        step *= 2
    for position in sorted(marked):
        if position >= same:
            break
        if old[position] is not new[position]:
            return position
    while same < length and old[same] is new[same]:
        same += 1
    return same


def _is_forced(exchange: Exchange) -> bool:
    return exchange.protected is not None or exchange.unfinished


def _is_boundary(exchange: Exchange) -> bool:
    return exchange.kind == 'boundary'


@dataclass(frozen=True)
class _Found:
    """The exchanges of a view that one test picks (a few), with their positions."""

    exchanges: tuple[Exchange, ...]
    at: tuple[int, ...]

    @staticmethod
    def of(exchanges: tuple[Exchange, ...], test: Callable[[Exchange], bool]) -> _Found:
        at = tuple(compress(count(), map(test, exchanges)))
        return _Found(tuple([exchanges[i] for i in at]), at)

    def extended(self, shared: int, new: tuple[Exchange, ...], test: Callable[[Exchange], bool]) -> _Found:
        """These, for a view sharing the first *shared* exchanges and then holding *new*."""
        cut = bisect_left(self.at, shared)
        more = _Found.of(new, test)
        return _Found(self.exchanges[:cut] + more.exchanges, self.at[:cut] + tuple([shared + i for i in more.at]))


class _Last(threading.local):
    facts: _Facts | None = None


_LAST = _Last()
"""The facts of the view read last (one compaction reads one view many times; a weak reference to it), per
thread: the next view's facts take the positions over and change them in place, so a run in another thread
must not take them while one is reading them."""


def _facts(view: ConversationView) -> _Facts:
    last = _LAST.facts
    if last is not None and last.view() is view:
        return last
    facts = _Facts(view, last)
    _LAST.facts = facts
    return facts


def starts_with(exchanges: Sequence[Exchange], before: Sequence[Exchange], ignored: Callable[[Exchange], bool]) -> bool:
    """`same_prefix(before, exchanges, ignored)`: the positions where the two differ are found by a pass in C, and
    only those are read in Python (a copy marked at the start of 25k exchanges no longer costs a pass in Python)."""
    if len(exchanges) < len(before):
        return False
    return all(
        ignored(before[at]) and ignored(exchanges[at])
        for at in compress(count(), map(operator.is_not, before, exchanges))
    )


def view_starts_with(view: ConversationView, before: tuple[Exchange, ...], ignored: Callable[[Exchange], bool]) -> bool:
    """`starts_with(view.exchanges, before, ignored)`, remembered for the views after *view* that share as much.

    A reading carried forward (a reset's, the notes') checks that a view starts with the exchanges it read. The
    views of a run share their start with the one before, found once per view (`_Facts`): what the one before was
    found to start with, this one does too, without another pass.
    """
    facts = _facts(view)
    if any(known is before and function is ignored for known, function in facts.verified):
        return True
    if not starts_with(view.exchanges, before, ignored):
        return False
    facts.verified = [*facts.verified[-(_VERIFIED_KEPT - 1) :], (before, ignored)]
    return True


def note_start(view: ConversationView, before: tuple[Exchange, ...], ignored: Callable[[Exchange], bool]) -> None:
    """Remember that *view* starts with *before* (taken from its own exchanges), for `view_starts_with`."""
    facts = _facts(view)
    facts.verified = [*facts.verified[-(_VERIFIED_KEPT - 1) :], (before, ignored)]


_VERIFIED_KEPT = 8
"""Starts remembered per view (each reading keeps a few histories)."""


def exchange_positions(view: ConversationView) -> dict[str, int]:
    """Each exchange's position in *view* by its id, read once per view (read it, do not change it)."""
    return _facts(view).positions


def kept_positions(view: ConversationView, keep: set[str]) -> list[int]:
    """The positions of the exchanges of *view* whose id is in *keep*, ascending.

    A few kept ids are looked up; many are found by a pass in C over the ids, which is then cheaper than sorting.
    """
    facts = _facts(view)
    positions, ids = facts.positions, facts.ids
    if 8 * len(keep) < len(ids) and len(positions) == len(ids):
        return sorted([positions[i] for i in keep if i in positions])
    return list(compress(count(), map(keep.__contains__, ids)))


def first_unfinished(view: ConversationView) -> int:
    """The position of the first unfinished exchange of *view* (the number of exchanges when there is none)."""
    facts = _facts(view)
    # Unfinished exchanges are forced: the first one is found among the few of those.
    first = next((exchange for exchange in facts.forced if exchange.unfinished), None)
    if first is None:
        return len(facts.ids)
    at = facts.positions.get(first.id)
    return at if at is not None and len(facts.positions) == len(facts.ids) else facts.ids.index(first.id)


def forced_exchanges(view: ConversationView) -> tuple[Exchange, ...]:
    """The exchanges of *view* whose `forced` holds, in order (read once per view)."""
    return _facts(view).forced


def exchange_ids(view: ConversationView) -> tuple[str, ...]:
    """`view.ids`, read once per view."""
    return _facts(view).ids


def boundary_exchanges(view: ConversationView) -> tuple[Exchange, ...]:
    """The exchanges of *view* of kind `boundary`, in order (read once per view)."""
    return _facts(view).boundaries


def view_tokens(view: ConversationView) -> int:
    """`view.tokens`, read once per view."""
    return _facts(view).tokens


def view_records(view: ConversationView) -> list[dict[str, Any]]:
    """`view.records()`, read once per view (a new list of the same dicts: read them, do not change them)."""
    return list(_facts(view).records(view))


def droppable_tokens(view: ConversationView) -> int:
    """Estimated tokens of the exchanges that are not forced (`sum(e.tokens for e in exchanges if not e.forced)`)."""
    return view_tokens(view) - sum([exchange.tokens for exchange in forced_exchanges(view)])


def _split(view: ConversationView, keep: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ids in *keep* and those not in it, each in the history's order.

    The dropped ids are remembered with the last one's position, which layout application reads instead of
    looking every dropped id up. Few kept ids (a reset keeps a handful of 25k) cut the ids into slices, in C.
    """
    facts = _facts(view)
    ids = facts.ids
    if 8 * len(keep) < len(ids) and len(facts.positions) == len(ids):
        at = kept_positions(view, keep)
        pieces: list[tuple[str, ...]] = []
        start = 0
        for position in at:
            pieces.append(ids[start:position])
            start = position + 1
        pieces.append(ids[start:])
        pieces = [piece for piece in pieces if piece]
        # A reset keeps the opening and the newest exchanges: what it drops is one slice, taken as it is rather
        # than copied again (a copy of 25k ids cost as much as the rest of the split).
        dropped = pieces[0] if len(pieces) == 1 else tuple(chain.from_iterable(pieces))
        kept = tuple([ids[position] for position in at])
        last = len(ids) - 1
        for position in reversed(at):
            if position != last:
                break
            last -= 1
    else:
        mask = list(map(keep.__contains__, ids))
        kept, dropped = tuple(compress(ids, mask)), tuple(compress(ids, map(operator.not_, mask)))
        last = next(compress(range(len(ids) - 1, -1, -1), map(operator.not_, reversed(mask))), -1)
    facts.split = (dropped, last if dropped else None)
    return kept, dropped


def last_dropped(view: ConversationView, dropped: tuple[str, ...]) -> int | None:
    """The largest position of the exchanges *dropped* names in *view* (`None` when it names none)."""
    facts = _facts(view)
    if facts.split is not None and facts.split[0] is dropped:
        return facts.split[1]
    return max(map(facts.positions.__getitem__, dropped)) if dropped else None


def fallback_layout(
    view: ConversationView,
    reason: str,
    *,
    fallback_keep_last: int = DEFAULT_FALLBACK_KEEP_LAST,
    rejected: tuple[str, ...] = (),
    restate: tuple[str, ...] = (),
) -> Layout:
    """The layout used when a proposal cannot be: the last exchanges plus everything forced."""
    # Seed 004: the last four exchanges, besides everything protected and the exchange in progress,
    # which "stays regardless" and so does not count among the four.
    forced = keep_forced(view)
    droppable = len(view.exchanges) - len(forced)
    count = min(fallback_keep_last, droppable)
    tail: set[str] = set()
    for exchange in reversed(view.exchanges) if fallback_keep_last > 0 and count > 0 else ():
        if exchange.id not in forced:
            tail.add(exchange.id)
            if len(tail) == count:
                break
    keep = settle(view, tail | forced, restate=bool(restate))
    ordered, dropped = _split(view, keep)
    dropped_exchanges = [view.by_id[exchange_id] for exchange_id in dropped]
    return Layout(
        keep=ordered,
        dropped=dropped,
        rejected=rejected,
        summary=Summary(fallback_note(dropped_exchanges, reason)),
        restate=restate,
        fallback_reason=reason,
    )


def fallback_note(dropped: list[Exchange], reason: str) -> str:
    """The boundary text of a fallback: what was removed, so the model knows it is gone."""
    if not dropped:
        return f'[Context compaction fell back ({reason}); nothing was removed.]'
    tokens = sum(exchange.tokens for exchange in dropped)
    span = dropped[0].id if len(dropped) == 1 else f'{dropped[0].id}–{dropped[-1].id}'
    return (
        f'[Context compaction fell back ({reason}): {len(dropped)} earlier exchange(s) ({span}, about {tokens:,} '
        'tokens) were removed without a summary. Re-read any source you still need.]'
    )


def _superseded(view: ConversationView, strategy: str | None, *, every: bool = False) -> set[str]:
    """Boundaries written by *strategy* (by any strategy of this library, with *every*) that its new proposal
    replaces."""
    if strategy is None and not every:
        return set()
    out: set[str] = set()
    for exchange in boundary_exchanges(view):
        if exchange.unfinished:
            continue
        parts = [part for message in view.messages_of(exchange) for part in message.parts]
        records = [record for part in parts if (record := our_record(part)) is not None]
        # Only a boundary made of nothing but our own records can be replaced: anything else in it
        # (a provider's text, merged-in user content) is not the strategy's to drop.
        if (
            records
            and len(records) == len(parts)
            and (every or (strategy is not None and all(_written_by(record, strategy) for record in records)))
        ):
            out.add(exchange.id)
    return out


def _written_by(record: dict[str, object], strategy: str) -> bool:
    """Whether *strategy* wrote a record, alone or wrapped (`reassert+native` and `verified(native)` were written by
    `native`)."""
    return written_by(record.get('strategy'), strategy)


def written_by(name: object, strategy: str) -> bool:
    """Whether a record's strategy *name* is *strategy*'s, alone or inside the wrappers that name it: `Reassert`
    as `reassert+<inner>`, `Verified` as `verified(<inner>)` (its compactions piled up under `Native` and a reset,
    neither reading `verified(native)` as its own)."""
    while isinstance(name, str):
        if name == strategy:
            return True
        if name.startswith('verified(') and name.endswith(')'):
            name = name[len('verified(') : -1]
        elif '+' in name:
            name = name.partition('+')[2]
        else:
            return False
    return False


def settle(view: ConversationView, keep: set[str], *, restate: bool = False) -> set[str]:
    """*keep* adjusted so the history it gives never has a model turn right after another.

    Dropping a user turn while keeping the answers on both sides of it would put two responses side
    by side. Where that happens the latest request-only exchange in the gap (the question) is kept as
    well; when the gap has none, the later answer is dropped too unless it is forced, and only then is
    the whole gap kept. Each step keeps or drops one more exchange, so this ends.
    """
    keep = set(keep)
    exchanges = view.exchanges
    # Unfinished exchanges are forced: the first one is found among the few of those.
    unfinished = first_unfinished(view)
    for _ in range(2 * len(exchanges) + 1):
        kept = kept_positions(view, keep)
        position = _response_after_response(view, kept, unfinished, restate)
        if position is None:
            return keep
        at = bisect_left(kept, position)
        earlier = kept[at - 1] if at else -1
        gap = exchanges[earlier + 1 : position]
        questions = [e for e in gap if _roles(view, e) == (False, False)]
        exchange = exchanges[position]
        if questions:
            keep.add(questions[-1].id)
        elif not exchange.forced:
            keep.discard(exchange.id)
        else:
            keep.update(e.id for e in gap)
    return keep


def _roles(view: ConversationView, exchange: Exchange) -> tuple[bool, bool]:
    """Whether *exchange* starts with a response, and whether it ends with one (a provider compaction aside)."""
    first = view.messages[exchange.refs[0][0]]
    last = view.messages[exchange.refs[-1][0]]
    return isinstance(first, ModelResponse), isinstance(last, ModelResponse) and not is_compaction_response(last)


def _response_after_response(view: ConversationView, kept: list[int], unfinished: int, restate: bool) -> int | None:
    """Position of the first kept exchange that would follow a response directly, as `apply_layout` lays it out.

    *kept* are the kept exchanges' positions, ascending: only they are read (a compaction of 25k exchanges that
    keeps a few reads a few), with the boundary's place found from the last dropped position. *unfinished* is the
    first unfinished exchange's position (the number of exchanges when there is none).
    """
    exchanges = view.exchanges
    total = len(exchanges)
    last_dropped = total - 1
    for position in reversed(kept):  # the kept positions at the very end are skipped to the last dropped one
        if position != last_dropped:
            break
        last_dropped -= 1
    boundary_at = min(last_dropped + 1 if last_dropped >= 0 else unfinished, unfinished)
    after_response = False
    previous = -1
    for position in kept:
        # The boundary and a restatement are requests: one laid out between the previous kept exchange and
        # this one (or right before this one) ends any response before it.
        if previous < boundary_at <= position or (restate and previous < unfinished <= position):
            after_response = False
        starts, ends = _roles(view, exchanges[position])
        if starts and after_response:
            return position
        after_response = ends
        previous = position
    return None


@dataclass(frozen=True)
class Skipped:
    """Why a crossing led to no compaction (the history is sent as it was)."""

    reason: str
    """`nothing to drop`, `below minimum saving`, `declined` (the strategy chose not to), `grew` or `shape`."""

    detail: str | None = None
    """What was measured."""


@dataclass(frozen=True)
class Outcome:
    """The compacted history and the record its boundary carries."""

    messages: list[ModelMessage]
    """The new history."""

    record: CompactionRecord
    """What happened."""

    error: Exception | None = None
    """The compactor's exception behind a fallback, if one raised."""


def decide(
    proposal: Proposal,
    view: ConversationView,
    build: Callable[[Layout], Outcome],
    *,
    fallback_keep_last: int = DEFAULT_FALLBACK_KEEP_LAST,
) -> Outcome | Skipped:
    """Every layout rule, applied once and in this order; the result is what is sent.

    1. A declined proposal, or one built with `Proposal.keep`/`drop_all` that keeps every exchange, is
       respected: nothing changes.
    2. The proposal is validated (`validate`); a malformed one, or a parsed reply that drops nothing,
       gets the fallback layout. A layout that removes nothing and restates nothing is no compaction.
    3. *build* lays the history out and measures it. A history that would not be smaller than before
       gets the fallback layout; if that is not smaller either, nothing changes.
    4. A history whose last step (the tool loop the next request continues) would be one whose thinking was
       forgotten, and was not before, gets the fallback layout; if that has it too, nothing changes.
    5. A history that breaks the provider shape (pairing, roles) is never sent: nothing changes.
    """
    if proposal.declined is not None:
        return Skipped('declined', proposal.declined)
    layout = validate(proposal, view, fallback_keep_last=fallback_keep_last)
    if not layout.dropped and not layout.restate and layout.fallback_reason is None:
        if proposal.explicit:
            return Skipped('declined', 'the proposal keeps every exchange')
        # A compactor that keeps everything while the request is over the trigger would be asked again
        # at every step: the runtime has the last word and falls back.
        layout = fallback_layout(view, 'kept_all', fallback_keep_last=fallback_keep_last)
    if not layout.dropped and not layout.restate:
        if proposal.malformed is not None:
            # Said, or a strategy that fails on every history this short would be silent (its error lost).
            failure = f'{proposal.malformed}: {proposal.detail}' if proposal.detail else proposal.malformed
            return Skipped('nothing to drop', f'the proposal failed ({failure}) and the fallback removes no exchange')
        return Skipped('nothing to drop', 'neither the proposal nor the fallback removes an exchange')
    outcome = build(layout)
    if _grew(outcome):
        # A compaction that does not shrink the history (a summary longer than what it replaces) is
        # worse than none: fall back, and give up if that does not shrink it either.
        smaller = replace(fallback_layout(view, 'grew', fallback_keep_last=fallback_keep_last), restate=layout.restate)
        if not smaller.dropped:
            return Skipped('grew', 'the compaction would not make the history smaller')
        outcome = build(smaller)
        if _grew(outcome):
            return Skipped('grew', 'the compaction would not make the history smaller')
    if _exposes_forgotten(outcome.messages, view.messages):
        # The layout made a step whose thinking `ForgetReasoning` dropped (it had ended an earlier turn, or was
        # followed by one) the last one before the next request: a provider that signs thinking reads it as the
        # running tool loop and refuses it without its thinking block (Anthropic's 400). The fallback keeps the
        # newest exchanges, whose last step is the one the history ends with.
        fallback = replace(
            fallback_layout(view, 'reasoning', fallback_keep_last=fallback_keep_last), restate=layout.restate
        )
        if not fallback.dropped:
            return Skipped('shape', 'the compaction would end on a step whose thinking was forgotten')
        outcome = build(fallback)
        if _grew(outcome) or _exposes_forgotten(outcome.messages, view.messages):
            return Skipped('shape', 'the compaction would end on a step whose thinking was forgotten')
    if problems := shape_problems(outcome.messages, before=view.messages):
        # Segmentation keeps pairs inside exchanges and `settle` orders roles, so this is a last line
        # of defence: send the history as it was rather than one a provider would reject.
        return Skipped('shape', '; '.join(problems[:5]))
    return outcome


def _exposes_forgotten(messages: Sequence[ModelMessage], before: Sequence[ModelMessage]) -> bool:
    """Whether *messages* ends on a step whose thinking was forgotten (`forgotten_loop`) that *before* did not end on
    (the same step: the same calls; a layout stamps its messages anew)."""
    exposed = forgotten_loop(messages)
    if exposed is None:
        return False
    was = forgotten_loop(before)
    return was is None or _call_ids(was) != _call_ids(exposed)


def _call_ids(message: ModelResponse) -> list[str]:
    return [part.tool_call_id for part in message.parts if isinstance(part, ToolCallPart)]


def _grew(outcome: Outcome) -> bool:
    return outcome.record.tokens_after >= outcome.record.tokens_before
