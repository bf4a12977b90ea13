"""Graph scenarios of supervisor mode: compound requests fan out to experts called as tools in one superstep,
the merge answers once, failures are stated, experts never hold control, several handoffs in one message."""

from __future__ import annotations

import threading
import typing

import pytest
from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from graph.contracts.agent_as_tool import ExpertTask, SupervisorAnswer
from graph.contracts.state import SupportState
from graph.conversation import Conversation
from nodes.expert import EXPERT_NOTE, run_expert
from nodes.supervisor import expert_results_of
from nodes.testing import scripted as sm
from policies.edges import DEFAULT_EDGE_TABLE, EXPERT_NODE, EXPERTS, SUPERVISOR
from tests.transcript import transcript_errors

COMPOUND = "Why was I charged twice, and when will my refund arrive?"
CFG = {"configurable": {"thread_id": "t"}}


def _is_expert(msgs) -> bool:
    return any(isinstance(m, SystemMessage) and EXPERT_NOTE in str(m.content) for m in msgs)


def _history(g, cfg=CFG):
    return list(g.get_state_history(cfg))


def _expert_supersteps(g, cfg=CFG) -> list[list[str]]:
    """For every checkpoint that is about to run expert tasks: the experts of those tasks (one superstep each)."""
    steps = []
    for snap in _history(g, cfg):
        names = [t.name for t in snap.tasks]
        if EXPERT_NODE in names:
            assert set(names) == {EXPERT_NODE}, names
            steps.append(names)
    return steps


def _assert_no_expert_ever_active(g, cfg=CFG):
    actives = {snap.values.get("active_agent") for snap in _history(g, cfg)}
    assert not actives & set(EXPERTS), actives


def _scripted(experts: list[str], expert_reply=None, *, barrier: threading.Barrier | None = None):
    """Triage -> supervisor; the supervisor calls ``experts`` in one message; experts reply with ``expert_reply``."""

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_supervisor", reason="compound")])
        if agent == SUPERVISOR:
            assert not _is_expert(msgs)
            return AIMessage(content="", tool_calls=[sm.tool_call(f"expert_{e}", objective=f"part for {e}") for e in experts])
        assert _is_expert(msgs) and not any(n.startswith("transfer_to_") for n in names)
        if barrier is not None:
            barrier.wait()  # every expert must be running at the same time, or this breaks
        if expert_reply is not None:
            return expert_reply(agent, user, names, msgs)
        return AIMessage(content=f"{agent} checked: {user}")

    return sm.ScriptedChatModel(policy=policy)


# ---------------------------------------------------------------- acceptance
def test_compound_request_runs_billing_and_refunds_in_one_superstep_and_answers_once(make_graph):
    """Offline model + keyword router: triage detects the compound request, the supervisor calls billing and
    refunds in parallel, merges, answers once; the supervisor is active afterwards, no expert ever was."""
    g = make_graph()
    conv = Conversation("t", graph=g)
    r = conv.send(COMPOUND)
    assert r.agent == SUPERVISOR and r.status == "answered"
    assert _expert_supersteps(g) == [[EXPERT_NODE, EXPERT_NODE]]
    values = conv.state
    assert values["active_agent"] == SUPERVISOR
    _assert_no_expert_ever_active(g)
    assert transcript_errors(values["messages"]) == []
    turn_msgs = values["messages"][1:]
    finals = [m for m in turn_msgs if isinstance(m, AIMessage) and not m.tool_calls]
    assert len(finals) == 1 and finals[0].name == SUPERVISOR and finals[0].content == r.text
    # the typed final answer: both experts' parts, facts with sources, nothing missing
    ans = r.answer
    assert isinstance(ans, SupervisorAnswer) and ans.status == "complete" and ans.experts == ("billing", "refunds")
    assert "tx_1008" in r.text and "rf_5001" in r.text
    assert {(f.key, f.value, f.source) for f in ans.facts} >= {("transaction_id", "tx_1008", "system_verified"),
                                                              ("refund_id", "rf_5001", "system_verified")}
    # agent as tool is not a handoff: expert calls are recorded apart, control moved only triage -> supervisor
    kinds = [(h.kind, h.to_agent) for h in r.handoff_path]
    assert kinds == [("entry", "triage"), ("handoff", SUPERVISOR)]
    assert [(c.expert, c.plan_id) for c in r.expert_calls] == [("billing", ans.plan_id), ("refunds", ans.plan_id)]
    assert r.path_str == "entry → triage → supervisor (experts: billing, refunds)"
    assert values["handoff_count"] == 1 and "billing" not in values["visited_agents"]
    results = expert_results_of(values, ans.plan_id)
    assert {x.expert for x in results} == {"billing", "refunds"} and all(x.status == "ok" for x in results)


