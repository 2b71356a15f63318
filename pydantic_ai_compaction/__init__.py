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

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_ai_compaction._lazy import lazy_names

if TYPE_CHECKING:
    from pydantic_ai_compaction.processors import (
        Archive,
        BoundedSelection,
        ClearThenSummarize,
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
    from pydantic_ai_compaction.runtime.checks import ConfigurationError
    from pydantic_ai_compaction.runtime.instructions import InstructionSources
    from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore, PostgresArchiveStore, SQLiteArchiveStore

__version__ = '0.1.0'

# Names load on first use (PEP 562): `import pydantic_ai_compaction`, and the pytest plugin this package
# registers in every project that has it installed, cost nearly nothing until a strategy is touched.
_LAZY: dict[str, str] = {
    'Archive': 'pydantic_ai_compaction.processors',
    'BoundedSelection': 'pydantic_ai_compaction.processors',
    'ClearThenSummarize': 'pydantic_ai_compaction.processors',
    'CuratedSelection': 'pydantic_ai_compaction.processors',
    'ForgetReasoning': 'pydantic_ai_compaction.processors',
    'Fork': 'pydantic_ai_compaction.processors',
    'Native': 'pydantic_ai_compaction.processors',
    'NoCompaction': 'pydantic_ai_compaction.processors',
    'Notes': 'pydantic_ai_compaction.processors',
    'Orientation': 'pydantic_ai_compaction.processors',
    'Pipeline': 'pydantic_ai_compaction.processors',
    'Reassert': 'pydantic_ai_compaction.processors',
    'Recall': 'pydantic_ai_compaction.processors',
    'ResetToCheckpoint': 'pydantic_ai_compaction.processors',
    'StatelessSummary': 'pydantic_ai_compaction.processors',
    'Switch': 'pydantic_ai_compaction.processors',
    'Tiered': 'pydantic_ai_compaction.processors',
    'METADATA_KEY': 'pydantic_ai_compaction.protocols',
    'CompactionEvent': 'pydantic_ai_compaction.protocols',
    'CompactionRecord': 'pydantic_ai_compaction.protocols',
    'CompactionState': 'pydantic_ai_compaction.protocols',
    'CompactorUsage': 'pydantic_ai_compaction.protocols',
    'Exchange': 'pydantic_ai_compaction.protocols',
    'Layout': 'pydantic_ai_compaction.protocols',
    'Proposal': 'pydantic_ai_compaction.protocols',
    'ProviderSummary': 'pydantic_ai_compaction.protocols',
    'Summary': 'pydantic_ai_compaction.protocols',
    'CompactionCapability': 'pydantic_ai_compaction.runtime',
    'CompactionContext': 'pydantic_ai_compaction.runtime',
    'ConfiguredCompaction': 'pydantic_ai_compaction.runtime',
    'ConversationView': 'pydantic_ai_compaction.runtime',
    'RetryPolicy': 'pydantic_ai_compaction.runtime',
    'Trigger': 'pydantic_ai_compaction.runtime',
    'segment': 'pydantic_ai_compaction.runtime',
    'validate': 'pydantic_ai_compaction.runtime',
    'ConfigurationError': 'pydantic_ai_compaction.runtime.checks',
    'InstructionSources': 'pydantic_ai_compaction.runtime.instructions',
    'InMemoryArchiveStore': 'pydantic_ai_compaction.runtime.stores',
    'PostgresArchiveStore': 'pydantic_ai_compaction.runtime.stores',
    'SQLiteArchiveStore': 'pydantic_ai_compaction.runtime.stores',
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


__all__ = [
    'METADATA_KEY',
    'Archive',
    'BoundedSelection',
    'ClearThenSummarize',
    'CompactionCapability',
    'CompactionContext',
    'CompactionEvent',
    'CompactionRecord',
    'CompactionState',
    'CompactorUsage',
    'ConfigurationError',
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
