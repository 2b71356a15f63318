"""The reference player for the incident audit: reads logs in order, reports from what it can see."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo

from pydantic_ai_compaction.runtime.transcript import user_text
from pydantic_ai_compaction_bench.tasks.incident import CHANGE_MARKER, POLICY_MARKER, PROBE_QUESTION

_HEADER = re.compile(r'=== log (\d+) of (\d+) ===')
_CALL = re.compile(r'read_log\(\{"index": ?(\d+)\}')
_PROGRESS = re.compile(r'Logs read: ([\d, ]+)')
_TOTAL = re.compile(r'logs 1 to (\d+)')
_INCIDENT = re.compile(r'INCIDENT (inc-\d+) service=(\w+) severity=(\d+) owner=(\w+)')
_UPDATE = re.compile(r'UPDATE (inc-\d+) severity=(\d+)')
_RETRACT = re.compile(r'RETRACT (inc-\d+)')
_STAMP = r'^(?:[-*] )?(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ )?'
"""Where a marker may stand: at the start of a line, after an optional list bullet and timestamp."""
_CHANGE = re.compile(_STAMP + re.escape(CHANGE_MARKER))
_POLICY = re.compile(_STAMP + re.escape(POLICY_MARKER) + r' ignore service (\w+)')
_SCOPE = re.compile(r'report only incidents of services (\w+), (\w+) and (\w+)')
_LOG_LINE = re.compile(r'^(?:[-*] )?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (.*)$')
_ROUTINE = re.compile(r'^\w+ [A-Z]+ request_id=')
"""Routine request traffic: the bulk of every log, never worth a summary line."""


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
        elif _CHANGE.search(line):
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


def notable(text: str) -> list[str]:
    """Every timestamped log line that is not routine request traffic, verbatim, oldest first by timestamp.

    Generic on purpose: it does not know which lines change the rules, so an unmarked note reads as
    notable as a marked change (what a summarizer or a note-taker would see). Ordered by time, not by
    where a line stands in the request, so "newest first" means the same whatever layout a summarizer
    request uses (harness puts an earlier summary after the messages, a native request before them).
    """
    found: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if (match := _LOG_LINE.match(stripped)) and not _ROUTINE.match(match.group(1)):
            found.append(stripped.removeprefix('- ').removeprefix('* '))
    return sorted(found, key=lambda line: line[:20])  # the timestamp; a stable sort keeps ties in order


@dataclass
class IncidentPlayer:
    """Reads the next unread log; reports when the last one is read.

    With `notes`, it also writes a short note beside each call: the notable lines of the log it just
    read (the note-taking player). Without, it answers with tool calls only (the silent player).
    """

    notes: bool = False
    """Write a note of each log's notable lines beside the next call."""

    def act(self, messages: Sequence[ModelMessage], visible: str, info: AgentInfo) -> list[ModelResponsePart]:
        """One step."""
        view = read_view(visible)
        if PROBE_QUESTION in _last_prompt(messages):
            return [TextPart(self.instructions_in_force(visible))]
        total = view.total or 1
        next_log = max(view.read, default=0) + 1
        note = self._note(messages) if self.notes else None
        if next_log <= total:
            call = ToolCallPart('read_log', {'index': next_log})
            return [TextPart(note), call] if note else [call]
        output = info.output_tools[0].name if info.output_tools else 'final_result'
        return [ToolCallPart(output, report(view))]

    def _note(self, messages: Sequence[ModelMessage]) -> str | None:
        """A note on the log returned in the last request, if it returned one."""
        for part in messages[-1].parts if messages else ():
            if isinstance(part, ToolReturnPart) and part.tool_name == 'read_log':
                text = part.model_response_str()
                header = _HEADER.search(text)
                if header is None:
                    return None
                lines = notable(text)
                return f'Notes on log {header.group(1)}:\n' + ('\n'.join(lines) if lines else 'nothing notable')
        return None

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
        """Notable log lines (see `notable`), verbatim."""
        return notable(text)

    def progress(self, visible: str) -> tuple[str, str]:
        """Which logs were read and the next one."""
        view = read_view(visible)
        done = sorted(view.read)
        nxt = max(done, default=0) + 1
        return (f'Logs read: {", ".join(map(str, done)) if done else "none"}', f'read log {nxt}')


def _last_prompt(messages: Sequence[ModelMessage]) -> str:
    return ' '.join(user_text(part) for part in messages[-1].parts if isinstance(part, UserPromptPart))
