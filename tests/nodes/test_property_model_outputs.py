"""Property test: random model outputs — any tool name, any arguments (other customers' ids,
identity fields, wrong types), any number of calls per message including side-effect floods, text with or without
calls, malformed calls — driven through the whole graph. Every run ends without an exception, with no illegal edge,
no unanswered tool_call, and no record without an owner (the invariants of :mod:`tests.invariants`)."""

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
from nodes.tools import TOOLS
from policies.edges import AGENTS
from tests.conftest import KeywordRouter
from tests.invariants import snapshot, violations

TOOL_NAMES = sorted(TOOLS) + [f"transfer_to_{a}" for a in (*AGENTS, "risk", "human_approval", "refund_execute", "x")]
IDS = ["tx_1001", "tx_1005", "tx_1008", "tx_2001", "tx_9999", "card_ada_phys", "card_bob_phys", "5555", "4242",
       "rf_5001", "rf_0", "tr_3002", "tr_3101", "c_bob", "", "x" * 300]
ARG = st.one_of(st.sampled_from(IDS), st.integers(-5, 10**9), st.none(), st.booleans(), st.text(max_size=20))
ARGS = st.dictionaries(st.sampled_from(["transaction_id", "card_id", "refund_id", "transfer_id", "reason", "limit",
                                        "topic", "customer_id", "tenant_id", "amount_minor", "facts", "target"]),
                       ARG, max_size=4)
CALL = st.tuples(st.one_of(st.sampled_from(TOOL_NAMES), st.text(min_size=1, max_size=12)), ARGS)
MESSAGE = st.one_of(
    st.tuples(st.just("text"), st.text(max_size=50)),
    st.tuples(st.just("calls"), st.lists(CALL, min_size=1, max_size=6), st.text(max_size=10)),
    st.tuples(st.just("invalid"), st.sampled_from(TOOL_NAMES)),
)


def _message(choice) -> AIMessage:
    if choice[0] == "text":
        return AIMessage(content=choice[1] or "ok")
    if choice[0] == "calls":
        calls = [dict(tool_call(name), args=args) for name, args in choice[1]]
        return AIMessage(content=choice[2], tool_calls=calls)
    return AIMessage(content="", invalid_tool_calls=[{"name": choice[1], "args": "{", "id": "inv", "error": "bad",
                                                      "type": "invalid_tool_call"}])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(choices=st.lists(MESSAGE, min_size=1, max_size=12),
       text=st.sampled_from(["Refund tx_1001 please", "I lost my card", "I was charged twice", "my transfer"]))
@pytest.mark.slow
def test_random_model_outputs_keep_every_invariant(choices, text, tmp_path_factory):
    from checkpoints.business import open_store

    def policy(agent, user, names, i, msgs):
        return _message(choices[i % len(choices)])

    store = open_store(tmp_path_factory.mktemp("biz") / "b.db")
    g = build_graph(model=ScriptedChatModel(policy=policy), checkpointer=InMemorySaver(), settings=Settings.from_env(),
                    router=KeywordRouter(), store=store)
    before = snapshot(store)
    conv = Conversation("fz", graph=g, store=store)
    r = conv.send(text)  # must not raise
    assert r.status in ("answered", "clarify", "fallback", "awaiting_approval")
    assert violations(store, before, conv.state, conv.pending()) == []
