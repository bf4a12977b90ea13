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
    return words in packet["reason"] and words in r.handoff_path[-1].reason and words not in r.text \
        and "Reason:" not in r.text


def test_ping_pong_ends_in_fallback_within_four_model_calls(make_graph):
    model = sm.ping_pong("billing", "refunds")
    g = make_graph(model)
    r = Conversation("t", graph=g).send("I was charged twice")
    assert r.status == "fallback" and model.calls <= 4
    v = _values(g)
    assert v["task"]["status"] == "fallback"
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
    from graph.settings import Settings

    flaky = FlakyStore(store, fail=2)
    g = build_graph(model=_dup_then_answer(), checkpointer=InMemorySaver(), router=kw_router, store=flaky,
                    settings=Settings.from_env(tool_retries=3, tool_backoff_s=0.001))
    r = Conversation("t", graph=g).send("charged twice")
    assert r.status == "answered" and '"ok": true' in r.text
    assert flaky.calls == 3 and _values(g)["tool_attempts"] == 2  # two failed attempts, each changed the fingerprint


def test_failing_tool_uses_cached_read_then_fallback(store, kw_router):
    from langgraph.checkpoint.memory import InMemorySaver

    from graph import build_graph
    from graph.settings import Settings

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
    from graph.settings import Settings

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
