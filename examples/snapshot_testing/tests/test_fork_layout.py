"""The test of docs/testing.md, verbatim: a fork's layout of a recorded history, as a reviewed snapshot."""

from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

from pydantic_ai_compaction import Fork
from pydantic_ai_compaction.testing import load_history, replay


def fork_model(messages, info):
    return ModelResponse(
        parts=[TextPart('{"keep": ["g2"], "summary": {"rules": [], "facts": [], "progress": "", "next_step": ""}}')]
    )


async def test_fork_layout(compaction_snapshot):
    # A history your agent recorded: `result.all_messages_json()` written to a file.
    history = load_history('tests/histories/audit.json')
    assert await replay(Fork(), history, model=FunctionModel(fork_model)) == compaction_snapshot
