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
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.types import Exchange
from pydantic_ai_compaction.runtime.checks import check_callable, check_int, check_number
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.instructions import tool_provided
from pydantic_ai_compaction.runtime.memo import IdentityMemo
from pydantic_ai_compaction.runtime.project import project as checked_request
from pydantic_ai_compaction.runtime.segment import ConversationView, is_restatement, segment
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

_TERM = re.compile(r'[a-z0-9_]+')


def terms(text: str) -> list[str]:
    """Lowercase terms without stop words."""
    return [t for t in _TERM.findall(text.lower()) if t not in STOP_WORDS]


def current_request_text(messages: Sequence[ModelMessage]) -> str:
    """The latest prompt the user wrote: what the selection is for (content a tool attached is not it)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            prompts = [
                user_text(p)
                for p in message.parts
                if isinstance(p, UserPromptPart) and not is_restatement(p) and not tool_provided(message, p)
            ]
            if prompts:
                return '\n'.join(prompts)
    return ''


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
        starts = exchange.kind in _STANDALONE or is_user_request(view, exchange) or not groups
        if not starts and groups[-1][0].kind in _STANDALONE:
            starts = True  # the opening's answer, or work after a boundary: its own bundle
        if starts:
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


_TERMS: IdentityMemo[tuple[Counter[str], str]] = IdentityMemo()
"""Bundle terms by the identity of the bundle's parts (weak: never keeps a history alive)."""


def bundle_terms(view: ConversationView, bundle: Bundle) -> tuple[Counter[str], str]:
    """A bundle's term counts and its terms joined (for phrases), memoized by the identity of its parts.

    Parts are reused as the same objects from request to request, so after the first request only new
    bundles are tokenized: selection then costs O(new messages) in tokenizing.
    """
    messages = [m for e in bundle.exchanges for m in view.messages_of(e)]
    parts = tuple(part for message in messages for part in message.parts)
    cached = _TERMS.get(parts)
    if cached is not None:
        return cached
    words = terms(render_messages(messages))
    return _TERMS.put(parts, (Counter(words), ' '.join(words)))


def rank(view: ConversationView, candidates: Sequence[Bundle], request: str) -> list[tuple[str, float]]:
    """Bundles scored by TF-IDF against the request plus an exact-phrase bonus, best first (ties: newest first)."""
    wanted = terms(request)
    if not wanted:
        return []
    bags = {b.id: bundle_terms(view, b) for b in candidates}
    documents = max(len(bags), 1)
    unique = set(wanted)
    # Document frequency once per query term, not once per bundle and term.
    frequency = {term: sum(1 for bag, _ in bags.values() if term in bag) for term in unique}
    idf = {term: math.log((1 + documents) / (1 + frequency[term])) + 1 for term in unique}
    phrases = [' '.join(pair) for pair in pairwise(wanted)]
    scored: list[tuple[str, float]] = []
    for position, bundle in enumerate(candidates):
        bag, text = bags[bundle.id]
        total = max(sum(bag.values()), 1)
        score = sum((bag[term] / total) * idf[term] for term in unique if bag[term])
        score += sum(0.5 for phrase in phrases if phrase in text)
        if score > 0:
            scored.append((bundle.id, score + position * 1e-9))
    scored.sort(key=lambda item: -item[1])
    return scored


def select(view: ConversationView, request: str, budget: int, *, retrieve: int = 12, share: float = 0.3) -> set[str]:
    """Exchange ids of the bundles to send: up to `retrieve` relevant bundles within `share` of the budget,
    then the newest bundles that fit (seed 003's condition C). Forced bundles are sent anyway, outside it."""
    candidates = [b for b in bundles(view) if not b.forced]
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
    return {e.id for bundle in chosen for e in bundle.exchanges}


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

    def __post_init__(self) -> None:
        check_int('BoundedSelection', 'budget', self.budget, minimum=1)
        check_int('BoundedSelection', 'retrieve', self.retrieve, minimum=0)
        check_number(
            'BoundedSelection', 'retrieval_share', self.retrieval_share, minimum=0, maximum=1, exclusive_minimum=True
        )
        check_callable('BoundedSelection', 'observer', self.observer)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Send the selection; the persisted history is not touched."""

        async def build() -> list[ModelMessage]:
            return self.selection(request_context.messages, prompt=ctx.prompt)

        return await checked_request(
            'BoundedSelection', ctx, request_context, build, reason='selection', observer=self.observer
        )

    def selection(self, messages: Sequence[ModelMessage], *, prompt: object = None) -> list[ModelMessage]:
        """What this selection sends for *messages* (unchecked: `before_model_request` checks it)."""
        view = segment(messages, prompt=prompt)
        chosen = select(
            view, current_request_text(messages), self.budget, retrieve=self.retrieve, share=self.retrieval_share
        )
        return project(view, chosen)
