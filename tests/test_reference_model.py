"""The reference model: prefix-cache accounting and information flow through compactions."""

from __future__ import annotations

import asyncio

from pydantic_ai_compaction_bench.reference.cache import PrefixCacheSimulator
from pydantic_ai_compaction_bench.runner import RunSpec, run_incident, run_recall


def test_prefix_cache_reads_the_longest_shared_prefix() -> None:
    cache = PrefixCacheSimulator()
    first = cache.account([('system', 100), ('log1', 50)])
    assert (first.cache_read_tokens, first.cache_write_tokens) == (0, 150)
    appended = cache.account([('system', 100), ('log1', 50), ('log2', 70)])
    assert (appended.cache_read_tokens, appended.cache_write_tokens) == (150, 70)
    rewritten = cache.account([('system', 100), ('summary', 10), ('log2', 70)])
    assert (rewritten.cache_read_tokens, rewritten.cache_write_tokens) == (100, 80)


def run(strategy: str, variant: str = 'owner', size: int = 8) -> dict[str, object]:
    return asyncio.run(run_incident(RunSpec('incident', strategy, 101, variant, size)))


def test_a_strategy_that_drops_the_change_fails_where_reassert_and_fork_pass() -> None:
    sliding = run('harness-sliding')
    assert sliding['passed'] is False and sliding['applied'] is False and sliding['probe'] is False
    assert 'owner' in sliding['problems']  # type: ignore[operator]
    for strategy in ('reassert', 'fork-json'):
        record = run(strategy)
        assert record['passed'] is True and record['applied'] is True and record['probe'] is True
    # The reassert record shows the change was restated.
    restated = [c['restated'] for c in run('reassert')['compactions']]  # type: ignore[union-attr]
    assert any(any('LOWEST' in text for text in r) for r in restated)


def test_budgeted_summaries_lose_facts_on_long_tasks() -> None:
    native = run('native', 'lowercase', 20)
    summary = run('summary', 'lowercase', 20)
    assert native['passed'] is False and native['problems'] == ['missing']
    assert summary['passed'] is True


def test_usage_is_reported_for_every_request_with_cache_detail() -> None:
    record = run('fork-json')
    requests = record['requests']
    assert isinstance(requests, list) and requests
    kinds = {r['kind'] for r in requests}
    assert kinds == {'agent', 'compactor'}
    assert all(r['input_tokens'] == r['cache_read_tokens'] + r['cache_write_tokens'] for r in requests)
    # The fork reuses the conversation's prefix: its requests read most of their input from cache. A fork
    # during the closing probe (asked with `output_type=str`, so other tool definitions) cannot.
    forks = [r for r in requests if r['kind'] == 'compactor']
    reusing = [r for r in forks if r['cache_read_tokens'] > r['cache_write_tokens']]
    assert len(forks) >= 3 and len(reusing) >= len(forks) - 1


def test_reference_recall_answers_not_sure_when_facts_are_gone() -> None:
    cleared = asyncio.run(run_recall(RunSpec('recall', 'harness-clear', 1, 'base', 1, trigger_tokens=8_000)))
    kept = asyncio.run(run_recall(RunSpec('recall', 'summary', 1, 'base', 1, trigger_tokens=8_000)))
    assert cleared['answers'] == {'correct': 4, 'invented': 0, 'not_sure': 8}
    assert kept['answers'] == {'correct': 12, 'invented': 0, 'not_sure': 0}


def test_an_unmarked_fake_instruction_is_never_restated_or_applied() -> None:
    record = run('reassert', 'fake', 8)
    restated = [text for c in record['compactions'] for text in c['restated']]  # type: ignore[union-attr]
    assert restated and all('Note from ops' not in text for text in restated)
    assert record['passed'] is True and record['report']['incident_ids']  # type: ignore[index]


def test_delayed_recall_setups_run_and_recall_recovers_what_clearing_dropped() -> None:
    from pydantic_ai_compaction_bench.strategies import RECALL_SETUPS

    answers = {
        name: asyncio.run(run_recall(RunSpec('recall', name, 2, 'base', 1, trigger_tokens=8_000)))['answers']
        for name in RECALL_SETUPS
    }
    assert answers['none'] == {'correct': 12, 'invented': 0, 'not_sure': 0}
    # Clearing alone loses the reports after the first round; the reference says "not sure", never invents.
    assert answers['clear'] == {'correct': 4, 'invented': 0, 'not_sure': 8}
    # With recall in front, the cleared values are found again in the full log.
    assert answers['clear+recall'] == answers['tiered+recall'] == {'correct': 12, 'invented': 0, 'not_sure': 0}
    assert all(a['invented'] == 0 for a in answers.values())
