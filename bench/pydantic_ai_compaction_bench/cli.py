"""`pai-compaction`: run the benchmarks, rebuild tables from records, simulate reasoning-retention costs.

pai-compaction bench incident --sizes 8 20 --seeds 101-103 --variants owner lowercase scope
pai-compaction bench incident --sensitivity-budgets 300 800 1500 --jobs 2 --overwrite
pai-compaction bench recall --seeds 1-5
pai-compaction bench incident --model openai:qwen3-8b --base-url http://127.0.0.1:8080/v1
pai-compaction summarize out/incident.jsonl --baseline native
pai-compaction costsim --prices fable

Every error is one line on stderr and a nonzero exit (2 for a bad argument, 1 for a failure while running,
130 after Ctrl-C, even while the command loads); `PAC_DEBUG=1` shows the traceback of an unexpected one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn, cast

from pydantic_ai_compaction_bench import console, costsim, models, strategies
from pydantic_ai_compaction_bench.cost import PriceTable
from pydantic_ai_compaction_bench.plots import plot
from pydantic_ai_compaction_bench.report import (
    Record,
    RecordsError,
    describe_prices,
    describe_sheets,
    end_with_newline,
    mixed_prices,
    price_sheets,
    prices_argument,
    read_records,
    recorded_prices,
    summarize,
    write_records,
)
from pydantic_ai_compaction_bench.runner import (
    PLAYERS,
    REFERENCE,
    Player,
    RunSpec,
    check_server,
    newest_runs,
    run_all,
    spec_of,
    versions,
)
from pydantic_ai_compaction_bench.tasks import incident

DEFAULT_TRIGGERS = {'incident': 18_000, 'recall': 20_000}
"""Per task: the seed studies' settings (18K for the audit; for delayed recall half of seed 001's 40K window,
which the window-based setups take as `2 × trigger`). `--trigger 8000` runs recall faster on a 16K window."""


MAX_SEEDS = 10_000
"""Seeds one `--seeds` names at most (each is a run of every strategy at every size and variant)."""


def seeds(text: str) -> list[int]:
    """`101-103` or `1,4,9` or `7`."""
    values: list[int] = []
    for chunk in text.split(','):
        if '-' in chunk:
            low, high = chunk.split('-', 1)
            span = range(int(low), int(high) + 1)
            if len(values) + len(span) > MAX_SEEDS:
                # Counted before the list is built: `1-100000000` took gigabytes, silently, before any run.
                raise argparse.ArgumentTypeError(f'at most {MAX_SEEDS:,} seeds, got {len(values) + len(span):,}')
            values.extend(span)
        elif chunk.strip():
            values.append(int(chunk))
    if not values:
        raise argparse.ArgumentTypeError(f'no seeds in {text!r}')
    # Every record stores its seed as JSON, which pydantic writes only up to 64 bits: refused here, before any
    # run, and not after the first one failed.
    if max(values) >= 2**63:
        raise argparse.ArgumentTypeError(f'seeds must be below 2**63, got {max(values)}')
    # A seed given twice would run the same runs twice, which the tables count once.
    return list(dict.fromkeys(values))


def price_table(text: str) -> PriceTable:
    """`input,cache_read,cache_write,output` in dollars per million tokens."""
    fields = text.split(',')
    if len(fields) != 4:
        raise argparse.ArgumentTypeError(
            f'--prices takes 4 numbers, input,cache_read,cache_write,output; got {len(fields)} in {text!r}'
        )
    try:
        return PriceTable(*(float(x) for x in fields))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f'--prices takes input,cache_read,cache_write,output: {error}') from error


def integer(minimum: int, what: str) -> Callable[[str], int]:
    """An argument type: an integer of at least *minimum*, with *what* it must be in the message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'expected an integer, got {text!r}') from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f'must be {what}, got {value}')
        return value

    parse.__name__ = 'integer'  # argparse names the type in its messages
    return parse


positive = integer(1, 'positive')
"""A positive integer."""


