"""Conversations the embedded desk understands instead of matching phrases (``nodes.embedded.understanding``): a lost
card in five other languages is frozen, any other message in those languages gets the honest language answer and does
not stick to the thread, a person asked for in any wording (or after repeated frustration) takes the thread over, a
question about freezing is answered and nothing is frozen, "no, the other card" after a freeze freezes the card meant,
and a payment named by its merchant or amount is the customer's own transaction.

Every conversation runs through the compiled graph (``Conversation`` on ``build_desk``) with the shipped router, and
asserts the answering agent, what the answer says, and the business store's state after the turn."""

from __future__ import annotations

import pytest

from graph.conversation import Conversation
from nodes.embedded.understanding.language import LANGUAGE_NAMES


def _cards(store) -> dict[str, str]:
    return {c.last4: c.status for c in store.list_cards("c_ada")}


@pytest.mark.parametrize("text", ["perdí mi tarjeta", "on m'a volé ma carte", "ich habe meine Karte verloren",
                                  "mi hanno rubato la carta", "roubaram o meu cartão"])
def test_a_card_lost_in_another_language_is_frozen(desk, store, text):
    r = Conversation("lost-abroad", desk=desk).send(text)
    assert r.agent == "cards", r.path_str
    assert r.path_str.startswith("entry → triage → cards"), r.path_str
    assert _cards(store)["4242"] == "frozen"
    assert "frozen your physical card ending 4242" in r.text


@pytest.mark.parametrize(("text", "language"), [("quel est mon solde ?", "fr"), ("¿cuánto cuesta una transferencia?", "es"),
                                                ("ich möchte eine Rückerstattung", "de")])
def test_another_language_gets_the_honest_answer_and_does_not_stick(desk, store, text, language):
    conv = Conversation(f"lang-{language}", desk=desk)
    r = conv.send(text)
    assert r.agent == "out_of_scope", r.path_str
    assert "English" in r.text and LANGUAGE_NAMES[language] in r.text
    assert "not something this desk can help with" not in r.text
    assert _cards(store) == {"1881": "blocked", "4242": "active", "8899": "active"}
    # the next English message is read on its own, an apology before it included
    r = conv.send("sorry - what's my balance?")
    assert r.agent == "account", r.path_str
    assert "balance" in r.text.lower()


@pytest.mark.parametrize("text", ["get me a human", "just give me an agent", "can I talk to someone real",
                                  "Is there a person I can talk to?"])
def test_a_person_in_any_wording_takes_the_thread_over(desk, store, text):
    r = Conversation("person-any", desk=desk).send(text)
    assert r.agent == "fallback", r.path_str
    assert r.status == "fallback"
    assert "member of our team" in r.text
    # an operator case for the team, once
    assert [x["kind"] for x in store.list_service_requests(["c_ada"])] == ["talk_to_person"]


def test_repeated_frustration_offers_a_person_then_hands_over(desk):
    conv = Conversation("frustrated", desk=desk)
    first = conv.send("this is the third time im asking!!!")
    assert first.agent != "fallback" and "a person" in first.text, first.text
    assert "not something this desk can help with" not in first.text
    second = conv.send("why is this so hard, you are not listening!!!")
    assert second.agent == "fallback" and second.status == "fallback", second.path_str


def test_a_question_about_freezing_is_answered_not_acted_on(desk, store):
    conv = Conversation("should-freeze", desk=desk)
    r = conv.send("should i freeze my card just in case?")
    assert r.agent == "cards", r.path_str
    assert "Freezing your card" in r.text
    assert _cards(store)["4242"] == "active" and _cards(store)["8899"] == "active"
    r = conv.send("ok, freeze my card")
    assert _cards(store)["4242"] == "frozen"
    r = conv.send("if I find it, can I unfreeze it myself?")
    assert _cards(store)["4242"] == "frozen", r.text
    r = Conversation("what-if", desk=desk).send("what should I do if my virtual card gets stolen?")
    assert r.agent == "cards" and _cards(store)["8899"] == "active", r.text
    # a loss in the same question is a loss: safety first
    r = Conversation("lost-should", desk=desk).send("I lost my virtual card, should I freeze it?")
    assert _cards(store)["8899"] == "frozen", r.text


@pytest.mark.parametrize("correction", ["no, the other card, the virtual one", "no, my other card",
                                        "sorry, I meant the one ending 88"])
def test_no_the_other_card_freezes_the_card_meant(desk, store, correction):
    conv = Conversation("other-card", desk=desk)
    conv.send("I lost my card")
    assert _cards(store)["4242"] == "frozen"
    r = conv.send(correction)
    assert r.agent == "cards", r.path_str
    assert _cards(store)["8899"] == "frozen"
    assert "virtual card ending 8899" in r.text
    assert _cards(store)["1881"] == "blocked"


def test_a_payment_named_by_its_merchant_is_found_and_disputed(desk, store):
    conv = Conversation("tesco", desk=desk)
    r = conv.send("a Tesco payment I don't recognise")
    assert r.agent == "billing", r.path_str
    assert "tx_1001" in r.text and "Shall I dispute tx_1001" in r.text
    r = conv.send("yes dispute it")
    assert r.agent == "refunds", r.path_str
    assert [x.transaction_id for x in store.list_refunds("c_ada") if x.status == "requested"].count("tx_1001") == 1


@pytest.mark.parametrize(("text", "tx", "says"), [
    ("refund the uber ride", "tx_1009", "pending"),
    ("I want a refund for the amazon order", "tx_1005", "rf_5001"),
    ("refund the £4.50 coffee", "tx_1008", "tx_1008"),
])
def test_a_refund_for_a_payment_named_without_its_id(desk, text, tx, says):
    r = Conversation("named-refund", desk=desk).send(text)
    assert r.agent == "refunds", r.path_str
    assert "billing" in r.path_str  # billing found the payment among the customer's own
    assert tx in r.text and says in r.text, r.text
    assert "Which transaction would you like refunded" not in r.text


def test_a_merchant_only_another_customer_paid_is_not_found(desk, store):
    """Bob paid Pret A Manger; Ada's desk looks only at Ada's records: nothing of Bob's is named or refunded."""
    r = Conversation("pret", desk=desk).send("I want a refund for the Pret A Manger lunch")
    assert "tx_2001" not in r.text
    assert all(x.transaction_id != "tx_2001" for x in store.list_refunds("c_ada"))
    assert store.list_refunds("c_bob") == []


@pytest.mark.parametrize(("text", "agent", "says"), [
    ("refund for the uber ride please", "refunds", "tx_1009"),
    ("the £250 I sent to Charles, did it arrive?", "transfers", "tr_3001"),
])
def test_a_payment_named_where_the_router_sees_no_desk_request(desk, text, agent, says):
    """The router reads "uber ride" as a ride to book; the customer's own Uber payment says otherwise."""
    r = Conversation("named-oos", desk=desk).send(text)
    assert r.agent == agent, r.path_str
    assert says in r.text, r.text


def test_a_ride_to_book_is_still_out_of_scope(desk):
    r = Conversation("uber-book", desk=desk).send("get me an uber to the airport")
    assert r.agent == "out_of_scope", r.path_str
