"""PNG plots from records: pass rate (Wilson 95 % interval) against cost and cumulative input, prompt sizes."""

# matplotlib's stubs leave many parameters unknown; the strict checks stay on everywhere else.
# pyright: reportUnknownMemberType=false, reportUnknownArgumentType=false, reportUnknownVariableType=false

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic_ai_compaction_bench import strategies
from pydantic_ai_compaction_bench.cost import PriceTable
from pydantic_ai_compaction_bench.report import (
    Record,
    SettingKey,
    agent_prompts,
    at_cap,
    build_rows,
    main_budget,
    setting_key,
)
from pydantic_ai_compaction_bench.stats import wilson_interval

_MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', 'p', 'h', '*', 'd', '8', 'H', '1', '2')
_ORDER = tuple(dict.fromkeys((*strategies.ALL, *strategies.CHOICES)))


_COLOURS = (
    '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf',
    '#000000', '#b8860b', '#006d6f', '#000080', '#8b0000', '#556b2f', '#4b0082',
)  # fmt: skip
"""Matplotlib's ten default colours, then seven dark ones, so no strategy is drawn pale."""


def style(name: str) -> tuple[str, str]:
    """A fixed colour and marker per strategy, the same in every figure."""
    index = _ORDER.index(name) if name in _ORDER else len(_ORDER) + sum(map(ord, name))
    return _COLOURS[index % len(_COLOURS)], _MARKERS[index % len(_MARKERS)]


