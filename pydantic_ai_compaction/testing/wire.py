"""Provider request rules, checked on the JSON payloads a model class sends.

A compaction that leaves a history pydantic-ai accepts can still produce a request a provider
rejects with a 400 in the middle of a long run: a tool call without its result, a result at the
wrong place, a signed thinking block that changed, an opaque compaction item that did not come
back as received. Each validator here reads one request body, exactly as sent over HTTP (record it
with an `httpx2` mock transport given to the provider SDK's client), and returns the rules it breaks,
each message starting with the rule's name in brackets, e.g. `[anthropic.tool-result-first]`.

Validators that check signed or opaque items against what the provider handed out take an
`Issued` record; without it they check only what the payload shows by itself.

Example:
    ```python
    from pydantic_ai_compaction.testing import wire

    assert wire.problems('anthropic', request_json) == []
    ```
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast

ProviderKind: TypeAlias = Literal['openai-chat', 'openai-responses', 'anthropic', 'google']
"""The request formats the validators know."""

PROVIDER_KINDS: tuple[ProviderKind, ...] = ('openai-chat', 'openai-responses', 'anthropic', 'google')
"""Every `ProviderKind`, in order."""

Payload: TypeAlias = Mapping[str, Any]
"""A request body as sent over HTTP, decoded from JSON."""


@dataclass
class Issued:
    """What a provider handed out that must come back unmodified."""

    signed: dict[str, str] = field(default_factory=dict[str, str])
    """Signature -> the content it signs: Anthropic thinking text, Gemini function call (JSON, sorted keys)."""

    opaque: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    """Item id (OpenAI) or signature (Anthropic) -> the opaque item as the provider returned it.

    A Responses `reasoning` item may carry an extra `followed_by` key: the `call_id` (or `id`) of the
    output item returned right after it, which must still follow it when it is sent back, or a list of those of
    every output item returned after it, the first one right after it (none of them may be sent by its id without
    the reasoning)."""


GOOGLE_SKIP_SIGNATURE = 'c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I='
"""`skip_thought_signature_validator` as sent (base64): the signature Gemini documents for a function call it
did not issue (ai.google.dev/gemini-api/docs/thought-signatures, FAQ), which pydantic-ai's `GoogleModel` sends
for a call from another provider or written by hand."""


class WireViolation(AssertionError):
    """A request breaks one or more provider rules."""


def problems(kind: ProviderKind, payload: Payload, issued: Issued | None = None) -> list[str]:
    """Every rule of *kind* that *payload* breaks (empty when the request is valid)."""
    if kind == 'openai-chat':
        return openai_chat_problems(payload)
    if kind == 'openai-responses':
        return openai_responses_problems(payload, issued)
    if kind == 'anthropic':
        return anthropic_problems(payload, issued)
    if kind == 'google':
        return google_problems(payload, issued)
    raise ValueError(f'kind must be one of {", ".join(PROVIDER_KINDS)}, got {kind!r}.')


def check(kind: ProviderKind, payload: Payload, issued: Issued | None = None) -> None:
    """Raise `WireViolation` listing every rule *payload* breaks."""
    found = problems(kind, payload, issued)
    if found:
        raise WireViolation(f'{len(found)} {kind} request rule(s) broken:\n' + '\n'.join(found))


# --- helpers ---------------------------------------------------------------------------------------


def _items(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [cast('dict[str, Any]', item) for item in cast('list[Any]', value) if isinstance(item, dict)]


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{'type': 'text', 'text': content}]
    return _items(content)


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its text-like blocks or parts joined."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for block in _items(content):
        text = block.get('text')
        if isinstance(text, str):
            texts.append(text)
    return '\n'.join(texts)


def last_user_text(kind: ProviderKind, payload: Payload) -> str:
    """The text of the request's final user message (the prompt a model answers)."""
    if kind == 'openai-chat':
        messages = _items(payload.get('messages'))
        return text_of(messages[-1].get('content')) if messages and messages[-1].get('role') == 'user' else ''
    if kind == 'openai-responses':
        items = _items(payload.get('input'))
        last = items[-1] if items else {}
        return text_of(last.get('content')) if last.get('role') == 'user' else ''
    if kind == 'anthropic':
        messages = _items(payload.get('messages'))
        return text_of(messages[-1].get('content')) if messages and messages[-1].get('role') == 'user' else ''
    contents = _items(payload.get('contents'))
    return text_of(contents[-1].get('parts')) if contents and contents[-1].get('role') == 'user' else ''


