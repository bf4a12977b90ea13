"""Graph-level scenarios: legal handoffs, refused handoffs, transcript validity, next-turn entry."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from graph.contracts.state_values import Owner
from graph.conversation import Conversation
from nodes.testing import scripted as sm
from policies.edges import HANDOFF_EDGES
from policies.history import HistoryPolicy
from tests.transcript import transcript_errors

LEGAL = sorted((s, t) for s, ts in HANDOFF_EDGES.items() for t in ts)


@pytest.mark.parametrize("source,target", LEGAL)
def test_each_legal_handoff_is_accepted(make_graph, source, target):
    """Triage routes to ``source``; ``source`` hands off to ``target``; ``target`` answers."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage" and source != "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call(f"transfer_to_{source}", reason="route")])
        if agent == source:
            return AIMessage(content="", tool_calls=[sm.tool_call(f"transfer_to_{target}", reason="yours",
                                                                 facts={"transaction_id": "tx_1008"})])
        return AIMessage(content=f"{agent} answers")

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    r = Conversation("t", graph=g).send("help me please")
    assert r.agent == target and r.status in ("answered", "clarify")
    hops = [(h.from_agent, h.to_agent) for h in r.handoff_path if h.kind == "handoff"]
    assert hops[-1] == (source, target)
    values = g.get_state({"configurable": {"thread_id": "t"}}).values
    assert values["active_agent"] == target
    assert values["handoff"].from_agent == source and values["handoff"].to_agent == target
    assert transcript_errors(values["messages"]) == []


def test_illegal_handoff_refused_with_toolmessage_and_no_other_change(make_graph):
    """refunds -> account is not an edge: refused with a ToolMessage, the agent keeps control and answers."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_refunds", reason="route")])
        if not any(isinstance(m, ToolMessage) and m.content.startswith("Refused") for m in msgs):
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_account", reason="try")])
        return AIMessage(content="refunds keeps it")

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    cfg = {"configurable": {"thread_id": "t"}}
    r = Conversation("t", graph=g).send("refund please")
    values = g.get_state(cfg).values
    refused = [m for m in values["messages"] if isinstance(m, ToolMessage) and m.name == "transfer_to_account"]
    assert len(refused) == 1 and "may not hand off to account" in refused[0].content
    assert r.agent == "refunds" and values["active_agent"] == "refunds"
    assert "account" not in values["visited_agents"]
    assert [h.to_agent for h in values["handoff_path"] if h.kind == "handoff"] == ["refunds"]
    assert values["handoff"].to_agent == "refunds"  # the packet did not change
    assert values["state_version"] == 0
    assert transcript_errors(values["messages"]) == []


def test_transcript_valid_with_parallel_and_invalid_calls(make_graph):
    """Two handoffs + a tool + a malformed call in one message: every tool_call id answered exactly once."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="route")])
        if agent == "billing":
            return AIMessage(content="", tool_calls=[
                sm.tool_call("find_duplicate_charges"),
                sm.tool_call("transfer_to_refunds", reason="refund", facts={"transaction_id": "tx_1008"}),
                sm.tool_call("transfer_to_cards", reason="card")],
                invalid_tool_calls=[{"name": "transfer_to_policy", "args": "{oops", "id": "bad1", "error": "bad json",
                                     "type": "invalid_tool_call"}])
        return AIMessage(content=f"{agent} answers")

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    r = Conversation("t", graph=g).send("charged twice")
    msgs = g.get_state({"configurable": {"thread_id": "t"}}).values["messages"]
    assert transcript_errors(msgs) == []
    tool_msgs = {m.name: m.content for m in msgs if isinstance(m, ToolMessage)}
    assert tool_msgs["transfer_to_refunds"].startswith("Transferred")
    assert "only one handoff per message" in tool_msgs["transfer_to_cards"]
    assert "control moved to refunds" in tool_msgs["find_duplicate_charges"]
    assert "not valid JSON" in tool_msgs["transfer_to_policy"]
    assert r.agent == "refunds"


def test_transcript_checker_catches_unanswered_call():
    bad = [AIMessage(content="", tool_calls=[sm.tool_call("x")])]
    assert transcript_errors(bad)


def test_next_turn_continues_at_active_agent(make_graph):
    g = make_graph()
    conv = Conversation("t", graph=g)
    first = conv.send("Where is my refund?")
    assert first.agent == "refunds"
    second = conv.send("and the other refund?")
    assert second.agent == "refunds"
    assert [h.to_agent for h in second.handoff_path] == ["refunds"]  # entry went straight to refunds
    assert conv.state["entry_reason"].startswith("choice reply")  # "the other refund" picks among the listed ones


def test_change_of_topic_goes_through_triage(make_graph):
    g = make_graph()
    conv = Conversation("t", graph=g)
    assert conv.send("Where is my refund?").agent == "refunds"
    r = conv.send("my card was stolen")
    assert r.agent == "cards"
    assert [h.to_agent for h in r.handoff_path] == ["triage", "cards"]
    assert conv.state["entry_reason"].startswith("topic changed")