def plot(
    records: Sequence[Record], directory: Path, *, budget: int | None = 500, prices: PriceTable | None = None
) -> list[Path]:
    """One figure per table setting (task, size, model, trigger, anchor pins, reasoning tokens): pass rate against
    cost and against cumulative input (one row per player, at the main summary budget), and one of prompt tokens
    per agent request. A setting the records hold more than one value of is named in the file and the title: runs
    at two triggers drawn as one point would be neither's."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, StrMethodFormatter

    directory.mkdir(parents=True, exist_ok=True)
    chosen = main_budget(records, budget)
    groups: dict[SettingKey, list[Record]] = defaultdict(list)
    # The main table's runs (`at_cap`): strategies that never ask for a summary are drawn at every cap.
    for record in at_cap(records, chosen):
        if record['status'] == 'ok':
            groups[setting_key(record)].append(record)
    triggers = {key[:3]: {other[3] for other in groups if other[:3] == key[:3]} for key in groups}
    written: list[Path] = []
    for (task, size, model, trigger, pins, think), group in sorted(groups.items()):
        setting = f', trigger {trigger:,}' * (len(triggers[(task, size, model)]) > 1)
        setting += ', anchors pin markers' * pins + f', {think:,} reasoning tokens a step' * bool(think)
        stem = f'{task}-{size}-{_slug(model)}' + f'-trigger{trigger}' * (len(triggers[(task, size, model)]) > 1)
        stem += '-pins' * pins + f'-think{think}' * bool(think)
        players = sorted({str(r.get('player')) for r in group}, key=lambda p: (p != 'silent', p))
        figure, axes = plt.subplots(len(players), 2, figsize=(13, 4.4 * len(players)), squeeze=False)
        names: set[str] = set()
        for row_axes, player in zip(axes, players, strict=True):
            subset = [r for r in group if str(r.get('player')) == player]
            points: list[tuple[str, float, float, int, int]] = []
            for row in build_rows(subset, baseline=None, prices=prices):
                ok = row.runs - row.missing
                # Its medians place the point: a strategy whose every run failed on an error has none.
                if row.measured:
                    points.append((row.strategy, row.cost.high, row.cumulative_input, row.passed, ok))
                    names.add(row.strategy)
            for column, axis in enumerate(row_axes):
                placed = [
                    (name, x_cost if column == 0 else x_input, passed, ok)
                    for name, x_cost, x_input, passed, ok in points
                ]
                for (name, x, passed, ok), nudge in zip(
                    placed, dodge([(x, passed / ok) for _, x, passed, ok in placed]), strict=True
                ):
                    rate = passed / ok
                    low, high = wilson_interval(passed, ok)
                    colour, marker = style(name)
                    axis.errorbar(
                        x, rate + nudge, yerr=[[rate - low], [high - rate]], fmt=marker, color=colour, markersize=8,
                        capsize=3, elinewidth=1.5, markeredgecolor='black', markeredgewidth=0.6,
                    )  # fmt: skip
            suffix = '' if player == 'None' else f' (player: {player})'
            row_axes[0].set(xlabel='median cost per run', ylabel='pass rate', title=f'pass rate vs cost{suffix}')
            row_axes[0].xaxis.set_major_formatter(StrMethodFormatter('${x:,.2f}'))
            row_axes[1].set(
                xlabel='median cumulative input per run (tokens)', ylabel='pass rate',
                title=f'pass rate vs cumulative input{suffix}',
            )  # fmt: skip
            row_axes[1].xaxis.set_major_formatter(EngFormatter(sep=''))
            for axis in row_axes:
                axis.set_ylim(-0.08, 1.12)
                axis.grid(alpha=0.3)
        ordered = sorted(names, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER))
        handles = [_handle(name) for name in ordered]
        figure.legend(handles=handles, loc='center left', bbox_to_anchor=(1.0, 0.5), title='strategy')
        budget_note = f', summary cap {chosen}' if chosen is not None else ''
        figure.suptitle(
            f'{task}, size {size}, model {model}{budget_note}{setting}: pass rate with Wilson 95 % interval\n'
            '(markers that would overlap are nudged up or down, with their interval, by 0.04)'
        )
        figure.tight_layout()
        path = directory / f'{stem}-pass-rate.png'
        figure.savefig(path, dpi=110, bbox_inches='tight')
        plt.close(figure)
        written.append(path)
        written.append(_prompt_plot(plt, group, directory, task, size, stem))
    return written


def dodge(points: Sequence[tuple[float, float]], *, step: float = 0.04, near: float = 0.025) -> list[float]:
    """Vertical nudges that keep markers apart: points at the same rate closer than *near* of the x range
    get offsets 0, +step, -step, +2·step, ... in order of x."""
    if not points:
        return []
    xs = [x for x, _ in points]
    span = (max(xs) - min(xs)) or 1.0
    nudges = [0.0] * len(points)
    order = sorted(range(len(points)), key=lambda i: (points[i][1], points[i][0]))
    cluster: list[int] = []
    for index in order:
        if cluster and (
            points[index][1] != points[cluster[0]][1] or points[index][0] - points[cluster[-1]][0] > near * span
        ):
            cluster = []
        cluster.append(index)
        k = len(cluster) - 1
        nudges[index] = step * ((k + 1) // 2) * (1 if k % 2 else -1)
    return nudges


def _handle(name: str) -> Any:
    from matplotlib.lines import Line2D

    colour, marker = style(name)
    return Line2D(
        [], [], linestyle='', marker=marker, color=colour, markersize=8, markeredgecolor='black',
        markeredgewidth=0.5, label=name,
    )  # fmt: skip


def _prompt_plot(plt: Any, group: Sequence[Record], directory: Path, task: str, size: int, stem: str) -> Path:
    """Prompt tokens per agent request for one scenario (the first seed and variant): one small panel per
    strategy on shared axes, with no compaction drawn in grey behind each for reference."""
    first = min((r['seed'], r['variant']) for r in group)
    players = {str(r.get('player')) for r in group}
    player = 'silent' if 'silent' in players else min(players)
    chosen = {
        r['strategy']: agent_prompts(r)
        for r in group
        if (r['seed'], r['variant']) == first and str(r.get('player')) == player
    }
    names = sorted(chosen, key=lambda n: _ORDER.index(n) if n in _ORDER else len(_ORDER))
    columns = 4
    rows = -(-len(names) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(14, 2.6 * rows), sharex=True, sharey=True, squeeze=False)
    reference = chosen.get('none')
    for axis, name in zip(axes.flat, names, strict=False):
        if reference is not None and name != 'none':
            axis.plot(range(1, len(reference) + 1), reference, color='#bbbbbb', linewidth=1, label='none')
        colour, marker = style(name)
        prompts = chosen[name]
        axis.plot(range(1, len(prompts) + 1), prompts, marker=marker, color=colour, markersize=4, linewidth=1.2)
        axis.set_title(name, fontsize=10)
        axis.set_yscale('log')
        axis.grid(alpha=0.3, which='both')
    for axis in list(axes.flat)[len(names) :]:
        axis.set_visible(False)
    figure.supxlabel('agent request')
    figure.supylabel('prompt tokens (log scale)')
    figure.suptitle(
        f'{task}, size {size}: prompt tokens per agent request (seed {first[0]}, {first[1]}, player {player}; '
        'grey: no compaction)'
    )
    figure.tight_layout()
    path = directory / f'{stem}-prompt-tokens.png'
    figure.savefig(path, dpi=110, bbox_inches='tight')
    plt.close(figure)
    return path


def _slug(text: str) -> str:
    return ''.join(c if c.isalnum() else '-' for c in text)
