"""Offline models and histories shared by the tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_compaction.processors.strategies.fork import FORK_MARKER
from pydantic_ai_compaction.processors.strategies.native import NATIVE_MARKER
from pydantic_ai_compaction.processors.strategies.summary import SUMMARY_MARKER

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def log_text(index: int, lines: int = 300) -> str:
    """A log of about 5 tokens per line (words the FunctionModel usage estimate counts)."""
    body = '\n'.join(f'{index:02d}-{line:04d} service=api status=ok latency={line % 97}ms' for line in range(lines))
    return f'log {index}\n{body}'


def last_prompt(messages: list[ModelMessage]) -> str:
    """Text of the user prompts in the last request."""
    last = messages[-1]
    return '\n'.join(
        part.content for part in last.parts if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )


def fork_json(keep: list[str], rules: list[str] | None = None) -> str:
    """A schema-valid fork JSON reply."""
    summary = {
        'rules': rules or ['ignore legacy'],
        'facts': ['inc-1 api sev 3'],
        'progress': 'reading',
        'next_step': 'next log',
    }
    return json.dumps({'keep': keep, 'summary': summary})


@dataclass
class ScriptedAgentModel:
    """A `FunctionModel` body: reads logs 0..n-1 one per step, then answers; compaction calls are scripted.

    `compactor` receives the request's messages and returns the reply text (or raises) for fork,
    summary and native-emulation requests.
    """

    logs: int = 8
    compactor: Callable[[list[ModelMessage], str], str] = lambda messages, kind: 'summary of the work so far'
    calls: list[str] = field(default_factory=list[str])
    step: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = last_prompt(messages)
        for marker, kind in ((FORK_MARKER, 'fork'), (SUMMARY_MARKER, 'summary'), (NATIVE_MARKER, 'native')):
            if marker in prompt:
                self.calls.append(kind)
                return ModelResponse(
                    parts=[TextPart(self.compactor(messages, kind))],
                    usage=RequestUsage(input_tokens=100, output_tokens=20),
                )
        self.calls.append('agent')
        index = self.step
        self.step += 1
        if index >= self.logs:
            return ModelResponse(parts=[TextPart('report: done')])
        return ModelResponse(parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{index}')])

    def model(self) -> FunctionModel:
        return FunctionModel(self)


def audit_agent(model: ScriptedAgentModel, capabilities: list[object], *, lines: int = 300) -> Agent[None, str]:
    """An agent with a `read_log` tool over `log_text`."""
    agent = Agent(model.model(), capabilities=capabilities, system_prompt='You audit logs. Ignore service legacy.')  # pyright: ignore[reportArgumentType]

    @agent.tool_plain
    def read_log(index: int) -> str:  # pyright: ignore[reportUnusedFunction]
        return log_text(index, lines)

    return agent


def recorded_history(steps: int = 6, *, lines: int = 40) -> list[ModelMessage]:
    """A fixed tool-loop history (deterministic ids and timestamps) ending with a pending tool return."""
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart('You audit logs.', timestamp=T0), UserPromptPart('Audit logs 0-5.', timestamp=T0)],
            timestamp=T0,
        )
    ]
    for index in range(steps):
        messages.append(
            ModelResponse(
                parts=[ToolCallPart('read_log', {'index': index}, tool_call_id=f'c{index}')],
                usage=RequestUsage(input_tokens=200 * (index + 1), output_tokens=10),
                model_name='test',
                timestamp=T0,
            )
        )
        content = log_text(index, lines)
        if index == 3:
            content = 'CHANGE: report ids in lowercase\n' + content
        messages.append(
            ModelRequest(
                parts=[ToolReturnPart('read_log', content, tool_call_id=f'c{index}', timestamp=T0)], timestamp=T0
            )
        )
    return messages


class Unprintable(Exception):
    """An exception of the user's that refuses to be written: its `str` and its `repr` raise."""

    def __str__(self) -> str:
        raise ValueError('str refused')

    def __repr__(self) -> str:
        raise ValueError('repr refused')
