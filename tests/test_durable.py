"""Compaction under durable execution: a DBOS agent killed after a compaction resumes to the same history."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

if not os.environ.get('CI'):
    pytest.importorskip('dbos', reason='dbos is not installed (pip install -e ".[dev]" installs it; CI requires it)')


def spawn(directory: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, '-m', 'tests.durable_worker', str(directory), mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def archived(directory: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(directory / 'archive.sqlite3') as db:
        return db.execute('SELECT ref, result_id, note FROM archived ORDER BY ref').fetchall()


def finish(process: subprocess.Popen[str]) -> None:
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output[-4000:]


def test_a_killed_durable_run_resumes_to_the_same_history_without_calling_the_compactor_again(tmp_path: Path) -> None:
    clean, killed = tmp_path / 'clean', tmp_path / 'killed'
    clean.mkdir()
    killed.mkdir()
    (killed / 'block').write_text('yes')
    uninterrupted = spawn(clean, 'run')  # the two first runs share the machine's cores, in parallel
    interrupted = spawn(killed, 'run')
    deadline = time.monotonic() + 90
    while not (killed / 'blocked').exists():
        assert interrupted.poll() is None, interrupted.communicate()[0][-4000:]
        assert time.monotonic() < deadline, 'the worker never reached the second compaction'
        time.sleep(0.05)
    os.kill(interrupted.pid, signal.SIGKILL)
    interrupted.communicate(timeout=30)
    assert interrupted.returncode == -signal.SIGKILL
    assert not (killed / 'history.json').exists()
    calls_before_kill = (killed / 'compactor_calls').read_text().count('fork')
    assert calls_before_kill == 2  # killed after the second compaction, as the worker promises

    (killed / 'block').unlink()
    finish(spawn(killed, 'resume'))  # DBOS recovers workflow `wf` from its checkpoints
    finish(uninterrupted)

    expected = (clean / 'history.json').read_bytes()
    resumed = (killed / 'history.json').read_bytes()
    assert expected.count(b'"part_kind":"compaction"') >= 4
    assert resumed == expected
    # Archive wrote to its store in both runs, the same entries once each (numbered by the store's counter).
    assert archived(clean) == archived(killed)
    assert len(archived(clean)) >= 2
    assert b'"content":"[result r' in expected
    # The recovery replayed the two recorded compactions: every compaction called its compactor once.
    calls = (clean / 'compactor_calls').read_text().count('fork')
    assert (killed / 'compactor_calls').read_text().count('fork') == calls
    assert calls == max(int(n) for n in re.findall(rb'"sequence":(\d+)', expected))
