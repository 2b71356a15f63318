"""Every public field has a docstring, found the way the API reference finds it (an attribute docstring).

The docs site's reference is built by mkdocstrings, whose griffe reads a field's documentation from the string
literal right under its annotation in the class body. This test reads the source the same way, with `ast`, for
every public dataclass the package exports, so a field without one fails here before it shows up blank there.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from functools import cache

import pytest

import pydantic_ai_compaction
from pydantic_ai_compaction.runtime import stores

PUBLIC = sorted(
    {
        obj
        for obj in [
            *(getattr(pydantic_ai_compaction, name) for name in pydantic_ai_compaction.__all__),
            *(getattr(stores, name) for name in stores.__all__),
        ]
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj)
    },
    key=lambda cls: cls.__qualname__,
)


@cache
def documented_fields(cls: type) -> frozenset[str]:
    """Names annotated in *cls*'s own body with a string literal right after them."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)).body
    names: set[str] = set()
    for node, after in zip(body, [*body[1:], None], strict=True):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
            and after.value.value.strip()
        ):
            names.add(node.target.id)
    return frozenset(names)


def owner(cls: type, name: str) -> type:
    """The class of *cls*'s MRO whose body declares field *name*."""
    return next(base for base in cls.__mro__ if name in getattr(base, '__annotations__', {}))


def test_the_walk_finds_the_public_dataclasses() -> None:
    names = {cls.__name__ for cls in PUBLIC}
    assert {'Fork', 'StatelessSummary', 'Trigger', 'CompactionRecord', 'Archive', 'RetryPolicy'} <= names
    assert len(PUBLIC) >= 25


@pytest.mark.parametrize('cls', PUBLIC, ids=lambda cls: cls.__name__)
def test_every_public_field_has_a_docstring(cls: type) -> None:
    missing: list[str] = []
    for field in dataclasses.fields(cls):
        if field.name.startswith('_'):
            continue
        declared_in = owner(cls, field.name)
        if not declared_in.__module__.startswith('pydantic_ai_compaction'):
            continue  # pydantic-ai's own fields (`AbstractCapability`) are documented there
        if field.name not in documented_fields(declared_in):
            missing.append(f'{declared_in.__qualname__}.{field.name}')
    assert missing == []


def test_an_undocumented_field_is_found() -> None:
    @dataclasses.dataclass
    class Example:
        documented: int = 0
        """Documented."""

        bare: int = 0

    assert documented_fields(Example) == {'documented'}


def test_the_api_reference_lists_every_public_name() -> None:
    """docs/api.md names each export by its defining module, so the reference cannot silently lose one."""
    import re
    from pathlib import Path

    page = (Path(__file__).parent.parent / 'docs' / 'api.md').read_text()
    listed = {line.rsplit('.', 1)[-1] for line in re.findall(r'^::: (\S+)$', page, re.MULTILINE)}
    constants = {name for name in pydantic_ai_compaction.__all__ if name.isupper() or name.startswith('__')}
    missing = set(pydantic_ai_compaction.__all__) - constants - listed - {'EventObserver'}
    assert missing == set()
    assert 'events' in listed  # the module section that documents EventObserver and SPAN_NAME
