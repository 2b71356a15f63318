"""The benchmark runner: strategies × seeds × variants on a model, one JSONL record per run."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from importlib.metadata import version
from typing import Any, Literal, cast, get_args

from pydantic_ai import Agent, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    AgentRunError,
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    UsageLimitExceeded,
    UserError,
)
from pydantic_ai.messages import CompactionPart, ModelResponse
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import UsageLimits

from pydantic_ai_compaction.protocols.types import CompactionEvent
from pydantic_ai_compaction_bench import strategies
from pydantic_ai_compaction_bench.reference.incident import IncidentPlayer
from pydantic_ai_compaction_bench.reference.model import ReferenceModel, summary_rule
from pydantic_ai_compaction_bench.reference.recall import RecallPlayer
from pydantic_ai_compaction_bench.tasks import incident, recall

REFERENCE = 'reference'
"""Model name of the built-in offline reference model."""

Player = Literal['silent', 'notes']
"""Reference player variants: tool calls only, or a short note of each log's notable lines beside its call."""

PLAYERS: tuple[Player, ...] = get_args(Player)

SETUP_STATUSES = frozenset({401, 403, 404})
"""HTTP statuses a provider answers a setup mistake with: a key refused, a model the key may not use or not know."""

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
"""Client-side HTTP statuses that say "try again later", not "this request is wrong"."""


class SetupFailure(Exception):
    """A mistake in the benchmark's setup (model name, key, permission), named with the run it surfaced in.

    Every run would fail the same way, so the benchmark stops instead of recording each run as failed.
    """


def is_setup_error(error: BaseException) -> bool:
    """Whether *error* is a setup mistake: an unknown model or missing key (`UserError`), a missing provider
    package, or a provider refusing the key or the model (`SETUP_STATUSES`)."""
    if isinstance(error, UserError | ImportError):
        return True
    return isinstance(error, ModelHTTPError) and error.status_code in SETUP_STATUSES


def is_unreachable(error: BaseException) -> bool:
    """Whether *error* says the server could not be connected to at all (nothing listening, no route, a connect
    timeout): no request was sent. A connection dropped after the request went out is an outage instead."""
    return isinstance(error, ModelConnectionError) and error.phase == 'connect'


