"""Multi-turn flows: each turn lands where a person expects.

Each row: an id, then per turn ``(customer message, answering agent, must contain, must not contain)``; the agent may
be "a|b" where either is right for a person and the shipped router decides. The conversations run with the offline
model and the shipped default router (the ``desk`` fixture of ``tests/conftest.py``), one fresh business store
per test.
"""

from __future__ import annotations

import pytest

from graph.conversation import Conversation
from nodes.embedded.replies import asks_card_action, opens_follow_up
from nodes.testing.entry_rule import decide as decide_entry_rule
from tests.conftest import TWICE, play_content_turns

Turn = tuple[str, str, tuple[str, ...], tuple[str, ...]]

#: The account-freeze request account files with the team ("I've passed your request to freeze your account …").
ACCOUNT_FREEZE = ("freeze your account to our team", "sr_")

FLOWS: list[tuple[str, list[Turn]]] = [
    # 1. a bare "freeze it" is the card's after card talk; on a new thread cards asks "a card or your account?"
    ("freeze-it-after-loss", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), ()),
        ("freeze it", "cards", ("card ending 4242 is frozen",), ACCOUNT_FREEZE),
        ("unfreeze it", "cards", ("unfrozen your physical card ending 4242",), ("not something this desk",))]),
    ("freeze-it-after-one-card", [
        ("my card doesn't work", "cards", ("8899",), ()),
        ("the virtual one", "cards", ("virtual card ending 8899 is active",), ()),
        ("freeze it", "cards", ("frozen your virtual card ending 8899",), ACCOUNT_FREEZE + ("4242",)),
        ("unfreeze it", "cards", ("unfrozen your virtual card ending 8899",), ("not something this desk",))]),
    ("freeze-it-after-card-list", [
        ("is my card blocked?", "cards", ("1881", "4242", "8899"), ()),
        ("freeze it", "cards", ("a card or your whole account",), ACCOUNT_FREEZE + ("I've frozen",)),
        ("the one ending 4242", "cards", ("frozen your physical card ending 4242",), ACCOUNT_FREEZE)]),
    ("freeze-it-new-thread", [
        ("freeze it", "cards", ("a card or your whole account",), ACCOUNT_FREEZE + ("I've frozen",)),
        ("unfreeze it", "cards", ("nothing to unfreeze",), ("not something this desk", "I've unfrozen", "which card to "
                                                           "unfreeze", "lost or stolen"))]),
    ("unfreeze-it-new-thread", [
        ("unfreeze it", "cards", ("nothing to unfreeze",), ("not something this desk", "Your account", "which card to "
                                                           "unfreeze", "lost or stolen"))]),
    ("freeze-my-account-still-account", [
        ("please freeze my account", "account", ACCOUNT_FREEZE, ())]),
    # 2. a short out-of-scope question while a specialist holds the thread gets the out_of_scope answer; an opener
    # such as "what about X?" stays with the holder
    ("oos-fragment-after-billing", [
        (TWICE, "billing", ("tx_1008",), ()),
        ("what is a mortgage rate today?", "out_of_scope", ("not something this desk",), ("tx_1008",)),
        ("and which one was the duplicate?", "billing", ("tx_1008",), ("not something this desk",))]),
    ("oos-fragment-after-transfers", [
        ("where is my transfer tr_3002?", "transfers", ("tr_3002",), ()),
        ("what is the weather today?", "out_of_scope", ("not something this desk",), ("tr_3002",))]),
    ("switzerland-stays-with-policy", [
        ("can I open an account from the US?", "policy", ("Switzerland",), ()),
        ("what about Switzerland?", "policy", ("Switzerland",), ("not something this desk",))]),
    # 3. after a transfer price, "and how long does it take?" asks how long a transfer takes
    ("fee-then-how-long", [
        ("what's the fee for international transfers?", "billing|policy|transfers", ("£0.50",), ()),
        ("and how long does it take?", "billing|policy|transfers", ("business day",),
         ("Your latest transactions", "tx_10", "card"))]),
    # 4. sending abroad is not receiving; "can I raise it?" after a limit asks about raising that limit
    ("send-money-abroad", [
        ("I want to send money abroad", "transfers", ("To send money",), ("To receive money",))]),
    ("raise-top-up-limit", [
        ("what's the top-up limit?", "transfers|policy", ("£10,000",), ()),
        ("can I raise it?", "transfers|policy", ("can't be raised",), ("Your transfers", "tr_300"))]),
    ("raise-card-limit", [
        ("what's my card limit?", "cards|policy", ("card payments £5,000",), ()),
        ("can I increase it?", "cards|policy", ("can't be raised",), ("Your cards", "frozen"))]),
    # 5. the record a follow-up names is the one answered, not the one carried from earlier
    ("amazon-after-supervisor-refund", [
        ("Why was I charged twice, and when will my refund arrive?", "supervisor", ("tx_1008",), ()),
        ("ok, please refund it", "refunds", ("tx_1008",), ()),
        ("and the Amazon one?", "refunds", ("Amazon", "tx_1005", "rf_5001"), ("tx_1008", "not something this desk"))]),
    ("amazon-after-refund", [
        ("I want a refund for tx_1008", "refunds", ("tx_1008",), ()),
        ("and the Amazon one?", "refunds", ("Amazon", "tx_1005", "rf_5001"), ("tx_1008",))]),
    # a yes to the supervisor's offer to refund the duplicate opens that refund (it answered "Okay!" and did nothing)
    ("supervisor-offer-yes", [
        ("Why was I charged twice, and when will my refund arrive?", "supervisor", ("refund the duplicate, tx_1008?",),
         ()),
        ("yes", "refunds", ("tx_1008", "paid back"), ("Okay!", "anything else"))]),
    ("refund-timing-named-tx", [
        ("how long do refunds take? asking about tx_1001", "refunds", ("tx_1001", "5 business days"),
         ("rf_5001", "tx_1005"))]),
]


