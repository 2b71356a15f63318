"""A run the agent fails is a failed run, recorded and paired; a setup mistake stops the benchmark, naming the run."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.exceptions import ModelConnectionError, ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

pytestmark = pytest.mark.bench

_strategy: ContextVar[str] = ContextVar('_strategy', default='')
_seed: ContextVar[int] = ContextVar('_seed', default=0)

Responder = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


def bad_output(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Final-result arguments the task's output schema refuses (or, with text output, tool arguments the tool
    refuses), every time: the retries run out."""
    if info.output_tools:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {'answer': 'INC-7'})])
    return ModelResponse(parts=[ToolCallPart(info.function_tools[0].name, {'bogus': 1})])


def refused(status: int) -> Responder:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(status_code=status, model_name='reference', body={'error': f'status {status}'})

    return respond


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[str, int], Responder | None]], None]:
    """Replace the reference model of the runs *choose* picks (by strategy and seed) with another responder."""
    from pydantic_ai_compaction_bench import runner
    from pydantic_ai_compaction_bench.tasks import incident

    real_build, real_generate, real_model = runner.strategies.build, incident.generate, runner.ReferenceModel.model

    def install(choose: Callable[[str, int], Responder | None]) -> None:
        # Each run is its own task, so a context variable set inside it names that run only.
        def build(name: str, *args: Any, **kwargs: Any) -> Any:
            _strategy.set(name)
            return real_build(name, *args, **kwargs)

        def generate(seed: int, *args: Any, **kwargs: Any) -> Any:
            _seed.set(seed)
            return real_generate(seed, *args, **kwargs)

        def model(self: Any) -> FunctionModel:
            responder = choose(_strategy.get(), _seed.get())
            return FunctionModel(responder) if responder is not None else real_model(self)

        monkeypatch.setattr(runner.strategies, 'build', build)
        monkeypatch.setattr(incident, 'generate', generate)
        monkeypatch.setattr(runner.ReferenceModel, 'model', model)

    return install


@contextmanager
def no_unawaited_coroutines() -> Generator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        yield
        gc.collect()
    assert not [w for w in caught if 'never awaited' in str(w.message)]


BENCH = ['bench', 'incident', '--sizes', '6', '--seeds', '1-2', '--variants', 'owner', '--quiet']


@pytest.mark.parametrize(
    ('responder', 'error_type', 'message'),
    [
        (bad_output, 'UnexpectedModelBehavior', 'Exceeded maximum output retries'),
        (refused(400), 'ModelHTTPError', 'status_code: 400'),
    ],
)
def test_a_run_the_agent_fails_is_a_failed_run_and_the_benchmark_goes_on(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failing: Callable[[Callable[[str, int], Responder | None]], None],
    responder: Responder,
    error_type: str,
    message: str,
) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import build_rows, read_records

    failing(lambda strategy, seed: responder if (strategy, seed) == ('fork-json', 2) else None)
    with no_unawaited_coroutines():
        code = cli.main([*BENCH, '--strategies', 'none', 'fork-json', '--out', str(tmp_path)])
    assert code == 0
    records = read_records(tmp_path / 'incident.jsonl')
    assert len(records) == 8  # 2 strategies x 2 seeds x 2 players: none is lost
    failed = [r for r in records if r['error_type'] is not None]
    assert [(r['strategy'], r['seed'], r['status'], r['passed'], r['problems']) for r in failed] == [
        ('fork-json', 2, 'ok', False, ['agent_error'])
    ] * 2
    assert all(r['error'].startswith(f'{error_type}: {message}') for r in failed)
    # The failed seed stays on both sides of the pair: fork-json has four measured runs against none's four.
    rows = {row.strategy: row for row in build_rows(records, baseline='none')}
    fork = rows['fork-json']
    assert (fork.runs, fork.missing) == (4, 0)
    assert fork.passed == sum(1 for r in records if r['strategy'] == 'fork-json' and r['passed']) <= 2
    assert fork.p_one_sided is not None
    output = capsys.readouterr().out
    assert '2 of 8 runs failed on an error (counted as not passed, and paired as such):' in output
    assert f'- incident size 6 owner seed=2 fork-json: {error_type}: {message}' in output


