"""The capability every strategy is: trigger check before each model request, then the runtime.

Strategies subclass `CompactionCapability` and implement `propose`; they never touch the message
list. The same object also satisfies harness's `CompactionStrategy` protocol through `compact`, so it
can be a tier of `TieredCompaction` / `FallbackCompaction` or be driven by `compact_now`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import AgentDepsT, RunContext

from pydantic_ai_compaction.protocols.types import CompactionEvent, CompactionState, Proposal
from pydantic_ai_compaction.runtime.checks import check_bool, check_callable, check_instance, check_int, check_number
from pydantic_ai_compaction.runtime.compactor import close_models
from pydantic_ai_compaction.runtime.context import CompactionContext
from pydantic_ai_compaction.runtime.degraded import SetupWarning, described, warn_degraded
from pydantic_ai_compaction.runtime.engine import DEFAULT_MIN_SAVING, run_compaction
from pydantic_ai_compaction.runtime.events import EventObserver, compaction_span, emit, record_failure
from pydantic_ai_compaction.runtime.memo import IdentityMemo
from pydantic_ai_compaction.runtime.retry import RetryPolicy
from pydantic_ai_compaction.runtime.segment import ConversationView, ProtectPredicate, compactions_so_far
from pydantic_ai_compaction.runtime.trigger import DEFAULT_TRIGGER, Trigger
from pydantic_ai_compaction.runtime.validate import DEFAULT_FALLBACK_KEEP_LAST, Outcome, Skipped

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult


@dataclass(frozen=True)
class RuntimeSettings:
    """The runtime knobs a strategy carries."""

    trigger: Trigger
    protect: ProtectPredicate | None
    retry: RetryPolicy
    fallback_keep_last: int
    observer: EventObserver | None
    reraise: bool = False
    min_saving: float = DEFAULT_MIN_SAVING


@dataclass
class CompactionCapability(AbstractCapability[AgentDepsT], ABC):
    """Base of every strategy: a pydantic-ai capability that compacts before model requests."""

    @property
    @abstractmethod
    def strategy_name(self) -> str:
        """Name recorded in boundary records and reports."""

    @property
    @abstractmethod
    def runtime(self) -> RuntimeSettings:
        """Trigger, protection, retries and fallback this strategy runs with."""

    @abstractmethod
    async def propose(self, view: ConversationView, ctx: CompactionContext) -> Proposal:
        """Suggest a layout; see `pydantic_ai_compaction.runtime.context.Strategy`."""

    def resolve(self, state: CompactionState) -> CompactionCapability[AgentDepsT]:
        """The strategy that acts in *state*; composition (`Switch`) overrides this."""
        del state
        return self

    @property
    def acts_on_crossing(self) -> bool:
        """`False` for a baseline that only records crossings."""
        return True

    @property
    def uses_state(self) -> bool:
        """Whether `resolve` reads the `CompactionState` (compositions); others skip computing it."""
        return False

    def children(self) -> tuple[CompactionCapability[AgentDepsT], ...]:
        """The strategies this one composes (`Switch`, `Pipeline`, a wrapper), checked with it (`check_settings`)."""
        return ()

    def check_settings(self) -> None:
        """Check every field again as the constructor does, and the composed strategies' too.

        Capabilities are dataclasses, so a field can be set after construction (`fork.keep_last = -3`); the run
        checks them when it starts (`for_run`), so a value the constructor refuses is refused there with the same
        error (`Class.field` and the value), not read by a compaction mid-run. A strategy class of your own is not
        checked again (its `__init__` may take what a copy cannot give); the strategies of ours it composes are.

        Raises:
            ConfigurationError: A field's value is not acceptable.
        """
        _DISTRIBUTED.discard((self,))  # built again with the fields as they are now (`WrappingCompaction._steps`)
        if is_ours(self):
            # A copy runs `__post_init__`, which checks every field; this one's state is left as it is. Only our own
            # classes are copied: a strategy of the user's may take an `InitVar` or an `__init__` of its own, which
            # a copy cannot give again (its composed strategies of ours are still checked).
            replace(self)
        for child in self.children():
            child.check_settings()

    async def for_run(self, ctx: RunContext[AgentDepsT]) -> AbstractCapability[AgentDepsT]:
        """Itself, its settings checked again (`check_settings`): state kept across runs stays."""
        self.check_settings()
        return self

    def each_wrapped(
        self, wrap: Callable[[CompactionCapability[AgentDepsT]], CompactionCapability[AgentDepsT]]
    ) -> CompactionCapability[AgentDepsT] | None:
        """This composition with *wrap* applied to each strategy it runs on that strategy's own trigger
        (`Pipeline`), or `None` for a strategy that runs as one. A wrapper (`Reassert`, `Verified`) is applied to
        each step, so it changes what each proposes and not when each runs."""
        del wrap
        return None

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        """The run; then the models its compactions built from names are closed (`compactor.close_models`)."""
        try:
            return await handler()
        finally:
            await close_models(ctx)

    async def before_model_request(
        self,
        ctx: RunContext[AgentDepsT],
        request_context: ModelRequestContext,
    ) -> ModelRequestContext:
        """Compact the persisted history when the trigger is crossed; otherwise do nothing.

        Reads `ctx.messages`, the persisted history: a request-only view an earlier capability built
        (`Tiered`, a selection) must never be saved in its place. List views after this capability.
        """
        messages = list(ctx.messages)
        try:
            compacted = await self.maybe_compact(
                messages,
                ctx,
                model=request_context.model,
                model_settings=request_context.model_settings,
                parameters=request_context.model_request_parameters,
            )
        except SetupWarning:
            # Made an error by the filters: a mistake in the user's setup, such as a model whose window is unknown;
            # skipping compaction on every request instead would hide it while the history grows.
            raise
        except Exception as error:  # a user predicate or trigger bug must not end the run
            skipped = f'{_name_of(self)} compaction was skipped for this request: {described(error)}'
            warn_degraded(skipped, stacklevel=2)
            return request_context
        if compacted is None:
            return request_context
        ctx.messages[:] = compacted
        return replace(request_context, messages=list(compacted))

    async def maybe_compact(
        self,
        messages: list[ModelMessage],
        ctx: RunContext[Any],
        *,
        model: Model,
        model_settings: Any,
        parameters: ModelRequestParameters,
    ) -> list[ModelMessage] | None:
        """The compacted history if this request crosses the trigger, else `None`."""
        # Below the trigger this is all that runs: one token estimate (skipped for a message-count
        # trigger) and, only for compositions that decide on it, the state.
        tokens: int | None = None
        chosen: CompactionCapability[Any] = self
        if self.uses_state:
            tokens = self.runtime.trigger.measure(messages, parameters)
            chosen = self.resolve(CompactionState(compactions_so_far(messages), tokens, ctx.run_step, len(messages)))
            if chosen is not self and type(chosen).maybe_compact is not CompactionCapability.maybe_compact:
                # The branch runs its own steps (`Pipeline`, or a wrapper of one): it measures and triggers on its own.
                return await chosen.maybe_compact(
                    messages, ctx, model=model, model_settings=model_settings, parameters=parameters
                )
        settings = chosen.runtime
        trigger = settings.trigger
        if tokens is None:
            tokens = trigger.measure(messages, parameters) if trigger.measures_tokens else 0
        crossing = trigger.check(tokens, len(messages), model)
        if crossing is None:
            return None
        if not chosen.acts_on_crossing:
            emit(
                CompactionEvent(
                    'ignored',
                    chosen.strategy_name,
                    crossing.tokens,
                    None,
                    len(messages),
                    len(messages),
                    reason='baseline',
                ),
                ctx.tracer,
                settings.observer,
            )
            return None
        cctx = CompactionContext(
            run=ctx,
            model=model,
            model_settings=model_settings,
            parameters=parameters,
            retry=settings.retry,
            trigger_tokens=crossing.tokens,
        )
        outcome = await self._run(chosen, messages, cctx, settings)
        return outcome.messages if outcome is not None else None

    async def compact(self, messages: list[ModelMessage], ctx: RunContext[AgentDepsT]) -> list[ModelMessage]:
        """Compact unconditionally (harness `CompactionStrategy` protocol: tiers, `compact_now`).

        Harness calls this without the run start the agent's own capabilities get (`for_run`), so the fields are
        checked here as a run start checks them (`check_settings`). A composition's choice that raises (a `Switch`
        predicate) skips this compaction with a warning, as the agent's own hook does: the run goes on.

        Raises:
            ConfigurationError: A field was set after construction to a value the constructor refuses.
        """
        model = ctx.model
        if not isinstance(model, Model):
            raise UserError(f'{_name_of(self)} compaction needs a request-response model, got {type(model).__name__}.')
        self.check_settings()
        chosen = self._chosen(messages, ctx)
        if chosen is None or not chosen.acts_on_crossing:
            return messages
        if chosen is not self and type(chosen).compact is not CompactionCapability.compact:
            return await chosen.compact(messages, ctx)  # the branch runs its own steps (`Pipeline`, a wrapper of one)
        settings = chosen.runtime
        cctx = CompactionContext(
            run=ctx,
            model=cast('Model[Any]', model),
            model_settings=cast('ModelSettings | None', ctx.model_settings),
            parameters=ModelRequestParameters(),
            retry=settings.retry,
        )
        # Asked for explicitly, so no minimum saving: harness decided compaction is due.
        outcome = await self._run(
            chosen, list(messages), cctx, replace(settings, min_saving=0.0), raise_errors=settings.reraise
        )
        return outcome.messages if outcome is not None else messages

    def _chosen(self, messages: list[ModelMessage], ctx: RunContext[Any]) -> CompactionCapability[Any] | None:
        """The strategy `resolve` picks for *messages* asked for outside the trigger (`compact`), or `None` (warned)
        when picking it raised. The state holds the history's estimated tokens, as the trigger path's does."""
        try:
            tokens = self.runtime.trigger.measure(messages) if self.uses_state else 0
            return self.resolve(CompactionState(compactions_so_far(messages), tokens, ctx.run_step, len(messages)))
        except SetupWarning:
            raise  # made an error by the filters: the user's setup, as in the hook
        except Exception as error:  # a user predicate's bug must not end the run
            warn_degraded(f'{_name_of(self)} compaction was skipped: {described(error)}', stacklevel=3)
            return None

    @staticmethod
    async def _run(
        chosen: CompactionCapability[Any],
        messages: list[ModelMessage],
        cctx: CompactionContext,
        settings: RuntimeSettings,
        *,
        raise_errors: bool = False,
    ) -> Outcome | None:
        # The span is open for the whole compaction: its duration is the work's, the compactor calls nest in it.
        with compaction_span(cctx.run.tracer, chosen.strategy_name, conversation_id=cctx.run.conversation_id) as span:
            return await CompactionCapability._run_in_span(
                chosen, messages, cctx, settings, span, raise_errors=raise_errors
            )

    @staticmethod
    async def _run_in_span(
        chosen: CompactionCapability[Any],
        messages: list[ModelMessage],
        cctx: CompactionContext,
        settings: RuntimeSettings,
        span: Span | None,
        *,
        raise_errors: bool,
    ) -> Outcome | None:
        try:
            outcome = await run_compaction(
                chosen,
                messages,
                cctx,
                protect=settings.protect,
                fallback_keep_last=settings.fallback_keep_last,
                min_saving=settings.min_saving,
            )
        except SetupWarning:
            raise  # a setup mistake the filters made an error (a compactor that cannot run), as in the hook above
        except Exception as error:  # compaction must never fail a run; a runtime bug leaves the history as it was
            record_failure(span, error)
            warn_degraded(
                f'{_name_of(chosen)} compaction failed and left the history unchanged: {described(error)}',
                stacklevel=2,
            )
            return None
        if isinstance(outcome, Skipped):
            emit(
                CompactionEvent(
                    'ignored',
                    chosen.strategy_name,
                    cctx.trigger_tokens,
                    None,
                    len(messages),
                    len(messages),
                    reason=outcome.reason,
                    detail=outcome.detail,
                ),
                cctx.run.tracer,
                settings.observer,
                span=span,
            )
            return None
        if raise_errors and outcome.error is not None:
            raise outcome.error
        emit(
            CompactionEvent(
                'compacted',
                chosen.strategy_name,
                cctx.trigger_tokens,
                outcome.record,
                len(messages),
                len(outcome.messages),
                tuple(outcome.messages),
            ),
            cctx.run.tracer,
            settings.observer,
            span=span,
        )
        return outcome


_PACKAGE = 'pydantic_ai_compaction.'
"""Where this library's own classes are defined (`is_ours`)."""


