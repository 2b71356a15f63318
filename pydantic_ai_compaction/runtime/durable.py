"""Compaction under durable execution: compactor calls and store operations replay instead of re-running.

pydantic-ai makes an agent durable (`DBOSDurability`, `TemporalDurability`, `PrefectDurability`) by
running its model requests and tool calls as steps or activities: on recovery the workflow re-executes
from the start and every completed step returns its recorded result. Everything else a capability
does runs again, so a compaction that called a model or a store directly could produce a different
history on recovery than the one the workflow recorded (another summary, other archive numbers).

Two routes keep compaction replay-safe:

- A compactor call to the request's own model needs nothing: the durability capability runs innermost
  and hands every `before_model_request` hook a model whose requests already are durable units, so the
  compactor's request is one recorded step like the agent's own (`is_durable_model`).
- A compactor call to any other model (a cheaper `model=` override) and every store operation go
  through `journaled`: inside a DBOS workflow it is one DBOS step, recorded once and returned as
  recorded on replay; outside a workflow it runs inline. `DurableStore` wraps an `ArchiveStore` so each
  of its operations is such a step and a re-executed write is idempotent by key.

Temporal workflow code may not do I/O at all: there, a compactor call to a model other than the
request's own raises a `UserError` naming the fix instead of running outside an activity. Stores under
Temporal are not supported by `DurableStore` (see docs/durable.md).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.wrapper import WrapperModel

from pydantic_ai_compaction.protocols.archive import ArchivedResult, ArchiveStore, Hit, LogLine, Note

T = TypeVar('T')

STEP_PREFIX = 'pydantic_ai_compaction'
"""Prefix of every step name this module records; persisted with the workflow, so it never changes."""

_DURABLE_MODEL_CLASSES = frozenset({'DurableModel', 'DBOSModel', 'TemporalModel', 'PrefectModel'})
"""Model wrappers whose requests the durable engines already run as steps or activities."""


def is_durable_model(model: Model) -> bool:
    """Whether *model*'s requests are already durable units (a durability capability wrapped it)."""
    current: Model | None = model
    while current is not None:
        if any(cls.__name__ in _DURABLE_MODEL_CLASSES for cls in type(current).__mro__):
            return True
        current = current.wrapped if isinstance(current, WrapperModel) else None
    return False


def _dbos() -> Any | None:
    """The `DBOS` class when a DBOS workflow is executing here (outside any step), else `None`."""
    module = sys.modules.get('dbos')
    if module is None:  # never imported: no DBOS workflow can be running
        return None
    dbos: Any = module.DBOS
    if dbos.workflow_id is None or dbos.step_id is not None:
        return None  # not in a workflow, or already inside a step, which records the whole call
    return dbos


def _in_temporal_workflow() -> bool:
    module = sys.modules.get('temporalio.workflow')
    return module is not None and bool(module.in_workflow())


def in_durable_workflow() -> bool:
    """Whether the code runs in the workflow body of a DBOS or Temporal workflow."""
    return _dbos() is not None or _in_temporal_workflow()


async def journaled(name: str, call: Callable[[], Awaitable[T]]) -> T:
    """`await call()` as one durable step of the running workflow, or inline outside one.

    In a DBOS workflow the result (or the error) is checkpointed under the workflow's next step number;
    a recovery returns it without calling again. The step name is `pydantic_ai_compaction.<name>`.
    """
    dbos = _dbos()
    if dbos is None:
        return await call()

    async def step() -> T:  # DBOS awaits a coroutine function, not a callable returning an awaitable
        return await call()

    result: T = await dbos.run_step_async({'name': f'{STEP_PREFIX}.{name}'}, step)
    return result


def journaled_sync(name: str, call: Callable[[], T]) -> T:
    """`call()` as one durable step, for blocking code (stores run in a worker thread, no event loop)."""
    dbos = _dbos()
    if dbos is None:
        return call()
    result: T = dbos.run_step({'name': f'{STEP_PREFIX}.{name}'}, call)
    return result


