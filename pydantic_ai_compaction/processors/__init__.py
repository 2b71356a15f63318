"""Strategies, one per module. Each proposes a layout; the runtime validates and applies it."""

from pydantic_ai_compaction.processors.memory.archive import Archive, ArchiveItem
from pydantic_ai_compaction.processors.memory.notes import Notes
from pydantic_ai_compaction.processors.memory.recall import Recall
from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER, Fork, ForkVariant
from pydantic_ai_compaction.processors.strategies.native import NATIVE_MARKER, Native
from pydantic_ai_compaction.processors.strategies.none import NoCompaction
from pydantic_ai_compaction.processors.strategies.pipeline import Pipeline
from pydantic_ai_compaction.processors.strategies.reassert import Reassert
from pydantic_ai_compaction.processors.strategies.reset import ResetToCheckpoint
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER, StatelessSummary
from pydantic_ai_compaction.processors.strategies.switch import Switch
from pydantic_ai_compaction.processors.views.curation import CuratedSelection
from pydantic_ai_compaction.processors.views.forget import ForgetReasoning
from pydantic_ai_compaction.processors.views.orientation import Orientation
from pydantic_ai_compaction.processors.views.selection import BoundedSelection
from pydantic_ai_compaction.processors.views.tiered import ClearThenSummarize, Tiered

__all__ = [
    'FORK_MARKER',
    'NATIVE_MARKER',
    'SUMMARY_MARKER',
    'Archive',
    'ArchiveItem',
    'BoundedSelection',
    'ClearThenSummarize',
    'CuratedSelection',
    'ForgetReasoning',
    'Fork',
    'ForkVariant',
    'Native',
    'NoCompaction',
    'Notes',
    'Orientation',
    'Pipeline',
    'Reassert',
    'Recall',
    'ResetToCheckpoint',
    'StatelessSummary',
    'Switch',
    'Tiered',
]
