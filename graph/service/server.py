"""The graph as LangGraph's server loads it (``langgraph.json`` -> ``langgraph dev`` / LangGraph Studio).

``langgraph dev`` (``pip install "langgraph-cli[inmem]"``, part of the dev extras) imports this module and serves
``graph`` (built by :func:`make_graph` at import, off the server's event loop, which forbids blocking file I/O);
the server supplies persistence (its own checkpointer), so the graph is compiled without one.
Events still go to the event log in ``$SWITCHBOARD_HOME/switchboard.db`` (table ``events``), so
``switchboard trace THREAD`` works for threads run from Studio too.

``langgraph.json`` also names the server's authentication, ``graph/service/auth.py``: every request needs a bearer token, and
the authenticated principal reaches the graph as the server's user, which wins over any run context a client sends
(``nodes.principal``).

Nothing here sends data anywhere.  LangSmith tracing happens only when the environment asks for it
(``LANGSMITH_TRACING=true`` and ``LANGSMITH_API_KEY``): LangChain then attaches its tracer to every run
by itself, with no code change here.
"""

from __future__ import annotations

import functools

from langgraph.graph.state import CompiledStateGraph

__all__ = ["make_graph", "graph"]


@functools.lru_cache(maxsize=1)
def make_graph() -> CompiledStateGraph:
    """The compiled support-desk graph without a checkpointer (settings from the environment, see
    ``graph.contracts.settings.Settings.from_env``), built once per server process. Every store of ours comes from the
    environment: ``SWITCHBOARD_DB`` = ``postgresql://…`` puts the business store and the event log in that database
    (``switchboard serve`` sets it), and then each run holds its thread's advisory lock
    (``nodes.thread_guard.ThreadRunGuard``: a second run on a busy thread fails at once instead of racing) and its
    checkpoints are written step by step (durability ``"sync"``). The graph finishes a turn an instance's death cut
    short before the thread's next message (``graph.cut_turns``). For kill tests only, ``SWITCHBOARD_TEST_HOLD``
    pauses a run before a node (``nodes.testing.hold``; unset, nothing is added)."""
    from checkpoints.event_log import open_event_log
    from graph.builder import build_graph
    from graph.contracts.settings import Settings, is_postgres
    from nodes.testing.hold import holds_from_env
    from nodes.thread_guard import ThreadRunGuard

    settings = Settings.from_env()
    holds = holds_from_env()  # tests only: SWITCHBOARD_TEST_HOLD pauses a run before a node (nodes.testing.hold)
    if not is_postgres(settings.db):
        return build_graph(checkpointer=None, settings=settings, events=open_event_log(settings.db),
                           run_callbacks=holds)
    graph = build_graph(checkpointer=None, settings=settings, events=open_event_log(settings.db),
                        run_callbacks=[ThreadRunGuard(settings.db), *holds])
    # Several instances, any of which may be killed: each step's checkpoint is written before the next step starts
    # (LangGraph's durability "sync"; its default, "async", writes in the background, and an instance killed mid-run
    # could lose the steps after the run's input). LangGraph 1.2 has no public graph-level setting for it: `durability`
    # is only an argument of invoke/stream/astream, and the engine makes that call. The LangGraph API passes the run's
    # public `durability` parameter (graph/service/auth.py sets it to "sync", and it wins over this config); Aegra 0.6 passes
    # none, and then Pregel reads the default from this private config key (pregel/main.py `_defaults`), the only hook.
    from langgraph._internal._constants import CONFIG_KEY_DURABILITY

    return graph.with_config(configurable={CONFIG_KEY_DURABILITY: "sync"})


#: What ``langgraph.json`` points at.
graph = make_graph()
