"""The handoff event log: exact sequences, persistence beside the checkpoints, no duplicates on resume, live stream."""

from __future__ import annotations

import sqlite3
from typing import TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from checkpoints import open_checkpointer
from checkpoints.event_log import open_event_log
from graph.contracts.events import EVENT_KINDS
from graph.contracts.state import ensure_ids
from graph.conversation import Conversation
from nodes import instrumentation as events
from nodes.instrumentation import EventRecorder
from nodes.testing import scripted as sm
from nodes.testing.scripted import two_hop_model
from tests.conftest import TWO_HANDOFFS


def seq(evts):
    """The comparable shape of an event list: (kind, agent, from, to, status)."""
    return [(e.kind, e.agent, e.from_agent, e.to_agent, e.status) for e in evts]


def test_two_handoff_conversation_exact_event_sequence(make_desk):
    gd = make_desk(two_hop_model())
    g = gd.graph
    r = Conversation("t2", graph=g).send("I was charged twice, I want my money back")
    assert r.agent == "refunds"
    evts = gd.deps.events.events("t2")
    assert seq(evts) == TWO_HANDOFFS
    # one run, one thread, one turn, one task on every event of it
    assert len({e.run_id for e in evts}) == 1 and evts[0].run_id
    assert {e.thread_id for e in evts} == {"t2"}
    assert {e.turn for e in evts[1:]} == {1}
    task_ids = {e.task_id for e in evts[1:]}
    assert len(task_ids) == 1 and next(iter(task_ids)).startswith("task_")
    # fields the issue asks for
    accepted = [e for e in evts if e.kind == "handoff_accepted"]
    assert [e.reason for e in accepted] == ["a charge question", "wants the money back"]
    # hop numbers of the turn (graph.contracts.packet.number_hops): entry → triage is hop 1, the two handoffs hops 2 and 3
    assert [e.detail["hop"] for e in accepted] == [2, 3]
    assert [e.detail["hop"] for e in evts if e.kind == "agent_started"] == [1, 2, 3]
    assert all(e.history_items and e.history_items > 0 for e in accepted)
    assert all(e.state_version == 0 for e in evts[1:])
    started = [e for e in evts if e.kind == "agent_started"]
    assert all(len(e.fingerprint) == 16 for e in started)
    calls = [e for e in evts if e.kind == "model_called"]
    assert {e.model for e in calls} == {"scripted"}
    assert all(e.input_tokens is None and e.output_tokens is None for e in calls)  # the model reported no usage
    assert [e.ts for e in evts] == sorted(e.ts for e in evts)
    assert {e.kind for e in evts} <= set(EVENT_KINDS)


def test_token_counts_come_from_usage_metadata(make_desk):
    def policy(agent, user, names, i, msgs):
        return AIMessage(content="hello", usage_metadata={"input_tokens": 11, "output_tokens": 3, "total_tokens": 14})

    gd = make_desk(sm.ScriptedChatModel(policy=policy))
    g = gd.graph
    Conversation("tok", graph=g).send("something unrelated")
    call = next(e for e in gd.deps.events.events("tok") if e.kind == "model_called")
    assert (call.input_tokens, call.output_tokens, call.total_tokens) == (11, 3, 14)


def test_events_are_stored_in_the_checkpoint_database(tmp_path, make_desk):
    db = tmp_path / "switchboard.db"
    gd = make_desk(two_hop_model(), checkpointer=open_checkpointer(db))
    g = gd.graph
    Conversation("tp", graph=g).send("charged twice")
    Conversation("tp", graph=g).send("and again please")
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"checkpoints", "events"} <= tables
        n = conn.execute("SELECT COUNT(*) FROM events WHERE thread_id='tp'").fetchone()[0]
    reopened = open_event_log(db).events("tp")
    assert len(reopened) == n and seq(reopened[:len(TWO_HANDOFFS)]) == TWO_HANDOFFS
    runs = [e.run_id for e in reopened if e.kind == "run_started"]
    assert len(runs) == 2 and runs[0] != runs[1]
    assert [e.turn for e in reopened if e.kind == "run_completed"] == [1, 2]


