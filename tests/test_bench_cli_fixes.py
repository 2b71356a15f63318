"""`pai-compaction`: repeated records, summary caps, small audits, cut-off records files, the run key's server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import models as pydantic_ai_models

from .wire.stub_server import Stub, serve

pytestmark = pytest.mark.bench


@pytest.fixture(autouse=True)
def server_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Requests go to the local stub server only; `--base-url` sets variables for this process, restored after."""
    from pydantic_ai_compaction_bench import models

    for name in ('OPENAI_BASE_URL', 'OPENAI_API_KEY', models.BASE_URL_ENV):
        monkeypatch.setenv(name, '')  # setenv first, so teardown restores what `use_base_url` sets afresh
        monkeypatch.delenv(name)
    with pydantic_ai_models.override_allow_model_requests(True):
        yield


def bench(out: Path, *extra: str) -> list[str]:
    """A small offline `bench incident` (two seeds, one variant, two strategies) into *out*."""
    return [
        'bench', 'incident', '--sizes', '6', '--seeds', '1-2', '--variants', 'owner', '--players', 'silent',
        '--strategies', 'none', 'summary', '--out', str(out), '--quiet', *extra,
    ]  # fmt: skip


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text(''.join(json.dumps(record) + '\n' for record in records))


def tables(output: str) -> str:
    """The tables of a `bench` or `summarize` output, without `bench`'s closing lines (records, plots)."""
    return '\n'.join(line for line in output.splitlines() if not line.startswith(('Records: ', 'Plots: ')))


def row(output: str, strategy: str) -> list[str]:
    """The cells of *strategy*'s row in the first table of *output*."""
    found = next(line for line in output.splitlines() if line.startswith(f'| {strategy} |'))
    return [cell.strip() for cell in found.split('|')[1:-1]]


