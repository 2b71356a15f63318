"""The payload validators: valid requests pass, each known-bad request fails naming the rule it breaks."""

from __future__ import annotations

from typing import Any

import pytest

from pydantic_ai_compaction.testing import wire

SIG = 'EskFCkYIBhgCKkBWb6bErX7M5yI4xg6T758WOxfjjTUKmhPCMt4'
GSIG = 'c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I='

CHAT_OK: dict[str, Any] = {
    'messages': [
        {'role': 'system', 'content': 'You are a helpful assistant.'},
        {'role': 'user', 'content': 'What is the temperature in Tokyo?'},
        {
            'role': 'assistant',
            'content': None,
            'tool_calls': [
                {'id': 'call_a', 'type': 'function', 'function': {'name': 'get_temperature', 'arguments': '{}'}},
                {'id': 'call_b', 'type': 'function', 'function': {'name': 'get_temperature', 'arguments': '{}'}},
            ],
        },
        {'role': 'tool', 'tool_call_id': 'call_a', 'content': '20.0'},
        {'role': 'tool', 'tool_call_id': 'call_b', 'content': '21.0'},
        {'role': 'user', 'content': 'And tomorrow?'},
    ]
}

RESPONSES_OK: dict[str, Any] = {
    'input': [
        {'id': 'cmp_1', 'type': 'compaction', 'encrypted_content': 'gAAAA-1'},
        {'role': 'user', 'content': 'and: 5, 5?'},
        {'id': 'rs_1', 'type': 'reasoning', 'summary': [], 'encrypted_content': 'gAAAA-r1'},
        {'type': 'function_call', 'id': 'fc_1', 'call_id': 'call_1', 'name': 'add', 'arguments': '{}'},
        {'type': 'function_call_output', 'call_id': 'call_1', 'output': '10'},
    ]
}

ANTHROPIC_OK: dict[str, Any] = {
    'thinking': {'type': 'enabled', 'budget_tokens': 1024},
    'messages': [
        {'role': 'user', 'content': [{'type': 'text', 'text': 'Create a person'}]},
        {
            'role': 'assistant',
            'content': [
                {'type': 'thinking', 'thinking': 'I should call the tool.', 'signature': SIG},
                {'type': 'tool_use', 'id': 'toolu_1', 'name': 'final_result', 'input': {}},
            ],
        },
        {
            'role': 'user',
            'content': [
                {'type': 'tool_result', 'tool_use_id': 'toolu_1', 'content': 'ok'},
                {'type': 'text', 'text': 'continue'},
            ],
        },
    ],
}

GOOGLE_OK: dict[str, Any] = {
    'contents': [
        {'role': 'user', 'parts': [{'text': 'What is the answer?'}]},
        {
            'role': 'model',
            'parts': [
                {'functionCall': {'id': 'call_1', 'name': 'get_answer', 'args': {}}, 'thoughtSignature': GSIG},
                {'functionCall': {'id': 'call_2', 'name': 'get_answer', 'args': {}}},
            ],
        },
        {
            'role': 'user',
            'parts': [
                {'functionResponse': {'id': 'call_1', 'name': 'get_answer', 'response': {'return_value': 42}}},
                {'functionResponse': {'id': 'call_2', 'name': 'get_answer', 'response': {'return_value': 43}}},
            ],
        },
    ]
}


def issued() -> wire.Issued:
    return wire.Issued(
        signed={
            SIG: 'I should call the tool.',
            GSIG: '{"args": {}, "id": "call_1", "name": "get_answer"}',
        },
        opaque={
            'cmp_1': {'id': 'cmp_1', 'type': 'compaction', 'encrypted_content': 'gAAAA-1'},
            'rs_1': {'id': 'rs_1', 'type': 'reasoning', 'encrypted_content': 'gAAAA-r1', 'followed_by': 'call_1'},
        },
    )


