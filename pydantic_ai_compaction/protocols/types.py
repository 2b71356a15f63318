"""Plain data types shared by the runtime and the strategies.

Nothing here has behaviour beyond construction: the runtime computes these values and the
strategies read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pydantic_ai.messages import ModelMessage, ModelResponse

METADATA_KEY = 'pydantic_ai_compaction'
"""Key this library uses in `metadata` dicts of messages and parts.

Metadata is never sent to a model, so exchange ids and boundary records ride along with the
history without changing what the provider sees or caches.
"""

ExchangeKind: TypeAlias = Literal['opening', 'turn', 'tools', 'response', 'boundary', 'restatement']
"""What an exchange holds.

- `opening`: the first request (system prompt and first user prompt), always `g0`.
- `turn`: a later request carrying a user prompt (a new user turn).
- `tools`: a model response with tool calls, together with the request(s) carrying their returns.
- `response`: a model response without tool calls (a final answer).
- `boundary`: an earlier compaction (a `CompactionPart`, ours, harness's or a provider's).
- `restatement`: instruction text restated by `Reassert`.
"""

PartRef: TypeAlias = tuple[int, tuple[int, ...] | None]
"""`(message index, part indices)`; `None` for the whole message."""


@dataclass(frozen=True)
class Exchange:
    """The smallest unit of a history that can be dropped without breaking the provider's rules."""

    id: str
    """Stable id (`g0`, `g1`, ...), kept in message metadata so it survives compactions."""

    kind: ExchangeKind
    """What the exchange holds."""

    refs: tuple[PartRef, ...]
    """Where its content sits in the history, in order."""

    tokens: int
    """Estimated tokens its messages add to a request."""

    protected: str | None = None
    """Why the runtime always keeps it (`opening`, `boundary`, `pinned`, `state` (it holds a tool reveal or a
    settings or instruction change pydantic-ai reads back), `current_turn`, `predicate`), or `None`."""

    unfinished: bool = False
    """Whether it is the exchange in progress (the current request and the response it answers)."""

    @property
    def forced(self) -> bool:
        """Whether the validator keeps it whatever a proposal says."""
        return self.protected is not None or self.unfinished


@dataclass(frozen=True)
class Summary:
    """Text that replaces the exchanges a compaction drops."""

    text: str
    """What the boundary `CompactionPart` carries."""

    structured: dict[str, Any] | None = None
    """The structured form the text was rendered from (fork JSON variant), kept in the record."""


@dataclass(frozen=True)
class ProviderSummary:
    """A provider's own compaction (a `ModelResponse` holding a provider `CompactionPart`)."""

    response: ModelResponse
    """Sent back to the same provider as-is; the runtime only adds its record to the part's metadata."""


