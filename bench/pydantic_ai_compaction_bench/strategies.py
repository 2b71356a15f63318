"""Strategies by name, ours and harness anchors, built the same way for every task."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext
from pydantic_ai_harness.compaction import (
    ClearToolResults,
    SlidingWindowCompaction,
    SummarizingCompaction,
    TieredCompaction,
    is_pinned,
    pin,
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
    presets,
)
from pydantic_ai_compaction.processors.strategies.verified import DEFAULT_CHECKS, Verified
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.transcript import user_text

OURS = (
    'none',
    'native',
    'summary',
    'summary-sent',
    'fork-json',
    'fork-json-sent',
    'fork-free',
    'fork-free-sent',
    'fork-fixed',
    'reassert',
    'reset',
)
HARNESS = ('harness-clear', 'harness-sliding', 'harness-summarizing', 'harness-tiered')
ALL = OURS + HARNESS
RECALL_SETUPS = ('none', 'clear', 'clear+recall', 'summary', 'summary+recall', 'tiered', 'tiered+recall')
"""Seed 001's delayed-recall setups: no compaction, three compaction setups, each without and with recall."""
FORGET_SELECT = ('forget-keep', 'forget-drop', 'forget-after-artifact', 'select', 'curate', 'orient')
"""Seeds 002 and 003: reasoning forgetting and request-only selection, against full history (`none`)."""
PRESETS = (
    'preset-codex',
    'preset-opencode',
    'preset-pi',
    'preset-gemini-cli',
    'preset-openhands',
    'preset-claude-code',
)
"""Well-known agents' policies (`pydantic_ai_compaction.presets`), at their published defaults."""
VERIFIED = ('summary-verified', 'summary-verified-2pass')
"""The stateless summary checked by `Verified`: deterministic checks only, then with the second model pass."""
GROUPS: dict[str, tuple[str, ...]] = {'presets': PRESETS, 'verified': ('summary', *VERIFIED)}
"""Names that stand for several strategies on the command line (`--strategies presets`)."""
CHOICES = tuple(dict.fromkeys(ALL + RECALL_SETUPS + FORGET_SELECT + PRESETS + VERIFIED + tuple(GROUPS)))


def expand(names: Sequence[str]) -> list[str]:
    """*names* with each group name replaced by its strategies, in order, without repeats."""
    return list(dict.fromkeys(item for name in names for item in GROUPS.get(name, (name,))))


NO_SUMMARIZER = ('none', 'harness-clear', 'harness-sliding', 'reset', 'clear')
"""Strategies that never ask a model for a summary: the summary cap cannot change their runs."""


@dataclass(frozen=True)
class StrategyConfig:
    """What every strategy of a benchmark run shares."""

    trigger_tokens: int = 18_000
    """The one trigger (the seed study's 18K estimated tokens)."""

    markers: Sequence[str] = ()
    """Marked instruction lines of the task (restated by reassert, carried by the reset checkpoint)."""

    anchor_pins: bool = False
    """Tell the harness anchors the markers too, the way harness lets a user do it: a marked line in a tool
    result is `pin()`ned as it arrives, so every harness strategy keeps it verbatim."""

    def __post_init__(self) -> None:
        if self.trigger_tokens < 1:
            raise ValueError(f'StrategyConfig.trigger_tokens must be positive, got {self.trigger_tokens!r}')


@dataclass
class PinMarkedLines(AbstractCapability[Any]):
    """Pins every marked line of a new tool result (harness `pin()`), before compaction runs.

    A line is marked when it starts with a marker, after an optional timestamp.
    """

    markers: Sequence[str]
    """The task's markers."""

    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile('|'.join(marker_pattern(marker).pattern for marker in self.markers))

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = list(ctx.messages)
        if not self.markers or not messages or not isinstance(messages[-1], ModelRequest):
            return request_context
        last = messages[-1]
        pinned = [
            user_text(part)
            for m in messages
            for part in m.parts
            if isinstance(part, UserPromptPart) and is_pinned(part)
        ]
        lines = [
            line.strip()
            for part in last.parts
            if isinstance(part, ToolReturnPart)
            for line in part.model_response_str().splitlines()
            if self._pattern.match(line.strip())
        ]
        new = [pin(line) for line in dict.fromkeys(lines) if not any(line in text for text in pinned)]
        if not new:
            return request_context
        messages[-1] = dataclasses.replace(last, parts=[*last.parts, *new])
        ctx.messages[:] = messages
        return dataclasses.replace(request_context, messages=messages)


