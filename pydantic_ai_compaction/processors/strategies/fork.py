"""`Fork`: the agent's own conversation proposes what stays verbatim and writes the summary.

The fork is the conversation's next request with one message appended: same model, same
instructions, same tool definitions, asked to answer in text. Because every earlier byte is what the
agent itself would send, a provider's prompt cache can serve the fork's prefix. `request='sent'` leaves
out the newest exchanges that stay verbatim anyway (see `Fork.request`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from jsonschema import Draft202012Validator
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT

from pydantic_ai_compaction.protocols.schemas import FORK_JSON_SCHEMA
from pydantic_ai_compaction.protocols.types import Exchange, Proposal, Summary
from pydantic_ai_compaction.runtime import compactor, replies
from pydantic_ai_compaction.runtime.capability import ConfiguredCompaction
from pydantic_ai_compaction.runtime.checks import check_choice, check_instance, check_int, check_model
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.segment import ConversationView
from pydantic_ai_compaction.runtime.transcript import listing

ForkVariant = Literal['json', 'free', 'fixed']
ForkRequest = Literal['next', 'sent']

FORK_MARKER = '[pydantic-ai-compaction: fork request]'
"""First line of the appended message; the variant follows as `variant=<name>`."""

_VALIDATOR = Draft202012Validator(FORK_JSON_SCHEMA)
_KEEP_LINE = re.compile(
    r'^[ \t#>*_`]*(?:(?:[-+]|\d+[.)])[ \t]+[*_`]*)?(?P<label>KEEP)[ \t*_`]*:[ \t*_`]*(?P<ids>.*)$',
    re.IGNORECASE | re.MULTILINE,
)
"""A `KEEP:` line, also as markdown writes it (`**KEEP:** g1`, `` `KEEP: g1` ``, `## KEEP: g1`, `- KEEP: g1`):
models format a label they were shown plain (`_keep_line` says which of several is the one)."""
_MARKUP = ' \t\r*_`.'
"""What may close a formatted `KEEP:` line after its ids (a closing `**` or backtick, a full stop, a CR)."""
_LIST_MARK = re.compile(r'[ \t>*_`\u2022-]*(?:\d+[.)][ \t]+)?')
"""What opens a line of a list (a bullet, a number, a quote mark, emphasis)."""
_NOTE = re.compile(r'\(|[\u2014\u2013:][ \t]|[ \t]-[ \t]')
"""Where a note after a listed id starts (`g2 (the config)`, `g2: the config`, `g2 - the config`)."""
_IDS_ONLY = re.compile(
    r'(?:[ \t,;*_`"\'\[\]]|and\b|to\b|through\b|thru\b|\.\.\.?|\u2026'
    r'|g\d+(?:(?:[-\u2013\u2014]|\.\.\.?|\u2026)g?\d+)?\b)*',
    re.IGNORECASE,
)
"""Text of exchange ids and ranges of them and nothing else (each alternative starts differently: one pass)."""
_ID = re.compile(r'\bg\d+\b', re.IGNORECASE)
_RANGE = re.compile(
    r'\bg(\d{1,12})(?:[-\u2013\u2014]|\.\.\.?|\u2026|[ \t]+(?:to|through|thru)[ \t]+'
    r'|[ \t]*,[ \t]*(?:\.\.\.|\u2026)[ \t]*,[ \t]*)g?(\d{1,12})\b',
    re.IGNORECASE,
)
"""A range of exchange ids as a model writes one (`g2-g5`, `g2–g5`, `g2..g5`, `g2...g5`, `g2-5`, `g2 to g5`, `g2
through g5`, `g2, ..., g5`)."""
_ALL_BUT = re.compile(
    r'[ \t*_`(\[]*(?:keep[ \t]+)?(?:all|everything|every[ \t]+(?:exchange|one|id)|each[ \t]+(?:exchange|one))'
    r'(?:[ \t]+(?:of[ \t]+them|exchanges|ids|else|the[ \t]+(?:others|rest|exchanges)))?[ \t]*,?[ \t]*'
    r'(?:except|but|besides|save|other[ \t]+than|apart[ \t]+from|excluding|minus|without)[ \t]+(?:for[ \t]+)?'
    r'[*_`(\[]*g\d',
    re.IGNORECASE,
)
"""A `KEEP:` line that keeps every exchange but the ones it names (`everything except g2`, `all but g2`): a list of
ids to keep cannot say that, and reading the ids it names would keep the opposite of what was meant."""
_ITEM_END = r'[ \t]*(?:[,;:(\r*`&/.]|[-\u2013\u2014][ \t]|$)'
"""What ends an item of a list of ids: punctuation, a note's dash or the line's end."""
_AND_LAST = rf'(?P<more>[ \t]+and[ \t]+g\d{{1,12}}\b(?P<end>{_ITEM_END}))'
"""`and` and a last id after a range, ending the item."""
_SPACED_RANGE = re.compile(
    rf'\b(g\d{{1,12}})[ \t]+(?P<dash>[-\u2013\u2014])[ \t]+(g\d{{1,12}})(?={_ITEM_END}|{_AND_LAST})',
    re.IGNORECASE | re.MULTILINE,
)
"""A range written with spaces around its dash (`g2 - g5`, `g2 – g5 (the config)`, `g2 - g5: setup`, `g2 - g5 and
g8`), closed up (`g2-g5`) before notes are cut off. Only a dash between two ids that end the item (before
punctuation, a note's dash, the line's end, or `and` and a last id when the range goes up): `g3 — g2 was
superseded by it`, `g7 — g2 and g3 were superseded` and `g8 – g2 and g3: drafts` are an id and its note, which
names other exchanges (`_closed_ranges`)."""
_LABEL = re.compile(
    r'[ \t*_`]*(?:(?!g\d)[^\s:,;()\[\]]+[ \t]+){0,4}(?!g\d)[^\s:,;()\[\]]+[ \t*_`]*:[ \t]+(?=[*_`]*g\d)',
    re.IGNORECASE,
)
"""A few words and a colon before the first id (`All three: g2, g3`, `each of these: g2`), naming no id."""
_MAX_RANGE = 1_000
"""Ids a range names at most: a wider one (`g1-g999999999`) is read as its two ends."""
_PARENTHESES = re.compile(r'\([^()]*\)')
"""A note in parentheses after an id (`g5 (the final config; g1-g4 were drafts)`)."""
_MAX_IDS = 10_000
"""Ids a reply names at most, repeats counted (a reply repeating `g1-g1000` would otherwise name millions)."""
_NONE_JOINED = re.compile(r'[-\u2013\u2014]')
"""What joins a none word to its note in one word (`None\u2014all`, `none-all summarized`)."""
_NOT_NONE = re.compile(
    r'\b(?:except|but|besides|save|other|apart|follow\w*|see|unless|listed|just|only)\b|[-\u2013\u2014:][ \t*_`]*$',
    re.I,
)
"""Words of a note that point at ids elsewhere (`None\u2014except these:`, `None\u2014see below`): such a joined
none word does not decide the line, which is then read as before (for ids, or as naming neither)."""
_NONE_WORDS = frozenset({'', 'none', '-', 'nothing', 'n/a', 'no', 'nil'})
"""What a `KEEP:` line opens with to name no exchange (`KEEP: none`, `KEEP: None — all summarized`, `KEEP: n/a`)."""
_MAX_REPLY_CHARS = 2_000_000

FORK_PROMPT = """{marker} variant={variant}
Your context is about to be compacted. Pause the task: do not call tools and do not answer the task now.
The exchanges of this conversation so far are listed below (id, kind, estimated size, content).
Protected and in-progress exchanges are kept whatever you answer; earlier summaries stay in place,
so do not repeat what they already say.