@dataclass(frozen=True, init=False)
class Proposal:
    """What a strategy suggests. The runtime validates it before anything changes.

    Build one with a constructor that says what it means:

    - `Proposal.keep('g3', exchange, ..., summary=Summary(...))`: keep these exchanges verbatim (besides
      the protected ones and the exchange in progress), drop the rest, put *summary* in their place. With
      no ids it keeps nothing droppable; when it keeps every exchange nothing is written (like a decline).
    - `Proposal.drop_all(summary)`: keep only what the runtime always keeps; *summary* (or, without one, a
      note saying how much was removed) replaces the rest.
    - `Proposal.decline(reason)`: leave the history as it is now.
    - `Proposal.failed(reason)`: the strategy could not build a proposal; the runtime falls back.

    `Proposal(kept=..., summary=...)` is the raw form a parsed model reply takes: there an empty reply
    (nothing kept, no summary) is malformed, and a reply that keeps everything gets the fallback layout
    while the request is over the trigger, so a confused compactor cannot keep the run over its limit.
    """

    kept: tuple[str, ...]
    """Exchange ids to keep verbatim, in any order; unknown ids are rejected."""

    summary: Summary | ProviderSummary | None
    """What stands in for the dropped exchanges, if anything."""

    restate: tuple[str, ...]
    """Instruction texts to restate verbatim just before the exchange in progress (`Reassert`)."""

    supersedes: str | None
    """Name of a strategy whose earlier boundaries this proposal replaces (a reset replaces its own checkpoints)."""

    malformed: str | None
    """Why the proposal cannot be used (`unparseable`, `schema`, `empty`, `compactor_error`, ...), or `None`."""

    detail: str | None
    """Human-readable detail for the record: the parse error, the exception, ..."""

    variant: str | None
    """Which variant ran (fork `json`/`free`/`fixed`, native `provider`/`emulated`, ...)."""

    extra: dict[str, Any]
    """Strategy-specific facts worth keeping in the boundary record (JSON-serializable)."""

    declined: str | None
    """Why the strategy chooses not to compact now (nothing is written, no fallback), or `None`."""

    explicit: bool
    """Whether `keep` / `drop_all` built it: what it keeps is the strategy's decision, taken as meant."""

    def __init__(
        self,
        kept: tuple[str, ...] = (),
        summary: Summary | ProviderSummary | None = None,
        restate: tuple[str, ...] = (),
        supersedes: str | None = None,
        malformed: str | None = None,
        detail: str | None = None,
        variant: str | None = None,
        extra: dict[str, Any] | None = None,
        declined: str | None = None,
        explicit: bool = False,
    ) -> None:
        """The raw form; prefer `keep`, `drop_all`, `decline` and `failed`."""
        values: dict[str, object] = {
            'kept': tuple(kept),
            'summary': summary,
            'restate': tuple(restate),
            'supersedes': supersedes,
            'malformed': malformed,
            'detail': detail,
            'variant': variant,
            'extra': dict(extra or {}),
            'declined': declined,
            'explicit': explicit,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)  # frozen: the dataclass way to set fields once

    @classmethod
    def keep(
        cls,
        *exchanges: str | Exchange | Iterable[str | Exchange],
        summary: Summary | ProviderSummary | str | None = None,
        restate: tuple[str, ...] = (),
        supersedes: str | None = None,
        variant: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Proposal:
        """Keep these exchanges (ids, `Exchange`s, or iterables of either) verbatim; drop every other droppable one.

        Protected exchanges and the exchange in progress stay whatever is named. A plain string summary
        becomes a `Summary`. Naming every exchange keeps the history as it is (no boundary, no fallback).
        """
        ids: list[str] = []
        for item in exchanges:
            items = [item] if isinstance(item, str | Exchange) else list(item)
            ids.extend(entry.id if isinstance(entry, Exchange) else entry for entry in items)
        return cls(
            kept=tuple(ids),
            summary=Summary(summary) if isinstance(summary, str) else summary,
            restate=restate,
            supersedes=supersedes,
            variant=variant,
            extra=extra,
            explicit=True,
        )

    @classmethod
    def drop_all(
        cls, summary: Summary | ProviderSummary | str | None = None, *, variant: str | None = None
    ) -> Proposal:
        """Keep only what the runtime always keeps (protected, in progress); *summary* replaces everything else.

        Without a summary the boundary says how many exchanges were removed.
        """
        return cls.keep(summary=summary, variant=variant)

    @classmethod
    def decline(cls, reason: str, *, variant: str | None = None) -> Proposal:
        """A proposal to leave the history as it is: no boundary, no fallback (an `ignored` event says why)."""
        return cls(declined=reason, variant=variant)

    @classmethod
    def failed(cls, reason: str, detail: str | None = None, *, variant: str | None = None) -> Proposal:
        """A proposal that tells the validator to fall back."""
        return cls(malformed=reason, detail=detail, variant=variant)


@dataclass(frozen=True)
class Layout:
    """A validated proposal: exactly what the next history holds."""

    keep: tuple[str, ...]
    """Kept exchange ids, in original order. Always includes protected and unfinished exchanges."""

    dropped: tuple[str, ...]
    """Exchange ids removed from the history."""

    rejected: tuple[str, ...]
    """Ids the proposal named that do not exist (or repeated), reported and ignored."""

    summary: Summary | ProviderSummary | None
    """What the new boundary carries; on fallback a note saying what was dropped."""

    restate: tuple[str, ...]
    """Instruction texts restated before the exchange in progress."""

    fallback_reason: str | None
    """Why the proposal was replaced by the fallback layout, or `None`."""

    superseded: tuple[str, ...] = ()
    """Earlier boundaries the proposal replaced (only ever the proposing strategy's own)."""


@dataclass
class CompactorUsage:
    """Tokens and requests spent by the model calls a compaction made."""

    requests: int = 0
    """Model requests made (successful ones; failed attempts report no usage)."""

    failed_attempts: int = 0
    """Attempts that raised (retried or not)."""

    input_tokens: int = 0
    """Input tokens, cache reads and writes included."""

    output_tokens: int = 0
    """Output tokens."""

    cache_read_tokens: int = 0
    """Input tokens read from the provider's prompt cache."""

    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache."""

    def as_dict(self) -> dict[str, int]:
        """A JSON-ready copy."""
        return {
            'requests': self.requests,
            'failed_attempts': self.failed_attempts,
            'input_tokens': self.input_tokens,
            'output_tokens': self.output_tokens,
            'cache_read_tokens': self.cache_read_tokens,
            'cache_write_tokens': self.cache_write_tokens,
        }


@dataclass(frozen=True)
class CompactionRecord:
    """What one compaction did, stored in its boundary part's metadata under `METADATA_KEY`."""

    strategy: str
    """Strategy name (`fork`, `native`, `summary`, `reassert+native`, ...)."""

    variant: str | None
    """Which variant ran, if the strategy has several."""

    boundary_id: str
    """Exchange id of the boundary this compaction created."""

    next_id: int
    """The next exchange number to hand out, so ids are never reused."""

    sequence: int
    """This compaction's number in the conversation (1 for the first), kept even when boundaries are replaced."""

    tokens_before: int
    """Estimated tokens of the history before (character heuristic, as harness's span reports)."""

    tokens_after: int
    """Estimated tokens of the history after, same estimator."""

    trigger_tokens: int | None
    """The estimate the trigger measured (anchored on provider usage), or `None` when forced."""

    kept: tuple[str, ...]
    """Exchange ids kept verbatim."""

    dropped: tuple[str, ...]
    """Exchange ids dropped."""

    rejected: tuple[str, ...]
    """Ids the proposal named that were rejected."""

    fallback_reason: str | None
    """Why the fallback layout was used, or `None`."""

    detail: str | None
    """Detail behind a fallback (parse error, exception), or `None`."""

    compactor_usage: CompactorUsage
    """Usage of the model calls this compaction made."""

    restated: tuple[str, ...] = ()
    """Instruction texts restated with this compaction."""

    view_reduced: tuple[str, ...] = ()
    """Exchanges left out of the compactor's view after a context overflow."""

    extra: dict[str, Any] = field(default_factory=dict[str, Any])
    """Strategy-specific facts (structured summary, checkpoint entries, ...)."""

    def to_metadata(self) -> dict[str, Any]:
        """The JSON-ready dict stored in `CompactionPart.metadata[METADATA_KEY]`."""
        return {
            'strategy': self.strategy,
            'variant': self.variant,
            'boundary_id': self.boundary_id,
            'next_id': self.next_id,
            'sequence': self.sequence,
            'tokens_before': self.tokens_before,
            'tokens_after': self.tokens_after,
            'trigger_tokens': self.trigger_tokens,
            'kept': list(self.kept),
            'dropped': list(self.dropped),
            'rejected': list(self.rejected),
            'fallback_reason': self.fallback_reason,
            'detail': self.detail,
            'compactor_usage': self.compactor_usage.as_dict(),
            'restated': list(self.restated),
            'view_reduced': list(self.view_reduced),
            'extra': self.extra,
        }


@dataclass(frozen=True)
class CompactionState:
    """What composition predicates (`Switch`) decide on."""

    compactions: int
    """Compactions this library recorded in the history so far."""

    tokens: int
    """Estimated tokens of the request about to be sent."""

    step: int
    """The run step (one per model request)."""

    messages: int
    """Messages in the history."""


@dataclass(frozen=True)
class CompactionEvent:
    """Reported to `observer` callbacks and as an OpenTelemetry span."""

    kind: Literal['compacted', 'ignored']
    """`compacted` when the history changed; `ignored` when a crossing was left alone (see `reason`)."""

    strategy: str
    """Strategy name."""

    trigger_tokens: int | None
    """What the trigger measured."""

    record: CompactionRecord | None = None
    """The boundary record, for `compacted`."""

    messages_before: int = 0
    """History length before."""

    messages_after: int = 0
    """History length after."""

    history: tuple[ModelMessage, ...] = ()
    """The history after the event (for `compacted`), so observers can snapshot it."""

    reason: str | None = None
    """Why a crossing was ignored: `baseline` (`NoCompaction`), `nothing to drop` (all exchanges forced),
    `below minimum saving` (too little could be dropped to be worth a compactor call), `grew` (the result
    would not be smaller) or `shape` (the result would break the provider's message shape); for a view, `error`
    (it raised: the request went out as it arrived) or `fallback` (its model's reply failed a check: its fallback
    was used, `detail` says why)."""

    detail: str | None = None
    """What was measured behind `reason`, when there is more to say."""
