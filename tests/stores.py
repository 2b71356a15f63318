"""Store fixtures: the same contract suite runs on memory, SQLite and a real PostgreSQL server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai_compaction.protocols.archive import ArchiveError
from pydantic_ai_compaction.runtime.stores import InMemoryArchiveStore, PostgresArchiveStore, SQLiteArchiveStore

POSTGRES_DSN = os.environ.get('PAC_POSTGRES_DSN', 'postgresql://postgres:postgres@127.0.0.1:5432/compaction_test')
"""Set by `.ci/run`, which installs and starts a server; locally, any reachable server."""

REQUIRE_POSTGRES = os.environ.get('PAC_REQUIRE_POSTGRES') == '1'
"""In CI the PostgreSQL tests must run: a missing server is a failure, not a skip."""


_UNREACHABLE: list[str] = []
"""The reason the server could not be reached, once known (later tests skip without waiting again)."""


def postgres_store(**options: Any) -> PostgresArchiveStore:
    if _UNREACHABLE and not REQUIRE_POSTGRES:
        pytest.skip(f'no PostgreSQL server: {_UNREACHABLE[0]}')
    store = PostgresArchiveStore(POSTGRES_DSN, **options)
    try:
        store.notes('probe')  # the store never waits for the server when built: ask it something
    except ArchiveError as error:
        store.close()
        if REQUIRE_POSTGRES:
            raise
        _UNREACHABLE.append(str(error))
        pytest.skip(f'no PostgreSQL server: {error}')
    return store


def make_store(kind: str, tmp_path: Path) -> Any:
    if kind == 'memory':
        return InMemoryArchiveStore()
    if kind == 'sqlite':
        return SQLiteArchiveStore(tmp_path / 'archive.sqlite3')
    return postgres_store()


@pytest.fixture(params=['memory', 'sqlite', 'postgres'])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    instance = make_store(request.param, tmp_path)
    yield instance
    close = getattr(instance, 'close', None)
    if close is not None:
        close()
