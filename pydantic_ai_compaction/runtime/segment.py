"""Segmentation: a message list becomes an ordered list of exchanges with stable ids.

An exchange is the smallest unit that can be dropped without breaking a provider's rules: a
response together with every part of a later request that answers its tool calls (parallel calls
and retries included), a user turn, an earlier compaction boundary, or a restatement. Links between
a call and its return form a graph; any exchange whose span covers another's start is merged with
it, so a deferred return that arrives several messages later keeps the whole span together.

Requests are split at part level because pydantic-ai merges consecutive requests when a history
is passed to a new run: a request can then hold tool returns for one exchange, a boundary, and a
user prompt for the next.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

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
    TextContent,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai_harness.compaction import estimate_token_count, is_pinned

from pydantic_ai_compaction.protocols.metadata import (
    exchange_stamp,
    is_restatement_mark,
    record_from_metadata,
)
from pydantic_ai_compaction.protocols.types import Exchange, ExchangeKind, PartRef
from pydantic_ai_compaction.runtime.memo import IdentityMemo
from pydantic_ai_compaction.runtime.pairing import answers_call as _answers_call

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


def is_restatement(part: object) -> bool:
    """Whether *part* is a restatement `Reassert` wrote."""
    if not isinstance(part, UserPromptPart) or isinstance(part.content, str):
        return False
    return any(isinstance(item, TextContent) and is_restatement_mark(item.metadata) for item in part.content)


def message_stamp(message: ModelMessage) -> str | None:
    """The exchange id stamped on a message's metadata, if any."""
    return exchange_stamp(message.metadata)


@dataclass
class _Unit:
    kind: ExchangeKind
    parts: dict[int, list[int]] = field(default_factory=dict[int, list[int]])
    """message index → part indices (sorted)."""
    stamp: str | None = None

    def add(self, message_index: int, part_index: int) -> None:
        self.parts.setdefault(message_index, []).append(part_index)

    def start(self) -> tuple[int, int]:
        first = min(self.parts)
        return first, min(self.parts[first], default=-1)

    def end(self) -> tuple[int, int]:
        last = max(self.parts)
        return last, max(self.parts[last], default=-1)