{listing}

{format}"""
"""The message appended to the conversation; `{format}` is the variant's answer format."""

FORK_JSON_EXAMPLE: dict[str, Any] = {
    'keep': ['<exchange id>', '<exchange id>'],
    'summary': {
        'rules': ['<instruction in force, latest wording>'],
        'facts': ['<fact later steps need, exact values>'],
        'progress': '<what is done>',
        'next_step': '<the very next action>',
    },
}
"""The example reply the `json` variant shows; a summary that still holds one of its `<...>` placeholders falls back."""

FORK_JSON_FORMAT = compactor.fill(
    """Choose which exchanges must stay verbatim (only what you will need to read again word for word)
and summarize everything else. Answer with one JSON object and nothing else, shaped like this example:
{example}
Replace every <...> with real content. "keep": ids from the list above of the exchanges to keep verbatim
([] for none). "rules": every instruction in force, in its latest wording, changes included. "facts": facts
later steps need, with exact values. "progress": what is done. "next_step": the very next action.
"keep", "rules" and "facts" take as many items as they need.""",
    example=json.dumps(FORK_JSON_EXAMPLE, ensure_ascii=False),
)
"""Answer format of the `json` variant (valid against `FORK_JSON_SCHEMA` once filled)."""

_FREE_KEEP = '<ids from the list above of the exchanges to keep verbatim, comma-separated, or none>'
_FREE_SUMMARY = (
    '<summary: every instruction in force in its latest wording, facts with exact values, progress, next step>'
)