def test_a_node_visit_is_one_insert_committed_with_the_savers_writes(tmp_path, make_desk):
    saver = open_checkpointer(tmp_path / "switchboard.db")
    gd = make_desk(two_hop_model(), checkpointer=saver)
    log = gd.deps.events
    assert log.conn is saver.conn and log.joins_saver_commits  # one writer on the file: the saver's connection, lock
    batches: list[list[str]] = []
    commits: list[bool] = []
    pending_at_saver_commit: list[bool] = []
    real = log.record_many

    def spy(items, commit=True):
        batches.append([k for k, _ in items])
        out = real(items, commit=commit)
        commits.append(commit)
        return out

    log.record_many = spy
    real_put_writes = saver.put_writes

    def put_writes(*args, **kwargs):  # a node's uncommitted events are in the transaction the saver commits here
        pending_at_saver_commit.append(saver.conn.in_transaction)
        return real_put_writes(*args, **kwargs)

    saver.put_writes = put_writes
    Conversation("tb", graph=gd.graph).send("charged twice")
    # run_started rides with the entry node's batch (its entry_decided); triage, billing and refunds one batch each;
    # run_completed alone at the end
    assert [b[:2] for b in batches] == [["run_started", "entry_decided"], ["agent_started", "model_called"],
                                        ["agent_started", "model_called"], ["agent_started", "model_called"],
                                        ["run_completed"]]
    # the node batches join the saver's next commit; the run's end commits
    assert commits == [False, False, False, False, True] and any(pending_at_saver_commit)
    assert not saver.conn.in_transaction
    assert [k for b in batches for k in b] == [e.kind for e in real.__self__.events("tb")]
    log.close()  # leaves the saver's connection open
    assert saver.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == sum(map(len, batches))


def test_record_many_is_idempotent_within_and_across_batches():
    log = open_event_log("memory")
    items = [("agent_started", {"key": f"k{i}", "thread_id": "t"}) for i in range(450)]  # 3 INSERT statements
    first = log.record_many(items + [("agent_started", {"key": "k7", "thread_id": "t"})])
    assert [e is not None for e in first] == [True] * 450 + [False]
    again = log.record_many([("run_completed", {"key": "k9"}), ("run_completed", {"key": "new"})])
    assert [e.kind if e else None for e in again] == [None, "run_completed"]
    assert len(log.events("t")) == 450 and len(log.events()) == 451


def test_refused_handoffs_and_loops_are_events(make_desk):
    gd = make_desk(sm.ping_pong("billing", "refunds"))
    g = gd.graph
    r = Conversation("pp", graph=g).send("I was charged twice")
    assert r.status == "fallback"
    evts = gd.deps.events.events("pp")
    kinds = [e.kind for e in evts]
    loop = next(e for e in evts if e.kind == "loop_detected")
    assert loop.detail["type"] == "bounce_back"
    refused = [e for e in evts if e.kind == "handoff_refused"]
    assert refused and refused[-1].status == "bounce_back"
    assert kinds.index("loop_detected") < kinds.index("handoff_refused")
    assert [e.status for e in evts if e.kind == "agent_finished"][-2:] == ["fallback", "fallback"]
    assert evts[-1].kind == "run_completed" and evts[-1].status == "fallback"

    g2d = make_desk(sm.always_illegal("account", "refunds"))
    g2 = g2d.graph
    Conversation("il", graph=g2).send("refund please")
    ill = [e for e in g2d.deps.events.events("il") if e.kind == "handoff_refused"]
    assert ill and all(e.to_agent == "account" and "may not hand off" in e.reason for e in ill[:-1])


