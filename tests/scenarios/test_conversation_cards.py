"""Card conversations: each turn asserts the answering agent, what the
answer must and must not say, AND the states of the customer's cards in the business store after the turn, so an
answer can never claim a freeze the store does not hold.

Each row: an id, then ``(message, agent, must, must_not, cards)`` per turn, with ``cards`` the expected status of each
of Ada's cards by last four digits (seed: 1881 blocked, 4242 physical active, 8899 virtual active).
"""

from __future__ import annotations

import pytest

from graph.conversation import Conversation

SEED = {"1881": "blocked", "4242": "active", "8899": "active"}
FROZE_4242 = {**SEED, "4242": "frozen"}
FROZE_8899 = {**SEED, "8899": "frozen"}


def _lead_in(times: int) -> str:
    """A loss report after a polite narrative lead-in of ``times`` sentences (3: about 200 characters)."""
    return "Dear bank, " + "I have been a loyal customer for many years. " * times + " Anyway, I lost my card " \
        "yesterday, please help."

Turn = tuple[str, str, tuple[str, ...], tuple[str, ...], dict[str, str]]

CARD_CASES: list[tuple[str, list[Turn]]] = [
    # a second freeze in the same thread is a new request: it freezes, and the status agrees
    ("freeze-again-after-unfreeze", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), (), FROZE_4242),
        ("I found it, unfreeze it", "cards", ("unfrozen your physical card ending 4242",), (), SEED),
        ("oh no, lost it again, freeze it", "cards", ("card ending 4242",), ("not frozen",), FROZE_4242),
        ("what's the status of my cards?", "cards", ("4242 is frozen",), ("4242 is active",), FROZE_4242)]),
    # freezing a blocked card never reports another card frozen
    ("unfreeze-then-freeze-blocked", [
        ("unfreeze 4242", "cards", ("4242",), ("frozen your",), SEED),
        ("freeze 1881", "cards", ("1881", "blocked"), ("4242",), SEED)]),
    # a card's last four digits name a card, never the account
    ("freeze-last4-new-thread", [
        ("freeze 8899", "cards", ("frozen your virtual card ending 8899",), ("account",), FROZE_8899),
        ("unfreeze 8899", "cards", ("unfrozen your virtual card ending 8899",), (), SEED)]),
    # the card named in reply to "which card?" is the one frozen, by its digits or its kind
    ("freeze-it-which-8899", [
        ("freeze it", "cards", ("freeze a card or your whole account",), ("I've frozen",), SEED),
        ("8899", "cards", ("frozen your virtual card ending 8899",), ("4242",), FROZE_8899)]),
    ("freeze-it-which-virtual", [
        ("freeze it", "cards", ("freeze a card or your whole account",), ("I've frozen",), SEED),
        ("the virtual one", "cards", ("frozen your virtual card ending 8899",), ("4242",), FROZE_8899)]),
    ("freeze-it-which-physical", [
        ("freeze it", "cards", ("freeze a card or your whole account",), (), SEED),
        ("the physical one", "cards", ("frozen your physical card ending 4242",), ("1881",), FROZE_4242)]),
    # after an answer naming several cards, "freeze it" or a yes to the loss question asks which card
    ("freeze-it-after-card-list", [
        ("what's the status of my cards?", "cards", ("4242 is active", "8899 is active"), (), SEED),
        ("freeze it", "cards", ("freeze a card or your whole account",), ("I've frozen",), SEED),
        ("8899", "cards", ("frozen your virtual card ending 8899",), ("4242",), FROZE_8899)]),
    ("yes-to-loss-question-after-card-list", [
        ("what's the status of my cards?", "cards", ("lost or stolen",), (), SEED),
        ("yes", "cards", ("freeze a card or your whole account",), ("I've frozen",), SEED),
        ("the physical one", "cards", ("frozen your physical card ending 4242",), (), FROZE_4242)]),
    # safety first sees the loss whatever the lead-in; narrative sentences are no second question
    *((f"lost-card-long-lead-in-{n}", [
        (_lead_in(n), "cards", ("frozen your physical card ending 4242",),
         ("automated assistant", "other question", "right team"), FROZE_4242)]) for n in (1, 3, 6)),
    ("lost-card-and-a-question", [
        # the fee question goes on to whichever team the router or the handbook's patterns name (billing or policy)
        ("I lost my card yesterday, and what is the fee for international transfers?", "billing|policy",
         ("frozen your card ending 4242", "£0.50"), (), FROZE_4242)]),
    ("lost-card-and-a-question-then-the-right-card", [  # the correction goes to cards
        ("I lost my card yesterday, and what is the fee for international transfers?", "billing|policy",
         ("frozen your card ending 4242", "£0.50"), (), FROZE_4242),
        ("actually it's the one ending 8899", "cards", ("frozen your virtual card ending 8899",), ("International",),
         {**FROZE_4242, "8899": "frozen"})]),
    # lower items: "found it" when nothing was frozen; PIN and replacement follow-ups
    ("found-it-before-any-freeze", [
        ("freeze it", "cards", ("freeze a card or your whole account",), (), SEED),
        ("no wait, I found it", "cards", ("Nothing was frozen",), ("link", "Link"), SEED)]),
    ("found-lost-card-new-thread", [
        ("thanks, I found my lost card", "cards", ("found it",), ("I've frozen", "I'll freeze"), SEED)]),
    ("found-lost-card-after-freeze", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), (), FROZE_4242),
        ("great news, I found my lost card", "cards", ("Shall I unfreeze your card ending 4242?",), (), FROZE_4242),
        ("yes", "cards", ("unfrozen your physical card ending 4242",), (), SEED)]),
    ("pin-blocked-follow-ups", [
        ("my PIN is blocked", "cards", ("PIN is blocked",), (), SEED),
        ("how do I unblock it?", "cards", ("Unblock it in the app under Cards > PIN",),
         ("Your cards", "checked again", "no change"), SEED),
        ("and how do I change it?", "cards", ("Change PIN",), ("Your cards", "checked again", "no change"), SEED)]),
    ("damaged-card-replacement-follow-ups", [
        ("my card is damaged", "cards", ("replacement",), (), SEED),
        ("how much is a replacement?", "cards", ("£5",), ("not something this desk", "Your cards"), SEED),
        ("order one please", "cards", ("Order a new card in the app",), ("not something this desk",), SEED)]),
    ("damaged-card-order-one", [
        ("my card is damaged", "cards", ("replacement",), (), SEED),
        ("order one please", "cards", ("Order a new card in the app",), ("outside what we can help",), SEED)]),
    ("freeze-card-last4-please", [
        ("please freeze card 8899", "cards", ("virtual card ending 8899",), ("sr_",), FROZE_8899)]),
]


