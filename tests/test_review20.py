"""Segmentation's address comparison and the validator's per-view facts, attacked as a demanding user would.

A collection that runs in the middle of a segmentation (a finalizer, a `gc` callback) may segment another history:
it must never wait for the lock its own thread holds. The facts the validator carries from one view to the next
(the prefix two views share) must give, through whole compactions, what a computation that never saw the views
before gives, whatever the user did to the history between them.
"""

from __future__ import annotations

import subprocess
import sys

_SEGMENT_DURING_COLLECTIONS = """
import gc, os, sys, threading
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, TextPart, UserPromptPart
from pydantic_ai.messages import ToolCallPart, ToolReturnPart
from pydantic_ai_compaction.runtime.segment import segment, segment_fresh

segment_module = sys.modules['pydantic_ai_compaction.runtime.segment']

def conversation(steps, tag):
    history = [ModelRequest(parts=[SystemPromptPart('sys'), UserPromptPart(f'go {tag}')])]
    for step in range(steps):
        history.append(ModelResponse(parts=[ToolCallPart('read', {'i': step}, tool_call_id=f'c{step}')]))
        history.append(ModelRequest(parts=[ToolReturnPart('read', f'log {step}', tool_call_id=f'c{step}')]))
    # A user turn after the tool loop: its segmentation extends the lists of the state it starts from.
    return [*history, ModelResponse(parts=[TextPart('done')]), ModelRequest(parts=[UserPromptPart('next')])]

inside, fired, checked = [False], [0], []

def collected(phase, info):
    # A collection while this thread holds the lock (comparing addresses, or extending the lists) segments
    # another conversation, as a finalizer that segments would.
    if phase != 'start' or inside[0] or fired[0] >= 25 or not segment_module._EXTENDING.locked():
        return
    inside[0] = True
    try:
        fired[0] += 1
        other = conversation(3, fired[0])
        checked.append(segment(other) == segment_fresh(other))
    finally:
        inside[0] = False

def run():
    history = conversation(25, 'main')
    segment(history[:5])
    gc.callbacks.append(collected)
    gc.set_threshold(1, 1, 1)
    try:
        for end in range(7, len(history) + 1, 2):
            checked.append(segment(history[:end]) == segment_fresh(history[:end]))
    finally:
        gc.set_threshold(700, 10, 10)
        gc.callbacks.remove(collected)

worker = threading.Thread(target=run, daemon=True)
worker.start()
worker.join(30)
print('hung' if worker.is_alive() else f'{fired[0] > 0} {len(checked)} {all(checked)}', flush=True)
os._exit(0)
"""


def test_a_collection_that_segments_while_the_lock_is_held_never_waits_for_it() -> None:
    # Found: `_State.holds` takes `_EXTENDING` for its comparison, and `_extended` waited for it; a collection
    # inside the comparison (or inside `_extended`) whose finalizer segmented a history to extend then waited for
    # the lock its own thread held, for ever.
    done = subprocess.run(
        [sys.executable, '-c', _SEGMENT_DURING_COLLECTIONS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.split()
    assert out != ['hung']
    fired, checked, agreed = out
    assert (fired, agreed) == ('True', 'True')  # the collections ran with the lock held, and nothing changed
    assert int(checked) > 25