# --- OpenAI Chat Completions -----------------------------------------------------------------------


def openai_chat_problems(payload: Payload) -> list[str]:
    """Rules of an OpenAI Chat Completions request (`POST /v1/chat/completions`, field `messages`).

    From the API reference (platform.openai.com/docs/api-reference/chat/create, "messages") and the
    function calling guide (platform.openai.com/docs/guides/function-calling, "Handling function calls"):

    - `[openai-chat.tool-answered]`: an assistant message with `tool_calls` is followed by one `tool`
      message per call id before any other message.
    - `[openai-chat.tool-orphan]`: a `tool` message answers a call of the assistant message just before
      its run of tool messages, and only once.
    - `[openai-chat.first-user]`: the first message that is not `system`/`developer` comes from the user.
    """
    out: list[str] = []
    messages = _items(payload.get('messages'))
    first = next((m for m in messages if m.get('role') not in ('system', 'developer')), None)
    if first is not None and first.get('role') != 'user':
        out.append(f'[openai-chat.first-user] the first non-system message is from {first.get("role")!r}, not the user')
    pending: dict[str, str] = {}
    answered: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get('role')
        if role == 'tool':
            call_id = str(message.get('tool_call_id'))
            if call_id in pending:
                del pending[call_id]
                answered.add(call_id)
            elif call_id in answered:
                out.append(f'[openai-chat.tool-orphan] message {index}: a second tool message for call {call_id}')
            else:
                out.append(
                    f'[openai-chat.tool-orphan] message {index}: tool message for {call_id} has no call before it'
                )
            continue
        if pending:
            out.append(
                f'[openai-chat.tool-answered] message {index} ({role}) comes before the tool message(s) for '
                + ', '.join(sorted(pending))
            )
            pending = {}
        answered = set()
        if role == 'assistant':
            for call in _items(message.get('tool_calls')):
                pending[str(call.get('id'))] = str(_dict(call.get('function')).get('name'))
    if pending:
        out.append('[openai-chat.tool-answered] the request ends with unanswered call(s) ' + ', '.join(sorted(pending)))
    return out


def _dict(value: Any) -> dict[str, Any]:
    return cast('dict[str, Any]', value) if isinstance(value, dict) else {}


# --- OpenAI Responses ------------------------------------------------------------------------------


