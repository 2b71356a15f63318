"""One compaction, start to finish: segment, propose, validate, apply, record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic_ai.messages import ModelMessage

from pydantic_ai_compaction.protocols.strategy import Strategy
from pydantic_ai_compaction.protocols.types import CompactionRecord, Layout, Proposal, Summary
from pydantic_ai_compaction.runtime.apply import apply_layout, assemble, boundary_message
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.notes import gather_notes, with_notes
from pydantic_ai_compaction.runtime.retry import is_context_overflow
from pydantic_ai_compaction.runtime.segment import ConversationView, ProtectPredicate, compactions_so_far, segment
from pydantic_ai_compaction.runtime.shape import shape_problems
from pydantic_ai_compaction.runtime.tokens import estimate_token_count
from pydantic_ai_compaction.runtime.validate import DEFAULT_FALLBACK_KEEP_LAST, fallback_layout, validate

DEFAULT_MIN_SAVING = 0.10
"""Share of the history's estimated tokens that must be droppable before a compactor is called."""


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


async def run_compaction(
    strategy: Strategy,
    messages: Sequence[ModelMessage],
    ctx: CompactionContext,
    *,
    protect: ProtectPredicate | None = None,
    fallback_keep_last: int = DEFAULT_FALLBACK_KEEP_LAST,
    min_saving: float = DEFAULT_MIN_SAVING,
) -> Outcome | Skipped:
    """Compact *messages* with *strategy*. Never raises for a model or proposal failure.

    Returns `Skipped` with the reason when there is nothing worth removing: every exchange is
    protected or in progress, or what could be removed is under *min_saving* of the history (no model
    is called), or neither the proposal nor the fallback would make the history smaller, or the result
    would break the provider shape (no boundary is written).
    """
    view = segment(messages, protect, prompt=ctx.run.prompt)
    droppable = [exchange for exchange in view.exchanges if not exchange.forced]
    if not droppable:
        return Skipped('nothing to drop')
    # When protected content alone (a long opening prompt, pins, the exchange in progress) is over the
    # trigger, every step would otherwise call the compactor to free a sliver. What the last compaction
    # kept by falling back (not by anyone's choice) will be kept again by the next fallback, so only what
    # arrived since counts then; what a valid proposal kept may well go next time, so it counts.
    records = view.records()
    last = records[-1] if records else None
    weighed = set(last.get('kept') or ()) if last is not None and last.get('fallback_reason') else set[str]()
    new_tokens = sum(exchange.tokens for exchange in droppable if exchange.id not in weighed)
    if new_tokens < min_saving * view.tokens:
        return Skipped(
            'below minimum saving',
            f'only {new_tokens:,} of {view.tokens:,} estimated tokens are new and can be dropped '
            f'(minimum {min_saving:.0%})',
        )
    proposal, left_out, error = await _propose(strategy, view, ctx, protect)
    if proposal.declined is not None:
        return Skipped('declined', proposal.declined)
    layout = validate(proposal, view, fallback_keep_last=fallback_keep_last)
    if not layout.dropped and not layout.restate:
        # Nothing removed while the request is over the limit. A valid proposal that keeps
        # everything gets the fallback (the runtime has the last word); when even the fallback
        # removes nothing, a boundary would only add tokens, so there is no compaction.
        if layout.fallback_reason is None:
            layout = fallback_layout(view, 'kept_all', fallback_keep_last=fallback_keep_last)
        if not layout.dropped:
            return Skipped('nothing to drop', 'neither the proposal nor the fallback removes an exchange')
    outcome = _build(strategy, view, layout, proposal, ctx, left_out)
    if outcome.record.tokens_after >= outcome.record.tokens_before:
        # A compaction that does not shrink the history (a summary longer than what it replaces)
        # is worse than none: fall back, and give up if that does not shrink it either.
        smaller = replace(fallback_layout(view, 'grew', fallback_keep_last=fallback_keep_last), restate=layout.restate)
        if not smaller.dropped:
            return Skipped('grew', 'the compaction would not make the history smaller')
        outcome = _build(strategy, view, smaller, proposal, ctx, left_out)
        if outcome.record.tokens_after >= outcome.record.tokens_before:
            return Skipped('grew', 'the compaction would not make the history smaller')
    if problems := shape_problems(outcome.messages, before=messages):
        # Segmentation keeps pairs inside exchanges and the validator settles roles, so this is a
        # last line of defence: send the history as it was rather than one a provider would reject.
        return Skipped('shape', '; '.join(problems[:5]))
    return replace(outcome, error=error)


async def _propose(
    strategy: Strategy, view: ConversationView, ctx: CompactionContext, protect: ProtectPredicate | None
) -> tuple[Proposal, tuple[str, ...], Exception | None]:
    """Ask for a proposal; on a context overflow, ask once more with the oldest unprotected exchanges left out."""
    try:
        return await strategy.propose(view, ctx), (), None
    except Exception as error:
        if not is_context_overflow(error):
            return Proposal.failed('compactor_error', _describe(error)), (), error
        first_error = error
    reduced, left_out = shrink(view, protect=protect, prompt=ctx.run.prompt)
    if not left_out:
        return Proposal.failed('context_overflow', 'nothing left to leave out of the compactor view'), (), first_error
    try:
        return await strategy.propose(reduced, ctx), left_out, None
    except Exception as error:
        reason = 'context_overflow' if is_context_overflow(error) else 'compactor_error'
        return Proposal.failed(reason, _describe(error)), left_out, error


def shrink(
    view: ConversationView, *, protect: ProtectPredicate | None = None, prompt: object = None
) -> tuple[ConversationView, tuple[str, ...]]:
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
    return segment(remaining, protect, prompt=prompt), tuple(left_out)


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
