"""PNG plots from records: pass rate (Wilson 95 % interval) against cost and cumulative input, prompt sizes."""

# matplotlib's stubs leave many parameters unknown; the strict checks stay on everywhere else.
# pyright: reportUnknownMemberType=false, reportUnknownArgumentType=false, reportUnknownVariableType=false

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic_ai_compaction.evals import strategies
from pydantic_ai_compaction.evals.report import Record, agent_prompts, build_rows, main_budget
from pydantic_ai_compaction.evals.stats import wilson_interval

_MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', 'p', 'h', '*', 'd', '8')
_ORDER = tuple(dict.fromkeys((*strategies.ALL, *strategies.CHOICES)))


def style(name: str) -> tuple[Any, str]:
    """A fixed colour and marker per strategy, the same in every figure."""
    import matplotlib

    index = _ORDER.index(name) if name in _ORDER else len(_ORDER) + sum(map(ord, name))
    colours: Sequence[Any] = matplotlib.colormaps['tab20'].colors  # pyright: ignore[reportAttributeAccessIssue]
    return colours[(index * 2 + index // 10) % len(colours)], _MARKERS[index % len(_MARKERS)]


def plot(records: Sequence[Record], directory: Path, *, budget: int | None = 500) -> list[Path]:
    """One figure per task, size and model: pass rate against cost and against cumulative input (one row per
    player, at the main summary budget), and one of prompt tokens per agent request."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    directory.mkdir(parents=True, exist_ok=True)
    chosen = main_budget(records, budget)
    groups: dict[tuple[str, int, str], list[Record]] = defaultdict(list)
    for record in records:
        if record['status'] == 'ok' and record.get('summary_budget') in (None, chosen):
            groups[(record['task'], record['size'], record['model'])].append(record)
    written: list[Path] = []
    for (task, size, model), group in sorted(groups.items()):
        players = sorted({str(r.get('player')) for r in group})
        figure, axes = plt.subplots(len(players), 2, figsize=(13, 4.2 * len(players)), squeeze=False)
        names: set[str] = set()
        for row_axes, player in zip(axes, players, strict=True):
            subset = [r for r in group if str(r.get('player')) == player]
            for row in build_rows(subset, baseline=None):
                ok = row.runs - row.missing
                if not ok:
                    continue
                rate = row.passed / ok
                low, high = wilson_interval(row.passed, ok)
                colour, marker = style(row.strategy)
                names.add(row.strategy)
                for axis, x in zip(row_axes, (row.cost.high, row.cumulative_input), strict=True):
                    axis.errorbar(
                        x, rate, yerr=[[rate - low], [high - rate]], fmt=marker, color=colour, markersize=8,
                        capsize=3, alpha=0.85, markeredgecolor='black', markeredgewidth=0.5,
                    )  # fmt: skip
            suffix = '' if player == 'None' else f' (player: {player})'
            row_axes[0].set(xlabel='median cost per run ($)', ylabel='pass rate', title=f'pass rate vs cost{suffix}')
            row_axes[1].set(
                xlabel='median cumulative input per run (tokens)', ylabel='pass rate',
                title=f'pass rate vs cumulative input{suffix}',
            )  # fmt: skip
            for axis in row_axes:
                axis.set_ylim(-0.05, 1.05)
                axis.grid(alpha=0.3)
                axis.xaxis.set_major_formatter(EngFormatter(sep=''))
        ordered = sorted(names, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER))
        handles = [_handle(name) for name in ordered]
        figure.legend(handles=handles, loc='center left', bbox_to_anchor=(1.0, 0.5), title='strategy')
        budget_note = f', summary cap {chosen}' if chosen is not None else ''
        figure.suptitle(f'{task}, size {size}, model {model}{budget_note}: pass rate with Wilson 95 % interval')
        figure.tight_layout()
        path = directory / f'{task}-{size}-{_slug(model)}-pass-rate.png'
        figure.savefig(path, dpi=110, bbox_inches='tight')
        plt.close(figure)
        written.append(path)
        written.append(_prompt_plot(plt, group, directory, task, size, model))
    return written


def _handle(name: str) -> Any:
    from matplotlib.lines import Line2D

    colour, marker = style(name)
    return Line2D(
        [], [], linestyle='', marker=marker, color=colour, markersize=8, markeredgecolor='black',
        markeredgewidth=0.5, label=name,
    )  # fmt: skip


def _prompt_plot(plt: Any, group: Sequence[Record], directory: Path, task: str, size: int, model: str) -> Path:
    """Prompt tokens per agent request for one scenario (the first seed and variant), one line per strategy."""
    first = min((r['seed'], r['variant']) for r in group)
    player = min(str(r.get('player')) for r in group)
    figure, axis = plt.subplots(figsize=(11, 5))
    chosen = [r for r in group if (r['seed'], r['variant']) == first and str(r.get('player')) == player]
    for record in sorted(chosen, key=lambda r: _ORDER.index(r['strategy']) if r['strategy'] in _ORDER else 99):
        prompts = agent_prompts(record)
        colour, marker = style(record['strategy'])
        axis.plot(
            range(1, len(prompts) + 1), prompts, marker=marker, color=colour, markersize=5, linewidth=1.2,
            label=record['strategy'],
        )  # fmt: skip
    axis.set(
        xlabel='agent request', ylabel='prompt tokens', yscale='log',
        title=f'{task}, size {size}: prompt tokens per request (seed {first[0]}, {first[1]}, player {player})',
    )  # fmt: skip
    axis.grid(alpha=0.3, which='both')
    axis.legend(loc='center left', bbox_to_anchor=(1.0, 0.5), title='strategy')
    path = directory / f'{task}-{size}-{_slug(model)}-prompt-tokens.png'
    figure.savefig(path, dpi=110, bbox_inches='tight')
    plt.close(figure)
    return path


def _slug(text: str) -> str:
    return ''.join(c if c.isalnum() else '-' for c in text)
