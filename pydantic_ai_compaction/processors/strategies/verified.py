"""`Verified`: check a proposed summary before it replaces history; append what it left out, or refuse it.

Seed 001 names the risk every summary carries (it can drop something the agent still needs) and two
answers from the field: Slipstream checks a summary against what the agent used next and repairs it before
the switch, and Gemini CLI runs a second pass that asks the summarizer what it omitted. `Verified` wraps any
strategy and does both, the deterministic part first:

- `not_empty`: the summary has text.
- `smaller`: it is smaller than the exchanges it replaces (a longer one is worse than none).
- `facts`: every identifier, path and long number of the removed exchanges that an exchange kept after them
  still mentions appears in the summary. Later steps refer to those values, so a summary without them
  leaves the agent with a reference it cannot resolve.
- `instructions`: every instruction change the removed exchanges carry (user prompts and marked
  tool-output lines, per `sources`) appears in the summary, word for word.
- `omissions` (opt-in, one more model call): a second pass shown the removed transcript and the summary
  lists what the summary omitted; only items found verbatim in the transcript count.

Notes written with `Notes` need no check here: the runtime restates every note in the boundary that drops its
last verbatim copy.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from jsonschema import Draft202012Validator
from pydantic_ai.messages import ModelMessage, ModelRequest, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.types import Exchange, Proposal, ProviderSummary, Summary
from pydantic_ai_compaction.runtime import compactor, replies
from pydantic_ai_compaction.runtime.capability import CompactionCapability, WrappingCompaction
from pydantic_ai_compaction.runtime.checks import (
    ConfigurationError,
    check_choice,
    check_instance,
    check_int,
    check_model,
)
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.degraded import described, warn_degraded, warn_if_setup_error
from pydantic_ai_compaction.runtime.encoding import args_text, clean_text
from pydantic_ai_compaction.runtime.instructions import InstructionSources, gather_instructions
from pydantic_ai_compaction.runtime.scripts import without_spaces
from pydantic_ai_compaction.runtime.segment import ConversationView
from pydantic_ai_compaction.runtime.transcript import before_cut, clip, render_messages, return_text, user_text
from pydantic_ai_compaction.runtime.wrappers import neutralize

Check = Literal['not_empty', 'smaller', 'facts', 'instructions', 'omissions']
"""One check `Verified` can run (see the module docstring)."""

CHECKS: tuple[Check, ...] = ('not_empty', 'smaller', 'facts', 'instructions', 'omissions')
"""Every check, in the order they run."""

DEFAULT_CHECKS: tuple[Check, ...] = ('not_empty', 'smaller', 'facts', 'instructions')
"""The deterministic checks: no model call."""

VERIFY_MARKER = '[pydantic-ai-compaction: summary check request]'
"""First line of the second-pass prompt, so logs and test models can recognize the call."""

VERIFY_INSTRUCTIONS = (
    'You check a summary of part of an agent conversation before it replaces that part. You list what the '
    'summary left out; you do not rewrite it.'
)

VERIFY_EXAMPLE: dict[str, Any] = {'omitted': ['<a detail the summary leaves out, copied exactly from the transcript>']}
"""The example reply the prompt shows; a reply that still holds its placeholder is not used."""

VERIFY_PROMPT = compactor.fill(
    """{marker}
The summary below will replace the transcript below it. Check it against the transcript and list every
specific detail the agent may still need that the summary leaves out: identifiers, file paths, numbers, tool
results, error messages, constraints the user set.
Answer with one JSON object and nothing else, shaped like this example:
{example}
Replace the <...> item with real content: one item per omitted detail, each copied word for word from the
transcript (a short line or phrase). Answer {"omitted": []} when nothing is missing.

<summary>
{summary}
</summary>

