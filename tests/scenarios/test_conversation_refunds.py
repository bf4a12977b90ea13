"""No money moves unless the customer asked for it: a wish to cancel a refund, or a question about refunds, never opens
one — not even right after billing named a single transaction, which hands the conversation on to refunds with that
transaction; an operator's rejection is not undone by asking again; a refund the customer names to cancel follows the
cancellation rules; a status question after a paid refund gets its status, never a second request.

Multi-turn conversations with the offline model and the shipped default router, as in
``tests/scenarios/test_conversation_routing.py``.
"""

from __future__ import annotations

import pytest

from graph.conversation import Conversation

#: Billing names one transaction (tx_1008, Blue Bottle Coffee, £4.50: under the automatic-approval limit, so a refund
#: opened by mistake is paid at once).
NAMED = "what is tx_1008?"
#: Billing finds the duplicate (tx_1008) and offers to refund it: the offer is open when the next message comes.
TWICE = "I was charged twice for my coffee"

#: ``(id, turns, transactions that must keep no refund)``: a cancel wish or a question about refunds after billing named
#: one transaction.
NO_REFUND_AFTER_BILLING = [
    ("cancel-my-refund", [NAMED, "cancel my refund"], ("tx_1008",)),
    ("stop-the-refund", [NAMED, "stop the refund"], ("tx_1008",)),
    ("withdraw-request", [NAMED, "withdraw my refund request"], ("tx_1008",)),
    ("changed-my-mind", [NAMED, "I changed my mind, cancel the refund"], ("tx_1008",)),
    ("call-it-off", [NAMED, "please call off the refund"], ("tx_1008",)),
    ("dont-want-any-more", [NAMED, "I don't want the refund any more"], ("tx_1008",)),
    ("refund-policy", [NAMED, "what's your refund policy?"], ("tx_1008",)),
    ("refund-possible", [NAMED, "is a refund possible?"], ("tx_1008",)),
    ("possible-to-get", [NAMED, "is it possible to get a refund?"], ("tx_1008",)),
    ("if-complained", [NAMED, "would I get a refund if I complained?"], ("tx_1008",)),
    ("maybe", [NAMED, "maybe a refund?"], ("tx_1008",)),
    ("look-like", [NAMED, "what would a refund look like?"], ("tx_1008",)),
    ("how-do-refunds-work", [NAMED, "how do refunds work?"], ("tx_1008",)),
    ("could-it-be", [NAMED, "could I be refunded for it?"], ("tx_1008",)),
    ("does-it-qualify", [NAMED, "does it qualify for a refund?"], ("tx_1008",)),
    ("scrap-it", [NAMED, "scrap the refund"], ("tx_1008",)),
    ("could-a-refund-be-done", [NAMED, "could a refund be done?"], ("tx_1008",)),
    ("any-chance", [NAMED, "any chance of a refund?"], ("tx_1008",)),
    ("entitled", [NAMED, "am I entitled to a refund?"], ("tx_1008",)),
    ("might-want", [NAMED, "I might want a refund"], ("tx_1008",)),
    ("how-do-i-get", [NAMED, "how do I get a refund?"], ("tx_1008",)),
    ("do-you-do-refunds", [NAMED, "do you do refunds?"], ("tx_1008",)),
    ("after-duplicate-cancel", [TWICE, "cancel my refund"], ("tx_1008", "tx_1007")),
    ("after-duplicate-policy", [TWICE, "what's your refund policy?"], ("tx_1008", "tx_1007")),
    ("after-duplicate-possible", [TWICE, "is a refund possible?"], ("tx_1008", "tx_1007")),
    ("fresh-cancel", ["cancel my refund"], ("tx_1008", "tx_1001")),
    ("fresh-policy", ["what's your refund policy?"], ("tx_1008", "tx_1001")),
    # a bare noun phrase about a refund with a question mark asks about it and opens none
    ("fresh-and-the-refund-for", ["and the refund for tx_1008?"], ("tx_1008",)),
    ("fresh-refund-for", ["refund for tx_1008?"], ("tx_1008",)),
    ("fresh-tx-refund", ["tx_1008 refund?"], ("tx_1008",)),
    ("fresh-money-back-for", ["money back for tx_1008?"], ("tx_1008",)),
    ("after-billing-refund-for", [NAMED, "refund for tx_1008?"], ("tx_1008",)),
    # a refund the customer says they don't want
    ("fresh-dont-want", ["I don't want a refund for tx_1008"], ("tx_1008",)),
    ("fresh-dont-need", ["we don't need the money back for tx_1008"], ("tx_1008",)),
]


