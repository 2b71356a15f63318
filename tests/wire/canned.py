"""Provider responses built from the templates in `fixtures/`, each shaped like a recorded exchange.

Every template names the pydantic-ai cassette it follows. Builders copy a template and fill in the
scripted content with ids unique to the request, so no two responses share an id.
"""

from __future__ import annotations

import base64
import copy
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .providers import Say

FIXTURES = Path(__file__).parent / 'fixtures'


@cache
def _template(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f'{name}.json').read_text())


def template(name: str, key: str = 'response') -> dict[str, Any]:
    """A fresh copy of one entry of a fixture file."""
    return copy.deepcopy(_template(name)[key])


def _usage_numbers(prompt: int) -> tuple[int, int]:
    # The request's own size (about 4 bytes a token): the trigger estimate anchors on reported usage,
    # so it must grow with the history as a provider's would.
    return prompt, 20


def openai_chat_completion(say: Say, n: int, prompt: int) -> dict[str, Any]:
    body = template('openai_chat_completion')
    choice = body['choices'][0]
    body['id'] = f'chatcmpl-{n:06d}'
    if say.calls:
        calls: list[dict[str, Any]] = []
        for index, call in enumerate(say.calls):
            item = template('openai_chat_completion', 'tool_call')
            item['id'] = f'call_{n:04d}_{index}'
            item['function'] = {'name': call.name, 'arguments': json.dumps(call.args)}
            calls.append(item)
        choice['message']['tool_calls'] = calls
        # What OpenAI-compatible reasoning servers (DeepSeek, vLLM) add beside the calls.
        choice['message']['reasoning_content'] = f'Step {n}: which log to read next.'
    else:
        choice['finish_reason'] = 'stop'
        choice['message']['content'] = say.text
        del choice['message']['tool_calls']
    prompt, completion = _usage_numbers(prompt)
    body['usage'].update(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
    return body


def openai_response(say: Say, n: int, prompt: int) -> dict[str, Any]:
    body = template('openai_response')
    body['id'] = f'resp_{n:06d}'
    reasoning = template('openai_response', 'reasoning')
    reasoning['id'] = f'rs_{n:06d}'
    reasoning['encrypted_content'] = f'gAAAAAB-reasoning-{n:06d}'
    output: list[dict[str, Any]] = [reasoning]
    for index, call in enumerate(say.calls):
        item = template('openai_response', 'function_call')
        item.update(id=f'fc_{n:04d}_{index}', call_id=f'call_{n:04d}_{index}', name=call.name)
        item['arguments'] = json.dumps(call.args)
        output.append(item)
    if not say.calls:
        message = template('openai_response', 'message')
        message['id'] = f'msg_{n:06d}'
        message['content'][0]['text'] = say.text
        output.append(message)
    body['output'] = output
    prompt, completion = _usage_numbers(prompt)
    body['usage'].update(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion)
    return body


def openai_responses_compaction(n: int) -> dict[str, Any]:
    body = template('openai_responses_compaction')
    body['id'] = f'resp_cmp_{n:06d}'
    item = body['output'][-1]
    item['id'] = f'cmp_{n:06d}'
    item['encrypted_content'] = f'{item["encrypted_content"]}-{n:06d}'
    return body


def anthropic_message(say: Say, n: int, prompt: int, *, thinking: bool) -> dict[str, Any]:
    body = template('anthropic_message')
    body['id'] = f'msg_{n:06d}'
    content: list[dict[str, Any]] = []
    if thinking:
        block = template('anthropic_message', 'thinking')
        block['signature'] = f'{block["signature"]}{n:06d}'
        block['thinking'] = f'Step {n}: {block["thinking"]}'
        content.append(block)
    for index, call in enumerate(say.calls):
        use = template('anthropic_message', 'tool_use')
        use.update(id=f'toolu_{n:04d}_{index}', name=call.name, input=call.args)
        content.append(use)
    if not say.calls:
        text = template('anthropic_message', 'text')
        text['text'] = say.text
        content.append(text)
        body['stop_reason'] = 'end_turn'
    body['content'] = content
    prompt, completion = _usage_numbers(prompt)
    body['usage'].update(input_tokens=prompt, output_tokens=completion)
    return body


def anthropic_compaction(n: int) -> dict[str, Any]:
    body = template('anthropic_compaction')
    body['id'] = f'msg_cmp_{n:06d}'
    block = body['content'][0]
    block['signature'] = f'{block["signature"]}{n:06d}'
    block['content'] = f'Summary {n}: the logs read so far are clean; continue with the next one.'
    return body


def google_response(say: Say, n: int, prompt: int) -> dict[str, Any]:
    body = template('google_response')
    body['responseId'] = f'resp-{n:06d}'
    parts: list[dict[str, Any]] = []
    if say.calls:
        # A thought summary part, as Gemini returns with `includeThoughts`.
        parts.append({'text': f'Step {n}: which log to read next.', 'thought': True})
    for index, call in enumerate(say.calls):
        part = template('google_response', 'function_call')
        part['functionCall'] = {'args': call.args, 'id': f'call_{n:04d}_{index}', 'name': call.name}
        if index == 0:
            # Gemini signs the first function call of a step only.
            signed = base64.b64decode(part['thoughtSignature']) + f'-{n:06d}'.encode()
            part['thoughtSignature'] = base64.b64encode(signed).decode()
        else:
            del part['thoughtSignature']
        parts.append(part)
    if not say.calls:
        part = template('google_response', 'text')
        part['text'] = say.text
        parts.append(part)
    body['candidates'][0]['content']['parts'] = parts
    prompt, completion = _usage_numbers(prompt)
    body['usageMetadata'].update(
        promptTokenCount=prompt, candidatesTokenCount=completion, totalTokenCount=prompt + completion
    )
    body['usageMetadata']['promptTokensDetails'][0]['tokenCount'] = prompt
    return body


def openai_error(status: int) -> dict[str, Any]:
    return template('errors', 'openai')


def anthropic_error(status: int) -> dict[str, Any]:
    return template('errors', 'anthropic')


def google_error(status: int) -> dict[str, Any]:
    body = template('errors', 'google')
    body['error']['code'] = status
    return body
