"""`Verified` around a provider's own compaction: nothing can be checked, and the record says so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic_ai import Agent, models

from pydantic_ai_compaction import CompactionEvent, Native, Trigger, Verified
from pydantic_ai_compaction.processors.strategies.verified import UNCHECKED

from .wire.providers import PROVIDERS, Mock
from .wire.script import Script, plain_tools


@pytest.fixture(autouse=True)
def allow_model_requests() -> Iterator[None]:
    with models.override_allow_model_requests(True):
        yield


def _verdicts(provider: str) -> list[object]:
    events: list[CompactionEvent] = []
    mock = Mock(PROVIDERS[provider](), Script())
    strategy = Verified(Native(trigger=Trigger(tokens=2_500), observer=events.append))
    agent = Agent(mock.model(), capabilities=[strategy], system_prompt='You audit logs.')
    plain_tools(agent)

    assert agent.run_sync('Audit logs 1-8 and report.').output == 'report: done'
    assert mock.problems() == []
    records = [e.record for e in events if e.kind == 'compacted' and e.record is not None]
    assert len(records) >= 2
    return [r.extra.get('verification') for r in records]


@pytest.mark.parametrize('provider', ['openai-responses', 'anthropic'])
def test_a_provider_compaction_is_recorded_as_unchecked(provider: str) -> None:
    checks = ['not_empty', 'smaller', 'facts', 'instructions']
    expected = {'checks': checks, 'verdict': 'unchecked', 'reason': UNCHECKED}
    assert all(verdict == expected for verdict in _verdicts(provider))


def test_an_emulated_native_summary_is_checked() -> None:
    verdicts = _verdicts('google')
    assert {v['verdict'] for v in verdicts if isinstance(v, dict)} == {'passed'} and None not in verdicts