@pytest.mark.parametrize("case,turns", FLOWS, ids=[c for c, _ in FLOWS])
def test_flow_lands_where_a_person_expects(desk, case, turns):
    play_content_turns(desk, case, turns)
    decided = desk.deps.events.events(case, kinds=["entry_decided"])
    assert len(decided) == len(turns)
    assert all("follow_up_opener" in e.detail and "card_action" in e.detail for e in decided)  # inputs in the event


def test_a_yes_to_the_supervisors_offer_refunds_the_duplicate_only(desk, store):
    conv = Conversation("sup-yes", desk=desk)
    conv.send("Why was I charged twice, and when will my refund arrive?")
    before = {r.transaction_id for r in store.list_refunds("c_ada")}
    conv.send("yes")
    assert {r.transaction_id for r in store.list_refunds("c_ada")} - before == {"tx_1008"}


def test_a_bare_freeze_on_a_new_thread_freezes_nothing(desk, store):
    before = {c.last4: c.status for c in store.list_cards("c_ada")}
    conv = Conversation("bare-freeze", desk=desk)
    conv.send("freeze it")
    conv.send("unfreeze it")
    assert {c.last4: c.status for c in store.list_cards("c_ada")} == before


def test_follow_up_openers_and_card_actions():
    for text in ("what about Switzerland?", "and the Amazon one?", "and for ATM withdrawals?", "how about weekends?",
                 "and tx_1001?", "also the other one?"):
        assert opens_follow_up(text), text
    for text in ("what is a mortgage rate today?", "what's the weather like?", "andrew sent me money",
                 "what about the transfer I made to my landlord last week from my other account in euros?"):
        assert not opens_follow_up(text), text
    for text in ("freeze it", "unfreeze it", "please freeze it", "can you unfreeze it?", "block it", "freeze that"):
        assert asks_card_action(text), text
    for text in ("freeze my account", "freeze it, my whole account", "how do I freeze my card", "it's frozen",
                 "what's the freeze policy for accounts?", "unblock it", "thanks"):
        assert not asks_card_action(text), text


def test_entry_rule_out_of_scope_fragment_and_card_action():
    c = decide_entry_rule
    oos = {"routed_agent": "other", "identity_changed": False, "scope": "out_of_scope", "reply": "fragment"}
    # a short question the router is sure the desk does not serve leaves the holder ...
    assert c("billing", route_confidence=0.95, **oos).target == "out_of_scope"
    # ... unless it opens as a follow-up ("what about Switzerland?"), points back, or asks the same question again
    assert c("policy", route_confidence=0.93, follow_up_opener=True, **oos).target == "policy"
    assert c("refunds", route_confidence=0.95, refers_back=True, **oos).target == "refunds"
    assert c("transfers", route_confidence=0.95, same_question=True, **oos).target == "transfers"
    # the router unsure: a fragment stays with the holder, as before
    assert c("billing", route_confidence=0.7, **oos).target == "billing"
    # "freeze it": the card action is cards', whatever the router says (account at 0.31)
    act = {"routed_agent": "account", "route_confidence": 0.31, "identity_changed": False, "card_action": True}
    assert c("cards", **act).target == "cards"
    assert c("billing", **act).target == "triage" and c(None, **act).target == "triage"
    assert c("cards", task_status="fallback", **act).target == "fallback"
