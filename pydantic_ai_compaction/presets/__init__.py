"""How well-known coding agents compact, rebuilt from this library's parts.

Each function returns a list of ordinary capabilities (strategies first, then request-only views) to pass
to `Agent(capabilities=...)`; print one to see every setting, or change a field with `dataclasses.replace`.
Every default names where it comes from: the agent's source (repository, file, commit) or its public docs.
Where a value is not published, the docstring says so and why the chosen value was picked.

Every preset also takes `model` (the summarizer; `None` uses the agent's own), and every one but `pi` (a
request-only view, which reports no events) takes `observer`, called with each `CompactionEvent` of its strategy.

`context_window` is the window of the model the agent runs with. It is required: half of these policies
are "the window minus a reserve", which no fraction can express without it.

Example:
    ```python
    from pydantic_ai import Agent
    from pydantic_ai_compaction import presets

    agent = Agent('openai:gpt-5.2', capabilities=presets.codex(context_window=272_000))
    ```

See `docs/presets.md` for the side-by-side table and the benchmark.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model

from pydantic_ai_compaction.presets.keep import KeepWithin
from pydantic_ai_compaction.processors.strategies.summary import StatelessSummary
from pydantic_ai_compaction.processors.strategies.verified import DEFAULT_CHECKS, Verified
from pydantic_ai_compaction.processors.views.tiered import Tiered
from pydantic_ai_compaction.runtime.checks import MAX_WINDOW, ConfigurationError, check_int, check_number
from pydantic_ai_compaction.runtime.events import EventObserver
from pydantic_ai_compaction.runtime.trigger import Trigger

__all__ = [
    'CLAUDE_CODE_INSTRUCTIONS',
    'CODEX_INSTRUCTIONS',
    'GEMINI_CLI_INSTRUCTIONS',
    'OPENCODE_INSTRUCTIONS',
    'OPENHANDS_INSTRUCTIONS',
    'PI_INSTRUCTIONS',
    'KeepWithin',
    'claude_code',
    'codex',
    'gemini_cli',
    'opencode',
    'openhands',
    'pi',
]

Capabilities = list[AbstractCapability[Any]]

# The summarizer instructions below are written for this library, after the structure each agent's own
# prompt asks for (cited in each preset's docstring); the agents' prompt texts are not copied.

CODEX_INSTRUCTIONS = (
    'You write a handoff summary: another model will resume this task from your summary alone. State the '
    "user's goal, the progress made and the decisions taken, the context, constraints and preferences that "
    'still apply, the steps that remain, and any data, examples or references needed to continue. Be concise '
    'and structured.'
)
"""Codex's handoff-summary brief (structure of `codex-rs/core/templates/compact/prompt.md`)."""

OPENCODE_INSTRUCTIONS = (
    'You summarize the earlier part of a coding session so it can continue without it. Say what was done, '
    'what is being worked on, which files are involved, what the user asked for and any constraints they set, '
    'and what should happen next.'
)
"""A brief for OpenCode's summary. Its own prompt is built by `buildPrompt` in `@opencode-ai/core/session/compaction`
(imported by `packages/opencode/src/session/compaction.ts`), which is not among the sources read: our choice."""

PI_INSTRUCTIONS = (
    'You write a structured checkpoint of the conversation for the model that continues it, under the headings '
    'Goal / Constraints & Preferences / Progress (Done, In Progress, Blocked) / Key Decisions / Next Steps / '
    'Critical Context. Keep each section short and preserve exact file paths, function names and error messages.'
)
"""pi's checkpoint format (`packages/coding-agent/src/core/compaction/compaction.ts`, `SUMMARIZATION_PROMPT`)."""

GEMINI_CLI_INSTRUCTIONS = (
    "You condense an agent conversation into a state snapshot that becomes the agent's only memory of it. "
    'Answer with one <state_snapshot> element holding <overall_goal>, <key_knowledge> (facts, conventions, '
    'constraints), <file_system_state> (files created, read, modified or deleted), <recent_actions> and '
    '<current_plan> (steps, completed ones marked). Keep every detail, plan, error and user instruction the '
    'agent still needs.'
)
"""Gemini CLI's state-snapshot sections (`getCompressionPrompt`, `packages/core/src/core/prompts.ts`, 009b2f8d)."""

