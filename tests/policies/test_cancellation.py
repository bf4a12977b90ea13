"""A paused refund is cancelled only on an explicit wish (negation handled) and a yes to the
confirmation question; status questions on a paused thread are answered."""

from __future__ import annotations

import pytest

from graph.contracts.context import RunContext
from graph.conversation import Conversation
from nodes.embedded.cancellation import confirmation, is_status_question, paused_reply, wants_to_cancel
from tests.conftest import paused_conversation, tx1001_refund_statuses

CANCEL = [
    "cancel my refund",
    "Actually, cancel my refund please",
    "please cancel it",
    "cancel it",
    "stop",
    "please stop!",
    "I want to withdraw my request",
    "withdraw the refund request",
    "call it off",
    "call the refund off please",
    "never mind, I found the receipt",
    "nevermind",
    "stop the refund",
    "stop my request please",
    "I don't want the refund any more",
    "I no longer need the refund",
    "I don't need it anymore",
    "forget about it",
    "drop the request",
    "abort",
    "scrap it, the shop paid me back",
    "Can you cancel it?",
    "ok cancel",
    "CANCEL THE REFUND",
    "I\u2019d like to cancel please",
    "don't bother, cancel it",
]
NOT_CANCEL = [
    "Please don't cancel it",
    "do NOT withdraw my request",
    "don't cancel my refund",
    "dont cancel",
    "I do not want to cancel",
    "no need to cancel anything",
    "never cancel it, I need the money",
    "I would rather not cancel",
    "I'm not cancelling, just asking",
    "what happens if I cancel?",
    "if I cancel, do I lose it?",
    "you shouldn't cancel it",
    "please don\u2019t withdraw it",
    "won't cancel, thanks",
    "where is my refund?",
    "any news?",
    "thanks",
    "I want my money",
    "keep it going please",
    "do not stop the refund",
    "no, don't call it off",
]


@pytest.mark.parametrize("text", CANCEL)
def test_an_explicit_wish_to_cancel_is_recognised(text):
    assert wants_to_cancel(text)
    assert paused_reply(text, awaiting_confirmation=False) == "ask"


@pytest.mark.parametrize("text", NOT_CANCEL)
def test_negated_or_hypothetical_or_unrelated_text_does_not_cancel(text):
    assert not wants_to_cancel(text)
    assert paused_reply(text, awaiting_confirmation=False) != "cancel"


def test_the_table_is_large_enough():
    assert len(CANCEL) + len(NOT_CANCEL) >= 30 and len(NOT_CANCEL) >= 15


@pytest.mark.parametrize("text, answer", [
    ("yes", "yes"), ("Yes please", "yes"), ("yep, go ahead", "yes"), ("confirm", "yes"),
    ("cancel it", None),  # a new wish, not a yes: the question is asked again
    ("no", "no"), ("No, keep it", "no"), ("wait", "no"), ("please don't cancel", "no"), ("nope", "no"),
    ("what?", None), ("hmm", None),
])
def test_the_confirmation_answer(text, answer):
    assert confirmation(text) == answer


@pytest.mark.parametrize("text", ["any news?", "where is my refund", "how long will this take",
                                  "has it been approved?", "what's the status", "is it paid?"])
def test_status_questions(text):
    assert is_status_question(text) and paused_reply(text, awaiting_confirmation=False) == "status"


def test_nothing_cancels_without_the_yes():
    assert paused_reply("yes", awaiting_confirmation=False) == "ack"  # answered "waiting for approval", nothing done
    assert paused_reply("yes", awaiting_confirmation=True) == "cancel"
    assert paused_reply("no thanks", awaiting_confirmation=True) == "keep"


def test_negated_cancel_on_a_paused_thread_keeps_the_refund(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    for text in ("Please don't cancel it", "do NOT withdraw my request"):
        r = conv.send(text)
        assert r.status == "awaiting_approval" and "waiting for approval" in r.text, r.text
    assert conv.pending() is not None and tx1001_refund_statuses(store) == ["requested"]


def test_cancel_needs_a_confirmation_turn(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    r = conv.send("cancel my refund")
    refund_id = conv.pending()["refund_id"]
    assert r.status == "awaiting_approval" and r.text == f"Cancel refund {refund_id} of £23.80 for tx_1001? yes/no"
    r = conv.send("no, keep it")
    assert r.status == "awaiting_approval" and "stays with our team" in r.text and tx1001_refund_statuses(store) == ["requested"]
    r = conv.send("yes")  # the question was answered: a later bare yes cancels nothing (it is told the refund waits)
    assert r.status == "awaiting_approval" and "waiting for approval" in r.text and tx1001_refund_statuses(store) == ["requested"]
    conv.send("please withdraw it")
    # the question survives a new process: another Conversation object on the same thread sees it
    r = Conversation("c1", graph=g, store=store).send("yes")
    assert r.status != "awaiting_approval" and "cancelled" in r.text and tx1001_refund_statuses(store) == ["cancelled"]


def test_a_status_question_on_a_paused_thread_is_answered(isolated_home):
    g, store, conv = paused_conversation(isolated_home)
    r = conv.send("any news on my refund?")
    assert r.status == "awaiting_approval" and "£23.80" in r.text and "waiting for approval" in r.text
    assert "nothing has been paid" in r.text and tx1001_refund_statuses(store) == ["requested"]


def test_another_customer_cannot_cancel_or_ask(isolated_home):
    from graph.contracts.errors import AccessDenied

    g, store, conv = paused_conversation(isolated_home)
    bob = Conversation("c1", graph=g, store=store, context=RunContext(user_id="c_bob"))
    for text in ("cancel my refund", "any news?"):
        with pytest.raises(AccessDenied):
            bob.send(text)
    assert tx1001_refund_statuses(store) == ["requested"]


def test_a_message_sent_straight_to_the_graph_keeps_the_pause(isolated_home):
    """Driving the compiled graph directly (as ``langgraph dev`` does) with a new message on a paused thread returns to
    the pause: the refund keeps its owner (still listed by ``pending``), and the approver's decision still pays it
    once."""
    from langchain_core.messages import HumanMessage

    from graph.contracts.state import ensure_ids
    from tests.conftest import ANN
    g, store, conv = paused_conversation(isolated_home)
    for text in ("please don't cancel it", "any news?"):
        g.invoke({"messages": ensure_ids([HumanMessage(content=text)])}, conv.config, context=RunContext())
        assert conv.pending() is not None and tx1001_refund_statuses(store) == ["requested"]
    r = Conversation("c1", graph=g, store=store, context=ANN).resume({"decision": "approve", "note": "ok"})
    assert "paid back" in r.text and tx1001_refund_statuses(store) == ["executed"]
