"""A preset's bad argument is named as the caller wrote it, not as the capability it is passed on to."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from pydantic_ai_compaction import ConfigurationError, presets


@pytest.mark.parametrize(
    ('call', 'message'),
    [
        (lambda v: presets.claude_code(context_window=200_000, keep_tool_uses=v), 'claude_code.keep_tool_uses'),
        (lambda v: presets.opencode(context_window=200_000, keep_results=v), 'opencode.keep_results'),
    ],
)
@pytest.mark.parametrize('value', [-1, 2.5, True, None])
def test_a_preset_names_its_own_bad_argument(call: Callable[[Any], object], message: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f'{message} must be an integer ≥ 0, got {value!r}')):
        call(value)
