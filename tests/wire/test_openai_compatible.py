"""`--base-url` / `PAC_BASE_URL` and the prompt contracts, against a stub OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai_compaction_bench import cli, contracts, models
from pydantic_ai_compaction_bench.cli import main

from .stub_server import Stub, serve


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # `--base-url` routes this process's `openai:` models; keep that inside each test.
    for name in ('OPENAI_BASE_URL', 'OPENAI_API_KEY', models.BASE_URL_ENV):
        # setenv first, so teardown restores the variable even when `use_base_url` set it afresh.
        monkeypatch.setenv(name, '')
        monkeypatch.delenv(name)


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server's model has no known price; these tests check records, not plots.
    monkeypatch.setattr(cli, 'plot', lambda records, out, **options: [])


def bench_args(out: Path, *extra: str) -> list[str]:
    return [
        'bench', 'incident', '--model', 'openai:stub', '--sizes', '6', '--seeds', '1', '--variants', 'owner',
        '--strategies', 'fork-json', 'summary', '--trigger', '200', '--concurrency', '1', '--out', str(out), '--quiet',
        *extra,
    ]  # fmt: skip


@pytest.mark.parametrize('how', ['option', 'environment'])
@pytest.mark.usefixtures('no_plots')
def test_bench_runs_against_an_openai_compatible_server(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub = Stub()
    with serve(stub) as url:
        if how == 'environment':
            monkeypatch.setenv(models.BASE_URL_ENV, url)
            code = main(bench_args(tmp_path))
        else:
            code = main(bench_args(tmp_path, '--base-url', url))
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / 'incident.jsonl').read_text().splitlines()]
    assert {r['strategy'] for r in records} == {'fork-json', 'summary'}
    # Served through Chat Completions, the API OpenAI-compatible servers speak.
    assert all(r['model'] == 'openai-chat:stub' and r['status'] != 'missing' for r in records), records
    # Agent requests and both compactor prompts reached the server.
    assert stub.seen['agent'] >= 4 and stub.seen['fork'] >= 1 and stub.seen['summary'] >= 1, stub.seen
    assert 'fork-json' in capsys.readouterr().out


def test_plots_use_the_given_prices(tmp_path: Path) -> None:
    with serve(Stub()) as url:
        assert (
            main([*bench_args(tmp_path, '--base-url', url), '--strategies', 'summary', '--prices', '1,0.1,1.25,5']) == 0
        )
    assert (tmp_path / 'plots').exists()


@pytest.mark.parametrize(
    ('argv', 'message'),
    [
        (['--base-url', 'http://127.0.0.1:9/v1'], '--base-url needs --model openai:NAME'),
        (['--model', 'anthropic:claude-sonnet-4-6', '--base-url', 'http://127.0.0.1:9/v1'], "got 'anthropic:"),
        (['--model', 'openai:stub', '--base-url', '127.0.0.1:9'], "got '127.0.0.1:9'"),
    ],
)
def test_bad_base_url_usage_is_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['bench', 'incident', *argv]) == 2
    assert message in capsys.readouterr().err


def test_openai_compatible_builds_a_chat_model_for_the_server() -> None:
    model = models.openai_compatible('openai:qwen3-8b', 'http://127.0.0.1:8080/v1/')
    assert model.model_name == 'qwen3-8b'
    assert model.base_url == 'http://127.0.0.1:8080/v1/'


def test_prompt_contracts_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'realmodel.md'
    with serve(Stub()) as url:
        assert (
            contracts.main(['--model', 'openai:stub', '--base-url', url, '--seeds', '1', '2', '--out', str(out)]) == 0
        )
    table = out.read_text()
    for prompt in contracts.PROMPTS:
        assert f'| {prompt} | 2 | 2 | — |' in table, table
    assert table in capsys.readouterr().out


def test_prompt_contracts_report_replies_that_do_not_parse(tmp_path: Path) -> None:
    out = tmp_path / 'realmodel.md'
    with serve(Stub(broken=True)) as url:
        contracts.main(['--model', 'openai:stub', '--base-url', url, '--seeds', '1', '2', '--out', str(out)])
    rows = {line.split(' | ')[0].strip('| '): line for line in out.read_text().splitlines() if line.startswith('| ')}
    # `["g3", ...]` is not JSON: the reply fails to parse, or its first parseable object fails the schema.
    assert rows['fork-json'] in ('| fork-json | 0 | 2 | unparseable ×2 |', '| fork-json | 0 | 2 | schema ×2 |')
    assert rows['summary'] == '| summary | 0 | 2 | empty ×2 |'


def test_prompt_contracts_are_skipped_without_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert contracts.main([]) == 0
    assert 'skipped' in capsys.readouterr().out


def test_each_seed_gives_a_different_history_ending_in_a_tool_return() -> None:
    first, second = contracts.history(1), contracts.history(2)
    assert first != second and contracts.history(1) == first
    assert type(first[-1]).__name__ == 'ModelRequest' and first[-1].parts[0].part_kind == 'tool-return'