@pytest.mark.parametrize("exc,status", [(TimeoutError("read timed out"), "timeout"), (ConnectionError("down"), "error")])
def test_model_failure_is_an_agent_error_or_timeout(make_desk, exc, status):
    gd = make_desk(sm.raises(exc))
    g = gd.graph
    Conversation("mf", graph=g).send("hello there")
    fin = next(e for e in gd.deps.events.events("mf") if e.kind == "agent_finished")
    assert fin.agent == "triage" and fin.status == status and fin.to_agent == "fallback"
    call = next(e for e in gd.deps.events.events("mf") if e.kind == "model_called")
    assert call.status == status


def test_tool_events_and_replayed_side_effects(make_desk):
    """A tool call is bracketed by tool_called/tool_finished."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="route")])
        if agent == "billing" and not any(getattr(m, "name", "") == "find_duplicate_charges" for m in msgs):
            return AIMessage(content="", tool_calls=[sm.tool_call("find_duplicate_charges")])
        return AIMessage(content="Found it.")

    gd = make_desk(sm.ScriptedChatModel(policy=policy))
    g = gd.graph
    Conversation("tl", graph=g).send("charged twice")
    evts = [e for e in gd.deps.events.events("tl") if e.kind in ("tool_called", "tool_finished")]
    assert [(e.kind, e.detail["tool"], e.status) for e in evts] == [
        ("tool_called", "find_duplicate_charges", None), ("tool_finished", "find_duplicate_charges", "ok")]


def test_stream_carries_the_events_live(make_desk):
    gd = make_desk(two_hop_model())
    g = gd.graph
    cfg = {"configurable": {"thread_id": "ts"}}
    order = []
    for mode, chunk in g.stream({"messages": ensure_ids([HumanMessage("charged twice")])}, cfg,
                                stream_mode=["custom", "updates"]):
        order.append(chunk["event"] if mode == "custom" else f"update:{next(iter(chunk))}")
    assert order[:7] == ["entry_decided", "update:entry", "agent_started", "model_called", "handoff_requested",
                         "handoff_accepted", "agent_finished"]
    assert order.index("update:triage") == 7  # the node's events arrive before its state update
    stored = [e.kind for e in gd.deps.events.events("ts") if e.kind not in ("run_started", "run_completed")]
    assert [o for o in order if not o.startswith("update:")] == stored


def test_no_event_log_when_disabled(kw_router, store):
    from graph.builder import build_desk
    from nodes.embedded.offline_model import OfflineChatModel

    gd = build_desk(model=OfflineChatModel(router=kw_router), checkpointer=InMemorySaver(), router=kw_router,
                    store=store, events=False)
    assert gd.deps.events is None
    assert Conversation("n", desk=gd).send("charged twice").text


def test_emit_outside_a_node_is_a_noop_and_kinds_are_checked():
    assert events.emit("model_called", model="x") is None
    with pytest.raises(ValueError):
        events.emit("made_up")
    log = open_event_log("memory")
    with pytest.raises(ValueError):
        log.record("made_up")


# ---------------------------------------------------------------- interrupt / resume / failure (infrastructure)
class S(TypedDict, total=False):
    x: int
    turn: int


def _mini_graph(log, checkpointer):
    def ask(state):
        answer = interrupt({"question": "approve?"})
        while answer not in ("yes", "no"):  # a malformed answer pauses again (as human_approval does)
            answer = interrupt({"question": "approve? (yes/no)", "last_error": f"bad answer {answer!r}"})
        events.emit("tool_called", tool="after_resume", answer=answer)
        return Command(goto=END, update={"x": 1})

    def boom(state):
        raise RuntimeError("kaput")

    rec = EventRecorder(log)
    g = StateGraph(S)
    g.add_node("ask", rec.instrument("ask", ask))
    g.add_node("boom", rec.instrument("boom", boom))
    g.add_conditional_edges(START, lambda s: "boom" if s.get("x") == -1 else "ask", ["ask", "boom"])
    return rec.attach(g.compile(checkpointer=checkpointer))


def test_interrupt_and_resume_are_recorded_once():
    log = open_event_log("memory")
    g = _mini_graph(log, InMemorySaver())
    cfg = {"configurable": {"thread_id": "ir"}}
    g.invoke({"x": 0, "turn": 1}, cfg)
    first = seq(log.events("ir"))
    assert first == [("run_started", None, None, None, None), ("agent_started", "ask", None, None, None),
                     ("interrupt", "ask", None, None, None), ("agent_finished", "ask", None, None, "interrupted"),
                     ("run_completed", None, None, None, "awaiting_approval")]
    assert log.events("ir", kinds=["interrupt"])[0].detail["payload"] == {"question": "approve?"}
    g.invoke(Command(resume="yes"), cfg)
    evts = log.events("ir")
    # the re-run of "ask" from its first line reproduced agent_started: stored once, not twice
    assert seq(evts)[5:] == [("run_started", None, None, None, None), ("resumed", "ask", None, None, None),
                             ("tool_called", "ask", None, None, None), ("agent_finished", "ask", None, END, "next"),
                             ("run_completed", None, None, None, "done")]
    assert evts[6].detail["decision"] == "yes" and evts[5].detail["decision"] == "yes"
    assert evts[7].detail["answer"] == "yes"
    assert len({e.run_id for e in evts}) == 2


def test_a_second_pause_in_the_same_node_is_recorded_and_nothing_is_duplicated():
    log = open_event_log("memory")
    g = _mini_graph(log, InMemorySaver())
    cfg = {"configurable": {"thread_id": "ir2"}}
    g.invoke({"x": 0, "turn": 1}, cfg)
    g.invoke(Command(resume="maybe"), cfg)
    g.invoke(Command(resume="yes"), cfg)
    node = [(e.kind, e.status) for e in log.events("ir2") if e.agent == "ask"]
    assert node == [("agent_started", None), ("interrupt", None), ("agent_finished", "interrupted"),
                    ("resumed", None), ("interrupt", None), ("agent_finished", "interrupted"),
                    ("resumed", None), ("tool_called", None), ("agent_finished", "next")]
    assert [e.status for e in log.events("ir2", kinds=["run_completed"])] == ["awaiting_approval", "awaiting_approval", "done"]
    assert [e.detail["decision"] for e in log.events("ir2", kinds=["resumed"])] == ["maybe", "yes"]


def test_resume_in_a_new_process_does_not_duplicate(tmp_path):
    db = tmp_path / "cp.db"
    cfg = {"configurable": {"thread_id": "np"}}
    _mini_graph(open_event_log(db), open_checkpointer(db)).invoke({"x": 0, "turn": 1}, cfg)
    log2 = open_event_log(db)  # "another process": new connections, empty in-memory state
    _mini_graph(log2, open_checkpointer(db)).invoke(Command(resume="no"), cfg)
    kinds = [e.kind for e in log2.events("np")]
    assert kinds.count("agent_started") == 1 and kinds.count("resumed") == 1 and kinds.count("interrupt") == 1


def test_a_failing_node_records_agent_error_and_run_failed():
    log = open_event_log("memory")
    g = _mini_graph(log, InMemorySaver())
    with pytest.raises(RuntimeError):
        g.invoke({"x": -1}, {"configurable": {"thread_id": "f"}})
    assert seq(log.events("f")) == [("run_started", None, None, None, None), ("agent_started", "boom", None, None, None),
                                    ("agent_finished", "boom", None, None, "error"), ("run_failed", None, None, None, "error")]
    assert "kaput" in log.events("f")[-1].reason


# ---------------------------------------------------------------- the approval flow end to end
APPROVAL_PAUSE = [
    ("run_started", None, None, None, None),
    ("entry_decided", "entry", None, "triage", None),
    ("agent_started", "triage", "entry", None, None),
    ("model_called", "triage", None, None, None),
    ("handoff_requested", "triage", "triage", "refunds", None),
    ("handoff_accepted", "triage", "triage", "refunds", None),
    ("agent_finished", "triage", None, "refunds", "handoff"),
    ("agent_started", "refunds", "triage", None, None),
    ("model_called", "refunds", None, None, None),
    ("tool_called", "refunds", None, None, None),
    ("tool_finished", "refunds", None, None, "ok"),
    ("agent_finished", "refunds", None, "risk", "next"),
    ("agent_started", "risk", "refunds", None, None),
    ("agent_finished", "risk", None, "human_approval", "next"),
    ("agent_started", "human_approval", "risk", None, None),
    ("interrupt", "human_approval", None, None, None),
    ("agent_finished", "human_approval", None, None, "interrupted"),
    ("run_completed", None, None, "refunds", "awaiting_approval"),
]
APPROVAL_RESUME = [
    ("run_started", None, None, None, None),
    ("resumed", "human_approval", None, None, None),
    ("agent_finished", "human_approval", None, "refund_execute", "next"),
    ("agent_started", "refund_execute", "human_approval", None, None),
    ("tool_called", "refund_execute", None, None, None),
    ("tool_finished", "refund_execute", None, None, "ok"),
    ("agent_finished", "refund_execute", None, "refunds", "handoff"),
    ("agent_started", "refunds", "refund_execute", None, None),
    ("model_called", "refunds", None, None, None),
    ("agent_finished", "refunds", None, "__end__", "answered"),
    ("run_completed", None, None, "refunds", "answered"),
]


def test_approval_pause_and_resume_exact_event_sequence(isolated_home):
    from graph.contracts.context import RunContext
    from tests.conftest import BIG, approver_desk
    g, store = approver_desk(isolated_home)
    r = Conversation("ta", graph=g).send(BIG)
    assert r.status == "awaiting_approval"
    log = open_event_log(isolated_home / "switchboard.db")
    assert seq(log.events("ta")) == APPROVAL_PAUSE
    intr = log.events("ta", kinds=["interrupt"])[0]
    assert intr.detail["payload"]["kind"] == "refund_approval" and intr.detail["payload"]["amount_minor"] == 2380
    assert [e.detail["tool"] for e in log.events("ta", kinds=["tool_called"])] == ["request_refund"]

    decision = {"decision": "approve", "note": "receipt checked", "decision_id": "dc_fixed"}
    r2 = Conversation("ta", graph=g, context=RunContext.for_operator("ann", "t_demo")).resume(decision)
    assert r2.agent == "refunds" and "paid back" in r2.text
    evts = log.events("ta")
    assert seq(evts) == APPROVAL_PAUSE + APPROVAL_RESUME  # the re-run of human_approval added no duplicate
    resumed = log.events("ta", kinds=["resumed"])[0]
    assert resumed.detail["decision"] == decision
    assert [e.detail["tool"] for e in log.events("ta", kinds=["tool_finished"])] == ["request_refund", "execute_refund"]
    # business-state versions: the refund request (+1), then the payment (+1)
    assert [e.state_version for e in log.events("ta", kinds=["tool_finished"])][0] == 1
    assert evts[-1].state_version == 2
    assert len({e.run_id for e in evts}) == 2 and {e.turn for e in evts if e.agent} == {1}


def test_async_runs_record_the_same_sequence_without_blocking_the_loop(make_desk):
    """ainvoke (as `langgraph dev` runs the graph): run-level events are written off the event loop, in order."""
    import asyncio

    gd = make_desk(two_hop_model())
    g = gd.graph

    async def main():
        await g.ainvoke({"messages": ensure_ids([HumanMessage("charged twice")])}, {"configurable": {"thread_id": "as"}})

    asyncio.run(main())
    assert seq(gd.deps.events.events("as")) == TWO_HANDOFFS