def logs(text: str) -> int:
    """An incident audit's size: 1 to `incident.MAX_LOGS` logs."""
    value = positive(text)
    if value > incident.MAX_LOGS:
        raise argparse.ArgumentTypeError(f'must be at most {incident.MAX_LOGS:,} logs, got {value:,}')
    return value


non_negative = integer(0, 'zero or more')
"""A non-negative integer."""

EXIT_USAGE = 2
"""Exit code of a bad argument (argparse's)."""

EXIT_FAILURE = 1
"""Exit code of a failure while running."""

DEBUG_ENV = 'PAC_DEBUG'
"""Set to show the traceback of an unexpected error instead of its one-line message."""


class UsageError(Exception):
    """A bad argument found after parsing (needs the records, the model registry, another argument)."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: the problem and where to read the options."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f'{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n')


def one_line(text: object) -> str:
    """*text* with its whitespace, newlines included, collapsed to single spaces."""
    return ' '.join(str(text).split())


def describe(error: BaseException) -> str:
    """A one-line message for *error*: what failed, without a traceback."""
    if isinstance(error, OSError) and error.strerror:
        where = f': {error.filename}' if error.filename else ''
        return one_line(f'{error.strerror}{where}')
    message = one_line(error)
    return message or type(error).__name__


def version_text() -> str:
    """`pai-compaction X (pydantic-ai-compaction Y, pydantic-ai-slim Z)`, from the installed distributions."""

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return 'not installed'

    return (
        f'pai-compaction {installed("pydantic-ai-compaction-bench")} '
        f'(pydantic-ai-compaction {installed("pydantic-ai-compaction")}, '
        f'pydantic-ai-slim {installed("pydantic-ai-slim")})'
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = Parser(prog='pai-compaction', description=(__doc__ or '').split('\n\n')[0])
    parser.add_argument('--version', action='version', version=version_text(), help='print the versions and exit')
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')

    bench = commands.add_parser('bench', help='run a benchmark and print its table')
    bench.add_argument(
        'task', choices=('incident', 'recall'),
        help='incident: the incident-audit benchmark; recall: the delayed-recall benchmark',
    )  # fmt: skip
    bench.add_argument(
        '--strategies', nargs='+', default=None, choices=strategies.CHOICES, metavar='NAME',
        help='default: every strategy and harness anchor (incident) or the seven recall setups (recall); '
        'group names run several: presets, verified',
    )  # fmt: skip
    bench.add_argument(
        '--seeds',
        type=seeds,
        default=seeds('101-103'),
        help="scenario seeds: '101-103', '1,4,9' or '7' (default 101-103)",
    )
    bench.add_argument(
        '--sizes', nargs='+', type=logs, default=None, metavar='LOGS',
        help=f'incident: logs per run, at least {incident.CHANGE_LOG + 1} with a held-out variant (default 8 20)',
    )  # fmt: skip
    bench.add_argument(
        '--variants', nargs='+', default=None, choices=incident.VARIANTS, metavar='VARIANT',
        help=f'incident: instruction changes, of {", ".join(incident.VARIANTS)} (default owner lowercase scope)',
    )  # fmt: skip
    bench.add_argument('--model', default=REFERENCE, help="'reference' (offline) or any pydantic-ai model string")
    bench.add_argument(
        '--base-url', default=None,
        help=f'OpenAI-compatible server for --model openai:NAME (llama.cpp, vLLM); default ${models.BASE_URL_ENV}',
    )  # fmt: skip
    bench.add_argument(
        '--trigger', type=positive, default=None, metavar='TOKENS',
        help='trigger in estimated tokens (default: 18000 for incident, 20000 for recall)',
    )  # fmt: skip
    bench.add_argument(
        '--summary-budget', type=positive, default=None,
        help=f'reference model: cap in tokens of every summary (the main tables; default {DEFAULT_SUMMARY_BUDGET})',
    )  # fmt: skip
    bench.add_argument(
        '--sensitivity-budgets', type=positive, nargs='*', default=[], metavar='TOKENS',
        help='incident, reference model: also run these summary caps, for the sensitivity table',
    )  # fmt: skip
    bench.add_argument(
        '--players', nargs='+', default=None, choices=PLAYERS,
        help='incident, reference model: silent (tool calls only) and/or notes (a note of each log beside its call; '
        'default both)',
    )  # fmt: skip
    bench.add_argument(
        '--anchor-pins', action='store_true',
        help="incident: tell the harness anchors the task's markers through harness pin(), as reassert and reset are "
        'told',
    )  # fmt: skip
    bench.add_argument(
        '--think-tokens', type=non_negative, default=0, help='reference model: reasoning tokens per step (default 0)'
    )
    bench.add_argument(
        '--concurrency', type=positive, default=None,
        help=f'runs in flight at once, for a model that waits on the network (default {DEFAULT_CONCURRENCY}; with '
        '--jobs, each worker process runs one run at a time)',
    )  # fmt: skip
    bench.add_argument(
        '--jobs', type=positive, default=1, help='worker processes, for the CPU-bound reference model (one per core)'
    )
    bench.add_argument(
        '--baseline', default=None, metavar='NAME',
        help='strategy the paired statistics compare against, one of the run (default: native when it runs)',
    )  # fmt: skip
    bench.add_argument('--out', type=Path, default=Path('out'), help='directory for records and plots')
    existing = bench.add_mutually_exclusive_group()
    existing.add_argument('--resume', action='store_true', help='keep existing records and run only what is missing')
    existing.add_argument('--overwrite', action='store_true', help='replace an existing records file')
    bench.add_argument('--prices', type=price_table, default=None, help=PRICES_HELP)
    bench.add_argument('--quiet', action='store_true', help='no progress line while the runs go')

    summary = commands.add_parser('summarize', help='rebuild every table from JSONL records')
    summary.add_argument('records', type=Path, help='a records file `bench` wrote (out/incident.jsonl)')
    summary.add_argument(
        '--baseline', default=None, metavar='NAME',
        help='strategy the paired statistics compare against, one in the records (default: native when there)',
    )  # fmt: skip
    summary.add_argument(
        '--prices', type=price_table, default=None,
        help='input,cache_read,cache_write,output in dollars per million tokens, for every record (default: the '
        "prices bench recorded with each run, else the model's own)",
    )  # fmt: skip
    summary.add_argument('--plots', type=Path, default=None, help='also write the PNG plots here')
    summary.add_argument(
        '--summary-budget', type=positive, default=None,
        help='summary cap of the main tables (default: the one bench ran them at)',
    )  # fmt: skip

    compare = commands.add_parser('recall-compare', help='recall against harness ConversationSearch: hits, latency')
    compare.add_argument('--seeds', type=seeds, default=seeds('1-5'), help='scenario seeds (default 1-5)')

    sim = commands.add_parser('costsim', help='reasoning-retention cost policies on a cached prefix')
    sim.add_argument('--prices', choices=('sonnet', 'fable'), default='sonnet', help='price sheet (default sonnet)')
    sim.add_argument('--steps', type=positive, default=40, help='agent steps (default 40)')
    sim.add_argument('--prefix', type=non_negative, default=20_000, metavar='TOKENS', help='cached prefix (20000)')
    sim.add_argument('--reasoning', type=non_negative, default=1_500, metavar='TOKENS', help='per step (1500)')
    sim.add_argument('--action', type=non_negative, default=150, metavar='TOKENS', help='tool call per step (150)')
    sim.add_argument(
        '--observation', type=non_negative, default=1_200, metavar='TOKENS', help='tool result per step (1200)'
    )
    return parser


PRICES_HELP = (
    "input,cache_read,cache_write,output in dollars per million tokens (default: the model's own; $0 for a "
    '--base-url server); recorded with each run'
)
"""Help of `bench --prices`."""


def check_bench(args: argparse.Namespace) -> None:
    """`UsageError` for what argparse cannot see: sizes against the variants, flags of the other task, the baseline,
    the model."""
    incident_only = {
        '--sizes': args.sizes,
        '--variants': args.variants,
        '--players': args.players,
        # The recall benchmark has no sensitivity table: its other caps ran and were never shown.
        '--sensitivity-budgets': args.sensitivity_budgets or None,
        '--anchor-pins': args.anchor_pins or None,
    }
    if args.task != 'incident' and (given := [flag for flag, value in incident_only.items() if value is not None]):
        # Ignored, they let a user believe the recall benchmark ran at a size or with a player it has no such knob for.
        raise UsageError(f"{', '.join(given)}: the incident benchmark's, not the {args.task} benchmark's")
    reference_only = {
        '--players': args.players,  # the reference model's players: a real model plays itself
        '--summary-budget': args.summary_budget,
        '--sensitivity-budgets': args.sensitivity_budgets or None,
        '--think-tokens': args.think_tokens or None,
    }
    if args.model != REFERENCE and (given := [flag for flag, value in reference_only.items() if value is not None]):
        # The reference model's knobs: a real model would run the same strategy once per cap, and the copies would
        # share one table and count as more pairs in its statistics.
        raise UsageError(f"{', '.join(given)}: the reference model's, not --model {args.model}'s")
    if args.concurrency is not None and args.jobs > 1:
        raise UsageError(
            '--concurrency with --jobs: each worker process runs one run at a time; pass --jobs for the reference '
            'model (CPU-bound) or --concurrency for a model that waits on the network'
        )
    args.summary_budget = args.summary_budget or DEFAULT_SUMMARY_BUDGET
    args.concurrency = args.concurrency or DEFAULT_CONCURRENCY
    if args.task == 'incident':
        minimum = incident.CHANGE_LOG + 1
        held_out = [variant for variant in args.variants or DEFAULT_VARIANTS if variant != 'base']
        if held_out and (small := [size for size in args.sizes or DEFAULT_SIZES if size < minimum]):
            raise UsageError(
                f'--sizes must be at least {minimum} with a held-out variant ({", ".join(held_out)}), '
                f'got {" ".join(map(str, small))}'
            )
    names = args.strategies or list(strategies.ALL if args.task == 'incident' else strategies.RECALL_SETUPS)
    if args.anchor_pins:
        check_anchor_pins(names)
    args.baseline = chosen_baseline(args.baseline, names, 'among the strategies run')
    if args.model != REFERENCE:
        check_model(args.model)
    if args.out.exists() and not args.out.is_dir():
        # Checked before any run: otherwise the records file fails to open with a bare "File exists".
        raise UsageError(f'--out must be a directory for the records and plots, got the file {args.out}')
    check_plots_directory(args.out / 'plots', f'--out {args.out}')


def check_plots_directory(directory: Path, option: str) -> None:
    """`UsageError` naming *option* if *directory*, where the plots go, is a file: found before any run, not
    after the last one."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f'{option}: the plots go to {directory}, which is a file, not a directory')


