"""Task generators and graders: seeded determinism, sizes, strict grading."""

from __future__ import annotations

import hashlib

import pytest
from pydantic_ai_compaction_bench.reference.incident import read_view
from pydantic_ai_compaction_bench.tasks import incident, recall
from pydantic_ai_compaction_bench.tasks.incident import IncidentReport


@pytest.mark.parametrize('variant', incident.VARIANTS)
def test_incident_generation_is_seeded_and_sized(variant: incident.Variant) -> None:
    first = incident.generate(7, 8, variant)
    again = incident.generate(7, 8, variant)
    other = incident.generate(8, 8, variant)
    assert first.logs == again.logs and first.expected_ids == again.expected_ids
    assert first.logs != other.logs
    # Each log is about 6,700 estimated tokens (4 characters each).
    assert all(6_600 <= len(log) // 4 <= 6_900 for log in first.logs)
    assert first.read_log(1).startswith('=== log 1 of 8 ===')
    assert first.read_log(9).startswith('ERROR')


def test_incident_variants_place_the_change_in_log_five() -> None:
    for variant in ('owner', 'lowercase', 'scope', 'fake'):
        scenario = incident.generate(3, 20, variant)
        assert scenario.change_line is not None
        assert scenario.change_line in scenario.logs[incident.CHANGE_LOG - 1]
        assert all(
            scenario.change_line not in log for i, log in enumerate(scenario.logs) if i != incident.CHANGE_LOG - 1
        )
    fake = incident.generate(3, 20, 'fake')
    assert fake.fake_line is not None and incident.CHANGE_MARKER not in fake.fake_line
    assert incident.generate(3, 8, 'lowercase').expected_ids[0].startswith('inc-')
    assert incident.generate(3, 8, 'base').expected_ids[0].startswith('INC-')


def test_incident_grading_is_strict() -> None:
    scenario = incident.generate(11, 8, 'owner')
    good = IncidentReport(incident_ids=list(scenario.expected_ids), owner=scenario.expected_owner)
    assert scenario.grade(good).passed and scenario.grade(good).applied
    lower = IncidentReport(incident_ids=[i.lower() for i in scenario.expected_ids], owner=scenario.expected_owner)
    assert scenario.grade(lower).problems == ('case',)
    missing = IncidentReport(incident_ids=list(scenario.expected_ids[1:]), owner=scenario.expected_owner)
    assert 'missing' in scenario.grade(missing).problems
    ignored = next(i for i in scenario.incidents if i.service in scenario.ignored)
    policy = IncidentReport(incident_ids=[*scenario.expected_ids, ignored.id.upper()], owner=scenario.expected_owner)
    assert {'extra', 'policy'} <= set(scenario.grade(policy).problems)
    reported = [i for i in scenario.incidents if i.id.upper() in scenario.expected_ids]
    highest = max(reported, key=lambda i: i.severity).owner
    old_rule = IncidentReport(incident_ids=list(scenario.expected_ids), owner=highest)
    grade = scenario.grade(old_rule)
    assert not grade.passed and grade.applied is False and grade.problems == ('owner',)


def test_recall_generation_and_grading() -> None:
    scenario = recall.generate(5)
    assert scenario.rounds == recall.generate(5).rounds
    assert len(scenario.services) == 6 and [len(r) for r in scenario.rounds] == [4, 4, 4]
    report = scenario.run_diagnostics(scenario.services[0])
    assert report.startswith(f'== diag.py {scenario.services[0]} ==')
    assert len(report.splitlines()) == 90 + 5 + 2
    for service in scenario.services[1:]:
        scenario.run_diagnostics(service)
    assert scenario.run_diagnostics(scenario.services[0]) == recall.GONE  # the script is gone
    questions = scenario.rounds[0]
    answer = '\n'.join([f'1. {questions[0].answer}', '2. not sure', '3. 12345678', ''])
    assert scenario.grade(questions, answer) == ['correct', 'not_sure', 'invented', 'not_sure']


@pytest.mark.parametrize('variant', incident.VARIANTS)
def test_a_long_audit_generates_with_one_owner_its_logs_agree_with(variant: incident.Variant) -> None:
    # Past about 40 logs nearly every draw tied two owners at the deciding severity, and `generate` gave up after
    # 100 draws: `--sizes 80` failed every run. The tie is now settled in the incidents and their log lines alike.
    scenario = incident.generate(3, 200, variant, log_tokens=200)
    text = '\n'.join(scenario.logs)
    for found in scenario.incidents:
        opened = [line for line in text.splitlines() if f'INCIDENT {found.id} ' in line]
        assert len(opened) == 1 and opened[0].endswith(f'owner={found.owner}')
    reported = [
        i
        for i in scenario.incidents
        if i.id not in scenario.retracted
        and i.service not in scenario.ignored
        and (not scenario.scope or i.service in scenario.scope)
    ]
    deciding = (min if variant in ('owner', 'fake') else max)(i.severity for i in reported)
    assert {i.owner for i in reported if i.severity == deciding} == {scenario.expected_owner}
    # An audit that generated before settling ties is the same audit: digests of seed 3 at 8 and 20 logs, as the
    # generator gave them before ties were settled.
    for size in (8, 20):
        same = incident.generate(3, size, variant)
        digest = hashlib.sha256(repr((same.logs, same.prompt, same.expected_ids, same.expected_owner)).encode())
        assert digest.hexdigest()[:16] == _BEFORE_SETTLING[variant, size]


_BEFORE_SETTLING = {
    ('base', 8): '3982ef0cc4f03716',
    ('base', 20): '5e72de20f5551cde',
    ('owner', 8): '037882c25c71a292',
    ('owner', 20): '39b10f969ba37dd1',
    ('lowercase', 8): 'f52068fc5a5f1d5d',
    ('lowercase', 20): '6059783b55759df7',
    ('scope', 8): '89e1cdea3143c8bc',
    ('scope', 20): '7f490e94ce1e2730',
    ('fake', 8): '045da5955af76a84',
    ('fake', 20): '5f2caae43928d90c',
}


def test_every_stamp_of_a_long_audit_is_a_date_on_the_calendar() -> None:
    # Log N was stamped `2026-03-{10 + N}`: from log 22 no such day, from log 90 three digits, which the reference
    # player's stamp pattern did not read, so a policy change in log 100 went unseen and none of the strategies could
    # pass at 210 logs, not even no compaction.
    from datetime import datetime

    scenario = incident.generate(1, 210, 'base', log_tokens=200)
    stamps = [line.split(' ', 1)[0] for log in scenario.logs for line in log.splitlines()[1:-1]]
    days = sorted({datetime.fromisoformat(stamp.replace('Z', '+00:00')).date() for stamp in stamps})
    assert len(days) == 210 and days[0].isoformat() == '2026-03-11' and days[-1].isoformat() == '2026-10-06'
    policy = next(line for log in scenario.logs for line in log.splitlines() if incident.POLICY_MARKER in line)
    assert read_view(policy).ignored == {'legacy', *scenario.ignored}