def test_single_intent_still_goes_by_handoff(make_graph):
    r = Conversation("t", graph=make_graph()).send("I was charged twice")
    assert r.agent == "billing" and r.answer is None
    assert [h.to_agent for h in r.handoff_path] == ["triage", "billing"]


@pytest.mark.parametrize("n", [2, 5])
def test_experts_run_concurrently_without_invalid_update(make_graph, n):
    """n experts in one superstep; a barrier of n parties proves they ran at the same time (it breaks otherwise)."""
    chosen = list(EXPERTS[:n])
    barrier = threading.Barrier(n, timeout=10)
    g = make_graph(_scripted(chosen, barrier=barrier), max_experts=n)
    r = Conversation("t", graph=g).send("several things at once")
    assert r.agent == SUPERVISOR and r.answer.status == "complete", r.text
    assert _expert_supersteps(g) == [[EXPERT_NODE] * n]
    assert r.answer.experts == tuple(chosen)
    assert [p.answer for p in r.answer.parts] == [f"{e} checked: part for {e}" for e in chosen]
    _assert_no_expert_ever_active(g)
    assert transcript_errors(Conversation("t", graph=g).state["messages"]) == []


def test_every_state_key_has_a_reducer():
    hints = typing.get_type_hints(SupportState, include_extras=True)
    for key, hint in hints.items():
        assert typing.get_origin(hint) is typing.Annotated and len(hint.__metadata__) >= 1, key


# ---------------------------------------------------------------- failures
def _raising_refunds(agent, user, names, msgs):
    if agent == "refunds":
        raise RuntimeError("refunds service exploded")
    return AIMessage(content=f"{agent} checked: {user}")


def test_one_expert_raises_answer_states_what_could_not_be_checked(make_graph):
    g = make_graph(_scripted(["billing", "refunds"], _raising_refunds))
    conv = Conversation("t", graph=g)
    r = conv.send(COMPOUND)
    assert r.agent == SUPERVISOR and r.status == "answered"
    assert r.answer.status == "partial"
    (gap,) = r.answer.gaps
    assert gap.expert == "refunds" and gap.status == "failed" and "RuntimeError" in gap.reason
    assert "billing checked" in r.text and 'couldn\'t check "part for refunds"' in r.text
    assert transcript_errors(conv.state["messages"]) == []
    expert_msgs = {m.name: m.content for m in conv.state["messages"] if isinstance(m, ToolMessage)}
    assert '"status": "failed"' in expert_msgs["expert_refunds"]


def test_expert_timeout_is_a_gap(make_graph):
    release = threading.Event()

    def slow(agent, user, names, msgs):
        if agent == "refunds":
            release.wait(10)
        return AIMessage(content=f"{agent} checked")

    g = make_graph(_scripted(["billing", "refunds"], slow), expert_timeout_s=0.3)
    try:
        r = Conversation("t", graph=g).send(COMPOUND)
    finally:
        release.set()
    (gap,) = r.answer.gaps
    assert gap.status == "timeout" and "0.3 s" in gap.reason
    assert "did not answer in time" in r.text


def test_on_failure_fail_goes_to_fallback(make_graph):
    g = make_graph(_scripted(["billing", "refunds"], _raising_refunds), on_expert_failure="fail")
    conv = Conversation("t", graph=g)
    r = conv.send(COMPOUND)
    assert r.agent == "fallback" and r.status == "fallback"
    assert "refunds failed" in r.text and 'Could not check: "part for refunds"' in r.text
    assert conv.state["task"].status == "fallback"
    assert transcript_errors(conv.state["messages"]) == []
    _assert_no_expert_ever_active(g)