def check_anchor_pins(names: Sequence[str]) -> None:
    """`UsageError` for `--anchor-pins` when none of *names* is a harness anchor: only those are told the markers
    through `pin()`, so every run would ignore it while its records said `anchor_pins: true`."""
    bases = {name.partition('+')[0] for name in strategies.expand(names)}
    if not bases & set(strategies.HARNESS):
        raise UsageError(
            f'--anchor-pins: no harness anchor in --strategies {" ".join(names)} (it applies to '
            f'{", ".join(strategies.HARNESS)} only)'
        )


def chosen_baseline(baseline: str | None, names: Sequence[str], where: str) -> str | None:
    """*baseline* if it is in *names*; without one, `native` when it is there, else no comparison."""
    if baseline is None:
        return DEFAULT_BASELINE if DEFAULT_BASELINE in names else None
    if baseline not in names:
        raise UsageError(f'unknown --baseline {baseline!r}: not {where} ({", ".join(names)})')
    return baseline


DEFAULT_SIZES = (8, 20)
"""`bench incident --sizes` when not given."""

DEFAULT_SUMMARY_BUDGET = 500
"""`bench --summary-budget` when not given."""

DEFAULT_CONCURRENCY = 4
"""`bench --concurrency` when not given."""

DEFAULT_VARIANTS = ('owner', 'lowercase', 'scope')
"""`bench incident --variants` when not given."""

