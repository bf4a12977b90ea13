"""References resolve exactly inside the caller's scope; amounts are read with babel and the
verified value wins; several side effects in one model message never leave a record without an owner; facts a model
writes into a handoff are labelled model-written."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from graph.contracts.context import RunContext
from graph.conversation import Conversation
from nodes.facts import collect_facts, extract_facts
from nodes.fallback import fallback_text
from nodes.testing.scripted import ScriptedChatModel, tool_call
from nodes.testing.state import packet
from nodes.tools import ToolContext, run_tool

ADA = ToolContext(customer_id="c_ada", tenant_id="t_demo", thread_id="t1")


@pytest.mark.parametrize("tool, args, error", [
    ("freeze_card", {"card_id": "card_bob_phys"}, "no such card card_bob_phys on your account"),
    ("freeze_card", {"card_id": "card_ada_phy"}, "no such card card_ada_phy on your account"),
    ("freeze_card", {"card_id": "5555"}, "no such card ending 5555 on your account (or more than one)"),
    ("explain_transaction", {"transaction_id": "tx_2001"}, "no such transaction tx_2001 on your account"),
    ("request_refund", {"transaction_id": "tx_2002", "reason": "x"}, "no such transaction tx_2002 on your account"),
    ("refund_status", {"refund_id": "rf_9999"}, "no such refund rf_9999 on your account"),
    ("transfer_status", {"transfer_id": "tr_9999"}, "no such transfer tr_9999 on your account"),
])
def test_a_reference_outside_the_callers_scope_is_refused_not_substituted(store, tool, args, error):
    before = {c.id: c.status for c in store.list_cards("c_ada") + store.list_cards("c_bob")}
    assert run_tool(tool, args, store, ADA) == {"ok": False, "error": error}
    assert {c.id: c.status for c in store.list_cards("c_ada") + store.list_cards("c_bob")} == before
    assert store.list_refunds("c_bob") == [] or all(r.customer_id == "c_bob" for r in store.list_refunds("c_bob"))


def test_freezing_another_customers_card_by_id_freezes_nothing(make_desk, store):
    r = Conversation("x1", desk=make_desk()).send("My card is lost, freeze card card_bob_phys")
    assert "no such card card_bob_phys on your account" in r.text
    assert {c.id: c.status for c in store.list_cards("c_ada") if c.status == "frozen"} == {}
    assert store.get_card("c_bob", "card_bob_phys").status == "active"


def test_a_named_card_of_the_caller_is_frozen_exactly(make_desk, store):
    Conversation("x2", desk=make_desk()).send("I lost my card, please freeze card_ada_virt")
    status = {c.id: c.status for c in store.list_cards("c_ada")}
    assert status["card_ada_virt"] == "frozen" and status["card_ada_phys"] == "active"


@pytest.mark.parametrize("text, amount", [
    ("it was £5,000", "5000.00 GBP"),
    ("I paid 5,000.00 GBP", "5000.00 GBP"),
    ("€1,234.50 went missing", "1234.50 EUR"),
    ("about 12 euros", "12.00 EUR"),
    ("$3 charged", "3.00 USD"),
    ("23.80 pounds at Tesco", "23.80 GBP"),
    ("¥1,200 in Tokyo", "1200 JPY"),
    ("card ending 4242", None),
    ("on 5,00 GBP", None),
])
def test_amounts_are_read_with_thousands_separators_and_currency(text, amount):
    assert extract_facts(text).get("amount") == amount


def test_the_verified_amount_wins_over_the_one_the_customer_said(isolated_home):
    from tests.conftest import approver_desk
    g, store = approver_desk(isolated_home)
    conv = Conversation("amt", graph=g, store=store)
    r = conv.send("Refund tx_1001 please, it was £5,000")
    assert r.status == "awaiting_approval"
    r = Conversation("amt", graph=g, store=store, context=RunContext.for_operator("ann", "t_demo")).resume(
        {"decision": "reject", "note": "no"})
    assert "23.80" in r.text and "5000" not in r.text and "5,000" not in r.text


def _flood_policy(agent, user, names, i, msgs):
    if agent == "triage":
        return AIMessage(content="", tool_calls=[tool_call("transfer_to_refunds", reason="route")])
    if agent == "refunds" and not any(isinstance(m, ToolMessage) and m.name == "request_refund" for m in msgs):
        return AIMessage(content="", tool_calls=[tool_call("request_refund", transaction_id=t, reason="x")
                                                 for t in ("tx_1001", "tx_1005", "tx_1007")])
    return AIMessage(content=f"{agent} answers.")


def test_several_side_effect_calls_in_one_message_leave_no_record_without_an_owner(make_desk, store):
    desk = make_desk(ScriptedChatModel(policy=_flood_policy))
    conv = Conversation("flood", desk=desk)
    seeded = {x.id for x in store.list_refunds("c_ada")}
    r = conv.send("refund tx_1001, tx_1005 and tx_1007")
    refunds = [x for x in store.list_refunds("c_ada") if x.id not in seeded]
    assert len(refunds) == 1 and refunds[0].transaction_id == "tx_1001"
    assert r.status == "awaiting_approval" and conv.pending()["refund_id"] == refunds[0].id
    msgs = conv.state["messages"]
    calls = [c["id"] for m in msgs if isinstance(m, AIMessage) for c in m.tool_calls]
    answers = [m for m in msgs if isinstance(m, ToolMessage)]
    assert sorted(calls) == sorted(m.tool_call_id for m in answers)  # every call answered exactly once
    refused = [json.loads(m.content) for m in answers if m.name == "request_refund"][1:]
    assert len(refused) == 2 and all("one side effect at a time" in x["error"] for x in refused)


def test_facts_a_model_writes_into_a_handoff_are_model_written():
    msgs = [HumanMessage(content="refund tx_1008 please")]
    facts = {(f.key, f.value): f.source for f in collect_facts(msgs, {"merchant": "Blue Bottle", "transaction_id": "tx_1008"})}
    assert facts[("merchant", "Blue Bottle")] == "model_written"
    assert facts[("transaction_id", "tx_1008")] == "user_said"
    text = fallback_text(packet(**{"reason": "r", "known_facts": [{"key": "merchant", "value": "Blue Bottle",
                                                          "source": "model_written"}]}))
    assert "merchant: Blue Bottle (noted, not yet checked)" in text and "you told us" not in text


def test_a_transaction_the_customer_named_is_not_replaced_by_one_a_tool_found(make_desk, store):
    """Billing finds Ada's duplicate coffee (tx_1008) and hands over with it verified; the customer named tx_2001 (not
    theirs), so refunds acts on tx_2001 — and is refused — instead of refunding a transaction nobody named."""
    from nodes.embedded.offline_model import OfflineChatModel
    from nodes.router import load_router

    router = load_router()
    desk = make_desk(OfflineChatModel(router=router), router=router)
    seeded = {x.id for x in store.list_refunds("c_ada")}
    r = Conversation("named", desk=desk).send("I was charged twice, refund tx_2001")
    assert "no such transaction tx_2001 on your account" in r.text
    assert [x for x in store.list_refunds("c_ada") if x.id not in seeded] == []
    r = Conversation("unnamed", desk=desk).send("I was charged twice for coffee, please refund it")
    assert [x.transaction_id for x in store.list_refunds("c_ada") if x.id not in seeded] == ["tx_1008"]
