"""`pai-compaction`: run the benchmarks, rebuild tables from records, simulate reasoning-retention costs.

pai-compaction bench incident --sizes 8 20 --seeds 101-103 --variants owner lowercase scope
pai-compaction bench recall --seeds 1-5
pai-compaction bench incident --model openai:qwen3-8b --base-url http://127.0.0.1:8080/v1
pai-compaction summarize out/incident.jsonl --baseline native
pai-compaction costsim --prices fable
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic_ai_compaction.evals import costsim, models, strategies
from pydantic_ai_compaction.evals.cost import PriceTable
from pydantic_ai_compaction.evals.plots import plot
from pydantic_ai_compaction.evals.report import read_records, summarize, write_records
from pydantic_ai_compaction.evals.runner import REFERENCE, RunSpec, run_all
from pydantic_ai_compaction.evals.tasks import incident

DEFAULT_TRIGGERS = {'incident': 18_000, 'recall': 8_000}
"""Per task: the seed studies' settings (18K for the audit; a small window for delayed recall)."""


def seeds(text: str) -> list[int]:
    """`101-103` or `1,4,9` or `7`."""
    values: list[int] = []
    for chunk in text.split(','):
        if '-' in chunk:
            low, high = chunk.split('-', 1)
            values.extend(range(int(low), int(high) + 1))
        elif chunk.strip():
            values.append(int(chunk))
    if not values:
        raise argparse.ArgumentTypeError(f'no seeds in {text!r}')
    return values


def price_table(text: str) -> PriceTable:
    """`input,cache_read,cache_write,output` in dollars per million tokens."""
    try:
        numbers = [float(x) for x in text.split(',')]
        return PriceTable(*numbers)
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(f'--prices takes input,cache_read,cache_write,output: {error}') from error


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog='pai-compaction', description=(__doc__ or '').split('\n\n')[0])
    commands = parser.add_subparsers(dest='command', required=True)

    bench = commands.add_parser('bench', help='run a benchmark and print its table')
    bench.add_argument('task', choices=('incident', 'recall'))
    bench.add_argument(
        '--strategies', nargs='+', default=None, choices=strategies.CHOICES, metavar='NAME',
        help='default: every strategy and harness anchor (incident) or the seven recall setups (recall)',
    )  # fmt: skip
    bench.add_argument('--seeds', type=seeds, default=seeds('101-103'))
    bench.add_argument('--sizes', nargs='+', type=int, default=[8, 20], help='incident: logs per run')
    bench.add_argument('--variants', nargs='+', default=['owner', 'lowercase', 'scope'], choices=incident.VARIANTS)
    bench.add_argument('--model', default=REFERENCE, help="'reference' (offline) or any pydantic-ai model string")
    bench.add_argument(
        '--base-url', default=None,
        help=f'OpenAI-compatible server for --model openai:NAME (llama.cpp, vLLM); default ${models.BASE_URL_ENV}',
    )  # fmt: skip
    bench.add_argument('--trigger', type=int, default=None, help='trigger in estimated tokens (task default)')
    bench.add_argument('--summary-budget', type=int, default=500, help='reference model: tokens per summary')
    bench.add_argument('--think-tokens', type=int, default=0, help='reference model: reasoning tokens per step')
    bench.add_argument('--concurrency', type=int, default=4)
    bench.add_argument('--baseline', default='native')
    bench.add_argument('--out', type=Path, default=Path('out'), help='directory for records and plots')
    bench.add_argument('--prices', type=price_table, default=None)
    bench.add_argument('--quiet', action='store_true')

    summary = commands.add_parser('summarize', help='rebuild every table from JSONL records')
    summary.add_argument('records', type=Path)
    summary.add_argument('--baseline', default='native')
    summary.add_argument('--prices', type=price_table, default=None)
    summary.add_argument('--plots', type=Path, default=None, help='also write the PNG plots here')

    compare = commands.add_parser('recall-compare', help='recall against harness ConversationSearch: hits, latency')
    compare.add_argument('--seeds', type=seeds, default=seeds('1-5'))

    sim = commands.add_parser('costsim', help='reasoning-retention cost policies on a cached prefix')
    sim.add_argument('--prices', choices=('sonnet', 'fable'), default='sonnet')
    sim.add_argument('--steps', type=int, default=40)
    sim.add_argument('--prefix', type=int, default=20_000)
    sim.add_argument('--reasoning', type=int, default=1_500)
    sim.add_argument('--action', type=int, default=150)
    sim.add_argument('--observation', type=int, default=1_200)
    return parser


def specs_for(args: argparse.Namespace) -> list[RunSpec]:
    """Every run a `bench` invocation asks for."""
    trigger = args.trigger or DEFAULT_TRIGGERS[args.task]
    names = args.strategies or list(strategies.ALL if args.task == 'incident' else strategies.RECALL_SETUPS)
    if args.task == 'incident':
        return [
            RunSpec(
                'incident',
                name,
                seed,
                variant,
                size,
                args.model,
                trigger,
                args.summary_budget,
                think_tokens=args.think_tokens,
            )
            for size in args.sizes
            for variant in args.variants
            for seed in args.seeds
            for name in names
        ]
    return [
        RunSpec(
            'recall', name, seed, 'base', 1, args.model, trigger, args.summary_budget, think_tokens=args.think_tokens
        )
        for seed in args.seeds
        for name in names
    ]


def bench(args: argparse.Namespace) -> int:
    """Run, write records and plots, print the table."""
    if args.model != REFERENCE:
        try:
            routed = models.use_base_url(args.model, args.base_url)
        except ValueError as error:
            print(f'pai-compaction: {error}', file=sys.stderr)
            return 2
        if routed != args.model and args.prices is None:
            # No price is known for a self-hosted model; the table still shows token counts.
            print('pai-compaction: no --prices given for the server; costs are shown as $0', file=sys.stderr)
            args.prices = models.FREE
        args.model = routed
    elif args.base_url:
        print('pai-compaction: --base-url needs --model openai:NAME', file=sys.stderr)
        return 2
    specs = specs_for(args)
    records = asyncio.run(run_all(specs, concurrency=args.concurrency, progress=not args.quiet))
    path = args.out / f'{args.task}.jsonl'
    if path.exists():
        path.unlink()
    write_records(records, path)
    print(summarize(records, baseline=args.baseline, prices=args.prices))
    try:
        written = plot(records, args.out / 'plots')
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
    multiplier = costsim.break_even_multiplier(config, 'drop')
    print(f'\nDropping reasoning at append time breaks even at {(multiplier - 1) * 100:.0f}% more reasoning per step.')
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    if args.command == 'bench':
        return bench(args)
    if args.command == 'summarize':
        records = read_records(args.records)
        print(summarize(records, baseline=args.baseline, prices=args.prices))
        if args.plots is not None:
            plot(records, args.plots)
        return 0
    if args.command == 'recall-compare':
        from pydantic_ai_compaction.evals import recall_compare

        print(recall_compare.table(asyncio.run(recall_compare.compare(args.seeds))))
        return 0
    return run_costsim(args)


if __name__ == '__main__':
    raise SystemExit(main())
