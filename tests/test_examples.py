"""Every example runs as a user would run it and prints what the README promises."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import runpy
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent.parent / 'examples' / 'quickstart.py'


def test_quickstart_runs(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location('quickstart', EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    asyncio.run(module.main())
    out = capsys.readouterr().out
    rows = {
        line.split('|')[1].strip(): line
        for line in out.splitlines()
        if line.startswith('| ') and 'strategy' not in line
    }
    assert '8 of 8 ids, lowercase' in rows['none']
    assert '8 of 8 ids, lowercase' in rows['reassert+native']
    # The reset's default checkpoint carries the incidents found in the logs through every reset (seed 004).
    assert '8 of 8 ids, lowercase' in rows['reset']


EXAMPLES = EXAMPLE.parent


def run_in_process(name: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run `examples/<name>` as `__main__` in this process (its imports are already loaded); its printed lines."""
    capsys.readouterr()
    runpy.run_path(str(EXAMPLES / name), run_name='__main__')
    return capsys.readouterr().out.splitlines()


def test_registering_strategies_in_an_agent(capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_in_process('agent_strategies.py', capsys)
    assert [line.split(':')[0] for line in lines] == ['fork', 'summary', 'reset']
    for line in lines:
        compactions = int(line.split(': ')[1].split(' ')[0])
        assert compactions >= 3 and line.endswith('answer: INC-7 (owner ayse)')
    # The reset keeps the opening request, one checkpoint per reset (appended, the earlier ones unchanged), the
    # exchange in progress and the answer: nothing else of the history.
    kept = {line.split(':')[0]: int(line.split(', ')[1].split(' ')[0]) for line in lines}
    resets = int(lines[2].split(': ')[1].split(' ')[0])
    assert kept['reset'] == 1 + resets + 3 and lines[2].split(', ')[2] == f'{resets} summary part(s)'


def test_a_hybrid_switches_then_a_pipeline_spares_its_second_step(capsys: pytest.CaptureFixture[str]) -> None:
    switch, restated, pipeline = run_in_process('hybrid.py', capsys)
    names = switch.removeprefix('switch: ').split(', ')
    assert names[:2] == ['reassert+native', 'reassert+native'] and set(names[2:]) == {'fork'} and len(names) > 2
    assert restated == 'restated after native compaction: CHANGE: report ids in lowercase'
    assert set(pipeline.removeprefix('pipeline: ').split(', ')) == {'reset'}


def test_archive_and_recall_on_sqlite_across_two_processes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / 'agent.sqlite3'
    # The first process is this one; the example starts the second itself (its output reaches the same fd).
    monkeypatch.setattr(sys, 'argv', [str(EXAMPLES / 'archive_recall_sqlite.py'), str(database)])
    capfd.readouterr()
    runpy.run_path(str(EXAMPLES / 'archive_recall_sqlite.py'), run_name='__main__')
    first, recall, recovered = capfd.readouterr().out.splitlines()
    assert first == (
        'first process: [result r1 archived as a1: log 0: one incident, payments context_recover("a1") returns the '
        'original.]'
    )
    assert recall == (
        'second process, recall: [read_log({"index":0}) r1, line 90] '
        'INCIDENT inc-1007 service=payments severity=2 owner=ayse'
    )
    assert recovered == 'second process, recovered: 5656 characters, the original intact: True'
    assert database.stat().st_size > 0  # the store the second process read is the file the first one wrote


@pytest.mark.harness
def test_harness_interop(capsys: pytest.CaptureFixture[str]) -> None:
    tiered, compacted, pinned = run_in_process('harness_interop.py', capsys)
    assert tiered.startswith('tiered: answer INC-7,') and tiered.endswith('boundaries: fork')
    before, after = (int(n) for n in compacted.split(': ')[1].split(' messages')[0].split(' -> '))
    assert after < before and compacted.endswith('boundaries: fork, summary')
    assert pinned == 'pinned request kept: True'


def test_migrating_a_history_processors_function(capsys: pytest.CaptureFixture[str]) -> None:
    refused, process_history, ours = run_in_process('migrate_history_processors.py', capsys)
    assert refused == 'history_processors=: TypeError in pydantic-ai 2.x'
    assert process_history == (
        'ProcessHistory(keep_recent_messages): 6 messages, opening request kept: False, unpaired tool calls/returns: 1'
    )
    assert ours.startswith('ResetToCheckpoint(trigger=Trigger(messages=6)): ')
    assert ours.endswith('opening request kept: True, unpaired tool calls/returns: 0')


def test_snapshot_testing_a_compaction_in_a_project_of_its_own(tmp_path: Path) -> None:
    """The example project (whose test is docs/testing.md's, verbatim) records, snapshots and passes."""
    source = EXAMPLES / 'snapshot_testing'
    project = tmp_path / 'project'
    shutil.copytree(source, project, ignore=shutil.ignore_patterns('__snapshots__', 'histories', '__pycache__'))
    completed = subprocess.run(
        [sys.executable, str(project / 'record_history.py')], capture_output=True, text=True, cwd=project, timeout=120
    )
    assert completed.stdout.strip() == 'wrote 14 messages to tests/histories/audit.json'
    pytest_run = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:randomly', '-p', 'no:cacheprovider']
    update = subprocess.run(
        [*pytest_run, '--snapshot-update'], capture_output=True, text=True, cwd=project, timeout=300
    )
    assert '1 snapshot generated.' in update.stdout and '1 passed' in update.stdout, update.stdout + update.stderr
    written = project / 'tests' / '__snapshots__' / 'test_fork_layout' / 'test_fork_layout.txt'
    committed = source / 'tests' / '__snapshots__' / 'test_fork_layout' / 'test_fork_layout.txt'
    # A fresh recording renders as the reviewed snapshot in the repository (timestamps and call ids left out).
    assert written.read_text() == committed.read_text()
    # So the reviewed snapshot in the repository is what `pytest` checks a fresh recording against.


def test_the_snapshot_example_is_docs_testing_md_verbatim() -> None:
    docs = (EXAMPLES.parent / 'docs' / 'testing.md').read_text()
    block = re.findall(r'```python\n(.*?)```', docs, re.DOTALL)[0]
    example = (EXAMPLES / 'snapshot_testing' / 'tests' / 'test_fork_layout.py').read_text()
    assert example.endswith(block) and 'from pydantic_ai_compaction.testing import load_history, replay' in block
    # What the page says the project needs, the example project has.
    assert 'asyncio_mode = "auto"' in docs
    assert 'asyncio_mode = "auto"' in (EXAMPLES / 'snapshot_testing' / 'pyproject.toml').read_text()
    assert 'pydantic-ai-compaction[testing]' in docs


def test_the_fixture_docstring_names_functions_that_exist() -> None:
    import ast
    import importlib

    from pydantic_ai_compaction import pytest_plugin

    docstring = pytest_plugin.compaction_snapshot.__doc__ or ''
    blocks = re.findall(r'```python\n(.*?)```', docstring, re.DOTALL)
    code = '\n'.join(textwrap.dedent(block) for block in blocks)
    imports = [node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.ImportFrom)]
    named = [(node.module or '', alias.name) for node in imports for alias in node.names]
    assert ('pydantic_ai_compaction.testing', 'load_history') in named and len(named) >= 3
    for module, name in named:
        assert hasattr(importlib.import_module(module), name), f'{module}.{name}'
    called = {
        node.func.id
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert called - {name for _, name in named} == set(), called
