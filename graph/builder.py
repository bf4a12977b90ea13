"""The graph builder: the compiled support-desk graph (public API ``graph.build_graph``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from graph.context import RunContext
from graph.settings import Settings
from graph.state import SupportState
from nodes.agent import Deps, make_agent_node
from nodes.entry import make_entry_node
from nodes.expert import make_expert_node
from nodes.fallback import fallback_node
from nodes.models import make_model
from nodes.supervisor import make_merge_node, make_supervisor_node
from policies.edges import AGENTS, DEFAULT_EDGE_TABLE, ENTRY_NODE, EXPERT_NODE, FALLBACK, MERGE_NODE, SUPERVISOR, EdgeTable

__all__ = ["build_graph", "make_deps"]


def make_deps(model: BaseChatModel | None = None, settings: Settings | None = None, store: Any = None,
              router: Any = None, table: EdgeTable = DEFAULT_EDGE_TABLE) -> Deps:
    """Resolve defaults: settings from the environment, the router (trained if present, else shipped default),
    the model named by ``settings.model``, the business store at ``settings.business_db``."""
    settings = settings or Settings.from_env()
    if router is None:
        from nodes.router import load_router

        router = load_router(settings.router_path)
    if model is None:
        model = make_model(settings.model, timeout_s=settings.model_timeout_s,
                           max_retries=settings.model_retries, router=router)
    if store is None:
        from nodes.store import open_store

        store = open_store(Path(settings.business_db))
    return Deps(model=model, store=store, router=router, settings=settings, table=table)


def build_graph(model: BaseChatModel | None = None, checkpointer: BaseCheckpointSaver | None = None,
                settings: Settings | None = None, *, store: Any = None, router: Any = None,
                deps: Deps | None = None) -> CompiledStateGraph:
    """Build and compile the support-desk graph.

    Args:
        model: any LangChain chat model supporting ``bind_tools``; default from ``settings.model``.
        checkpointer: a LangGraph checkpointer (``checkpoints.open_checkpointer`` for SQLite); None = no persistence.
        settings: budgets and paths; default ``Settings.from_env()``.
        store: the business store (``nodes.store.BusinessStore``); default opens ``settings.business_db``.
        router: the intent router for triage and next-turn entry; default ``nodes.router.load_router()``.
        deps: pre-resolved dependencies (overrides the four above).

    Returns:
        A ``CompiledStateGraph`` over :class:`graph.state.SupportState` with ``context_schema=RunContext``.
        Drive it with LangGraph's own ``invoke``/``stream``/``get_state``, ``{"configurable": {"thread_id": …}}``
        and ``context=RunContext(...)``.  Every node's destinations come from the edge table.
    """
    deps = deps or make_deps(model, settings, store, router)
    table = deps.table
    g = StateGraph(SupportState, context_schema=RunContext)
    g.add_node(ENTRY_NODE, make_entry_node(deps), destinations=table.destinations(ENTRY_NODE))
    for agent in AGENTS:
        g.add_node(agent, make_agent_node(agent, deps), destinations=table.destinations(agent))
    g.add_node(FALLBACK, fallback_node, destinations=table.destinations(FALLBACK))
    # supervisor mode: plan + fan-out (Send to the expert worker), parallel experts, explicit merge
    g.add_node(SUPERVISOR, make_supervisor_node(deps), destinations=table.destinations(SUPERVISOR))
    g.add_node(EXPERT_NODE, make_expert_node(deps))
    g.add_node(MERGE_NODE, make_merge_node(deps), destinations=table.destinations(MERGE_NODE))
    g.add_edge(EXPERT_NODE, MERGE_NODE)
    g.add_edge(START, ENTRY_NODE)
    compiled = g.compile(checkpointer=checkpointer, name="switchboard")
    compiled.deps = deps  # type: ignore[attr-defined]  # for the convenience layer and the CLI
    return compiled
