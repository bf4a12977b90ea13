"""Runtime guarantees with misbehaving models: loops, bounce-backs, budgets, retries, history shaping."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from graph.conversation import Conversation
from nodes.testing import scripted as sm
from policies.history import HistoryPolicy
from tests.transcript import transcript_errors


def _values(g, tid="t"):
    return g.get_state({"configurable": {"thread_id": tid}}).values


def _internal_reason(g, r, words: str) -> bool:
    """The guard's reason is in the fallback packet and the handoff path (for operators), never in the customer's
    answer."""
    packet = _values(g)["handoff"]
    return words in packet.reason and words in r.handoff_path[-1].reason and words not in r.text \
        and "Reason:" not in r.text


def test_ping_pong_ends_in_fallback_within_four_model_calls(make_graph):
    model = sm.ping_pong("billing", "refunds")
    g = make_graph(model)
    r = Conversation("t", graph=g).send("I was charged twice")
    assert r.status == "fallback" and model.calls <= 4
    v = _values(g)
    assert v["task"].status == "fallback"
    assert "tx_1008" in r.text  # the fallback answers with the facts so far
    assert transcript_errors(v["messages"]) == []


def test_illegal_target_forever_ends_in_fallback(make_graph):
    model = sm.always_illegal("account", "refunds")
    g = make_graph(model)
    r = Conversation("t", graph=g).send("refund please")
    assert r.status == "fallback" and _internal_reason(g, r, "loop detected: state fingerprint")
    assert model.calls <= 4


def test_self_handoff_is_refused_then_loop_ends_it(make_graph):
    model = sm.self_handoff("billing")
    g = make_graph(model)
    r = Conversation("t", graph=g).send("charged twice")
    refusals = [m for m in _values(g)["messages"] if isinstance(m, ToolMessage) and "oneself" in m.content]
    assert refusals and r.status == "fallback"


def test_bounce_back_same_reason_detected(make_graph):
    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="route")])
        if agent == "billing":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_cards", reason="card issue")])
        return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="Card issue!")])

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    r = Conversation("t", graph=g).send("charged twice")
    assert r.status == "fallback" and _internal_reason(g, r, "bounce-back")


def test_hop_budget_is_the_last_guard(make_graph):
    # a legitimate-looking chain of distinct handoffs: triage -> billing -> cards -> account -> policy -> transfers
    chain = {"triage": "billing", "billing": "cards", "cards": "account", "account": "policy", "policy": "transfers"}

    def policy(agent, user, names, i, msgs):
        nxt = chain.get(agent)
        if nxt:
            return AIMessage(content="", tool_calls=[sm.tool_call(f"transfer_to_{nxt}", reason=f"step {i}")])
        return AIMessage(content="transfers answers")

    g = make_graph(sm.ScriptedChatModel(policy=policy), max_hops=3)
    r = Conversation("t", graph=g).send("charged twice")
    assert r.status == "fallback" and _internal_reason(g, r, "hop budget of 3")
    assert len([h for h in r.handoff_path if h.kind == "handoff"]) == 3
    g2 = make_graph(sm.ScriptedChatModel(policy=policy), max_hops=8)
    assert Conversation("t", graph=g2).send("charged twice").agent == "transfers"


class FlakyStore:
    """Wraps the business store; ``find_duplicate_charges`` fails ``fail`` times, optionally slowly."""

    def __init__(self, store, fail: int, exc=ConnectionError("db down")):
        self._s, self.fail, self.exc, self.calls = store, fail, exc, 0

    def find_duplicate_charges(self, customer_id):
        self.calls += 1
        if self.calls <= self.fail:
            raise self.exc
        return self._s.find_duplicate_charges(customer_id)

    def __getattr__(self, name):
        return getattr(self._s, name)


def _dup_then_answer():
    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="route")])
        if not any(isinstance(m, ToolMessage) and m.name == "find_duplicate_charges" for m in msgs):
            return AIMessage(content="", tool_calls=[sm.tool_call("find_duplicate_charges")])
        last = [m for m in msgs if isinstance(m, ToolMessage)][-1]
        return AIMessage(content=f"billing saw: {last.content[:80]}")

    return sm.ScriptedChatModel(policy=policy)


def test_retry_with_backoff_is_not_a_loop(store, kw_router):
    from langgraph.checkpoint.memory import InMemorySaver

    from graph import build_graph
    from graph.contracts.settings import Settings

    flaky = FlakyStore(store, fail=2)
    g = build_graph(model=_dup_then_answer(), checkpointer=InMemorySaver(), router=kw_router, store=flaky,
                    settings=Settings.from_env(tool_retries=3, tool_backoff_s=0.001))
    r = Conversation("t", graph=g).send("charged twice")
    assert r.status == "answered" and '"ok": true' in r.text
    assert flaky.calls == 3 and _values(g)["tool_attempts"] == 2  # two failed attempts, each changed the fingerprint


def test_failing_tool_uses_cached_read_then_fallback(store, kw_router):
    from langgraph.checkpoint.memory import InMemorySaver

    from graph import build_graph
    from graph.contracts.settings import Settings

    flaky = FlakyStore(store, fail=0)
    g = build_graph(model=_dup_then_answer(), checkpointer=InMemorySaver(), router=kw_router, store=flaky,
                    settings=Settings.from_env(tool_retries=2, tool_backoff_s=0.001))
    assert Conversation("a", graph=g).send("charged twice").status == "answered"  # fills the cache
    flaky.fail = 10**9
    r = Conversation("b", graph=g).send("charged twice")
    assert r.status == "answered" and '"stale": true' in r.text.replace("'", '"') or "stale" in r.text
    # a fresh process-level cache: no alternative left -> fallback, never an exception
    g2 = build_graph(model=_dup_then_answer(), checkpointer=InMemorySaver(), router=kw_router, store=flaky,
                     settings=Settings.from_env(tool_retries=2, tool_backoff_s=0.001))
    r2 = Conversation("c", graph=g2).send("charged twice")
    assert r2.status == "fallback" and "unavailable" in r2.text
    assert transcript_errors(_values(g2, "c")["messages"]) == []


def test_slow_tool_times_out_and_retries(store, kw_router):
    import time

    from langgraph.checkpoint.memory import InMemorySaver

    from graph import build_graph
    from graph.contracts.settings import Settings

    class SlowOnce(FlakyStore):
        def find_duplicate_charges(self, customer_id):
            self.calls += 1
            if self.calls == 1:
                time.sleep(0.5)
            return self._s.find_duplicate_charges(customer_id)

    slow = SlowOnce(store, fail=0)
    g = build_graph(model=_dup_then_answer(), checkpointer=InMemorySaver(), router=kw_router, store=slow,
                    settings=Settings.from_env(tool_timeout_s=0.1, tool_backoff_s=0.001))
    r = Conversation("t", graph=g).send("charged twice")
    assert r.status == "answered" and slow.calls == 2 and _values(g)["tool_attempts"] == 1


@pytest.mark.parametrize("mode,k", [("full", 0), ("last_k", 1), ("packet_only", 1), ("no_tool_calls", 0)])
def test_history_shaping_receiving_model_input(make_graph, mode, k):
    """billing -> refunds under each mode: what refunds' model receives, while the checkpoint keeps everything."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="route")])
        if agent == "billing":
            if "twice" not in user:
                return AIMessage(content="billing answers the fee question")
            if not any(isinstance(m, ToolMessage) and m.name == "find_duplicate_charges" for m in msgs):
                return AIMessage(content="", tool_calls=[sm.tool_call("find_duplicate_charges")])
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_refunds", reason="refund it")])
        return AIMessage(content="refunds answers")

    model = sm.ScriptedChatModel(policy=policy)
    g = make_graph(model, history={("billing", "refunds"): HistoryPolicy(mode, k), "triage": HistoryPolicy("full")})
    conv = Conversation("t", graph=g)
    assert conv.send("hello, first question about fees").agent == "billing"  # an earlier turn
    conv.send("I was charged twice, refund it")
    seen = [msgs for agent, msgs in model.log if agent == "refunds"][-1]
    # one system message, first (strict chat templates accept no other): the prompt with the packet merged into it
    system = [m for m in seen if isinstance(m, SystemMessage)]
    assert len(system) == 1 and seen[0] is system[0] and system[0].content.startswith("You are")
    body = seen[1:]
    humans = [m.content for m in body if isinstance(m, HumanMessage)]
    tools = [m for m in body if isinstance(m, ToolMessage)]
    packet = [system[0]] if "\nHandoff from billing to refunds." in system[0].content else []
    if mode == "full":
        assert len(humans) == 2 and tools and not packet
    elif mode == "last_k":
        assert humans == ["I was charged twice, refund it"] and tools and packet
    elif mode == "packet_only":
        assert humans == ["I was charged twice, refund it"] and not tools
        assert "transaction_id=tx_1008 (system_verified, as of " in packet[0].content
    else:
        assert len(humans) == 2 and not tools and not any(getattr(m, "tool_calls", None) for m in body)
    assert transcript_errors(body) == []
    stored = _values(g)["messages"]
    assert len([m for m in stored if isinstance(m, HumanMessage)]) == 2
    assert any(isinstance(m, ToolMessage) and m.name == "find_duplicate_charges" for m in stored)


