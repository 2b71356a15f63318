"""`make bench` stops at the first Ctrl-C, with one line and exit status 130, in every phase."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `make bench` runs the benchmark distribution, whose timing tables import harness.
pytestmark = [pytest.mark.bench, pytest.mark.harness]

SKIP_TO_SCALE = """
import sys
import pydantic_ai_compaction_bench.perf as perf

async def no_tables() -> None:
    print('timed tables skipped', flush=True)

perf._tables = no_tables
sys.exit(perf.main())
"""


def _interrupted(arguments: list[str], ready: str) -> tuple[int, str, float]:
    """Run *arguments*, send SIGINT once stdout shows *ready* (and a second more), and return the exit status,
    stderr and the seconds from the signal to the exit."""
    process = subprocess.Popen(arguments, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if ready in line:
                break
        time.sleep(1)  # into the loops after the line
        process.send_signal(signal.SIGINT)
        sent = time.perf_counter()
        _, err = process.communicate(timeout=30)
        return process.returncode, err, time.perf_counter() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize(
    ('arguments', 'ready'),
    [
        # The timed loops await hooks that never suspend: `asyncio.run`'s own handler turned the first Ctrl-C into a
        # cancellation they never saw, so the run went on to its end and a second Ctrl-C printed a traceback.
        ([sys.executable, '-m', 'pydantic_ai_compaction_bench.perf'], '## '),
        # Eight threads writing the scale log: they stop before its folder is removed (they wrote into a removed
        # file, warning on stderr after the interrupt's line).
        ([sys.executable, '-c', SKIP_TO_SCALE], 'timed tables skipped'),
    ],
    ids=['timed-loops', 'scale-builders'],
)
def test_the_first_ctrl_c_stops_make_bench_with_one_line(arguments: list[str], ready: str) -> None:
    status, err, seconds = _interrupted(arguments, ready)
    assert (status, err) == (130, 'make bench: interrupted\n')
    assert seconds < 10