def is_ours(strategy: object) -> bool:
    """Whether *strategy*'s class is this library's (not a subclass of yours): it can be copied with
    `dataclasses.replace` and keeps no state a copy would not share."""
    return type(strategy).__module__.startswith(_PACKAGE)


_DISTRIBUTED = IdentityMemo[tuple[tuple[int, ...], tuple[object, ...], Any]]()
"""Per wrapper (by identity, never kept alive): the ids of the strategies its distributed pipeline was built from,
those strategies (held, so no id is reused meanwhile) and the pipeline (`WrappingCompaction._steps`)."""


def _composed(strategy: CompactionCapability[Any]) -> tuple[CompactionCapability[Any], ...]:
    """The strategies *strategy* composes, and theirs, depth first (`children`)."""
    return tuple(found for child in strategy.children() for found in (child, *_composed(child)))


def _name_of(strategy: CompactionCapability[Any]) -> str:
    """*strategy*'s name, or its class's when the name cannot be read (a composed strategy set to something else
    mid-run): a warning that compaction was skipped must not fail the run itself."""
    try:
        return strategy.strategy_name
    except Exception:
        return type(strategy).__name__


class WrappingCompaction(CompactionCapability[AgentDepsT], ABC):
    """Base of a strategy that wraps another (`Reassert`, `Verified`, `KeepWithin`): it changes what the inner
    strategy proposes or reads, not when it runs, so trigger, settings, branches and state are the inner one's.

    Subclasses are dataclasses declaring the `inner` field themselves (its docstring says what they do to it).
    """

    inner: CompactionCapability[AgentDepsT]

    @property
    def runtime(self) -> RuntimeSettings:
        """The inner strategy's trigger and settings."""
        return self.inner.runtime

    @property
    def acts_on_crossing(self) -> bool:
        """As the inner strategy."""
        return self.inner.acts_on_crossing

    @property
    def uses_state(self) -> bool:
        """As the inner strategy."""
        return self.inner.uses_state

    def resolve(self, state: CompactionState) -> CompactionCapability[AgentDepsT]:
        """Itself, wrapping whichever strategy the inner composition picks for *state*."""
        chosen = self.inner.resolve(state)
        if chosen is self.inner:
            return self
        if is_ours(self):
            return replace(self, inner=chosen)
        # A wrapper class of yours may take an `__init__` of its own, which `replace` would call with every field:
        # the same wrapper, copied as it is, around the branch chosen.
        copied = copy.copy(self)
        copied.inner = chosen
        return copied

    def children(self) -> tuple[CompactionCapability[AgentDepsT], ...]:
        """The inner strategy."""
        return (self.inner,)

    def each_wrapped(
        self, wrap: Callable[[CompactionCapability[AgentDepsT]], CompactionCapability[AgentDepsT]]
    ) -> CompactionCapability[AgentDepsT] | None:
        """The inner composition's steps each wrapped in this wrapper, then in *wrap* (`Verified(Reassert(Pipeline([a,
        b])))` runs as `Pipeline([Verified(Reassert(a)), Verified(Reassert(b))])`); `None` when the inner strategy
        runs as one, or when this wrapper is not one of ours (`_steps`)."""
        if not is_ours(self):
            return None
        return self.inner.each_wrapped(lambda step: wrap(self._wrapping(step)))

    def _steps(self) -> CompactionCapability[AgentDepsT] | None:
        """`each_wrapped` with nothing more around it, or `None`: then it wraps the composition as one strategy, on
        its first step's trigger. Only our own classes are distributed over a pipeline's steps: a wrapper or a
        pipeline class of your own may take an `__init__` a copy cannot give again, or keep state on itself that
        copies would not share.

        Built once a run (`check_settings` forgets it), and again when a strategy it composes is replaced: it runs
        before every request, and copying the wrappers (each checked by its `__post_init__`) took 35 µs a request.
        """
        # Compared by identity: a strategy replaced by an equal one is another strategy, with its own state.
        composed = _composed(self)
        ids = tuple(map(id, composed))
        built = _DISTRIBUTED.get((self,))
        if built is None or built[0] != ids:
            built = _DISTRIBUTED.put((self,), (ids, composed, self.each_wrapped(lambda step: step)))
        return built[2]

    def _wrapping(self, step: CompactionCapability[AgentDepsT]) -> CompactionCapability[AgentDepsT]:
        """This wrapper around *step* instead of the inner strategy."""
        return replace(self, inner=step)

    async def maybe_compact(
        self,
        messages: list[ModelMessage],
        ctx: RunContext[Any],
        *,
        model: Model,
        model_settings: Any,
        parameters: ModelRequestParameters,
    ) -> list[ModelMessage] | None:
        """As the inner strategy runs: a composition that triggers its steps itself (`Pipeline`) runs each of them
        wrapped, on its own trigger."""
        steps = self._steps()
        if steps is not None:
            return await steps.maybe_compact(
                messages, ctx, model=model, model_settings=model_settings, parameters=parameters
            )
        return await super().maybe_compact(
            messages, ctx, model=model, model_settings=model_settings, parameters=parameters
        )

    async def compact(self, messages: list[ModelMessage], ctx: RunContext[AgentDepsT]) -> list[ModelMessage]:
        """As the inner strategy compacts (harness `CompactionStrategy` protocol): each step of a `Pipeline`
        wrapped."""
        self.check_settings()  # before the steps are built from the fields (see `CompactionCapability.compact`)
        steps = self._steps()
        if steps is not None:
            return await steps.compact(messages, ctx)
        return await super().compact(messages, ctx)