@pytest.mark.parametrize(
    ('kind', 'payload'),
    [('openai-chat', CHAT_OK), ('openai-responses', RESPONSES_OK), ('anthropic', ANTHROPIC_OK), ('google', GOOGLE_OK)],
)
def test_valid_requests_pass(kind: wire.ProviderKind, payload: dict[str, Any]) -> None:
    assert wire.problems(kind, payload, issued()) == []
    wire.check(kind, payload, issued())


def test_a_system_entry_after_a_user_turn_passes() -> None:
    """Mid-conversation system messages (Claude Opus 4.8 and later; pydantic-ai 2.68 sends them): an entry,
    or several, right after a user turn, outside the alternation of turns."""
    system = {'role': 'system', 'content': [{'type': 'text', 'text': 'Answer briefly.'}]}
    messages = ANTHROPIC_OK['messages']
    payload = {**ANTHROPIC_OK, 'messages': [messages[0], system, system, *messages[1:], system]}
    assert wire.problems('anthropic', payload, issued()) == []


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {'messages': list(messages)}


CALL = {'role': 'assistant', 'tool_calls': [{'id': 'call_a', 'type': 'function', 'function': {'name': 'f'}}]}
USER = {'role': 'user', 'content': 'hi'}

BAD: list[tuple[str, wire.ProviderKind, dict[str, Any], str]] = [
    ('chat: text before the tool message', 'openai-chat', chat(USER, CALL, USER), 'openai-chat.tool-answered'),
    (
        'chat: one of two calls unanswered',
        'openai-chat',
        chat(*CHAT_OK['messages'][:4], USER),
        'openai-chat.tool-answered',
    ),
    ('chat: ends with an open call', 'openai-chat', chat(USER, CALL), 'openai-chat.tool-answered'),
    (
        'chat: tool message without a call',
        'openai-chat',
        chat(USER, {'role': 'tool', 'tool_call_id': 'x'}),
        'openai-chat.tool-orphan',
    ),
    (
        'chat: two answers for one call',
        'openai-chat',
        chat(USER, CALL, {'role': 'tool', 'tool_call_id': 'call_a'}, {'role': 'tool', 'tool_call_id': 'call_a'}),
        'openai-chat.tool-orphan',
    ),
    (
        'chat: assistant speaks first',
        'openai-chat',
        chat({'role': 'system', 'content': 's'}, {'role': 'assistant', 'content': 'hello'}, USER),
        'openai-chat.first-user',
    ),
    (
        'responses: call without output',
        'openai-responses',
        {'input': RESPONSES_OK['input'][:4]},
        'openai-responses.call-answered',
    ),
    (
        'responses: output without call',
        'openai-responses',
        {'input': [RESPONSES_OK['input'][1], RESPONSES_OK['input'][4]]},
        'openai-responses.output-has-call',
    ),
    (
        'responses: reasoning separated from its call',
        'openai-responses',
        {'input': [*RESPONSES_OK['input'][:3], RESPONSES_OK['input'][1], *RESPONSES_OK['input'][3:]]},
        'openai-responses.reasoning-kept-with-call',
    ),
    (
        'responses: reasoning followed by another call than its own',
        'openai-responses',
        {
            'input': [
                *RESPONSES_OK['input'][:3],
                {'type': 'function_call', 'call_id': 'call_9', 'name': 'add', 'arguments': '{}'},
                {'type': 'function_call_output', 'call_id': 'call_9', 'output': '1'},
            ]
        },
        'openai-responses.reasoning-kept-with-call',
    ),
    (
        'responses: call sent by its id without the reasoning it came with',
        'openai-responses',
        {'input': [RESPONSES_OK['input'][1], *RESPONSES_OK['input'][3:]]},
        'openai-responses.item-has-reasoning',
    ),
    (
        'responses: compaction item changed',
        'openai-responses',
        {'input': [{**RESPONSES_OK['input'][0], 'encrypted_content': 'gAAAA-edited'}, *RESPONSES_OK['input'][1:]]},
        'openai-responses.opaque-unchanged',
    ),
    (
        'responses: compaction item without its content',
        'openai-responses',
        {'input': [{'id': 'cmp_1', 'type': 'compaction'}, *RESPONSES_OK['input'][1:]]},
        'openai-responses.opaque-unchanged',
    ),
    (
        'responses: reasoning followed by a user message',
        'openai-responses',
        {'input': [RESPONSES_OK['input'][1], RESPONSES_OK['input'][2], {'role': 'user', 'content': 'go on'}]},
        'openai-responses.reasoning-kept-with-call',
    ),
    (
        'responses: reasoning followed by another reasoning item',
        'openai-responses',
        {'input': [RESPONSES_OK['input'][1], RESPONSES_OK['input'][2], *RESPONSES_OK['input'][2:]]},
        'openai-responses.reasoning-kept-with-call',
    ),
    ('anthropic: no messages', 'anthropic', {'messages': []}, 'anthropic.content-not-empty'),
    (
        'anthropic: a user message without content',
        'anthropic',
        {'messages': [{'role': 'user', 'content': []}, *ANTHROPIC_OK['messages'][1:]]},
        'anthropic.content-not-empty',
    ),
    (
        'anthropic: a blank text block',
        'anthropic',
        {'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': ' '}]}, *ANTHROPIC_OK['messages'][1:]]},
        'anthropic.content-not-empty',
    ),
    (
        'anthropic: an empty prompt',
        'anthropic',
        {'messages': [{'role': 'user', 'content': ''}, *ANTHROPIC_OK['messages'][1:]]},
        'anthropic.content-not-empty',
    ),
    (
        'anthropic: two results for one tool_use',
        'anthropic',
        {
            **ANTHROPIC_OK,
            'messages': [
                *ANTHROPIC_OK['messages'][:2],
                {
                    'role': 'user',
                    'content': [
                        {'type': 'tool_result', 'tool_use_id': 'toolu_1', 'content': 'ok'},
                        {'type': 'tool_result', 'tool_use_id': 'toolu_1', 'content': 'ok'},
                    ],
                },
            ],
        },
        'anthropic.tool-result-first',
    ),
    (
        'google: a content without parts',
        'google',
        {'contents': [{'role': 'user', 'parts': []}]},
        'google.parts-not-empty',
    ),
    (
        'anthropic: starts with the assistant',
        'anthropic',
        {'messages': ANTHROPIC_OK['messages'][1:]},
        'anthropic.roles',
    ),
    (
        'anthropic: a system entry first',
        'anthropic',
        {'messages': [{'role': 'system', 'content': 'x'}, *ANTHROPIC_OK['messages']]},
        'anthropic.roles',
    ),
    (
        'anthropic: a system entry after an assistant turn',
        'anthropic',
        {'messages': [*ANTHROPIC_OK['messages'][:2], {'role': 'system', 'content': 'x'}, ANTHROPIC_OK['messages'][2]]},
        'anthropic.roles',
    ),
    (
        'anthropic: unknown role',
        'anthropic',
        {'messages': [*ANTHROPIC_OK['messages'], {'role': 'developer', 'content': 'x'}]},
        'anthropic.roles',
    ),
    (
        'anthropic: text before the tool result',
        'anthropic',
        {
            **ANTHROPIC_OK,
            'messages': [
                *ANTHROPIC_OK['messages'][:2],
                {'role': 'user', 'content': list(reversed(ANTHROPIC_OK['messages'][2]['content']))},
            ],
        },
        'anthropic.tool-result-first',
    ),
    (
        'anthropic: tool_use without result',
        'anthropic',
        {'messages': [*ANTHROPIC_OK['messages'][:2], {'role': 'user', 'content': 'go on'}]},
        'anthropic.tool-result-first',
    ),
    (
        'anthropic: tool_result without its tool_use',
        'anthropic',
        {
            'messages': [
                ANTHROPIC_OK['messages'][0],
                {'role': 'assistant', 'content': 'ok'},
                ANTHROPIC_OK['messages'][2],
            ]
        },
        'anthropic.tool-result-first',
    ),
    (
        'anthropic: thinking dropped from the running tool loop',
        'anthropic',
        {
            **ANTHROPIC_OK,
            'messages': [
                ANTHROPIC_OK['messages'][0],
                {'role': 'assistant', 'content': ANTHROPIC_OK['messages'][1]['content'][1:]},
                ANTHROPIC_OK['messages'][2],
            ],
        },
        'anthropic.thinking-unmodified',
    ),
    (
        'anthropic: signed thinking edited',
        'anthropic',
        {
            **ANTHROPIC_OK,
            'messages': [
                ANTHROPIC_OK['messages'][0],
                {
                    'role': 'assistant',
                    'content': [
                        {'type': 'thinking', 'thinking': 'I should call the tool!', 'signature': SIG},
                        ANTHROPIC_OK['messages'][1]['content'][1],
                    ],
                },
                ANTHROPIC_OK['messages'][2],
            ],
        },
        'anthropic.thinking-unmodified',
    ),
    (
        'anthropic: forced tool choice with thinking',
        'anthropic',
        {**ANTHROPIC_OK, 'tool_choice': {'type': 'any'}},
        'anthropic.thinking-tool-choice',
    ),
    (
        'google: unknown role',
        'google',
        {'contents': [{'role': 'assistant', 'parts': [{'text': 'x'}]}, *GOOGLE_OK['contents']]},
        'google.roles',
    ),
    (
        'google: call turn after a model turn',
        'google',
        {
            'contents': [
                GOOGLE_OK['contents'][0],
                {'role': 'model', 'parts': [{'text': 'let me see'}]},
                *GOOGLE_OK['contents'][1:],
            ]
        },
        'google.call-position',
    ),
    (
        'google: one of two calls answered',
        'google',
        {
            'contents': [
                *GOOGLE_OK['contents'][:2],
                {'role': 'user', 'parts': GOOGLE_OK['contents'][2]['parts'][:1]},
            ]
        },
        'google.call-answered',
    ),
    (
        'google: response without its call',
        'google',
        {'contents': [GOOGLE_OK['contents'][0], {'role': 'model', 'parts': [{'text': 'x'}]}, GOOGLE_OK['contents'][2]]},
        'google.call-answered',
    ),
    (
        'google: signed call edited',
        'google',
        {
            'contents': [
                GOOGLE_OK['contents'][0],
                {
                    'role': 'model',
                    'parts': [
                        {
                            'functionCall': {'id': 'call_1', 'name': 'get_answer', 'args': {'x': 1}},
                            'thoughtSignature': GSIG,
                        },
                        GOOGLE_OK['contents'][1]['parts'][1],
                    ],
                },
                GOOGLE_OK['contents'][2],
            ]
        },
        'google.signature-unmodified',
    ),
    (
        'google: signature dropped in the current turn',
        'google',
        {
            'contents': [
                GOOGLE_OK['contents'][0],
                {
                    'role': 'model',
                    'parts': [
                        {'functionCall': {'id': 'call_1', 'name': 'get_answer', 'args': {}}},
                        GOOGLE_OK['contents'][1]['parts'][1],
                    ],
                },
                GOOGLE_OK['contents'][2],
            ]
        },
        'google.signature-unmodified',
    ),
]