@dataclass(frozen=True)
class ConversationView:
    """A segmented history: what strategies read and the runtime validates against."""

    messages: tuple[ModelMessage, ...]
    """The history, unchanged."""

    exchanges: tuple[Exchange, ...]
    """Its exchanges, in order."""

    next_id: int
    """The next exchange number to hand out."""

    by_id: dict[str, Exchange] = field(default_factory=dict[str, Exchange], compare=False)
    """Exchanges keyed by id."""

    def __post_init__(self) -> None:
        self.by_id.update({exchange.id: exchange for exchange in self.exchanges})

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
        """Boundary records this library wrote, oldest first."""
        found: list[dict[str, Any]] = []
        for message in self.messages:
            for part in message.parts:
                record = our_record(part)
                if record is not None:
                    found.append(record)
        return found


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

    Args:
        messages: The history, oldest first.
        protect: Optional user predicate; exchanges it returns `True` for are always kept.
        prompt: The run's user prompt (`RunContext.prompt`), when known: a user part with this content is
            the user speaking even where it follows tool returns in the same request.
    """
    units = _build_units(messages, prompt)
    groups = _merge_linked(units)
    next_number, stamped_numbers = _id_counter(messages, units)
    token_counts = [message_tokens(message) for message in messages]

    exchanges: list[Exchange] = []
    used: set[str] = set()
    for group_index, group in enumerate(groups):
        merged = _merge_parts(group)
        first = group[0]
        kind: ExchangeKind = first.kind
        if any(unit.kind == 'boundary' for unit in group):
            kind = 'boundary'
        if group_index == 0:
            exchange_id = 'g0'
        elif first.stamp is not None and first.stamp not in used and exchange_number(first.stamp) is not None:
            exchange_id = first.stamp
        else:
            next_number += 1
            while next_number in stamped_numbers:
                next_number += 1
            exchange_id = f'g{next_number}'
        used.add(exchange_id)
        refs = _refs(messages, merged)
        exchanges.append(
            Exchange(
                id=exchange_id,
                kind=kind,
                refs=refs,
                tokens=_tokens(messages, refs, token_counts),
                protected=_protection(kind, messages, refs, group_index),
            )
        )

    exchanges = _mark_unfinished(messages, exchanges)
    exchanges = _protect_current_turn(exchanges)
    if protect is not None:
        exchanges = _apply_predicate(messages, exchanges, protect)
    highest = max([exchange_number(e.id) or 0 for e in exchanges] + [next_number, 0])
    return ConversationView(messages=tuple(messages), exchanges=tuple(exchanges), next_id=highest + 1)


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
    if len(parts) < 2 or not isinstance(parts[-1], UserPromptPart):
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


def _utc(moment: datetime) -> datetime:
    """*moment* comparable with any other: a history loaded from JSON can mix naive and aware timestamps."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _build_units(messages: Sequence[ModelMessage], prompt: object = None) -> list[_Unit]:
    units: list[_Unit] = []
    owner_of_call: dict[str, int] = {}
    last_response: int | None = None
    retrying: int | None = None
    opening: int | None = None
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            boundary = any(isinstance(part, CompactionPart) for part in message.parts)
            calls = [part for part in message.parts if isinstance(part, ToolCallPart)]
            if retrying is not None and not boundary:
                # The model's answer to a retry belongs with the call it retries.
                position = retrying
                units[position].kind = 'tools' if calls or units[position].kind == 'tools' else units[position].kind
            else:
                kind: ExchangeKind = 'boundary' if boundary else ('tools' if calls else 'response')
                units.append(_Unit(kind, stamp=message_stamp(message) or _boundary_stamp(message)))
                position = len(units) - 1
            units[position].parts[index] = list(range(len(message.parts)))
            last_response = position
            for call in calls:
                owner_of_call[call.tool_call_id] = position
            continue

        if not message.parts:
            # A request with no parts (an agent with `instructions=` only, or `run(None, ...)` continuing
            # after a response) still belongs to exactly one exchange: the opening when it is first,
            # else the exchange it continues. Dropping it would leave two responses side by side or a
            # history that ends on a response.
            owner = len(units) - 1 if units else None
            if owner is None:
                units.append(_Unit('opening', stamp=message_stamp(message)))
                opening = owner = 0
            units[owner].parts[index] = []
            retrying = None
            continue

        retries_only = True
        run_kind: ExchangeKind | None = None
        owned: list[int] = []
        tool_owner: int | None = None
        from_tools = tool_content_parts(message, prompt)
        for part_index, part in enumerate(message.parts):
            call_id = _answers_call(part)
            if call_id is not None and (owner := owner_of_call.get(call_id, last_response)) is not None:
                units[owner].add(index, part_index)
                retries_only = retries_only and _is_retry(part)
                tool_owner = owner
                continue
            if _is_feedback(part) and last_response is not None:
                # Retry feedback (and a legacy retry prompt without a tool name) answers the model's
                # last response; it is not the user speaking.
                units[last_response].add(index, part_index)
                continue
            if part_index in from_tools and tool_owner is not None:
                # `ToolReturn(content=...)` puts its content in a user part right after the returns of the
                # same request: it is tool output, and travels with the call that produced it.
                units[tool_owner].add(index, part_index)
                retries_only = False
                continue
            retries_only = False
            if isinstance(part, CompactionPart):
                kind = 'boundary'
            elif is_restatement(part):
                kind = 'restatement'
            elif opening is None or (run_kind == 'opening' and units[opening].parts.get(index)):
                # The first request's own content (up to any boundary merged into it) is the opening.
                kind = 'opening'
            else:
                kind = 'turn'
            if kind != run_kind:
                units.append(_Unit(kind))
                owned.append(len(units) - 1)
                if kind == 'opening':
                    opening = len(units) - 1
                run_kind = kind
            units[owned[-1]].add(index, part_index)
        retrying = last_response if retries_only and last_response is not None else None
        for position in owned:
            unit = units[position]
            if len(unit.parts[index]) == len(message.parts):
                unit.stamp = message_stamp(message)
            if unit.kind == 'boundary' and unit.stamp is None:
                unit.stamp = _boundary_stamp(message)
    return units


def _is_feedback(part: ModelRequestPart) -> bool:
    """Retry feedback that answers the model's last response rather than a tool call."""
    if isinstance(part, RetryFeedbackPart):
        return True
    return isinstance(part, RetryPromptPart) and part.tool_name is None  # pyright: ignore[reportDeprecated]


def _is_retry(part: ModelRequestPart) -> bool:
    """A return that asks the model to call again rather than delivering a result."""
    return (isinstance(part, ToolReturnPart) and part.outcome == 'retried') or isinstance(
        part,
        RetryPromptPart,  # pyright: ignore[reportDeprecated]
    )


def _boundary_stamp(message: ModelMessage) -> str | None:
    for part in message.parts:
        record = our_record(part)
        if record is not None and isinstance(record.get('boundary_id'), str):
            return record['boundary_id']
    return None


