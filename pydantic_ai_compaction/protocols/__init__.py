"""Types, protocols and JSON Schemas. No logic lives here."""

from pydantic_ai_compaction.protocols.schemas import FORK_JSON_SCHEMA
from pydantic_ai_compaction.protocols.strategy import Strategy
from pydantic_ai_compaction.protocols.types import (
    METADATA_KEY,
    CompactionEvent,
    CompactionRecord,
    CompactionState,
    CompactorUsage,
    Exchange,
    ExchangeKind,
    Layout,
    PartRef,
    Proposal,
    ProviderSummary,
    Summary,
)

__all__ = [
    'FORK_JSON_SCHEMA',
    'METADATA_KEY',
    'CompactionEvent',
    'CompactionRecord',
    'CompactionState',
    'CompactorUsage',
    'Exchange',
    'ExchangeKind',
    'Layout',
    'PartRef',
    'Proposal',
    'ProviderSummary',
    'Strategy',
    'Summary',
]
