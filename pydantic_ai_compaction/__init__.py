"""Typed context-compaction strategies for pydantic-ai 2.x agents.

Every strategy is a pydantic-ai capability that shares one trigger and one runtime validator, and
also satisfies pydantic-ai-harness's `CompactionStrategy` protocol.

Example:
    ```python
    from pydantic_ai import Agent
    from pydantic_ai_compaction import Fork, Trigger

    agent = Agent('openai:gpt-5.2', capabilities=[Fork(trigger=Trigger(tokens=18_000), variant='json')])
    ```
"""

from pydantic_ai_compaction.processors import (
    Archive,
    BoundedSelection,
    CuratedSelection,
    ForgetReasoning,
    Fork,
    Native,
    NoCompaction,
    Notes,
    Orientation,
    Pipeline,
    Reassert,
    Recall,
    ResetToCheckpoint,
    StatelessSummary,
    Switch,
    Tiered,
)
from pydantic_ai_compaction.protocols import (
    METADATA_KEY,
    CompactionEvent,
    CompactionRecord,
    CompactionState,
    CompactorUsage,
    Exchange,
    Layout,
    Proposal,
    ProviderSummary,
    Summary,
)
from pydantic_ai_compaction.runtime import (
    CompactionCapability,
    CompactionContext,
    ConfiguredCompaction,
    ConversationView,
    RetryPolicy,
    Trigger,
    segment,
    validate,
)
from pydantic_ai_compaction.runtime.instructions import InstructionSources
from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore, PostgresArchiveStore, SQLiteArchiveStore

__version__ = '0.1.0'

__all__ = [
    'METADATA_KEY',
    'Archive',
    'BoundedSelection',
    'CompactionCapability',
    'CompactionContext',
    'CompactionEvent',
    'CompactionRecord',
    'CompactionState',
    'CompactorUsage',
    'ConfiguredCompaction',
    'ConversationView',
    'CuratedSelection',
    'Exchange',
    'ForgetReasoning',
    'Fork',
    'InMemoryArchiveStore',
    'InstructionSources',
    'Layout',
    'Native',
    'NoCompaction',
    'Notes',
    'Orientation',
    'Pipeline',
    'PostgresArchiveStore',
    'Proposal',
    'ProviderSummary',
    'Reassert',
    'Recall',
    'ResetToCheckpoint',
    'RetryPolicy',
    'SQLiteArchiveStore',
    'StatelessSummary',
    'Summary',
    'Switch',
    'Tiered',
    'Trigger',
    '__version__',
    'segment',
    'validate',
]
