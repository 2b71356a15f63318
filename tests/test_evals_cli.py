"""`pai-compaction` against a model server: the prices a bench used, a server it cannot use, an interrupt."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic_ai import models as pydantic_ai_models

from .wire.stub_server import Stub, serve

pytestmark = pytest.mark.bench


@pytest.fixture(autouse=True)
def server_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Requests go to the local stub server only; `--base-url` routes this process's `openai:` models, so the
    variables it sets are restored after each test."""
    from pydantic_ai_compaction_bench import cli, models

    for name in ('OPENAI_BASE_URL', 'OPENAI_API_KEY', models.BASE_URL_ENV):
        monkeypatch.setenv(name, '')  # setenv first, so teardown restores what `use_base_url` sets afresh
        monkeypatch.delenv(name)

    def no_plots(records: object, directory: Path, **options: object) -> list[Path]:
        return []  # these tests read tables and records, not plots

    monkeypatch.setattr(cli, 'plot', no_plots)
    with pydantic_ai_models.override_allow_model_requests(True):
        yield


def bench_args(out: Path, url: str, *extra: str) -> list[str]:
    return [
        'bench', 'incident', '--model', 'openai:stub', '--base-url', url, '--sizes', '6', '--seeds', '1',
        '--variants', 'owner', '--strategies', 'none', 'summary', '--trigger', '200', '--concurrency', '1',
        '--out', str(out), '--quiet', *extra,
    ]  # fmt: skip


def cost_cells(output: str) -> dict[str, str]:
    """The cost column of each strategy's row in the main table."""
    header = next(line for line in output.splitlines() if line.startswith('| strategy | pass |'))
    column = [cell.strip() for cell in header.split('|')].index('cost')
    return {
        cells[1]: cells[column]
        for line in output.splitlines()
        if line.startswith('| none |') or line.startswith('| summary |')
        for cells in [[cell.strip() for cell in line.split('|')]]
    }


def test_summarize_prices_runs_as_bench_did_unless_told_otherwise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records

    with serve(Stub()) as url:
        assert cli.main(bench_args(tmp_path / 'given', url, '--prices', '1000,100,1250,5000')) == 0
        given = cost_cells(capsys.readouterr().out)
        assert cli.main(bench_args(tmp_path / 'free', url)) == 0
        assert 'costs are shown as $0' in capsys.readouterr().err
    records = read_records(tmp_path / 'given' / 'incident.jsonl')
    assert {tuple(r['prices'].values()) for r in records} == {(1000.0, 100.0, 1250.0, 5000.0)}
    # The stub reports 100 input and 10 output tokens a request, without cache detail: a range at these prices.
    assert all(cell.startswith('$') and cell != '$0.000' for cell in given.values()), given

    # Without --prices, summarize prices each run as bench did: the same costs, and no error for the unknown model.
    assert cli.main(['summarize', str(tmp_path / 'given' / 'incident.jsonl')]) == 0
    assert cost_cells(capsys.readouterr().out) == given
    assert cli.main(['summarize', str(tmp_path / 'free' / 'incident.jsonl')]) == 0
    assert set(cost_cells(capsys.readouterr().out).values()) == {'$0.000'}
    # An explicit --prices overrides the recorded ones.
    assert cli.main(['summarize', str(tmp_path / 'given' / 'incident.jsonl'), '--prices', '0,0,0,0']) == 0
    assert set(cost_cells(capsys.readouterr().out).values()) == {'$0.000'}


