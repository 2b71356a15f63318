"""The quickstart example runs and shows what each strategy kept."""

from __future__ import annotations

import asyncio
import importlib.util
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