def _refunds_of(store, transaction_id: str, customer: str = "c_ada") -> list:
    """The customer's refund records of ``transaction_id`` (``store.list_refunds`` order)."""
    return [f for f in store.list_refunds(customer) if f.transaction_id == transaction_id]


def _money_in(store, customer: str = "c_ada") -> list[str]:
    return [t.id for t in store.list_transactions(customer, limit=100, kind="transfer_in")]


@pytest.mark.parametrize("case,turns,untouched", NO_REFUND_AFTER_BILLING, ids=[c for c, _, _ in NO_REFUND_AFTER_BILLING])
def test_a_cancel_wish_or_a_question_about_refunds_opens_none(desk, store, case, turns, untouched):
    before_refunds = {f.id for f in store.list_refunds("c_ada")}
    before_money = _money_in(store)
    conv = Conversation(case, desk=desk)
    for text in turns:
        r = conv.send(text)
        assert "approved and paid back" not in r.text and "opened refund" not in r.text, (text, r.text)
    assert {f.id for f in store.list_refunds("c_ada")} == before_refunds
    assert not [f for f in store.list_refunds("c_ada") if f.transaction_id in untouched]
    assert _money_in(store) == before_money


@pytest.mark.parametrize("wish", ["I want to cancel my subscription to Netflix", "cancel my gym membership",
                                  "please cancel my direct debit to the council"])
def test_a_wish_to_cancel_something_else_never_withdraws_a_refund(desk, store, wish):
    """"I want to cancel my subscription to Netflix" then "yes" leaves the pending rf_5001 as it is."""
    before = {f.id: f.status for f in store.list_refunds("c_ada")}
    conv = Conversation(f"other-cancel-{len(wish)}", desk=desk)
    first = conv.send(wish)
    assert "Shall I cancel refund" not in first.text, first.text
    second = conv.send("yes")
    assert "cancelled refund" not in second.text, second.text
    assert {f.id: f.status for f in store.list_refunds("c_ada")} == before


@pytest.mark.parametrize("text", ["cancel my refund", "stop the refund", "I changed my mind, cancel the refund"])
def test_a_cancel_wish_with_no_refund_of_that_payment_says_so(desk, text):
    conv = Conversation("cancel-none", desk=desk)
    conv.send(NAMED)
    r = conv.send(text)
    assert r.agent == "refunds", r.path_str
    assert "no refund" in r.text.lower() and "tx_1008" in r.text, r.text


@pytest.mark.parametrize("text", ["is a refund possible?", "what's your refund policy?", "maybe a refund?"])
def test_a_question_about_refunds_gets_the_answer_and_an_offer(desk, store, text):
    conv = Conversation("ask", desk=desk)
    conv.send(NAMED)
    r = conv.send(text)
    assert "tx_1008" in r.text and "can be refunded" in r.text and r.text.rstrip().endswith("?"), r.text
    assert not _refunds_of(store, "tx_1008")
    r = conv.send("yes")  # the offer made as a question: its yes is the customer's request
    assert r.agent == "refunds" and "rf_" in r.text, r.text
    assert _refunds_of(store, "tx_1008")


@pytest.mark.parametrize("text", ["and the refund for tx_1008?", "refund for tx_1008?", "tx_1008 refund?"])
def test_a_bare_refund_question_gets_the_eligibility_and_the_offer(desk, store, text):
    conv = Conversation("bare", desk=desk)
    r = conv.send(text)
    assert r.agent == "refunds" and "tx_1008" in r.text and "can be refunded" in r.text, r.text
    assert r.text.endswith("Shall I open a refund request for it?"), r.text
    assert not _refunds_of(store, "tx_1008")
    r = conv.send("yes")  # the offer's yes is the request
    assert [f.status for f in _refunds_of(store, "tx_1008")] == ["executed"], r.text


@pytest.mark.parametrize("text", ["I don't want a refund for tx_1008", "I do not need a refund for tx_1008"])
def test_a_refund_the_customer_does_not_want_is_neither_opened_nor_offered(desk, store, text):
    from nodes.embedded.playbook import REFUND_OFFER

    conv = Conversation("refused", desk=desk)
    r = conv.send(text)
    assert r.agent == "refunds" and "won't open a refund for tx_1008" in r.text, r.text
    assert REFUND_OFFER not in r.text
    conv.send("yes")  # answers "anything else?", not an offer: opens nothing
    assert not _refunds_of(store, "tx_1008")