FORK_FREE_FORMAT = compactor.fill(
    """Choose which exchanges must stay verbatim (only what you will need to read again word for word)
and summarize everything else. Answer in this form, replacing each <...>:
KEEP: {keep}
{summary}""",
    keep=_FREE_KEEP,
    summary=_FREE_SUMMARY,
)
"""Answer format of the `free` variant."""

FORK_FIXED_FORMAT = """The {count} most recent finished exchange(s) stay verbatim: {ids}. Summarize everything else
for yourself: every instruction in force with its latest wording, facts with exact values, progress and the next step.
Answer with the summary only."""
"""Answer format of the `fixed` variant; `{count}` is `Fork.keep_last`, `{ids}` their ids (the listing's order is the
history's, where an earlier summary sits before the exchanges it followed: "most recent" alone is ambiguous)."""

_JSON_PLACEHOLDERS = replies.placeholders(FORK_JSON_EXAMPLE)
_FREE_PLACEHOLDERS = (_FREE_KEEP, _FREE_SUMMARY)


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

    keep_last: int = 2
    """Exchanges the `fixed` variant keeps (the most recent finished ones)."""

    model_settings: ModelSettings | None = None
    """Settings for the fork call, over the request's own (`None`: the request's, which keeps the provider's
    cached prefix). The fork always answers in text: `tool_choice` stays `none` whatever is set here."""

    request: ForkRequest = 'next'
    """What the fork request holds before the appended message. `'next'` (the seed's fork): the conversation's
    next request, the newest results included. `'sent'`: without the newest exchanges that stay verbatim
    whatever the fork answers (in progress or protected, and for `fixed` its `keep_last`), which in a tool
    loop is the request the agent already sent. The fork then lists those exchanges without reading them
    (their results stay in the context; the next compaction summarizes them), and, under a prompt cache,
    reads its whole prefix from the cache: the newest results are written once, by the agent's next request,
    instead of once by the fork request and again after the compaction."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice('Fork', 'variant', self.variant, ('json', 'free', 'fixed'))
        check_int('Fork', 'keep_last', self.keep_last, minimum=0)
        check_model('Fork', 'model', self.model)
        check_instance(
            'Fork', 'model_settings', self.model_settings, (dict, type(None)), 'a ModelSettings dict or None'
        )
        check_choice('Fork', 'request', self.request, ('next', 'sent'))

    @property
    def strategy_name(self) -> str:
        """Name recorded in boundary records."""
        return 'fork'

    def prompt(self, view: ConversationView) -> str:
        """The message appended to the conversation."""
        answer = {
            'json': FORK_JSON_FORMAT,
            'free': FORK_FREE_FORMAT,
            'fixed': compactor.fill(
                FORK_FIXED_FORMAT, count=str(self.keep_last), ids=', '.join(_recent(view, self.keep_last)) or 'none'
            ),
        }[self.variant]
        return compactor.fill(
            FORK_PROMPT, marker=FORK_MARKER, variant=self.variant, listing=listing(view), format=answer
        )

    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Ask the fork, then parse its reply for the variant."""
        if self.variant == 'fixed' and sum(not exchange.forced for exchange in view.exchanges) <= self.keep_last:
            # Everything droppable is among the exchanges `fixed` keeps: no call, no compaction.
            return Proposal.decline(f'at most {self.keep_last} exchange(s) can be dropped', variant='fixed')
        settings, parameters = compactor.text_only(ctx, model=self.model, settings=self.model_settings)
        messages = compactor.with_appended_prompt(self._conversation(view), self.prompt(view))
        response = await compactor.request(ctx, messages, model=self.model, settings=settings, parameters=parameters)
        reply = compactor.response_text(response)
        if (unusable := compactor.unusable(response, reply, 'the fork')) is not None:
            return Proposal.failed(*unusable, variant=self.variant)
        return self.parse(reply, view)

    def _conversation(self, view: ConversationView) -> list[ModelMessage] | tuple[ModelMessage, ...]:
        """The messages the prompt is appended to (see `request`)."""
        if self.request == 'next':
            return view.messages
        fixed = set(_recent(view, self.keep_last)) if self.variant == 'fixed' else set[str]()
        return compactor.sent_prefix(view, lambda exchange: exchange.forced or exchange.id in fixed)

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
        recent = _recent(view, self.keep_last)
        return Proposal.keep(recent, summary=Summary(reply.strip()), variant='fixed')


