"""One compaction, start to finish: segment, propose, validate, apply, record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage

from pydantic_ai_compaction.protocols.types import CompactionRecord, Layout, Proposal, ProviderSummary, Summary
from pydantic_ai_compaction.runtime.apply import apply_layout, assemble
from pydantic_ai_compaction.runtime.checks import is_str
from pydantic_ai_compaction.runtime.context import CompactionContext, Strategy
from pydantic_ai_compaction.runtime.degraded import SetupWarning, described, warn_if_setup_error
from pydantic_ai_compaction.runtime.encoding import ascii_strings, clean_value
from pydantic_ai_compaction.runtime.instructions import InstructionSources, gather_instructions
from pydantic_ai_compaction.runtime.notes import gather_notes, notes_in_place, with_notes
from pydantic_ai_compaction.runtime.retry import is_context_overflow
from pydantic_ai_compaction.runtime.segment import (
    ConversationView,
    ProtectPredicate,
    compactions_recorded,
    segment,
)
from pydantic_ai_compaction.runtime.tokens import estimate_token_count
from pydantic_ai_compaction.runtime.transcript import before_cut
from pydantic_ai_compaction.runtime.validate import (
    DEFAULT_FALLBACK_KEEP_LAST,
    Outcome,
    Skipped,
    decide,
    droppable_tokens,
    forced_exchanges,
    view_records,
    view_tokens,
)

DEFAULT_MIN_SAVING = 0.10
"""Share of the history's estimated tokens that must be droppable before a compactor is called."""


NotesHook = Callable[[ConversationView], list[str]]
"""Finds the notes to copy verbatim into a new boundary (`[kind] text` lines), given the history."""


async def run_compaction(
    strategy: Strategy,
    messages: Sequence[ModelMessage],
    ctx: CompactionContext,
    *,
    protect: ProtectPredicate | None = None,
    fallback_keep_last: int = DEFAULT_FALLBACK_KEEP_LAST,
    min_saving: float = DEFAULT_MIN_SAVING,
    notes: NotesHook | None = gather_notes,
) -> Outcome | Skipped:
    """Compact *messages* with *strategy*. Never raises for a model or proposal failure.

    Returns `Skipped` with the reason when there is nothing worth removing: every exchange is
    protected or in progress, or what could be removed is under *min_saving* of the history (no model
    is called), or neither the proposal nor the fallback would make the history smaller, or the result
    would break the provider shape (no boundary is written). `decide` has the last word on the layout.

    Args:
        strategy: What proposes the layout.
        messages: The persisted history.
        ctx: Model access and accounting for the strategy.
        protect: Extra exchanges to always keep.
        fallback_keep_last: Exchanges the fallback layout keeps.
        min_saving: Share of the history that must be droppable before the strategy is asked.
        notes: Finds the notes a boundary carries verbatim (`Notes`' tool calls, notes of earlier
            boundaries); `None` carries none. Those the layout keeps in place are not restated.
    """
    view = segment(messages, protect, prompt=ctx.run.prompt)
    forced = forced_exchanges(view)
    if len(forced) == len(view.exchanges):
        return Skipped('nothing to drop')
    # When protected content alone (a long opening prompt, pins, the exchange in progress) is over the
    # trigger, every step would otherwise call the compactor to free a sliver. What the last compaction
    # kept by falling back (not by anyone's choice) will be kept again by the next fallback, so only what
    # arrived since counts then; what a valid proposal kept may well go next time, so it counts.
    records = view_records(view)
    last = records[-1] if records else None
    weighed = set(last.get('kept') or ()) if last is not None and last.get('fallback_reason') else set[str]()
    forced_ids = {exchange.id for exchange in forced}
    kept_before = sum(view.by_id[i].tokens for i in weighed if i in view.by_id and i not in forced_ids)
    new_tokens = droppable_tokens(view) - kept_before
    if new_tokens < min_saving * view_tokens(view):
        return Skipped(
            'below minimum saving',
            f'only {new_tokens:,} of {view_tokens(view):,} estimated tokens are new and can be dropped '
            f'(minimum {min_saving:.0%})',
        )
    proposal, left_out, error = await _propose(strategy, view, ctx, protect)

    def build(layout: Layout) -> Outcome:
        return _build(strategy, view, layout, proposal, ctx, left_out, notes, records)

    decided = decide(proposal, view, build, fallback_keep_last=fallback_keep_last)
    return replace(decided, error=error) if isinstance(decided, Outcome) else decided