@pytest.mark.parametrize("text", ["I want a refund for tx_1008", "refund tx_1008 please", "can I get a refund for tx_1008?",
                                  "could you refund tx_1008?", "refund tx_1008?"])
def test_an_explicit_request_on_a_fresh_thread_opens_the_refund(desk, store, text):
    r = Conversation("explicit-fresh", desk=desk).send(text)
    assert r.agent == "refunds" and "rf_" in r.text, r.text
    assert [f.status for f in _refunds_of(store, "tx_1008")] == ["executed"]


@pytest.mark.parametrize("text,about", [
    ("and the refund for tx_1008?", True), ("refund for tx_1008?", True), ("tx_1008 refund?", True),
    ("refund tx_1008?", False), ("can i get a refund for tx_1008?", False), ("could you refund tx_1008?", False),
    ("refund please?", False), ("can i have my money back?", False), ("i'd like a refund for tx_1008?", False),
])
def test_bare_refund_question_rule(text, about):
    from nodes.embedded.playbook import asks_about_refund, asks_for_refund

    assert asks_about_refund(text) is about
    assert asks_for_refund(text) is not about


@pytest.mark.parametrize("text,refused", [
    ("i don't want a refund for tx_1008", True), ("we do not need the money back", True), ("no refund needed", True),
    ("i don't want the refund any more", False),  # a cancel wish (cancels_refund)
    ("why didn't i get a refund for tx_1005?", False), ("i want a refund", False),
])
def test_refuses_refund_rule(text, refused):
    from nodes.embedded.playbook import refuses_refund

    assert refuses_refund(text) is refused


@pytest.mark.parametrize("text", ["refund tx_1008 please", "I want my money back for it", "can I get a refund for it?"])
def test_an_explicit_request_after_billing_still_opens_the_refund(desk, store, text):
    conv = Conversation("explicit", desk=desk)
    conv.send(NAMED)
    r = conv.send(text)
    assert r.agent == "refunds" and "rf_" in r.text, r.text
    assert _refunds_of(store, "tx_1008")


# ------------------------------------------------------------------ a waiting refund named for cancellation
@pytest.mark.parametrize("first", ["cancel rf_5001", "cancel my refund", "I want to withdraw refund rf_5001"])
def test_a_waiting_refund_named_to_cancel_is_asked_then_cancelled_on_yes(desk, store, first):
    conv = Conversation("cancel-5001", desk=desk)
    r = conv.send(first)
    assert r.agent == "refunds" and r.text.endswith("Shall I cancel refund rf_5001?"), r.text
    assert store.get_refund("c_ada", "rf_5001").status == "requested"  # asked, not done
    r = conv.send("yes")
    assert "cancelled refund rf_5001" in r.text and "Nothing was paid" in r.text, r.text
    assert store.get_refund("c_ada", "rf_5001").status == "cancelled"
    assert _money_in(store) == []


def test_a_no_to_the_cancel_question_keeps_the_refund(desk, store):
    conv = Conversation("keep-5001", desk=desk)
    conv.send("cancel rf_5001")
    r = conv.send("no")
    assert "rf_5001" not in r.text or "cancelled" not in r.text, r.text
    assert store.get_refund("c_ada", "rf_5001").status == "requested"
    conv.send("yes")  # the question was declined: a later yes cancels nothing
    assert store.get_refund("c_ada", "rf_5001").status == "requested"


def test_a_refund_that_cannot_be_cancelled_says_why(desk, store):
    conv = Conversation("cancel-paid", desk=desk)
    conv.send("refund tx_1008 please")  # £4.50: approved and paid at once by the house rules
    paid = _refunds_of(store, "tx_1008")
    assert paid and paid[0].status == "executed"
    r = conv.send(f"cancel {paid[0].id}")
    assert "already paid" in r.text and "can't be cancelled" in r.text, r.text
    assert "Shall I cancel" not in r.text


# ------------------------------------------------------------------ after a refund already paid
@pytest.mark.parametrize("text", ["is it in my balance?", "is it in my account?", "has it been credited?"])
def test_a_balance_question_after_a_paid_refund_gets_its_status(desk, store, text):
    conv = Conversation("paid-balance", desk=desk)
    conv.send("refund tx_1008 please")
    r = conv.send(text)
    assert r.agent == "refunds" and "already in your balance" in r.text, r.text
    assert "can't be refunded" not in r.text
    assert len(_refunds_of(store, "tx_1008")) == 1