def openai_responses_problems(payload: Payload, issued: Issued | None = None) -> list[str]:
    """Rules of an OpenAI Responses request (`POST /v1/responses` and `/v1/responses/compact`, field `input`).

    From the function calling guide (platform.openai.com/docs/guides/function-calling, "Handling
    function calls"), the reasoning guide (platform.openai.com/docs/guides/reasoning, "Keeping reasoning
    items in context") and the compaction guide (platform.openai.com/docs/guides/compaction):

    - `[openai-responses.call-answered]`: every `function_call` has a `function_call_output` with its `call_id`.
    - `[openai-responses.output-has-call]`: every `function_call_output` follows the `function_call` it answers.
    - `[openai-responses.reasoning-kept-with-call]`: a `reasoning` item is immediately followed by the
      output item it was returned with (a function call, a built-in tool's call such as `web_search_call`, an
      assistant message); with `issued`, the very same one.
    - `[openai-responses.opaque-unchanged]`: with `issued`, compaction and reasoning items come back
      as received (same id, same `encrypted_content`); a compaction item always carries its `encrypted_content`.
    - `[openai-responses.item-has-reasoning]`: with `issued`, an output item sent with its `id` that was returned
      right after a reasoning item comes with that reasoning item (the API refuses it otherwise: "Item 'fc_…' of
      type 'function_call' was provided without its required 'reasoning' item"). Sent without its id, it is plain
      input and needs none.
    """
    out: list[str] = []
    items = _items(payload.get('input'))
    calls: dict[str, int] = {}
    outputs: set[str] = set()
    for index, item in enumerate(items):
        kind = item.get('type')
        if kind == 'function_call':
            calls[str(item.get('call_id'))] = index
        elif kind == 'function_call_output':
            call_id = str(item.get('call_id'))
            if call_id not in calls:
                out.append(
                    f'[openai-responses.output-has-call] item {index}: output for {call_id} has no call before it'
                )
            outputs.add(call_id)
        elif kind == 'reasoning':
            following = items[index + 1] if index + 1 < len(items) else None
            if following is None or not _output_item(following):
                out.append(
                    f'[openai-responses.reasoning-kept-with-call] item {index}: reasoning {item.get("id")} is not '
                    'followed by the output item it was returned with'
                )
            elif issued is not None:
                followers = _followers(issued.opaque.get(str(item.get('id')), {}))
                expected = followers[0] if followers else None
                actual = following.get('call_id') or following.get('id')
                if expected is not None and actual is not None and actual != expected:
                    out.append(
                        f'[openai-responses.reasoning-kept-with-call] item {index}: reasoning {item.get("id")} was '
                        f'returned with {expected}, sent with {actual}'
                    )
        if kind in ('compaction', 'reasoning'):
            out.extend(_opaque_problems(index, item, issued))
    for call_id, index in calls.items():
        if call_id not in outputs:
            out.append(f'[openai-responses.call-answered] item {index}: function call {call_id} has no output')
    if issued is not None:
        reasoned = {followed: item_id for item_id, item in issued.opaque.items() for followed in _followers(item)}
        sent = {str(item.get('id')) for item in items if item.get('type') == 'reasoning'}
        for index, item in enumerate(items):
            if not item.get('id') or not _output_item(item) or item.get('type') == 'reasoning':
                continue
            reasoning = reasoned.get(str(item.get('call_id') or item.get('id')))
            if reasoning is not None and reasoning not in sent:
                out.append(
                    f'[openai-responses.item-has-reasoning] item {index}: {item.get("id")} is sent by its id without '
                    f'the reasoning item {reasoning} it was returned with'
                )
    return out


def _followers(item: dict[str, Any]) -> list[str]:
    """The ids of the output items returned after a reasoning item (`Issued.opaque`'s `followed_by`), first first."""
    followed = item.get('followed_by')
    if followed is None:
        return []
    if isinstance(followed, list | tuple):
        return [str(one) for one in cast('list[object] | tuple[object, ...]', followed)]
    return [str(followed)]


def _output_item(item: dict[str, Any]) -> bool:
    """Whether *item* is one a model outputs (and a `reasoning` item may be returned with): an assistant message,
    a function call, a built-in tool's call (`web_search_call`, `code_interpreter_call`, `mcp_call`...); not an
    input (a user, system or developer message, a tool's output), another reasoning item or a compaction."""
    kind = item.get('type')
    if kind == 'message' or (kind is None and 'role' in item):  # a message without `type` is one too
        return item.get('role') == 'assistant'
    return isinstance(kind, str) and kind not in _NOT_OUTPUT and not kind.endswith('_output')


_NOT_OUTPUT = frozenset({'reasoning', 'compaction', 'item_reference', 'mcp_approval_response'})
"""Item types a model does not output after its reasoning (besides messages and the `*_output` items)."""


def _opaque_problems(index: int, item: dict[str, Any], issued: Issued | None) -> list[str]:
    kind = item.get('type')
    if kind == 'compaction' and not item.get('encrypted_content'):
        return [f'[openai-responses.opaque-unchanged] item {index}: compaction item without its encrypted_content']
    if issued is None:
        return []
    original = issued.opaque.get(str(item.get('id')))
    if original is None:
        if kind == 'compaction':
            return [f'[openai-responses.opaque-unchanged] item {index}: compaction {item.get("id")} was never issued']
        return []
    if 'encrypted_content' in item and item.get('encrypted_content') != original.get('encrypted_content'):
        return [f'[openai-responses.opaque-unchanged] item {index}: {kind} {item.get("id")} encrypted_content changed']
    return []


# --- Anthropic -------------------------------------------------------------------------------------


