"""Every answer says what was asked and never repeats itself: multi-turn conversations with the offline model and the
shipped default router (the ``desk`` and ``store`` fixtures of ``tests/conftest.py``), each turn asserting the
answering agent and what its answer must and must not say.

Each row: an id, then ``(customer message, agent, must contain, must not contain)`` per turn (``agent`` may be
``"a|b"``).
"""

from __future__ import annotations

import pytest

from graph.conversation import Conversation
from tests.conftest import play_content_turns

ANSWER_CASES: list[tuple[str, list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]]] = [
    # "I want to change my email": how to change it, not the profile summary again
    ("account-change-email-after-email", [
        ("what's my account email?", "account", ("a***@example.com",), ()),
        ("I want to change my email", "account", ("Profile > Personal details",),
         ("checked again", "Your account:", "standard plan"))]),
    ("account-change-email-first", [
        ("I want to change my email", "account", ("Profile > Personal details",), ("standard plan", "active card"))]),
    # the profile summary is not the opening of every account answer
    ("account-summary-once", [
        ("what's my account email?", "account", ("a***@example.com",), ("standard plan",)),
        ("how do I verify my identity?", "account", ("selfie",), ("Your account:", "a***@example.com")),
        ("why is my account blocked?", "account", ("restricted",), ("Your account:", "a***@example.com"))]),
    # found the card after a freeze: the desk offers to unfreeze it (asks), it unfreezes nothing by itself
    ("cards-found-it-offer", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), ()),
        ("no wait, I found it", "cards", ("unfreeze", "4242", "?"), ("Link a card", "I've unfrozen", "is active")),
        ("yes", "cards", ("4242",), ("Link a card",))]),
    # "order a new one" after a freeze: the replacement per the desk's rules, not the card list
    ("cards-order-new-one", [
        ("I lost my card", "cards", ("frozen",), ()),
        ("yes please order a new one", "cards", ("Order card", "£5"), ("Your cards:", "1881", "8899"))]),
    # a limit question gets the limit
    ("policy-atm-daily-limit", [
        ("what's the daily ATM withdrawal limit?", "policy", ("£500",), ("Mastercard logo",))]),
    # a declined payment took no money: no dispute offer, the decline explained
    ("billing-declined-steam", [
        ("what's this Steam payment?", "billing", ("tx_1010", "declined", "no money"), ("Shall I dispute", "money back"))]),
    # a paid refund: "did I get my money?" says it was paid and when, in customer words
    ("refunds-did-i-get-my-money", [
        ("Please refund tx_1008, it was a duplicate coffee", "refunds", ("paid back",), ()),
        ("did I get my money?", "refunds", ("credited to your account on",),
         ("(executed)", "can't be refunded", "executed"))]),
    # out of scope twice in a row: the second answer is shorter and says so
    ("oos-twice", [
        ("what's a good mortgage rate?", "out_of_scope", ("not something this desk can help with",), ()),
        ("can I get a bigger credit limit?", "out_of_scope", ("too",),
         ("not something this desk can help with", "We can help with your cards"))]),
]


@pytest.mark.parametrize("case,turns", ANSWER_CASES, ids=[c for c, _ in ANSWER_CASES])
def test_answers_say_what_was_asked(desk, case, turns):
    play_content_turns(desk, case, turns)


def test_found_card_is_not_unfrozen_without_a_yes(desk, store):
    conv = Conversation("found", desk=desk)
    conv.send("I lost my card")
    conv.send("no wait, I found it")
    assert store.get_card("c_ada", "card_ada_phys").status == "frozen"
    r = conv.send("yes please")
    assert r.agent == "cards" and "unfrozen" in r.text
    assert store.get_card("c_ada", "card_ada_phys").status == "active"


def test_balance_asked_four_times_says_unchanged_without_alternating(desk):
    conv = Conversation("bal4", desk=desk)
    answers = [conv.send("what's my balance").text for _ in range(5)]
    assert all("£55.71" in a for a in answers)
    assert len(set(answers)) == 5  # never the same words twice, and no flip-flop between two phrasings
    assert all("unchanged" in a.lower() or "no change" in a.lower() or "nothing has changed" in a.lower()
               for a in answers[1:])


def test_a_plain_yes_while_a_refund_waits_is_answered_not_refused(isolated_home):
    from nodes.embedded.cancellation import paused_reply
    from tests.conftest import BIG, approver_desk
    assert [paused_reply(t, False) for t in ("yes", "ok great", "sure, thanks", "yes?")] == ["ack", "ack", "ack", "status"]
    assert paused_reply("I'd like a pizza", False) == "other"
    g, store = approver_desk(isolated_home)
    conv = Conversation("paused-yes", graph=g, store=store)
    first = conv.send(BIG)
    assert first.status == "awaiting_approval"
    r = conv.send("yes")
    assert r.status == "awaiting_approval" and "waiting for approval" in r.text and "nothing has been paid" in r.text
    assert "\n" not in r.text and r.text != first.text
    assert [x.status for x in store.list_refunds("c_ada") if x.transaction_id == "tx_1001"] == ["requested"]


def test_account_freeze_requests_never_claim_a_freeze_that_is_not_there(desk):
    """A freeze or unfreeze of the whole account is a request to our team (nothing is frozen yet): no answer
    says "until then no payments or transfers can leave the account"."""
    conv = Conversation("account-freeze-words", desk=desk)
    freeze = conv.send("freeze my account").text
    assert "request to freeze your account" in freeze and "can still leave" in freeze, freeze
    assert "no payments or transfers can leave" not in freeze, freeze
    unfreeze = conv.send("unfreeze my account").text
    assert "can leave the account" not in unfreeze and "lift any freeze" in unfreeze, unfreeze