DEFAULT_BASELINE = 'native'
"""The baseline of the paired statistics when `--baseline` is not given and it ran."""


def check_model(model: str) -> None:
    """`UsageError` if pydantic-ai cannot build *model*: unknown name, provider package or API key missing."""
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.models import infer_model

    try:
        infer_model(model)
    except ImportError as error:
        raise UsageError(f'--model {model}: {describe(error)}') from None
    except (UserError, ValueError) as error:
        raise UsageError(f'--model {model}: {describe(error)}') from None


def specs_for(args: argparse.Namespace) -> list[RunSpec]:
    """Every run a `bench` invocation asks for: the main runs, then the sensitivity grid's other caps.

    Strategies that never ask for a summary (`strategies.NO_SUMMARIZER`) run at the main cap only: the
    cap cannot change their runs, and the sensitivity table carries their result across.
    """
    trigger = args.trigger or DEFAULT_TRIGGERS[args.task]
    names = strategies.expand(
        args.strategies or (strategies.ALL if args.task == 'incident' else strategies.RECALL_SETUPS)
    )
    main: int = args.summary_budget or DEFAULT_SUMMARY_BUDGET
    budgets = list(dict.fromkeys([main, *args.sensitivity_budgets]))
    model: str = args.model
    base_url: str | None = args.base_url
    think: int = args.think_tokens
    # The player is the reference model's: a real model would run every strategy once per player with the same
    # settings, and the runs would share one table and one baseline per seed (only the last one kept).
    # A value given twice would run the same runs twice, which the tables count once (as `seeds` does).
    players: list[Player] = list(dict.fromkeys(args.players or PLAYERS)) if model == REFERENCE else ['silent']
    sizes: list[int] = list(dict.fromkeys(args.sizes or DEFAULT_SIZES))
    variants: list[str] = list(dict.fromkeys(args.variants or DEFAULT_VARIANTS))
    if args.task == 'incident':
        return [
            RunSpec(
                'incident',
                name,
                seed,
                variant,
                size,
                summary_budget=budget,
                player=player,
                anchor_pins=bool(args.anchor_pins),
                model=model,
                base_url=base_url,
                trigger_tokens=trigger,
                think_tokens=think,
            )
            for budget in budgets
            for player in players
            for size in sizes
            for variant in variants
            for seed in args.seeds
            for name in names
            if budget == main or name not in strategies.NO_SUMMARIZER
        ]
    return [
        RunSpec(
            'recall',
            name,
            seed,
            'base',
            1,
            model,
            trigger,
            summary_budget=budget,
            think_tokens=think,
            base_url=base_url,
        )
        for budget in budgets
        for seed in args.seeds
        for name in names
        if budget == main or name not in strategies.NO_SUMMARIZER
    ]


