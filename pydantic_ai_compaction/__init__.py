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
    from pydantic_ai_compaction.protocols.archive import ArchiveStore
    from pydantic_ai_compaction.runtime import (
        CompactionCapability,
        CompactionContext,
        ConfiguredCompaction,
        ConversationView,
        EventObserver,
        ProtectPredicate,
        RetryPolicy,
        Trigger,
    )
    from pydantic_ai_compaction.runtime.checks import ConfigurationError
    from pydantic_ai_compaction.runtime.instructions import InstructionSources
    from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore, PostgresArchiveStore, SQLiteArchiveStore

__version__ = '0.1.0'

_PROCESSORS = 'pydantic_ai_compaction.processors'
_PROTOCOLS = 'pydantic_ai_compaction.protocols'
_RUNTIME = 'pydantic_ai_compaction.runtime'

# Names load on first use (PEP 562): `import pydantic_ai_compaction`, and the pytest plugin this package
# registers in every project that has it installed, cost nearly nothing until a strategy is touched.
_LAZY: dict[str, str] = {
    # What users register: strategies, views and memory.
    **dict.fromkeys(
        (
            'Archive',
            'BoundedSelection',
            'ClearThenSummarize',
            'CuratedSelection',
            'ForgetReasoning',
            'Fork',
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
        ),
        _PROCESSORS,
    ),
    # What users configure them with.
    'Trigger': _RUNTIME,
    'RetryPolicy': _RUNTIME,
    'EventObserver': _RUNTIME,
    'ProtectPredicate': _RUNTIME,
    'InstructionSources': 'pydantic_ai_compaction.runtime.instructions',
    'ConfigurationError': 'pydantic_ai_compaction.runtime.checks',
    'ArchiveStore': 'pydantic_ai_compaction.protocols.archive',
    'InMemoryArchiveStore': 'pydantic_ai_compaction.runtime.stores',
    'PostgresArchiveStore': 'pydantic_ai_compaction.runtime.stores',
    'SQLiteArchiveStore': 'pydantic_ai_compaction.runtime.stores',
    # What they observe.
    'CompactionEvent': _PROTOCOLS,
    'CompactionRecord': _PROTOCOLS,
    'CompactorUsage': _PROTOCOLS,
    'CompactionState': _PROTOCOLS,
    'METADATA_KEY': _PROTOCOLS,
    # The extension points to write a strategy.
    'CompactionCapability': _RUNTIME,
    'ConfiguredCompaction': _RUNTIME,
    'CompactionContext': _RUNTIME,
    'ConversationView': _RUNTIME,
    'Exchange': _PROTOCOLS,
    'Proposal': _PROTOCOLS,
    'Summary': _PROTOCOLS,
    'ProviderSummary': _PROTOCOLS,
    'Layout': _PROTOCOLS,
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


__all__ = [
    'METADATA_KEY',
    'Archive',
    'ArchiveStore',
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
    'EventObserver',
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
    'ProtectPredicate',
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
]