def _merge_linked(units: list[_Unit]) -> list[list[_Unit]]:
    """Group units whose spans interleave (a deferred return after other units) into one exchange.

    In start order, a unit joins the current group when it starts before the furthest end reached so
    far; otherwise it opens a new group. That is the connected components of the overlap graph, which
    are always contiguous runs in start order, found in one sweep (a graph library would only repeat it).
    """
    starts = [unit.start() for unit in units]
    order = sorted(range(len(units)), key=lambda position: starts[position])
    groups: list[list[_Unit]] = []
    reach_end = (-1, -1)
    for position in order:
        unit = units[position]
        if groups and starts[position] <= reach_end:
            groups[-1].append(unit)
        else:
            groups.append([unit])
        end = unit.end()
        if end > reach_end:
            reach_end = end
    return groups


def _merge_parts(group: list[_Unit]) -> dict[int, list[int]]:
    if len(group) == 1:
        return group[0].parts  # built in order, one entry per message
    merged: dict[int, list[int]] = {}
    for unit in group:
        for message_index, parts in unit.parts.items():
            merged.setdefault(message_index, []).extend(parts)
    return {index: sorted(set(parts)) for index, parts in sorted(merged.items())}


def _refs(messages: Sequence[ModelMessage], merged: dict[int, list[int]]) -> tuple[PartRef, ...]:
    return tuple(
        (index, None if len(parts) == len(messages[index].parts) else tuple(parts)) for index, parts in merged.items()
    )


def _id_counter(messages: Sequence[ModelMessage], units: list[_Unit]) -> tuple[int, set[int]]:
    """The highest exchange number ever handed out, from stamps and from boundary records."""
    stamped = {number for unit in units if unit.stamp and (number := exchange_number(unit.stamp)) is not None}
    highest = max(stamped, default=0)
    for message in messages:
        for part in message.parts:
            record = our_record(part)
            if record is None:
                continue
            next_id = record.get('next_id')
            if isinstance(next_id, int):
                highest = max(highest, next_id - 1)
            for key in ('kept', 'dropped'):
                for exchange_id in record.get(key) or ():
                    if isinstance(exchange_id, str) and (number := exchange_number(exchange_id)) is not None:
                        highest = max(highest, number)
    return highest, stamped


_TOKENS: IdentityMemo[int] = IdentityMemo()
"""Token estimates per message object (never keeps a message alive)."""


def message_tokens(message: ModelMessage) -> int:
    """Estimated tokens a message adds (harness's text estimate; a response at least its output tokens)."""
    cached = _TOKENS.get((message,))
    if cached is not None:
        return cached
    tokens = estimate_token_count([_without_instructions(message)])
    if isinstance(message, ModelResponse):
        tokens = max(tokens, message.usage.output_tokens)
    return _TOKENS.put((message,), tokens)


def _tokens(messages: Sequence[ModelMessage], refs: tuple[PartRef, ...], counts: list[int]) -> int:
    total = 0
    for index, parts in refs:
        if parts is None:
            total += counts[index]
            continue
        message = messages[index]
        whole = max(estimate_token_count([_without_instructions(message)]), 1)
        share = estimate_token_count([_without_instructions(fragment(messages, (index, parts)))])
        total += counts[index] * share // whole
    return total


def _without_instructions(message: ModelMessage) -> ModelMessage:
    from dataclasses import replace

    if isinstance(message, ModelRequest) and message.instructions:
        return replace(message, instructions=None)
    return message


def _protection(
    kind: ExchangeKind, messages: Sequence[ModelMessage], refs: tuple[PartRef, ...], position: int
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
        if any(isinstance(part, UserPromptPart) and is_pinned(part) for part in parts):
            return 'pinned'
        if any(isinstance(part, _BOOKKEEPING) for part in parts):
            # A tool reveal, a settings or an instruction change: pydantic-ai reads the run's state back
            # from these parts, so dropping one would, say, make a revealed tool unavailable again.
            return 'state'
    return None


def _mark_unfinished(messages: Sequence[ModelMessage], exchanges: list[Exchange]) -> list[Exchange]:
    """The exchanges in progress: every one that owns part of the last message.

    That is the response whose returns the current request carries together with that request, a new
    user turn, both when a request carries returns and new user content, or a response still waiting
    for its tool results (or suspended).
    """
    if not exchanges or not messages:
        return exchanges
    from dataclasses import replace

    last = len(messages) - 1
    in_progress = {position for position, e in enumerate(exchanges) if any(ref[0] == last for ref in e.refs)}
    return [replace(e, unfinished=True) if p in in_progress else e for p, e in enumerate(exchanges)]


def _protect_current_turn(exchanges: list[Exchange]) -> list[Exchange]:
    """The latest user turn is what the agent is working on: dropping it would lose the question itself."""
    from dataclasses import replace

    for index in range(len(exchanges) - 1, -1, -1):
        exchange = exchanges[index]
        if exchange.kind in ('turn', 'opening'):
            if exchange.protected is None:
                exchanges = [*exchanges[:index], replace(exchange, protected='current_turn'), *exchanges[index + 1 :]]
            break
    return exchanges


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
