"""PNG plots from records: prompt tokens per request, and pass rate against cumulative input."""

# matplotlib's stubs leave many parameters unknown; the strict checks stay on everywhere else.
# pyright: reportUnknownMemberType=false, reportUnknownArgumentType=false

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from pydantic_ai_compaction.evals.report import Record, agent_prompts, build_rows


def plot(records: Sequence[Record], directory: Path) -> list[Path]:
    """PNG plots per task and size: prompt tokens per request, and pass rate against cumulative input."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, int, str], list[Record]] = defaultdict(list)
    for record in records:
        if record['status'] == 'ok':
            groups[(record['task'], record['size'], record['model'])].append(record)
    written: list[Path] = []
    for (task, size, model), group in sorted(groups.items()):
        first = min((r['seed'], r['variant']) for r in group)
        figure, axis = plt.subplots(figsize=(9, 5))
        for record in sorted(group, key=lambda r: r['strategy']):
            if (record['seed'], record['variant']) == first:
                prompts = agent_prompts(record)
                axis.plot(range(1, len(prompts) + 1), prompts, marker='.', label=record['strategy'])
        axis.set(xlabel='agent request', ylabel='prompt tokens', title=f'{task} ({size}), seed {first[0]} {first[1]}')
        axis.legend(fontsize=7, ncol=2)
        path = directory / f'{task}-{size}-{_slug(model)}-prompt-tokens.png'
        figure.savefig(path, dpi=110, bbox_inches='tight')
        plt.close(figure)
        written.append(path)

        figure, axis = plt.subplots(figsize=(7, 5))
        for row in build_rows(group, baseline=None):
            ok = row.runs - row.missing
            axis.scatter(row.cumulative_input, row.passed / max(ok, 1))
            axis.annotate(row.strategy, (row.cumulative_input, row.passed / max(ok, 1)), fontsize=7)
        axis.set(xlabel='median cumulative input tokens per run', ylabel='pass rate', title=f'{task} ({size})')
        axis.set_ylim(-0.05, 1.05)
        path = directory / f'{task}-{size}-{_slug(model)}-pass-vs-input.png'
        figure.savefig(path, dpi=110, bbox_inches='tight')
        plt.close(figure)
        written.append(path)
    return written


def _slug(text: str) -> str:
    return ''.join(c if c.isalnum() else '-' for c in text)