@pytest.mark.parametrize(('kind', 'payload', 'rule'), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_each_broken_rule_is_named(kind: wire.ProviderKind, payload: dict[str, Any], rule: str) -> None:
    found = wire.problems(kind, payload, issued())
    assert found, 'the broken request passed'
    assert any(problem.startswith(f'[{rule}]') for problem in found), found
    with pytest.raises(wire.WireViolation, match=rf'\[{rule}\]'):
        wire.check(kind, payload, issued())


def test_without_issued_items_only_payload_rules_apply() -> None:
    edited = {
        **ANTHROPIC_OK,
        'messages': [
            ANTHROPIC_OK['messages'][0],
            {
                'role': 'assistant',
                'content': [
                    {'type': 'thinking', 'thinking': 'edited', 'signature': SIG},
                    ANTHROPIC_OK['messages'][1]['content'][1],
                ],
            },
            ANTHROPIC_OK['messages'][2],
        ],
    }
    # Nothing to compare the text with: only the payload's own shape is checked.
    assert wire.problems('anthropic', edited) == []
    unsigned = {
        **edited,
        'messages': [
            edited['messages'][0],
            {
                'role': 'assistant',
                'content': [{'type': 'thinking', 'thinking': 'x'}, edited['messages'][1]['content'][1]],
            },
            edited['messages'][2],
        ],
    }
    assert wire.problems('anthropic', unsigned) == [
        '[anthropic.thinking-unmodified] message 1: thinking block without a signature'
    ]


def test_a_request_may_open_with_a_compaction_block() -> None:
    """pydantic-ai trims what precedes an Anthropic compaction block; the API ignores it anyway."""
    payload = {
        'thinking': {'type': 'enabled', 'budget_tokens': 1024},
        'messages': [
            {'role': 'assistant', 'content': [{'type': 'compaction', 'content': 'Summary: user said hello.'}]},
            ANTHROPIC_OK['messages'][1],
            ANTHROPIC_OK['messages'][2],
        ],
    }
    assert wire.problems('anthropic', payload) == []


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="got 'bedrock'"):
        wire.problems('bedrock', {})  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    'output',
    [
        {'type': 'web_search_call', 'id': 'ws_1', 'status': 'completed', 'action': {'type': 'search', 'query': 'x'}},
        {'type': 'code_interpreter_call', 'id': 'ci_1', 'status': 'completed', 'code': '1', 'container_id': 'c'},
        {'type': 'mcp_call', 'id': 'mcp_1', 'name': 'f', 'arguments': '{}', 'server_label': 's'},
        {'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'hi'}]},
        {'role': 'assistant', 'content': 'hi'},  # a message without `type`
    ],
)
def test_reasoning_may_be_followed_by_any_output_item(output: dict[str, Any]) -> None:
    """A reasoning model using a built-in tool returns `reasoning` then `web_search_call`: pydantic-ai sends it back
    so, and the rule named that a violation (`wire.check` failed every request of an agent with web search)."""
    user = {'role': 'user', 'content': 'look it up'}
    reasoning = {'id': 'rs_9', 'type': 'reasoning', 'summary': [], 'encrypted_content': 'gAAAA-r9'}
    assert wire.problems('openai-responses', {'input': [user, reasoning, output, user]}) == []


