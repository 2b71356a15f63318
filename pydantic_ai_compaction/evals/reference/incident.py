"""The reference player for the incident audit: reads logs in order, reports from what it can see."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage, ModelResponsePart, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo

from pydantic_ai_compaction.evals.tasks.incident import CHANGE_MARKER, POLICY_MARKER, PROBE_QUESTION
from pydantic_ai_compaction.runtime.transcript import user_text

_HEADER = re.compile(r'=== log (\d+) of (\d+) ===')
_CALL = re.compile(r'read_log\(\{"index": ?(\d+)\}')
_PROGRESS = re.compile(r'Logs read: ([\d, ]+)')
_TOTAL = re.compile(r'logs 1 to (\d+)')
_INCIDENT = re.compile(r'INCIDENT (inc-\d+) service=(\w+) severity=(\d+) owner=(\w+)')
_UPDATE = re.compile(r'UPDATE (inc-\d+) severity=(\d+)')
_RETRACT = re.compile(r'RETRACT (inc-\d+)')
_POLICY = re.compile(re.escape(POLICY_MARKER) + r' ignore service (\w+)')
_SCOPE = re.compile(r'report only incidents of services (\w+), (\w+) and (\w+)')


@dataclass
class AuditView:
    """What the player can tell from visible text."""

    read: set[int] = field(default_factory=set[int])
    total: int | None = None
    incidents: dict[str, tuple[str, int, str]] = field(default_factory=dict[str, tuple[str, int, str]])
    retracted: set[str] = field(default_factory=set[str])
    ignored: set[str] = field(default_factory=lambda: {'legacy'})
    lowest: bool = False
    lowercase: bool = False
    scope: tuple[str, ...] = ()


def read_view(visible: str) -> AuditView:
    """Parse everything the player relies on; only marked lines change the rules."""
    view = AuditView()
    if match := _TOTAL.search(visible):
        view.total = int(match.group(1))
    view.read.update(int(m.group(1)) for m in _HEADER.finditer(visible))
    view.read.update(int(m.group(1)) for m in _CALL.finditer(visible))
    for match in _PROGRESS.finditer(visible):
        view.read.update(int(n) for n in re.findall(r'\d+', match.group(1)))
    updates: dict[str, int] = {}
    for line in visible.splitlines():
        if match := _INCIDENT.search(line):
            view.incidents[match.group(1)] = (match.group(2), int(match.group(3)), match.group(4))
        elif match := _UPDATE.search(line):
            updates[match.group(1)] = int(match.group(2))
        elif match := _RETRACT.search(line):
            view.retracted.add(match.group(1))
        elif match := _POLICY.search(line):
            view.ignored.add(match.group(1))
        elif CHANGE_MARKER in line:
            lowered = line.lower()
            view.lowest = view.lowest or 'lowest' in lowered
            view.lowercase = view.lowercase or 'lowercase' in lowered
            if scope := _SCOPE.search(line):
                view.scope = scope.groups()
    for incident_id, severity in updates.items():
        if incident_id in view.incidents:
            service, _, owner = view.incidents[incident_id]
            view.incidents[incident_id] = (service, severity, owner)
    return view


def report(view: AuditView) -> dict[str, object]:
    """The final report the visible facts support."""
    reported = {
        incident_id: data
        for incident_id, data in view.incidents.items()
        if incident_id not in view.retracted
        and data[0] not in view.ignored
        and (not view.scope or data[0] in view.scope)
    }
    ids = sorted(i.lower() if view.lowercase else i.upper() for i in reported)
    owner = ''
    if reported:
        pick = min if view.lowest else max
        severity = pick(data[1] for data in reported.values())
        owner = next(data[2] for data in reported.values() if data[1] == severity)
    return {'incident_ids': ids, 'owner': owner}


@dataclass
class IncidentPlayer:
    """Reads the next unread log; reports when the last one is read."""

    def act(self, messages: Sequence[ModelMessage], visible: str, info: AgentInfo) -> list[ModelResponsePart]:
        """One step."""
        view = read_view(visible)
        if PROBE_QUESTION in _last_prompt(messages):
            return [TextPart(self.instructions_in_force(visible))]
        total = view.total or 1
        next_log = max(view.read, default=0) + 1
        if next_log <= total:
            return [ToolCallPart('read_log', {'index': next_log})]
        output = info.output_tools[0].name if info.output_tools else 'final_result'
        return [ToolCallPart(output, report(view))]

    def instructions_in_force(self, visible: str) -> str:
        """The probe answer: the prompt's rules, then every visible change, verbatim."""
        view = read_view(visible)
        lines = ['Rules in force:']
        lines.append('- ignore services: ' + ', '.join(sorted(view.ignored)))
        lines.append('- ids in lowercase' if view.lowercase else '- ids in uppercase, ids only')
        lines.append(
            '- owner: reported incident with the lowest current severity'
            if view.lowest
            else '- owner: reported incident with the highest current severity'
        )
        if view.scope:
            lines.append('- only services ' + ', '.join(view.scope))
        return '\n'.join(lines)

    def facts(self, text: str) -> list[str]:
        """Incident and event lines (what a report needs), verbatim."""
        return [
            line.strip()
            for line in text.splitlines()
            if _INCIDENT.search(line) or _UPDATE.search(line) or _RETRACT.search(line)
        ]

    def rules(self, visible: str) -> list[str]:
        """Marked instruction changes and policy changes, verbatim, without their timestamps."""
        found = [
            line[line.index(marker) :].strip()
            for line in visible.splitlines()
            for marker in (CHANGE_MARKER, POLICY_MARKER)
            if marker in line
        ]
        return list(dict.fromkeys(found))

    def progress(self, visible: str) -> tuple[str, str]:
        """Which logs were read and the next one."""
        view = read_view(visible)
        done = sorted(view.read)
        nxt = max(done, default=0) + 1
        return (f'Logs read: {", ".join(map(str, done)) if done else "none"}', f'read log {nxt}')

    def verbatim(self, text: str) -> bool:
        """A log that changed the rules stays verbatim."""
        return CHANGE_MARKER in text


def _last_prompt(messages: Sequence[ModelMessage]) -> str:
    return ' '.join(user_text(part) for part in messages[-1].parts if isinstance(part, UserPromptPart))