def _recent(view: ConversationView, count: int) -> tuple[str, ...]:
    finished: list[Exchange] = [exchange for exchange in view.exchanges if not exchange.forced]
    return tuple(exchange.id for exchange in finished[len(finished) - count :]) if count else ()


def _parse_json(reply: str) -> Proposal:
    try:
        parsed = replies.read_json_object(reply)
    except replies.ReplyError as error:
        return Proposal.failed(error.problem, error.detail, variant='json')
    data = parsed.data
    # Only the summary is checked for placeholders: a placeholder left among the ids is an unknown id,
    # which the validator rejects on its own while the rest of the proposal applies.
    copied = replies.unfilled(data.get('summary'), _JSON_PLACEHOLDERS)
    if copied:
        return Proposal.failed('unfilled', _unfilled_detail(copied), variant='json')
    problem = replies.schema_problem(_VALIDATOR, data)
    if problem is not None:
        return Proposal.failed('schema', problem, variant='json')
    summary: dict[str, Any] = data['summary']
    text_summary = render_structured(summary)
    excepted = next((item for item in data['keep'] if _ALL_BUT.match(item)), None)
    if excepted is not None:
        detail = f'a keep item names the exchanges not to keep, not those to keep: {excepted[:100]!r}'
        return Proposal.failed('unparseable', detail, variant='json')
    keep = _json_keep(data['keep'])
    if not text_summary and not keep:
        return Proposal.failed('empty', 'empty keep list and empty summary', variant='json')
    extra: dict[str, Any] = {'structured_summary': summary}
    if parsed.tolerated:
        extra['reply_tolerated'] = list(parsed.tolerated)
    return Proposal(
        kept=keep,
        summary=Summary(text_summary, structured=summary) if text_summary else None,
        variant='json',
        extra=extra,
    )


def _json_keep(items: list[str]) -> tuple[str, ...]:
    """The ids of a JSON reply's `keep` list, each item read as a `KEEP:` line's ids are (`G1`, `g1-g3`, `g2 (the
    config)`); an item naming no id is kept as written, and an id in two items twice, for the validator to reject
    and record."""
    ids: list[str] = []
    for item in items:
        if len(ids) >= _MAX_IDS:
            break
        closed = _closed_ranges(item)
        named = _closed_up(_noted_ids, item, closed) or _ids_in(closed)
        ids.extend(named or (item,))
    return tuple(ids[:_MAX_IDS])


