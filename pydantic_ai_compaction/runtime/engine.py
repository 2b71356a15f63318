"""One compaction, start to finish: segment, propose, validate, apply, record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic_ai.messages import ModelMessage
from pydantic_ai_harness.compaction import estimate_token_count

from pydantic_ai_compaction.protocols.strategy import Strategy
from pydantic_ai_compaction.protocols.types import CompactionRecord, Layout, Proposal, Summary
from pydantic_ai_compaction.runtime.apply import apply_layout, assemble, boundary_message
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.notes import gather_notes, with_notes
from pydantic_ai_compaction.runtime.pairing import pairing_problems
from pydantic_ai_compaction.runtime.retry import is_context_overflow
from pydantic_ai_compaction.runtime.segment import ConversationView, ProtectPredicate, compactions_so_far, segment
from pydantic_ai_compaction.runtime.validate import DEFAULT_FALLBACK_KEEP, fallback_layout, validate


@dataclass(frozen=True)
class Outcome:
    """The compacted history and the record its boundary carries."""

    messages: list[ModelMessage]
    """The new history."""

    record: CompactionRecord
    """What happened."""

    error: Exception | None = None
    """The compactor's exception behind a fallback, if one raised."""


async def run_compaction(
    strategy: Strategy,
    messages: Sequence[ModelMessage],
    ctx: CompactionContext,
    *,
    protect: ProtectPredicate | None = None,
    fallback_keep: int = DEFAULT_FALLBACK_KEEP,
) -> Outcome | None:
    """Compact *messages* with *strategy*. Never raises for a model or proposal failure.

    Returns `None` when there is nothing to remove: every exchange is protected or in progress (no
    model is called), or neither the proposal nor the fallback would make the history smaller (no
    boundary is written).
    """
    view = segment(messages, protect)
    if all(exchange.forced for exchange in view.exchanges):
        return None
    proposal, left_out, error = await _propose(strategy, view, ctx)
    layout = validate(proposal, view, fallback_keep=fallback_keep)
    if not layout.dropped and not layout.restate:
        # Nothing removed while the request is over the limit. A valid proposal that keeps
        # everything gets the fallback (the runtime has the last word); when even the fallback
        # removes nothing, a boundary would only add tokens, so there is no compaction.
        if layout.fallback_reason is None:
            layout = fallback_layout(view, 'kept_all', fallback_keep=fallback_keep)
        if not layout.dropped:
            return None
    outcome = _build(strategy, view, layout, proposal, ctx, left_out)
    if outcome.record.tokens_after >= outcome.record.tokens_before:
        # A compaction that does not shrink the history (a summary longer than what it replaces)
        # is worse than none: fall back, and give up if that does not shrink it either.
        smaller = replace(fallback_layout(view, 'grew', fallback_keep=fallback_keep), restate=layout.restate)
        if not smaller.dropped:
            return None
        outcome = _build(strategy, view, smaller, proposal, ctx, left_out)
        if outcome.record.tokens_after >= outcome.record.tokens_before:
            return None
    if problems := pairing_problems(outcome.messages):
        # Segmentation keeps pairs inside exchanges, so this is a last line of defence: keep every
        # exchange rather than send a request the provider would reject.
        keep_all = fallback_layout(view, 'pairing', fallback_keep=len(view.exchanges))
        keep_all = replace(keep_all, restate=layout.restate)
        outcome = _build(strategy, view, keep_all, replace(proposal, detail='; '.join(problems)), ctx, left_out)
    return replace(outcome, error=error)


async def _propose(
    strategy: Strategy, view: ConversationView, ctx: CompactionContext
) -> tuple[Proposal, tuple[str, ...], Exception | None]:
    """Ask for a proposal; on a context overflow, ask once more with the oldest unprotected exchanges left out."""
    try:
        return await strategy.propose(view, ctx), (), None
    except Exception as error:
        if not is_context_overflow(error):
            return Proposal.failed('compactor_error', _describe(error)), (), error
        first_error = error
    reduced, left_out = shrink(view)
    if not left_out:
        return Proposal.failed('context_overflow', 'nothing left to leave out of the compactor view'), (), first_error
    try:
        return await strategy.propose(reduced, ctx), left_out, None
    except Exception as error:
        reason = 'context_overflow' if is_context_overflow(error) else 'compactor_error'
        return Proposal.failed(reason, _describe(error)), left_out, error


def shrink(view: ConversationView) -> tuple[ConversationView, tuple[str, ...]]:
    """*view* without its oldest unprotected exchanges, about half of their tokens."""
    candidates = [exchange for exchange in view.exchanges if not exchange.forced]
    budget = sum(exchange.tokens for exchange in candidates) / 2
    left_out: list[str] = []
    removed = 0
    for exchange in candidates:
        if left_out and removed >= budget:
            break
        left_out.append(exchange.id)
        removed += exchange.tokens
    if not left_out:
        return view, ()
    remaining = assemble(view, set(view.ids) - set(left_out))
    return segment(remaining), tuple(left_out)


def _build(
    strategy: Strategy,
    view: ConversationView,
    layout: Layout,
    proposal: Proposal,
    ctx: CompactionContext,
    left_out: tuple[str, ...],
) -> Outcome:
    boundary_id = f'g{view.next_id}'
    record = CompactionRecord(
        strategy=strategy.strategy_name,
        variant=proposal.variant,
        boundary_id=boundary_id,
        next_id=view.next_id + 1,
        sequence=compactions_so_far(view.messages) + 1,
        tokens_before=estimate_token_count(view.messages),
        tokens_after=0,
        trigger_tokens=ctx.trigger_tokens,
        kept=layout.keep,
        dropped=layout.dropped,
        rejected=layout.rejected,
        fallback_reason=layout.fallback_reason,
        detail=proposal.detail if layout.fallback_reason is not None or proposal.detail else None,
        compactor_usage=replace(ctx.usage),
        restated=layout.restate,
        view_reduced=left_out,
        extra=dict(proposal.extra),
    )
    note = f'[Context compacted: {len(layout.dropped)} earlier exchange(s) removed.]'
    notes = gather_notes(view)
    if notes:
        # Notes are copied verbatim into every boundary, so no summary, however short, loses them.
        record = replace(record, extra={**record.extra, 'notes': notes})
        if isinstance(layout.summary, Summary) or layout.summary is None:
            text = layout.summary.text if layout.summary is not None else note
            structured = layout.summary.structured if layout.summary is not None else None
            layout = replace(layout, summary=Summary(with_notes(text, notes), structured))
    messages, boundary_index = apply_layout(view, layout, record.to_metadata(), note=note)
    # The record states the size of the history it is part of, so measure, then write it once more.
    record = replace(record, tokens_after=estimate_token_count(messages))
    messages[boundary_index] = boundary_message(layout.summary, record.to_metadata(), note)
    return Outcome(messages=messages, record=record)


def _describe(error: BaseException) -> str:
    text = str(error)
    return f'{type(error).__name__}: {text[:500]}' if text else type(error).__name__