<transcript>
{transcript}
</transcript>""",
    partial=True,
    example=json.dumps(VERIFY_EXAMPLE, ensure_ascii=False),
)
"""The second-pass prompt; `{marker}`, `{summary}` and `{transcript}` are filled per call."""

_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'properties': {'omitted': {'type': 'array', 'items': {'type': 'string'}}},
    'required': ['omitted'],
}
_VALIDATOR = Draft202012Validator(_SCHEMA)
_PLACEHOLDERS = replies.placeholders(VERIFY_EXAMPLE)

APPENDIX_HEADER = 'Details the summary left out, copied from the removed exchanges:'
"""Heads the lines `on_failure='append'` adds to a summary."""

UNCHECKED = "a provider's own compaction is sent back to it unchanged: nothing in it can be checked or repaired"
"""Why a provider's compaction (`Native` on OpenAI Responses or Anthropic) is recorded as `unchecked`."""

MAX_APPENDED = 40
"""Lines appended at most (the first ones found); the record lists everything that was missing."""

_TIMESTAMPS = re.compile(
    r'\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?|\b\d{2}:\d{2}(?::\d{2})?\b'
)
_PATH = re.compile(r'(?<![\w/.-])(?:/?[\w.-]+/)+[\w.-]*\w(?![\w/])')
_IDENTIFIER = re.compile(r'\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z][A-Za-z0-9_-]{2,}\b')
_NUMBER = re.compile(r'(?<![\w.-])\d+(?:\.\d+)?(?![\w.-])')
_OUR_IDS = re.compile(r'^[gra]\d+$')


def protected_facts(text: str, *, max_lines: int | None = None) -> set[str]:
    """Identifiers (`INC-4471`, `E2033`), paths (`src/app.py`) and numbers of four or more digits in *text*.

    Timestamps are left out: every log line has one, and no later step refers to a line by its time. With
    *max_lines*, values on more lines than that are left out too: a value repeated all over (a status code,
    an endpoint every request hits) is the text's vocabulary, not a fact someone will ask for.
    """
    lines = _TIMESTAMPS.sub(' ', text).splitlines()
    counts: dict[str, int] = {}
    for line in lines:
        found: set[str] = set(_PATH.findall(line))
        found.update(match for match in _IDENTIFIER.findall(line) if not _OUR_IDS.match(match))
        found.update(match for match in _NUMBER.findall(line) if len(match.replace('.', '')) >= 4)
        for fact in found:
            counts[fact] = counts.get(fact, 0) + 1
    return {fact for fact, count in counts.items() if max_lines is None or count <= max_lines}


def plain_text(messages: Iterable[ModelMessage]) -> str:
    """What the model read and wrote in *messages*: prompts, tool arguments and results, answers (no reasoning)."""
    pieces: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                pieces.append(user_text(part))
            elif isinstance(part, ToolReturnPart):
                pieces.append(return_text(part))
            elif isinstance(part, ToolCallPart):
                pieces.append(args_text(part.args))
            elif isinstance(part, TextPart):
                pieces.append(part.content)
            elif isinstance(message, ModelRequest) and hasattr(part, 'content'):
                content = getattr(part, 'content', '')
                if isinstance(content, str):
                    pieces.append(content)
    return '\n'.join(pieces)


def _normalized(text: str) -> str:
    # Composed, `İ` as the `i` a model writes (it casefolds to `i` and a combining dot), and typographic quotes as
    # the ASCII ones (a model quoting `"blue"` writes `“blue”` as often as not).
    folded = ' '.join(text.split()).casefold().replace('i\u0307', 'i').translate(_QUOTES)
    return unicodedata.normalize('NFC', folded)


_QUOTES = str.maketrans(
    {
        '\u2018': "'",
        '\u2019': "'",
        '\u201a': "'",
        '\u201b': "'",
        '\u201c': '"',
        '\u201d': '"',
        '\u201e': '"',
        '\u201f': '"',
    }
)
"""Typographic quotes, as the ASCII quote each stands for."""

_BULLET = re.compile(r'^[-*+\u2022\u2023\u25e6\u2043\u2219] ')
"""A list item's marker at a line's start (`- `, `* `, `• `...): a summary may list an item under another marker."""