def _unfilled_detail(copied: list[str]) -> str:
    shown = ', '.join(copied[:3])
    return f"the reply repeats the prompt's example instead of filling it in (placeholders {shown})"


def render_structured(summary: dict[str, Any]) -> str:
    """The boundary text of a structured fork summary; an item with nothing to say (blank, or dots alone: `...`)
    is left out."""
    rules = [rule for rule in summary.get('rules') or () if _says(rule)]
    facts = [fact for fact in summary.get('facts') or () if _says(fact)]
    lines: list[str] = []
    if rules:
        lines.append('Rules in force:')
        lines.extend(f'- {rule}' for rule in rules)
    if facts:
        lines.append('Facts:')
        lines.extend(f'- {fact}' for fact in facts)
    if _says(progress := summary.get('progress')):
        lines.append(f'Progress: {progress}')
    if _says(next_step := summary.get('next_step')):
        lines.append(f'Next step: {next_step}')
    return '\n'.join(lines)


def _says(item: object) -> bool:
    """Whether a summary's item says something: a string with more than blanks, format characters and dots."""
    return isinstance(item, str) and compactor.visible(item.replace('.', '').replace('\u2026', ''))


def _keep_of(line: re.Match[str]) -> tuple[str, ...] | None:
    """The ids a `KEEP:` line names (`()` for none), or `None` when it names neither."""
    written = line.group('ids').strip(_MARKUP)
    ids_text = _closed_ranges(written)
    words = ids_text.split(maxsplit=1)
    if not words:
        return ()
    if _ALL_BUT.match(ids_text):
        return None
    # `KEEP: None\u2014all summarized`: a note joined to the none word, naming no exchange. With an id after it
    # (`none-of-these except g5`, `no-op aside, g3`) the line is read for its ids as any other.
    joined = _NONE_JOINED.search(words[0].lstrip('-'))
    if (
        joined
        and _none(_NONE_JOINED.split(words[0], maxsplit=1)[0])
        and not _ID.search(ids_text)
        and not _NOT_NONE.search(ids_text)
    ):
        return ()
    # `KEEP: none`, `KEEP: None — g3 and g4 are summarized`, `KEEP: none, g2 was superseded`; not `Keep: no mocks
    # in tests`, nor a bullet before ids (`KEEP: - g3`).
    said = len(words) == 1 or (words[0] != '-' and (words[1][0] in '-\u2013\u2014(:' or words[0][-1] in '.,;:-\u2014'))
    if _none(words[0]) and said:
        return ()
    ids = _closed_up(_noted_ids, written, ids_text)
    if ids:
        return ids
    return _ids_in(ids_text) or None  # `KEEP: none of them except g5` names g5


def _closed_ranges(text: str) -> str:
    """*text* with its spaced ranges closed up (`_SPACED_RANGE`); one followed by `and` and an id only when it goes up
    (`g2 - g5 and g8`) and, after an em dash, ends the line or the item (`g2 — g5 and g8`): going down, or after
    an em dash with a note after the last id, it is an id and a note naming others (`g8 – g2 and g3: drafts`,
    `g4 — g6 and g7: both restate it`)."""

    def closed(match: re.Match[str]) -> str:
        low, high = match.group(1), match.group(3)
        if match.group('more') and (
            int(low[1:]) >= int(high[1:])
            or (match.group('dash') == '\u2014' and match.group('end').strip() not in ('', ',', ';', '.'))
        ):
            return match.group(0)
        return f'{low}-{high}'

    return _SPACED_RANGE.sub(closed, text)


def _noted_ids(text: str) -> tuple[str, ...]:
    """Each id before its note (`g2 (config), g5: the tests`): an id or a range in a note is not a choice. A label
    that opens the text and names no id (`All three: g2, g3, g4`) is not a note of the first id."""
    unnoted = _PARENTHESES.sub('', text)
    label = _LABEL.match(unnoted)
    if label is not None:
        unnoted = unnoted[label.end() :]
    return _ids_in(','.join(_NOTE.split(piece, maxsplit=1)[0] for piece in re.split('[,;]', unnoted)))