# -- a caller's recursion limit cannot cut a turn short ---------------------------------------------------------------

SMALL_REFUND = "Please refund tx_1008, it was a duplicate coffee"  # £4.50: approved by the house rules, paid at once


def _paid(store) -> list:
    return [r for r in store.list_refunds("c_ada") if r.transaction_id == "tx_1008" and r.status == "executed"]


def test_a_recursion_limit_of_3_from_invoke_still_finishes_the_refund_turn(make_desk, store):
    """The refund's whole flow (entry, triage, refunds, risk, refund_execute, refunds: 6 steps) runs under a caller's
    ``recursion_limit`` of 3, and the next message is the thread's second turn, not a fresh start."""
    from graph.contracts.context import RunContext

    graph = make_desk().graph
    config = {"configurable": {"thread_id": "rl3"}, "recursion_limit": 3}
    ada = RunContext(user_id="c_ada")
    out = graph.invoke({"messages": [("user", SMALL_REFUND)]}, config, context=ada)
    assert out["turn"] == 1 and "paid back" in str(out["messages"][-1].content)
    assert [h.to_agent for h in out["handoff_path"]][-3:] == ["risk", "refund_execute", "refunds"]
    assert len(_paid(store)) == 1 and graph.get_state(config).next == ()
    again = graph.invoke({"messages": [("user", "when will it arrive?")]}, config, context=ada)
    assert again["turn"] == 2 and "credited to your account" in str(again["messages"][-1].content)
    assert len(_paid(store)) == 1  # paid once