@pytest.mark.parametrize("text", ["cancel that", "cancel it", "cancel my refund"])
def test_cancel_after_an_automatic_refund_says_it_was_already_paid(desk, store, text):
    conv = Conversation("paid-cancel", desk=desk)
    conv.send("refund tx_1008 please")
    r = conv.send(text)
    assert r.agent == "refunds" and "already paid" in r.text and "can't be cancelled" in r.text, r.text
    assert "can't be refunded" not in r.text and "rf_5001" not in r.text, r.text
    assert [f.status for f in _refunds_of(store, "tx_1008")] == ["executed"]


# ------------------------------------------------------------------ an operator's rejection stands
def _reject_5001(store) -> None:
    """rf_5001 (Amazon, tx_1005, £59.99) rejected as by ``tasks reject rf_5001 --as ben --note "fraud suspected"``
    (a task of its own, the operator's final decision with an internal note)."""
    task = store.create_task("task_rf_5001", "", "refunds", refund_id="rf_5001")
    store.update_task(task.id, task.version, status="awaiting_approval")
    store.decide_approval(task.id, "dc_test_reject", "operator:ben", "reject", note="fraud suspected",
                          refund_id="rf_5001")
    assert store.get_refund("c_ada", "rf_5001").status == "rejected"


def test_why_a_refund_was_rejected_gets_the_fixed_reason_never_the_note(desk, store):
    _reject_5001(store)
    conv = Conversation("why-rejected", desk=desk)
    r = conv.send("what happened to my amazon refund?")
    assert r.agent == "refunds" and "rf_5001" in r.text and "not approved" in r.text, r.text
    r = conv.send("why was it rejected?")
    assert "could not approve it" in r.text and "fraud" not in r.text.lower(), r.text
    r = conv.send("yes")
    assert "rf_" not in r.text or "rf_5001" in r.text, r.text
    assert [f.id for f in _refunds_of(store, "tx_1005")] == ["rf_5001"]


def test_a_new_refund_for_a_rejected_payment_goes_to_a_person_with_the_flag(desk, store):
    from policies.risk import REJECTED_BEFORE

    _reject_5001(store)
    conv = Conversation("again", desk=desk)
    r = conv.send("is tx_1005 refundable?")
    assert "rf_5001" in r.text and "another review" in r.text, r.text
    r = conv.send("yes")
    assert r.pending is not None and REJECTED_BEFORE in r.pending.risk_flags, (r.text, r.pending)
    new = [f for f in store.list_refunds("c_ada") if f.transaction_id == "tx_1005" and f.id != "rf_5001"]
    assert [f.status for f in new] == ["requested"]  # waits for a person; nothing paid


def test_a_small_refund_rejected_before_is_never_approved_automatically():
    from policies.risk import AUTO_APPROVE_LIMIT_MINOR, REJECTED_BEFORE, RiskInput, assess_refund

    small = AUTO_APPROVE_LIMIT_MINOR // 2
    assert assess_refund(RiskInput(small, "GBP", 0, {})).outcome == "auto_approve"
    again = assess_refund(RiskInput(small, "GBP", 0, {}, rejected_before=1))
    assert again.outcome == "human_approval" and REJECTED_BEFORE in again.reasons


def test_after_a_rejection_in_the_conversation_a_yes_opens_nothing(desk, store):
    """The rejection's answer invites no reply a plain yes could take for a new request ("yes" after
    the rejection opens no new refund), and "why?" gets the fixed reason, not the approver's note."""
    from graph.contracts.context import RunContext

    conv = Conversation("reject-here", desk=desk)
    r = conv.send("I want a refund for tx_1001 please")
    assert r.pending is not None
    store.add_operator("ben", "t_demo", ["approver"])
    r = Conversation("reject-here", desk=desk, context=RunContext.for_operator("ben", "t_demo")).resume(
        {"decision": "reject", "note": "receipt forged"})
    assert "not approved" in r.text and "reply" not in r.text, r.text
    r = conv.send("yes")
    assert "rf_" not in r.text, r.text
    r = conv.send("why was it rejected?")
    assert "could not approve it" in r.text and "forged" not in r.text, r.text
    assert [f.status for f in _refunds_of(store, "tx_1001")] == ["rejected"]