def _closed_up(read: Callable[[str], tuple[str, ...]], written: str, closed: str) -> tuple[str, ...]:
    """*read* of the text with its spaced ranges *closed* up, and of the text as *written* when they differ: a
    dash between two ids may also start a note (`g3 — g2 was superseded`), and reading it as a range must never
    name fewer ids than reading it as a note."""
    ids = read(closed)
    if closed == written:
        return ids
    return tuple(dict.fromkeys((*ids, *read(written))))[:_MAX_IDS]


def _none(word: str) -> bool:
    """Whether *word* (a line's first, or a line alone) names no exchange: `none`, `None.`, `(none)`, `n/a`."""
    return word.strip(_MARKUP + '()[],;:').lower() in _NONE_WORDS


def _ids_in(text: str) -> tuple[str, ...]:
    """The exchange ids *text* names, in order and lower-cased (the prompt writes `g2`; a model may write `G2`), a
    range (`g2-g5`) as each id in it."""
    ids: dict[str, None] = {}  # distinct, in order: `G3, g3` is one id, not one kept and one rejected
    named, at = 0, 0
    for span in _RANGE.finditer(text):
        before = _ID.findall(text, at, span.start())
        low, high = int(span.group(1)), int(span.group(2))
        if high < low and span.group(0)[-len(span.group(2)) - 1] in 'gG':
            low, high = high, low  # `g5-g2` names the same ids as `g2-g5`; `g12-3` is read as its two ends
        bounds = range(low, high + 1) if low <= high <= low + _MAX_RANGE else (low, high)
        named += len(before) + len(bounds)
        if named > _MAX_IDS:
            break
        ids.update(dict.fromkeys(found.lower() for found in before))
        ids.update(dict.fromkeys(f'g{number}' for number in bounds))
        at = span.end()
    else:
        ids.update(dict.fromkeys(found.lower() for found in _ID.findall(text, at)[: _MAX_IDS - named]))
    return tuple(ids)


def _keep_line(reply: str) -> tuple[tuple[str, ...], int, int] | None:
    """The ids the reply's `KEEP:` line names and where that line (with the id lines under it) starts and ends.

    The label as the prompt shows it (`KEEP`, capitals) wins over a summary's "Keep: ..." in any case; among
    those, the first line that names ids or none. An empty `KEEP:` line takes the lines of ids under it (`KEEP:`
    then `- g2`, `- g5`), and names none when there are none; `KEEP: none` names none, whatever follows it.
    """
    lines = list(_KEEP_LINE.finditer(reply))
    labelled = [line for line in lines if line.group('label') == 'KEEP']
    for match in labelled or lines:
        written = match.group('ids').strip(_MARKUP)
        if not written:
            # An empty label (not `none`): the ids are listed under it, perhaps after a blank line.
            keep, end = _listed(reply, match.end())
            return keep, match.start(), end
        if _points_below(written):
            # `KEEP: None — except these:`, `KEEP: the following:` over a list: the list names the ids. Without
            # one under it, the line is read as it stands.
            keep, end = _listed(reply, match.end())
            if keep:
                return keep, match.start(), end
        keep = _keep_of(match)
        if keep is not None:
            if keep and _AND_POINTER.search(written):
                # `KEEP: g3 and the following:` over a list: the line's ids and the list's.
                listed, end = _listed(reply, match.end())
                return tuple(dict.fromkeys((*keep, *listed)))[:_MAX_IDS], match.start(), end
            return keep, match.start(), match.end()
    return None


def _points_below(written: str) -> bool:
    """Whether a `KEEP:` line's text names no id but points at a list of them under it: a none word with an
    exception (`None — except these:`, `None but the following:`), or a pointer alone (`the following:`). A none
    word with a note (`None — everything is summarized below:`) points at the summary, whose lines may start with
    ids: not read for them."""
    if _ID.search(written):
        return False
    words = written.split(maxsplit=1)
    if _none(_NONE_JOINED.split(words[0].lstrip('-'), maxsplit=1)[0] if words else ''):
        return _EXCEPT.search(written.rstrip(_MARKUP)) is not None
    return _POINTER.fullmatch(written.strip(_MARKUP)) is not None