def test_a_small_recursion_limit_through_async_stream_and_with_config(make_desk, store):
    import asyncio

    from graph.builder import DeskGraph
    from graph.contracts.context import RunContext

    graph = make_desk().graph
    ada = RunContext(user_id="c_ada")
    out = asyncio.run(graph.ainvoke({"messages": [("user", "my card was stolen")]},
                                    {"configurable": {"thread_id": "rl-async"}, "recursion_limit": 2}, context=ada))
    assert out["active_agent"] == "cards" and out["turn"] == 1
    bound = graph.with_config(recursion_limit=3)
    assert isinstance(bound, DeskGraph) and bound.min_recursion_limit == graph.min_recursion_limit
    chunks = list(bound.stream({"messages": [("user", SMALL_REFUND)]}, {"configurable": {"thread_id": "rl-stream"}},
                               context=ada, stream_mode="updates"))
    assert "refund_execute" in {node for chunk in chunks for node in chunk}
    # the floor is the desk's own need; a larger limit is the caller's to keep
    floor = graph.min_recursion_limit
    assert floor == make_desk().deps.settings.recursion_limit
    assert bound.run_config(None) == {"recursion_limit": floor}
    assert graph.run_config({"recursion_limit": 500}) == {"recursion_limit": 500}


def test_the_hop_budget_ends_a_turn_in_fallback_under_a_recursion_limit_of_3(make_graph):
    """A ping-pong between billing and refunds: the policies' budgets end it in fallback (the customer is told a person
    takes over) before any recursion limit, even a caller's 3."""
    from graph.contracts.context import RunContext

    model = sm.ping_pong("billing", "refunds")
    g = make_graph(model)
    config = {"configurable": {"thread_id": "rl-pong"}, "recursion_limit": 3}
    out = g.invoke({"messages": [("user", "I was charged twice")]}, config, context=RunContext(user_id="c_ada"))
    assert out["task"].status == "fallback" and out["handoff_path"][-1].kind == "fallback"
    assert "tx_1008" in str(out["messages"][-1].content)  # the fallback's answer: the facts so far
    assert transcript_errors(out["messages"]) == []


def test_a_conversation_on_a_graph_bound_to_recursion_limit_3_answers_every_turn(make_desk, store):
    desk = make_desk()
    conv = Conversation("rl-conv", graph=desk.graph.with_config(recursion_limit=3), store=store)
    first = conv.send(SMALL_REFUND)
    assert first.status == "answered" and "paid back" in first.text
    later = conv.send("when will it arrive?")
    assert later.turn == 2 and later.agent == "refunds" and "credited to your account" in later.text
    assert len(_paid(store)) == 1