OPENHANDS_INSTRUCTIONS = (
    'You maintain the state history of a code agent. Track STATE (file paths, function signatures, data '
    'structures), TESTS (failing cases, error messages, outputs), CHANGES (code edits, variable updates), DEPS '
    '(dependencies, imports, external calls) and INTENT (why changes were made, acceptance criteria). Skip '
    'clones and build logs, summarize file listings, stay under 1,000 words.'
)
"""OpenHands' condenser brief (the prompt of `LLMSummarizingCondenser.condense`, All-Hands-AI/OpenHands,
`openhands/memory/condenser/impl/llm_summarizing_condenser.py`, commit 01b5b7b1; the SDK moved it to a template)."""

CLAUDE_CODE_INSTRUCTIONS = (
    'You write a detailed summary of the conversation so far so that work can continue without it: the '
    "user's explicit requests and intent, key technical concepts, files and code sections examined or changed, "
    'errors met and how they were fixed, the problems solved, every user message that gave feedback or changed '
    'the instructions, pending tasks, the current work, and the next step.'
)
"""A structured summary for the `claude_code` preset. Claude Code's summary prompt is not published: our choice."""


def _window(owner: str, context_window: int) -> int:
    return check_int(owner, 'context_window', context_window, minimum=1_000, maximum=MAX_WINDOW)


def _reserve_trigger(owner: str, context_window: int, reserve: int, name: str) -> Trigger:
    check_int(owner, name, reserve, minimum=0)
    if reserve >= context_window:
        raise ConfigurationError(f'{owner}: {name}={reserve!r} leaves nothing of context_window={context_window!r}.')
    return Trigger(tokens=context_window - reserve)


def codex(
    *,
    context_window: int,
    auto_compact_fraction: float = 0.9,
    user_message_tokens: int = 20_000,
    model: Model | str | None = None,
    observer: EventObserver | None = None,
) -> Capabilities:
    """Codex CLI: near the window, one handoff summary of everything; the user's own messages stay.

    - Trigger: `auto_compact_fraction` of the window, 0.9 — `ModelInfo::auto_compact_token_limit()` returns
      `(context_window * 9) / 10` (openai/codex, `codex-rs/protocol/src/openai_models.rs`, commit 8db07003).
    - Summary: a handoff summary "for another LLM that will resume the task" (openai/codex,
      `codex-rs/core/templates/compact/prompt.md`, commit 11baefb5); our wording, `CODEX_INSTRUCTIONS`.
    - Kept verbatim: the newest user messages within `user_message_tokens`, 20,000 —
      `COMPACT_USER_MESSAGE_MAX_TOKENS` in `build_compacted_history` (openai/codex, `codex-rs/core/src/compact.rs`,
      commit 0100b103). The instructions (our opening exchange) stay too: Codex rebuilds its initial context.
    - Cleared: nothing. Everything else the agent read or did is in the summary only.

    Differences: Codex keeps the text of each user message; here the user's turn stays whole (with any tool
    results that arrived in the same request). Codex cuts the oldest kept message to fit; here it is left out.
    """
    window = _window('codex', context_window)
    check_number('codex', 'auto_compact_fraction', auto_compact_fraction, minimum=0, maximum=1, exclusive_minimum=True)
    summary = StatelessSummary[Any](
        observer=observer,
        trigger=Trigger(fraction=auto_compact_fraction, context_window=window),
        model=model,
        instructions=CODEX_INSTRUCTIONS,
    )
    return [KeepWithin(summary, user_tokens=check_int('codex', 'user_message_tokens', user_message_tokens, minimum=0))]