def test_records_without_prices_are_priced_by_their_model_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records, write_records

    with serve(Stub()) as url:
        assert cli.main(bench_args(tmp_path, url, '--prices', '1000,100,1250,5000')) == 0
    given = cost_cells(capsys.readouterr().out)
    old = tmp_path / 'old.jsonl'
    records = read_records(tmp_path / 'incident.jsonl')
    write_records([{key: value for key, value in r.items() if key != 'prices'} for r in records], old)
    # The server's model has no registry price: an older file needs --prices, as it always did.
    assert cli.main(['summarize', str(old)]) == 1
    assert "no prices known for 'openai-chat:stub'" in capsys.readouterr().err
    assert cli.main(['summarize', str(old), '--prices', '1000,100,1250,5000']) == 0
    assert cost_cells(capsys.readouterr().out) == given


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@contextmanager
def refusing(status: int, error: dict[str, str]) -> Generator[tuple[str, list[str]]]:
    """A server that answers every request with *status* and an OpenAI-style *error*; yields its URL and the
    paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(self.path)
            self.rfile.read(int(self.headers.get('content-length', 0)))
            body = json.dumps({'error': error}).encode()
            self.send_response(status)
            self.send_header('content-type', 'application/json')
            self.send_header('content-length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f'http://127.0.0.1:{server.server_address[1]}/v1', asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_that_cannot_be_reached_stops_the_bench_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_compaction_bench import cli

    url = f'http://127.0.0.1:{closed_port()}/v1'
    records = tmp_path / 'incident.jsonl'
    records.write_text('{"kept": true}\n')
    assert cli.main(bench_args(tmp_path, url, '--overwrite')) == cli.EXIT_FAILURE
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f'pai-compaction: error: openai-chat:stub: cannot reach the model server at {url}/ (')
    assert 'Connect' in error and error.endswith('No run was started, and the records file was not touched.')
    # The check comes before the records file is opened: --overwrite did not empty it.
    assert records.read_text() == '{"kept": true}\n'


@pytest.mark.parametrize(
    ('status', 'error'),
    [
        (404, {'message': "model 'stub' not found", 'type': 'invalid_request_error', 'code': 'model_not_found'}),
        (401, {'message': 'Incorrect API key provided', 'type': 'invalid_request_error', 'code': 'invalid_api_key'}),
    ],
)
def test_a_server_that_refuses_the_model_or_the_key_stops_the_bench_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int, error: dict[str, str]
) -> None:
    from pydantic_ai_compaction_bench import cli

    with refusing(status, error) as (url, asked):
        assert cli.main(bench_args(tmp_path, url)) == cli.EXIT_FAILURE
    assert asked == ['/v1/chat/completions']  # one request: the check, and no run
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith(
        f'pai-compaction: error: openai-chat:stub: the model server at {url}/ refused the request with HTTP {status} ('
    )
    assert error['message'] in lines[-1]
    assert not (tmp_path / 'incident.jsonl').exists()


def test_a_server_that_answers_the_check_runs_the_bench(tmp_path: Path) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records

    stub = Stub()
    with serve(stub) as url:
        assert cli.main(bench_args(tmp_path, url)) == 0
    records = read_records(tmp_path / 'incident.jsonl')
    assert sorted(r['strategy'] for r in records) == ['none', 'summary']
    assert all(r['status'] == 'ok' and r['error'] is None for r in records)


INTERRUPT_WHILE_LOADING = """
import importlib.abc, os, signal, sys

class Interrupt(importlib.abc.MetaPathFinder):
    # A Ctrl-C while the CLI loads: SIGINT as pydantic-ai starts to import.
    def find_spec(self, name, path=None, target=None):
        if name == 'pydantic_ai':
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

# A shell starts a background job with SIGINT ignored, and Python keeps an ignored SIGINT ignored: the suite run so
# would never see the interrupt. A terminal's Ctrl-C reaches a process with Python's own handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.meta_path.insert(0, Interrupt())
from pydantic_ai_compaction_bench.console import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130(tmp_path: Path) -> None:
    out = tmp_path / 'out'
    done = subprocess.run(
        [sys.executable, '-c', INTERRUPT_WHILE_LOADING, 'bench', 'incident', '--out', str(out), '--quiet'],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr, done.stdout) == (130, 'pai-compaction: interrupted\n', '')
    assert not out.exists()


def test_the_command_runs_through_the_console_entry_point() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group='console_scripts') if e.name == 'pai-compaction']
    assert script.value == 'pydantic_ai_compaction_bench.console:main'


def test_ctrl_c_while_the_server_is_checked_keeps_the_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic_ai_compaction_bench import cli

    async def interrupted(model: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, 'check_server', interrupted)
    records = tmp_path / 'incident.jsonl'
    records.write_text('{"kept": true}\n')
    assert cli.main(bench_args(tmp_path, 'http://127.0.0.1:9/v1', '--overwrite')) == 130
    assert capsys.readouterr().err.splitlines()[-1] == 'pai-compaction: interrupted'
    assert records.read_text() == '{"kept": true}\n'


def test_ctrl_c_after_the_first_run_keeps_its_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic_ai_compaction_bench import cli, runner
    from pydantic_ai_compaction_bench.report import read_records

    real = runner.run_with_rerun
    started: list[str] = []

    async def second_interrupted(spec: runner.RunSpec) -> dict[str, object]:
        started.append(spec.strategy)
        if len(started) > 1:
            raise KeyboardInterrupt
        return await real(spec)

    monkeypatch.setattr(runner, 'run_with_rerun', second_interrupted)
    args = ['bench', 'incident', '--sizes', '6', '--seeds', '1', '--variants', 'owner', '--players', 'silent']
    code = cli.main([*args, '--strategies', 'none', 'reset', '--concurrency', '1', '--out', str(tmp_path), '--quiet'])
    assert code == 130
    assert capsys.readouterr().err.splitlines() == ['pai-compaction: interrupted']
    assert [r['strategy'] for r in read_records(tmp_path / 'incident.jsonl')] == ['none']