def open_records(path: Path, *, resume: bool, overwrite: bool) -> list[dict[str, object]] | str:
    """Existing records to resume from, or a one-line reason the run cannot start.

    Checks that the file can be written before any run, and never replaces it silently. On resume, a cut-off last
    line (a run stopped while its record was written) is left out with a warning and removed, so that its run
    is rerun and the next record starts on a line of its own.
    """
    if path.exists() and not (resume or overwrite):
        return f'{path} exists: pass --resume to add the missing runs or --overwrite to replace it'
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if resume and path.exists():
            kept = read_records(path, warn=warning)
            if repaired := end_with_newline(path):
                warning(repaired)
            return kept
        path.open('wb').close()
    except OSError as error:
        return f'cannot write records to {path}: {error.strerror or error}'
    except RecordsError as error:
        return f'cannot resume: {error}'
    return []


def warning(message: str) -> None:
    """Print a one-line warning on stderr."""
    print(f'pai-compaction: warning: {one_line(message)}', file=sys.stderr)


def resumed_at_other_prices(kept: Sequence[Record], model: str, prices: dict[str, float] | None, path: Path) -> str:
    """Why runs of *model* at *prices* cannot join the records *kept* in *path*, else ''.

    The tables take medians over one model's runs: added at other prices, they would mix two price sheets in one
    cost cell. Runs of other models have tables of their own and may have been priced otherwise.
    """
    counts = price_sheets(record for record in kept if record.get('model') == model).get(model)
    new = PriceTable(**prices) if prices is not None else None
    if not counts or set(counts) == {new}:
        return ''
    wanted = describe_prices(new) if new is not None else 'no known prices'
    # Prices that match exist only when the file's runs of the model share one known sheet.
    matching = (
        f'pass --prices {prices_argument(sheet)} to add runs at them, or '
        if len(counts) == 1 and (sheet := next(iter(counts))) is not None
        else ''
    )
    return (
        f'{path} holds runs of {model} priced at {describe_sheets(counts)}; this run would price its runs at '
        f'{wanted}: {matching}write to another --out (or --overwrite)'
    )


