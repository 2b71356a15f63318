"""Wire tests send real provider requests, to a mocked transport: model requests are allowed here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic_ai import models


@pytest.fixture(autouse=True)
def allow_model_requests() -> Iterator[None]:
    with models.override_allow_model_requests(True):
        yield
