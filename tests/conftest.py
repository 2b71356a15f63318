"""Shared fixtures, and the skips for optional distributions.

The suite also runs without pydantic-ai-harness and without the benchmark distribution (CI's job on the
newest pydantic-ai-slim, which harness would pin back). A test module that imports either at its top is
skipped as a whole when it is missing, and a test marked `harness` or `bench` is skipped on its own, each
with the reason and the install command.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from pydantic_ai import models

# Tests never reach a provider: a stray real model call fails loudly.
models.ALLOW_MODEL_REQUESTS = False

# No test's property is about time: a loaded machine stalls an example past hypothesis' 200 ms default deadline,
# which failed the test though its code was right. Tests with settings of their own inherit this.
settings.register_profile('suite', deadline=None)
settings.load_profile('suite')

OPTIONAL: dict[str, tuple[str, str]] = {
    'harness': ('pydantic_ai_harness', "needs pydantic-ai-harness: pip install 'pydantic-ai-compaction[harness]'"),
    'bench': ('pydantic_ai_compaction_bench', 'needs the benchmark distribution: pip install ./bench'),
}
"""Marker → (top-level module, skip reason) of each optional distribution."""

MISSING = {marker: reason for marker, (module, reason) in OPTIONAL.items() if importlib.util.find_spec(module) is None}
"""The optional distributions this environment lacks."""


def _needs(path: Path) -> list[str]:
    """The optional distributions *path* imports at its top level."""
    roots: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            roots.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split('.')[0])
    return [marker for marker, (module, _) in OPTIONAL.items() if module in roots]


class _Unavailable(pytest.Module):
    """A test module whose imports are not installed: reported as skipped, with the install command."""

    reason: str = ''

    def collect(self) -> Any:
        pytest.skip(self.reason)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    missing = [MISSING[marker] for marker in _needs(module_path) if marker in MISSING]
    if not missing:
        return None
    module = _Unavailable.from_parent(parent, path=module_path)
    module.reason = f'{module_path.name} {"; ".join(missing)}'
    return module


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker, reason in MISSING.items():
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def anyio_backend() -> str:
    return 'asyncio'


from .stores import store  # noqa: E402, F401  (the store fixture, parametrized over memory, SQLite, PostgreSQL)
