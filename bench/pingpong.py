"""Ping-pong benchmark: model calls until termination, switchboard vs a langgraph-swarm graph.

The same scripted model drives both: triage (switchboard only) routes to billing, then billing and refunds
hand the conversation to each other forever. switchboard stops it by fingerprint/bounce-back detection and
answers from fallback; the swarm graph, which has no such guard, runs until LangGraph's recursion limit, and so does a
langgraph-supervisor graph whose supervisor delegates to billing and refunds in turn, each saying "not mine".
Run: ``python bench/pingpong.py`` (part of ``make bench``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def switchboard_calls() -> dict:
    from langgraph.checkpoint.memory import InMemorySaver

    from checkpoints.business import open_store
    from graph import build_graph
    from graph.contracts.settings import Settings
    from graph.conversation import Conversation
    from nodes.testing.scripted import KeywordRouter, ping_pong

    model = ping_pong("billing", "refunds")
    home = Path(tempfile.mkdtemp())
    g = build_graph(model=model, checkpointer=InMemorySaver(), router=KeywordRouter(),
                    store=open_store(home / "b.db"), settings=Settings.from_env(db=home / "c.db"))
    t0 = time.perf_counter()
    r = Conversation("pp", graph=g).send("I was charged twice for my coffee")
    return {"model_calls": model.calls, "status": r.status, "exception": None,
            "seconds": round(time.perf_counter() - t0, 3), "reason": r.text.split("(Reason: ")[-1].split(")")[0]}


def swarm_calls(recursion_limit: int = 25) -> dict:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph_swarm import create_handoff_tool, create_swarm

    from nodes.testing.scripted import ScriptedChatModel, tool_call

    def policy(agent, user, names, i, msgs):
        other = "refunds" if agent == "billing" else "billing"
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{other}")])

    model = ScriptedChatModel(policy=policy)
    billing = create_agent(model, tools=[create_handoff_tool(agent_name="refunds")],
                           system_prompt="You are the billing agent.", name="billing")
    refunds = create_agent(model, tools=[create_handoff_tool(agent_name="billing")],
                           system_prompt="You are the refunds agent.", name="refunds")
    app = create_swarm([billing, refunds], default_active_agent="billing").compile(checkpointer=InMemorySaver())
    return _run_ping_pong(app, model, recursion_limit)


def _run_ping_pong(app, model, recursion_limit: int) -> dict:
    """One ping-pong run of an anchor ``app`` whose scripted ``model`` counts its calls: the calls, how the run ended
    (``returned`` or ``exception`` with its class name), the wall seconds and the recursion limit it had."""
    from langchain_core.messages import HumanMessage

    t0 = time.perf_counter()
    exc = None
    try:
        app.invoke({"messages": [HumanMessage("I was charged twice for my coffee")]},
                   {"configurable": {"thread_id": "pp"}, "recursion_limit": recursion_limit})
    except Exception as e:  # noqa: BLE001 - the point of the benchmark
        exc = type(e).__name__
    return {"model_calls": model.calls, "status": "exception" if exc else "returned", "exception": exc,
            "seconds": round(time.perf_counter() - t0, 3), "recursion_limit": recursion_limit}


def supervisor_calls(recursion_limit: int = 25) -> dict | None:
    """The langgraph-supervisor anchor: the supervisor delegates to billing and refunds in turn, each answers "not
    mine" and hands back, forever; nothing in the library stops it before LangGraph's recursion limit. None when
    langgraph-supervisor is not installed."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    sys.path.insert(0, str(REPO / "bench"))
    from common import supervisor_app, supervisor_available

    if not supervisor_available():
        return None

    def not_mine(agent, user, names, i, msgs):
        return AIMessage(content=f"{agent}: not mine, ask the other desk.")

    def alternate(call, msgs):
        return ("billing", "refunds")[sum(1 for m in msgs if m.type == "ai" and m.name == "supervisor") % 2]

    app, model = supervisor_app(not_mine, InMemorySaver(), workers=("billing", "refunds"), delegate=alternate)
    return _run_ping_pong(app, model, recursion_limit)


def main() -> int:
    sb = switchboard_calls()
    sw = swarm_calls()
    sup = supervisor_calls()
    if "--json" in sys.argv:  # for bench/run.py
        import json

        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps({"switchboard": sb, "swarm": sw,
                                                                            "supervisor": sup}, indent=2))
    print("ping-pong (billing <-> refunds forever), same scripted model")
    print(f"  switchboard     : {sb['model_calls']} model calls, ends in {sb['status']} ({sb['reason']}), {sb['seconds']} s")
    print(f"  langgraph-swarm : {sw['model_calls']} model calls, ends with {sw['exception'] or sw['status']} "
          f"at recursion_limit={sw['recursion_limit']}, {sw['seconds']} s")
    if sup is not None:
        print(f"  langgraph-supervisor: {sup['model_calls']} model calls, ends with {sup['exception'] or sup['status']} "
              f"at recursion_limit={sup['recursion_limit']}, {sup['seconds']} s")
    return 0 if sb["status"] == "fallback" and sb["model_calls"] <= 4 else 1


if __name__ == "__main__":
    sys.exit(main())
