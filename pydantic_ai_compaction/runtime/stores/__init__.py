"""Archive stores: in memory (tests), SQLite (the embedded default), PostgreSQL (many workers)."""

from pydantic_ai_compaction.runtime.stores.memory import InMemoryArchiveStore
from pydantic_ai_compaction.runtime.stores.postgres import PostgresArchiveStore
from pydantic_ai_compaction.runtime.stores.sqlite import SQLiteArchiveStore

__all__ = ['InMemoryArchiveStore', 'PostgresArchiveStore', 'SQLiteArchiveStore']
