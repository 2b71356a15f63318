"""Fails unless pydantic-ai-slim is at the given version and pydantic-ai-harness is not installed."""

import importlib.metadata
import importlib.util
import sys

expected = sys.argv[1]
installed = importlib.metadata.version('pydantic-ai-slim')
if installed != expected:
    sys.exit(f'pydantic-ai-slim is {installed}, expected {expected}: the install moved it')
if importlib.util.find_spec('pydantic_ai_harness') is not None:
    sys.exit('pydantic-ai-harness is installed: this environment must not have it')
print(f'pydantic-ai-slim {installed}, no pydantic-ai-harness')
