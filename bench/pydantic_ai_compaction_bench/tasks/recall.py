"""The delayed-recall task: facts seen once, asked for later.

A diagnostics script runs on six services; each report hides five facts (a port, a timeout, three
error codes, an owner, a region) among about 90 noise lines, with values random per seed. Then the
script is gone: the facts exist only in the session. Four questions come right away, four after
three turns of reading log files, four after six more. Each answer is scored correct, invented, or
not sure.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Literal

SERVICE_POOL = ('media', 'auth', 'billing', 'search', 'gateway', 'storage', 'mailer', 'ledger', 'catalog', 'router')
FACT_KEYS = ('listen_port', 'timeout_ms', 'error_codes', 'owner', 'region')
REGIONS = ('eu-west-1', 'eu-west-2', 'eu-central-1', 'us-east-1', 'us-west-2', 'ap-south-1', 'ap-northeast-1')
TEAMS = ('team-ayse', 'team-kaan', 'team-selin', 'team-emre', 'team-derya', 'team-baran', 'team-elif')
GONE = 'bash: diag.py: No such file or directory'
NOT_SURE = 'not sure'
READING_SCHEDULE = (3, 6)
"""Reading turns before the second and the third round of questions."""

Outcome = Literal['correct', 'invented', 'not_sure']


@dataclass(frozen=True)
class Question:
    """One question and its exact answer."""

    service: str
    key: str
    answer: str

    @property
    def text(self) -> str:
        """How the question is asked."""
        return f'What is the {self.key} of service {self.service}?'


@dataclass
class RecallScenario:
    """One generated session: reports, files, and the three rounds of questions."""

    seed: int
    services: tuple[str, ...]
    facts: dict[str, dict[str, str]]
    reports: dict[str, str]
    files: tuple[tuple[str, str], ...]
    """`(path, text)` of the log files read between rounds."""

    rounds: tuple[tuple[Question, ...], ...]
    _runs: set[str] = field(default_factory=set[str])

    def run_diagnostics(self, service: str) -> str:
        """The diagnostics tool: each report once, then the script is gone."""
        if len(self._runs) == len(self.services) or service in self._runs:
            return GONE
        if service not in self.reports:
            return f'diag.py: unknown service {service!r}; known: {", ".join(self.services)}'
        self._runs.add(service)
        return self.reports[service]

    def read_file(self, path: str) -> str:
        """The file-reading tool."""
        for name, text in self.files:
            if name == path:
                return text
        return f'cat: {path}: No such file or directory'

    @property
    def opening_prompt(self) -> str:
        """The first user turn."""
        return (
            'Run the diagnostics script (run_diagnostics) once on each of these services: '
            f'{", ".join(self.services)}. The script will be removed afterwards, so keep what you learn. '
            'Answer later questions from what you know, and say "not sure" rather than guess.'
        )

    @staticmethod
    def questions_prompt(questions: tuple[Question, ...]) -> str:
        """A round of questions, answered one per numbered line."""
        lines = [f'{number}. {question.text}' for number, question in enumerate(questions, 1)]
        return 'Answer each question on its own numbered line, with the value only, or "not sure".\n' + '\n'.join(lines)

    @staticmethod
    def reading_prompt(path: str) -> str:
        """A reading turn."""
        return f'Read {path} with read_file and tell me how many ERROR lines it has.'

    @staticmethod
    def grade(questions: tuple[Question, ...], answer: str) -> list[Outcome]:
        """Score each numbered answer line by exact match."""
        found: dict[int, str] = {}
        for line in answer.splitlines():
            if match := re.match(r'\s*(\d+)[.)]\s*(.*)$', line):
                found[int(match.group(1))] = match.group(2).strip()
        outcomes: list[Outcome] = []
        for number, question in enumerate(questions, 1):
            given = found.get(number, '')
            if not given or NOT_SURE in given.lower():
                outcomes.append('not_sure')
            elif given == question.answer:
                outcomes.append('correct')
            else:
                outcomes.append('invented')
        return outcomes


def generate(seed: int, *, report_noise: int = 90, file_tokens: int = 2_500) -> RecallScenario:
    """A seeded session; the same seed gives the same facts and questions for every strategy."""
    if report_noise < 10 or file_tokens < 100:
        raise ValueError('report_noise must be at least 10 and file_tokens at least 100')
    rng = random.Random(f'recall:{seed}')
    services = tuple(rng.sample(SERVICE_POOL, 6))
    facts = {service: _facts(rng) for service in services}
    reports = {service: _report(rng, service, facts[service], report_noise) for service in services}
    files = tuple(_file(rng, index, file_tokens) for index in range(sum(READING_SCHEDULE)))
    pool = [Question(service, key, facts[service][key]) for service in services for key in FACT_KEYS]
    rng.shuffle(pool)
    rounds = (tuple(pool[0:4]), tuple(pool[4:8]), tuple(pool[8:12]))
    return RecallScenario(seed, services, facts, reports, files, rounds)


def _facts(rng: random.Random) -> dict[str, str]:
    codes = ', '.join(f'E{rng.randint(1000, 9999)}' for _ in range(3))
    return {
        'listen_port': str(rng.randint(1025, 65000)),
        'timeout_ms': str(rng.randint(100, 9000)),
        'error_codes': codes,
        'owner': rng.choice(TEAMS),
        'region': rng.choice(REGIONS),
    }


def _report(rng: random.Random, service: str, facts: dict[str, str], noise: int) -> str:
    checks = (
        'disk_io',
        'heap',
        'gc_pause',
        'dns',
        'tls_cert',
        'queue_depth',
        'cpu',
        'fd_count',
        'sockets',
        'cache_hit',
    )
    lines = [
        f'check {rng.choice(checks)}_{n:03d} ... ok ({rng.randint(1, 400)}ms) node={rng.getrandbits(32):08x}'
        for n in range(noise)
    ]
    for key in FACT_KEYS:
        lines.insert(rng.randint(5, len(lines) - 1), f'{key} = {facts[key]}')
    return '\n'.join([f'== diag.py {service} ==', *lines, f'== end of diag.py {service} =='])


def _file(rng: random.Random, index: int, file_tokens: int) -> tuple[str, str]:
    path = f'logs/app-{index + 1}.log'
    lines: list[str] = []
    size = 0
    while size < file_tokens * 4:
        level = 'ERROR' if rng.random() < 0.05 else rng.choice(('INFO', 'DEBUG', 'WARN'))
        stamp = f'2026-04-0{1 + index % 9}T10:{len(lines) % 60:02d}:00Z'
        line = f'{stamp} {level} worker={rng.randint(1, 32)} msg=step {rng.getrandbits(40):010x}'
        lines.append(line)
        size += len(line) + 1
    return path, '\n'.join(lines)
