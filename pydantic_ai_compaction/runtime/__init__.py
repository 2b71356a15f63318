"""The machinery every strategy shares: segmentation, trigger, validator, layout application, events."""

from pydantic_ai_compaction.runtime.apply import apply_layout, assemble, restatement_message
from pydantic_ai_compaction.runtime.capability import (
    CompactionCapability,
    ConfiguredCompaction,
    RuntimeSettings,
)
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.engine import Outcome, run_compaction, shrink
from pydantic_ai_compaction.runtime.events import SPAN_NAME, EventObserver, emit
from pydantic_ai_compaction.runtime.pairing import pairing_problems
from pydantic_ai_compaction.runtime.retry import RetryPolicy, is_context_overflow, is_transient
from pydantic_ai_compaction.runtime.segment import (
    ConversationView,
    ProtectPredicate,
    compactions_so_far,
    our_record,
    segment,
)
from pydantic_ai_compaction.runtime.trigger import DEFAULT_TRIGGER, Crossing, Trigger
from pydantic_ai_compaction.runtime.validate import DEFAULT_FALLBACK_KEEP_LAST, fallback_layout, validate

__all__ = [
    'DEFAULT_FALLBACK_KEEP_LAST',
    'DEFAULT_TRIGGER',
    'SPAN_NAME',
    'CompactionCapability',
    'CompactionContext',
    'ConfiguredCompaction',
    'ConversationView',
    'Crossing',
    'EventObserver',
    'Outcome',
    'ProtectPredicate',
    'RetryPolicy',
    'RuntimeSettings',
    'Trigger',
    'apply_layout',
    'assemble',
    'compactions_so_far',
    'emit',
    'fallback_layout',
    'is_context_overflow',
    'is_transient',
    'our_record',
    'pairing_problems',
    'restatement_message',
    'run_compaction',
    'segment',
    'shrink',
    'validate',
]