def anthropic_problems(payload: Payload, issued: Issued | None = None) -> list[str]:
    """Rules of an Anthropic Messages request (`POST /v1/messages`, field `messages`).

    From the Messages API reference (docs.anthropic.com/en/api/messages, "messages": consecutive turns
    of the same role are combined into one), the tool use guide
    (docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use, "Handling tool use and
    tool result content blocks"), extended thinking (docs.anthropic.com/en/docs/build-with-claude/
    extended-thinking, "Preserving thinking blocks") and compaction (docs.anthropic.com/en/docs/
    build-with-claude/compaction: content before a compaction block is ignored):

    - `[anthropic.roles]`: roles are `user` and `assistant`; the turns alternate starting with `user`
      (consecutive messages of one role count as one turn), or with the assistant turn that opens with
      a compaction block. A `system` entry (mid-conversation system messages, docs.anthropic.com/en/docs/
      build-with-claude/mid-conversation-system-messages: Claude Opus 4.8 and later) comes right after a
      user turn, or after such an entry, and is not a turn.
    - `[anthropic.tool-result-first]`: every `tool_use` is answered by a `tool_result` in the very next
      turn, a user turn whose content starts with its tool results; no `tool_result` without its call, and
      one per call ("each tool_use must have a single result").
    - `[anthropic.content-not-empty]`: the request has messages; every message has content, but for a final
      assistant message (a prefill), and no text block is blank ("text content blocks must contain
      non-whitespace text").
    - `[anthropic.thinking-unmodified]`: with thinking enabled, the assistant turn of the running tool
      loop starts with its signed `thinking` block (after any compaction block); thinking blocks carry a
      signature and, with `issued`, the exact text signed; compaction blocks come back as issued.
    - `[anthropic.thinking-tool-choice]`: with thinking enabled, `tool_choice` is `auto` or `none`
      (extended thinking, "Extended thinking with tool use").
    """
    out: list[str] = []
    messages = _items(payload.get('messages'))
    if not messages:
        out.append('[anthropic.content-not-empty] the request has no messages')
    turns: list[tuple[str, list[dict[str, Any]], int]] = []
    for index, message in enumerate(messages):
        role = message.get('role')
        blocks = _blocks(message.get('content'))
        out.extend(_thinking_problems(index, blocks, issued))
        out.extend(_empty_content(index, message, blocks, last=index == len(messages) - 1))
        if role == 'system':
            previous = messages[index - 1].get('role') if index else None
            if previous not in ('user', 'system') or not turns or turns[-1][0] != 'user':
                out.append(f'[anthropic.roles] message {index}: a system entry not after a user turn')
            continue
        if role not in ('user', 'assistant'):
            out.append(f'[anthropic.roles] message {index}: role {role!r}')
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((str(role), list(blocks), index))
    if turns and turns[0][0] != 'user' and not (turns[0][1] and turns[0][1][0].get('type') == 'compaction'):
        out.append('[anthropic.roles] the first turn is from the assistant and does not open with a compaction block')
    for position, (role, blocks, index) in enumerate(turns):
        following = turns[position + 1] if position + 1 < len(turns) else None
        if role == 'user':
            results = [str(b.get('tool_use_id')) for b in blocks if b.get('type') == 'tool_result']
            for tool_use_id in sorted({r for r in results if results.count(r) > 1}):
                out.append(
                    f'[anthropic.tool-result-first] message {index}: more than one tool_result for {tool_use_id}'
                )
            before = turns[position - 1][1] if position > 0 else []
            called = {str(b.get('id')) for b in before if b.get('type') == 'tool_use'}
            for tool_use_id in results:
                if tool_use_id not in called:
                    out.append(
                        f'[anthropic.tool-result-first] message {index}: tool_result for {tool_use_id} does not '
                        'answer a tool_use of the turn before it'
                    )
            leading = 0
            while leading < len(blocks) and blocks[leading].get('type') == 'tool_result':
                leading += 1
            if leading < len(results):
                out.append(f'[anthropic.tool-result-first] message {index}: tool_result blocks must come first')
            continue
        uses = [str(b.get('id')) for b in blocks if b.get('type') == 'tool_use']
        answered = (
            {str(b.get('tool_use_id')) for b in following[1] if b.get('type') == 'tool_result'}
            if following is not None
            else set[str]()
        )
        missing = [u for u in uses if u not in answered]
        if missing:
            out.append(
                f'[anthropic.tool-result-first] message {index}: tool_use {", ".join(missing)} without a '
                'tool_result in the next turn'
            )
    thinking = _dict(payload.get('thinking'))
    if thinking and thinking.get('type') != 'disabled':
        out.extend(_running_loop_problems(turns))
        choice = _dict(payload.get('tool_choice')).get('type')
        if choice not in (None, 'auto', 'none'):
            out.append(f'[anthropic.thinking-tool-choice] tool_choice {choice!r} with thinking enabled')
    return out