@pytest.fixture(scope='module')
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Records of `bench(...)`, run once for the module."""
    from pydantic_ai_compaction_bench import cli

    out = tmp_path_factory.mktemp('recorded')
    assert cli.main(bench(out)) == 0
    return out / 'incident.jsonl'


def test_summarize_keeps_the_newest_record_of_each_run_as_bench_does(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli

    records = lines(recorded)
    first = next(index for index, record in enumerate(records) if record['strategy'] == 'summary')
    # A run lost to an outage (as the runner records it), rerun by a later `--resume` and appended.
    lost = {**records[first], 'status': 'missing', 'error': "ConnectionError('dropped')", 'attempts': 2}
    lost.update(passed=None, applied=None, problems=[], requests=[])
    out = tmp_path / 'resumed'
    out.mkdir()
    write(out / 'incident.jsonl', [*records[:first], lost, *records[first + 1 :], records[first]])
    assert cli.main(bench(out, '--resume')) == 0
    benched = capsys.readouterr().out
    assert cli.main(['summarize', str(out / 'incident.jsonl')]) == 0
    summarized = capsys.readouterr().out
    assert tables(summarized) == tables(benched)
    assert row(summarized, 'summary')[1] == '2/2'  # not `2/2 (1 missing)`: the rerun replaced the lost run
    assert 'missing after a rerun' not in summarized

    # A file joined with itself holds each run twice: counted once, the pairs (and the interval) are the file's.
    assert cli.main(['summarize', str(recorded)]) == 0
    once = capsys.readouterr().out
    doubled = tmp_path / 'doubled.jsonl'
    doubled.write_bytes(recorded.read_bytes() * 2)
    assert cli.main(['summarize', str(doubled)]) == 0
    twice = capsys.readouterr().out
    assert row(twice, 'summary') == row(once, 'summary')
    assert row(twice, 'none')[1] == '2/2'


def test_summarize_refuses_a_summary_cap_no_run_ran_at(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic_ai_compaction_bench import cli

    assert cli.main(['summarize', str(recorded), '--summary-budget', '999']) == 2
    captured = capsys.readouterr()
    assert captured.out == ''
    assert '--summary-budget 999' in captured.err and 'the caps it holds: 500' in captured.err


def test_a_sensitivity_cap_keeps_the_strategies_that_never_summarize(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic_ai_compaction_bench import cli, plots
    from pydantic_ai_compaction_bench.report import Row, build_rows

    assert cli.main(bench(tmp_path, '--sensitivity-budgets', '800')) == 0
    main = capsys.readouterr().out
    drawn: list[str] = []

    def recording_rows(records: Any, **options: Any) -> list[Row]:
        rows = build_rows(records, **options)
        drawn.extend(row.strategy for row in rows)
        return rows

    monkeypatch.setattr(plots, 'build_rows', recording_rows)
    path = tmp_path / 'incident.jsonl'
    code = cli.main(['summarize', str(path), '--summary-budget', '800', '--plots', str(tmp_path / 'at800')])
    assert code == 0
    at_800 = capsys.readouterr().out
    assert '### incident, size 6, model reference, player silent, summary cap 800' in at_800
    # `none` ran at the main cap only: its runs hold at 800 too, in the table and in the plot.
    assert row(at_800, 'none')[:2] == row(main, 'none')[:2] == ['none', '2/2']
    assert '`none` made no summary request, so its runs at summary cap 500 hold at this cap too.' in at_800
    assert sorted(drawn) == ['none', 'summary']


@pytest.mark.parametrize('size', [1, 2])
def test_a_base_audit_of_one_or_two_logs_runs(size: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.tasks import incident

    for seed in range(20):
        scenario = incident.generate(seed, size, 'base')
        assert len(scenario.logs) == size and scenario.expected_ids
    args = ['bench', 'incident', '--variants', 'base', '--sizes', str(size), '--seeds', '101', '--players', 'silent']
    assert cli.main([*args, '--strategies', 'none', '--out', str(tmp_path), '--quiet']) == 0
    assert row(capsys.readouterr().out, 'none')[1] == '1/1'


def test_anchor_pins_without_a_harness_anchor_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic_ai_compaction_bench import cli

    args = ['bench', 'incident', '--sizes', '6', '--seeds', '1', '--variants', 'owner', '--out', str(tmp_path)]
    assert cli.main([*args, '--strategies', 'native', 'none', '--anchor-pins']) == 2
    error = capsys.readouterr().err
    assert '--anchor-pins' in error and 'native none' in error
    assert not (tmp_path / 'incident.jsonl').exists()
    cli.check_anchor_pins(['none', 'harness-clear'])  # an anchor among them: accepted


def test_a_cut_off_last_record_is_left_out_and_rerun(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli

    *kept, last = recorded.read_bytes().splitlines(keepends=True)
    path = tmp_path / 'incident.jsonl'
    path.write_bytes(b''.join(kept) + last[:100])  # a record cut off while it was appended
    assert cli.main(['summarize', str(path)]) == 0
    captured = capsys.readouterr()
    assert f'{path}, line {len(kept) + 1}: cut off' in captured.err
    # The cut-off run is left out: its strategy's pass count is over the one whole run.
    assert row(captured.out, json.loads(last)['strategy'])[1].endswith('/1')

    # `--resume` leaves it out, removes it, and reruns its run: one whole record a line again.
    assert cli.main(bench(tmp_path, '--resume')) == 0
    assert 'cut off' in capsys.readouterr().err
    again = lines(path)
    assert path.read_bytes().endswith(b'\n') and len(again) == len(kept) + 1
    assert again[-1]['config'] == json.loads(last)['config']


def test_a_corrupt_line_elsewhere_is_an_error_naming_the_file_and_line(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli

    first, *rest = recorded.read_bytes().splitlines(keepends=True)
    path = tmp_path / 'incident.jsonl'
    path.write_bytes(first + first[:100] + b'\n' + b''.join(rest))
    assert cli.main(['summarize', str(path)]) == 2
    assert f'{path} is not a JSONL records file: line 2 is not JSON' in capsys.readouterr().err
    assert cli.main(bench(tmp_path, '--resume')) == 2
    assert f'{path} is not a JSONL records file: line 2 is not JSON' in capsys.readouterr().err


def test_a_plots_file_in_out_is_refused_before_the_first_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli

    (tmp_path / 'plots').write_text('not a directory')
    assert cli.main(bench(tmp_path)) == 2
    assert f'--out {tmp_path}' in capsys.readouterr().err
    assert not (tmp_path / 'incident.jsonl').exists()


def test_resuming_against_another_server_runs_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.runner import newest_runs, spec_of

    def args(url: str, *extra: str) -> list[str]:
        return [
            'bench', 'incident', '--model', 'openai:stub', '--base-url', url, '--sizes', '6', '--seeds', '1',
            '--variants', 'owner', '--strategies', 'none', '--trigger', '200', '--concurrency', '1',
            '--out', str(tmp_path), '--quiet', *extra,
        ]  # fmt: skip

    first, second = Stub(), Stub()
    with serve(first) as url_a, serve(second) as url_b:
        assert cli.main(args(url_a)) == 0
        assert cli.main(args(url_b, '--resume')) == 0
    capsys.readouterr()
    records = lines(tmp_path / 'incident.jsonl')
    assert [r['base_url'] for r in records] == [url_a, url_b]
    assert second.agent_steps > 0  # the second server's run ran, not the first server's result reused
    # A record written before the server was recorded still loads, as a run without one.
    old = {**records[0], 'config': {k: v for k, v in records[0]['config'].items() if k != 'base_url'}}
    assert spec_of(old).base_url is None and len(newest_runs([old, *records])) == 3


def test_the_caption_says_when_strategies_ran_different_runs() -> None:
    from pydantic_ai_compaction_bench.report import summarize

    def record(strategy: str, seed: int) -> dict[str, Any]:
        return {
            'task': 'incident', 'strategy': strategy, 'seed': seed, 'variant': 'owner', 'size': 8,
            'model': 'reference', 'status': 'ok', 'passed': True, 'applied': True, 'probe': True,
            'requests': [{'kind': 'agent', 'input_tokens': 10, 'cache_read_tokens': 0, 'cache_write_tokens': 0,
                          'output_tokens': 1}],
        }  # fmt: skip

    mixed = [record('native', seed) for seed in (1, 2, 3, 4)] + [record('none', seed) for seed in (1, 2)]
    assert '4 seeds × 1 variant(s) (owner), runs per strategy differ (2 to 4);' in summarize(mixed)
    same = [record('native', seed) for seed in (1, 2)] + [record('none', seed) for seed in (1, 2)]
    assert 'differ' not in summarize(same)


@pytest.mark.parametrize('key', ['', '  '])
def test_an_empty_api_key_does_not_stop_a_run_against_a_keyless_server(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `OPENAI_API_KEY=` (set, empty) made the SDK refuse to build the client, where an unset key works.
    from pydantic_ai.models import infer_model
    from pydantic_ai_compaction_bench import models

    monkeypatch.setenv('OPENAI_API_KEY', key)
    monkeypatch.delenv('OPENAI_BASE_URL', raising=False)
    routed = models.use_base_url('openai:local-model', 'http://127.0.0.1:9/v1')
    assert routed == 'openai-chat:local-model'
    built = infer_model(routed)
    assert built.model_name == 'local-model'
    assert os.environ['OPENAI_API_KEY'] == models.PLACEHOLDER_KEY