def _holds(summary: str, instruction: str, *, cut: bool = False) -> bool:
    """Whether *summary* (`_normalized`) holds *instruction* word for word, as whole words (`port 80` is not in
    `port 8080`): whole, or, for an instruction of several lines (a prompt of several items), each line in their
    order.

    A summary may list a turn's items apart (`rules: ['Use lowercase ids.', 'Never touch prod.']`); it does not
    hold the turn when a line is missing, out of its place, or only part of a longer word. *cut*: the instruction
    is the start of a longer one (`Reassert` cut it), whose last word may go on in the summary.
    """
    whole = _normalized(instruction)
    if _whole_at(summary, whole, 0, open_end=cut) >= 0:
        return True
    # Each line without its list marker: `- Never touch prod.` is held by `* never touch prod.` as by the bare line.
    lines = [_BULLET.sub('', line, count=1) for line in map(_normalized, instruction.splitlines()) if line]
    if len(lines) < 2 and lines == [whole]:
        return False
    at = 0
    for number, line in enumerate(lines, start=1):
        found = _whole_at(summary, line, at, open_end=cut and number == len(lines))
        if found < 0:
            return False
        at = found + len(line)
    return True


def _whole_at(text: str, piece: str, start: int, *, open_end: bool = False) -> int:
    """Where *piece* first occurs in *text* from *start* on without cutting a word at either end (at its start
    only, with *open_end*), or -1. Chinese and Japanese, written without spaces, have no word to cut."""
    if not piece:
        return -1
    at = text.find(piece, start)
    while at >= 0:
        end = at + len(piece)
        cuts_before = at > 0 and _joined(text[max(at - 2, 0) : at], piece[0], before=True)
        cuts_after = not open_end and end < len(text) and _joined(text[end : end + 2], piece[-1], before=False)
        # A number the piece ends with a point or a comma after (`version 3.`) goes on in `3.12`.
        cuts_after = cuts_after or (
            not open_end
            and end < len(text)
            and piece[-1] in '.,'
            and len(piece) > 1
            and piece[-2].isdigit()
            and text[end].isdigit()
        )
        # ... and a number before a piece that opens with a point and digits (`.5` in `10.5`).
        cuts_before = cuts_before or (
            at > 0 and piece[0] in '.,' and len(piece) > 1 and piece[1].isdigit() and text[at - 1].isdigit()
        )
        if not cuts_before and not cuts_after:
            return at
        at = text.find(piece, at + 1)
    return -1


def _joined(beside: str, edge: str, *, before: bool) -> bool:
    """Whether *edge*, a piece's first (*before*) or last character, is within one word with the text *beside* it
    (up to two characters, nearest last *before*, else first): both letters or digits of a script written with
    spaces (`_` counts as one), or a number going on (`3` in `3.12`, `5` in `5,000`)."""
    if not beside:
        return False
    near = beside[-1] if before else beside[0]
    if _word_character(near) and _word_character(edge):
        return True
    # A number goes on past a point or a comma followed by a digit: `1` is not `1.5`, nor `5` the `5` of `5,000`.
    far = beside[0] if before else beside[-1]
    return len(beside) == 2 and near in '.,' and edge.isdigit() and far.isdigit()


def _word_character(character: str) -> bool:
    """A letter, a digit, a combining mark or `_`, of a script written with spaces: Chinese, Japanese, Thai and the
    like have no word to cut, so a piece of them may start or end anywhere."""
    if character == '_':
        return True
    # A vowel sign or an accent that has no composed form is within its word (`करो` is not a word of `करोगे`).
    if not character.isalnum() and unicodedata.category(character)[0] != 'M':
        return False
    return not without_spaces(character)


@dataclass(frozen=True)
class Finding:
    """What the checks found in one proposal."""

    failed: tuple[str, ...] = ()
    """Checks that failed, in the order they ran."""

    missing_facts: tuple[str, ...] = ()
    """Protected values the summary does not contain."""

    missing_instructions: tuple[str, ...] = ()
    """Instruction changes the summary does not contain word for word (one of several lines: each line, in order)."""

    omissions: tuple[str, ...] = ()
    """What the second pass said was omitted (only items found in the transcript)."""

    not_run: dict[str, str] = field(default_factory=dict[str, str])
    """Checks asked for that could not run, each with why (the `omissions` pass, when its model failed or its reply
    could not be read): they are neither passed nor failed."""

    lines: tuple[str, ...] = ()
    """The lines to append to repair the summary: source lines of missing facts, instructions, omissions."""


