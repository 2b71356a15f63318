"""A Fork agent runs to completion with a compaction, on the installed package and whatever pydantic-ai is there.

Run by `.ci/newest.sh wheel` in a fresh venv that holds only the wheel and its dependencies, and by the suite.
"""

import json
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import pydantic_ai_compaction
from pydantic_ai_compaction import Fork, Trigger
from pydantic_ai_compaction.processors import FORK_MARKER
from pydantic_ai_compaction.runtime import our_record

LOGS = 6
forks: list[str] = []
steps: list[int] = []


def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1].parts
    prompt = ' '.join(p.content for p in last if isinstance(p, UserPromptPart) and isinstance(p.content, str))
    if FORK_MARKER in prompt:
        forks.append(prompt)
        summary = {'rules': ['lowercase ids'], 'facts': ['inc-1 api'], 'progress': 'reading', 'next_step': 'go on'}
        return ModelResponse(parts=[TextPart(json.dumps({'keep': [], 'summary': summary}))])
    # Counted here, not from the history: a compaction drops the earlier calls from it.
    read = len(steps)
    steps.append(read)
    usage = RequestUsage(input_tokens=400 * (read + 1), output_tokens=10)
    if read >= LOGS:
        return ModelResponse(parts=[TextPart('report: done')], usage=usage)
    return ModelResponse(parts=[ToolCallPart('read_log', {'index': read}, tool_call_id=f'c{read}')], usage=usage)


agent = Agent(FunctionModel(reply), capabilities=[Fork(trigger=Trigger(tokens=1_500))], instructions='Audit logs.')


@agent.tool_plain
def read_log(index: int) -> str:
    return f'log {index}\n' + '\n'.join(f'{index:02d}-{line:03d} service=api status=ok' for line in range(60))


result = agent.run_sync('Audit the logs.')
records = [r for m in result.all_messages() for p in m.parts if (r := our_record(p)) is not None]
assert result.output == 'report: done', result.output
assert forks and records and all(r['strategy'] == 'fork' for r in records), (len(forks), records)
# The library never imports harness (`.ci/installed.py` checks that this environment does not even have it).
assert not [m for m in sys.modules if m.split('.')[0] == 'pydantic_ai_harness']
print(f'pydantic-ai-compaction {pydantic_ai_compaction.__version__}: Fork agent done, {len(records)} compaction(s)')
