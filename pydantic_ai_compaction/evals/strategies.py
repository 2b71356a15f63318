"""Strategies by name, ours and harness anchors, built the same way for every task."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai_harness.compaction import (
    ClearToolResults,
    SlidingWindowCompaction,
    SummarizingCompaction,
    TieredCompaction,
)

from pydantic_ai_compaction import (
    BoundedSelection,
    CuratedSelection,
    ForgetReasoning,
    Fork,
    InstructionSources,
    Native,
    NoCompaction,
    Orientation,
    Reassert,
    Recall,
    ResetToCheckpoint,
    SQLiteArchiveStore,
    StatelessSummary,
    Tiered,
    Trigger,
)
from pydantic_ai_compaction.runtime.events import EventObserver

OURS = ('none', 'native', 'summary', 'fork-json', 'fork-free', 'fork-fixed', 'reassert', 'reset')
HARNESS = ('harness-clear', 'harness-sliding', 'harness-summarizing', 'harness-tiered')
ALL = OURS + HARNESS
RECALL_SETUPS = ('none', 'clear', 'clear+recall', 'summary', 'summary+recall', 'tiered', 'tiered+recall')
"""Seed 001's delayed-recall setups: no compaction, three compaction setups, each without and with recall."""
FORGET_SELECT = ('forget-keep', 'forget-drop', 'forget-after-artifact', 'select', 'curate', 'orient')
"""Seeds 002 and 003: reasoning forgetting and request-only selection, against full history (`none`)."""
CHOICES = tuple(dict.fromkeys(ALL + RECALL_SETUPS + FORGET_SELECT))


@dataclass(frozen=True)
class StrategyConfig:
    """What every strategy of a benchmark run shares."""

    trigger_tokens: int = 18_000
    """The one trigger (the seed study's 18K estimated tokens)."""

    markers: Sequence[str] = ()
    """Marked instruction lines of the task (restated by reassert, carried by the reset checkpoint)."""

    def __post_init__(self) -> None:
        if self.trigger_tokens < 1:
            raise ValueError(f'trigger_tokens must be positive, got {self.trigger_tokens!r}')


def build(name: str, config: StrategyConfig, observer: EventObserver | None = None) -> list[AbstractCapability[Any]]:
    """The capabilities for a strategy name (see `CHOICES`); `X+recall` puts `Recall` in front of `X`."""
    base, _, extra = name.partition('+')
    if base not in _BUILDERS or extra not in ('', 'recall'):
        raise ValueError(f'unknown strategy {name!r}; choose from {", ".join(CHOICES)}')
    capability = _BUILDERS[base](config, observer)
    if extra == 'recall':
        store = SQLiteArchiveStore(':memory:')
        return [Recall(store=store, conversation=lambda ctx: 'run'), capability]
    return [capability]


def _trigger(config: StrategyConfig) -> Trigger:
    return Trigger(tokens=config.trigger_tokens)


def _sources(config: StrategyConfig) -> InstructionSources:
    return InstructionSources(markers=tuple(config.markers))


_Builder = Callable[[StrategyConfig, EventObserver | None], AbstractCapability[Any]]

_BUILDERS: dict[str, _Builder] = {
    'none': lambda c, o: NoCompaction(trigger=_trigger(c), observer=o),
    'native': lambda c, o: Native(trigger=_trigger(c), observer=o),
    'summary': lambda c, o: StatelessSummary(trigger=_trigger(c), observer=o),
    'fork-json': lambda c, o: Fork(variant='json', trigger=_trigger(c), observer=o),
    'fork-free': lambda c, o: Fork(variant='free', trigger=_trigger(c), observer=o),
    'fork-fixed': lambda c, o: Fork(variant='fixed', trigger=_trigger(c), observer=o),
    'reassert': lambda c, o: Reassert(Native(trigger=_trigger(c), observer=o), sources=_sources(c)),
    'reset': lambda c, o: ResetToCheckpoint(trigger=_trigger(c), sources=_sources(c), observer=o),
    'clear': lambda c, o: Tiered(context_window=2 * c.trigger_tokens, summarize=False, clear_min_saving=0.05),
    'tiered': lambda c, o: Tiered(context_window=2 * c.trigger_tokens, clear_min_saving=0.05),
    'forget-keep': lambda c, o: ForgetReasoning(policy='keep'),
    'forget-drop': lambda c, o: ForgetReasoning(policy='drop'),
    'forget-after-artifact': lambda c, o: ForgetReasoning(policy='after_artifact'),
    'select': lambda c, o: BoundedSelection(),
    'curate': lambda c, o: CuratedSelection(),
    'orient': lambda c, o: Orientation(),
    'harness-clear': lambda c, o: ClearToolResults(max_tokens=c.trigger_tokens),
    'harness-sliding': lambda c, o: SlidingWindowCompaction(
        max_tokens=c.trigger_tokens, keep_tokens=c.trigger_tokens // 3
    ),
    'harness-summarizing': lambda c, o: SummarizingCompaction(
        max_tokens=c.trigger_tokens, keep_tokens=c.trigger_tokens // 3
    ),
    'harness-tiered': lambda c, o: TieredCompaction(
        tiers=[
            ClearToolResults(max_tokens=1),
            SummarizingCompaction(max_messages=1, keep_tokens=c.trigger_tokens // 3),
        ],
        target_tokens=c.trigger_tokens,
    ),
}