@dataclass
class Verified(WrappingCompaction[AgentDepsT]):
    """Wrap a strategy; check each summary it proposes before the runtime applies it.

    Example:
        ```python
        changes = InstructionSources(markers=('CHANGE:',))
        summary = StatelessSummary(trigger=Trigger(fraction=0.5))
        Verified(summary, sources=changes, checks=(*DEFAULT_CHECKS, 'omissions'))
        ```
    """

    inner: CompactionCapability[AgentDepsT]
    """The strategy whose proposals are checked; its trigger and runtime settings apply."""

    checks: Sequence[Check] = DEFAULT_CHECKS
    """Which checks run. Add `'omissions'` for the second model pass."""

    model: Model | str | None = None
    """Model of the `omissions` pass; `None` uses the model of the request being compacted."""

    model_settings: ModelSettings | None = None
    """Settings for the `omissions` pass."""

    on_failure: Literal['append', 'reject'] = 'append'
    """`append`: add what is missing to the summary, copied from the removed exchanges (an empty summary, or
    one that would no longer be smaller, is refused instead). `reject`: refuse the summary on any failed check.
    A refused summary is never written: the runtime's fallback layout applies (the newest exchanges kept
    verbatim, the rest dropped with a note; `fallback_reason='verification'`, the reason in `detail`), so a
    summarizer that keeps failing cannot hold the run above its trigger."""

    sources: InstructionSources = field(default_factory=lambda: InstructionSources(markers=()))
    """Which texts count as instruction changes for the `instructions` check (default: the user's prompts)."""

    max_fact_lines: int = 3
    """A value of the removed exchanges counts as a fact only when it is on at most this many of their lines."""

    max_transcript_chars: int = 200_000
    """Largest transcript the `omissions` pass reads; the newest part is kept when the removed exchanges are longer."""

    def __post_init__(self) -> None:
        check_instance('Verified', 'inner', self.inner, CompactionCapability, 'a compaction strategy')
        raw = cast('object', self.checks)
        if isinstance(raw, str) or not isinstance(raw, Iterable):
            raise ConfigurationError(f'Verified.checks must be a sequence of check names, got {raw!r}.')
        names = tuple(cast('Iterable[object]', raw))
        for index, name in enumerate(names):
            check_choice('Verified', f'checks[{index}]', name, CHECKS)
        self.checks = cast('tuple[Check, ...]', tuple(dict.fromkeys(names)))
        check_model('Verified', 'model', self.model)
        check_instance(
            'Verified', 'model_settings', self.model_settings, (dict, type(None)), 'a ModelSettings dict or None'
        )
        check_choice('Verified', 'on_failure', self.on_failure, ('append', 'reject'))
        check_instance('Verified', 'sources', self.sources, InstructionSources, 'an InstructionSources')
        check_int('Verified', 'max_fact_lines', self.max_fact_lines, minimum=1)
        check_int('Verified', 'max_transcript_chars', self.max_transcript_chars, minimum=1_000)

    @property
    def strategy_name(self) -> str:
        """`verified(<inner>)`."""
        return f'verified({self.inner.strategy_name})'

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """The inner proposal, checked; repaired or refused when a check fails."""
        proposal = await self.inner.propose(view, ctx)
        summary = proposal.summary
        if proposal.malformed is not None or proposal.declined is not None or not isinstance(summary, Summary):
            # Nothing of ours to check: a failed proposal falls back anyway, a provider's summary is opaque.
            if isinstance(summary, ProviderSummary) and proposal.malformed is None and proposal.declined is None:
                # Said in the record, so `Verified(Native())` on a provider that compacts is not taken as checked.
                unchecked = {'checks': list(self.checks), 'verdict': 'unchecked', 'reason': UNCHECKED}
                return _with_record(proposal, unchecked)
            return proposal
        kept_ids = set(proposal.kept) | {exchange.id for exchange in view.exchanges if exchange.forced}
        dropped = [exchange for exchange in view.exchanges if exchange.id not in kept_ids]
        if not dropped:
            return proposal
        finding = await self.examine(view, dropped, kept_ids, summary.text, ctx)
        record: dict[str, Any] = {
            'checks': [check for check in self.checks if check not in finding.not_run],
            'failed': list(finding.failed),
            'missing_facts': list(finding.missing_facts),
            'missing_instructions': list(finding.missing_instructions),
            'omissions': list(finding.omissions),
        }
        if finding.not_run:
            record['not_run'] = dict(finding.not_run)
        if not finding.failed:
            # Said so when no check it was given could run (`checks=('omissions',)` and the pass failed): a summary
            # nothing checked is not one that passed.
            return _with_record(proposal, {**record, 'verdict': 'passed' if record['checks'] else 'unchecked'})
        reason = _reason(finding)
        if self.on_failure == 'reject' or {'not_empty', 'smaller'} & set(finding.failed) or not finding.lines:
            return _refused(f'summary refused by verification: {reason}', proposal)
        lines = finding.lines[:MAX_APPENDED]
        text = '\n'.join([summary.text.rstrip(), '', APPENDIX_HEADER, *(f'- {line}' for line in lines)])
        if _tokens(text) >= sum(exchange.tokens for exchange in dropped):
            return _refused(
                f'summary refused by verification: {reason}; with the missing details appended it would not be '
                'smaller than what it replaces',
                proposal,
            )
        repaired = replace(proposal, summary=Summary(text, summary.structured))
        return _with_record(repaired, {**record, 'verdict': 'appended', 'appended': list(lines)})

    async def examine(
        self,
        view: ConversationView,
        dropped: list[Exchange],
        kept_ids: set[str],
        summary: str,
        ctx: CompactionContext,
    ) -> Finding:
        """Run the configured checks on *summary* standing in for *dropped*."""
        failed: list[str] = []
        lines: list[str] = []
        removed_text = plain_text(m for exchange in dropped for m in view.messages_of(exchange))
        summary_norm = _normalized(summary)
        if 'not_empty' in self.checks and not compactor.visible(summary):
            failed.append('not_empty')
        if 'smaller' in self.checks and _tokens(summary) >= sum(exchange.tokens for exchange in dropped):
            failed.append('smaller')
        missing_facts: list[str] = []
        if 'facts' in self.checks:
            first = view.exchanges.index(dropped[0])
            later = [e for e in view.exchanges[first:] if e.id in kept_ids and e.kind != 'opening']
            later_text = plain_text(m for exchange in later for m in view.messages_of(exchange))
            referenced = protected_facts(removed_text, max_lines=self.max_fact_lines) & protected_facts(later_text)
            missing_facts = sorted(fact for fact in referenced if fact.casefold() not in summary_norm)
            if missing_facts:
                failed.append('facts')
                lines.extend(_source_lines(removed_text, missing_facts))
        missing_instructions: list[str] = []
        if 'instructions' in self.checks:
            removed_norm = _normalized(removed_text)
            for instruction in gather_instructions(view, self.sources):
                # A change `Reassert` restated cut (`change_chars`) is checked for what the cut keeps of it.
                said = before_cut(instruction)
                norm = _normalized(said)
                if norm and norm in removed_norm and not _holds(summary_norm, said, cut=said != instruction):
                    missing_instructions.append(instruction)
            if missing_instructions:
                failed.append('instructions')
                lines.extend(clean_text(text).strip() for text in missing_instructions)
        omissions: list[str] = []
        not_run: dict[str, str] = {}
        if 'omissions' in self.checks and summary.strip():
            found = await self._second_pass(view, dropped, removed_text, summary, ctx)
            if isinstance(found, str):
                not_run['omissions'] = found
            else:
                omissions = [item for item in found if _normalized(item) not in summary_norm]
            if omissions:
                failed.append('omissions')
                lines.extend(_source_lines(removed_text, omissions))
        return Finding(
            failed=tuple(failed),
            missing_facts=tuple(missing_facts),
            missing_instructions=tuple(missing_instructions),
            omissions=tuple(omissions),
            not_run=not_run,
            lines=tuple(dict.fromkeys(line for line in lines if line and _normalized(line) not in summary_norm)),
        )

    def prompt(self, summary: str, transcript: str) -> str:
        """The second-pass prompt for *summary* of *transcript*."""
        return compactor.fill(
            VERIFY_PROMPT, marker=VERIFY_MARKER, summary=neutralize(summary), transcript=neutralize(transcript)
        )

    async def _second_pass(
        self, view: ConversationView, dropped: list[Exchange], removed_text: str, summary: str, ctx: CompactionContext
    ) -> list[str] | str:
        """Items the second pass says the summary omitted, kept only when the transcript holds them verbatim; or why
        the pass could not run (its model failed, warned; its reply could not be read)."""
        transcript = render_messages(m for exchange in dropped for m in view.messages_of(exchange))
        if len(transcript) > self.max_transcript_chars:
            transcript = '[… earlier part cut …]\n' + transcript[-self.max_transcript_chars :]
        request = ModelRequest(
            parts=[UserPromptPart(clean_text(self.prompt(summary, transcript)))], instructions=VERIFY_INSTRUCTIONS
        )
        try:
            response = await compactor.request(ctx, [request], model=self.model, settings=self.model_settings)
        except Exception as error:  # the second pass is advisory: without it the deterministic checks still stand
            failure = f'its model failed: {type(error).__name__}: {clip(described(error, text=True), 300)}'
            # The user's setup (every pass would fail alike), else a passing fault.
            if not warn_if_setup_error(
                error, self.strategy_name, 'the omissions pass cannot run', 'Verified', stacklevel=2
            ):
                warn_degraded(f'{self.strategy_name}: the omissions pass did not run ({failure})', stacklevel=2)
            return failure
        try:
            data = replies.read_json_object(compactor.response_text(response)).data
        except replies.ReplyError as error:
            return f'its reply could not be read: {error}'
        if replies.unfilled(data, _PLACEHOLDERS):
            return "its reply copied the prompt's example"
        if (problem := replies.schema_problem(_VALIDATOR, data)) is not None:
            return f'its reply does not fit the schema: {problem}'

        removed_norm = _normalized(removed_text)
        items = [clean_text(item).strip() for item in cast('list[str]', data['omitted'])]
        # A detail the transcript does not hold, as whole words, is the checker's invention, not an omission; nor is
        # a character or two (`0` is in almost any transcript, and its first line holding one says nothing).
        return list(
            dict.fromkeys(
                item
                for item in items
                if len(norm := _normalized(item)) >= _OMISSION_CHARS and _whole_at(removed_norm, norm, 0) >= 0
            )
        )