def _cards(store) -> dict[str, str]:
    return {c.last4: c.status for c in store.list_cards("c_ada")}


def test_seed_cards_are_what_the_rows_assume(store):
    assert _cards(store) == SEED


@pytest.mark.parametrize("case,turns", CARD_CASES, ids=[c for c, _ in CARD_CASES])
def test_card_conversation_answers_and_card_states(desk, store, case, turns):
    play_card_turns(desk, store, case, turns)


def play_card_turns(desk, store, thread: str, turns) -> None:
    """Send each ``(message, agent, must, must_not, card states)`` turn on ``thread``; check the answering agent, the
    substrings the answer must and must not contain, and c_ada's cards in ``store`` (``{last4: status}``) after it."""
    conv = Conversation(thread, desk=desk)
    for text, agent, must, must_not, cards in turns:
        r = conv.send(text)
        assert r.agent in agent.split("|"), (text, r.agent, r.text)
        assert all(m in r.text for m in must), (text, r.text)
        assert not any(m in r.text for m in must_not), (text, r.text)
        assert _cards(store) == cards, (text, r.text)


def test_a_card_action_replays_within_its_request_and_acts_on_a_new_one(store):
    """The idempotency key of a card action names the request (the turn): a retry or resume of the same turn is
    answered from the key (nothing runs twice), the next turn's freeze runs."""
    from nodes.tools import ToolContext, freeze_idempotency_key, run_tool

    turn3 = ToolContext("c_ada", "t_demo", "th-c", "task-c", turn=3)
    assert freeze_idempotency_key(turn3, "card_ada_phys") == "freeze:task-c:t3:card_ada_phys"
    first = run_tool("freeze_card", {"card_id": "4242"}, store, turn3)
    again = run_tool("freeze_card", {"card_id": "4242"}, store, turn3)  # the same turn resumed
    assert (first["replayed"], again["replayed"], again["status"]) == (False, True, "frozen")
    assert run_tool("unfreeze_card", {"card_id": "4242"}, store, ToolContext("c_ada", "t_demo", "th-c", "task-c",
                                                                               turn=4))["previous_status"] == "frozen"
    later = run_tool("freeze_card", {"card_id": "4242"}, store, ToolContext("c_ada", "t_demo", "th-c", "task-c", turn=5))
    assert later["replayed"] is False and later["previous_status"] == "active"
    assert _cards(store)["4242"] == "frozen"
    # a replay of turn 3 now (the card changed since) reports the card's real state, read back after the action
    run_tool("unfreeze_card", {"card_id": "4242"}, store, ToolContext("c_ada", "t_demo", "th-c", "task-c", turn=6))
    stale = run_tool("freeze_card", {"card_id": "4242"}, store, turn3)
    assert stale["replayed"] is True and stale["status"] == "active" and stale["changed_since"] is True
    from nodes.embedded.playbook import compose_answer

    said = compose_answer("cards", "freeze it", [("freeze_card", stale)])
    assert "not frozen" in said and "I've frozen" not in said and "is frozen" not in said


