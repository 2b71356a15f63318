"""One snapshot per strategy and variant on a fixed recorded history (readable `.txt` files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_compaction import (
    Fork,
    InstructionSources,
    Native,
    NoCompaction,
    Reassert,
    ResetToCheckpoint,
    StatelessSummary,
)
from pydantic_ai_compaction.processors import FORK_MARKER, NATIVE_MARKER, SUMMARY_MARKER
from pydantic_ai_compaction.testing import render, replay

from .support import fork_json, last_prompt, recorded_history


def compactor(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = last_prompt(messages)
    if FORK_MARKER in prompt and 'variant=json' in prompt:
        text = fork_json(['g4', 'g2'], rules=['ignore service legacy', 'CHANGE: report ids in lowercase'])
    elif FORK_MARKER in prompt and 'variant=free' in prompt:
        text = 'KEEP: g4\nRules: ignore legacy; ids lowercase (changed in log 3). Logs 0-4 read; next: log 5.'
    elif FORK_MARKER in prompt:
        text = 'Logs 0-3 read, all clean. Ids now lowercase (log 3). Next: log 5.'
    elif SUMMARY_MARKER in prompt or NATIVE_MARKER in prompt:
        text = 'Logs 0-4 read; no incidents; ids must be lowercase since log 3.'
    else:
        raise AssertionError(f'unexpected request: {prompt[:80]!r}')
    return ModelResponse(parts=[TextPart(text)])


MARKERS = InstructionSources(markers=('CHANGE:',))

STRATEGIES: dict[str, Any] = {
    'none': NoCompaction(),
    'native': Native(),
    'summary': StatelessSummary(),
    'fork-json': Fork(variant='json'),
    'fork-free': Fork(variant='free'),
    'fork-fixed': Fork(variant='fixed'),
    'reassert-native': Reassert(Native(), sources=MARKERS),
    'reset': ResetToCheckpoint(sources=MARKERS, excerpt_chars=40),
}


@pytest.mark.parametrize('name', list(STRATEGIES))
async def test_compaction_output(name: str, compaction_snapshot: Any) -> None:
    out = await replay(STRATEGIES[name], recorded_history(), model=FunctionModel(compactor))
    assert out == compaction_snapshot


def test_render_is_stable_and_numbers_tool_calls() -> None:
    text = render(recorded_history(2))
    assert text == render(recorded_history(2))
    assert 'call call1 read_log {"index":0}' in text and 'return call2 read_log success' in text


def test_load_history_reads_a_path_given_as_a_string(tmp_path: Path) -> None:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from pydantic_ai_compaction.testing import load_history

    history = recorded_history()
    file = tmp_path / 'audit.json'
    file.write_bytes(ModelMessagesTypeAdapter.dump_json(history))
    assert load_history(str(file)) == history
    assert load_history(file) == history
    assert load_history(file.read_text()) == history
    # A blank string is neither a history nor a path: refused by name, not read as the current directory.
    for blank in ('', '  ', b''):
        with pytest.raises(ValueError, match=r'load_history.source must be a message list, its JSON or a file path'):
            load_history(blank)


def test_load_history_names_what_it_was_given_that_is_no_history() -> None:
    # A JSON object was read as a file path (`FileNotFoundError`), `None` failed inside, and a list of anything was
    # taken and failed later in `render` with an `AttributeError`.
    from pydantic_ai_compaction.testing import load_history

    with pytest.raises(ValueError, match=r'load_history.source must be the JSON of a message list, got the JSON of an'):
        load_history('{"a": 1}')
    with pytest.raises(TypeError, match=r'load_history.source must be a message list, .* got None\.'):
        load_history(None)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match=r'load_history.source\[1\] must be a ModelRequest or a ModelResponse, got 2\.'):
        load_history([recorded_history(1)[0], 2])  # pyright: ignore[reportArgumentType]


def test_load_history_reads_a_file_whose_name_opens_with_a_brace(tmp_path: Path, monkeypatch: Any) -> None:
    from pydantic_ai_compaction.testing import load_history

    monkeypatch.chdir(tmp_path)
    (tmp_path / '{run-42}.json').write_text('[]')
    assert load_history('{run-42}.json') == []


def test_render_shows_what_tells_two_histories_apart() -> None:
    # A snapshot passed whatever image a prompt held, and whether a request kept its instructions or a thinking
    # block its signature: each rendered the same.
    from dataclasses import replace

    from pydantic_ai.messages import (
        BinaryContent,
        FilePart,
        ImageUrl,
        ModelRequest,
        ThinkingPart,
        ToolReturnPart,
        UploadedFile,
        UserPromptPart,
    )

    def prompt(item: Any) -> ModelRequest:
        return ModelRequest(parts=[UserPromptPart(['Look at this:', item])], instructions='Audit the logs.')

    png = render([prompt(BinaryContent(b'\x89PNG one', media_type='image/png'))])
    assert '[binary image/png 8 bytes #' in png
    assert 'instructions (15): Audit the logs.' in png
    assert png != render([prompt(BinaryContent(b'\x89PNG two', media_type='image/png'))])
    assert png != render([prompt(BinaryContent(b'\x89PNG one', media_type='application/pdf'))])
    assert '[image-url https://example.com/a.png]' in render([prompt(ImageUrl('https://example.com/a.png'))])
    assert '[uploaded-file file-abc]' in render([prompt(UploadedFile(file_id='file-abc', provider_name='openai'))])
    image = BinaryContent(b'\x89PNG one', media_type='image/png')
    returned = render([ModelRequest(parts=[ToolReturnPart('shot', [image], tool_call_id='c1')])])
    assert '[binary image/png 8 bytes #' in returned
    request = prompt('x')
    made = render([request, ModelResponse(parts=[FilePart(image)])])
    assert made != render([request, ModelResponse(parts=[FilePart(replace(image, data=b'\x89PNG two'))])])
    assert render([request]) != render([replace(request, instructions=None)])
    thinking = [request, ModelResponse(parts=[ThinkingPart('plan', signature='sig-1'), TextPart('done')])]
    edited = [request, ModelResponse(parts=[ThinkingPart('plan', signature='sig-2'), TextPart('done')])]
    assert 'thinking signed #' in render(thinking)
    assert render(thinking) != render(edited)


@pytest.mark.parametrize(
    'statement',
    [
        'from pydantic_ai_compaction.testing import load_history, replay',
        'from pydantic_ai_compaction.testing import load_history, render, replay',
        'import pydantic_ai_compaction.testing.replay; from pydantic_ai_compaction.testing import replay',
        'import pydantic_ai_compaction.runtime.segment; from pydantic_ai_compaction.runtime import segment as replay',
    ],
)
def test_public_names_are_the_functions_whatever_the_import_order(statement: str) -> None:
    # A submodule named like its function (testing.replay) must never shadow the function, in a fresh interpreter.
    import subprocess
    import sys

    probe = f'{statement}; import inspect; print(inspect.isfunction(replay))'
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == 'True'


def test_the_pytest_plugin_imports_nothing_of_the_library() -> None:
    import subprocess
    import sys

    probe = (
        'import sys; import pydantic_ai_compaction.pytest_plugin; '
        "print(sorted(m for m in sys.modules if m.startswith('pydantic_ai')))"
    )
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True).stdout
    assert (
        out.strip()
        == "['pydantic_ai_compaction', 'pydantic_ai_compaction._lazy', 'pydantic_ai_compaction.pytest_plugin']"
    )