def _empty_content(index: int, message: dict[str, Any], blocks: list[dict[str, Any]], *, last: bool) -> list[str]:
    """`[anthropic.content-not-empty]` of one message: no content at all, or a blank text block."""
    if last and message.get('role') == 'assistant':
        return []  # a prefill the model goes on from may be empty
    if not blocks:
        return [f'[anthropic.content-not-empty] message {index}: {message.get("role")} message without content']
    return [
        f'[anthropic.content-not-empty] message {index}: a blank text block'
        for block in blocks
        if block.get('type') == 'text' and not str(block.get('text') or '').strip()
    ]


def _thinking_problems(index: int, blocks: list[dict[str, Any]], issued: Issued | None) -> list[str]:
    out: list[str] = []
    for block in blocks:
        kind = block.get('type')
        if kind == 'thinking':
            signature = block.get('signature')
            if not signature:
                out.append(f'[anthropic.thinking-unmodified] message {index}: thinking block without a signature')
            elif issued is not None:
                expected = issued.signed.get(str(signature))
                if expected is None:
                    out.append(f'[anthropic.thinking-unmodified] message {index}: thinking signature never issued')
                elif expected != block.get('thinking'):
                    out.append(f'[anthropic.thinking-unmodified] message {index}: signed thinking text changed')
        elif kind == 'compaction' and issued is not None and block.get('signature'):
            original = issued.opaque.get(str(block.get('signature')))
            if original is None or original.get('content') != block.get('content'):
                out.append(
                    f'[anthropic.thinking-unmodified] message {index}: compaction block differs from the one issued'
                )
    return out


def _running_loop_problems(turns: Sequence[tuple[str, list[dict[str, Any]], int]]) -> list[str]:
    """With thinking on, the assistant turn whose tool results end the request starts with thinking."""
    if len(turns) < 2 or turns[-1][0] != 'user' or turns[-2][0] != 'assistant':
        return []
    if not any(b.get('type') == 'tool_result' for b in turns[-1][1]):
        return []
    blocks = turns[-2][1]
    compactions = [i for i, b in enumerate(blocks) if b.get('type') == 'compaction']
    rest = blocks[compactions[-1] + 1 :] if compactions else blocks
    if rest and rest[0].get('type') not in ('thinking', 'redacted_thinking'):
        return [
            f'[anthropic.thinking-unmodified] message {turns[-2][2]}: with thinking enabled, the assistant turn of '
            f'the running tool loop must start with its thinking block, not {rest[0].get("type")!r}'
        ]
    return []


# --- Google Gemini ---------------------------------------------------------------------------------


