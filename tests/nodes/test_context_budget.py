"""Bounded context for every model call: a 200-turn thread with one agent stays under the input budget,
the packet still knows the transaction id from turn 1, and the checkpoint keeps the full transcript."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from graph.contracts.errors import ConfigError
from graph.contracts.settings import Settings
from graph.conversation import Conversation
from nodes.testing.scripted import ScriptedChatModel, tool_call
from policies.history import bound_messages, estimate_tokens

FILLER = "the parcel came late, the box was open and the receipt shows the evening order from the shop "


def one_agent_model() -> ScriptedChatModel:
    """Triage hands every new topic to refunds; refunds answers every turn with a different, longish text."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[tool_call("transfer_to_refunds", reason="a refund question")])
        return AIMessage(content=f"Noted ({i}): {user[:60]}. " + FILLER * 2)

    return ScriptedChatModel(policy=policy)


def run_thread(make_desk, turns: int, **settings) -> tuple[Conversation, ScriptedChatModel]:
    model = one_agent_model()
    desk = make_desk(model, **settings)
    conv = Conversation("long", desk=desk)
    conv.send("I'd like a refund for tx_1001 please")
    for n in range(2, turns + 1):
        r = conv.send(f"About the refund, one more detail number {n}: " + FILLER)
        assert r.agent == "refunds", f"turn {n} went to {r.agent}"
    return conv, model


@pytest.mark.slow
def test_200_turns_with_one_agent_stay_under_the_budget(make_desk):
    budget = Settings().max_input_tokens
    conv, model = run_thread(make_desk, 200)
    sizes = [estimate_tokens(msgs) for agent, msgs in model.log if agent == "refunds"]
    assert len(sizes) == 200 and max(sizes) <= budget
    assert sizes[-1] > budget * 0.8  # the budget is used, not an accident of short turns
    last_input = model.log[-1][1]
    assert isinstance(last_input[0], SystemMessage) and "transaction_id=tx_1001 (user_said)" in last_input[0].content
    assert not any("tx_1001" in str(m.content) for m in last_input[1:])  # turn 1 itself was trimmed away
    facts = {(f.key, f.value) for f in conv.state["handoff"].known_facts}
    assert ("transaction_id", "tx_1001") in facts
    users = [m for m in conv.state["messages"] if isinstance(m, HumanMessage)]
    assert len(users) == 200 and "tx_1001" in users[0].content  # the checkpoint keeps the full transcript
    trimmed = [e for e in conv.events.events("long", kinds=["model_called"]) if e.detail.get("trimmed")]
    assert trimmed and all(e.detail["input_estimate"] <= budget for e in trimmed)


def test_budget_setting_from_env(monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_MAX_INPUT_TOKENS", "1200")
    assert Settings.from_env().max_input_tokens == 1200
    monkeypatch.setenv("SWITCHBOARD_MAX_INPUT_TOKENS", "10")
    with pytest.raises(ConfigError, match="SWITCHBOARD_MAX_INPUT_TOKENS"):
        Settings.from_env()


def test_bounding_keeps_the_current_turn_and_tool_pairs():
    old = [HumanMessage("x" * 4000), AIMessage("y" * 4000)] * 3
    call = AIMessage("", tool_calls=[tool_call("card_status")])
    current = [HumanMessage("now"), call, ToolMessage("z" * 400, tool_call_id=call.tool_calls[0]["id"])]
    b = bound_messages([SystemMessage("sys"), *old, *current], 2000)
    assert b.messages[0].content == "sys" and b.messages[-3:] == current and b.tokens <= 2000 and b.cut == 6
    huge = [HumanMessage("now " + "w" * 40000)]
    b = bound_messages([SystemMessage("sys"), *old, *huge], 2000)
    assert b.messages == [SystemMessage("sys"), *huge]  # the current turn is never cut, even over budget


def _old_bound(msgs, max_tokens):
    """bound_messages as it was before counting from the newest message back: langchain_core's trim_messages."""
    from langchain_core.messages import trim_messages

    total = estimate_tokens(msgs)
    if total <= max_tokens:
        return msgs, 0, total
    kept = trim_messages(msgs, max_tokens=max_tokens, token_counter=estimate_tokens, strategy="last",
                         include_system=True, start_on="human", allow_partial=False)
    starts = [i for i, m in enumerate(msgs) if isinstance(m, HumanMessage)]
    current = msgs[starts[-1]:] if starts else msgs[1:]
    if len(kept) < len(current) + 1 or kept[-len(current):] != current:
        kept = [*msgs[:1], *current] if msgs and isinstance(msgs[0], SystemMessage) else list(current)
    return kept, len(msgs) - len(kept), estimate_tokens(kept)


def test_bounding_and_shaping_the_recent_part_give_trim_messages_result():
    """bound_messages counts from the newest message back and shape_recent shapes only what the budget can hold
    (O(budget), not O(thread)); the model input is the one trim_messages gives over the whole shaped transcript."""
    import random

    from policies.history import HistoryPolicy, shape_history, shape_recent

    rng = random.Random(5)

    def transcript(n):
        out = []
        for j in range(n):
            r, text = rng.random(), "x" * rng.randint(0, 400)
            if r < 0.3:
                out.append(HumanMessage(text, id=f"h{j}"))
            elif r < 0.55:
                out.append(AIMessage(text, id=f"a{j}", name="refunds"))
            elif r < 0.75:
                out.append(AIMessage(text if rng.random() < 0.5 else "", id=f"c{j}",
                                     tool_calls=[{"name": "t", "args": {"q": text[:20]}, "id": f"k{j}"}]))
            else:
                out.append(ToolMessage(text, tool_call_id=f"k{j}", id=f"t{j}", name="t"))
        return out

    for _ in range(300):
        msgs = transcript(rng.randint(0, 40))
        system = [SystemMessage("s" * rng.randint(0, 300))] if rng.random() < 0.8 else []
        budget = rng.randint(0, 1500)
        b = bound_messages([*system, *msgs], budget)
        assert (b.messages, b.cut, b.tokens) == _old_bound([*system, *msgs], budget)
        for mode in ("full", "no_tool_calls", "last_k", "packet_only"):
            policy, new = HistoryPolicy(mode, rng.randint(0, 3)), transcript(rng.randint(0, 3))
            recent, _ = shape_recent(msgs, policy, keep_tokens=budget)
            expected = _old_bound([*system, *shape_history(msgs, policy), *new], budget)
            got = bound_messages([*system, *recent, *new], budget)
            assert (got.messages, got.tokens) == (expected[0], expected[2])