_EXCEPT = re.compile(
    r'\b(?:except|besides|save|apart from|other than|but)[ \t]+(?:for[ \t]+)?'
    r'(?:these|those|the following|following|what follows|the ones?)\b(?:[ \t]+\w+){0,3}[ \t]*\)?[ \t]*:?$',
    re.IGNORECASE,
)
"""What ends a none word's note that says some exchanges are kept after all, listed under it: an exception, a
pointer and at most three more words (`None — except these:`, `None, except the following two:`, `None except
those listed below:`, `None (except these):`); not a note on the summary (`None, everything except the latest
exchange is summarized below`, `None — only the summary below is needed:`)."""
_AND_POINTER = re.compile(r'\b(?:and|plus)[ \t]+(?:the[ \t]+)?(?:following|these|those)[ \t]*:?$', re.IGNORECASE)
"""The end of a `KEEP:` line of ids that points at more listed under it (`g3 and the following:`)."""
_POINTER = re.compile(r'(?:the |these |those )?(?:following|these|those|below|listed below|as follows)[ \t]*:?', re.I)
"""A `KEEP:` line's whole text when it only points at a list under it (`the following:`, `these:`)."""


def _listed(reply: str, at: int) -> tuple[tuple[str, ...], int]:
    """The ids listed in the lines from *at* (the end of an empty `KEEP:` line) and where the list ends (*at* when
    there is none): lines of ids, blank lines between them, or a lone `none`."""
    keep: dict[str, None] = {}
    end, named = at, 0
    while at < len(reply) and reply[at] == '\n' and named < _MAX_IDS:
        start, stop = at + 1, _line_end(reply, at + 1)
        text = reply[start:stop]
        at = stop
        if not text.strip():
            continue  # a blank line, before the list or inside it
        if not keep and _none(text):
            return (), stop
        ids = _ids_listed(text)
        if not ids:
            break
        keep.update(dict.fromkeys(ids[: _MAX_IDS - named]))
        named += len(ids)
        end = stop
    return tuple(keep), end


def _ids_listed(line: str) -> tuple[str, ...]:
    """The ids of a line of a list of exchange ids (`- g2 (the config)`, `g2, g5`), or none for any other line: a
    sentence that starts with an id (`g3 failed twice`) is not one."""
    body = line[_LIST_MARK.match(line).end() :]  # pyright: ignore[reportOptionalMemberAccess]
    return _closed_up(_list_ids, body, _closed_ranges(body))


def _list_ids(body: str) -> tuple[str, ...]:
    """The ids of a list line's *body* (after its bullet), or none when it is not only ids before a note."""
    head = _NOTE.split(body, maxsplit=1)[0].strip(' \t\r.*_`')
    return _ids_in(head) if _IDS_ONLY.fullmatch(head) else ()


def _line_end(text: str, start: int) -> int:
    end = text.find('\n', start)
    return len(text) if end < 0 else end


def _parse_free(reply: str) -> Proposal:
    copied = [placeholder for placeholder in _FREE_PLACEHOLDERS if placeholder in reply]
    if copied:
        return Proposal.failed('unfilled', _unfilled_detail(copied), variant='free')
    first = _KEEP_LINE.search(reply)
    if first is None:
        return Proposal.failed('unparseable', 'no KEEP: line in the reply', variant='free')
    found = _keep_line(reply)
    if found is None:
        ids_text = first.group('ids').strip(_MARKUP)
        if _ALL_BUT.match(ids_text):
            detail = f'KEEP line names the exchanges not to keep, not those to keep: {ids_text[:100]!r}'
        else:
            detail = f'KEEP line names no exchange id: {ids_text[:100]!r}'
        return Proposal.failed('unparseable', detail, variant='free')
    keep, start, end = found
    summary = (reply[:start] + reply[end:]).strip()
    if not summary:
        return Proposal.failed('empty', 'no summary after the KEEP line', variant='free')
    return Proposal(kept=keep, summary=Summary(summary), variant='free')
