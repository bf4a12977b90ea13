"""A refund paused for approval is cancelled only by a wish that names nothing else and a plain yes to the
desk's question about it; a message naming another record (a transfer, another refund, another transaction) is
answered read-only and never cancels or confirms; every answer names the paused refund's own transaction."""

from __future__ import annotations

import pytest

from graph.conversation import Conversation
from nodes.embedded.cancellation import confirmation, paused_reply
from tests.conftest import paused_conversation


def _status(store, refund_id):
    return store.get_refund("c_ada", refund_id).status


def test_a_cancel_naming_a_transfer_then_another_transaction_cancels_nothing(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    rid = conv.pending()["refund_id"]
    r = conv.send("cancel tr_3002")
    assert r.status == "awaiting_approval" and "yes/no" not in r.text, r.text
    assert "tr_3002" in r.text and "Mary Somerville" in r.text and rid in r.text and "tx_1001" in r.text, r.text
    assert _status(store, rid) == "requested" and store.get_transfer("c_ada", "tr_3002").status == "pending"
    r = conv.send("cancel the refund for tx_1005")
    assert r.status == "awaiting_approval" and "cancelled" not in r.text, r.text
    assert "rf_5001" in r.text and "tx_1005" in r.text and "yes/no" not in r.text, r.text
    assert _status(store, rid) == "requested" and _status(store, "rf_5001") == "requested"
    r = conv.send("yes")  # no question about the paused refund is open: a yes cancels nothing
    assert r.status == "awaiting_approval" and _status(store, rid) == "requested", r.text
    assert conv.pending() is not None


def test_cancel_another_refund_then_yes_cancels_neither(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    rid = conv.pending()["refund_id"]
    r = conv.send("cancel rf_5001")
    assert f"Cancel refund {rid}" not in r.text and "rf_5001" in r.text and "waiting for review" in r.text, r.text
    r = conv.send("yes")
    assert r.status == "awaiting_approval", r.text
    assert _status(store, rid) == "requested" and _status(store, "rf_5001") == "requested"


def test_a_new_cancel_sentence_is_not_a_yes_and_the_question_names_the_own_transaction(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    rid = conv.pending()["refund_id"]
    assert conv.send("cancel my refund").text == f"Cancel refund {rid} of £23.80 for tx_1001? yes/no"
    r = conv.send("cancel it please")  # asked again, not taken for the yes
    assert r.text == f"Cancel refund {rid} of £23.80 for tx_1001? yes/no" and _status(store, rid) == "requested"
    r = conv.send("yes, cancel rf_5001")  # a yes naming another refund answers nothing about this one
    assert r.status == "awaiting_approval" and _status(store, rid) == "requested", r.text
    assert _status(store, "rf_5001") == "requested"
    conv.send("cancel the refund for tx_1001")  # names only the paused refund's own transaction: a wish
    r = Conversation("c1", graph=g, store=store).send("yes")
    assert r.status != "awaiting_approval" and _status(store, rid) == "cancelled", r.text
    assert "for transaction tx_1001 is cancelled" in r.text and _status(store, "rf_5001") == "requested", r.text


def test_a_question_answered_in_between_closes_the_cancel_question(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    rid = conv.pending()["refund_id"]
    conv.send("cancel my refund")
    r = conv.send("any news on my refund?")
    assert "waiting for approval" in r.text and "tx_1001" in r.text, r.text
    r = conv.send("yes")  # the last question is no longer the cancel question
    assert r.status == "awaiting_approval" and _status(store, rid) == "requested", r.text


@pytest.mark.parametrize("text, own, expected", [
    ("cancel tr_3002", ("rf_x", "tx_1001"), ("tr_3002",)),
    ("cancel the refund for tx_1005", ("rf_x", "tx_1001"), ("tx_1005",)),
    ("cancel rf_5001 and rf_5001", ("rf_x", "tx_1001"), ("rf_5001",)),
    ("cancel the refund for TX_1001", ("rf_x", "tx_1001"), ()),
    ("cancel rf_x", ("rf_x", "tx_1001"), ()),
    ("cancel my refund", ("rf_x", "tx_1001"), ()),
])
def test_other_records(text, own, expected):
    from nodes.embedded.cancellation import other_records

    assert other_records(text, *own) == expected


def test_paused_reply_with_another_record():
    for awaiting in (False, True):
        assert paused_reply("cancel tr_3002", awaiting, "rf_x", "tx_1001") == "elsewhere"
        assert paused_reply("yes cancel rf_5001", awaiting, "rf_x", "tx_1001") == "elsewhere"
    assert paused_reply("yes", True, "rf_x", "tx_1001") == "cancel"
    assert paused_reply("cancel it", True, "rf_x", "tx_1001") == "ask"
    assert confirmation("cancel the refund for tx_1005") is None


def test_a_wish_to_cancel_a_subscription_while_paused_never_cancels_the_refund(isolated_home):
    """A cancel wish about something else (a subscription) never asks "Shall I cancel refund …?"."""
    g, store, conv = paused_conversation(isolated_home)
    rid = conv.pending()["refund_id"]
    other = conv.send("I want to cancel my subscription to Netflix")  # no wish about the refund: nothing asked
    assert other.status == "awaiting_approval" and "Cancel refund" not in other.text, other.text
    assert "While it waits I can" in other.text, other.text
    r = conv.send("yes")
    assert "cancelled" not in r.text, r.text
    assert _status(store, rid) == "requested" and conv.pending() is not None
    assert paused_reply("cancel my gym membership", False, rid, "tx_1001") == "other"
    assert paused_reply("cancel my refund", False, rid, "tx_1001") == "ask"