@dataclass
class ConfiguredCompaction(CompactionCapability[AgentDepsT], ABC):
    """A strategy that carries its own trigger and runtime settings (every leaf strategy)."""

    trigger: Trigger = field(default=DEFAULT_TRIGGER, kw_only=True)
    """When to compact. Defaults to the seed study's 18,000 estimated tokens."""

    protect: ProtectPredicate | None = field(default=None, kw_only=True)
    """Extra exchanges to always keep, besides g0, earlier boundaries and pinned content."""

    retry: RetryPolicy = field(default_factory=RetryPolicy, kw_only=True)
    """Retries for transient errors of any model call the strategy makes."""

    fallback_keep_last: int = field(default=DEFAULT_FALLBACK_KEEP_LAST, kw_only=True)
    """Exchanges the fallback layout keeps when a proposal is malformed."""

    observer: EventObserver | None = field(default=None, kw_only=True)
    """Called with every `CompactionEvent` (compactions and ignored crossings)."""

    reraise_in_compact: bool = field(default=False, kw_only=True)
    """When driven through `compact()` (harness tiers, `compact_now`), raise the compactor's error
    instead of applying the fallback layout, so harness `FallbackCompaction` can try its next strategy.
    Harness falls back only on the errors in its `fallback_on` (pydantic-ai's `ModelAPIError` by default): any
    other (a `TimeoutError` a model of yours raises) passes through it and ends the run unless you add it there.
    Inside the agent's own trigger path the fallback always applies: compaction never fails a run."""

    min_saving: float = field(default=DEFAULT_MIN_SAVING, kw_only=True)
    """Share of the history's estimated tokens that must be droppable (not protected, not in progress)
    for a crossing to call the compactor. Below it the crossing is reported as ignored with reason
    `below minimum saving`: when protected content alone is over the trigger, a compactor call per step
    that frees a sliver would cost more than it saves. `0` compacts whatever can be dropped."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_instance(owner, 'trigger', self.trigger, Trigger, 'a Trigger')
        check_instance(owner, 'retry', self.retry, RetryPolicy, 'a RetryPolicy')
        check_int(owner, 'fallback_keep_last', self.fallback_keep_last, minimum=1)
        check_number(owner, 'min_saving', self.min_saving, minimum=0, maximum=1)
        check_callable(owner, 'protect', self.protect, arguments=2)
        check_callable(owner, 'observer', self.observer, arguments=1)
        check_bool(owner, 'reraise_in_compact', self.reraise_in_compact)

    @property
    def runtime(self) -> RuntimeSettings:
        """Trigger, protection, retries and fallback this strategy runs with."""
        return RuntimeSettings(
            self.trigger,
            self.protect,
            self.retry,
            self.fallback_keep_last,
            self.observer,
            self.reraise_in_compact,
            self.min_saving,
        )
