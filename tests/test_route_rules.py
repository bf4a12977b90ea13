"""Routing rules found with ``bench/route_losses.py --list`` on held-out BANKING77 train rows (issue 12 §2): where the
graph answered differently from the router alone and the graph was wrong for the customer. A scripted router
(``tests.test_route_losses.TableRouter``: per-text scores) stands in for the fitted one, so each row exercises the
rule, not a router's reading of the words; the texts are the project's own."""

from __future__ import annotations

import pytest

from tests.test_route_losses import TableRouter

NOT_MINE = "There is a card payment from a shop I have never heard of and I need my money back"
SHORT_CASH = "The cash machine gave me less cash than it took from my account and I want my money back"
TWICE = "My coffee was charged twice this morning and I want my money back for the extra one"


# ------------------------------------------------------------------ billing keeps a dispute's money-back request
@pytest.mark.parametrize("text,intent,answered,says", [
    # a payment the customer did not make: billing names the payments and offers the dispute (README "What the
    # embedded desk answers"); refunds could only ask which transaction to refund
    (NOT_MINE, "card_payment_not_recognised", "billing", "dispute it to get your money back"),
    # an ATM that paid out too little: a dispute with the ATM operator, billing's answer
    (SHORT_CASH, "wrong_amount_of_cash_received", "billing", "dispute with the ATM operator"),
    # a duplicate billing finds is handed on with the verified transaction: the customer asked for the money back
    (TWICE, "transaction_charged_twice", "refunds", "tx_1008"),
])
def test_billing_keeps_money_back_for_a_dispute_it_offers_itself(make_desk, text, intent, answered, says):
    from graph.conversation import Conversation

    desk = make_desk(router=TableRouter({text: ("billing", 0.9, intent)}))
    r = Conversation("money-back", desk=desk).send(text)
    assert r.agent == answered, r.path_str
    assert r.path_str.startswith("entry → triage → billing"), r.path_str
    assert says in r.text, r.text


def test_a_disputed_payment_goes_to_refunds_once_the_customer_agrees(make_desk):
    from graph.conversation import Conversation

    desk = make_desk(router=TableRouter({NOT_MINE: ("billing", 0.9, "card_payment_not_recognised")}))
    conv = Conversation("money-back-yes", desk=desk)
    conv.send(NOT_MINE)
    offer = conv.send("tx_1001")
    assert offer.agent == "billing" and "Shall I dispute tx_1001" in offer.text, offer.text
    assert conv.send("yes").path_str == "entry → billing → refunds → risk → human_approval"
