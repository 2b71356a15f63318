"""A small server on 127.0.0.1 that speaks the OpenAI Chat Completions API, for the `--base-url` tests.

It answers like an instruction-following model would: compactor prompts (recognized by their marker)
get a reply in the requested format, agent requests call the first non-output tool twice and then the
output tool with arguments built from its JSON schema. It serves a bounded number of
requests for a bounded time and then stops by itself.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .script import Script

MAX_REQUESTS = 2_000
MAX_SECONDS = 120.0


def instance(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A small valid value for a JSON schema (the subset pydantic emits for tool parameters)."""
    defs = defs if defs is not None else schema.get('$defs', {})
    if '$ref' in schema:
        return instance(defs[schema['$ref'].rsplit('/', 1)[-1]], defs)
    if 'enum' in schema:
        return schema['enum'][0]
    for key in ('anyOf', 'oneOf', 'allOf'):
        if key in schema:
            return instance(schema[key][0], defs)
    kind = schema.get('type')
    if kind == 'object':
        return {name: instance(sub, defs) for name, sub in schema.get('properties', {}).items()}
    if kind == 'array':
        return [instance(schema.get('items', {}), defs)]
    if kind == 'integer':
        return max(1, int(schema.get('minimum', 1)))
    if kind == 'number':
        return 1.0
    if kind == 'boolean':
        return True
    return 'inc-1'


@dataclass
class Stub:
    """What the server answers and what it saw."""

    broken: bool = False
    """Answer compactor prompts the way a model that copies a prompt's example literally might."""
    seen: Counter[str] = field(default_factory=Counter[str])
    requests: int = 0
    agent_steps: int = 0

    def answer(self, payload: dict[str, Any]) -> dict[str, Any]:
        messages = payload.get('messages', [])
        last = messages[-1] if messages else {}
        text = last.get('content') if isinstance(last.get('content'), str) else ''
        kind = Script.kind(text or '')
        self.seen[kind] += 1
        if kind != 'agent':
            return self.message(content=self.compactor(kind, text or ''))
        tools = {t['function']['name']: t['function'] for t in payload.get('tools', [])}
        self.agent_steps += 1
        working = [name for name in tools if name != 'final_result']
        # Two tool steps, then the answer: counted here, since a compacted history no longer shows them all.
        if working and self.agent_steps % 3:
            function = tools[working[0]]
            return self.message(calls=[(function['name'], instance(function.get('parameters', {})))])
        if 'final_result' in tools:
            return self.message(calls=[('final_result', instance(tools['final_result'].get('parameters', {})))])
        return self.message(content='done')

    def compactor(self, kind: str, text: str) -> str:
        if self.broken:
            # The example of the JSON format, copied as written, ellipsis included.
            return '{"keep": ["g3", ...], "summary": {"rules": []}}' if kind == 'fork' else ''
        return Script.compactor_reply(kind, text)

    def message(self, *, content: str | None = None, calls: list[tuple[str, Any]] | None = None) -> dict[str, Any]:
        self.requests += 1
        message: dict[str, Any] = {'role': 'assistant', 'content': content}
        if calls:
            message['tool_calls'] = [
                {
                    'id': f'call_{self.requests}_{i}',
                    'type': 'function',
                    'function': {'name': n, 'arguments': json.dumps(a)},
                }
                for i, (n, a) in enumerate(calls)
            ]
        return {
            'id': f'chatcmpl-stub-{self.requests}',
            'object': 'chat.completion',
            'created': 1769747647,
            'model': 'stub',
            'choices': [{'index': 0, 'message': message, 'finish_reason': 'tool_calls' if calls else 'stop'}],
            'usage': {'prompt_tokens': 100, 'completion_tokens': 10, 'total_tokens': 110},
        }


def answer(handler: BaseHTTPRequestHandler, stub: Stub) -> None:
    """Answer the Chat Completions request *handler* holds as *stub* says (a 404 for any other path)."""
    length = int(handler.headers.get('content-length', 0))
    payload = json.loads(handler.rfile.read(length) or b'{}')
    if not handler.path.endswith('/chat/completions'):
        handler.send_error(404)
        return
    body = json.dumps(stub.answer(payload)).encode()
    handler.send_response(200)
    handler.send_header('content-type', 'application/json')
    handler.send_header('content-length', str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextmanager
def serve(stub: Stub) -> Iterator[str]:
    """Serve *stub* on 127.0.0.1 (a free port); yields the base URL. Stops on exit, or by itself when bounded out."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            answer(self, stub)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    server.timeout = 0.2
    deadline = time.monotonic() + MAX_SECONDS
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set() and time.monotonic() < deadline and stub.requests < MAX_REQUESTS:
            server.handle_request()
        server.server_close()

    thread = threading.Thread(target=loop, name='openai-stub', daemon=True)
    thread.start()
    try:
        yield f'http://127.0.0.1:{server.server_address[1]}/v1'
    finally:
        stop.set()
        thread.join(timeout=5)
