"""Card conversations of the second fresh-user review of main (notes qa2 §2 and §13): the card the customer names by
its kind in a loss report is the one frozen, stolen card details are a compromise report, and the wording around a
correction, a blocked card, an unfreeze with nothing frozen and a virtual card's freeze.

Each row: an id, then ``(message, agent, must, must_not, cards)`` per turn, with ``cards`` the expected status of each
of Ada's cards by last four digits after the turn (seed: 1881 blocked, 4242 physical active, 8899 virtual active).
"""

from __future__ import annotations

import pytest

from tests.test_followups_cards import FROZE_4242, FROZE_8899, SEED, Turn, _cards, play_card_turns
from tests.test_followups_cards import desk as desk  # the fixture

BOTH_FROZEN = {**SEED, "4242": "frozen", "8899": "frozen"}

CARD_CASES2: list[tuple[str, list[Turn]]] = [
    # §2: a loss report naming the card's kind freezes that card, never the physical default
    ("stolen-virtual-card", [
        ("my virtual card was stolen", "cards", ("frozen your virtual card ending 8899",), ("4242", "If you find it"),
         FROZE_8899)]),
    ("lost-virtual-card", [
        ("I lost my virtual card", "cards", ("frozen your virtual card ending 8899",), ("4242", "If you find it"),
         FROZE_8899)]),
    ("lost-physical-card", [
        ("I lost my physical card", "cards", ("frozen your physical card ending 4242",), ("8899",), FROZE_4242)]),
    # §2: stolen card details are a compromise report: that card is frozen, no troubleshooting answer
    ("stolen-virtual-card-details", [
        ("someone stole my virtual card details", "cards", ("frozen your virtual card ending 8899",),
         ("expiry date", "If you find it"), FROZE_8899)]),
    ("stolen-card-details", [
        ("someone stole my card details", "cards", ("frozen your physical card ending 4242", "replacement"),
         ("If you find it",), FROZE_4242)]),
    # §13: a correction freezes the card named, says the first stays frozen and offers to unfreeze it; a yes does
    ("correction-keeps-first-frozen", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), (), FROZE_4242),
        ("actually it's the one ending 8899", "cards",
         ("frozen your virtual card ending 8899", "4242 stays frozen", "Shall I unfreeze your card ending 4242?"),
         ("If you find it",), BOTH_FROZEN),
        ("yes", "cards", ("unfrozen your physical card ending 4242",), (), FROZE_8899)]),
    # §13: "unfreeze my card" with nothing frozen says so, offers no freeze; a blocked card can't be unfrozen
    ("unfreeze-nothing-frozen", [
        ("unfreeze my card", "cards", ("None of your cards is frozen", "order a replacement"),
         ("lost or stolen", "freeze it", "Tell me which card"), SEED),
        ("1881", "cards", ("1881 is blocked", "can't be unfrozen", "order a replacement"), ("I've",), SEED)]),
    ("unfreeze-blocked-card", [
        ("unfreeze 1881", "cards", ("cannot be unfrozen", "order a replacement"), ("I've unfrozen",), SEED)]),
]


@pytest.mark.parametrize("case,turns", CARD_CASES2, ids=[c for c, _ in CARD_CASES2])
def test_card_conversation_answers_and_card_states(desk, store, case, turns):
    play_card_turns(desk, store, case, turns)


def test_card_status_facts_name_the_one_usable_card_of_each_kind():
    """card_status's verified facts carry the one usable (not blocked or expired) card of each kind, also when a card
    is frozen already (the default ``card_id`` is then withheld)."""
    from nodes.facts import facts_from_tool_result

    cards = [{"id": "c1", "kind": "physical", "status": "blocked", "last4": "1881"},
             {"id": "c2", "kind": "physical", "status": "frozen", "last4": "4242"},
             {"id": "c3", "kind": "virtual", "status": "active", "last4": "8899"}]
    assert facts_from_tool_result("card_status", {"ok": True, "cards": cards}) == \
        {"card_id_physical": "c2", "card_id_virtual": "c3"}
    two_virtual = [*cards[:2], cards[2], {**cards[2], "id": "c4", "last4": "1234"}]
    assert "card_id_virtual" not in facts_from_tool_result("card_status", {"ok": True, "cards": two_virtual})


def test_a_safety_report_with_a_refund_request_freezes_and_says_how_the_refund_goes_on(desk, store):
    """qa2 §4: "My card was stolen and I want a refund for tx_1001" freezes the card and no longer drops the refund:
    the answer says how to send it to refunds; nothing is opened by the cards agent (no refund without the refunds
    team's own request handling), and sending it as asked opens it."""
    from graph.conversation import Conversation

    before = len(store.refunds_for_transaction("c_ada", "tx_1001"))
    conv = Conversation("stolen-and-refund", desk=desk)
    r = conv.send("My card was stolen and I want a refund for tx_1001")
    assert r.agent == "cards" and "frozen your physical card ending 4242" in r.text, r.text
    assert "refund tx_1001" in r.text and "rf_" not in r.text, r.text
    assert _cards(store) == FROZE_4242
    assert len(store.refunds_for_transaction("c_ada", "tx_1001")) == before
    r = conv.send("refund tx_1001")
    assert r.agent == "refunds" and "tx_1001" in r.text, r.text
    assert len(store.refunds_for_transaction("c_ada", "tx_1001")) == before + 1
