"""The graph builder: the compiled support-desk graph (public API ``graph.build_graph``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from checkpoints.event_log import EventLog, event_log_for, open_event_log
from graph.contracts.context import RunContext
from graph.contracts.settings import Settings
from graph.contracts.state import SupportState, TurnInput
from graph.cut_turns import DeskGraph
from nodes.agent import Deps, make_agent_node
from nodes.approval_flow import make_human_approval_node, make_refund_execute_node, make_risk_node
from nodes.entry import make_access_denied_node, make_entry_node
from nodes.expert import make_expert_node
from nodes.fallback import fallback_node
from nodes.input_guard import InputGuard
from nodes.instrumentation import EventRecorder
from nodes.models import is_openai_model, make_model, make_reader
from nodes.out_of_scope import out_of_scope_node
from nodes.paused_dialogue import make_paused_dialogue_node
from nodes.principal import guard_node
from nodes.router_access import LazyRouter
from nodes.supervisor import make_merge_node, make_supervisor_node
from policies.edges import (
    ACCESS_DENIED,
    AGENTS,
    DEFAULT_EDGE_TABLE,
    ENTRY_NODE,
    EXPERT_NODE,
    FALLBACK,
    MERGE_NODE,
    OUT_OF_SCOPE,
    PAUSED_DIALOGUE,
    SUPERVISOR,
    EdgeTable,
)
from policies.policy_set import PolicySet

__all__ = ["build_graph", "build_desk", "Desk", "DeskGraph", "make_deps", "LazyRouter", "SELF_GUARDED"]

#: Nodes that check the run's principal themselves (every other node is wrapped by ``nodes.principal.guard_node``):
#: the entry node and its refusal node (a new turn: the owner only), ``human_approval`` (a resume: finer rules per
#: decision), the ``expert`` worker (it receives a ``Send`` payload, not the thread's state, inside a supervisor's
#: turn that the entry node admitted).


SELF_GUARDED = frozenset({ENTRY_NODE, ACCESS_DENIED, "human_approval", EXPERT_NODE})


def make_deps(model: BaseChatModel | None = None, settings: Settings | None = None, store: Any = None,
              router: Any = None, table: EdgeTable = DEFAULT_EDGE_TABLE, history: Any = None,
              policy: PolicySet | None = None) -> Deps:
    """Resolve defaults: settings from the environment, the router (trained if present, else shipped default),
    the model named by ``settings.model``, the business store at ``settings.business_db``; triage routes with a
    structured RouteDecision when ``settings.routing`` is ``structured``, or ``auto`` with a langchain-openai model.
    ``policy``: the rules' parameters (``policies.policy_set.PolicySet``) instead of today's; its edge table replaces
    ``table`` and its hop budget ``settings.max_hops``."""
    settings = settings or Settings()
    if policy is not None:
        table = policy.edges
        settings = settings.replace(max_hops=policy.max_hops)
    if router is None:
        router = LazyRouter(settings.router_path)
    if model is None:
        model = make_model(settings.model, timeout_s=settings.model_timeout_s,
                           max_retries=settings.model_retries, router=router)
    if store is None:
        from checkpoints.business import open_store
        from checkpoints.business.faults import require_business_store

        require_business_store(settings.business_db, settings.db)  # never re-create it next to existing threads
        store = open_store(settings.business_db)
    structured = settings.routing == "structured" or (settings.routing == "auto" and is_openai_model(model))
    deps = Deps(model=model, store=store, router=router, settings=settings, reader=make_reader(model, router), table=table,
                structured_routing=structured, policy=policy)
    if history is not None:
        deps.history = dict(history)
    return deps


@dataclass(frozen=True)
class Desk:
    """A compiled support-desk graph and the dependencies its nodes share (model, business store, router, settings,
    event log), for the convenience layer and the CLI, which need the store (approval claims) and the router
    (evaluation) beside the graph. ``graph`` is a ``CompiledStateGraph`` (a :class:`DeskGraph`)."""

    graph: CompiledStateGraph[Any, Any, Any, Any]
    deps: Deps


def build_graph(model: BaseChatModel | None = None, checkpointer: BaseCheckpointSaver | None = None,
                settings: Settings | None = None, *, store: Any = None, router: Any = None,
                history: Any = None, deps: Deps | None = None,
                events: EventLog | str | Path | bool | None = None, run_callbacks: Sequence[Any] = (),
                tracer_provider: Any = None) -> CompiledStateGraph:
    """Build and compile the support-desk graph.

    Args:
        model: any LangChain chat model supporting ``bind_tools``; default from ``settings.model``.
        checkpointer: a LangGraph checkpointer (``checkpoints.open_checkpointer`` for SQLite); None = no persistence.
        settings: budgets and paths; default ``Settings()`` (the environment).
        store: the business store (``checkpoints.business.BusinessStore``); default opens ``settings.business_db``.
        router: the intent router for triage and next-turn entry; default ``nodes.router.load_router()``.
        history: per-edge history policies (``policies.history.DEFAULT_HISTORY`` shape) replacing the defaults.
        deps: pre-resolved dependencies (overrides the five above).
        events: the handoff event log (``checkpoints.event_log``): an EventLog, a target for ``open_event_log``
            (path, ``"memory"``, ``postgresql://…``), False for none; default (None) = ``deps.events`` or a
            table ``events`` beside the checkpoints (same SQLite file; in memory for other savers).
        run_callbacks: LangChain callback handlers bound to the compiled graph before the event recorder (so one that
            refuses a run in ``on_chain_start`` leaves no event), e.g. ``nodes.thread_guard.ThreadRunGuard``.
        tracer_provider: an OpenTelemetry ``TracerProvider`` to record the runs' spans with (``nodes.tracing``), with
            whatever exporter you gave it; default: the one ``settings.otel`` names (none when ``off``). Spans ride
            on the event log: with ``events=False`` there are none.

    Returns:
        A ``CompiledStateGraph`` (:class:`DeskGraph`: a caller's ``recursion_limit`` below the desk's own is raised
        to it) over :class:`graph.contracts.state.SupportState` with ``context_schema=RunContext`` and
        ``input_schema=TurnInput`` (a run writes only ``messages``).
        Drive it with LangGraph's own ``invoke``/``stream``/``get_state``, ``{"configurable": {"thread_id": …}}``
        and ``context=RunContext(...)``.  Every node's destinations come from the edge table.
        :func:`build_desk` returns the same graph with its dependencies.
    """
    return build_desk(model, checkpointer, settings, store=store, router=router, history=history, deps=deps,
                      events=events, run_callbacks=run_callbacks, tracer_provider=tracer_provider).graph


def build_desk(model: BaseChatModel | None = None, checkpointer: BaseCheckpointSaver | None = None,
               settings: Settings | None = None, *, store: Any = None, router: Any = None,
               history: Any = None, deps: Deps | None = None,
               events: EventLog | str | Path | bool | None = None, run_callbacks: Sequence[Any] = (),
               tracer_provider: Any = None) -> Desk:
    """:func:`build_graph` (same arguments), returning the compiled graph together with its resolved
    dependencies as a :class:`Desk`."""
    deps = deps or make_deps(model, settings, store, router, history=history)
    deps = replace(deps, events=_resolve_events(events, deps.events, checkpointer))
    recorder = EventRecorder(deps.events) if deps.events is not None else None
    if recorder is not None and (tracer_provider is not None or deps.settings.otel != "off"):
        from nodes.tracing import SpanTap, tracer_provider_for  # imported only when spans are wanted

        recorder.tap = SpanTap(tracer_provider or tracer_provider_for(deps.settings.otel))
    table = deps.table
    g = StateGraph(SupportState, context_schema=RunContext, input_schema=TurnInput)

    def add(name: str, fn: Any, **kwargs: Any) -> None:
        if name not in SELF_GUARDED:  # who may act on the thread: nodes/principal.guard_node
            fn = guard_node(fn, deps.store)
        g.add_node(name, recorder.instrument(name, fn) if recorder is not None else fn, **kwargs)

    add(ENTRY_NODE, make_entry_node(deps), destinations=table.destinations(ENTRY_NODE))
    add(ACCESS_DENIED, make_access_denied_node(deps), destinations=table.destinations(ACCESS_DENIED))
    for agent in AGENTS:
        add(agent, make_agent_node(agent, deps), destinations=table.destinations(agent))
    add(FALLBACK, fallback_node, destinations=table.destinations(FALLBACK))
    add(OUT_OF_SCOPE, out_of_scope_node, destinations=table.destinations(OUT_OF_SCOPE))
    add("risk", make_risk_node(deps), destinations=table.destinations("risk"))
    add("human_approval", make_human_approval_node(deps), destinations=table.destinations("human_approval"))
    add("refund_execute", make_refund_execute_node(deps), destinations=table.destinations("refund_execute"))
    add(PAUSED_DIALOGUE, make_paused_dialogue_node(deps), destinations=table.destinations(PAUSED_DIALOGUE))
    # supervisor mode: plan + fan-out (Send to the expert worker), parallel experts, explicit merge
    add(SUPERVISOR, make_supervisor_node(deps), destinations=table.destinations(SUPERVISOR))
    add(EXPERT_NODE, make_expert_node(deps))
    add(MERGE_NODE, make_merge_node(deps), destinations=table.destinations(MERGE_NODE))
    g.add_edge(EXPERT_NODE, MERGE_NODE)
    g.add_edge(START, ENTRY_NODE)
    # what a caller may hand the graph (a user message or an authorized decision, nothing else: nodes.run_gate); a
    # turn cut short finished before the thread's next message; never fewer supersteps than the desk needs
    # (graph.cut_turns.DeskGraph), on every way in
    limit = deps.settings.recursion_limit
    compiled = DeskGraph.of(g.compile(checkpointer=checkpointer, name="switchboard"), deps.store, deps.events,
                            min_recursion_limit=limit).with_config(recursion_limit=limit)
    # the input rules of graph.contracts.inputs on every run, before anything else (nodes.input_guard)
    compiled = compiled.with_config(callbacks=[InputGuard(), *run_callbacks])
    if recorder is not None:
        compiled = recorder.attach(compiled)  # run_started / run_completed / run_failed
    return Desk(graph=compiled, deps=deps)


def _resolve_events(events: Any, current: EventLog | None, checkpointer: Any) -> EventLog | None:
    if events is False:
        return None
    if isinstance(events, EventLog):
        return events
    if events is not None and events is not True:
        return open_event_log(events)
    return current if current is not None else event_log_for(checkpointer)
