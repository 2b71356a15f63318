"""`--seeds` is checked before any run: a seed past 64 bits is refused naming the option; a repeated one runs once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai_compaction_bench import cli

SMALL = ['bench', 'incident', '--sizes', '6', '--variants', 'owner', '--quiet', '--strategies', 'none']


def test_a_seed_past_64_bits_is_refused_naming_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*SMALL, '--seeds', '1,99999999999999999999999,2', '--out', str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert 'error: argument --seeds: seeds must be below 2**63, got 99999999999999999999999' in err
    assert 'Traceback' not in err
    assert not (tmp_path / 'incident.jsonl').exists()  # refused before any run


def test_a_repeated_seed_runs_once(tmp_path: Path) -> None:
    assert cli.main([*SMALL, '--seeds', '1,1,1', '--players', 'silent', '--out', str(tmp_path)]) == 0
    records = [json.loads(line) for line in (tmp_path / 'incident.jsonl').read_text().splitlines()]
    assert [(r['seed'], r['strategy']) for r in records] == [(1, 'none')]
