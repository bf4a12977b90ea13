"""A turn cut short between nodes is finished before the thread's next message when the graph is driven directly
(``invoke`` / ``ainvoke``, as the engines of ``switchboard serve`` and ``langgraph dev`` drive it), not discarded as
LangGraph does by itself with new input on a checkpoint whose nodes are pending (``graph.cut_turns``)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from checkpoints.threads import thread_turns
from graph.contracts.context import RunContext
from graph.conversation import Conversation
from nodes.testing.state import ungated

CHARGED = "I was charged twice for my coffee"  # entry -> triage -> billing
BALANCE = "What is my balance?"
ADA = RunContext.for_customer("c_ada", "t_demo")


def _say(text: str) -> dict:
    return {"messages": [HumanMessage(content=text)]}


def _cut_at_billing(graph, tid: str) -> None:
    """The first turn stops with billing pending (as an instance killed after triage's checkpoint leaves it)."""
    config = {"configurable": {"thread_id": tid}}
    ungated(graph).invoke(_say(CHARGED), config, context=ADA, interrupt_before=["billing"])  # a cut turn
    snap = graph.get_state(config)
    assert tuple(snap.next) == ("billing",) and not any(t.interrupts for t in snap.tasks)


def _assert_both_answered(saver, tid: str) -> None:
    first, second = thread_turns(saver, tid)
    assert (first["user"], second["user"]) == (CHARGED, BALANCE)
    assert first["path"].startswith("triage → billing") and first["agent"] == "billing" and first["answer"], first
    assert second["answer"] and second["answer"] != first["answer"], second


def test_the_next_message_on_the_bare_graph_finishes_the_cut_turn_first(make_desk) -> None:
    saver = InMemorySaver()
    desk = make_desk(checkpointer=saver, events="memory")
    _cut_at_billing(desk.graph, "t1")
    out = desk.graph.invoke(_say(BALANCE), {"configurable": {"thread_id": "t1"}}, context=ADA)
    assert out["turn"] == 2 and isinstance(out["messages"][-1], AIMessage)  # the run's output is the new turn's
    _assert_both_answered(saver, "t1")
    [rec] = desk.deps.events.events("t1", kinds=["recovered"])
    assert rec.detail["by"] == "next_message" and rec.detail["next"] == ["billing"]
    assert rec.detail["triggered_by"] == "customer:c_ada" and rec.detail["where"] == "between_nodes"
    assert Conversation("t1", desk=desk, context=ADA).cut_turn() is None


@pytest.mark.parametrize("where", ["metadata", "configurable"])
def test_the_async_path_of_the_engines_does_the_same(make_desk, where: str) -> None:
    saver = InMemorySaver()
    desk = make_desk(checkpointer=saver)
    _cut_at_billing(desk.graph, "t2")

    # the engines give the run an id (Aegra in configurable, from which LangChain fills the metadata); LangGraph
    # ignores the input of a run whose metadata run_id wrote the thread's last checkpoint (a retry), so the
    # continuation must not write under it
    run_id = uuid.uuid4()
    config: dict = {"configurable": {"thread_id": "t2"}, "run_id": run_id}
    if where == "metadata":
        config["metadata"] = {"run_id": str(run_id)}
    else:
        config["configurable"]["run_id"] = str(run_id)

    async def stream() -> list:
        return [c async for c in desk.graph.astream(_say(BALANCE), config, context=ADA, stream_mode="values")]

    chunks = asyncio.run(stream())
    assert chunks[-1]["turn"] == 2
    _assert_both_answered(saver, "t2")


def test_the_cli_and_the_bare_graph_give_the_same_turns(make_desk) -> None:
    saver_cli, saver_graph = InMemorySaver(), InMemorySaver()
    cli, bare = make_desk(checkpointer=saver_cli), make_desk(checkpointer=saver_graph)
    for desk in (cli, bare):
        _cut_at_billing(desk.graph, "t3")
    Conversation("t3", desk=cli, context=ADA).send(BALANCE)
    bare.graph.invoke(_say(BALANCE), {"configurable": {"thread_id": "t3"}}, context=ADA)
    strip = [{k: t[k] for k in ("user", "agent", "answer", "path")} for t in thread_turns(saver_cli, "t3")]
    assert strip == [{k: t[k] for k in ("user", "agent", "answer", "path")} for t in thread_turns(saver_graph, "t3")]


def test_another_customers_message_does_not_run_the_owners_cut_turn(make_desk, store) -> None:
    from graph.contracts.errors import AccessDenied

    saver = InMemorySaver()
    desk = make_desk(checkpointer=saver)
    _cut_at_billing(desk.graph, "t4")
    bob = RunContext.for_customer("c_bob", "t_demo")
    with pytest.raises(AccessDenied):
        desk.graph.invoke(_say("show me everything"), {"configurable": {"thread_id": "t4"}}, context=bob)
    [turn] = thread_turns(saver, "t4")
    assert turn["user"] == CHARGED and not turn["answer"]  # billing never ran for Bob
