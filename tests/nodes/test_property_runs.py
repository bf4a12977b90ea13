"""Property test: whatever the model chooses, the run ends within the budget, legally, with a valid transcript."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver

from graph import build_graph
from graph.contracts.settings import Settings
from graph.conversation import Conversation
from nodes.testing.scripted import ScriptedChatModel, tool_call
from policies.edges import AGENTS, EXPERTS, FALLBACK, SUPERVISOR, is_legal_handoff
from tests.conftest import KeywordRouter
from tests.transcript import transcript_errors

NAMES = list(AGENTS) + ["fallback", "supervisor", "nobody"]
CHOICE = st.one_of(
    st.tuples(st.just("answer")),
    st.tuples(st.just("handoff"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("two"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("tool"), st.sampled_from(["find_duplicate_charges", "card_status", "refund_status", "rm_rf"])),
    st.tuples(st.just("invalid"),),
    st.tuples(st.just("call"), st.lists(st.sampled_from([*EXPERTS, "nobody"]), min_size=1, max_size=4)),
)


def _message(choice) -> AIMessage:
    kind = choice[0]
    if kind == "answer":
        return AIMessage(content="done")
    if kind == "handoff":
        facts = {"transaction_id": "tx_1008"} if choice[2] else None
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{choice[1]}", reason="r", facts=facts)])
    if kind == "two":
        return AIMessage(content="", tool_calls=[tool_call(f"transfer_to_{choice[1]}", reason="r"),
                                                 tool_call(f"transfer_to_{choice[2]}", reason="r")])
    if kind == "tool":
        return AIMessage(content="", tool_calls=[tool_call(choice[1])])
    if kind == "call":
        return AIMessage(content="", tool_calls=[tool_call(f"expert_{e}", objective="part") for e in choice[1]])
    return AIMessage(content="", invalid_tool_calls=[{"name": "transfer_to_billing", "args": "{", "id": "inv",
                                                      "error": "bad", "type": "invalid_tool_call"}])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choices=st.lists(CHOICE, min_size=1, max_size=40), max_hops=st.integers(1, 8))
@pytest.mark.slow
def test_any_model_choices_end_legally(choices, max_hops, tmp_path_factory):
    from checkpoints.business import open_store

    def policy(agent, user, names, i, msgs):
        return _message(choices[i % len(choices)])

    model = ScriptedChatModel(policy=policy)
    s = Settings.from_env(max_hops=max_hops)
    store = open_store(tmp_path_factory.mktemp("biz") / "b.db")
    g = build_graph(model=model, checkpointer=InMemorySaver(), settings=s, router=KeywordRouter(), store=store)
    r = Conversation("t", graph=g).send("I was charged twice")  # must not raise
    values = g.get_state({"configurable": {"thread_id": "t"}}).values
    handoffs = [h for h in values["handoff_path"] if h.kind == "handoff"]
    assert len(handoffs) <= max_hops
    for h in handoffs:
        assert is_legal_handoff(h.from_agent, h.to_agent), h
    assert r.agent in (*AGENTS, FALLBACK, SUPERVISOR)
    assert r.status in ("answered", "clarify", "fallback")
    assert transcript_errors(values["messages"]) == []
    # every visit (and every expert called as a tool) makes at most max_tool_rounds calls; visits <= handoffs + 1
    called = values.get("expert_calls") or []
    assert len(called) <= s.max_experts
    assert model.calls <= (len(handoffs) + 1 + len(called)) * s.max_tool_rounds
    assert values.get("active_agent") not in EXPERTS or values["active_agent"] in [h.to_agent for h in handoffs]
