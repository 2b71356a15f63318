"""The machinery every strategy shares: segmentation, trigger, validator, layout application, events.

Exported here is what writing a strategy needs (the base classes, the context and the view a strategy
is given, the settings types it carries) and the functions to inspect a history the way the runtime
does (`segment`, `validate`, `apply_layout`, `our_record`, `pairing_problems`). Everything else is
internal to its module.
"""

from pydantic_ai_compaction.runtime.apply import apply_layout
from pydantic_ai_compaction.runtime.capability import (
    CompactionCapability,
    ConfiguredCompaction,
    RuntimeSettings,
    WrappingCompaction,
)
from pydantic_ai_compaction.runtime.context import CompactionContext, Strategy
from pydantic_ai_compaction.runtime.events import SPAN_NAME, EventObserver
from pydantic_ai_compaction.runtime.pairing import pairing_problems
from pydantic_ai_compaction.runtime.retry import RetryPolicy
from pydantic_ai_compaction.runtime.segment import ConversationView, ProtectPredicate, our_record, segment
from pydantic_ai_compaction.runtime.trigger import DEFAULT_TRIGGER, Trigger
from pydantic_ai_compaction.runtime.validate import DEFAULT_FALLBACK_KEEP_LAST, validate

__all__ = [
    'DEFAULT_FALLBACK_KEEP_LAST',
    'DEFAULT_TRIGGER',
    'SPAN_NAME',
    'CompactionCapability',
    'CompactionContext',
    'ConfiguredCompaction',
    'ConversationView',
    'EventObserver',
    'ProtectPredicate',
    'RetryPolicy',
    'RuntimeSettings',
    'Strategy',
    'Trigger',
    'WrappingCompaction',
    'apply_layout',
    'our_record',
    'pairing_problems',
    'segment',
    'validate',
]
