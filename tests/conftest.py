"""Shared fixtures."""

from __future__ import annotations

import pytest
from pydantic_ai import models

# Tests never reach a provider: a stray real model call fails loudly.
models.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


from .stores import store  # noqa: E402, F401  (the store fixture, parametrized over memory, SQLite, PostgreSQL)