_OMISSION_CHARS = 3
"""Fewest characters of an item the `omissions` pass lists for it to count."""


def _source_lines(text: str, needles: Sequence[str]) -> list[str]:
    """For each needle, the first line of *text* holding it (clipped), or the needle itself."""
    lines = text.splitlines()
    out: list[str] = []
    for needle in needles:
        folded = needle.casefold()
        line = next((line for line in lines if folded in line.casefold()), needle)
        out.append(clip(line, 300))
    return out


def _tokens(text: str) -> int:
    from pydantic_ai_compaction.runtime.trigger import text_tokens

    return text_tokens(text)


def _refused(detail: str, proposal: Proposal) -> Proposal:
    # Not a decline: a summarizer that keeps failing the checks would otherwise leave every request above the
    # trigger, growing until it overflows the window. The runtime's fallback keeps the newest exchanges verbatim
    # and drops the rest without a summary it could not trust; the event carries the reason.
    return Proposal.failed('verification', detail, variant=proposal.variant)


def _reason(finding: Finding) -> str:
    parts: list[str] = []
    for name in finding.failed:
        if name == 'facts':
            parts.append(f'facts missing ({", ".join(finding.missing_facts[:5])})')
        elif name == 'instructions':
            parts.append(f'{len(finding.missing_instructions)} instruction change(s) missing')
        elif name == 'omissions':
            parts.append(f'{len(finding.omissions)} omission(s) reported by the second pass')
        elif name == 'not_empty':
            parts.append('the summary is empty')
        else:
            parts.append('the summary is not smaller than what it replaces')
    return '; '.join(parts)


def _with_record(proposal: Proposal, record: dict[str, Any]) -> Proposal:
    return replace(proposal, extra={**proposal.extra, 'verification': record})