async def _propose(
    strategy: Strategy, view: ConversationView, ctx: CompactionContext, protect: ProtectPredicate | None
) -> tuple[Proposal, tuple[str, ...], Exception | None]:
    """Ask for a proposal; on a context overflow, ask once more with the oldest unprotected exchanges left out."""
    try:
        return _checked(await strategy.propose(view, ctx)), (), None
    except SetupWarning:
        raise  # a setup mistake the filters made an error (a strategy's own model that cannot run): it ends the run
    except Exception as error:
        if isinstance(error, UsageLimitExceeded):
            return Proposal.failed('usage_limit', _describe(error)), (), error
        if not is_context_overflow(error):
            _warn_if_misconfigured(error, strategy)
            return Proposal.failed('compactor_error', _describe(error)), (), error
        first_error = error
    reduced, left_out = shrink(view, protect=protect, prompt=ctx.run.prompt)
    if not left_out:
        return Proposal.failed('context_overflow', 'nothing left to leave out of the compactor view'), (), first_error
    try:
        return _checked(await strategy.propose(reduced, ctx)), left_out, None
    except SetupWarning:
        raise
    except Exception as error:
        reason = (
            'usage_limit'
            if isinstance(error, UsageLimitExceeded)
            else 'context_overflow'
            if is_context_overflow(error)
            else 'compactor_error'
        )
        return Proposal.failed(reason, _describe(error)), left_out, error


def _checked(proposal: Proposal) -> Proposal:
    """*proposal*, or a failed one when its summary's text is not a `str` (a user's renderer returning `None`):
    the runtime falls back, rather than failing when it writes the boundary."""
    summary = proposal.summary
    text = summary.text if isinstance(summary, Summary) else ''
    if not is_str(text):  # typed `str`; a user's strategy sets anything
        shown = described(text)
        shown = shown if len(shown) <= 80 else shown[:79] + '…'
        return Proposal.failed('schema', f'Summary.text must be a str, not {type(text).__name__}: {shown}')
    return proposal


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
    notes_of: NotesHook | None,
    records: list[dict[str, Any]],
) -> Outcome:
    record = CompactionRecord(
        strategy=strategy.strategy_name,
        variant=proposal.variant,
        boundary_id=f'g{view.next_id}',
        next_id=view.next_id + 1,
        # The boundary records were read once already: counting from them reads no other message.
        sequence=compactions_recorded(records) + 1,
        tokens_before=view.estimated_tokens,
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
    if isinstance(layout.summary, ProviderSummary):
        # A provider's compaction replaces the boundaries of every strategy (`validate`), whose records carried the
        # instruction changes restated or listed so far, and drops the user's turns since: both are carried on in
        # its record, in order (its opaque text holds them for the model alone), so `Reassert`, `Verified` and a
        # reset still find them, and a change is not restated after a newer one it was replaced by was lost.
        carried = gather_instructions(view, InstructionSources(markers=()))
        held = set(record.restated)
        cut = [start for text in record.restated if (start := before_cut(text)) != text]  # a cut one: its start
        extra_instructions = [
            text for text in carried if text not in held and not any(text.startswith(start) for start in cut)
        ]
        if extra_instructions:
            record = replace(record, extra={**record.extra, 'instructions': extra_instructions})
    note = f'[Context compacted: {len(layout.dropped)} earlier exchange(s) removed.]'
    notes = notes_of(view) if notes_of is not None else []
    if notes:
        # What the layout keeps shows its notes already (earlier boundaries, `note` calls): each note is restated
        # once, by the boundary that drops its last verbatim copy.
        held = notes_in_place(view, layout.keep)
        notes = [note for note in notes if note not in held]
    if notes:
        # Notes are copied verbatim into the boundary, so no summary, however short, loses them.
        record = replace(record, extra={**record.extra, 'notes': notes})
        if isinstance(layout.summary, Summary) or layout.summary is None:
            text = layout.summary.text if layout.summary is not None else note
            structured = layout.summary.structured if layout.summary is not None else None
            layout = replace(layout, summary=Summary(with_notes(text, notes), structured))
    # The record states the size of the history it is part of, which exists only once laid out:
    # `apply_layout` writes the boundary once, around the dict it is given, which is filled right after
    # measuring (metadata is not counted), before the history leaves this function.
    metadata: dict[str, Any] = {}
    messages = apply_layout(view, layout, metadata, note=note)
    record = replace(record, tokens_after=estimate_token_count(messages))
    metadata.update(_clean_record(record.to_metadata()))
    return Outcome(messages=messages, record=record)


_ID_LISTS = frozenset({'kept', 'dropped'})
"""Record fields listing exchange ids: a compaction of 50k messages lists 25k, which need no cleaning when ASCII."""


def _clean_record(metadata: dict[str, Any]) -> dict[str, Any]:
    """`clean_value(metadata)`, with an ASCII list of exchange ids kept as it is rather than copied."""
    return {
        key: value if key in _ID_LISTS and ascii_strings(value) and isinstance(value, list) else clean_value(value)
        for key, value in metadata.items()
    }


def _warn_if_misconfigured(error: BaseException, strategy: Strategy) -> None:
    # The run goes on with the fallback layout either way; but an unknown model name or a missing provider
    # package is the user's mistake, not a passing fault, and a fallback at every compaction would hide it.
    warn_if_setup_error(
        error,
        strategy.strategy_name,
        'the compactor cannot run',
        'the strategy',
        consequence='every compaction falls back to keeping the newest exchanges',
        stacklevel=2,
    )


def _describe(error: BaseException) -> str:
    text = described(error, text=True)
    return f'{type(error).__name__}: {text[:500]}' if text else type(error).__name__
