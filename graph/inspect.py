"""Thread and history inspection over a checkpointer (for the CLI and scripts)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

# graph_spec lives in graph.drawing now; re-exported here for existing callers
from graph.drawing import PathStep, graph_spec
from policies.edges import EXPERT_NODE

__all__ = ["graph_spec", "run_path", "thread_values", "thread_summaries", "thread_turns"]


def thread_values(saver: Any, thread_id: str) -> dict:
    """The latest state values stored for ``thread_id`` ({} when the thread is unknown)."""
    from langgraph.graph import StateGraph

    from graph.state import SupportState

    # A minimal graph with the same state schema reads the checkpoint without building models or stores.
    g = StateGraph(SupportState)
    g.add_node("noop", lambda s: {})
    g.set_entry_point("noop")
    snap = g.compile(checkpointer=saver).get_state({"configurable": {"thread_id": thread_id}})
    return dict(snap.values or {})


def run_path(saver: Any, thread_id: str) -> list[PathStep]:
    """The thread's hops in order as PathSteps (hop numbers 1..n over the whole thread, entry hops included).
    An expert consulted as a tool is drawn on the graph's edge ``supervisor -> expert`` (kind ``agent_as_tool``)."""
    values = thread_values(saver, thread_id)
    if not values:
        from graph.errors import InputError

        raise InputError(f"unknown thread {thread_id!r}")
    steps = []
    for i, h in enumerate(values.get("handoff_path") or [], start=1):
        target = EXPERT_NODE if h.get("kind") == "agent_as_tool" else h["to_agent"]
        steps.append(PathStep(hop=i, source=h["from_agent"], target=target, kind=h.get("kind", "handoff")))
    return steps


def thread_summaries(saver: Any) -> list[dict]:
    """One dict per thread: thread_id, turns, active_agent, status (of the last turn), handoffs."""
    from checkpoints import thread_ids

    out = []
    for tid in thread_ids(saver):
        v = thread_values(saver, tid)
        out.append({"thread_id": tid, "turns": int(v.get("turn") or 0), "active_agent": v.get("active_agent"),
                    "status": (v.get("outcome") or {}).get("status", "awaiting_approval" if v.get("pending_approval") else "-"),
                    "handoffs": int(v.get("handoff_count") or 0)})
    return out


def thread_turns(saver: Any, thread_id: str) -> list[dict]:
    """The thread turn by turn: ``{turn, user, agent, answer, path}`` (path like ``triage → billing → refunds``)."""
    v = thread_values(saver, thread_id)
    if not v:
        return []
    msgs = v.get("messages") or []
    turns: list[dict] = []
    for m in msgs:
        if isinstance(m, HumanMessage):
            turns.append({"turn": len(turns) + 1, "user": str(m.content), "agent": None, "answer": ""})
        elif isinstance(m, AIMessage) and not m.tool_calls and turns and m.content:
            turns[-1]["agent"], turns[-1]["answer"] = m.name, str(m.content)
    for t in turns:
        hops = [h for h in v.get("handoff_path") or [] if h.get("turn") == t["turn"]]
        names = [h["to_agent"] for h in hops if h.get("kind") != "agent_as_tool"]
        consulted = [h["to_agent"] for h in hops if h.get("kind") == "agent_as_tool"]
        t["path"] = " → ".join(names) + (f" (consulted: {', '.join(consulted)})" if consulted else "")
    return turns
