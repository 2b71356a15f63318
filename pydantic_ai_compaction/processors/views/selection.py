"""Request-only selection (seed 003, condition C): the persisted history stays whole, each request gets a subset.

`BoundedSelection` sends a deterministic lexical-and-recency selection of whole bundles. The bundling
and scoring here are shared with curation (`curation.py`) and orientation (`orientation.py`), which
build on the same bundles.

A bundle is an exchange of the runtime's segmentation: causally linked messages kept together (a call
with its result, a user turn with its answer). The opening request and the current request are always
sent and sit outside the budget.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import filterfalse, pairwise
from typing import TYPE_CHECKING

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.types import Exchange, PartRef
from pydantic_ai_compaction.runtime.checks import check_callable, check_int, check_number
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.instructions import tool_provided
from pydantic_ai_compaction.runtime.memo import IdentityMemo
from pydantic_ai_compaction.runtime.project import Unchanged
from pydantic_ai_compaction.runtime.project import project as checked_request
from pydantic_ai_compaction.runtime.segment import ConversationView, is_restatement, segment
from pydantic_ai_compaction.runtime.shape import ShapeCheck
from pydantic_ai_compaction.runtime.transcript import render_messages, user_text

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

STOP_WORDS = frozenset(
    [
        'a',
        'an',
        'and',
        'are',
        'as',
        'at',
        'be',
        'but',
        'by',
        'can',
        'could',
        'did',
        'do',
        'does',
        'for',
        'from',
        'had',
        'has',
        'have',
        'how',
        'i',
        'if',
        'in',
        'into',
        'is',
        'it',
        'its',
        'me',
        'my',
        'no',
        'not',
        'of',
        'on',
        'or',
        'our',
        'please',
        'should',
        'so',
        'than',
        'that',
        'the',
        'their',
        'them',
        'then',
        'there',
        'these',
        'they',
        'this',
        'to',
        'us',
        'was',
        'we',
        'were',
        'what',
        'when',
        'where',
        'which',
        'who',
        'why',
        'will',
        'with',
        'would',
        'you',
        'your',
    ]
)
"""A fixed stop-word list: selection must not depend on anything that varies between runs."""

_TERM_BYTES = bytes(byte if byte in b'abcdefghijklmnopqrstuvwxyz0123456789_' else 0x20 for byte in range(256))
"""Every byte but those of a term (`[a-z0-9_]`) made a space."""


def terms(text: str) -> list[str]:
    """Lowercase terms without stop words: the runs of `[a-z0-9_]` in the lowercased text, in order.

    Found in C-level passes over the text (a character that is not ASCII becomes `?`, then every character that is
    not in a term a space, then the text is split), several times faster on a tool result than the pattern's
    `findall`, whose terms these are (tested on any text).
    """
    words = text.lower().encode('ascii', 'replace').translate(_TERM_BYTES).decode('ascii').split()
    return list(filterfalse(STOP_WORDS.__contains__, words))


def current_request_text(messages: Sequence[ModelMessage]) -> str:
    """The latest prompt the user wrote: what the selection is for (content a tool attached is not it)."""
    for message in reversed(messages):
        prompts = user_prompts(message)
        if prompts is not None:
            return prompts
    return ''


def user_prompts(message: ModelMessage) -> str | None:
    """The text the user wrote in *message* (its prompts joined by lines), or `None` when it holds none."""
    if not isinstance(message, ModelRequest):
        return None
    prompts = [
        user_text(p)
        for p in message.parts
        if isinstance(p, UserPromptPart) and not is_restatement(p) and not tool_provided(message, p)
    ]
    return '\n'.join(prompts) if prompts else None


@dataclass(frozen=True)
class Bundle:
    """Causally connected exchanges kept together: a user request with its whole response episode.

    A bundle starts at a user turn and holds every tool call, result and answer up to the next user
    turn, so a question is never sent without its answer. The opening request, an earlier compaction
    and a restatement stand alone (they are always sent); what follows them until the next user turn
    (the opening's answer, work whose request was compacted away) is a bundle of its own.
    """

    id: str
    """The id of its first exchange; curators name bundles by it."""

    exchanges: tuple[Exchange, ...]
    """Its exchanges, in order."""

    tokens: int
    """Estimated tokens of its messages."""

    forced: bool
    """Always sent, outside the budget: protected content, or the request being answered with its running tool loop."""


_STANDALONE = frozenset({'opening', 'boundary', 'restatement'})


def bundles(view: ConversationView) -> tuple[Bundle, ...]:
    """The view's exchanges grouped into bundles (a view over the runtime's segmentation, which stays as it is)."""
    groups: list[list[Exchange]] = []
    for exchange in view.exchanges:
        if _opens_bundle(exchange, is_user_request(view, exchange), groups[-1][0] if groups else None):
            groups.append([exchange])
        else:
            groups[-1].append(exchange)
    # The request being answered and its running tool loop are always sent (seed 003 protected the current
    # request; its checkpoints were answer-only, so there was no loop to cut into).
    current = next(
        (index for index in range(len(groups) - 1, -1, -1) if is_user_request(view, groups[index][0])), len(groups)
    )
    return tuple(
        Bundle(
            id=group[0].id,
            exchanges=tuple(group),
            tokens=sum(e.tokens for e in group),
            forced=index >= current or any(e.forced for e in group),
        )
        for index, group in enumerate(groups)
    )


def _opens_bundle(exchange: Exchange, user_request: bool, previous: Exchange | None) -> bool:
    """Whether *exchange* starts a bundle, *previous* being the first exchange of the bundle before it."""
    if exchange.kind in _STANDALONE or user_request or previous is None:
        return True
    return previous.kind in _STANDALONE  # the opening's answer, or work after a boundary: its own bundle


def is_user_request(view: ConversationView, exchange: Exchange) -> bool:
    """Whether *exchange* opens a bundle: the opening, or a turn holding text the user wrote.

    A user-role part that a tool attached to its result (`ToolReturn(content=...)`) sits in the request
    that carries the tool return; it is part of the running episode, not a new request.
    """
    if exchange.kind == 'opening':
        return True
    if exchange.kind != 'turn':
        return False
    for index, parts in exchange.refs:
        message = view.messages[index]
        chosen = message.parts if parts is None else [message.parts[p] for p in parts]
        if any(isinstance(p, UserPromptPart) and not tool_provided(message, p) for p in chosen):
            return True
    return False


def current_user_request(view: ConversationView) -> Exchange | None:
    """The exchange holding the user request being answered (the latest one), if any."""
    return next((e for e in reversed(view.exchanges) if is_user_request(view, e)), None)


def bundle_of(found: Sequence[Bundle]) -> dict[str, Bundle]:
    """The bundle each exchange id belongs to."""
    return {e.id: bundle for bundle in found for e in bundle.exchanges}


_TERMS: IdentityMemo[tuple[Counter[str], str, int]] = IdentityMemo()
"""Bundle terms by the identity of the bundle's parts (weak: never keeps a history alive): their counts, the terms
joined (for phrases) and how many there are."""


def bundle_terms(view: ConversationView, bundle: Bundle) -> tuple[Counter[str], str]:
    """A bundle's term counts and its terms joined (for phrases), memoized by the identity of its parts.

    Parts are reused as the same objects from request to request, so after the first request only new
    bundles are tokenized: selection then costs O(new messages) in tokenizing.
    """
    counts, text, _ = _bag(view, bundle)
    return counts, text


def _bag(view: ConversationView, bundle: Bundle) -> tuple[Counter[str], str, int]:
    """`bundle_terms` and the number of terms (their counts summed once, not on every ranking: a long tool loop's
    bundle holds millions)."""
    messages = [m for e in bundle.exchanges for m in view.messages_of(e)]
    parts = tuple(part for message in messages for part in message.parts)
    cached = _TERMS.get(parts)
    if cached is not None:
        return cached
    words = terms(render_messages(messages))
    return _TERMS.put(parts, (Counter(words), ' '.join(words), len(words)))


def rank(view: ConversationView, candidates: Sequence[Bundle], request: str) -> list[tuple[str, float]]:
    """Bundles scored by TF-IDF against the request plus an exact-phrase bonus, best first (ties: newest first)."""
    wanted = terms(request)
    if not wanted:
        return []
    bags = {b.id: _bag(view, b) for b in candidates}
    documents = max(len(bags), 1)
    unique = set(wanted)
    # Document frequency once per query term, not once per bundle and term.
    frequency = {term: sum(1 for bag, _, _ in bags.values() if term in bag) for term in unique}
    idf = {term: math.log((1 + documents) / (1 + frequency[term])) + 1 for term in unique}
    phrases = [' '.join(pair) for pair in pairwise(wanted)]
    scored: list[tuple[str, float]] = []
    for position, bundle in enumerate(candidates):
        bag, text, count = bags[bundle.id]
        total = max(count, 1)
        score = sum((bag[term] / total) * idf[term] for term in unique if bag[term])
        score += sum(0.5 for phrase in phrases if phrase in text)
        if score > 0:
            scored.append((bundle.id, score + position * 1e-9))
    scored.sort(key=lambda item: -item[1])
    return scored


def select(view: ConversationView, request: str, budget: int, *, retrieve: int = 12, share: float = 0.3) -> set[str]:
    """Exchange ids of the bundles to send: up to `retrieve` relevant bundles within `share` of the budget,
    then the newest bundles that fit (seed 003's condition C). Forced bundles are sent anyway, outside it."""
    return {
        e.id
        for bundle in choose(
            view, [b for b in bundles(view) if not b.forced], request, budget, retrieve=retrieve, share=share
        )
        for e in bundle.exchanges
    }


def choose(
    view: ConversationView, candidates: Sequence[Bundle], request: str, budget: int, *, retrieve: int, share: float
) -> list[Bundle]:
    """`select`'s choice among *candidates* (the bundles not always sent), in the order it took them."""
    by_id = {b.id: b for b in candidates}
    chosen: list[Bundle] = []
    used = 0
    for position, (bundle_id, _) in enumerate(rank(view, candidates, request)[:retrieve]):
        bundle = by_id[bundle_id]
        # The first retrieved bundle may exceed its share as long as it fits the whole budget.
        limit = budget if position == 0 else int(share * budget)
        if used + bundle.tokens <= limit:
            chosen.append(bundle)
            used += bundle.tokens
    for bundle in reversed(candidates):
        if bundle not in chosen and used + bundle.tokens <= budget:
            chosen.append(bundle)
            used += bundle.tokens
    return chosen


def project(view: ConversationView, chosen: set[str], orientation: str | None = None) -> list[ModelMessage]:
    """Opening, chosen bundles in chronological order, the orientation, then the current request.

    A bundle is sent whole when any of its exchange ids is in *chosen*, and forced bundles always are.
    The orientation goes right before the current user turn (after the system prompt when that turn is
    the opening), so it stays in place through that turn's tool loop and the prefix before it can be cached.
    """
    found = bundles(view)
    keep = {e.id for b in found if b.forced or any(e.id in chosen for e in b.exchanges) for e in b.exchanges}
    out: list[ModelMessage] = []
    orientation_added = orientation is None
    current = current_user_request(view)
    anchor = current.id if current is not None else None
    for exchange in view.exchanges:
        at_anchor = exchange.id == anchor if anchor is not None else exchange.unfinished
        if not orientation_added and at_anchor:
            orientation_added = True
            if exchange.kind == 'opening':
                out.extend(_after_system_prompt(view.messages_of(exchange), orientation or ''))
                continue
            out.append(ModelRequest(parts=[UserPromptPart(orientation or '')]))
        if exchange.id in keep:
            out.extend(view.messages_of(exchange))
    if not orientation_added:
        out.append(ModelRequest(parts=[UserPromptPart(orientation or '')]))
    return out


def _after_system_prompt(messages: list[ModelMessage], orientation: str) -> list[ModelMessage]:
    """The opening with the orientation inserted after its system prompt, before the user's first words."""
    out = list(messages)
    for index, message in enumerate(out):
        if isinstance(message, ModelRequest):
            parts = list(message.parts)
            position = next((i for i, p in enumerate(parts) if not isinstance(p, SystemPromptPart)), len(parts))
            parts.insert(position, UserPromptPart(orientation))
            out[index] = replace(message, parts=parts)
            return out
    return [ModelRequest(parts=[UserPromptPart(orientation)]), *out]


def _reused(previous: ConversationView | None, view: ConversationView) -> int:
    """How many leading exchanges of *view* are those of the *previous* one: the same objects, or equal copies
    segmentation marked on the same exchange (the current turn, marked again on every request), which share its
    `refs` tuple and so its messages.

    Segmentation places an exchange it remembers only after the same objects (`ConversationView.copies`), so the
    last shared object is looked for from the end, where a history that only grew differs, and before it only
    the marked copies are compared: an unchanged prefix costs no step per exchange.
    """
    if previous is None:
        return 0
    before, after = previous.exchanges, view.exchanges
    old, new = _copies(previous), _copies(view)
    if old is None or new is None:
        return _reused_by_identity(before, after)
    count = min(len(before), len(after))
    shared = 0
    position, step = count - 1, 1
    while position >= 0:
        if before[position] is after[position]:
            shared = position + 1
            break
        position = min(position - 1, count - 1 - step)
        step *= 2
    for position in sorted({*old, *new}):
        if position < shared and not _same_exchange(before[position], after[position]):
            return position
    position = shared
    while position < count and _same_exchange(before[position], after[position]):
        position += 1
    return position


def _copies(view: ConversationView) -> tuple[int, ...] | None:
    """The positions of *view*'s marked copies, when segmentation's note applies to its exchanges."""
    note = view.copies
    return note[1] if note is not None and note[0] is view.exchanges else None


def _same_exchange(before: Exchange, now: Exchange) -> bool:
    return before is now or (before.refs is now.refs and before == now)


def _reused_by_identity(previous: tuple[Exchange, ...], exchanges: tuple[Exchange, ...]) -> int:
    """`_reused` for views without segmentation's note: compared position by position (in C, then each
    position that differs)."""
    same = list(map(operator.is_, previous, exchanges))
    position = 0
    while True:
        try:
            position = same.index(False, position)
        except ValueError:
            return len(same)
        if not _same_exchange(previous[position], exchanges[position]):
            return position
        position += 1


class _Selecting:
    """What a run's last selection computed, extended for the next request instead of recomputed.

    Everything is kept per exchange of the last view, and an exchange of the next view that is the same
    the same object as the one at its position before (or an equal copy sharing its `refs`, see `_reused`) is
    taken as it was: segmentation hands out the same exchange only for the same messages (it reuses the
    exchanges before its cut only when the history starts with the messages it segmented), so the bundles,
    fragments, prompts and projected messages derived from it are still those. Only the
    exchanges from the first one that differs, and the messages they cover, are read again. Bundle
    choices are reused while the candidates and the request stay the same (a tool loop); a new user
    turn ranks the candidates again. The result is always the one `bundles`, `current_request_text`,
    `select` and `project` give for the same view.
    """

    def __init__(self) -> None:
        self.view: ConversationView | None = None
        """The last view; `None` until a selection completed (then nothing is reused)."""
        self.user: list[bool] = []
        """Per exchange: whether it is a user request (`is_user_request`)."""
        self.fragments: list[list[ModelMessage]] = []
        """Per exchange: its messages (`messages_of`), built once."""
        self.tokens: list[int] = [0]
        """Running totals of the exchanges' tokens (one more entry than exchanges)."""
        self.forced: list[int] = [0]
        """Running counts of forced exchanges."""
        self.starts: list[int] = []
        """Position of each bundle's first exchange."""
        self.requests: list[int] = []
        """Bundles that open with a user request."""
        self.bundles: list[Bundle] = []
        """The bundles (the last one's `forced` depends on where the current request is); those from the current
        request's on are always sent and hold no exchanges here."""
        self.current = 0
        """The bundle of the request being answered (every bundle from it on is sent)."""
        self.candidates: list[int] = []
        """Bundles that may be left out (not forced), by position."""
        self.prompts: list[tuple[int, str]] = []
        """(message index, text) of each message holding a prompt the user wrote, in order."""
        self.read = 0
        """Messages read for prompts."""
        self.key: tuple[str, int, int, float] | None = None
        """The request and settings the chosen bundles were picked for."""
        self.chosen: set[str] = set()
        """Ids of the chosen bundles."""
        self.sent: list[bool] = []
        """Per bundle: whether it was sent."""
        self.out: list[ModelMessage] = []
        """The projection."""
        self.offsets: list[int] = [0]
        """Per exchange: where its messages start in the projection (one more entry than exchanges)."""
        self.identical = 0
        """Leading exchanges whose messages the projection holds exactly where the history does (each sent whole,
        the same message objects at the same positions): when that is every exchange and the projection is as
        long as the history, the projection is the history itself and is not copied."""
        self.check = ShapeCheck()
        """The projection's shape check, extended the same way."""
        self.returned: Sequence[ModelMessage] = ()
        """The last projection handed out (what the shape check is told the next one extends)."""

    def selection(
        self, view: ConversationView, budget: int, *, retrieve: int, share: float
    ) -> tuple[Sequence[ModelMessage], str, bool]:
        """The projection, the request text and whether the projection is the history itself (the same message
        objects in the same order), for a view `segment` made.

        The projection is handed out as a sequence nothing changes afterwards: the view's own `messages` tuple
        when it is the history itself (no copy of a history sent whole, a long tool loop), else a copy.
        """
        previous, self.view = self.view, None  # until this completes: a failure leaves nothing to reuse
        exchanges = view.exchanges
        reused = _reused(previous, view)
        self._prompts(view, reused)
        rebuilt = self._bundles(view, reused)
        request = self.prompts[-1][1] if self.prompts else ''
        first = self._choose(view, request, rebuilt, (request, budget, retrieve, share), budget, retrieve, share)
        start = min(reused, self.starts[first] if first < len(self.starts) else len(exchanges))
        kept = self.offsets[start] if previous is not None else 0  # before `_project` truncates the offsets
        self._project(view, start)
        whole = self.identical == len(exchanges) and len(self.out) == len(view.messages)
        out: Sequence[ModelMessage] = view.messages if whole else list(self.out)
        # The shape check of this projection compares only what follows the messages kept from the last one.
        self.check.kept(kept, since=self.returned)
        self.returned = out
        self.view = view
        return out, request, whole

    def _prompts(self, view: ConversationView, reused: int) -> None:
        """The messages holding user prompts, read again from the first one a changed exchange covers."""
        tail = view.exchanges[reused:]
        stable = min((ref[0] for exchange in tail for ref in exchange.refs), default=len(view.messages))
        stable = min(stable, self.read, len(view.messages))
        del self.prompts[bisect_left(self.prompts, (stable, '')) :]
        for index in range(stable, len(view.messages)):
            text = user_prompts(view.messages[index])
            if text is not None:
                self.prompts.append((index, text))
        self.read = len(view.messages)

    def _bundles(self, view: ConversationView, reused: int) -> int:
        """Extend the bundles from the first changed exchange; the first bundle rebuilt."""
        exchanges = view.exchanges
        for listing in (self.user, self.fragments):
            del listing[reused:]
        for running in (self.tokens, self.forced):
            del running[reused + 1 :]
        for exchange in exchanges[reused:]:
            self.user.append(is_user_request(view, exchange))
            self.fragments.append(view.messages_of(exchange))
            self.tokens.append(self.tokens[-1] + exchange.tokens)
            self.forced.append(self.forced[-1] + exchange.forced)
        kept = bisect_left(self.starts, reused)  # bundles starting before the first changed exchange
        end = self.starts[kept] if kept < len(self.starts) else None  # where the last kept bundle ended
        del self.starts[kept:]
        del self.requests[bisect_left(self.requests, kept) :]
        for position in range(reused, len(exchanges)):
            previous = exchanges[self.starts[-1]] if self.starts else None
            if _opens_bundle(exchanges[position], self.user[position], previous):
                if self.user[position]:
                    self.requests.append(len(self.starts))
                self.starts.append(position)
        current = self.requests[-1] if self.requests else len(self.starts)
        # The last kept bundle may have grown, or hold changed exchanges (it started before the first changed one
        # and ended after it: an exchange that was in progress no longer is), and those between the old and new
        # current request changed `forced`.
        grown = end is None or end > reused or kept == len(self.starts) or self.starts[kept] != end
        rebuilt = max(0, min(kept - 1 if grown else kept, self.current, current))
        self.current = current
        starts = self.starts
        del self.bundles[rebuilt:]
        for index in range(rebuilt, len(starts)):
            start = starts[index]
            end = starts[index + 1] if index + 1 < len(starts) else len(exchanges)
            self.bundles.append(
                Bundle(
                    id=exchanges[start].id,
                    # The request being answered and what follows it are sent whole and never ranked, and are
                    # rebuilt once an earlier bundle opens the current request: their exchanges are not read
                    # (the running tool loop is not copied again on each of its steps).
                    exchanges=exchanges[start:end] if index < current else (),
                    tokens=self.tokens[end] - self.tokens[start],
                    forced=index >= current or self.forced[end] > self.forced[start],
                )
            )
        return rebuilt

    def _choose(
        self,
        view: ConversationView,
        request: str,
        rebuilt: int,
        key: tuple[str, int, int, float],
        budget: int,
        retrieve: int,
        share: float,
    ) -> int:
        """Choose the bundles again unless the candidates and the request are unchanged; the first bundle whose
        sending may differ from the last projection's."""
        dropped = bisect_left(self.candidates, rebuilt)
        unchanged = dropped == len(self.candidates)
        del self.candidates[dropped:]
        for index in range(rebuilt, len(self.bundles)):
            if not self.bundles[index].forced:
                self.candidates.append(index)
                unchanged = False
        first = rebuilt
        if not unchanged or key != self.key:
            self.key = None
            picked = choose(
                view, [self.bundles[i] for i in self.candidates], request, budget, retrieve=retrieve, share=share
            )
            chosen = {bundle.id for bundle in picked}
            if chosen != self.chosen:
                first = 0  # which bundles are sent changed: compare them all below
            self.chosen, self.key = chosen, key
        del self.sent[len(self.bundles) :]
        changed = len(self.sent)
        for index in range(first, len(self.bundles)):
            bundle = self.bundles[index]
            sent = bundle.forced or bundle.id in self.chosen
            if index < len(self.sent):
                # A bundle at the same position starts at the same exchange up to the first changed one.
                if self.sent[index] != sent and changed == len(self.sent):
                    changed = index
                self.sent[index] = sent
            else:
                self.sent.append(sent)
        return changed

    def _project(self, view: ConversationView, start: int) -> None:
        """The projection, rebuilt from exchange position *start* on."""
        out = self.out
        del out[self.offsets[start] :]
        del self.offsets[start + 1 :]
        identical = min(self.identical, start)
        starts = self.starts
        exchanges = view.exchanges
        bundle = max(0, bisect_right(starts, start) - 1)
        for position in range(start, len(exchanges)):
            while bundle + 1 < len(starts) and position >= starts[bundle + 1]:
                bundle += 1
            if self.sent[bundle]:
                if identical == position and _in_place(exchanges[position].refs, len(out)):
                    identical += 1
                out.extend(self.fragments[position])
            self.offsets.append(len(out))
        self.identical = identical


def _in_place(refs: tuple[PartRef, ...], at: int) -> bool:
    """Whether *refs* name whole messages, one after the other from index *at* (their fragments are those messages)."""
    return all(parts is None and index == at + offset for offset, (index, parts) in enumerate(refs))


@dataclass
class BoundedSelection(AbstractCapability[AgentDepsT]):
    """Deterministic lexical-and-recency projection of whole bundles, under a history budget.

    Example:
        ```python
        agent = Agent(model, capabilities=[BoundedSelection(budget=10_000)])
        ```
    """

    budget: int = 10_000
    """Estimated tokens of history bundles per request (the opening and the request being answered, with its
    running tool loop, are excluded). Seed 003 used 10,000, and 5,000 / 20,000 for calibration."""

    retrieve: int = 12
    """Relevant bundles retrieved at most."""

    retrieval_share: float = 0.3
    """Share of the budget reserved for the relevant bundles."""

    observer: EventObserver | None = None
    """Called with a `CompactionEvent` for every request this view changed (and every projection refused)."""

    _run: _Selecting = field(init=False, repr=False, compare=False)
    """Per run: the last request's selection, extended for the next one (so a request costs about its new messages).
    It holds the last request's messages until the next request; a run's copy (`for_run`) goes with the run."""

    def __post_init__(self) -> None:
        check_int('BoundedSelection', 'budget', self.budget, minimum=1)
        check_int('BoundedSelection', 'retrieve', self.retrieve, minimum=0)
        check_number(
            'BoundedSelection', 'retrieval_share', self.retrieval_share, minimum=0, maximum=1, exclusive_minimum=True
        )
        check_callable('BoundedSelection', 'observer', self.observer, arguments=1)
        self._run = _Selecting()

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """A copy with its own memory of the last selection for this run."""
        return replace(self)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Send the selection; the persisted history is not touched."""

        async def build() -> Sequence[ModelMessage] | Unchanged:
            projected, whole = self._select(request_context.messages, ctx.prompt)
            # A projection that is the history itself sends the request as it arrived (no copy of it).
            return Unchanged(projected) if whole else projected

        return await checked_request(
            'BoundedSelection',
            ctx,
            request_context,
            build,
            reason='selection',
            observer=self.observer,
            checker=self._run.check,
        )

    def selection(self, messages: Sequence[ModelMessage], *, prompt: object = None) -> list[ModelMessage]:
        """What this selection sends for *messages* (unchecked: `before_model_request` checks it).

        Always `project(view, select(view, current_request_text(messages), ...))` for `view = segment(messages)`,
        computed from the previous call's result where the history only grew.
        """
        return list(self._select(messages, prompt)[0])

    def _select(self, messages: Sequence[ModelMessage], prompt: object) -> tuple[Sequence[ModelMessage], bool]:
        """The projection (a sequence nothing changes afterwards) and whether it is *messages* itself."""
        view = segment(messages, prompt=prompt)
        projected, _, whole = self._run.selection(view, self.budget, retrieve=self.retrieve, share=self.retrieval_share)
        return projected, whole
