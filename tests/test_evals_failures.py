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
from pydantic_ai.exceptions import ModelHTTPError
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