def test_a_final_assistant_prefill_may_be_empty() -> None:
    payload = {'messages': [ANTHROPIC_OK['messages'][0], {'role': 'assistant', 'content': ''}]}
    assert wire.problems('anthropic', payload) == []


def test_a_call_whose_reasoning_was_dropped_is_valid_without_its_id() -> None:
    # Sent as plain input (no item id), the call needs no reasoning item: what `ForgetReasoning` sends.
    call = {key: value for key, value in RESPONSES_OK['input'][3].items() if key != 'id'}
    payload = {'input': [RESPONSES_OK['input'][1], call, RESPONSES_OK['input'][4]]}
    assert wire.problems('openai-responses', payload, issued()) == []


def test_every_item_returned_after_a_reasoning_item_needs_it_to_go_back_by_its_id() -> None:
    """`followed_by` lists every output item returned after the reasoning: the second call sent by its id without
    the reasoning is refused as the first would be; sent by its call id alone, it is accepted."""
    given = wire.Issued(
        opaque={'rs_1': {'id': 'rs_1', 'type': 'reasoning', 'encrypted_content': 'e', 'followed_by': ['c1', 'c2']}}
    )
    second = {'type': 'function_call', 'call_id': 'c2', 'id': 'fc_2', 'name': 'add', 'arguments': '{}'}
    payload = {'input': [second, {'type': 'function_call_output', 'call_id': 'c2', 'output': '1'}]}
    assert wire.problems('openai-responses', payload, given) == [
        '[openai-responses.item-has-reasoning] item 0: fc_2 is sent by its id without the reasoning item rs_1 it was '
        'returned with'
    ]
    plain = {'input': [{k: v for k, v in second.items() if k != 'id'}, payload['input'][1]]}
    assert wire.problems('openai-responses', plain, given) == []
