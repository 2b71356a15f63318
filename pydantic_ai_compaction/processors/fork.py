"""`Fork`: the agent's own conversation proposes what stays verbatim and writes the summary.

The fork is the conversation's next request with one message appended: same model, same
instructions, same tool definitions, asked to answer in text. Because every earlier byte is what the
agent itself would send, a provider's prompt cache can serve the fork's prefix.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, cast

from jsonschema import Draft202012Validator
from pydantic_ai.models import Model
from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.schemas import FORK_JSON_SCHEMA
from pydantic_ai_compaction.protocols.types import Exchange, Proposal, Summary
from pydantic_ai_compaction.runtime import compactor
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.checks import check_choice, check_instance, check_int
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView
from pydantic_ai_compaction.runtime.transcript import listing

ForkVariant = Literal['json', 'free', 'fixed']

FORK_MARKER = '[pydantic-ai-compaction: fork request]'
"""First line of the appended message; the variant follows as `variant=<name>`."""

_VALIDATOR = Draft202012Validator(FORK_JSON_SCHEMA)
_KEEP_LINE = re.compile(r'^\s*KEEP\s*:\s*(?P<ids>.*)$', re.IGNORECASE | re.MULTILINE)
_ID = re.compile(r'\bg\d+\b')
_MAX_REPLY_CHARS = 2_000_000

_INTRO = """{marker} variant={variant}
Your context is about to be compacted. Pause the task: do not call tools and do not answer the task now.
The exchanges of this conversation so far are listed below (id, kind, estimated size, content).
Protected and in-progress exchanges are kept whatever you answer; earlier summaries stay in place,
so do not repeat what they already say.

{listing}
"""

_JSON_FORMAT = """Choose which exchanges must stay verbatim (only what you will need to read again word for word)
and summarize everything else. Answer with one JSON object and nothing else:
{{"keep": ["g3", ...], "summary": {{
  "rules": ["every instruction in force, latest wording, changes included"],
  "facts": ["facts later steps need, with exact values"],
  "progress": "what is done", "next_step": "the very next action"}}}}"""

_FREE_FORMAT = """Choose which exchanges must stay verbatim (only what you will need to read again word for word)
and summarize everything else. Answer in this form:
KEEP: g3, g7            (or KEEP: none)
<your summary: every instruction in force with its latest wording, facts with exact values,
progress, next step>"""

_FIXED_FORMAT = """The {count} most recent finished exchange(s) stay verbatim. Summarize everything else for yourself:
every instruction in force with its latest wording, facts with exact values, progress and the next step.
Answer with the summary only."""


@dataclass
class Fork(ConfiguredCompaction[AgentDepsT]):
    """Let the agent's own conversation choose what stays verbatim and summarize the rest.

    Variants: `json` (structured reply validated against `FORK_JSON_SCHEMA`), `free` (a `KEEP:` line
    and a free-text summary), `fixed` (the two most recent exchanges stay; the fork only summarizes).

    Example:
        ```python
        agent = Agent(model, capabilities=[Fork(trigger=Trigger(tokens=18_000), variant='json')])
        ```
    """

    variant: ForkVariant = 'json'
    """Reply format: `json`, `free` or `fixed`."""

    model: Model | str | None = None
    """Model for the fork; `None` uses the conversation's own (what makes it a fork)."""

    fixed_keep: int = 2
    """Exchanges the `fixed` variant keeps (the most recent finished ones)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice('Fork', 'variant', self.variant, ('json', 'free', 'fixed'))
        check_int('Fork', 'fixed_keep', self.fixed_keep, minimum=0)
        check_instance('Fork', 'model', self.model, (Model, str, type(None)), 'a Model, a model name or None')

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'fork'

    def prompt(self, view: ConversationView) -> str:
        """The message appended to the conversation."""
        body = {'json': _JSON_FORMAT, 'free': _FREE_FORMAT, 'fixed': _FIXED_FORMAT.format(count=self.fixed_keep)}[
            self.variant
        ]
        return _INTRO.format(marker=FORK_MARKER, variant=self.variant, listing=listing(view)) + '\n' + body

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Ask the fork, then parse its reply for the variant."""
        if self.variant == 'fixed' and sum(not exchange.forced for exchange in view.exchanges) <= self.fixed_keep:
            # Everything droppable is among the exchanges `fixed` keeps: no call, no compaction.
            return Proposal(keep=view.ids, variant='fixed')
        settings, parameters = compactor.text_only(ctx)
        messages = compactor.with_appended_prompt(view.messages, self.prompt(view))
        response = await compactor.request(ctx, messages, model=self.model, settings=settings, parameters=parameters)
        return self.parse(compactor.response_text(response), view)

    def parse(self, reply: str, view: ConversationView) -> Proposal:
        """Turn a fork reply into a proposal; a malformed reply becomes a failed proposal with its reason."""
        if not reply.strip():
            return Proposal.failed('empty', 'the fork returned no text', variant=self.variant)
        if len(reply) > _MAX_REPLY_CHARS:
            return Proposal.failed('oversized', f'reply of {len(reply):,} characters', variant=self.variant)
        if self.variant == 'json':
            return _parse_json(reply)
        if self.variant == 'free':
            return _parse_free(reply)
        recent = _recent(view, self.fixed_keep)
        return Proposal(keep=recent, summary=Summary(reply.strip()), variant='fixed')