def test_a_setup_mistake_stops_the_benchmark_naming_the_run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failing: Callable[[Callable[[str, int], Responder | None]], None],
) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records

    failing(lambda strategy, seed: refused(401))
    with no_unawaited_coroutines():
        code = cli.main([*BENCH, '--strategies', 'none', 'fork-json', '--concurrency', '1', '--out', str(tmp_path)])
    assert code == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        'pai-compaction: error: incident size 6 owner seed=1 none: ModelHTTPError: status_code: 401'
    )
    assert lines[0].endswith('(a setup mistake: the benchmark stopped)')
    assert read_records(tmp_path / 'incident.jsonl') == []  # no run recorded as failed


def test_a_recall_run_the_agent_fails_keeps_its_record(
    failing: Callable[[Callable[[str, int], Responder | None]], None],
) -> None:
    from pydantic_ai_compaction_bench.runner import RunSpec, run_with_rerun

    failing(lambda strategy, seed: bad_output)
    record = asyncio.run(run_with_rerun(RunSpec('recall', 'none', 1, 'base', 1)))
    assert (record['status'], record['passed'], record['problems'], record['error_type']) == (
        'ok',
        False,
        ['agent_error'],
        'UnexpectedModelBehavior',
    )
    assert record['attempts'] == 1 and record['applied'] is None


def usage_record(strategy: str, seed: int, inputs: list[int], *, passed: bool, problem: str | None = None) -> Record:
    """A finished run of *strategy* whose agent requests sent *inputs*; *problem* marks how an error ended it."""
    return {
        'task': 'incident', 'strategy': strategy, 'seed': seed, 'variant': 'owner', 'size': 8, 'model': 'reference',
        'status': 'ok', 'passed': passed, 'applied': passed, 'probe': None,
        'problems': [problem] if problem else [], 'error_type': 'UnexpectedModelBehavior' if problem else None,
        'error': 'UnexpectedModelBehavior: Exceeded maximum output retries' if problem else None,
        'requests': [
            {'kind': 'agent', 'input_tokens': n, 'cache_read_tokens': 0, 'cache_write_tokens': n,
             'output_tokens': 10, 'cache_detail': True}
            for n in inputs
        ],
        'compactions': [],
    }  # fmt: skip


Record = dict[str, Any]


def early_failures() -> list[Record]:
    """`none` completes its four runs at 40,000 input tokens; `summary` completes two at 50,000 and fails two on
    an error after one 1,000-token request, and `reset` fails every run on an error."""
    records = [usage_record('none', seed, [20_000, 20_000], passed=seed < 2) for seed in range(4)]
    records += [usage_record('summary', seed, [25_000, 25_000], passed=True) for seed in range(2)]
    records += [usage_record('summary', seed, [1_000], passed=False, problem='agent_error') for seed in (2, 3)]
    records += [usage_record('reset', seed, [500], passed=False, problem='agent_error') for seed in range(4)]
    return records


def test_a_run_that_failed_on_an_error_is_left_out_of_the_medians_and_counted() -> None:
    from pydantic_ai_compaction_bench.report import build_rows, summarize

    rows = {row.strategy: row for row in build_rows(early_failures(), baseline='none')}
    summary = rows['summary']
    # Counted among the runs (two passes of four) and the pairs, but the median is of the two finished runs:
    # with the failed ones it would be (1,000 + 50,000) / 2 = 25,500, half of none's 40,000.
    assert (summary.runs, summary.missing, summary.errors, summary.measured, summary.passed) == (4, 0, 2, 2, 2)
    assert summary.cumulative_input == 50_000 > rows['none'].cumulative_input == 40_000
    assert summary.cost.high == 50_000 * 2.5e-6 + 20 * 10e-6
    assert summary.p_one_sided is not None
    table = summarize(early_failures(), baseline='none')
    line = next(line for line in table.splitlines() if line.startswith('| summary |'))
    assert line.startswith('| summary | 2/4 (2 failed on an error) |')
    assert '50,000 |' in line and '25,500' not in line
    # A strategy with no run left has no medians: shown as unknown, not as a free $0.
    reset = next(line for line in table.splitlines() if line.startswith('| reset |'))
    # applied 0/4, no probe asked, then the eight medians.
    assert reset.startswith('| reset | 0/4 (4 failed on an error) | 0/4 | – |' + ' – |' * 8)
    assert '$0.000' not in reset
    assert 'Runs that failed on an error count as not passed and in the pairs, but not in the medians' in table