def resumed_with_other_code(kept: Sequence[Record], path: Path) -> str:
    """Why runs of this code cannot join the records *kept* in *path*, else ''.

    A run's result depends on the code that made it, and a version number stays the same between releases (a
    default or a bound may change under 0.1.0): runs of two states of the code resumed into one file would share
    one table's cells. Records carry the versions and the digest of this library's source (`runner.versions`).
    """
    here = versions()
    other = [record for record in kept if record.get('versions') != here]
    if not other:
        return ''
    there = other[0].get('versions')
    recorded = cast('dict[str, object]', there) if isinstance(there, dict) else {}
    differences = [
        f'{name} {recorded.get(name, "unrecorded")} there, {value} here'
        for name, value in here.items()
        if recorded.get(name) != value
    ]
    return (
        f'{path} holds {len(other)} run(s) made with other code ({"; ".join(differences)}): resumed, they would '
        'share tables with runs of this code; write to another --out (or --overwrite)'
    )


def bench(args: argparse.Namespace) -> int:
    """Run, append records as runs finish, write plots, print the tables."""
    if args.model != REFERENCE:
        try:
            routed = models.use_base_url(args.model, args.base_url)
        except ValueError as error:
            print(f'pai-compaction: error: {one_line(error)}', file=sys.stderr)
            return EXIT_USAGE
        if routed != args.model and args.prices is None:
            # No price is known for a self-hosted model; the table still shows token counts.
            print('pai-compaction: no --prices given for the server; costs are shown as $0', file=sys.stderr)
            args.prices = models.FREE
        args.model = routed
        # Recorded with each run and part of its key: a resume against another server reruns the runs.
        args.base_url = models.server_url(args.base_url)
    elif args.base_url:
        print('pai-compaction: error: --base-url needs --model openai:NAME', file=sys.stderr)
        return EXIT_USAGE
    check_bench(args)
    specs = specs_for(args)
    path = args.out / f'{args.task}.jsonl'
    if args.model != REFERENCE:
        # One small request first, before the records file is opened (an --overwrite would empty it): a server
        # that cannot be reached, or that refuses the key or the model, would fail every run the same way.
        asyncio.run(check_server(args.model))
    opened = open_records(path, resume=args.resume, overwrite=args.overwrite)
    if isinstance(opened, str):
        print(f'pai-compaction: error: {opened}', file=sys.stderr)
        return EXIT_USAGE
    # Each record keeps the prices its run was priced at, so that `summarize` shows the same costs without
    # `--prices` (the $0 of a server, a table given here, a registry price that may change).
    prices = recorded_prices(args.prices, args.model)
    if conflict := resumed_at_other_prices(opened, args.model, prices, path) or resumed_with_other_code(opened, path):
        print(f'pai-compaction: error: {conflict}', file=sys.stderr)
        return EXIT_USAGE
    done = {spec_of(record).key() for record in opened if record.get('status') == 'ok' and 'config' in record}
    todo = [spec for spec in specs if spec.key() not in done]
    asyncio.run(
        run_all(
            todo,
            concurrency=args.concurrency,
            progress=not args.quiet,
            jobs=args.jobs,
            # The main cap is recorded with each run, so that `summarize` shows the tables `bench` shows.
            on_record=lambda record: write_records(
                [{**record, 'prices': prices, 'main_summary_budget': args.summary_budget}], path
            ),
        )
    )
    wanted = {spec.key() for spec in specs}
    # Everything in the tables comes from the records file, as `summarize` would read it.
    # A rerun replaces a missing run, as `summarize` reads it (`newest_runs`).
    records = [
        record for record in newest_runs(read_records(path)) if 'config' in record and spec_of(record).key() in wanted
    ]
    print(summarize(records, baseline=args.baseline, prices=args.prices, budget=args.summary_budget))
    try:
        written = plot(records, args.out / 'plots', budget=args.summary_budget, prices=args.prices)
    except ImportError:
        print('(plots skipped: install the `evals` extra for matplotlib)', file=sys.stderr)
    else:
        print('Records: ' + str(path) + '\nPlots: ' + ', '.join(str(p) for p in written))
    return 0


