"""Unit tests of the pure policies: edges, guards, arbitration, loops, budgets, entry, history, authorization."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from graph.contracts.packet import HandoffRecord
from graph.contracts.state_values import TaskState
from nodes.testing.entry_rule import decide as decide_entry_rule
from nodes.testing.state import packet
from policies import authz, handoff, history, loops
from policies.edges import DEFAULT_EDGE_TABLE, END, HANDOFF_EDGES, START, handoff_targets, is_legal_handoff, longest_legal_path


# ---------------------------------------------------------------- edges
def test_edge_table_basics():
    assert is_legal_handoff("triage", "billing")
    assert is_legal_handoff("billing", "refunds")
    assert not is_legal_handoff("refunds", "account")
    assert not is_legal_handoff("billing", "billing")
    assert not is_legal_handoff("nobody", "billing")
    assert handoff_targets("clarify") == ()
    assert (START, "entry") in DEFAULT_EDGE_TABLE.edges()
    assert ("fallback", END) in DEFAULT_EDGE_TABLE.edges()
    assert "fallback" in DEFAULT_EDGE_TABLE.destinations("billing")
    assert END in DEFAULT_EDGE_TABLE.destinations("billing")


def test_longest_path_and_default_budget():
    n = longest_legal_path()
    assert 2 <= n <= len(HANDOFF_EDGES)
    assert loops.default_max_hops() == n + 1


# ---------------------------------------------------------------- guards
def _packet(facts=(), questions=()):
    return packet(known_facts=[{"key": k, "value": v, "source": "system_verified"} for k, v in facts],
                  open_questions=list(questions))


def test_refunds_guard_needs_transaction_or_question():
    assert not handoff.check_guards("billing", "refunds", _packet(), None).ok
    assert handoff.check_guards("billing", "refunds", _packet(), None).missing == ("transaction_id",)
    assert handoff.check_guards("billing", "refunds", _packet([("transaction_id", "tx_1")]), None).ok
    assert handoff.check_guards("triage", "refunds", _packet(questions=[handoff.REFUND_QUESTION]), None).ok


def test_approval_guard_needs_amount():
    assert handoff.check_guards("refunds", "human_approval", _packet(), None).missing == ("amount",)
    assert handoff.check_guards("refunds", "human_approval", _packet([("amount", "5 GBP")]), None).ok


def test_task_guards():
    ok = _packet([("transaction_id", "tx")])
    assert not handoff.check_guards("billing", "refunds", ok, TaskState(**{"status": "cancelled"})).ok
    assert not handoff.check_guards("billing", "refunds", ok, TaskState(**{"status": "completed"})).ok
    r = handoff.check_guards("billing", "refunds", ok, TaskState(**{"status": "open", "current_owner": "cards"}))
    assert not r.ok and "owned by cards" in r.reason
    assert handoff.check_guards("billing", "refunds", ok, TaskState(**{"status": "open", "current_owner": "billing"})).ok


# ---------------------------------------------------------------- arbitration
def _arb(source, *calls, packet=None, task=None, business=("find_duplicate_charges",)):
    views = [handoff.ToolCallView(id=f"c{i}", name=n, args=a) for i, (n, a) in enumerate(calls)]
    return handoff.arbitrate(source, views, frozenset(business), lambda t, c: packet or _packet([("transaction_id", "tx")]), task)


def test_arbitration_first_legal_handoff_wins_and_others_explained():
    a = _arb("billing", ("transfer_to_account", {}), ("transfer_to_refunds", {}), ("transfer_to_cards", {}),
             ("find_duplicate_charges", {}))
    acts = [(o.name, o.action) for o in a.outcomes]
    assert acts == [("transfer_to_account", "refused"), ("transfer_to_refunds", "handoff"),
                    ("transfer_to_cards", "skipped"), ("find_duplicate_charges", "skipped")]
    assert a.winner.target == "refunds"
    assert all(o.message for o in a.outcomes)


def test_arbitration_self_unknown_invalid():
    views = [handoff.ToolCallView(id="a", name="transfer_to_billing"),
             handoff.ToolCallView(id="b", name="drop_database"),
             handoff.ToolCallView(id="c", name="transfer_to_refunds", valid=False, error="bad json")]
    a = handoff.arbitrate("billing", views, frozenset(), lambda t, c: _packet(), None)
    assert [o.action for o in a.outcomes] == ["refused"] * 3
    assert "oneself" in a.outcomes[0].message and "unknown tool" in a.outcomes[1].message
    assert "not valid JSON" in a.outcomes[2].message and a.winner is None


def test_arbitration_guard_failure_names_missing_fields():
    a = _arb("billing", ("transfer_to_refunds", {}), packet=_packet())
    o = a.outcomes[0]
    assert o.action == "refused" and o.missing == ("transaction_id",) and "transaction_id" in o.message


def test_arbitration_executes_business_tools_without_handoff():
    a = _arb("billing", ("find_duplicate_charges", {}))
    assert [o.action for o in a.to_execute] == ["execute"]


# ---------------------------------------------------------------- loops
def test_fingerprint_normalizes_and_changes_with_inputs():
    f = loops.fingerprint("billing", "Charged  TWICE!", 0, 0)
    assert f == loops.fingerprint("billing", "charged twice", 0, 0)
    assert f != loops.fingerprint("billing", "charged twice", 1, 0)  # business state changed
    assert f != loops.fingerprint("billing", "charged twice", 0, 1)  # a retry is not a loop
    assert f != loops.fingerprint("refunds", "charged twice", 0, 0)


def test_check_loop_same_fingerprint_same_action():
    seen = ["abc|handoff:refunds"]
    assert loops.check_loop(seen, "abc", "handoff:refunds").loop
    assert not loops.check_loop(seen, "abc", "tools:x").loop
    assert not loops.check_loop(seen, "abd", "handoff:refunds").loop


def test_bounce_back():
    path = [HandoffRecord(hop=2, from_agent="billing", to_agent="refunds", reason="Not mine", turn=1)]
    assert loops.is_bounce_back(path, "refunds", "billing", "not mine!", 1)
    assert not loops.is_bounce_back(path, "refunds", "billing", "the charge must be explained", 1)
    assert not loops.is_bounce_back(path, "refunds", "billing", "not mine", 2)
    assert not loops.is_bounce_back([], "refunds", "billing", "x")


def test_hop_budget():
    assert not loops.hop_budget_exceeded(2, 3)
    assert loops.hop_budget_exceeded(3, 3)


# ---------------------------------------------------------------- entry
def test_entry_choice():
    c = decide_entry_rule
    assert c(None, "billing", 0.9, False).target == "triage"
    assert c("billing", "billing", 0.9, False).target == "billing"
    assert c("billing", "cards", 0.9, False).target == "triage"
    assert c("billing", "billing", 0.1, False).target == "triage"
    assert c("billing", "billing", 0.9, True).target == "triage"
    assert c("billing", "billing", 0.9, False, permitted=False).target == "triage"
    assert c("billing", "billing", 0.9, False, available={"cards"}).target == "fallback"
    assert c("fallback", "billing", 0.9, False).target == "triage"


# ---------------------------------------------------------------- history
def _transcript():
    return [HumanMessage("one", id="h1"), AIMessage("a1", id="a1"),
            HumanMessage("two", id="h2"),
            AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "x"}], id="a2"),
            ToolMessage("r", tool_call_id="x", id="t1"), AIMessage("a2 text", id="a3"),
            HumanMessage("three", id="h3")]


def test_history_modes():
    msgs = _transcript()
    full = history.shape_history(msgs, history.HistoryPolicy("full"), "PACKET")
    assert full == msgs
    last2 = history.shape_history(msgs, history.HistoryPolicy("last_k", 2))
    assert [m.id for m in last2] == ["h2", "a2", "t1", "a3", "h3"]
    pk = history.shape_history(msgs, history.HistoryPolicy("packet_only"), "PACKET")
    assert isinstance(pk[0], SystemMessage) and pk[0].content == "PACKET" and [m.id for m in pk[1:]] == ["h3"]
    nt = history.shape_history(msgs, history.HistoryPolicy("no_tool_calls"))
    assert not any(isinstance(m, ToolMessage) or getattr(m, "tool_calls", None) for m in nt)
    assert [m.id for m in nt] == ["h1", "a1", "h2", "a3", "h3"]


def test_policy_for_edge_defaults():
    assert history.policy_for_edge("triage", "billing").mode == "last_k"
    assert history.policy_for_edge("billing", "refunds").mode == "packet_only"
    assert history.policy_for_edge(None, "billing").mode == "no_tool_calls"


# ---------------------------------------------------------------- authorization
def test_authorization_from_context():
    assert authz.authorize_tool("card_status", False, ("customer",), "c_ada").allowed
    assert not authz.authorize_tool("card_status", False, ("customer",), None).allowed
    assert not authz.authorize_tool("freeze_card", True, ("viewer",), "c_ada").allowed
    assert not authz.authorize_tool("freeze_card", True, ("operator",), "c_ada").allowed  # an operator's run reads only


def test_entry_decides_from_the_learned_fields_of_the_reading():
    """Language, frustration and what a message names past the router are fields of the reading; the entry rule
    decides from them, never from the words."""
    from graph.contracts.reading import MessageReading, RouteView
    from policies.entry import LANGUAGE_REASON, NAMED_REASON, PERSON_REASON, Routed, ThreadView, choose_entry

    oos = Routed("other", 0.9, "out_of_scope")
    held = ThreadView(active_agent="billing")
    # another language: the honest language answer, the holder kept by the out_of_scope node
    spanish = MessageReading(language="es", language_name="Spanish")
    assert choose_entry(spanish, held, Routed("account", 0.8)).reason == LANGUAGE_REASON
    # ... but a card loss in another language is cards', safety first (the router read it as out of scope)
    loss = MessageReading(language="es", loss_report=True, named_route=RouteView(agent="cards", confidence=1.0))
    assert choose_entry(loss, ThreadView(active_agent="cards"), oos).target == "cards"
    assert choose_entry(loss, held, oos).target == "triage"  # a new topic: triage sends it to cards
    # a person in any wording wins over the language, not over a loss
    assert choose_entry(MessageReading(language="de", wants_person=True), held, oos).reason == PERSON_REASON
    assert choose_entry(loss.model_copy(update={"wants_person": True}), held, oos).reason != PERSON_REASON
    # a payment or a lead-in's request the router reads as out of scope starts at its specialist
    named = MessageReading(named_route=RouteView(agent="transfers", confidence=1.0))
    d = choose_entry(named, ThreadView(), oos)
    assert d.target == "transfers" and d.reason == NAMED_REASON
    # ... only when the router read it as out of scope: a specialist's topic is the router's
    assert choose_entry(named, ThreadView(), Routed("account", 0.9)).target == "triage"
    # a frustrated message is about this conversation, not a topic the desk does not serve
    assert choose_entry(MessageReading(), held, oos).target == "out_of_scope"
    assert choose_entry(MessageReading(frustrated=True), held, oos).target == "billing"
