"""Strategies, one per module. Each proposes a layout; the runtime validates and applies it."""

from pydantic_ai_compaction.processors.archive import Archive, ArchiveItem
from pydantic_ai_compaction.processors.forget import ForgetReasoning
from pydantic_ai_compaction.processors.fork import FORK_MARKER, Fork, ForkVariant
from pydantic_ai_compaction.processors.native import NATIVE_MARKER, Native
from pydantic_ai_compaction.processors.none import NoCompaction
from pydantic_ai_compaction.processors.notes import Notes
from pydantic_ai_compaction.processors.pipeline import Pipeline
from pydantic_ai_compaction.processors.reassert import Reassert
from pydantic_ai_compaction.processors.recall import Recall
from pydantic_ai_compaction.processors.reset import ResetToCheckpoint
from pydantic_ai_compaction.processors.selection import BoundedSelection, CuratedSelection, Orientation
from pydantic_ai_compaction.processors.summary import SUMMARY_MARKER, StatelessSummary
from pydantic_ai_compaction.processors.switch import Switch
from pydantic_ai_compaction.processors.tiered import Tiered

__all__ = [
    'FORK_MARKER',
    'NATIVE_MARKER',
    'SUMMARY_MARKER',
    'Archive',
    'ArchiveItem',
    'BoundedSelection',
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