def run_costsim(args: argparse.Namespace) -> int:
    """Print the policy comparison."""
    prices = costsim.SONNET_5_5 if args.prices == 'sonnet' else costsim.FABLE_5_1
    config = costsim.SimulationConfig(
        steps=args.steps,
        prefix_tokens=args.prefix,
        reasoning_tokens=args.reasoning,
        action_tokens=args.action,
        observation_tokens=args.observation,
        prices=prices,
    )
    results = costsim.compare_policies(config)
    keep = results['keep']
    print(f'{config.steps} steps, {config.prefix_tokens:,}-token prefix, prices: {args.prices}\n')
    print('| policy | input tokens | cache read | cache write | output | bill | vs keep | input vs keep |')
    print('|---|---|---|---|---|---|---|---|')
    for policy, result in results.items():
        print(
            f'| {policy} | {result.input_tokens:,.0f} | {result.cache_read_tokens:,.0f} | '
            f'{result.cache_write_tokens:,.0f} | {result.output_tokens:,.0f} | ${result.total_cost:.3f} | '
            f'{costsim.relative_change(result, keep) * 100:+.1f}% | '
            f'{(result.input_tokens / keep.input_tokens - 1) * 100:+.1f}% |'
        )
    try:
        multiplier = costsim.break_even_multiplier(config, 'drop')
    except ValueError:  # no reasoning (`--reasoning 0`) or a free output: dropping it changes no bill
        print(f'\nWith --reasoning {config.reasoning_tokens}, dropping reasoning changes no bill: no break-even.')
    else:
        print(
            f'\nDropping reasoning at append time breaks even at {(multiplier - 1) * 100:.0f}% more reasoning per step.'
        )
    print_thresholds(costsim.ThresholdConfig())
    return 0