def test_all_experts_fail_goes_to_fallback_even_when_continuing(make_graph):
    g = make_graph(_scripted(["billing", "refunds"], lambda *a: (_ for _ in ()).throw(ValueError("down"))))
    conv = Conversation("t", graph=g)
    r = conv.send(COMPOUND)
    # the merge's reason is the operators' (packet, handoff path); the customer gets the generic apology
    assert r.agent == "fallback" and "no expert returned a result" in conv.state["handoff"].reason
    assert "no expert returned a result" not in r.text and "Reason" not in r.text


def test_expert_cannot_hand_off_or_change_business_state(make_graph, store):
    """An expert that asks for a handoff and a refund: the handoff is refused, the refund is only proposed."""
    before = len(store.list_refunds("c_ada"))

    def misbehave(agent, user, names, msgs):
        tools = [m for m in msgs if isinstance(m, ToolMessage)]
        if not tools:
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="yours"),
                                                     sm.tool_call("request_refund", transaction_id="tx_1008",
                                                                  reason="duplicate charge")])
        return AIMessage(content="refunds: " + " | ".join(str(t.content) for t in tools))

    g = make_graph(_scripted(["refunds"], misbehave))
    conv = Conversation("t", graph=g)
    r = conv.send("refund tx_1008 please")
    assert r.agent == SUPERVISOR
    assert "cannot hand off" in r.text and "proposed action" in r.text
    assert [(a.tool, a.args["transaction_id"]) for a in r.answer.proposed_actions] == [("request_refund", "tx_1008")]
    assert "Not done yet: request refund" in r.text
    assert conv.state["state_version"] == 0  # no business-state change
    assert len(store.list_refunds("c_ada")) == before
    _assert_no_expert_ever_active(g)


def test_expert_rounds_are_bounded(make_graph):
    def loops(agent, user, names, msgs):
        return AIMessage(content="", tool_calls=[sm.tool_call("refund_status")])

    model = _scripted(["refunds"], loops)
    g = make_graph(model, max_tool_rounds=3)
    r = Conversation("t", graph=g).send("x")
    assert r.agent == "fallback"  # the only expert failed: nothing to answer
    expert_calls = [a for a, msgs in model.log if a == "refunds"]
    assert len(expert_calls) == 3


# ---------------------------------------------------------------- the supervisor's own choices
def test_supervisor_answering_directly_is_still_one_typed_answer(make_graph):
    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_supervisor", reason="r")])
        return AIMessage(content="Nothing to look up.")

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    r = Conversation("t", graph=g).send("hello")
    assert r.agent == SUPERVISOR and r.text == "Nothing to look up."
    assert r.answer == SupervisorAnswer(text="Nothing to look up.", status="complete")


def test_supervisor_refused_calls_are_answered_and_it_retries(make_graph):
    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_supervisor", reason="r")])
        if agent == SUPERVISOR:
            if not any(isinstance(m, ToolMessage) and m.content.startswith("Refused") for m in msgs):
                return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="x"),
                                                         sm.tool_call("expert_nobody", objective="y")])
            return AIMessage(content="", tool_calls=[sm.tool_call("expert_cards", objective="card")])
        return AIMessage(content=f"{agent} ok")

    g = make_graph(sm.ScriptedChatModel(policy=policy))
    conv = Conversation("t", graph=g)
    r = conv.send("hi")
    assert r.agent == SUPERVISOR and r.answer.experts == ("cards",)
    msgs = conv.state["messages"]
    assert transcript_errors(msgs) == []
    refused = [m.content for m in msgs if isinstance(m, ToolMessage) and m.content.startswith("Refused")]
    assert len(refused) == 2 and "does not hand off" in refused[0]


def test_supervisor_model_failure_goes_to_fallback(make_graph):
    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_supervisor", reason="r")])
        raise ConnectionError("down")

    r = Conversation("t", graph=make_graph(sm.ScriptedChatModel(policy=policy))).send("hi")
    assert r.agent == "fallback" and "ConnectionError" not in r.text  # the exception goes to the packet/events only
    assert "ConnectionError" in r.handoff_path[-1].reason


