"""What importing the package and loading its pytest plugin cost, against plain pydantic-ai and plain pytest.

Every figure is a median over fresh interpreters started in the same run as its anchor, so the ratio holds
across machines. Bounds (issue 16, target 5): importing the package adds under 10 % to importing
pydantic-ai, and the pytest plugin adds under 10 % to a plain pytest start.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BOUND = 0.10
"""Largest share a measured case may add to its anchor."""

PLUGIN = 'pydantic_ai_compaction'
"""The plugin's `pytest11` entry-point name (`-p no:NAME` turns it off)."""


@dataclass(frozen=True)
class ImportCase:
    """A statement timed in a fresh interpreter, after an untimed one, against an anchor statement."""

    name: str
    statement: str
    before: str = 'pass'
    """Run first, untimed: what the user has already imported (the row adds its own time to the anchor's)."""
    bounded: bool = True
    """Whether the 10 % bound applies (informational rows are printed without a verdict)."""


ANCHOR = 'import pydantic_ai'
"""What every user of the package imports anyway."""

IMPORT_CASES: tuple[ImportCase, ...] = (
    ImportCase('import pydantic_ai_compaction (alone)', 'import pydantic_ai_compaction'),
    ImportCase('import pydantic_ai_compaction (after pydantic_ai)', 'import pydantic_ai_compaction', before=ANCHOR),
    ImportCase(
        'first strategy (from pydantic_ai_compaction import Fork, after pydantic_ai)',
        'from pydantic_ai_compaction import Fork',
        before=ANCHOR,
        bounded=False,
    ),
)
"""The package's cost on top of what every user of it already imports."""


@dataclass(frozen=True)
class Timing:
    """Median milliseconds of a case and its anchor, measured alternately in the same run."""

    name: str
    ms: float
    modules: int
    anchor: str
    anchor_ms: float
    anchor_modules: int
    bounded: bool

    @property
    def ratio(self) -> float:
        """The case over its anchor."""
        return self.ms / max(self.anchor_ms, 1e-6)

    @property
    def verdict(self) -> str:
        """`met`, `not met`, or `–` for an informational row."""
        if not self.bounded:
            return '–'
        return 'met' if self.ratio < 1 + BOUND else 'not met'


def _interpreter(statement: str, *, before: str = 'pass') -> tuple[float, int]:
    """Milliseconds *statement* takes in a fresh interpreter (after the untimed *before*), and the modules loaded."""
    probe = (
        f'import sys, time; {before}; t = time.perf_counter(); {statement}; '
        'print((time.perf_counter() - t) * 1000, len(sys.modules))'
    )
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1])


def import_timings(repeat: int = 5) -> list[Timing]:
    """Each case and the anchor, alternated so that a slow moment of the machine hits both."""
    anchor: list[float] = []
    anchor_modules = 0
    measured: dict[str, list[float]] = {case.name: [] for case in IMPORT_CASES}
    modules: dict[str, int] = {}
    for _ in range(repeat):
        ms, anchor_modules = _interpreter(ANCHOR)
        anchor.append(ms)
        for case in IMPORT_CASES:
            ms, modules[case.name] = _interpreter(case.statement, before=case.before)
            measured[case.name].append(ms)
    anchor_ms = statistics.median(anchor)
    timings: list[Timing] = []
    for case in IMPORT_CASES:
        ms = statistics.median(measured[case.name])
        # After the anchor, the row costs the anchor plus what the statement adds to it.
        total = ms if case.before == 'pass' else anchor_ms + ms
        timings.append(Timing(case.name, total, modules[case.name], ANCHOR, anchor_ms, anchor_modules, case.bounded))
    return timings


def _pytest_start(directory: Path, *, plugin: bool) -> float:
    """Wall milliseconds of `pytest --collect-only` on one trivial test, with or without this package's plugin."""
    command = [sys.executable, '-m', 'pytest', '-q', '--collect-only', '-p', 'no:cacheprovider', str(directory)]
    if not plugin:
        command[4:4] = ['-p', f'no:{PLUGIN}']
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, cwd=directory, env={**os.environ, 'PYTHONHASHSEED': '0'})
    return (time.perf_counter() - started) * 1000


def plugin_timings(repeat: int = 5) -> list[Timing]:
    """The plugin against a plain pytest start (collecting one test), two ways.

    What loading the plugin adds is timed in-process (a fresh interpreter that has imported pytest, as a
    pytest start has, then imports the plugin module), and set against the plain start: the start's own
    wall time varies by more than the plugin costs on a shared machine. The whole start with and without
    the plugin is printed beside it.
    """
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        (directory / 'test_one.py').write_text('def test_one():\n    assert 1 + 1 == 2\n')
        _pytest_start(directory, plugin=True)  # warm the file system cache for both
        ours: list[float] = []
        theirs: list[float] = []
        added: list[float] = []
        modules = 0
        for index in range(repeat):
            if index < 3:  # whole starts are slow and only shown beside the in-process figure
                ours.append(_pytest_start(directory, plugin=True))
                theirs.append(_pytest_start(directory, plugin=False))
            ms, modules = _interpreter(f'import {PLUGIN}.pytest_plugin', before='import pytest')
            added.append(ms)
    _, pytest_modules = _interpreter('pass', before='import pytest')
    plain = statistics.median(theirs)
    plugin_ms = statistics.median(added)
    return [
        Timing(
            'plugin load (import after pytest) in a pytest start',
            plain + plugin_ms,
            modules,
            f'pytest -p no:{PLUGIN} (whole start)',
            plain,
            pytest_modules,
            True,
        ),
        Timing(
            'pytest start with the plugin (whole start, wall, median of 3)',
            statistics.median(ours),
            0,
            f'pytest -p no:{PLUGIN}',
            plain,
            0,
            False,
        ),
    ]


def table(repeat: int = 5) -> str:
    """Markdown: each case, its anchor, the ratio, what it adds and whether the bound is met."""
    lines = [
        '| what | ms | modules | anchor | anchor ms | anchor modules | ratio | adds | bound < 10 % |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    rows = [*import_timings(repeat), *plugin_timings(repeat)]
    for row in rows:
        modules = str(row.modules) if row.modules else '–'
        anchor_modules = str(row.anchor_modules) if row.anchor_modules else '–'
        lines.append(
            f'| {row.name} | {row.ms:.0f} | {modules} | `{row.anchor}` | {row.anchor_ms:.0f} | {anchor_modules} | '
            f'{row.ratio:.2f}× | {row.ratio - 1:+.0%} | {row.verdict} |'
        )
    return '\n'.join(lines)


def main() -> None:
    """Print the import and plugin table."""
    print('## Import and plugin cost (fresh interpreters, medians of 5, anchors alternated in the same run)\n')
    print(table())


if __name__ == '__main__':
    main()
