"""Plain data: types, the metadata schema and JSON Schemas. Nothing here imports the rest of the package."""

from pydantic_ai_compaction.protocols.schemas import FORK_JSON_SCHEMA
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
    'Summary',
]
