"""JSON Schemas for the structured replies the runtime accepts from a model."""

from __future__ import annotations

from typing import Any

FORK_JSON_SCHEMA: dict[str, Any] = {
    '$schema': 'https://json-schema.org/draft/2020-12/schema',
    'title': 'ForkProposal',
    'type': 'object',
    'additionalProperties': False,
    'required': ['keep', 'summary'],
    'properties': {
        'keep': {
            'description': 'Exchange ids to keep verbatim, e.g. ["g0", "g7"].',
            'type': 'array',
            'items': {'type': 'string'},
            'maxItems': 10_000,
        },
        'summary': {
            'type': 'object',
            'additionalProperties': False,
            'required': ['rules', 'facts', 'progress', 'next_step'],
            'properties': {
                'rules': {
                    'description': 'Every instruction in force, latest wording, changes included.',
                    'type': 'array',
                    'items': {'type': 'string'},
                },
                'facts': {
                    'description': 'Facts from the dropped exchanges that later steps need, with exact values.',
                    'type': 'array',
                    'items': {'type': 'string'},
                },
                'progress': {'description': 'What is done so far.', 'type': 'string'},
                'next_step': {'description': 'The very next action.', 'type': 'string'},
            },
        },
    },
}
"""Schema of the fork's `json` variant reply: which exchanges stay, and a structured summary of the rest."""

CURATOR_SCHEMA: dict[str, Any] = {
    '$schema': 'https://json-schema.org/draft/2020-12/schema',
    'title': 'CuratorReply',
    'type': 'object',
    'additionalProperties': False,
    'required': ['focal', 'orientation'],
    'properties': {
        'focal': {
            'description': 'Bundle ids the answer needs verbatim, e.g. ["g1"].',
            'type': 'array',
            'items': {'type': 'string'},
            'maxItems': 1_000,
        },
        'orientation': {
            'type': 'object',
            'additionalProperties': False,
            'required': ['relevant_state', 'required', 'prohibited'],
            'properties': {
                'relevant_state': {'description': 'The state the answer depends on.', 'type': 'string'},
                'required': {
                    'description': 'Propositions the answer must respect.',
                    'type': 'array',
                    'items': {'type': 'string'},
                },
                'prohibited': {
                    'description': 'Stale propositions the answer must not repeat.',
                    'type': 'array',
                    'items': {'type': 'string'},
                },
            },
        },
    },
}
"""Schema of a curator reply: focal bundle ids and an orientation (seed 003, conditions F and G)."""
