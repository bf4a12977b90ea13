"""Customer text from the store and the desk renderers: transaction kinds in words with their article, counts with
their noun in the right number, and no internal key or exception name in what the customer reads."""

from __future__ import annotations

import re

import pytest

from graph.contracts.context import RunContext
from graph.conversation import Conversation
from nodes.embedded.desk_render import count_words, render_desk_tool

#: Exception class names and raw error shapes that must never reach the customer.
_RAW = re.compile(r"\b[A-Z][a-zA-Z]+(?:Error|Exception)\b|Traceback|idempotency|refund:[a-z_0-9]+:|\{'|\"ok\"")


@pytest.mark.parametrize(("n", "words"), [(0, "no active cards"), (1, "1 active card"), (3, "3 active cards")])
def test_counts_take_the_noun_in_the_right_number(n, words):
    assert count_words(n, "active card") == words


def test_spending_of_one_transaction_is_singular():
    result = {"ok": True, "spent": [{"amount": "£4.50", "currency": "GBP"}], "top_merchants": [],
              "transactions_counted": 1}
    one = render_desk_tool("spending_summary", result)
    assert one == "In your one recent card payment, cash withdrawal or fee you spent £4.50.", one
    many = render_desk_tool("spending_summary", {**result, "transactions_counted": 7})
    assert many is not None and many.startswith("Across your last 7 card payments, cash withdrawals and fees"), many


@pytest.mark.parametrize(("text", "expected"), [
    ("Please refund tx_1002", "I couldn't open a refund: tx_1002 is an ATM withdrawal; only card payments and fees "
                              "can be refunded."),
    ("Please refund tx_1004", "I couldn't open a refund: tx_1004 is an outgoing transfer; only card payments and "
                              "fees can be refunded."),
])
def test_a_refused_refund_names_the_kind_in_words(make_graph, text, expected):
    r = Conversation(graph=make_graph(), context=RunContext(user_id="c_ada", tenant_id="t_demo")).send(text)
    assert r.agent == "refunds" and r.text == expected, r.text
    assert not _RAW.search(r.text), r.text


@pytest.mark.parametrize(("active", "words"), [(0, "no active cards"), (1, "1 active card"), (2, "2 active cards")])
def test_profile_counts_active_cards_in_words(active, words):
    from nodes.embedded.playbook import _render

    result = {"ok": True, "customer": {"name": "Ada", "email": "ada@example.com", "identity_verified": True},
              "active_cards": active}
    text = _render("account_profile", result, "show my profile")
    assert f"identity verified, {words}." in text and "(s)" not in text, text
