"""What installing the package costs a project: the pytest plugin and the top-level import load nearly nothing,
the core never imports pydantic-ai-harness, and the metadata says what the code does."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pydantic_ai_compaction

ROOT = Path(__file__).parent.parent

HEAVY = ('pydantic_ai', 'pydantic_ai_harness', 'pydantic', 'jsonschema', 'syrupy', 'opentelemetry', 'genai_prices')
"""Top-level packages neither the plugin nor `import pydantic_ai_compaction` may load."""


def loaded_after(code: str) -> list[str]:
    """Modules a fresh interpreter holds after running *code* that it did not hold before."""
    probe = (
        f'import sys, json\nbefore = set(sys.modules)\n{code}\nprint(json.dumps(sorted(set(sys.modules) - before)))\n'
    )
    out = subprocess.run([sys.executable, '-c', probe], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split('.')[0] in HEAVY]


def ours(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith('pydantic_ai_compaction.') and m != 'pydantic_ai_compaction._lazy']


def test_the_pytest_plugin_imports_neither_pydantic_ai_nor_the_runtime() -> None:
    # pytest itself is loaded by any run that loads the plugin: import it first, so only the plugin is measured.
    loaded = loaded_after('import pytest\nimport pydantic_ai_compaction.pytest_plugin')
    assert 'pydantic_ai_compaction.pytest_plugin' in loaded
    assert heavy(loaded) == []
    assert ours(loaded) == ['pydantic_ai_compaction.pytest_plugin']


def test_importing_the_package_loads_only_its_lazy_names() -> None:
    loaded = loaded_after('import pydantic_ai_compaction\nassert pydantic_ai_compaction.__version__')
    assert 'pydantic_ai_compaction' in loaded
    assert heavy(loaded) == [] and ours(loaded) == []


def test_a_name_loads_its_module_on_first_use_and_never_harness() -> None:
    loaded = loaded_after('from pydantic_ai_compaction import Fork, Trigger\nFork(trigger=Trigger(tokens=10))')
    assert 'pydantic_ai' in loaded and 'pydantic_ai_compaction.processors.strategies.fork' in loaded
    # Even where harness is installed, the library never imports it.
    assert not [m for m in loaded if m.split('.')[0] == 'pydantic_ai_harness']


def test_a_fork_agent_compacts_without_importing_harness() -> None:
    # The script CI runs on the built wheel next to the newest pydantic-ai-slim, here on the source tree.
    script = ROOT / '.ci' / 'wheel_smoke.py'
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert 'Fork agent done' in out.stdout and ' 0 compaction' not in out.stdout


def test_one_version_source() -> None:
    assert pydantic_ai_compaction.__version__ == importlib.metadata.version('pydantic-ai-compaction')
    project = tomllib.loads((ROOT / 'pyproject.toml').read_text())
    assert 'version' not in project['project'] and project['project']['dynamic'] == ['version']
    assert project['tool']['hatch']['version']['path'] == 'pydantic_ai_compaction/__init__.py'


def test_metadata_matches_what_the_code_needs() -> None:
    project = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']
    dependencies = project['dependencies']
    assert 'pydantic-ai-slim>=2.62,<3' in dependencies
    assert not [d for d in dependencies if d.startswith('pydantic-ai-harness')]
    extras = project['optional-dependencies']
    assert set(extras) == {'harness', 'postgres', 'testing'}  # `dev` is a dependency group, never published
    assert extras['harness'] == ['pydantic-ai-harness>=0.62'] and extras['testing'] == ['syrupy>=4.8']
    bench = tomllib.loads((ROOT / 'bench' / 'pyproject.toml').read_text())['project']
    assert [d for d in bench['dependencies'] if d.startswith('pydantic-ai-harness')]
    installed = importlib.metadata.metadata('pydantic-ai-compaction')
    assert installed.get_all('Provides-Extra') is not None and 'dev' not in installed.get_all('Provides-Extra')  # pyright: ignore[reportOperatorIssue]
    assert (ROOT / 'pydantic_ai_compaction' / 'py.typed').exists()