# ------------------------------------------------------------------ the code checks the confirmation, not the model
def _canceller(first_question: bool):
    """A model that routes to refunds and calls cancel_refund(rf_5001) at once (``first_question`` False) or only after
    its answer asked the cancel question (True); after a tool result it answers with the result's text."""
    from langchain_core.messages import AIMessage, ToolMessage

    from nodes.testing import scripted as sm
    from policies.cancellation import CANCEL_QUESTION

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_refunds", reason="refund")])
        if isinstance(msgs[-1], ToolMessage) and msgs[-1].name == "cancel_refund":
            return AIMessage(content=f"Result: {msgs[-1].content}")
        if first_question and user.lower().startswith("cancel"):
            return AIMessage(content=f"Refund rf_5001 waits for review. {CANCEL_QUESTION.format(refund_id='rf_5001')}")
        return AIMessage(content="", tool_calls=[sm.tool_call("cancel_refund", refund_id="rf_5001")])

    return sm.ScriptedChatModel(policy=policy)


def test_a_model_cancelling_a_refund_without_the_customers_yes_is_refused(make_desk, store):
    r = Conversation("model-cancels", desk=make_desk(_canceller(first_question=False))).send("cancel rf_5001")
    assert "not confirmed" in r.text, r.text
    assert store.get_refund("c_ada", "rf_5001").status == "requested"


def test_a_model_cancelling_after_the_question_and_a_yes_is_allowed(make_desk, store):
    conv = Conversation("model-asks", desk=make_desk(_canceller(first_question=True)))
    assert conv.send("cancel rf_5001").text.endswith("Shall I cancel refund rf_5001?")
    r = conv.send("yes")
    assert store.get_refund("c_ada", "rf_5001").status == "cancelled", r.text


@pytest.mark.parametrize("previous,reply,ok", [
    ("Refund rf_5001 waits. Shall I cancel refund rf_5001?", "yes", True),
    ("Refund rf_5001 waits. Shall I cancel refund rf_5001?", "yes, cancel it", True),
    ("Refund rf_5001 waits. Shall I cancel refund rf_5001?", "no", False),
    ("Refund rf_5001 waits. Shall I cancel refund rf_5001?", "please don't cancel it", False),
    ("Shall I cancel refund rf_5002?", "yes", False),  # another refund was asked about
    ("Shall I cancel refund rf_5001? Anything else?", "yes", False),  # the last question is another one
    (None, "yes", False),
])
def test_cancel_confirmed_rule(previous, reply, ok):
    from nodes.embedded.cancellation import cancel_confirmed

    assert cancel_confirmed(previous, reply, "rf_5001") is ok


# ------------------------------------------------------------------ the status of one payment's refund
def test_a_status_question_naming_a_payment_without_a_refund_says_so(desk, store):
    conv = Conversation("status-none", desk=desk)
    r = conv.send("refund status for tx_1008?")
    assert r.agent == "refunds" and "no refund for tx_1008" in r.text, r.text
    assert "rf_5001" not in r.text and "tx_1005" not in r.text, r.text
    assert r.text.endswith("Shall I open a refund request for it?"), r.text
    assert not _refunds_of(store, "tx_1008")


def test_a_status_question_naming_a_payment_with_a_refund_gets_only_that_one(desk, store):
    conv = Conversation("status-one", desk=desk)
    conv.send("refund tx_1008 please")
    r = conv.send("refund status for tx_1008?")
    assert "tx_1008" in r.text and "paid back" in r.text and "rf_5001" not in r.text, r.text
    r = Conversation("status-5001", desk=desk).send("where is my refund for tx_1005?")
    assert "rf_5001" in r.text and "tx_1008" not in r.text, r.text



# ------------------------------------------------------------------ "it" and "the other one"
def test_refund_it_after_billing_named_one_fee_checks_that_payment(desk, store):
    conv = Conversation("fee-it", desk=desk)
    first = conv.send("why was I charged a fee?")
    assert "tx_1003" in first.text, first.text
    r = conv.send("refund it")
    assert r.agent == "refunds" and "tx_1003" in r.text, r.text
    assert "Which transaction" not in r.text and "rf_5001" not in r.text, r.text
    assert [f.transaction_id for f in store.list_refunds("c_ada") if f.id != "rf_5001"] == ["tx_1003"]


def test_refund_the_other_one_after_the_duplicate_is_the_other_of_the_pair(desk, store):
    conv = Conversation("other-one", desk=desk)
    conv.send(TWICE)
    conv.send("yes")
    assert [f.status for f in _refunds_of(store, "tx_1008")] == ["executed"]
    r = conv.send("refund the other one too")
    assert r.agent == "refunds" and "tx_1007" in r.text and "already has refund" not in r.text, r.text
    assert [f.transaction_id for f in store.list_refunds("c_ada") if f.transaction_id in ("tx_1007", "tx_1008")] \
        .count("tx_1007") == 1
    assert len(_refunds_of(store, "tx_1008")) == 1
