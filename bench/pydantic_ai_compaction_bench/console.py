"""The `pai-compaction` command: loads the CLI inside the interrupt handling, then runs it.

Loading the CLI imports pydantic-ai and the provider SDKs, which takes seconds: a Ctrl-C then would otherwise
interrupt the import and print a traceback. This module imports nothing heavy itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT, as shells report it)."""

INTERRUPTED = 'pai-compaction: interrupted'
"""The one line printed on stderr after Ctrl-C."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `pai-compaction`: the command's exit code (130 after Ctrl-C, at any point)."""
    try:
        from pydantic_ai_compaction_bench.cli import main as run
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
    return run(argv)


if __name__ == '__main__':
    raise SystemExit(main())
