"""The scripted model behind every mocked provider: one tool loop per user turn, compactor replies by marker."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent

from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.native import NATIVE_MARKER
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER
from pydantic_ai_compaction.processors.views.curation import CURATOR_MARKER
from pydantic_ai_compaction.processors.views.tiered import HANDOFF_MARKER

from ..support import log_text
from .providers import Call, Say

SUMMARY = 'Rules: ignore service legacy. Facts: the logs read so far are clean. Next: read the next log.'

_RESULT = re.compile(r'\[result (r\d+)\](?:\\n|\n)log \d+')
"""Ids of `read_log` results (the request body is JSON: its newlines are escaped)."""
_BUNDLE = re.compile(r'^(g\d+)\b', re.MULTILINE)


@dataclass
class Script:
    """Tool calls for `steps` steps of each user turn, then text.

    Step 2 makes parallel calls, step 4 calls a tool that asks for a retry once, step 5 gets an image
    back; compactor requests (recognized by their marker) get a valid reply for their format.
    """

    steps: int = 10
    step: int = 0
    log: int = 0
    kinds: Counter[str] = field(default_factory=Counter[str])

    archive: bool = False
    """Call `context_apply` on every unarchived result at steps 3, 6 and 8 (for `Archive`)."""
    note: bool = False
    """Call `note` at step 1 (for `Notes`)."""
    recall: bool = False
    """Call `recall` at step 7 (for `Recall`)."""
    archived: set[str] = field(default_factory=set[str])

    def __call__(self, text: str, body: str = '') -> Say:
        kind = self.kind(text)
        self.kinds[kind] += 1
        if kind != 'agent':
            return Say(text=self.compactor_reply(kind, text))
        step = self.step
        self.step += 1
        if step >= self.steps:
            self.step = 0
            return Say(text='report: done')
        if self.archive and step in (3, 6, 8):
            ids = [i for i in dict.fromkeys(_RESULT.findall(body)) if i not in self.archived]
            if ids:
                self.archived.update(ids)
                items = [{'result_id': i, 'note': f'log behind {i} is clean'} for i in ids]
                return Say(calls=(Call('context_apply', {'items': items}),))
        if self.note and step == 1:
            return Say(calls=(Call('note', {'kind': 'decision', 'text': 'skip service legacy'}),))
        if self.recall and step == 7:
            return Say(calls=(Call('recall', {'query': 'latency 01-0003'}),))
        if step == 2:
            return Say(calls=(self.read(), self.read()))
        if step == 4:
            return Say(calls=(Call('flaky_check', {}),))
        if step == 5:
            return Say(calls=(Call('screenshot', {}),))
        return Say(calls=(self.read(),))

    def read(self) -> Call:
        self.log += 1
        return Call('read_log', {'index': self.log})

    @staticmethod
    def kind(text: str) -> str:
        for marker, kind in (
            (FORK_MARKER, 'fork'),
            (SUMMARY_MARKER, 'summary'),
            (NATIVE_MARKER, 'native'),
            (HANDOFF_MARKER, 'handoff'),
            (CURATOR_MARKER, 'curator'),
        ):
            if marker in text:
                return kind
        return 'agent'

    @staticmethod
    def compactor_reply(kind: str, text: str) -> str:
        if kind == 'fork' and 'variant=json' in text:
            summary = {
                'rules': ['ignore service legacy'],
                'facts': ['logs clean'],
                'progress': 'reading',
                'next_step': 'next',
            }
            return json.dumps({'keep': [], 'summary': summary})
        if kind == 'fork' and 'variant=free' in text:
            return f'KEEP: none\n{SUMMARY}'
        if kind == 'curator':
            listing = text.split('<bundles>', 1)[-1].split('</bundles>', 1)[0]
            ids = _BUNDLE.findall(listing)
            orientation = {'relevant_state': 'auditing logs', 'required': ['ignore legacy'], 'prohibited': []}
            return json.dumps({'focal': ids[-2:], 'orientation': orientation})
        return SUMMARY


def plain_tools(agent: Agent[Any, Any]) -> None:
    """Give *agent* the tools `Script` calls, each answering plain text (no retry, no image)."""

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Read one log."""
        return log_text(index, 100)

    @agent.tool_plain
    def flaky_check() -> str:  # pyright: ignore[reportUnusedFunction]
        """Check the audit service."""
        return 'check ok'

    @agent.tool_plain
    def screenshot() -> str:  # pyright: ignore[reportUnusedFunction]
        """A screenshot of the dashboard."""
        return 'no image'
