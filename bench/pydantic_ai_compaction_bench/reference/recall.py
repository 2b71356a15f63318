"""The reference player for delayed recall: answers from visible reports or summaries, else "not sure"."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo

from pydantic_ai_compaction.runtime.segment import is_restatement
from pydantic_ai_compaction.runtime.transcript import user_text
from pydantic_ai_compaction_bench.tasks.recall import FACT_KEYS, NOT_SURE

_HEADER = re.compile(r'== diag\.py (\w+) ==')
_FACT = re.compile(r'^\s*(' + '|'.join(FACT_KEYS) + r') = (.+?)\s*$')
_ANNOTATED = re.compile(r'^\s*(?:[-*] )?(\w+): (' + '|'.join(FACT_KEYS) + r') = (.+?)\s*$')
_RECALLED = re.compile(
    r'^\[run_diagnostics\(\{"service": ?"(\w+)"\}\)[^\]]*\] (' + '|'.join(FACT_KEYS) + r') = (.+?)\s*$'
)
_QUESTION = re.compile(r'(\d+)\. What is the (\w+) of service (\w+)\?')
_READ = re.compile(r'Read (\S+) with read_file')
_RUN = re.compile(r'these services: ([\w, ]+)\.')
_CALLED = re.compile(r'run_diagnostics\(\{"service": ?"(\w+)"\}')


def facts_in(text: str) -> list[str]:
    """Every fact, annotated with its service (`media: timeout_ms = 1050`), in order of appearance."""
    found: list[str] = []
    service: str | None = None
    for line in text.splitlines():
        if recalled := _RECALLED.match(line):
            found.append(f'{recalled.group(1)}: {recalled.group(2)} = {recalled.group(3)}')
        elif header := _HEADER.search(line):
            service = header.group(1)
        elif annotated := _ANNOTATED.match(line):
            found.append(f'{annotated.group(1)}: {annotated.group(2)} = {annotated.group(3)}')
        elif (fact := _FACT.match(line)) and service is not None:
            found.append(f'{service}: {fact.group(1)} = {fact.group(2)}')
    return found


def recall_query(service: str, key: str) -> str:
    """How the player asks recall for a fact: plain words, as a person would."""
    return f'{service} {key.replace("_", " ")}'


def lookup(visible: str, service: str, key: str) -> str:
    """The value if it is visible anywhere, else "not sure" (the reference never invents)."""
    prefix = f'{service}: {key} = '
    for fact in reversed(facts_in(visible)):
        if fact.startswith(prefix):
            return fact[len(prefix) :]
    return NOT_SURE


@dataclass
class RecallPlayer:
    """Runs the diagnostics, reads files when asked, answers from what it can see."""

    def act(self, messages: Sequence[ModelMessage], visible: str, info: AgentInfo) -> list[ModelResponsePart]:
        """One step of the current turn."""
        prompt, after = _current_turn(messages)
        if questions := _QUESTION.findall(prompt):
            if any(tool.name == 'recall' for tool in info.function_tools):
                asked = {
                    str(p.args_as_dict().get('query'))
                    for p in after
                    if isinstance(p, ToolCallPart) and p.tool_name == 'recall'
                }
                for _, key, service in questions:
                    query = recall_query(service, key)
                    if lookup(visible, service, key) == NOT_SURE and query not in asked:
                        # What it cannot see, it searches for before admitting it does not know.
                        return [ToolCallPart('recall', {'query': query})]
            answers = [f'{number}. {lookup(visible, service, key)}' for number, key, service in questions]
            return [TextPart('\n'.join(answers))]
        if read := _READ.search(prompt):
            returned: list[ToolReturnPart] = [
                part for part in after if isinstance(part, ToolReturnPart) and part.tool_name == 'read_file'
            ]
            if not returned:
                return [ToolCallPart('read_file', {'path': read.group(1)})]
            errors = returned[-1].model_response_str().count(' ERROR ')
            return [TextPart(f'{read.group(1)} has {errors} ERROR lines.')]
        if run := _RUN.search(prompt):
            wanted = [name.strip() for name in run.group(1).split(',')]
            done = {m.group(1) for m in _HEADER.finditer(visible)} | {m.group(1) for m in _CALLED.finditer(visible)}
            pending = [name for name in wanted if name not in done]
            if pending:
                return [ToolCallPart('run_diagnostics', {'service': pending[0]})]
            return [TextPart(f'Diagnostics done for {", ".join(wanted)}.')]
        return [TextPart('Done.')]

    def facts(self, text: str) -> list[str]:
        """Service facts, annotated so a summary line stands on its own."""
        return facts_in(text)

    def progress(self, visible: str) -> tuple[str, str]:
        """Which services were diagnosed."""
        done = sorted({m.group(1) for m in _HEADER.finditer(visible)})
        return (f'Diagnostics run on: {", ".join(done) if done else "none"}', 'answer the user from these facts')


def _current_turn(messages: Sequence[ModelMessage]) -> tuple[str, list[object]]:
    """The latest user prompt, and every part after it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, ModelRequest):
            continue
        prompts = [p for p in message.parts if isinstance(p, UserPromptPart) and not is_restatement(p)]
        if prompts:
            after: list[object] = [part for later in messages[index + 1 :] for part in later.parts]
            return user_text(prompts[-1]), after
    return '', []