def build(name: str, config: StrategyConfig, observer: EventObserver | None = None) -> list[AbstractCapability[Any]]:
    """The capabilities for a strategy name (see `CHOICES`); `X+recall` puts `Recall` in front of `X`."""
    base, _, extra = name.partition('+')
    if base in _PRESET_BUILDERS and extra == '':
        return _PRESET_BUILDERS[base](config, observer)
    if base not in _BUILDERS or extra not in ('', 'recall'):
        raise ValueError(f'unknown strategy {name!r}; choose from {", ".join(CHOICES)}')
    capability = _BUILDERS[base](config, observer)
    if extra == 'recall':
        store = SQLiteArchiveStore(':memory:')
        return [Recall(store=store, conversation=lambda ctx: 'run'), capability]
    if config.anchor_pins and base in HARNESS and config.markers:
        return [PinMarkedLines(config.markers), capability]
    return [capability]


def settings(name: str, config: StrategyConfig) -> dict[str, Any]:
    """A strategy's configuration as recorded and printed: every setting that differs from its default."""
    capabilities = build(name, config)
    described = [describe(capability) for capability in capabilities]
    return described[0] if len(described) == 1 else {'pipeline': described}


def describe(value: Any) -> Any:
    """A JSON-ready description of a capability: its class and each non-default field, nested."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {'class': type(value).__name__}
        for item in dataclasses.fields(value):
            if not item.init or item.name in ('observer', 'id'):
                continue
            current = getattr(value, item.name)
            if item.default is not dataclasses.MISSING and current == item.default:
                continue
            if item.default_factory is not dataclasses.MISSING and current == item.default_factory():
                continue
            out[item.name] = describe(current)
        return out
    if isinstance(value, re.Pattern):
        return f'/{value.pattern}/'  # pyright: ignore[reportUnknownMemberType]
    if isinstance(value, list | tuple):
        return [describe(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if callable(value):
        return getattr(value, '__qualname__', type(value).__name__)
    text = repr(value)  # pyright: ignore[reportUnknownArgumentType]
    # An object without a readable repr is named by its class: a memory address would differ on every run.
    return type(value).__name__ if ' at 0x' in text else text


def settings_line(described: Any) -> str:
    """One readable line: `SummarizingCompaction(max_tokens=18000, keep_tokens=6000, ...)`."""
    if isinstance(described, dict) and 'class' in described:
        inner = ', '.join(f'{key}={settings_line(item)}' for key, item in described.items() if key != 'class')  # pyright: ignore[reportUnknownVariableType]
        return f'{described["class"]}({inner})'
    if isinstance(described, dict) and 'pipeline' in described:
        return ' + '.join(settings_line(item) for item in described['pipeline'])  # pyright: ignore[reportUnknownVariableType]
    if isinstance(described, list):
        return '[' + ', '.join(settings_line(item) for item in described) + ']'  # pyright: ignore[reportUnknownVariableType]
    if isinstance(described, str) and described.startswith('/') and described.endswith('/'):
        return described  # a pattern, shown as written
    return repr(described)  # pyright: ignore[reportUnknownArgumentType]


def _trigger(config: StrategyConfig) -> Trigger:
    return Trigger(tokens=config.trigger_tokens)


def marker_pattern(marker: str) -> re.Pattern[str]:
    """A marker counts at the start of a line, after an optional timestamp: not quoted inside a sentence."""
    return re.compile(r'^\s*(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ )?' + re.escape(marker).replace('\\ ', ' '))


def _sources(config: StrategyConfig) -> InstructionSources:
    return InstructionSources(markers=tuple(marker_pattern(marker) for marker in config.markers))


_Builder = Callable[[StrategyConfig, EventObserver | None], AbstractCapability[Any]]

_BUILDERS: dict[str, _Builder] = {
    'none': lambda c, o: NoCompaction(trigger=_trigger(c), observer=o),
    'native': lambda c, o: Native(trigger=_trigger(c), observer=o),
    'summary': lambda c, o: StatelessSummary(trigger=_trigger(c), observer=o),
    'summary-sent': lambda c, o: StatelessSummary(trigger=_trigger(c), request='sent', observer=o),
    'fork-json': lambda c, o: Fork(variant='json', trigger=_trigger(c), observer=o),
    'fork-json-sent': lambda c, o: Fork(variant='json', trigger=_trigger(c), request='sent', observer=o),
    'fork-free': lambda c, o: Fork(variant='free', trigger=_trigger(c), observer=o),
    'fork-free-sent': lambda c, o: Fork(variant='free', trigger=_trigger(c), request='sent', observer=o),
    'fork-fixed': lambda c, o: Fork(variant='fixed', trigger=_trigger(c), observer=o),
    'reassert': lambda c, o: Reassert(Native(trigger=_trigger(c), observer=o), sources=_sources(c)),
    'reset': lambda c, o: ResetToCheckpoint(trigger=_trigger(c), sources=_sources(c), observer=o),
    'clear': lambda c, o: Tiered(context_window=2 * c.trigger_tokens, summarize=False, clear_min_saving=0.05),
    'tiered': lambda c, o: Tiered(context_window=2 * c.trigger_tokens, clear_min_saving=0.05),
    'forget-keep': lambda c, o: ForgetReasoning(policy='keep'),
    'forget-drop': lambda c, o: ForgetReasoning(policy='drop'),
    'forget-after-artifact': lambda c, o: ForgetReasoning(policy='after_artifact'),
    'summary-verified': lambda c, o: Verified(StatelessSummary(trigger=_trigger(c), observer=o), sources=_sources(c)),
    'summary-verified-2pass': lambda c, o: Verified(
        StatelessSummary(trigger=_trigger(c), observer=o), sources=_sources(c), checks=(*DEFAULT_CHECKS, 'omissions')
    ),
    'select': lambda c, o: BoundedSelection(),
    'curate': lambda c, o: CuratedSelection(),
    'orient': lambda c, o: Orientation(),
    # Harness anchors as harness's compaction README recommends for these sizes. Each incident log is about
    # 6,700 estimated tokens, so two logs fit under the 18K trigger and three do not: kept tails are sized
    # to stay under the trigger. The summarizer renders tool results whole (`tool_return_max_chars=None`):
    # what it reads is at most one trigger's worth, far inside any summarizer's window.
    'harness-clear': lambda c, o: ClearToolResults(max_tokens=c.trigger_tokens, keep_pairs=_pairs_under(c)),
    'harness-sliding': lambda c, o: SlidingWindowCompaction(
        max_tokens=c.trigger_tokens, keep_tokens=c.trigger_tokens // 3
    ),
    'harness-summarizing': lambda c, o: SummarizingCompaction(
        max_tokens=c.trigger_tokens, keep_tokens=c.trigger_tokens // 3, tool_return_max_chars=None
    ),
    # Clear first, summarize only what clearing could not bring under the target.
    'harness-tiered': lambda c, o: TieredCompaction(
        tiers=[
            ClearToolResults(max_tokens=1, keep_pairs=1),
            SummarizingCompaction(max_messages=1, keep_tokens=c.trigger_tokens // 3, tool_return_max_chars=None),
        ],
        target_tokens=c.trigger_tokens,
    ),
}


def _window(config: StrategyConfig) -> int:
    """The window the presets run in: twice the trigger, as for `clear` and `tiered` (seed 001's 40K at 20K)."""
    return 2 * config.trigger_tokens


_PresetBuilder = Callable[[StrategyConfig, EventObserver | None], list[AbstractCapability[Any]]]

PRESET_REFERENCE_WINDOW = 200_000
"""The window the presets' absolute budgets are published for (Claude Sonnet's, these agents' common default)."""


def _scaled(config: StrategyConfig, tokens: int) -> int:
    """A preset's absolute token budget scaled to the benchmark's window, as a share of a 200K window."""
    return max(1, round(tokens * _window(config) / PRESET_REFERENCE_WINDOW))


def _opencode(config: StrategyConfig, observer: EventObserver | None) -> list[AbstractCapability[Any]]:
    reserve = _scaled(config, 20_000)
    usable = _window(config) - reserve
    return presets.opencode(
        context_window=_window(config),
        reserve_tokens=reserve,
        prune_protect_tokens=_scaled(config, 40_000),
        prune_minimum_tokens=_scaled(config, 20_000),
        preserve_recent_tokens=min(_scaled(config, 15_000), max(_scaled(config, 2_000), usable // 4)),
        observer=observer,
    )


# Each preset with its published defaults. Fractions and counts are kept as published; absolute token budgets
# (Codex's 20K of user messages, OpenCode's reserve and pruning budgets, pi's reserve and kept tail, the 100K
# clearing trigger) are published for windows of about 200K and are scaled to the benchmark's window, so each
# preset keeps the proportions its agent has: unscaled, pi's 20K tail would not even fit under its trigger.
_PRESET_BUILDERS: dict[str, _PresetBuilder] = {
    'preset-codex': lambda c, o: presets.codex(
        context_window=_window(c), user_message_tokens=_scaled(c, 20_000), observer=o
    ),
    'preset-opencode': _opencode,
    'preset-pi': lambda c, o: presets.pi(
        context_window=_window(c), reserve_tokens=_scaled(c, 16_384), keep_recent_tokens=_scaled(c, 20_000)
    ),
    'preset-gemini-cli': lambda c, o: presets.gemini_cli(context_window=_window(c), observer=o),
    'preset-openhands': lambda c, o: presets.openhands(context_window=_window(c), observer=o),
    'preset-claude-code': lambda c, o: presets.claude_code(
        context_window=_window(c), clear_trigger_tokens=_scaled(c, 100_000), observer=o
    ),
}

LARGEST_RESULT_TOKENS = 6_700
"""The largest tool result of the benchmark tasks, in estimated tokens (an incident log)."""


def _pairs_under(config: StrategyConfig) -> int:
    """How many of the largest tool results fit under the trigger (at least one)."""
    return max(1, (config.trigger_tokens - 1) // LARGEST_RESULT_TOKENS)