def test_next_turn_after_supervisor_goes_through_triage_and_old_results_are_ignored(make_graph):
    g = make_graph()
    conv = Conversation("t", graph=g)
    first = conv.send(COMPOUND)
    second = conv.send("Where is my transfer? And when will my refund arrive?")
    assert conv.state["entry_reason"].startswith("no specialist holds")
    assert second.agent == SUPERVISOR and second.answer.experts == ("transfers", "refunds")
    assert second.answer.plan_id != first.answer.plan_id
    assert len(conv.state["expert_results"]) == 4
    assert "tx_1008" not in second.text  # billing's result of turn 1 is not merged again
    assert _expert_supersteps(g) == [[EXPERT_NODE, EXPERT_NODE]] * 2


# ---------------------------------------------------------------- several handoffs in one message (item 4)
def _triage_two_handoffs(agent, user, names, i, msgs):
    if agent == "triage":
        return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason="charge", objective="why twice"),
                                                 sm.tool_call("transfer_to_refunds", reason="refund", objective="refund status")])
    if _is_expert(msgs):
        return AIMessage(content=f"{agent} expert: {user}")
    return AIMessage(content=f"{agent} answers")


def test_multi_handoff_default_picks_the_first_and_says_why(make_graph):
    g = make_graph(sm.ScriptedChatModel(policy=_triage_two_handoffs))
    conv = Conversation("t", graph=g)
    r = conv.send(COMPOUND)
    assert r.agent == "billing"
    tool_msgs = {m.name: m.content for m in conv.state["messages"] if isinstance(m, ToolMessage)}
    assert "only one handoff per message; transfer_to_billing was accepted first" in tool_msgs["transfer_to_refunds"]
    assert transcript_errors(conv.state["messages"]) == []


def test_multi_handoff_becomes_supervisor_fanout_when_configured(make_graph):
    model = sm.ScriptedChatModel(policy=_triage_two_handoffs)
    g = make_graph(model, multi_handoff="supervisor")
    conv = Conversation("t", graph=g)
    r = conv.send(COMPOUND)
    assert r.agent == SUPERVISOR
    assert [p.objective for p in r.answer.parts] == ["why twice", "refund status"]
    assert r.text == "billing expert: why twice refunds expert: refund status"
    assert [a for a, _ in model.log] .count(SUPERVISOR) == 0  # the plan was given: no supervisor model call
    msgs = conv.state["messages"]
    tool_msgs = {m.name: m.content for m in msgs if isinstance(m, ToolMessage)}
    assert tool_msgs["transfer_to_billing"].startswith("Combined into a supervisor fan-out")
    assert tool_msgs["transfer_to_refunds"].startswith("Combined into a supervisor fan-out")
    assert transcript_errors(msgs) == []
    assert conv.state["supervisor_plan"]["source"] == "multi_handoff"
    assert [(h.kind, h.to_agent) for h in r.handoff_path][1] == ("handoff", SUPERVISOR)
    assert _expert_supersteps(g) == [[EXPERT_NODE, EXPERT_NODE]]
    _assert_no_expert_ever_active(g)


def test_bad_supervisor_settings_are_config_errors():
    from graph.contracts.errors import ConfigError
    from graph.contracts.settings import Settings

    for bad in ({"multi_handoff": "all"}, {"on_expert_failure": "ignore"}, {"max_experts": 0}, {"expert_timeout_s": 0}):
        with pytest.raises(ConfigError):
            Settings.from_env(**bad)


# ---------------------------------------------------------------- the as-tool form on its own, and the graph's shape
def test_run_expert_as_a_function(make_desk):
    d = make_desk()
    task = ExpertTask(task_id="c1", plan_id="p1", expert="billing", objective="why was I charged twice?")
    res = run_expert(task, d.deps)
    assert res.status == "ok" and res.tools_called == ("find_duplicate_charges",)
    assert ("transaction_id", "tx_1008", "system_verified", "find_duplicate_charges") in {
        (f.key, f.value, f.source, f.via) for f in res.facts}
    assert "tx_1008" in res.evidence_refs and res.model_calls == 2


def test_compiled_graph_declares_exactly_the_table_edges(make_graph):
    g = make_graph()
    drawn = {(e.source, e.target) for e in g.get_graph().edges}
    assert drawn == set(DEFAULT_EDGE_TABLE.edges())


