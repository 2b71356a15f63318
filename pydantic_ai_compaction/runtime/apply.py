"""Layout application: the only place a history is rebuilt.

Kept messages are reused as the same objects whenever a whole message is kept, so nothing a
provider already cached changes; fragments of merged requests are rebuilt with
`dataclasses.replace`, never edited in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextContent,
    UserPromptPart,
)

from pydantic_ai_compaction.protocols.metadata import RESTATEMENT_MARK, MessageMarks
from pydantic_ai_compaction.protocols.types import METADATA_KEY, Exchange, Layout, ProviderSummary, Summary
from pydantic_ai_compaction.runtime.encoding import clean_text
from pydantic_ai_compaction.runtime.segment import ConversationView, fragment, message_stamp
from pydantic_ai_compaction.runtime.validate import first_unfinished, kept_positions, last_dropped

RESTATEMENT_HEADER = 'Instructions restated verbatim from earlier in this conversation (latest last):'
"""First line of a restatement, so the model reads the list as a record, not a new request."""


def stamped(message: ModelMessage, exchange_id: str) -> ModelMessage:
    """*message* carrying *exchange_id* in its metadata (the same object when it already does)."""
    if message_stamp(message) == exchange_id:
        return message
    return replace(message, metadata=MessageMarks(exchange=exchange_id).to_metadata(message.metadata))


def exchange_messages(view: ConversationView, exchange: Exchange, *, position: int) -> list[ModelMessage]:
    """The messages of *exchange*, stamped with its id (the opening needs no stamp).

    The first message carries the id; every response does too, so the trigger can tell a response
    that predates a compaction (its usage describes the history before it) from a new one.
    """
    out = [fragment(view.messages, ref) for ref in exchange.refs]
    if position > 0 and exchange.kind != 'boundary':
        out = [
            stamped(message, exchange.id) if index == 0 or isinstance(message, ModelResponse) else message
            for index, message in enumerate(out)
        ]
    return out


def assemble(view: ConversationView, keep: set[str]) -> list[ModelMessage]:
    """The kept exchanges' messages, in order, stamped; nothing inserted."""
    out: list[ModelMessage] = []
    for position, exchange in enumerate(view.exchanges):
        if exchange.id in keep:
            out.extend(exchange_messages(view, exchange, position=position))
    return out


def boundary_message(summary: Summary | ProviderSummary | None, record: dict[str, Any], note: str) -> ModelMessage:
    """The message holding the one `CompactionPart` a compaction leaves, with *record* (as given) in its metadata.

    The text is what this library writes into the history, so it is cleaned of lone surrogates (a
    compactor's reply may carry one): the history must stay serializable. The caller cleans *record*.
    """
    if isinstance(summary, ProviderSummary):
        parts = [
            replace(part, metadata={**(part.metadata or {}), METADATA_KEY: record})
            if isinstance(part, CompactionPart)
            else part
            for part in summary.response.parts
        ]
        return replace(summary.response, parts=parts)
    text = clean_text(summary.text if summary is not None else note)
    return ModelRequest(parts=[CompactionPart(content=text, metadata={METADATA_KEY: record})])


def restatement_message(texts: tuple[str, ...]) -> ModelRequest:
    """A user-role request restating instruction texts verbatim, marked so the next compaction replaces it."""
    body = clean_text('\n'.join([RESTATEMENT_HEADER, *(f'- {text}' for text in texts)]))
    return ModelRequest(parts=[UserPromptPart([TextContent(body, metadata={METADATA_KEY: RESTATEMENT_MARK})])])


def apply_layout(
    view: ConversationView, layout: Layout, record: dict[str, Any], *, note: str = ''
) -> list[ModelMessage]:
    """Build the compacted history, with *record* in the new boundary's metadata.

    The boundary takes the place of the last dropped exchange, so everything kept before it stays
    before it and the summary reads in chronological order; restated instructions go right before
    the exchange in progress, replacing any earlier restatement.
    """
    # Only the kept exchanges are visited (a reset of 25k exchanges keeps a handful): their positions, the first
    # unfinished one's and the last dropped one's are read from what the validator read (once per view).
    exchanges = view.exchanges
    kept = kept_positions(view, set(layout.keep))
    last = last_dropped(view, layout.dropped)
    unfinished_position = first_unfinished(view)
    boundary_at = _boundary_position(view, layout, last, unfinished_position, kept)

    out: list[ModelMessage] = []
    boundary_placed, restatement_placed = False, not layout.restate
    for position in (*kept, len(exchanges)):
        if not boundary_placed and position >= boundary_at:
            out.append(boundary_message(layout.summary, record, note))
            boundary_placed = True
        if not restatement_placed and position >= unfinished_position:
            out.append(restatement_message(layout.restate))
            restatement_placed = True
        if position == len(exchanges):
            break
        exchange = exchanges[position]
        if layout.restate and exchange.kind == 'restatement':
            continue
        out.extend(exchange_messages(view, exchange, position=position))
    return out


def apply_layout_fresh(
    view: ConversationView, layout: Layout, record: dict[str, Any], *, note: str = ''
) -> list[ModelMessage]:
    """`apply_layout` visiting every exchange, as the rule reads: what the tests check it against."""
    keep = set(layout.keep)
    positions = {exchange.id: index for index, exchange in enumerate(view.exchanges)}
    dropped_positions = [positions[exchange_id] for exchange_id in layout.dropped]
    in_progress = [index for index, exchange in enumerate(view.exchanges) if exchange.unfinished]
    unfinished_position = in_progress[0] if in_progress else len(view.exchanges)
    kept_in_order = [index for index, exchange in enumerate(view.exchanges) if exchange.id in keep]
    boundary_at = _boundary_position(
        view, layout, max(dropped_positions) if dropped_positions else None, unfinished_position, kept_in_order
    )

    out: list[ModelMessage] = []
    for position, exchange in enumerate([*view.exchanges, None]):
        if position == boundary_at:
            out.append(boundary_message(layout.summary, record, note))
        if position == unfinished_position and layout.restate:
            out.append(restatement_message(layout.restate))
        if exchange is None:
            break
        if exchange.id not in keep:
            continue
        if layout.restate and exchange.kind == 'restatement':
            continue
        out.extend(exchange_messages(view, exchange, position=position))
    return out


def _boundary_position(
    view: ConversationView, layout: Layout, last: int | None, unfinished: int, kept: Sequence[int]
) -> int:
    """Where the boundary goes among the exchanges (*kept*: the positions of those kept, in order): in place of the
    last dropped one (*last*), before the first unfinished one at the latest.

    A provider's own compaction item is where pydantic-ai and the provider start reading: everything before it but
    the standing system prompt is trimmed from the requests that follow. Kept before it, the pins and the turn being
    worked on were never sent again; so it goes as early as the history allows: after the opening request (whose
    system prompt pydantic-ai sends from there, and without which the history would start with a response), and
    after every earlier boundary kept (the provider read them, and the records must stay in the order they were
    written: the newest compaction is the last one in the history, which counting compactions relies on).
    """
    if isinstance(layout.summary, ProviderSummary):
        exchanges = view.exchanges
        earliest = 1 if exchanges and exchanges[0].kind == 'opening' else 0
        boundaries = [position for position in kept if exchanges[position].kind == 'boundary']
        return min(max(earliest, boundaries[-1] + 1 if boundaries else 0), unfinished)
    return min(last + 1 if last is not None else unfinished, unfinished)
