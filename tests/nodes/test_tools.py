"""Tests of nodes/tools.py (schemas, run_tool validation, identity from the run context) and of
nodes/embedded/playbook.py (the offline agents' plans and answers for the demo story)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.business import BusinessStore
from nodes.embedded.playbook import ToolCallPlan, compose_answer, plan_tool_call
from nodes.facts import extract_facts, facts_from_tool_result
from nodes.tools import (
    AGENTS_WITH_TOOLS,
    POLICY_KB,
    TOOLS,
    ToolArgumentError,
    ToolContext,
    as_langchain_tool,
    match_policy_topic,
    refund_idempotency_key,
    run_tool,
    tools_for,
)

REF = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
ADA = ToolContext(customer_id="c_ada", tenant_id="t_demo", thread_id="th-1", task_id="task-1")
BOB = ToolContext(customer_id="c_bob", tenant_id="t_demo", thread_id="th-2", task_id="task-2")
IDENTITY_WORDS = {"customer_id", "tenant_id", "thread_id", "task_id", "user_id", "customer"}


@pytest.fixture()
def store(tmp_path: Path) -> BusinessStore:
    s = BusinessStore(tmp_path / "business.db", now=lambda: REF)
    s.seed_demo()
    return s


# -- registry and schemas --------------------------------------------------------------------------


def test_registry_shape() -> None:
    assert set(AGENTS_WITH_TOOLS) == {"billing", "refunds", "cards", "transfers", "account", "policy"}
    assert [s.name for s in tools_for("billing")] == [
        "list_recent_transactions", "find_duplicate_charges", "explain_transaction", "explain_fees", "spending_summary"]
    assert [s.name for s in tools_for("refunds")] == [
        "refund_status", "check_refund_eligibility", "request_refund", "cancel_refund"]
    assert tools_for("triage") == [] and tools_for("fallback") == []
    assert {s.name for s in TOOLS.values() if s.side_effect} == {"request_refund", "freeze_card", "unfreeze_card",
                                                                 "request_operator_case", "withdraw_operator_case",
                                                                 "cancel_refund"}
    for name, spec in TOOLS.items():
        assert spec.name == name and spec.description
        assert not IDENTITY_WORDS & set(spec.args_schema.model_json_schema().get("properties", {}))


def test_langchain_tool_schema() -> None:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    tool = as_langchain_tool(TOOLS["request_refund"])
    fn = convert_to_openai_tool(tool)["function"]
    assert fn["name"] == "request_refund"
    assert set(fn["parameters"]["properties"]) == {"transaction_id", "reason"}
    assert set(fn["parameters"]["required"]) == {"transaction_id", "reason"}
    empty = convert_to_openai_tool(as_langchain_tool(TOOLS["card_status"]))["function"]
    assert empty["parameters"].get("properties", {}) == {}
    with pytest.raises(RuntimeError, match="run_tool"):
        tool.invoke({"transaction_id": "tx_1008", "reason": "dup"})


# -- run_tool validation ---------------------------------------------------------------------------


@pytest.mark.parametrize("name,args,fragment", [
    ("transfer_money", {}, "unknown tool"),
    ("list_recent_transactions", {"limit": 0}, "limit"),
    ("list_recent_transactions", {"limit": 500}, "limit"),
    ("list_recent_transactions", {"limit": "lots"}, "limit"),
    ("explain_transaction", {}, "transaction_id"),
    ("explain_transaction", {"transaction_id": "1008"}, "transaction_id"),
    ("request_refund", {"transaction_id": "tx_1008"}, "reason"),
    ("card_status", {"customer_id": "c_bob"}, "customer_id"),
    ("request_refund", {"transaction_id": "tx_2001", "reason": "x", "customer_id": "c_bob"}, "customer_id"),
    ("refund_status", ["rf_5001"], "object"),
])
def test_run_tool_rejects_bad_calls(store: BusinessStore, name: str, args: object, fragment: str) -> None:
    with pytest.raises(ToolArgumentError) as info:
        run_tool(name, args, store, ADA)  # type: ignore[arg-type]
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_run_tool_refuses_another_agents_tool(store: BusinessStore) -> None:
    with pytest.raises(ToolArgumentError, match="refunds"):
        run_tool("request_refund", {"transaction_id": "tx_1008", "reason": "x"}, store, ADA, agent="billing")
    assert run_tool("find_duplicate_charges", {}, store, ADA, agent="billing")["ok"] is True
    assert store.list_refunds("c_ada")[0].id == "rf_5001" and len(store.list_refunds("c_ada")) == 1


def test_read_tools_return_json(store: BusinessStore) -> None:
    calls = {
        "list_recent_transactions": {"limit": 3}, "find_duplicate_charges": {}, "explain_fees": {},
        "explain_transaction": {"transaction_id": "tx_1009"}, "refund_status": {},
        "check_refund_eligibility": {"transaction_id": "tx_1008"}, "card_status": {},
        "list_transfers": {}, "transfer_status": {"transfer_id": "tr_3002"}, "account_profile": {},
        "lookup_policy": {"topic": "fees"}, "spending_summary": {}, "card_delivery_estimate": {}, "account_balance": {},
    }
    assert set(calls) == {n for n, s in TOOLS.items() if not s.side_effect}
    for name, args in calls.items():
        result = run_tool(name, args, store, ADA)
        assert result["ok"] is True, (name, result)
        assert json.loads(json.dumps(result)) == result
    assert len(run_tool("list_recent_transactions", {"limit": 3}, store, ADA)["transactions"]) == 3
    assert "ada@example.com" not in json.dumps(run_tool("account_profile", {}, store, ADA))


# -- identity comes from ctx, never from arguments -------------------------------------------------


def test_other_customers_data_invisible(store: BusinessStore) -> None:
    assert run_tool("explain_transaction", {"transaction_id": "tx_2001"}, store, BOB)["ok"] is True
    refused = run_tool("explain_transaction", {"transaction_id": "tx_2001"}, store, ADA)
    assert refused == {"ok": False, "error": "no such transaction tx_2001 on your account"}
    assert run_tool("check_refund_eligibility", {"transaction_id": "tx_2001"}, store, ADA)["ok"] is False
    assert run_tool("refund_status", {"refund_id": "rf_5001"}, store, BOB)["ok"] is False
    assert run_tool("refund_status", {}, store, BOB)["refunds"] == []
    assert run_tool("transfer_status", {"transfer_id": "tr_3002"}, store, BOB)["ok"] is False
    assert run_tool("freeze_card", {"card_id": "card_ada_phys"}, store, BOB)["ok"] is False
    assert store.get_card("c_ada", "card_ada_phys").status == "active"
    ids = {t["id"] for t in run_tool("list_recent_transactions", {"limit": 20}, store, ADA)["transactions"]}
    assert ids and not any(i.startswith("tx_2") for i in ids)
    out = run_tool("request_refund", {"transaction_id": "tx_2001", "reason": "mine"}, store, ADA)
    assert out["ok"] is False
    assert store.list_refunds("c_bob") == []


def test_request_refund_tool_idempotent_per_task(store: BusinessStore) -> None:
    args = {"transaction_id": "tx_1008", "reason": "duplicate charge"}
    first = run_tool("request_refund", args, store, ADA)
    again = run_tool("request_refund", args, store, ADA)
    assert first["ok"] and again["ok"]
    assert first["refund"]["id"] == again["refund"]["id"]
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert first["refund"]["status"] == "requested" and first["refund"]["amount_minor"] == 450
    assert store.find_refund_by_key("refund:task-1:tx_1008").id == first["refund"]["id"]
    assert refund_idempotency_key(ADA, "tx_1008") == "refund:task-1:tx_1008"
    other_task = ToolContext("c_ada", "t_demo", "th-1", "task-9")
    refused = run_tool("request_refund", args, store, other_task)
    assert refused["ok"] is False and first["refund"]["id"] in refused["error"]
    no_task = ToolContext("c_ada", "t_demo", "th-7", None)
    assert refund_idempotency_key(no_task, "tx_1001") == "refund:th-7:tx_1001"


def test_cancel_refund_tool_cancels_only_a_waiting_refund_no_conversation_decides(store: BusinessStore) -> None:
    assert run_tool("cancel_refund", {"refund_id": "rf_5001"}, store, BOB)["ok"] is False  # not Bob's refund
    assert store.get_refund("c_ada", "rf_5001").status == "requested"
    done = run_tool("cancel_refund", {"refund_id": "rf_5001"}, store, ADA)
    assert done["ok"] and done["refund"]["status"] == "cancelled"
    assert store.get_refund("c_ada", "rf_5001").status == "cancelled"
    again = run_tool("cancel_refund", {"refund_id": "rf_5001"}, store, ADA)
    assert again["ok"] is False and "already cancelled" in again["error"]
    waiting = run_tool("request_refund", {"transaction_id": "tx_1008", "reason": "duplicate"}, store, ADA)["refund"]
    store.create_task("task-1", "th-1", "refunds", refund_id=waiting["id"])  # a conversation's approval decides it
    owned = run_tool("cancel_refund", {"refund_id": waiting["id"]}, store, ADA)
    assert owned["ok"] is False and "conversation" in owned["error"]
    assert store.get_refund("c_ada", waiting["id"]).status == "requested"


def test_freeze_card_tool(store: BusinessStore) -> None:
    by_last4 = run_tool("freeze_card", {"card_id": "8899"}, store, ADA)
    assert by_last4["ok"] and by_last4["card_id"] == "card_ada_virt" and by_last4["status"] == "frozen"
    assert run_tool("freeze_card", {"card_id": "card_ada_virt"}, store, ADA)["replayed"] is True
    assert run_tool("freeze_card", {"card_id": "0000"}, store, ADA)["ok"] is False
    blocked = run_tool("freeze_card", {"card_id": "1881"}, store, ADA)
    assert blocked["ok"] is False and "blocked" in blocked["error"]


def test_policy_lookup() -> None:
    assert match_policy_topic("age limit") == "age"
    assert match_policy_topic("exchange_rates") == "exchange_rates"
    assert match_policy_topic("which currencies can I hold") == "currencies"
    assert match_policy_topic("can I top up with cash") == "top_up"
    assert match_policy_topic("zzz qqq") is None
    assert len(POLICY_KB) >= 7


# -- playbook: extraction --------------------------------------------------------------------------


def test_extract_facts() -> None:
    facts = extract_facts("Card ending in 4242 was charged £4.50 in 2024, see tx_1007 and tx_1008; rf_5001")
    assert facts["card_last4"] == "4242"
    assert facts["transaction_id"] == "tx_1007" and facts["transaction_ids"] == "tx_1007,tx_1008"
    assert facts["refund_id"] == "rf_5001"
    assert (facts["amount"], facts["amount_minor"], facts["currency"]) == ("4.50 GBP", "450", "GBP")
    assert extract_facts("I sent 20 euros in 2023") == {
        "amount": "20.00 EUR", "amount_minor": "2000", "currency": "EUR"}
    assert "card_last4" not in extract_facts("it happened in 2024 for 1234 reasons")
    assert extract_facts("where is tr_3002?")["transfer_id"] == "tr_3002"


def test_facts_from_tool_results(store: BusinessStore) -> None:
    dup = run_tool("find_duplicate_charges", {}, store, ADA)
    assert facts_from_tool_result("find_duplicate_charges", dup) == {
        "transaction_id": "tx_1008", "original_transaction_id": "tx_1007",
        "merchant": "Blue Bottle Coffee", "amount": "4.50 GBP", "amount_minor": "450", "currency": "GBP"}
    assert facts_from_tool_result("explain_transaction", {"ok": False, "error": "x"}) == {}
    cards = run_tool("card_status", {}, store, ADA)
    virtual = next(c["id"] for c in cards["cards"] if c["kind"] == "virtual")
    # the default card (active physical) and the one usable card of each kind (for a loss report naming a kind)
    assert facts_from_tool_result("card_status", cards) == {"card_id": "card_ada_phys", "card_id_physical": "card_ada_phys",
                                                            "card_id_virtual": virtual}


# -- playbook: the demo story ----------------------------------------------------------------------


def _run_turn(agent: str, text: str, store: BusinessStore, ctx: ToolContext,
              facts: dict[str, str] | None = None) -> tuple[list[str], dict[str, str], str]:
    facts = {**extract_facts(text), **(facts or {})}
    done: list[str] = []
    results = []
    for _ in range(10):
        plan = plan_tool_call(agent, text, facts, done)
        if plan is None:
            break
        assert isinstance(plan, ToolCallPlan) and plan.name not in done
        result = run_tool(plan.name, plan.args, store, ctx, agent=agent)
        done.append(plan.name)
        results.append((plan.name, result))
        facts |= facts_from_tool_result(plan.name, result)
    else:  # pragma: no cover
        pytest.fail("the playbook did not stop")
    return done, facts, compose_answer(agent, text, results)


def test_demo_story_billing_then_refunds(store: BusinessStore) -> None:
    text = "I think the coffee shop charged me twice"
    assert plan_tool_call("billing", text, {}, []) == ToolCallPlan("find_duplicate_charges", {})
    assert plan_tool_call("billing", text, {}, ["find_duplicate_charges"]) is None
    done, facts, answer = _run_turn("billing", text, store, ADA)
    assert done == ["find_duplicate_charges"]
    assert facts["transaction_id"] == "tx_1008"
    for fragment in ("tx_1008", "tx_1007", "Blue Bottle Coffee", "£4.50"):
        assert fragment in answer

    handoff = {k: facts[k] for k in ("transaction_id", "merchant", "amount")}
    text2 = "yes please, I want my money back for that"
    plan = plan_tool_call("refunds", text2, handoff, [])
    assert plan is not None and plan.name == "request_refund"
    assert plan.args["transaction_id"] == "tx_1008"
    done, facts2, answer2 = _run_turn("refunds", text2, store, ADA, handoff)
    assert done == ["request_refund"]
    refund = store.list_refunds("c_ada")[0]
    assert refund.transaction_id == "tx_1008" and refund.status == "requested"
    assert facts2["refund_id"] == refund.id
    assert f"refund {refund.id}" in answer2
    assert "tx_1008" in answer2 and "Blue Bottle Coffee" in answer2 and "4.50 GBP" in answer2
    assert "requested" in answer2


def test_duplicate_reason_and_wording() -> None:
    plan = plan_tool_call("refunds", "refund the double charge please", {"transaction_id": "tx_1008"}, [])
    assert plan == ToolCallPlan("request_refund", {"transaction_id": "tx_1008", "reason": "duplicate charge"})
    result = {
        "ok": True, "replayed": False,
        "refund": {"id": "rf_abc", "transaction_id": "tx_1008", "amount_minor": 450, "currency": "GBP",
                   "status": "requested", "reason": "duplicate charge"},
        "transaction": {"id": "tx_1008", "merchant": "Blue Bottle Coffee", "amount_minor": 450,
                        "currency": "GBP"},
    }
    answer = compose_answer("refunds", "refund the double charge please", [("request_refund", result)])
    assert answer.startswith(
        "I've opened refund rf_abc for 4.50 GBP for the duplicate Blue Bottle Coffee charge (tx_1008).")


def test_refund_status_and_eligibility_plans(store: BusinessStore) -> None:
    assert plan_tool_call("refunds", "where is my refund?", {}, []) == ToolCallPlan("refund_status", {})
    assert plan_tool_call("refunds", "any news on rf_5001", {"refund_id": "rf_5001"}, []) == \
        ToolCallPlan("refund_status", {"refund_id": "rf_5001"})
    assert plan_tool_call("refunds", "is tx_1010 refundable?", {"transaction_id": "tx_1010"}, []) == \
        ToolCallPlan("check_refund_eligibility", {"transaction_id": "tx_1010"})
    done, _, answer = _run_turn("refunds", "where is my refund?", store, ADA)
    assert done == ["refund_status"] and "rf_5001" in answer and "Amazon" in answer
    _, _, answer = _run_turn("refunds", "I want a refund", store, ADA)
    assert "Which transaction" in answer
    _, _, answer = _run_turn("refunds", "is tx_1010 refundable?", store, ADA)
    assert "tx_1010" in answer and "can't be refunded" in answer
    assert len(store.list_refunds("c_ada")) == 1


def test_cards_lost_freezes(store: BusinessStore) -> None:
    text = "I lost my card on the train"
    assert plan_tool_call("cards", text, {}, []) == ToolCallPlan("card_status", {})
    done, _, answer = _run_turn("cards", text, store, ADA)
    assert done == ["card_status", "freeze_card"]
    assert "4242" in answer and "frozen" in answer
    assert store.get_card("c_ada", "card_ada_phys").status == "frozen"
    done, _, _ = _run_turn("cards", "my card does not work in shops", store, ADA)
    assert done == ["card_status"]


def test_other_agents_plans(store: BusinessStore) -> None:
    assert plan_tool_call("billing", "what is tx_1009?", {"transaction_id": "tx_1009"}, []) == \
        ToolCallPlan("explain_transaction", {"transaction_id": "tx_1009"})
    assert plan_tool_call("billing", "why did I pay a fee", {}, []) == ToolCallPlan("explain_fees", {})
    assert plan_tool_call("billing", "show my payments", {}, []).name == "list_recent_transactions"
    assert plan_tool_call("transfers", "where is tr_3002", {"transfer_id": "tr_3002"}, []) == \
        ToolCallPlan("transfer_status", {"transfer_id": "tr_3002"})
    assert plan_tool_call("account", "update my email", {}, []) == ToolCallPlan("account_profile", {})
    assert plan_tool_call("policy", "how old must I be?", {}, []) == \
        ToolCallPlan("lookup_policy", {"topic": "age"})
    assert plan_tool_call("triage", "anything", {}, []) is None
    _, _, answer = _run_turn("billing", "what is tx_1009?", store, ADA)
    assert "tx_1009" in answer and "Uber" in answer and "pending" in answer
    _, _, answer = _run_turn("transfers", "where is tr_3002", store, ADA)
    assert "tr_3002" in answer and "Mary Somerville" in answer and "pending" in answer
    assert compose_answer("refunds", "help", []).startswith("Which transaction")


AGENTS = ["billing", "refunds", "cards", "transfers", "account", "policy", "triage", "fallback"]
FACT_VALUES = {"transaction_id": st.sampled_from(["tx_1008", "tx_2001", "tx_9"]),
               "refund_id": st.sampled_from(["rf_5001", "rf_x"]),
               "transfer_id": st.just("tr_3002"),
               "card_last4": st.sampled_from(["4242", "0000"]),
               "card_id": st.just("card_ada_phys")}


@settings(max_examples=200, deadline=None)
@given(agent=st.sampled_from(AGENTS),
       text=st.text(max_size=80) | st.sampled_from([
           "charged twice refund lost stolen where is my refund fee tx_1008",
           "money back please", "freeze it", "is it refundable"]),
       facts=st.fixed_dictionaries({}, optional=FACT_VALUES))
def test_plans_are_valid_and_never_repeat(agent: str, text: str, facts: dict[str, str]) -> None:
    done: list[str] = []
    for _ in range(len(TOOLS) + 1):
        plan = plan_tool_call(agent, text, facts, done)
        if plan is None:
            break
        spec = TOOLS[plan.name]
        assert spec.agent == agent and plan.name not in done
        spec.args_schema.model_validate(plan.args)  # the plan's arguments pass the tool's schema
        done.append(plan.name)
    else:  # pragma: no cover
        pytest.fail("plan_tool_call never returned None")
    assert len(done) <= 2


def test_desk_tools_balance_unfreeze_and_operator_request(store: BusinessStore) -> None:
    bal = run_tool("account_balance", {}, store, ADA)
    # seed: top-up 500.00 in, out 23.80 + 100.00 + 1.50 + 250.00 + 59.99 + 4.50 + 4.50; Uber 12.30 pending
    assert bal["balances"] == [{"currency": "GBP", "amount_minor": 5571, "amount": "£55.71",
                                "available_minor": 4341, "available": "£43.41"}]
    assert run_tool("unfreeze_card", {"card_id": "4242"}, store, ADA)["already_active"] is True
    run_tool("freeze_card", {"card_id": "4242"}, store, ADA)
    thawed = run_tool("unfreeze_card", {"card_id": "4242"}, store, ADA)
    assert thawed["already_active"] is True  # same task key: the first unfreeze's result is replayed
    other_task = ToolContext(customer_id="c_ada", tenant_id="t_demo", thread_id="th-9", task_id="task-9")
    thawed = run_tool("unfreeze_card", {"card_id": "4242"}, store, other_task)
    assert thawed["previous_status"] == "frozen" and store.get_card("c_ada", "card_ada_phys").status == "active"
    assert run_tool("unfreeze_card", {"card_id": "1881"}, store, other_task)["ok"] is False  # blocked: needs a new card
    first = run_tool("request_operator_case", {"kind": "close_account"}, store, ADA)
    again = run_tool("request_operator_case", {"kind": "close_account"}, store, ADA)
    assert first["request_id"] == again["request_id"] and again["replayed"] is True
    assert [e.action for e in store.audit_entries(action="service_request")] == ["service_request"]
    with pytest.raises(ToolArgumentError):
        run_tool("request_operator_case", {"kind": "pay_me"}, store, ADA)
    withdrawn = run_tool("withdraw_operator_case", {"kind": "close_account"}, store, ADA)
    assert withdrawn["withdrawn"] and withdrawn["request_id"] == first["request_id"] and withdrawn["status"] == "cancelled"
    assert run_tool("withdraw_operator_case", {}, store, ADA)["withdrawn"] is False  # nothing open any more
    assert run_tool("withdraw_operator_case", {}, store, BOB)["withdrawn"] is False  # never another customer's
    anew = run_tool("request_operator_case", {"kind": "close_account"}, store, ADA)  # same task, asked again
    assert anew["request_id"] != first["request_id"] and anew["replayed"] is False