def test_the_graph_keys_a_freeze_by_its_turn(desk, store):
    """The cards agent's freeze is recorded under its turn's key, so re-running that turn replays it (nothing runs
    twice) while the next turn's freeze is a new request."""
    conv = Conversation("keyed", desk=desk)
    conv.send("I lost my card")
    conv.send("I found it, unfreeze it")
    conv.send("oh no, lost it again, freeze it")
    task = conv.state["task"].task_id
    first, third = (store.side_effect_result(f"freeze:{task}:t{n}:card_ada_phys") for n in (1, 3))
    assert first is not None and third is not None and third["previous_status"] == "active"
    assert store.side_effect_result(f"unfreeze:{task}:t2:card_ada_phys") is not None


# ------------------------------------------------------------------ the card named by its kind, card wording
BOTH_FROZEN = {**SEED, "4242": "frozen", "8899": "frozen"}

KIND_AND_WORDING_CASES: list[tuple[str, list[Turn]]] = [
    # a loss report naming the card's kind freezes that card, never the physical default
    ("stolen-virtual-card", [
        ("my virtual card was stolen", "cards", ("frozen your virtual card ending 8899",), ("4242", "If you find it"),
         FROZE_8899)]),
    ("lost-virtual-card", [
        ("I lost my virtual card", "cards", ("frozen your virtual card ending 8899",), ("4242", "If you find it"),
         FROZE_8899)]),
    ("lost-physical-card", [
        ("I lost my physical card", "cards", ("frozen your physical card ending 4242",), ("8899",), FROZE_4242)]),
    # stolen card details are a compromise report: that card is frozen, no troubleshooting answer
    ("stolen-virtual-card-details", [
        ("someone stole my virtual card details", "cards", ("frozen your virtual card ending 8899",),
         ("expiry date", "If you find it"), FROZE_8899)]),
    ("stolen-card-details", [
        ("someone stole my card details", "cards", ("frozen your physical card ending 4242", "replacement"),
         ("If you find it",), FROZE_4242)]),
    # a correction freezes the card named, says the first stays frozen and offers to unfreeze it; a yes does
    ("correction-keeps-first-frozen", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), (), FROZE_4242),
        ("actually it's the one ending 8899", "cards",
         ("frozen your virtual card ending 8899", "4242 stays frozen", "Shall I unfreeze your card ending 4242?"),
         ("If you find it",), BOTH_FROZEN),
        ("yes", "cards", ("unfrozen your physical card ending 4242",), (), FROZE_8899)]),
    # "unfreeze my card" with nothing frozen says so, offers no freeze; a blocked card can't be unfrozen
    ("unfreeze-nothing-frozen", [
        ("unfreeze my card", "cards", ("None of your cards is frozen", "order a replacement"),
         ("lost or stolen", "freeze it", "Tell me which card"), SEED),
        ("1881", "cards", ("1881 is blocked", "can't be unfrozen", "order a replacement"), ("I've",), SEED)]),
    ("unfreeze-blocked-card", [
        ("unfreeze 1881", "cards", ("cannot be unfrozen", "order a replacement"), ("I've unfrozen",), SEED)]),
]


@pytest.mark.parametrize("case,turns", KIND_AND_WORDING_CASES, ids=[c for c, _ in KIND_AND_WORDING_CASES])
def test_the_card_named_is_the_one_acted_on_and_the_wording_fits(desk, store, case, turns):
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
    """"My card was stolen and I want a refund for tx_1001" freezes the card and does not drop the refund:
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
