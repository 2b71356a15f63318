"""The package's layers, enforced on its `import` statements.

- `protocols/` is plain data: it imports nothing from the package.
- `runtime/` never imports `processors/`.
- A processor imports only `protocols` and `runtime` of the package: strategies, views and memory never
  reach into each other (nor into the package's top level or `testing`).
- No module imports a private name (`_x`) of another module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = 'pydantic_ai_compaction'
ROOT = Path(__file__).parent.parent / PACKAGE

KNOWN_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset(
    {
        # Archiving a result is being moved into one runtime function both use; until then these two
        # processors read archive's numbering and serialization helpers. No other edge is allowed.
        (f'{PACKAGE}.processors.views.tiered', f'{PACKAGE}.processors.memory.archive'),
        (f'{PACKAGE}.processors.memory.recall', f'{PACKAGE}.processors.memory.archive'),
    }
)
"""`(importer, imported)` module pairs allowed to break a rule for now; the list may only shrink."""


@dataclass(frozen=True)
class Violation:
    importer: str
    imported: str
    rule: str


def module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix('').parts]
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def imports_of(path: Path, module: str) -> list[tuple[str, str | None]]:
    """`(imported module, imported name or None)` for every import in *path*, type-checking ones included."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == '__init__.py' else module.rpartition('.')[0]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = '.'.join([*anchor, base] if base else anchor)
            out.extend((base, alias.name) for alias in node.names)
    return out


def layer(module: str, root: str) -> tuple[str, ...]:
    """`('protocols',)`, `('runtime',)`, `('processors', 'strategies', 'fork')`, ... (the package itself: `()`)."""
    parts = module.split('.')
    return tuple(parts[1:]) if parts[0] == root else ()


def check(root: Path, exceptions: frozenset[tuple[str, str]] = frozenset()) -> list[Violation]:
    """Every import in the package at *root* that breaks a layering rule."""
    name = root.name
    found: list[Violation] = []
    for path in sorted(root.rglob('*.py')):
        importer = module_name(path, root)
        mine = layer(importer, name)
        for imported, alias in imports_of(path, importer):
            if imported != name and not imported.startswith(f'{name}.'):
                continue
            # `from package.x import y` may import the submodule `package.x.y`.
            target = f'{imported}.{alias}' if alias and _is_module(root, f'{imported}.{alias}') else imported
            theirs = layer(target, name)
            rule = _rule_broken(mine, theirs, alias)
            if rule is not None and (importer, target) not in exceptions:
                found.append(Violation(importer, target, rule))
    return found


def _is_module(root: Path, dotted: str) -> bool:
    path = root.joinpath(*layer(dotted, root.name))
    return path.with_suffix('.py').is_file() or (path / '__init__.py').is_file()


def _rule_broken(mine: tuple[str, ...], theirs: tuple[str, ...], alias: str | None) -> str | None:
    if alias is not None and alias.startswith('_') and not alias.startswith('__'):
        return 'private name of another module'
    if not mine:
        return None  # the package's own `__init__` and top-level modules re-export the layers
    if mine[0] == 'protocols' and (not theirs or theirs[0] != 'protocols'):
        return 'protocols import nothing from the package'
    if mine[0] == 'runtime' and theirs and theirs[0] == 'processors':
        return 'runtime never imports processors'
    # A processor module (`processors.<kind>.<name>`) imports protocols, runtime and nothing else of ours.
    if mine[0] == 'processors' and len(mine) >= 3 and theirs[:1] not in (('protocols',), ('runtime',)):
        return 'processors never import each other' if theirs[:3] != mine[:3] else None
    return None


def test_the_package_keeps_its_layers() -> None:
    assert check(ROOT, KNOWN_EXCEPTIONS) == []


def test_known_exceptions_are_still_needed() -> None:
    """An exception that no longer matches anything is removed, so the list only shrinks."""
    real = {(v.importer, v.imported) for v in check(ROOT)}
    assert real >= KNOWN_EXCEPTIONS


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / 'pkg'
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for directory in [root, *(p for p in root.rglob('*') if p.is_dir())]:
        (directory / '__init__.py').touch()
    return root


GOOD = {
    'protocols/types.py': 'from dataclasses import dataclass\n',
    'runtime/engine.py': 'from pkg.protocols.types import dataclass\n',
    'processors/strategies/fork.py': 'from pkg.runtime import engine\nfrom pkg.protocols.types import dataclass\n',
    'processors/views/tiered.py': 'from pkg.runtime.engine import dataclass\n',
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert check(_tree(tmp_path, GOOD)) == []


@pytest.mark.parametrize(
    ('relative', 'text', 'rule'),
    [
        ('protocols/strategy.py', 'from pkg.runtime.engine import dataclass\n', 'protocols import nothing'),
        ('protocols/bad.py', 'if True:\n    import pkg.runtime.engine\n', 'protocols import nothing'),
        ('runtime/apply.py', 'from pkg.processors.strategies import fork\n', 'runtime never imports processors'),
        ('runtime/apply2.py', 'from ..processors.views.tiered import dataclass\n', 'runtime never imports processors'),
        ('processors/views/forget.py', 'from pkg.processors.strategies.fork import dataclass\n', 'each other'),
        ('processors/memory/recall.py', 'from pkg.processors.views import tiered\n', 'each other'),
        ('processors/memory/notes.py', 'import pkg\n', 'each other'),
        ('runtime/pairing.py', 'from pkg.runtime.engine import _helper\n', 'private name'),
    ],
)
def test_a_forbidden_import_is_reported(tmp_path: Path, relative: str, text: str, rule: str) -> None:
    violations = check(_tree(tmp_path, {**GOOD, relative: text}))
    assert len(violations) == 1
    assert violations[0].importer == 'pkg.' + relative.removesuffix('.py').replace('/', '.')
    assert rule in violations[0].rule


def test_an_exception_silences_exactly_its_edge(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            **GOOD,
            'processors/memory/recall.py': 'from pkg.processors.memory.archive import dataclass\n',
            'processors/memory/archive.py': 'x = 1\n',
            'processors/views/forget.py': 'from pkg.processors.memory.archive import dataclass\n',
        },
    )
    allowed = frozenset({('pkg.processors.memory.recall', 'pkg.processors.memory.archive')})
    assert [v.importer for v in check(root, allowed)] == ['pkg.processors.views.forget']