def opencode(
    *,
    context_window: int,
    reserve_tokens: int = 20_000,
    prune_protect_tokens: int = 40_000,
    prune_minimum_tokens: int = 20_000,
    keep_results: int = 3,
    preserve_recent_tokens: int | None = None,
    model: Model | str | None = None,
    observer: EventObserver | None = None,
) -> Capabilities:
    """OpenCode: clear old tool outputs first, summarize at the window minus a reserve, keep a recent tail.

    Sources: sst/opencode, commit 31e22f65.
    - Trigger: the window minus `reserve_tokens`, 20,000 — `COMPACTION_BUFFER` in `usable()`
      (`packages/opencode/src/session/overflow.ts`). OpenCode also subtracts the model's output limit when the
      model has no separate input limit; pass a larger reserve for that.
    - Cleared (`Tiered`, request-only): older tool outputs once `prune_protect_tokens` (40,000, `PRUNE_PROTECT`)
      plus `prune_minimum_tokens` (20,000, `PRUNE_MINIMUM`) of the window are in use, and only when at least
      `PRUNE_MINIMUM` tokens are freed (`packages/opencode/src/session/compaction.ts`, `prune`).
      `keep_results`, 3: not published as a count — OpenCode protects the newest 40,000 tokens of tool output,
      `Tiered` protects a number of results; 3 is Anthropic's context-editing default (see `claude_code`).
    - Summary: everything older than the kept tail (`OPENCODE_INSTRUCTIONS`; OpenCode's own prompt not read).
    - Kept verbatim: the newest turns within `preserve_recent_tokens`; default
      `min(15_000, max(2_000, usable // 4))` — `preserveRecentBudget` with `MIN_PRESERVE_RECENT_TOKENS` and
      `MAX_PRESERVE_RECENT_TOKENS` (`compaction.ts`).
    """
    window = _window('opencode', context_window)
    trigger = _reserve_trigger('opencode', window, reserve_tokens, 'reserve_tokens')
    protect = check_int('opencode', 'prune_protect_tokens', prune_protect_tokens, minimum=0)
    minimum = check_int('opencode', 'prune_minimum_tokens', prune_minimum_tokens, minimum=1)
    # Checked here, not left to `Tiered`, so the error names the argument the caller passed.
    check_int('opencode', 'keep_results', keep_results, minimum=0)
    usable = window - reserve_tokens
    recent = preserve_recent_tokens if preserve_recent_tokens is not None else min(15_000, max(2_000, usable // 4))
    check_int('opencode', 'preserve_recent_tokens', recent, minimum=0)
    if recent >= usable:
        # A tail as large as the trigger keeps every exchange verbatim: the summary could never shrink anything.
        raise ConfigurationError(
            f'opencode: preserve_recent_tokens={recent!r} must be below context_window - reserve_tokens ({usable!r}).'
        )
    summary = StatelessSummary[Any](trigger=trigger, model=model, instructions=OPENCODE_INSTRUCTIONS, observer=observer)
    clear_at = min((protect + minimum) / window, 0.99)
    prune = Tiered[Any](
        context_window=window,
        summarize=False,
        clear_at=clear_at,
        summarize_at=max(clear_at, 0.99),
        summarize_to=min(0.01, clear_at / 2),
        clear_min_saving=min(minimum / window, 1.0),
        keep_results=keep_results,
        fit_kept_results=False,  # the published rule keeps them, whatever their size
    )
    return [
        KeepWithin(summary, recent_tokens=check_int('opencode', 'preserve_recent_tokens', recent, minimum=0)),
        prune,
    ]


def pi(
    *,
    context_window: int,
    reserve_tokens: int = 16_384,
    keep_recent_tokens: int = 20_000,
    model: Model | str | None = None,
) -> Capabilities:
    """pi: at the window minus a reserve, a structured checkpoint that is updated, not rewritten; a recent tail stays.

    Sources: badlogic/pi-mono, `packages/coding-agent/src/core/compaction/compaction.ts`, commit 04309178.
    - Trigger: the window minus `reserve_tokens`, 16,384 — `DEFAULT_COMPACTION_SETTINGS.reserveTokens` and
      `shouldCompact` (`contextTokens > contextWindow - reserveTokens`).
    - Kept verbatim: the newest `keep_recent_tokens`, 20,000 — `keepRecentTokens`, cut at a turn boundary
      (`findCutPoint`); here at an exchange boundary.
    - Summary: the checkpoint format of `SUMMARIZATION_PROMPT` (`PI_INSTRUCTIONS` in our words), updated at the
      next compaction (`UPDATE_SUMMARIZATION_PROMPT`) — `Tiered`'s handoff note is updated the same way.
    - Copied by code: the files read and modified (pi's `CompactionDetails`); `Tiered` lists the files changed.
    - Cleared: nothing (`Tiered` clears only below its summary threshold, which is set equal to it).

    Built on `Tiered`, a request-only view: like pi's session file, the persisted history keeps everything.
    The handoff note uses `Tiered`'s own headings; `PI_INSTRUCTIONS` is exported for a `StatelessSummary` variant.
    """
    window = _window('pi', context_window)
    check_int('pi', 'reserve_tokens', reserve_tokens, minimum=0)
    check_int('pi', 'keep_recent_tokens', keep_recent_tokens, minimum=1)
    if reserve_tokens >= window or keep_recent_tokens >= window - reserve_tokens:
        raise ConfigurationError(
            f'pi: keep_recent_tokens={keep_recent_tokens!r} must be below context_window - reserve_tokens '
            f'({window - reserve_tokens!r}).'
        )
    at = (window - reserve_tokens) / window
    return [
        Tiered[Any](
            context_window=window,
            summarize_at=at,
            clear_at=at,
            summarize_to=keep_recent_tokens / window,
            model=model,
        )
    ]


def gemini_cli(
    *,
    context_window: int,
    threshold: float = 0.5,
    preserve_fraction: float = 0.3,
    verify: bool = True,
    model: Model | str | None = None,
    observer: EventObserver | None = None,
) -> Capabilities:
    """Gemini CLI: at half the window, a structured state snapshot of the oldest 70 %, then a second pass.

    Sources: google-gemini/gemini-cli, `packages/core/src/services/chatCompressionService.ts`, commit 02b2885c.
    - Trigger: `threshold` of the window, 0.5 — `DEFAULT_COMPRESSION_TOKEN_THRESHOLD`.
    - Kept verbatim: the newest `preserve_fraction` of the history, 0.3 — `COMPRESSION_PRESERVE_THRESHOLD`
      (`findCompressSplitPoint` splits at a user turn; here at an exchange boundary).
    - Summary: a `<state_snapshot>` with the sections of `getCompressionPrompt` (`packages/core/src/core/prompts.ts`,
      commit 009b2f8d); `GEMINI_CLI_INSTRUCTIONS` in our words.
    - Verification: Gemini CLI asks the summarizer to "critically evaluate" its snapshot for omitted details,
      paths, tool results and constraints, and to return an improved one ("Phase 3: The Probe Verification").
      With `verify=True` this is `Verified` with the `omissions` pass, which appends what was omitted instead of
      regenerating the snapshot, after the deterministic checks.
    - Not reproduced: before splitting, Gemini CLI truncates older tool outputs past a 50,000-token budget to
      their last 30 lines (`COMPRESSION_FUNCTION_RESPONSE_TOKEN_BUDGET`).
    """
    window = _window('gemini_cli', context_window)
    check_number('gemini_cli', 'threshold', threshold, minimum=0, maximum=1, exclusive_minimum=True)
    check_number('gemini_cli', 'preserve_fraction', preserve_fraction, minimum=0, maximum=1, exclusive_minimum=True)
    if preserve_fraction >= 1:
        raise ConfigurationError(f'gemini_cli: preserve_fraction must be below 1, got {preserve_fraction!r}.')
    summary = StatelessSummary[Any](
        trigger=Trigger(fraction=threshold, context_window=window),
        model=model,
        instructions=GEMINI_CLI_INSTRUCTIONS,
        observer=observer,
    )
    strategy = KeepWithin(summary, recent_share=preserve_fraction)
    if not verify:
        return [strategy]
    return [Verified(strategy, checks=(*DEFAULT_CHECKS, 'omissions'), model=model)]


def openhands(
    *,
    context_window: int,
    max_size: int = 120,
    keep_first: int = 4,
    model: Model | str | None = None,
    observer: EventObserver | None = None,
) -> Capabilities:
    """OpenHands: past `max_size` events, keep the first events and the newest half, summarize the middle.

    Sources: OpenHands/software-agent-sdk, `openhands-sdk/openhands/sdk/context/condenser/
    llm_summarizing_condenser.py`, commit 0d2b16d9: `max_size=120`, `keep_first=4`; the tail kept is
    `max_size // 2 - keep_first - 1` events (`get_condensation`). The OpenHands app raised its setting to
    `max_size=240` (and notes `keep_first=2`); pass those to match it.
    - Trigger: more than `max_size` messages (one event is about one message here).
    - Kept verbatim: the opening and `keep_first` exchanges after it, and the newest exchanges whose messages fit
      in `max_size // 2 - keep_first - 1`.
    - Summary: the forgotten middle (`OPENHANDS_INSTRUCTIONS`); OpenHands feeds the previous summary back in
      (a rolling summary), here earlier summaries stay in place and the new one covers what is new.
    - Cleared: nothing. `context_window` is accepted for a uniform signature; this policy counts events.
    """
    _window('openhands', context_window)
    check_int('openhands', 'max_size', max_size, minimum=4)
    check_int('openhands', 'keep_first', keep_first, minimum=0)
    tail = max_size // 2 - keep_first - 1
    if tail <= 0:
        raise ConfigurationError(
            f'openhands: keep_first={keep_first!r} must be less than max_size // 2 - 1 (max_size={max_size!r}).'
        )
    summary = StatelessSummary[Any](
        trigger=Trigger(messages=max_size), model=model, instructions=OPENHANDS_INSTRUCTIONS, observer=observer
    )
    return [KeepWithin(summary, first=keep_first, recent_messages=tail)]


def claude_code(
    *,
    context_window: int,
    auto_compact_fraction: float = 0.967,
    clear_trigger_tokens: int = 100_000,
    keep_tool_uses: int = 3,
    model: Model | str | None = None,
    observer: EventObserver | None = None,
) -> Capabilities:
    """Claude Code: clear old tool results past a token trigger; near the window, one structured summary.

    - Trigger of the summary: `auto_compact_fraction` of the window, 0.967. Not published: Claude Code's docs
      say auto-compact runs as the context nears the window limit without a figure; seed 001 observes it
      waiting until about 967k tokens of a 1M window, so that ratio is used.
    - Summary: one summary of everything. Claude Code's prompt is not published; `CLAUDE_CODE_INSTRUCTIONS`
      (requests, concepts, files, errors, pending work, current work, next step) is our choice. Nothing stays
      verbatim besides the instructions and the exchange in progress.
    - Cleared (`Tiered`, request-only): tool results beyond the newest `keep_tool_uses` (3) once the request
      passes `clear_trigger_tokens` (100,000) — the defaults of Anthropic's context editing,
      `clear_tool_uses_20250919` (docs.claude.com, build-with-claude/context-editing). `clear_at_least` has no
      default there; `Tiered` needs a minimum, 1 % of the window.
    - Re-read: CLAUDE.md survives a compaction (seed 001, citing Claude Code's docs, "How Claude remembers your
      project"); here the agent's instructions are never compacted.
    """
    window = _window('claude_code', context_window)
    check_number(
        'claude_code', 'auto_compact_fraction', auto_compact_fraction, minimum=0, maximum=1, exclusive_minimum=True
    )
    check_int('claude_code', 'clear_trigger_tokens', clear_trigger_tokens, minimum=1)
    # `Tiered` calls it `keep_results`: checked here so the error names the argument the caller passed.
    check_int('claude_code', 'keep_tool_uses', keep_tool_uses, minimum=0)
    summary = StatelessSummary[Any](
        observer=observer,
        trigger=Trigger(fraction=auto_compact_fraction, context_window=window),
        model=model,
        instructions=CLAUDE_CODE_INSTRUCTIONS,
    )
    clear_at = min(clear_trigger_tokens / window, 0.99)
    clearing = Tiered[Any](
        context_window=window,
        summarize=False,
        clear_at=clear_at,
        summarize_at=max(clear_at, 0.99),
        summarize_to=min(0.01, clear_at / 2),
        clear_min_saving=0.01,
        keep_results=keep_tool_uses,
        fit_kept_results=False,  # the published rule keeps them, whatever their size
    )
    return [summary, clearing]