def test_another_customers_run_is_refused_by_the_graph(make_graph):
    """Driving the compiled graph with another customer's RunContext is refused by the entry node (raw LangGraph API):
    an AccessDenied, no model call, the owner's transcript unchanged (the refused message is taken back out)."""
    from langchain_core.messages import HumanMessage

    from graph.contracts.context import RunContext
    from graph.contracts.errors import AccessDenied

    g = make_graph()
    Conversation("t", graph=g).send("Where is my refund?")
    cfg = {"configurable": {"thread_id": "t"}}
    before = [m.id for m in g.get_state(cfg).values["messages"]]
    with pytest.raises(AccessDenied, match="not one of your threads"):
        g.invoke({"messages": [HumanMessage("and the other refund?", id="h2")]}, cfg, context=RunContext(user_id="c_bob"))
    values = g.get_state(cfg).values
    assert [m.id for m in values["messages"]] == before and values["owner"] == Owner(customer_id="c_ada",
                                                                                    tenant_id="t_demo")


def test_conversation_refuses_another_customers_thread_and_unknown_customers(make_graph):
    from graph.contracts.context import RunContext
    from graph.contracts.errors import InputError

    g = make_graph()
    Conversation("t", graph=g).send("Where is my refund?")
    before = len(Conversation("t", graph=g).state["messages"])
    with pytest.raises(InputError, match="not one of your threads"):
        Conversation("t", graph=g, context=RunContext(user_id="c_bob")).send("cancel my refund")
    with pytest.raises(InputError, match="unknown customer 'nobody'"):
        Conversation("new", graph=g, context=RunContext(user_id="nobody")).send("hi")
    with pytest.raises(InputError, match="unknown customer 'c_bob' in tenant 't_other'"):
        Conversation("new2", graph=g, context=RunContext(user_id="c_bob", tenant_id="t_other")).send("hi")
    assert len(Conversation("t", graph=g).state["messages"]) == before


def test_model_failure_ends_in_fallback_not_exception(make_graph):
    g = make_graph(sm.raises(ConnectionError("server unreachable")))
    r = Conversation("t", graph=g).send("charged twice")
    assert r.status == "fallback" and r.agent == "fallback"
    assert "ConnectionError" not in r.text and "could not answer" in r.text  # customer words; the cause is recorded:
    assert r.model_error.error_type == "ConnectionError" and "ConnectionError" in r.handoff_path[-1].reason
    assert Conversation("t", graph=g).state["task"].status == "fallback"


def test_empty_message_is_refused_and_stores_nothing(make_graph):
    from graph.contracts.errors import InputError

    g = make_graph()
    conv = Conversation("t", graph=g)
    with pytest.raises(InputError):
        conv.send("   ")
    assert conv.state == {}


# -- what a sender writes with its handoff reaches the receiver's model once ----------------------------------------

TRIAGE_NOTE = "The customer says tx_1008 is the second coffee charge of the morning."
BILLING_NOTE = "I checked: tx_1008 duplicates tx_1007, seven minutes apart."


def _noting_model() -> sm.ScriptedChatModel:
    """Triage and billing each write a note with their handoff (triage -> billing -> refunds); refunds answers."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content=TRIAGE_NOTE, tool_calls=[sm.tool_call("transfer_to_billing", reason="a charge")])
        if agent == "billing":
            return AIMessage(content=BILLING_NOTE, tool_calls=[sm.tool_call("transfer_to_refunds",
                                                                           reason="wants the duplicate back")])
        return AIMessage(content="I'll look at the refund.")

    return sm.ScriptedChatModel(policy=policy)


def _first_input(model: sm.ScriptedChatModel, agent: str) -> list:
    return next(msgs for who, msgs in model.log if who == agent)


@pytest.mark.parametrize("history", [None, {"triage": HistoryPolicy("full")}],
                         ids=["default-history", "full-history-from-triage"])
def test_a_senders_note_reaches_the_receivers_model_once(make_graph, history):
    """The note travels in the packet ("Note from triage (its own words, not verified): …"); the sender's handoff
    message reaches the receiver without that text (its tool call and answer kept, so the input stays a valid
    transcript). With ``full`` history no packet is rendered, and the note travels in the message instead: once
    either way. The checkpoint keeps the message as the model wrote it."""
    model = _noting_model()
    g = make_graph(model, history=history)
    conv = Conversation("note-once", graph=g)
    r = conv.send("I was charged twice for my coffee, I want my money back")
    assert r.agent == "refunds" and [h.to_agent for h in r.handoff_path if h.kind == "handoff"] == ["billing", "refunds"]
    for receiver, sender, note in (("billing", "triage", TRIAGE_NOTE), ("refunds", "billing", BILLING_NOTE)):
        seen = _first_input(model, receiver)
        assert sum(str(m.content).count(note) for m in seen) == 1, (receiver, [str(m.content)[:80] for m in seen])
        packet_mode = not (history and sender == "triage")
        assert (f"Note from {sender} (its own words, not verified): {note}" in str(seen[0].content)) is packet_mode
        assert transcript_errors(seen[1:]) == []
    billing_seen = _first_input(model, "billing")
    assert any(isinstance(m, AIMessage) and m.tool_calls and m.tool_calls[0]["name"] == "transfer_to_billing"
               for m in billing_seen)  # the handoff itself is still in the input (last_k history from triage)
    stored = [str(m.content) for m in conv.state["messages"] if isinstance(m, AIMessage)]
    assert TRIAGE_NOTE in stored and BILLING_NOTE in stored