def test_a_run_stopped_by_the_request_limit_stays_in_the_medians() -> None:
    from pydantic_ai_compaction_bench.report import build_rows

    # The request limit lets a run spend the whole budget the task allows: leaving it out would hide the dearest runs.
    records = [usage_record('summary', 0, [1_000], passed=True)]
    records += [usage_record('summary', seed, [30_000] * 3, passed=False, problem='request_limit') for seed in (1, 2)]
    (row,) = build_rows(records, baseline=None)
    assert (row.errors, row.measured, row.cumulative_input) == (0, 3, 90_000)


def test_the_cost_table_charges_failed_runs_per_pass_but_not_in_its_medians() -> None:
    from pydantic_ai_compaction_bench import savings

    records = early_failures()
    rows = savings.cost_rows(records)
    summary, none = rows['summary'], rows['none']
    assert (summary.runs, summary.errors, summary.passed) == (4, 2, 2)
    finished, failed = 50_000 * 2.5e-6 + 20 * 10e-6, 1_000 * 2.5e-6 + 10 * 10e-6
    assert round(summary.cost, 9) == round(finished, 9)  # not the median with the failed runs, (finished + failed) / 2
    assert summary.cost > none.cost
    # Cost per pass still charges what the failed runs spent.
    assert round(summary.cost_per_pass, 9) == round((2 * finished + 2 * failed) / 2, 9)
    assert summary.write == 50_000
    table = savings.cost_table(records)
    line = next(row for row in table.splitlines() if row.startswith('| summary |'))
    assert line.startswith('| summary | 2/4 (2 failed on an error) | $0.125 | $0.128 | 1.25× | 0 | 50,000 |')
    reset = next(row for row in table.splitlines() if row.startswith('| reset |'))
    assert reset.startswith('| reset | 0/4 (4 failed on an error) | – | – | – | – |')
    # The savings table shows no ratio for a strategy without a finished run.
    assert '| reset | none | 0/4 (4 failed on an error) | 2/4 | – | – | – | – |' in savings.table(records)
    # Ours cheaper than no compaction only by failing early would not meet the target: summary costs more.
    assert 'cheapest of ours is summary at $0.125 a run, -25% less' in savings.target(records)


def unreachable(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """What pydantic-ai raises when nothing listens at the server's address (no request was sent)."""
    raise ModelConnectionError('reference', 'Connection error.', phase='connect')


def test_a_server_that_stops_answering_stops_the_benchmark_and_keeps_what_was_recorded(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failing: Callable[[Callable[[str, int], Responder | None]], None],
) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records

    # One run at a time, in order: seed 1's two runs finish, then the server is gone for seed 2.
    failing(lambda strategy, seed: unreachable if seed == 2 else None)
    args = [*BENCH, '--strategies', 'none', 'fork-json', '--concurrency', '1', '--out', str(tmp_path)]
    with no_unawaited_coroutines():
        code = cli.main(args)
    assert code == cli.EXIT_FAILURE
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        'pai-compaction: error: incident size 6 owner seed=2 none: cannot reach the model server (ModelConnectionError'
    )
    assert lines[0].endswith('(twice: the benchmark stopped; the runs recorded so far are kept, and --resume runs '
                             'the rest)')  # fmt: skip
    kept = read_records(tmp_path / 'incident.jsonl')
    assert [(r['seed'], r['strategy'], r['status']) for r in kept] == [(1, 'none', 'ok'), (1, 'fork-json', 'ok')]
    # Back up, --resume runs the rest and no more.
    failing(lambda strategy, seed: None)
    assert cli.main([*args, '--resume']) == 0
    assert len(read_records(tmp_path / 'incident.jsonl')) == 8


def test_an_outage_of_one_run_is_a_missing_run_and_the_benchmark_goes_on(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failing: Callable[[Callable[[str, int], Responder | None]], None],
) -> None:
    from pydantic_ai_compaction_bench import cli
    from pydantic_ai_compaction_bench.report import read_records

    failing(lambda strategy, seed: refused(500) if (strategy, seed) == ('fork-json', 2) else None)
    with no_unawaited_coroutines():
        code = cli.main([*BENCH, '--strategies', 'none', 'fork-json', '--out', str(tmp_path)])
    assert code == 0
    records = read_records(tmp_path / 'incident.jsonl')
    assert len(records) == 8
    lost = [(r['strategy'], r['seed'], r['attempts']) for r in records if r['status'] == 'missing']
    assert lost == [('fork-json', 2, 2)] * 2  # rerun once, for each player
    assert '2 of 8 runs are missing after a rerun' in capsys.readouterr().out
