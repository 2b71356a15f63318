"""The public API: what the package exports is what docs/architecture.md documents, and each name resolves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pydantic_ai_compaction
import pydantic_ai_compaction.runtime

ROOT = Path(__file__).parent.parent
DOCS = ROOT / 'docs' / 'architecture.md'


def documented_names() -> set[str]:
    """The backticked names of the bullet list under `## Public API`."""
    section = DOCS.read_text().split('## Public API', 1)[1].split('\n## ', 1)[0]
    bullets = next(block for block in section.split('\n\n') if block.startswith('- '))
    return set(re.findall(r'`([A-Za-z_]+)`', bullets))


def test_the_top_level_exports_exactly_the_documented_names() -> None:
    assert set(pydantic_ai_compaction.__all__) == documented_names() | {'__version__'}
    assert len(pydantic_ai_compaction.__all__) == len(set(pydantic_ai_compaction.__all__))


def test_every_exported_name_resolves() -> None:
    for name in pydantic_ai_compaction.__all__:
        assert getattr(pydantic_ai_compaction, name) is not None, name
    for name in pydantic_ai_compaction.runtime.__all__:
        assert getattr(pydantic_ai_compaction.runtime, name) is not None, name


def test_generic_verbs_are_not_top_level() -> None:
    for name in ('segment', 'validate', 'run_compaction', 'emit'):
        assert name not in pydantic_ai_compaction.__all__
        assert not hasattr(pydantic_ai_compaction, name)


def test_lazy_table_static_imports_and_all_agree() -> None:
    """The three spellings of the export list (lazy table, type-checking imports, `__all__`) name the same set."""
    tree = ast.parse((ROOT / 'pydantic_ai_compaction' / '__init__.py').read_text())
    static: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == 'TYPE_CHECKING':
            static |= {alias.name for item in node.body if isinstance(item, ast.ImportFrom) for alias in item.names}
    lazy = set(pydantic_ai_compaction._LAZY)  # pyright: ignore[reportPrivateUsage]
    assert static == lazy == set(pydantic_ai_compaction.__all__) - {'__version__'}


def test_extension_point_types_are_the_runtime_ones() -> None:
    from pydantic_ai_compaction.protocols.archive import ArchiveStore
    from pydantic_ai_compaction.runtime.events import EventObserver
    from pydantic_ai_compaction.runtime.segment import ProtectPredicate

    assert pydantic_ai_compaction.ArchiveStore is ArchiveStore
    assert pydantic_ai_compaction.EventObserver is EventObserver
    assert pydantic_ai_compaction.ProtectPredicate is ProtectPredicate


def test_every_top_level_import_in_the_repository_names_an_export() -> None:
    """The lazy `__getattr__` makes a type checker accept any top-level name: this catches a stale one."""
    import importlib.util

    exported = set(pydantic_ai_compaction.__all__)
    stale: list[tuple[str, int, str]] = []
    for folder in ('pydantic_ai_compaction', 'bench', 'tests', 'examples'):
        for path in sorted((ROOT / folder).rglob('*.py')):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == 'pydantic_ai_compaction' and not node.level:
                    stale += [
                        (str(path.relative_to(ROOT)), node.lineno, alias.name)
                        for alias in node.names
                        if alias.name not in exported
                        and importlib.util.find_spec(f'pydantic_ai_compaction.{alias.name}') is None
                    ]
    assert stale == []