def _recent(view: ConversationView, count: int) -> tuple[str, ...]:
    finished: list[Exchange] = [exchange for exchange in view.exchanges if not exchange.forced]
    return tuple(exchange.id for exchange in finished[len(finished) - count :]) if count else ()


def _parse_json(reply: str) -> Proposal:
    text = reply.strip()
    if text.startswith('```'):
        text = text.strip('`')
        text = text[text.find('\n') + 1 :] if '\n' in text else text
    data, error = _first_json_object(text)
    if data is None:
        return Proposal.failed('unparseable', error, variant='json')
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda error: list(error.absolute_path))  # pyright: ignore[reportUnknownMemberType]
    if errors:
        first = errors[0]
        where = '/'.join(str(step) for step in first.absolute_path) or '(root)'
        return Proposal.failed('schema', f'{where}: {first.message[:300]}', variant='json')
    summary: dict[str, Any] = data['summary']
    text_summary = render_structured(summary)
    if not text_summary.strip() and not data['keep']:
        return Proposal.failed('empty', 'empty keep list and empty summary', variant='json')
    return Proposal(
        keep=tuple(data['keep']),
        summary=Summary(text_summary, structured=summary) if text_summary.strip() else None,
        variant='json',
        extra={'structured_summary': summary},
    )


def _first_json_object(text: str) -> tuple[Any, str]:
    """The first JSON object in *text* (prose or fences around it allowed), or `None` and why not."""
    decoder = json.JSONDecoder()
    error = 'no JSON object in the reply'
    position = text.find('{')
    attempts = 0
    # Bounded: a reply full of braces must not turn parsing quadratic.
    while position >= 0 and attempts < 64:
        attempts += 1
        try:
            data, _ = decoder.raw_decode(text, position)
        except (ValueError, RecursionError) as problem:
            error = str(problem)[:300]
        else:
            if isinstance(data, dict):
                return cast('dict[str, Any]', data), ''
        position = text.find('{', position + 1)
    return None, error


def render_structured(summary: dict[str, Any]) -> str:
    """The boundary text of a structured fork summary."""
    lines: list[str] = []
    if summary.get('rules'):
        lines.append('Rules in force:')
        lines.extend(f'- {rule}' for rule in summary['rules'])
    if summary.get('facts'):
        lines.append('Facts:')
        lines.extend(f'- {fact}' for fact in summary['facts'])
    if summary.get('progress'):
        lines.append(f'Progress: {summary["progress"]}')
    if summary.get('next_step'):
        lines.append(f'Next step: {summary["next_step"]}')
    return '\n'.join(lines)


def _parse_free(reply: str) -> Proposal:
    match = _KEEP_LINE.search(reply)
    if match is None:
        return Proposal.failed('unparseable', 'no KEEP: line in the reply', variant='free')
    ids_text = match.group('ids').strip()
    keep = () if ids_text.lower() in ('', 'none', '-') else tuple(_ID.findall(ids_text))
    if ids_text and ids_text.lower() not in ('none', '-') and not keep:
        return Proposal.failed('unparseable', f'KEEP line names no exchange id: {ids_text[:100]!r}', variant='free')
    summary = (reply[: match.start()] + reply[match.end() :]).strip()
    if not summary:
        return Proposal.failed('empty', 'no summary after the KEEP line', variant='free')
    return Proposal(keep=keep, summary=Summary(summary), variant='free')