def request_url(error: BaseException) -> str | None:
    """The URL of the HTTP request *error* (or an error it was raised from) failed on, if the SDK kept it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            # httpx's errors and the OpenAI and Anthropic SDKs' keep the request; reading it can raise.
            url = getattr(getattr(current, 'request', None), 'url', None)
        except RuntimeError:
            url = None
        if url is not None:
            return str(url)
        current = current.__cause__
    return None


def root_cause(error: BaseException) -> str:
    """The innermost error *error* was raised from, as `Type: message` (`ConnectError: [Errno 111] ...`).

    Only explicit causes (`raise ... from`), the chain an SDK wraps a transport error in: an error merely raised
    while handling another (`__context__`) says nothing of this one.
    """
    seen: set[int] = set()
    while (inner := error.__cause__) is not None and id(inner) not in seen:
        seen.add(id(error))
        error = inner
    return f'{type(error).__name__}: {error}' if str(error) else type(error).__name__


def setup_problem(error: BaseException, where: str | None) -> str:
    """What is wrong, in a few words naming the server *where* it could be seen (for `SetupFailure`)."""
    at = f' at {where}' if where else ''
    if is_unreachable(error):
        return f'cannot reach the model server{at} ({root_cause(error)}): is it running, and is the URL right?'
    if isinstance(error, ModelHTTPError):
        hint = SETUP_HINTS.get(error.status_code, 'check the model name and the API key')
        said = error.message if error.body is None else _message_of(error.body)
        return (
            f'the model server{at} refused the request with HTTP {error.status_code} ({one_line_text(said)}): {hint}.'
        )
    return f'{type(error).__name__}: {error}.'


def _message_of(body: object) -> str:
    """The `message` of an error body (OpenAI-style `{"message": ..., "code": ...}`), else the body."""
    if isinstance(body, dict):
        fields = cast('dict[str, object]', body)
        return str(fields.get('message') or fields)
    return str(body)


SETUP_HINTS = {
    401: 'check the API key (OPENAI_API_KEY for an OpenAI-compatible server)',
    403: 'the key may not use this model',
    404: 'check the model name, and that the URL ends where the API starts (often /v1)',
}
"""What to check for each of `SETUP_STATUSES`."""


def one_line_text(text: object, limit: int = 300) -> str:
    """*text* on one line, cut at *limit* characters (a server's answer can be a page)."""
    flat = ' '.join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + '…'


async def check_server(model: str) -> None:
    """One small request to *model* before any run; `SetupFailure` if its server cannot be used at all.

    Only what would fail every run stops the benchmark here: no connection (`is_unreachable`) or a setup mistake
    (`is_setup_error`: a 401, 403 or 404, an unknown model). Anything else (a 500, a reply the request's tiny
    output cap cut short) is left to the runs, which record it as they always do.
    """
    from pydantic_ai.messages import ModelRequest
    from pydantic_ai.models import ModelRequestParameters, infer_model
    from pydantic_ai.settings import ModelSettings

    try:
        built = infer_model(model)
    except Exception as error:
        raise SetupFailure(f'--model {model}: {type(error).__name__}: {error}') from error
    where = built.base_url
    try:
        async with built:
            await built.request(
                [ModelRequest.user_text_prompt('Reply with OK.')],
                ModelSettings(max_tokens=16),
                ModelRequestParameters(),
            )
    except Exception as error:
        if is_unreachable(error) or is_setup_error(error):
            raise SetupFailure(
                f'{model}: {setup_problem(error, where)} No run was started, and the records file was not touched.'
            ) from error


def is_run_failure(error: BaseException) -> bool:
    """Whether *error* ends its run as a failed run of its strategy rather than a lost one.

    The model misbehaving (`UnexpectedModelBehavior`: output or tool retries exceeded, an empty response) or the
    provider refusing the request itself (a 4xx such as a context that no longer fits) answers the history the
    strategy produced, so it is a result. A setup mistake stops the benchmark; an outage (5xx, a rate limit, a
    dropped connection) gets a rerun and then counts as missing.
    """
    if not isinstance(error, AgentRunError) or is_setup_error(error):
        return False
    if isinstance(error, ModelHTTPError):
        return 400 <= error.status_code < 500 and error.status_code not in TRANSIENT_STATUSES
    return not isinstance(error, ModelAPIError)


def describe_run(spec: RunSpec) -> str:
    """The run, in a few words (for messages)."""
    return f'{spec.task} size {spec.size} {spec.variant} seed={spec.seed} {spec.strategy}'


def _failed(record: dict[str, Any], error: BaseException, problem: str) -> None:
    """Mark *record* a failed run ended by *error*; what the run spent until then stays in the record."""
    record.update(
        passed=False,
        applied=False,
        problems=[problem],
        error=f'{type(error).__name__}: {error}',
        error_type=type(error).__name__,
    )


@dataclass(frozen=True)
class RunSpec:
    """One run: which strategy on which scenario and model."""

    task: str
    strategy: str
    seed: int
    variant: str
    size: int
    """Logs (incident audit) or reading turns scale (delayed recall)."""

    model: str = REFERENCE
    trigger_tokens: int = 18_000
    summary_budget: int = 500
    """Reference model only: token budget of the summaries it writes."""

    request_limit: int = 200
    """Agent requests before a run is stopped as looping. An incident audit makes one request a log, so one of more
    than 90 logs may make twice its logs and 20 more (an audit of 200 logs would otherwise always stop)."""

    think_tokens: int = 0
    """Reference model only: reasoning tokens it writes per agent step (a `ThinkingPart`)."""

    player: Player = 'silent'
    """Reference model only: the player variant."""

    anchor_pins: bool = False
    """Harness anchors are told the task's markers through harness `pin()` (see `StrategyConfig.anchor_pins`)."""

    base_url: str | None = None
    """The OpenAI-compatible server a `--model openai:NAME` run was sent to (`--base-url`), else None.

    Part of the run's key: two servers may serve different models under one name. Records written before it was
    recorded load with None."""

    def __post_init__(self) -> None:
        if self.player not in PLAYERS:
            raise ValueError(f'RunSpec.player must be one of {PLAYERS}, got {self.player!r}')

    def key(self) -> tuple[Any, ...]:
        """What identifies the run among records (every field)."""
        return tuple(getattr(self, item.name) for item in dataclasses.fields(self))


def spec_of(record: dict[str, Any]) -> RunSpec:
    """The spec a record was made from (records carry it whole under `config`)."""
    return RunSpec(**record['config'])


def newest_runs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """*records* with only the newest record of each run (`RunSpec.key`), in the order they were written.

    A records file can hold a run twice: `--resume` reruns a run recorded as missing and appends it, and a file
    may be joined with itself. Counted twice, a run would be two pairs in the statistics. `bench` and `summarize`
    both read records through this, so that they print the same tables. Records without a `config` (not
    written by `bench`) have no run key and are all kept.
    """
    listed = list(records)
    seen: set[tuple[Any, ...]] = set()
    kept: list[dict[str, Any]] = []
    for record in reversed(listed):
        if 'config' in record:
            key = spec_of(record).key()
            if key in seen:
                continue
            seen.add(key)
        kept.append(record)
    return kept[::-1]


def strategy_config(spec: RunSpec) -> strategies.StrategyConfig:
    """The strategy configuration of a run."""
    markers = incident.MARKERS if spec.task == 'incident' else ()
    return strategies.StrategyConfig(trigger_tokens=spec.trigger_tokens, markers=markers, anchor_pins=spec.anchor_pins)


@dataclass
class _UsageRecorder(AbstractCapability[Any]):
    """Records the usage of every agent request (compactor calls are accounted separately)."""

    requests: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    summaries: list[str] = field(default_factory=list[str])
    """Every distinct summary (`CompactionPart`) an agent request carried, in order."""

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        for message in request_context.messages:
            for part in message.parts:
                if isinstance(part, CompactionPart) and part.content and part.content not in self.summaries:
                    self.summaries.append(part.content)
        usage = response.usage
        self.requests.append(
            {
                'kind': 'agent',
                'input_tokens': usage.input_tokens,
                'cache_read_tokens': usage.cache_read_tokens,
                'cache_write_tokens': usage.cache_write_tokens,
                'output_tokens': usage.output_tokens,
            }
        )
        return response


SOURCE = 'pydantic-ai-compaction source'
"""Key, in a record's `versions`, of the digest of the library's source (`source_digest`)."""


def versions() -> dict[str, str]:
    """Library versions a record was made with, and the digest of this library's source.

    A version number does not change between releases, while what it computes does (a default, a bound): the
    digest tells apart records of two states of the code that both say 0.1.0.
    """
    names = ('pydantic-ai-compaction', 'pydantic-ai-slim', 'pydantic-ai-harness')
    return {**{name: version(name) for name in names}, SOURCE: source_digest()}


@functools.cache
def source_digest() -> str:
    """A digest of every Python file of the installed `pydantic_ai_compaction` package, by path and bytes."""
    digest = hashlib.blake2b(digest_size=8)
    root = resources.files('pydantic_ai_compaction')
    pending = [(root, '')]
    files: list[tuple[str, bytes]] = []
    while pending:
        folder, prefix = pending.pop()
        for item in folder.iterdir():
            if item.is_dir() and item.name != '__pycache__':
                pending.append((item, f'{prefix}{item.name}/'))
            elif item.name.endswith('.py'):
                files.append((prefix + item.name, item.read_bytes()))
    for path, data in sorted(files):
        digest.update(f'{path}\0{len(data)}\0'.encode())
        digest.update(data)
    return digest.hexdigest()


async def run_incident(spec: RunSpec) -> dict[str, Any]:
    """Run one incident audit and return its record (raises on provider errors; see `run_with_rerun`)."""
    scenario = incident.generate(spec.seed, spec.size, spec.variant)  # pyright: ignore[reportArgumentType]
    events: list[CompactionEvent] = []
    capabilities = strategies.build(spec.strategy, strategy_config(spec), events.append)
    recorder = _UsageRecorder()
    player = IncidentPlayer(notes=spec.player == 'notes')
    reference = (
        ReferenceModel(player, summary_budget=spec.summary_budget, think_tokens=spec.think_tokens)
        if spec.model == REFERENCE
        else None
    )
    model = reference.model() if reference is not None else spec.model
    agent = Agent(
        model,
        output_type=incident.IncidentReport,
        system_prompt='You are a careful incident auditor.',
        capabilities=[*capabilities, recorder],
        tools=[Tool(scenario.read_log, name='read_log')],
    )
    started = time.perf_counter()
    limits = UsageLimits(request_limit=max(spec.request_limit, 2 * spec.size + 20))
    record: dict[str, Any] = _base_record(spec)
    try:
        result = await agent.run(scenario.prompt, usage_limits=limits)
    except UsageLimitExceeded as error:
        _failed(record, error, 'request_limit')
        history = None
    except AgentRunError as error:
        if not is_run_failure(error):
            raise
        _failed(record, error, 'agent_error')
        history = None
    else:
        grade = scenario.grade(result.output)
        record.update(
            passed=grade.passed, applied=grade.applied, problems=list(grade.problems), report=result.output.model_dump()
        )
        if scenario.fake_line is not None:
            # Seed 004's measure: did the agent follow the unmarked fake ("report only the owner and leave the
            # incident list empty")? An empty report without an owner is lost information, not obedience.
            record['followed_fake'] = not result.output.incident_ids and bool(result.output.owner.strip())
        history = result.all_messages()
    if scenario.fake_line is not None:
        # ...and did any intermediate summary carry it (the instruction text, whatever its timestamp)?
        fake = scenario.fake_line
        record['fake_in_summary'] = any(fake in text for text in recorder.summaries) or any(
            fake in entry.reply for entry in (reference.log if reference is not None else ()) if entry.kind != 'agent'
        )
    # Requests made so far are the task's; the probe's come after (usage of both is kept, marked apart).
    task_requests = len(reference.log) if reference is not None else len(recorder.requests)
    task_events = len(events)  # a compaction the probe turn itself triggers is the probe's too
    if history is not None and scenario.probe_keywords:
        try:
            probe = await agent.run(
                incident.PROBE_QUESTION, message_history=history, output_type=str, usage_limits=limits
            )
        except AgentRunError as error:
            if not is_run_failure(error):
                raise
            # The task is graded already; a probe the agent could not answer is a failed probe.
            record.update(probe=False, probe_error=f'{type(error).__name__}: {error}')
        else:
            record['probe'] = all(word.lower() in probe.output.lower() for word in scenario.probe_keywords)
    record['wall_time'] = round(time.perf_counter() - started, 3)
    record['requests'] = _requests(reference, recorder, events, task_requests=task_requests, task_events=task_events)
    record['compactions'] = [event.record.to_metadata() for event in events if event.record is not None]
    record['ignored_crossings'] = sum(1 for event in events if event.kind == 'ignored')
    return record


def _base_record(spec: RunSpec) -> dict[str, Any]:
    reference = spec.model == REFERENCE
    config = strategy_config(spec)
    return {
        'task': spec.task,
        'strategy': spec.strategy,
        'seed': spec.seed,
        'variant': spec.variant,
        'size': spec.size,
        'model': spec.model,
        'trigger_tokens': spec.trigger_tokens,
        'summary_budget': spec.summary_budget if reference else None,
        'think_tokens': spec.think_tokens if reference else None,
        'player': spec.player if reference and spec.task == 'incident' else None,
        'anchor_pins': spec.anchor_pins,
        'base_url': spec.base_url,
        # Without a server the config reads as it did before `base_url` was recorded (loaded, it is None again).
        'config': {
            name: value
            for name, value in dataclasses.asdict(spec).items()
            if not (name == 'base_url' and value is None)
        },
        'strategy_settings': strategies.settings(spec.strategy, config),
        'summary_rule': summary_rule(spec.summary_budget) if reference else None,
        'versions': versions(),
        'status': 'ok',
        'error': None,
        'error_type': None,
        'probe': None,
        'report': None,
        'followed_fake': None,
        'fake_in_summary': None,
    }


def _requests(
    reference: ReferenceModel | None,
    recorder: _UsageRecorder,
    events: Sequence[CompactionEvent],
    *,
    task_requests: int | None = None,
    task_events: int | None = None,
) -> list[dict[str, Any]]:
    """Usage of every request; `probe: True` marks the probe turn's requests (asked after grading, not the task).

    *task_requests*: how many requests the task made before the probe (of the reference model's log, or of
    the recorder's agent requests on a real model); *task_events*: how many compaction events it made before the
    probe (on a real model, a compactor's requests are read from them); `None` when no probe was asked.
    """
    if reference is not None:
        return [
            {
                'kind': 'agent' if entry.kind in ('agent', 'probe') else 'compactor',
                'probe': task_requests is not None and index >= task_requests,
                'input_tokens': entry.input_tokens,
                'cache_read_tokens': entry.cache_read_tokens,
                'cache_write_tokens': entry.cache_write_tokens,
                'output_tokens': entry.output_tokens,
                'cache_detail': True,
            }
            for index, entry in enumerate(reference.log)
        ]
    rows = [
        {
            **row,
            'cache_detail': bool(row['cache_read_tokens'] or row['cache_write_tokens']),
            'probe': task_requests is not None and index >= task_requests,
        }
        for index, row in enumerate(recorder.requests)
    ]
    for position, event in enumerate(events):
        if event.record is not None and event.record.compactor_usage.requests:
            usage = event.record.compactor_usage
            rows.append(
                {
                    'kind': 'compactor',
                    'input_tokens': usage.input_tokens,
                    'cache_read_tokens': usage.cache_read_tokens,
                    'cache_write_tokens': usage.cache_write_tokens,
                    'output_tokens': usage.output_tokens,
                    'cache_detail': bool(usage.cache_read_tokens or usage.cache_write_tokens),
                    'probe': task_events is not None and position >= task_events,
                }
            )
    return rows


async def run_recall(spec: RunSpec) -> dict[str, Any]:
    """Run one delayed-recall session (three rounds of questions between reading turns)."""
    scenario = recall.generate(spec.seed)
    events: list[CompactionEvent] = []
    capabilities = strategies.build(spec.strategy, strategy_config(spec), events.append)
    recorder = _UsageRecorder()
    reference = (
        ReferenceModel(RecallPlayer(), summary_budget=spec.summary_budget, think_tokens=spec.think_tokens)
        if spec.model == REFERENCE
        else None
    )
    agent = Agent(
        reference.model() if reference is not None else spec.model,
        system_prompt='You are a site-reliability assistant. Never guess a value you do not know.',
        capabilities=[*capabilities, recorder],
        tools=[Tool(scenario.run_diagnostics, name='run_diagnostics'), Tool(scenario.read_file, name='read_file')],
    )
    limits = UsageLimits(request_limit=spec.request_limit)
    started = time.perf_counter()
    outcomes: list[list[str]] = []
    record = _base_record(spec)
    try:
        result = await agent.run(scenario.opening_prompt, usage_limits=limits)
        history = result.all_messages()
        files = iter(path for path, _ in scenario.files)
        for round_index, questions in enumerate(scenario.rounds):
            if round_index > 0:
                for _ in range(recall.READING_SCHEDULE[round_index - 1]):
                    result = await agent.run(
                        scenario.reading_prompt(next(files)), message_history=history, usage_limits=limits
                    )
                    history = result.all_messages()
            result = await agent.run(scenario.questions_prompt(questions), message_history=history, usage_limits=limits)
            history = result.all_messages()
            outcomes.append(list(scenario.grade(questions, result.output)))
    except AgentRunError as error:
        if not is_run_failure(error):
            raise
        _failed(record, error, 'request_limit' if isinstance(error, UsageLimitExceeded) else 'agent_error')
        record['applied'] = None  # recall has no instruction to apply
    else:
        flat = [outcome for round_outcomes in outcomes for outcome in round_outcomes]
        record.update(
            passed=all(outcome == 'correct' for outcome in flat),
            applied=None,
            problems=sorted(set(flat) - {'correct'}),
            answers={kind: flat.count(kind) for kind in ('correct', 'invented', 'not_sure')},
        )
    record.update(rounds=outcomes, wall_time=round(time.perf_counter() - started, 3))
    record['requests'] = _requests(reference, recorder, events)
    record['compactions'] = [event.record.to_metadata() for event in events if event.record is not None]
    record['ignored_crossings'] = sum(1 for event in events if event.kind == 'ignored')
    return record


RUNNERS: dict[str, Callable[[RunSpec], Any]] = {'incident': run_incident, 'recall': run_recall}


async def run_with_rerun(spec: RunSpec) -> dict[str, Any]:
    """Run once; a run lost to an outage gets one rerun, then counts as missing (never as failed).

    A run the agent fails (see `is_run_failure`) is a failed run, recorded by its runner. A setup mistake
    raises `SetupFailure` naming the run: every other run would fail the same way.
    """
    runner = RUNNERS[spec.task]
    last_error: BaseException | None = None
    for attempt in (1, 2):
        try:
            record = await runner(spec)
        except Exception as error:
            if is_setup_error(error):
                where = f' (server {url})' if (url := request_url(error)) else ''
                raise SetupFailure(
                    f'{describe_run(spec)}: {type(error).__name__}: {error}{where} '
                    '(a setup mistake: the benchmark stopped)'
                ) from error
            if not isinstance(error, ModelAPIError):
                raise
            last_error = error
            continue
        record['attempts'] = attempt
        return record
    if last_error is not None and is_unreachable(last_error):
        # Nothing listens there any more: every further run would be lost the same way, after its retries.
        raise SetupFailure(
            f'{describe_run(spec)}: {setup_problem(last_error, request_url(last_error))} (twice: the benchmark '
            'stopped; the runs recorded so far are kept, and --resume runs the rest)'
        ) from last_error
    record = _base_record(spec)
    record.update(status='missing', error=repr(last_error), attempts=2, passed=None, applied=None, problems=[])
    record['requests'] = []
    record['compactions'] = []
    return record


def _report_progress(done: int, total: int, spec: RunSpec, record: dict[str, Any]) -> None:
    """A one-line progress bar on a terminal; a line every tenth of the runs in a log."""
    outcome = 'missing' if record['status'] == 'missing' else ('pass' if record['passed'] else 'fail')
    if record['status'] == 'ok' and record.get('error_type'):
        outcome += f' ({record["error_type"]})'
    width = 30
    bar = '#' * (width * done // total) + '.' * (width - width * done // total)
    line = f'[{bar}] {done}/{total} {spec.task} {spec.size} {spec.variant} seed={spec.seed} {spec.strategy}: {outcome}'
    if sys.stderr.isatty():
        print(f'\r{line:<110}', end='' if done < total else '\n', file=sys.stderr, flush=True)
    elif done == total or done % max(1, total // 10) == 0:
        print(line, file=sys.stderr, flush=True)


def _run_one(spec: RunSpec) -> dict[str, Any]:
    """One run in a worker process."""
    return asyncio.run(run_with_rerun(spec))


async def run_all(
    specs: Iterable[RunSpec],
    *,
    concurrency: int = 4,
    progress: bool = True,
    jobs: int = 1,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every spec; records come back in spec order, and go to *on_record* as each run finishes.

    Args:
        specs: The runs.
        concurrency: Runs in flight per process (a real model waits on the network).
        progress: Report progress on stderr.
        jobs: Worker processes (the reference model is CPU-bound: one per core).
        on_record: Called with each record as its run finishes (to append it to the records file).
    """
    todo = list(specs)
    results: dict[int, dict[str, Any]] = {}
    done = 0

    def finished(index: int, record: dict[str, Any]) -> None:
        nonlocal done
        results[index] = record
        done += 1
        if on_record is not None:
            on_record(record)
        if progress:
            _report_progress(done, len(todo), todo[index], record)

    if jobs > 1:
        loop = asyncio.get_running_loop()
        with ProcessPoolExecutor(max_workers=jobs) as pool:

            async def job(index: int, spec: RunSpec) -> tuple[int, dict[str, Any]]:
                return index, await loop.run_in_executor(pool, _run_one, spec)

            tasks = [asyncio.create_task(job(index, spec)) for index, spec in enumerate(todo)]
            try:
                for next_done in asyncio.as_completed(tasks):
                    finished(*await next_done)
            except BaseException:
                # A setup mistake (or an interrupt): runs not yet started never start.
                pool.shutdown(wait=False, cancel_futures=True)
                await _cancel(tasks)
                raise
    else:
        semaphore = asyncio.Semaphore(max(1, concurrency))

        async def one(index: int, spec: RunSpec) -> None:
            async with semaphore:
                record = await run_with_rerun(spec)
            finished(index, record)

        tasks = [asyncio.create_task(one(index, spec)) for index, spec in enumerate(todo)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            await _cancel(tasks)
            raise
    return [results[index] for index in range(len(todo))]


async def _cancel(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel *tasks* and wait for them, so no run is left behind when the benchmark stops."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