def print_thresholds(config: costsim.ThresholdConfig) -> None:
    """Seed 001's compaction-threshold cost model: how often to compact."""
    results = costsim.compare_thresholds(config)
    late = results['late']
    print(
        f'\nCompaction threshold, {config.turns}-turn session, {config.window_tokens:,}-token window '
        f'(seed 001 cost model, sonnet prices):\n'
    )
    print('| threshold | summaries | input tokens | bill | vs late |')
    print('|---|---|---|---|---|')
    for name, result in results.items():
        print(
            f'| {name} ({result.threshold:.0%}) | {result.summaries} | {result.input_tokens:,.0f} | '
            f'${result.total_cost:.2f} | {(result.total_cost / late.total_cost - 1) * 100:+.0f}% |'
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the command's exit code; every error is one line on stderr, never a traceback.

    `pai-compaction` runs this through `console.main`, which also turns a Ctrl-C while this module loads into
    the same one line and exit code.
    """
    try:
        return run(build_parser().parse_args(argv))
    except UsageError as error:
        print(f'pai-compaction: error: {error}', file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Records are appended as each run finishes: whatever was written stays.
        print(console.INTERRUPTED, file=sys.stderr)
        return console.EXIT_INTERRUPTED
    except Exception as error:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f'pai-compaction: error: {describe(error)}', file=sys.stderr)
        return EXIT_FAILURE


RECORD_KEYS = (
    'task',
    'strategy',
    'seed',
    'variant',
    'size',
    'model',
    'status',
    'passed',
    'applied',
    'probe',
    'requests',
)
"""What every record `bench` writes holds, and the tables read."""

REQUEST_KEYS = ('kind', 'input_tokens', 'cache_read_tokens', 'cache_write_tokens', 'output_tokens')
"""What every request of a record holds, and the tables read."""


def summarize_records(args: argparse.Namespace) -> int:
    """Print the tables of a records file (and write its plots)."""
    path: Path = args.records
    if not path.is_file():
        raise UsageError(f'no records file at {path}' if not path.exists() else f'{path} is not a file')
    try:
        records = read_records(path, warn=warning)
    except RecordsError as error:
        raise UsageError(str(error)) from None
    if not records:
        raise UsageError(f'{path} holds no records')
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(f'{path} is not a records file of pai-compaction bench (line {number} is not a record)')
        if missing := [key for key in RECORD_KEYS if key not in record]:
            raise UsageError(
                f'{path} is not a records file of pai-compaction bench (line {number} has no {", ".join(missing)})'
            )
        requests: object = record['requests']
        if not isinstance(requests, list):
            raise UsageError(
                f'{path} is not a records file of pai-compaction bench (line {number}: requests not a list)'
            )
        for request in cast('list[object]', requests):
            if not isinstance(request, dict):
                raise UsageError(
                    f'{path} is not a records file of pai-compaction bench (line {number}: a request not a record)'
                )
            if missing := [key for key in REQUEST_KEYS if key not in request]:
                raise UsageError(
                    f'{path} is not a records file of pai-compaction bench (line {number}: a request has no '
                    f'{", ".join(missing)})'
                )
    try:
        # The newest record of each run, as `bench` keeps them: a rerun replaces a missing run, a repeat counts once.
        records = newest_runs(records)
    except (TypeError, ValueError) as error:  # a `config` RunSpec does not take
        raise UsageError(
            f'{path} is not a records file of pai-compaction bench (a config: {describe(error)})'
        ) from None
    caps = sorted({int(r['summary_budget']) for r in records if r.get('summary_budget') is not None})
    if args.summary_budget is not None and args.summary_budget not in caps:
        # Otherwise the tables at the default cap print under the impression they are at the one asked for.
        held = f'the caps it holds: {", ".join(map(str, caps))}' if caps else 'it holds runs without a summary cap'
        raise UsageError(f'--summary-budget {args.summary_budget}: no run in {path} ran at that cap ({held})')
    if args.plots is not None:
        check_plots_directory(args.plots, f'--plots {args.plots}')
    present = sorted({str(record.get('strategy')) for record in records})
    baseline = chosen_baseline(args.baseline, present, f'among the strategies in {path}')
    if args.prices is None and (mixed := mixed_prices(records)):
        # One cost cell is a median over runs: at two price sheets it is a cost at neither.
        raise UsageError(f'{path}: {mixed}; pass --prices input,cache_read,cache_write,output to price every run alike')
    print(summarize(records, baseline=baseline, prices=args.prices, budget=args.summary_budget))
    if args.plots is not None:
        plot(records, args.plots, budget=args.summary_budget, prices=args.prices)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the parsed command."""
    if args.command == 'bench':
        return bench(args)
    if args.command == 'summarize':
        return summarize_records(args)
    if args.command == 'recall-compare':
        from pydantic_ai_compaction_bench import recall_compare

        print(recall_compare.table(asyncio.run(recall_compare.compare(args.seeds))))
        return 0
    return run_costsim(args)


if __name__ == '__main__':
    raise SystemExit(main())