def google_problems(payload: Payload, issued: Issued | None = None) -> list[str]:
    """Rules of a Gemini `generateContent` request (field `contents`).

    From the function calling guide (ai.google.dev/gemini-api/docs/function-calling, "Function calling
    with thinking" and "Parallel function calling") and thought signatures
    (ai.google.dev/gemini-api/docs/thought-signatures):

    - `[google.roles]`: roles are `user` and `model`.
    - `[google.parts-not-empty]`: every content has parts ("contents.parts must not be empty").
    - `[google.call-position]`: a model turn with function calls comes right after a user turn (a prompt
      or function responses).
    - `[google.call-answered]`: the turn after a function call turn is a user turn with one
      `functionResponse` per `functionCall`, same names (and ids when given); no response without its call.
    - `[google.signature-unmodified]`: with `issued`, signed function calls come back with the signature
      and the call exactly as issued, and the first call of each step of the current turn keeps its signature;
      a call Gemini did not sign (another provider's, one written by hand) may carry the documented
      `GOOGLE_SKIP_SIGNATURE`.
    """
    out: list[str] = []
    contents = _items(payload.get('contents'))
    for index, content in enumerate(contents):
        role = content.get('role')
        if role not in ('user', 'model'):
            out.append(f'[google.roles] content {index}: role {role!r}')
        parts = _items(content.get('parts'))
        if not parts:
            out.append(f'[google.parts-not-empty] content {index}: no parts')
        calls = [_dict(p.get('functionCall')) for p in parts if 'functionCall' in p]
        responses = [_dict(p.get('functionResponse')) for p in parts if 'functionResponse' in p]
        if calls:
            if index == 0 or contents[index - 1].get('role') != 'user':
                out.append(f'[google.call-position] content {index}: function call turn does not follow a user turn')
            following = contents[index + 1] if index + 1 < len(contents) else None
            answers = (
                [_dict(p.get('functionResponse')) for p in _items(following.get('parts')) if 'functionResponse' in p]
                if following is not None and following.get('role') == 'user'
                else []
            )
            if following is None:
                out.append(f'[google.call-answered] content {index}: the request ends with unanswered function calls')
            elif len(answers) != len(calls) or sorted(_call_key(c) for c in calls) != sorted(
                _call_key(a) for a in answers
            ):
                out.append(
                    f'[google.call-answered] content {index}: {len(calls)} function call(s) '
                    f'{sorted(_call_key(c) for c in calls)} answered by {len(answers)} response(s) '
                    f'{sorted(_call_key(a) for a in answers)}'
                )
        if responses:
            before = contents[index - 1] if index > 0 else {}
            called = [_dict(p.get('functionCall')) for p in _items(before.get('parts')) if 'functionCall' in p]
            if before.get('role') != 'model' or not called:
                out.append(f'[google.call-answered] content {index}: function responses without the calls before them')
        out.extend(_signature_problems(index, parts, issued))
    out.extend(_current_turn_signatures(contents, issued))
    return out


def _call_key(call: dict[str, Any]) -> str:
    return f'{call.get("name")}#{call.get("id")}' if call.get('id') else str(call.get('name'))


def _signature_problems(index: int, parts: list[dict[str, Any]], issued: Issued | None) -> list[str]:
    if issued is None:
        return []
    out: list[str] = []
    for part in parts:
        signature = part.get('thoughtSignature')
        if not signature or 'functionCall' not in part:
            continue
        expected = issued.signed.get(str(signature))
        if expected is None and signature == GOOGLE_SKIP_SIGNATURE:
            # Accepted for a call Gemini did not sign; a call it signed must keep its own signature.
            if _canonical(part.get('functionCall')) in issued.signed.values():
                out.append(f'[google.signature-unmodified] content {index}: a signed function call lost its signature')
        elif expected is None:
            out.append(f'[google.signature-unmodified] content {index}: thought signature never issued')
        elif expected != _canonical(part.get('functionCall')):
            out.append(f'[google.signature-unmodified] content {index}: the signed function call changed')
    return out


def _current_turn_signatures(contents: Sequence[dict[str, Any]], issued: Issued | None) -> list[str]:
    """The current turn starts after the last user turn holding text; its signed steps keep their signatures."""
    if issued is None or not issued.signed:
        return []
    start = 0
    for index, content in enumerate(contents):
        parts = _items(content.get('parts'))
        if content.get('role') == 'user' and any('text' in p for p in parts):
            start = index + 1
    signed_calls = set(issued.signed.values())
    out: list[str] = []
    for index in range(start, len(contents)):
        parts = [p for p in _items(contents[index].get('parts')) if 'functionCall' in p]
        if not parts or contents[index].get('role') != 'model':
            continue
        first = parts[0]
        if not first.get('thoughtSignature') and _canonical(first.get('functionCall')) in signed_calls:
            out.append(
                f'[google.signature-unmodified] content {index}: the first function call of a step in the current '
                'turn lost its thought signature'
            )
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
