"""The current handoff packet (``handoff``) is stored once per write, not copied into every checkpoint (storage
growth), and still reads back whole: from the same graph, from a fresh process's saver, and on threads written
when ``handoff`` was a plain channel."""

from __future__ import annotations

from typing import Annotated

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from checkpoints import open_checkpointer
from checkpoints.threads import thread_values
from graph.contracts.state import SNAPSHOT_EVERY, ensure_ids, last_value, latest_write, messages_reducer
from graph.conversation import Conversation

QUESTION = "Where is my refund?"


def test_a_continuing_turn_packet_is_stored_once_and_reads_back(make_desk, tmp_path):
    saver = open_checkpointer(tmp_path / "cp.db")
    conv = Conversation("t1", desk=make_desk(checkpointer=saver))
    for n in range(3):
        conv.send(f"{QUESTION} (#{n})")
    packet = conv.state["handoff"]
    assert packet.from_agent == "entry" and packet.to_agent == "refunds"
    assert packet.objective == f"{QUESTION} (#2)" and packet.known_facts
    rows = saver.conn.execute("SELECT type, checkpoint FROM checkpoints WHERE thread_id = 't1'").fetchall()
    assert len(rows) >= 9
    stored = [saver.serde.loads_typed((t, b))["channel_values"] for t, b in rows]
    assert not [v for v in stored if "handoff" in v], "the packet sits in checkpoints (expected: in its write only)"
    writes = saver.conn.execute("SELECT COUNT(*) FROM writes WHERE thread_id = 't1' AND channel = 'handoff'").fetchone()
    # turn 1: the entry's write (None: triage starts clean) and triage's handoff to refunds; turns 2 and 3: the entry's
    # continuation packet. Nothing else stores it.
    assert writes[0] == 4
    again = thread_values(open_checkpointer(tmp_path / "cp.db"), "t1")
    assert again["handoff"] == packet


class _Old(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], DeltaChannel(messages_reducer, snapshot_frequency=SNAPSHOT_EVERY)]
    handoff: Annotated[dict | None, last_value]


class _New(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], DeltaChannel(messages_reducer, snapshot_frequency=SNAPSHOT_EVERY)]
    handoff: Annotated[dict, DeltaChannel(latest_write, snapshot_frequency=SNAPSHOT_EVERY)]


def _app(schema, saver, write: bool):
    def node(s):
        n = len(s["messages"])
        return {"messages": ensure_ids([AIMessage(f"echo {n}")]), **({"handoff": {"n": n}} if write else {})}

    g = StateGraph(schema)
    g.add_node("echo", node)
    g.add_edge(START, "echo")
    return g.compile(checkpointer=saver)


def test_a_thread_written_with_a_plain_handoff_channel_keeps_its_packet(tmp_path):
    cfg = {"configurable": {"thread_id": "old"}}
    saver = open_checkpointer(tmp_path / "cp.db")
    _app(_Old, saver, write=True).invoke({"messages": ensure_ids([HumanMessage("hi")])}, cfg)
    new = _app(_New, open_checkpointer(tmp_path / "cp.db"), write=False)
    assert new.get_state(cfg).values["handoff"] == {"n": 1}  # the old checkpoint's value seeds the channel
    out = new.invoke({"messages": ensure_ids([HumanMessage("again")])}, cfg)
    assert out["handoff"] == {"n": 1}
    out = _app(_New, open_checkpointer(tmp_path / "cp.db"), write=True).invoke(
        {"messages": ensure_ids([HumanMessage("more")])}, cfg)
    assert out["handoff"] == {"n": 5} and len(out["messages"]) == 6


def test_latest_write_is_batching_invariant():
    assert latest_write({"a": 1}, []) == {"a": 1}
    assert latest_write(latest_write(None, [{"a": 1}]), [{"b": 2}, None]) == latest_write(None, [{"a": 1}, {"b": 2}, None])


def test_sum_usage_is_batching_invariant_and_seeds_from_an_old_value():
    from graph.contracts.state import sum_usage

    a = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11, "calls": 1}
    b = {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7, "calls": 1}
    assert sum_usage(sum_usage(None, [a]), [b]) == sum_usage(None, [a, b]) == sum_usage(None, [b, a])
    assert sum_usage(a, []) == a  # an old thread's plain value seeds the channel; no write changes nothing
    assert sum_usage(a, [None]) == a


def test_usage_counters_are_not_copied_into_every_checkpoint(make_desk, tmp_path):
    """``usage`` is a DeltaChannel: no checkpoint blob carries it, and it still reads back."""
    saver = open_checkpointer(tmp_path / "cp.db")
    conv = Conversation("usage", desk=make_desk(checkpointer=saver))
    conv.send(QUESTION)
    conv.send(QUESTION)
    blobs = [saver.serde.loads_typed((t, b)) for t, b in saver.conn.execute(
        "SELECT type, checkpoint FROM checkpoints WHERE thread_id = 'usage'")]
    assert blobs and all("usage" not in cp["channel_values"] for cp in blobs)
    assert conv.state["usage"]["calls"] >= 2
