"""While a refund waits for approval: a question for another specialist whose tools
only read is answered (the balance, the cards, a policy), a request for a person reaches the team, and only what would
change something is refused; the refund's own status and cancellation keep their answers, and the pause is untouched.
"""

from __future__ import annotations

import pytest

from checkpoints.business import open_store
from tests.conftest import paused_conversation, tx1001_refund_statuses


def _still_paused(conv, store) -> None:
    assert conv.pending() is not None and tx1001_refund_statuses(store) == ["requested"]


def test_read_only_questions_are_answered_while_the_refund_waits(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    balance = conv.send("what's my balance?")
    assert "Your balance" in balance.text and "£55.71" in balance.text, balance.text
    assert "still waiting for approval" in balance.text and balance.status == "awaiting_approval"
    cards = conv.send("what's the status of my cards?")
    assert "4242" in cards.text and "active" in cards.text, cards.text
    fees = conv.send("what are your fees?")
    assert "£1.50" in fees.text, fees.text  # the ATM fee of the fee schedule
    assert store.get_card("c_ada", "card_ada_phys").status == "active"
    _still_paused(conv, store)
    # a list request without "?" (the router read the card network into it): the cards, not the network
    listed = conv.send("which cards do I have")
    assert "Your cards:" in listed.text and "8899" in listed.text and "Mastercard" not in listed.text, listed.text
    _still_paused(conv, store)


def test_the_refunds_own_status_is_still_the_answer_to_a_status_question(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    for text in ("any news?", "has it been approved?", "any update on my refund?"):
        r = conv.send(text)
        assert "waiting for approval" in r.text and "Your balance" not in r.text, (text, r.text)
    _still_paused(conv, store)


def test_a_request_for_a_person_reaches_the_team_once(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    first = conv.send("I want to speak to a human")
    [request] = store.list_service_requests(["c_ada"])
    assert request["kind"] == "talk_to_person" and request["status"] == "open"
    assert request["request_id"] in first.text and "automated assistant" not in first.text, first.text
    again = conv.send("human please")
    assert "already been asked" in again.text and len(store.list_service_requests(["c_ada"])) == 1, again.text
    assert [e.action for e in open_store(isolated_home / "business.db").audit_entries(action="person_while_paused")]
    _still_paused(conv, store)


@pytest.mark.parametrize("text", ["I want a refund for tx_1005", "please freeze my account",
                                  "send £20 to Charles Babbage"])
def test_what_would_change_something_is_still_refused(isolated_home, text):
    g, store, conv = paused_conversation(isolated_home)
    r = conv.send(text)  # answered with what can be done while the refund waits; nothing is changed
    assert r.status == "awaiting_approval" and "While it waits I can" in r.text, r.text
    assert store.list_service_requests(["c_ada"]) == [] and [r.transaction_id for r in store.list_refunds("c_ada")
                                                             if r.status == "requested"] == ["tx_1001", "tx_1005"]
    _still_paused(conv, store)


@pytest.mark.parametrize("text,expected", [("Please don't cancel it", True), ("do NOT withdraw my request", True),
                                           ("I don't want the refund any more", True), ("what's my balance?", False),
                                           ("what are your fees?", False)])
def test_a_message_that_speaks_of_cancelling_is_about_the_refund(text, expected):
    from nodes.embedded.cancellation import speaks_of_cancelling

    assert speaks_of_cancelling(text) is expected


def test_a_loss_report_with_another_question_while_paused_answers_both(isolated_home):
    """While a refund waits, a loss report with a fee question freezes the card and answers the fee too."""
    g, store, conv = paused_conversation(isolated_home)
    r = conv.send("I lost my card yesterday, and what is the fee for international transfers?")
    assert "frozen" in r.text and "4242" in r.text and "£0.50" in r.text, r.text
    assert store.get_card("c_ada", "card_ada_phys").status == "frozen"
    _still_paused(conv, store)