def test_checkpointed_supervisor_thread_resumes_in_a_new_graph(make_graph, tmp_path):
    from checkpoints import open_checkpointer

    db = tmp_path / "cp.db"
    g1 = make_graph(checkpointer=open_checkpointer(db))
    Conversation("t", graph=g1).send(COMPOUND)
    g2 = make_graph(checkpointer=open_checkpointer(db))
    conv = Conversation("t", graph=g2)
    assert conv.result().answer.experts == ("billing", "refunds")
    assert conv.send("I lost my card").agent == "cards"


# ---------------------------------------------------------------- property: whatever supervisor and experts choose
@pytest.mark.slow
def test_any_supervisor_and_expert_choices_end_legally(tmp_path_factory):
    """Triage always hands to the supervisor; the supervisor and every expert then follow random scripts (calls,
    handoffs, tools, side effects, invalid calls, answers, exceptions). The run never raises, ends answered by the
    supervisor or in fallback, no expert ever holds control, the transcript stays valid and no business state changes."""
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hsettings
    from hypothesis import strategies as st

    from checkpoints.business import open_store
    from graph import build_graph
    from graph.contracts.settings import Settings
    from tests.conftest import KeywordRouter

    names = [*EXPERTS, "nobody"]
    choice = st.one_of(
        st.tuples(st.just("answer")),
        st.tuples(st.just("call"), st.lists(st.sampled_from(names), min_size=1, max_size=5)),
        st.tuples(st.just("handoff"), st.sampled_from(names)),
        st.tuples(st.just("tool"), st.sampled_from(["find_duplicate_charges", "refund_status", "request_refund",
                                                    "freeze_card", "rm_rf"])),
        st.tuples(st.just("invalid")),
        st.tuples(st.just("raise")),
    )

    def message(c) -> AIMessage:
        kind = c[0]
        if kind == "answer":
            return AIMessage(content="done")
        if kind == "call":
            return AIMessage(content="", tool_calls=[sm.tool_call(f"expert_{e}", objective="part") for e in c[1]])
        if kind == "handoff":
            return AIMessage(content="", tool_calls=[sm.tool_call(f"transfer_to_{c[1]}", reason="r")])
        if kind == "tool":
            args = {"request_refund": {"transaction_id": "tx_1008", "reason": "duplicate charge"},
                    "freeze_card": {"card_id": "4242"}}.get(c[1], {})
            return AIMessage(content="", tool_calls=[sm.tool_call(c[1], **args)])
        if kind == "invalid":
            return AIMessage(content="", invalid_tool_calls=[{"name": "expert_billing", "args": "{", "id": "inv",
                                                              "error": "bad", "type": "invalid_tool_call"}])
        raise RuntimeError("model exploded")

    @hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(sup=st.lists(choice, min_size=1, max_size=6), exp=st.lists(choice, min_size=1, max_size=12),
           max_experts=st.integers(1, 5))
    def run(sup, exp, max_experts):
        counter = {"s": 0, "e": 0}
        lock = threading.Lock()

        def policy(agent, user, tools, i, msgs):
            if agent == "triage":
                return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_supervisor", reason="compound")])
            key, script = ("e", exp) if _is_expert(msgs) else ("s", sup)
            with lock:
                n = counter[key]
                counter[key] += 1
            return message(script[n % len(script)])

        store = open_store(tmp_path_factory.mktemp("biz") / "b.db")
        refunds_before = len(store.list_refunds("c_ada"))
        model = sm.ScriptedChatModel(policy=policy)
        s = Settings.from_env(max_experts=max_experts, expert_timeout_s=10)
        g = build_graph(model=model, checkpointer=InMemorySaver(), settings=s, router=KeywordRouter(), store=store)
        r = Conversation("t", graph=g).send("several things")
        values = g.get_state(CFG).values
        assert r.agent in (SUPERVISOR, "fallback")
        assert transcript_errors(values["messages"]) == []
        _assert_no_expert_ever_active(g)
        called = values.get("expert_calls") or []
        assert len(called) <= max_experts
        assert len(_expert_supersteps(g)) <= 1
        assert values["state_version"] == 0 and len(store.list_refunds("c_ada")) == refunds_before
        assert model.calls <= 1 + s.max_tool_rounds * (1 + len(called))
        if r.agent == SUPERVISOR:
            assert r.answer is not None and r.answer.experts == tuple(c["expert"] for c in called)

    run()
