"""Names several layers agree on: tool names and tool-name patterns."""

from __future__ import annotations

NOTE_TOOL = 'note'
"""Name of the `Notes` capability's tool; the runtime copies its calls into every compaction boundary."""

RECALL_TOOL = 'recall'
"""Name of the `Recall` capability's tool; a clearing stub points at it only when the model is offered it."""

RECALL_ANSWER_LINE = (
    r'\[[^\n]*, line \d+\] .*|No match for .* anywhere in this conversation\.|Recall is unavailable right now .*'
)
"""Regular expression a line of `Recall`'s answer matches in full: a hit (`[read_log(...) r3, line 7] text`), no
match, or the store unavailable. A history saved before `ResultMarks.recall_answer` is read by it."""

WRITE_TOOLS = r'write|edit|patch|create|save|apply|commit'
"""Default pattern of tool names whose success externalizes a step's conclusion (a file written, a change saved)."""