async def compactor_request(name: str, model: Model, call: Callable[[], Awaitable[ModelResponse]]) -> ModelResponse:
    """Send a compactor's model call so that a workflow recovery replays it instead of calling again.

    Args:
        name: What the call is for (`request`, `compact`): part of the step name.
        model: The model the call goes to.
        call: The call itself.
    """
    if is_durable_model(model):
        return await call()  # the run's wrapped model: already one step or activity per request
    if _in_temporal_workflow():
        raise UserError(
            f'Compaction calls {model.model_name!r}, a model the Temporal workflow cannot reach: workflow code '
            "may not do I/O. Leave the strategy's `model` unset so it uses the request's own model (an "
            'activity), or pass the agent that model at run time (registered in `TemporalDurability(models=...)`).'
        )
    return await journaled(f'compactor.{name}', call)


@dataclass
class DurableStore:
    """An `ArchiveStore` whose every operation is one durable step inside a DBOS workflow.

    Archive numbers results and archive references from a store counter, Recall searches the log and
    Notes appends: run again on recovery, each would answer differently than the first time (the
    counter moved on) and the history would diverge. As steps, each answers as recorded. A write that
    ran but whose checkpoint was lost re-runs: `put_archived` then skips the entries already stored
    under their key, `index_lines` skips indexed parts (every store does), and `next_numbers` leaves a
    gap in the counter, which no id reuses. `add_note` is the exception: at least once.

    Outside a workflow it calls the store directly.

    Example:
        ```python
        store = DurableStore(SQLiteArchiveStore('agent.sqlite3'))
        agent = Agent(model, capabilities=[Archive(store=store), Fork(), DBOSDurability()])
        ```
    """

    store: ArchiveStore
    """The store every operation goes to."""

    def next_numbers(self, conversation_id: str, counter: str, count: int) -> list[int]:
        """Reserve numbers once; a replay gets the same numbers."""
        return journaled_sync('store.next_numbers', lambda: self.store.next_numbers(conversation_id, counter, count))

    def put_archived(self, entries: Sequence[ArchivedResult]) -> None:
        """Store the batch, idempotent by `(conversation_id, ref)`."""
        journaled_sync('store.put_archived', lambda: self._put_missing(list(entries)))

    def _put_missing(self, entries: list[ArchivedResult]) -> None:
        missing = [entry for entry in entries if self.store.get_archived(entry.conversation_id, entry.ref) is None]
        if missing:
            self.store.put_archived(missing)

    def get_archived(self, conversation_id: str, ref: str) -> ArchivedResult | None:
        """The entry as it was when first read."""
        return journaled_sync('store.get_archived', lambda: self.store.get_archived(conversation_id, ref))

    def add_note(self, conversation_id: str, note: Note) -> None:
        """Append a note once (at least once if the process dies between the write and its checkpoint)."""
        journaled_sync('store.add_note', lambda: self.store.add_note(conversation_id, note))

    def notes(self, conversation_id: str) -> list[Note]:
        """The notes as first read."""
        return journaled_sync('store.notes', lambda: self.store.notes(conversation_id))

    def index_lines(self, lines: Sequence[LogLine]) -> int:
        """Index once (the store already skips parts it has indexed)."""
        return journaled_sync('store.index_lines', lambda: self.store.index_lines(list(lines)))

    def indexed(self, conversation_id: str, fingerprints: Sequence[str]) -> set[str]:
        """The known fingerprints as first read."""
        return journaled_sync('store.indexed', lambda: self.store.indexed(conversation_id, list(fingerprints)))

    def search(self, conversation_id: str, query: str, limit: int = 8) -> list[Hit]:
        """The hits as first found."""
        return journaled_sync('store.search', lambda: self.store.search(conversation_id, query, limit))
