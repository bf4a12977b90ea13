"""The embedded desk in conversations with the offline model and the shipped router: an unrecognised payment is acted on
after "yes"; greetings, thanks and goodbyes are answered, never fallback; fallback text shows facts in customer words;
the paused answer tells the customer it waits for approval (the approver's command is for operators); "when will it
arrive?" after a paid refund stays with refunds; a lost card on a paused thread is frozen while the approval stays
pending."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from graph.conversation import Conversation
from nodes.fallback import fallback_text
from nodes.router import default_router
from nodes.testing.state import packet

UNKNOWN = "There's a charge I don't recognise"


def _refunds(store, tx: str) -> list[str]:
    return [r.status for r in store.list_refunds("c_ada") if r.transaction_id == tx]


# ---------------------------------------------------------------- (a) an unrecognised payment, then "yes go ahead"
def test_yes_to_billing_dispute_offer_opens_the_refund_through_risk_and_approval(desk, store):
    conv = Conversation("dispute", desk=desk)
    listed = conv.send(UNKNOWN)
    assert listed.agent == "billing" and "Which of these payments didn't you make?" in listed.text
    vague = conv.send("yes")  # agreed, but to which payment? billing asks, it does not guess
    assert vague.agent == "billing" and "Which payment" in vague.text and _refunds(store, "tx_1001") == []
    named = conv.send("the Tesco one")  # not among the five listed: billing looks further back and names it
    assert named.agent == "billing" and "Shall I dispute tx_1001 (Tesco, £23.80)" in named.text
    acted = conv.send("yes go ahead")
    # £23.80 is above the auto-approval limit: the refund is opened by refunds and waits for a person
    assert acted.status == "awaiting_approval" and acted.pending.transaction_id == "tx_1001"
    assert [h.to_agent for h in acted.handoff_path] == ["billing", "refunds", "risk", "human_approval"]
    assert _refunds(store, "tx_1001") == ["requested"]
    reason = next(r.reason for r in store.list_refunds("c_ada") if r.transaction_id == "tx_1001")
    assert reason == "payment the customer did not make"


def test_dispute_of_a_named_payment_goes_through_the_store_guards(desk, store):
    conv = Conversation("dispute-pending", desk=desk)
    offer = conv.send("I don't recognise tx_1009")
    assert offer.agent == "billing" and "Shall I dispute tx_1009" in offer.text
    refused = conv.send("yes please")  # a pending payment cannot be refunded: the store's eligibility rule says so
    assert refused.agent == "refunds" and "pending" in refused.text and _refunds(store, "tx_1009") == []


def test_no_to_the_dispute_offer_changes_nothing(desk, store):
    conv = Conversation("dispute-no", desk=desk)
    conv.send("I don't recognise tx_1005")
    no = conv.send("no")
    assert no.agent == "billing" and "left tx_1005 as it is" in no.text and _refunds(store, "tx_1005") == ["requested"]


# ---------------------------------------------------------------- (b) hi, thanks, bye
@pytest.mark.parametrize("turns", [["hi", "thanks!", "bye"], ["hmm", "dunno", "bye"]])
def test_social_messages_never_end_in_fallback(desk, turns):
    conv = Conversation("social-" + turns[0], desk=desk)
    results = [conv.send(t) for t in turns]
    assert [r.agent for r in results] == ["clarify"] * len(turns)
    assert "Goodbye" in results[-1].text


def test_the_agent_holding_the_conversation_answers_thanks_and_goodbye(desk):
    conv = Conversation("cards-social", desk=desk)
    assert "frozen" in conv.send("I lost my card").text
    first, second, bye = conv.send("thanks"), conv.send("thank you"), conv.send("bye")
    assert (first.agent, second.agent, bye.agent) == ("cards", "cards", "cards")
    assert first.text.startswith("You're welcome!") and second.text == "You're welcome!"  # its question not asked twice
    assert bye.text.startswith("Goodbye")


# ---------------------------------------------------------------- (c) facts in customer words
def test_fallback_shows_money_with_its_currency_not_minor_units():
    text = fallback_text(packet(**{"reason": "r", "known_facts": [
        {"key": "amount", "value": "100.00 GBP", "source": "system_verified"},
        {"key": "amount_minor", "value": "10000", "source": "system_verified"},
        {"key": "currency", "value": "GBP", "source": "system_verified"},
        {"key": "transaction_id", "value": "tx_1002", "source": "user_said"},
        {"key": "refund_status", "value": "requested", "source": "system_verified"}]}))
    assert "amount: £100.00" in text and "transaction: tx_1002 (you told us)" in text and "refund status: requested" in text
    assert not any(raw in text for raw in ("minor", "10000", "currency", "refund_status", "transaction_id"))


# ---------------------------------------------------------------- (d) the paused answer
def test_paused_answer_tells_the_customer_it_waits_and_keeps_the_command_for_operators(isolated_home):
    from graph.app.cli import app

    r = CliRunner().invoke(app, ["chat", "I want a refund for tx_1001, the item never arrived", "--thread", "p"])
    assert r.exit_code == 0, r.output
    out, err = " ".join(r.stdout.split()), " ".join(r.stderr.split())
    assert "waiting for approval by our team; nothing has been paid yet" in out
    assert "switchboard resume" not in out and "--approve" not in out
    assert "switchboard resume p --approve" in err  # the operator still sees how to decide
    js = CliRunner().invoke(app, ["chat", "any news?", "--thread", "p", "--json"])
    assert js.exit_code == 0 and "switchboard" not in js.stdout
    assert " UTC)" in js.stdout and "Z)" not in js.stdout  # the request time in customer words, not raw ISO


# ---------------------------------------------------------------- (e) "when will it arrive?" after a paid refund
def test_when_will_it_arrive_after_a_paid_refund_stays_with_refunds(desk, store):
    conv = Conversation("arrive", desk=desk)
    paid = conv.send("I want a refund for tx_1008")
    assert paid.agent == "refunds" and "paid back" in paid.text
    later = conv.send("when will it arrive?")
    assert later.agent == "refunds" and [h.to_agent for h in later.handoff_path] == ["refunds"]
    refund = next(r for r in store.list_refunds("c_ada") if r.transaction_id == "tx_1008")
    assert refund.id in later.text and "credited to your account on" in later.text and "Faster Payments" not in later.text
    decided = desk.deps.events.events("arrive", kinds=["entry_decided"])[-1]
    assert decided.detail["refers_back"] is True


def test_a_new_topic_with_a_pronoun_is_not_kept_by_a_record_free_answer(desk):
    conv = Conversation("no-record", desk=desk)
    conv.send("How do I activate my new card?")  # the answer names no record
    assert conv.send("how long does it take to send money abroad?").agent == "transfers"


# ---------------------------------------------------------------- (f) a lost card while a refund waits for approval
def test_lost_card_on_a_paused_thread_is_frozen_and_the_approval_stays_pending(desk, store):
    conv = Conversation("paused-lost", desk=desk)
    paused = conv.send("I want a refund for tx_1001, the item never arrived")
    assert paused.status == "awaiting_approval"
    before = conv.pending()
    r = conv.send("I lost my card, freeze it")
    assert r.status == "awaiting_approval" and "frozen your physical card ending 4242" in r.text
    assert "still waiting for approval" in r.text
    assert {c.last4: c.status for c in store.list_cards("c_ada")}["4242"] == "frozen"
    assert conv.pending() == before and _refunds(store, "tx_1001") == ["requested"]  # the pause is untouched
    audit = store.audit_entries(action="urgent_freeze_while_paused", limit=5)
    assert audit and audit[0].detail["frozen_last4"] == "4242"
    assert "You're welcome!" in conv.send("thanks").text and conv.pending() == before


# ---------------------------------------------------------------- facts in packets are dated
def test_a_verified_fact_from_an_earlier_turn_keeps_its_original_date(desk, monkeypatch):
    import nodes.agent
    from graph.contracts.packet import render_packet

    monkeypatch.setattr(nodes.agent, "observed_now", lambda: "2026-01-02T03:04:05+00:00")
    conv = Conversation("dated", desk=desk)
    conv.send("I don't recognise tx_1005")  # billing reads tx_1005 "at" 03:04:05 on 2 Jan
    monkeypatch.setattr(nodes.agent, "observed_now", lambda: "2026-01-03T00:00:00+00:00")
    conv.send("no")  # next turn: entry keeps billing and carries the facts in its packet
    packet = conv.state["handoff"]
    facts = {f.key: f for f in packet.known_facts}
    assert facts["transaction_id"].source == "system_verified"
    assert facts["transaction_id"].observed_at == "2026-01-02T03:04:05+00:00"  # its own date, not this turn's
    assert facts["merchant"].observed_at == "2026-01-02T03:04:05+00:00"
    assert "transaction_id=tx_1005 (system_verified, as of 2026-01-02T03:04:05+00:00)" in render_packet(packet)
    text = fallback_text(packet)
    assert "transaction: tx_1005 (as of 2 Jan 03:04 UTC)" in text


def test_a_fact_read_again_gets_the_new_date(desk, monkeypatch):
    import nodes.agent

    monkeypatch.setattr(nodes.agent, "observed_now", lambda: "2026-01-02T00:00:00+00:00")
    conv = Conversation("redated", desk=desk)
    conv.send("where is my refund?")
    monkeypatch.setattr(nodes.agent, "observed_now", lambda: "2026-01-05T00:00:00+00:00")
    conv.send("any news on it?")  # refunds re-reads the status: the status fact is dated now
    facts = {f.key: f for f in conv.state["handoff"].known_facts}
    assert facts["refund_status"].observed_at == "2026-01-02T00:00:00+00:00"  # the packet the turn started with
    from nodes.facts import collect_facts

    dated = {f.key: f.observed_at for f in collect_facts(list(conv.state["messages"])) if f.source == "system_verified"}
    assert dated["refund_status"] == "2026-01-05T00:00:00+00:00"


def test_a_guessed_card_loss_freezes_nothing_and_asks(desk, store):
    """"what's my card limit?" may be routed to lost_or_stolen_card (0.51): it freezes no card. A freeze needs the
    customer's own words (``playbook.reports_card_loss``); the router's guess gets a question."""
    from nodes.embedded.playbook import LOSS_QUESTION, reports_card_loss

    before = {c.id: c.status for c in store.list_cards("c_ada")}
    r = Conversation("limit", desk=desk).send("what's my card limit?")
    assert {c.id: c.status for c in store.list_cards("c_ada")} == before
    assert "frozen your" not in r.text and "couldn't freeze" not in r.text
    if r.agent == "cards":  # the limit asked about, from the policy knowledge (no loss question)
        assert "card payments £5,000" in r.text and LOSS_QUESTION not in r.text
    assert reports_card_loss("i lost my card") and reports_card_loss("someone stole my wallet")
    assert not reports_card_loss("what's my card limit?")


def test_yes_with_a_stolen_card_after_anything_else_goes_to_cards(desk, store):
    """"yes, my card was stolen" after "anything else?" is no yes/no reply to account: a loss in the customer's own
    words is a topic of its own: it re-triages to cards (safety first)."""
    conv = Conversation("yes-stolen", desk=desk)
    conv.send("what's my balance?")
    conv.send("thanks")
    r = conv.send("yes, my card was stolen")
    assert r.agent == "cards", (r.agent, r.text)


# ---------------------------------------------------------------- re-asks and follow-ups get the detail
def test_a_re_asked_status_gets_the_facts_again_never_nothing_new(desk):
    conv = Conversation("re-ask", desk=desk)
    first, second, third = (conv.send("where is my refund rf_5001?") for _ in range(3))
    assert second.text.startswith("I've checked again and nothing has changed. Refund rf_5001") and \
        len(second.text) < len(first.text)  # concise: the status line, not the whole answer again
    assert "nothing new" not in second.text + third.text and "rf_5001" in third.text
    assert first.text != second.text != third.text


def test_which_one_was_the_duplicate_names_it(desk):
    conv = Conversation("which-dup", desk=desk)
    conv.send("I was charged twice for my coffee")
    which = conv.send("and which one was the duplicate?")
    assert which.agent == "billing" and which.text.startswith("The duplicate is tx_1008") and "nothing new" not in which.text
    assert conv.send("yes go ahead").agent == "refunds"


def test_why_pending_and_how_to_cancel_a_pending_transfer(desk):
    conv = Conversation("tr-pending", desk=desk)
    conv.send("I sent money to Mary, has it arrived?")
    conv.send("tr_3002")
    why, cancel = conv.send("why is it still pending?"), conv.send("can I cancel it?")
    assert "waiting for the receiving bank or for our security checks" in why.text and "nothing new" not in why.text
    assert "cancel it yourself in the app under Payments" in cancel.text and cancel.agent == "transfers"


def test_a_named_transfer_goes_to_transfers_while_refunds_holds_the_thread(desk):
    conv = Conversation("named-tr", desk=desk)
    assert conv.send("Refund tx_1008 please").agent == "refunds"
    reply = conv.send("I'd like to cancel tr_3002")
    assert reply.agent == "transfers" and "tr_3002" in reply.text and "cancel" in reply.text


def test_small_talk_on_a_held_thread_gets_a_fitting_reply(desk):
    conv = Conversation("bot", desk=desk)
    conv.send("I lost my card")
    bot = conv.send("Are you a bot?")
    assert bot.agent == "cards" and "automated assistant" in bot.text and "Your cards" not in bot.text


def test_a_merchant_named_in_a_duplicate_question_is_the_one_checked(desk):
    tesco = Conversation("tesco", desk=desk).send("I think I was charged twice at Tesco")
    assert tesco.agent == "billing" and "Tesco" in tesco.text and "none of them was charged twice" in tesco.text
    assert "Blue Bottle" not in tesco.text
    coffee = Conversation("coffee", desk=desk).send("I was charged twice at Blue Bottle Coffee")
    assert "tx_1008 is the duplicate" in coffee.text


def test_and_for_atm_withdrawals_after_a_fee_answer_gives_that_fee(desk):
    conv = Conversation("atm-fee", desk=desk)
    conv.send("what are the fees for international transfers?")
    atm = conv.send("and for ATM withdrawals?")  # policy keeps its question domain: the ATM fee abroad
    assert atm.agent == "policy" and "each ATM withdrawal costs £1.50" in atm.text and "transfer" not in atm.text
    conv = Conversation("s4", desk=desk)
    conv.send("Refund £2,000 for tx_1006")
    fee = conv.send("what is the fee for a top-up?")
    assert fee.agent == "billing" and "0.5%" in fee.text and "can't be refunded" not in fee.text


def test_unfreeze_it_after_a_freeze_unfreezes_that_card(desk, store):
    conv = Conversation("unfreeze-it", desk=desk)
    assert "frozen your physical card ending 4242" in conv.send("I lost my card").text
    again = conv.send("I found it again, please unfreeze it")
    assert again.agent == "cards" and "unfrozen your physical card ending 4242" in again.text
    assert {c.last4: c.status for c in store.list_cards("c_ada")}["4242"] == "active"


def test_ok_please_refund_it_after_a_supervisor_offer_refunds_the_duplicate(desk, store):
    conv = Conversation("sup-refund-it", desk=desk)
    first = conv.send("Why was I charged twice, and when will my refund arrive?")
    assert first.agent == "supervisor" and "refund the duplicate, tx_1008?" in first.text
    it = conv.send("ok, please refund it")
    assert it.agent == "refunds" and "tx_1008" in it.text and "Which transaction" not in it.text
    assert _refunds(store, "tx_1008") == ["executed"]


def test_clinc150_conversational_labels_read_as_our_social_topics():
    """The shipped router is fitted on CLINC150's conversational categories (``conversational:<category>``): thanks,
    goodbye, greetings and questions about the assistant are social; yes/no and device settings are not."""
    from types import SimpleNamespace

    from nodes.embedded.desk_knowledge import social_topic

    def route(intent: str, confidence: float = 0.9) -> SimpleNamespace:
        return SimpleNamespace(agent="other", intent=intent, confidence=confidence)

    assert social_topic(route("conversational:thank_you")) == "thanks"
    assert social_topic(route("conversational:goodbye")) == "goodbye"
    assert social_topic(route("conversational:greeting")) == "greeting"
    assert social_topic(route("conversational:are_you_a_bot")) == "conversational"
    assert social_topic(route("conversational:yes")) is None
    assert social_topic(route("conversational:change_volume")) is None
    # a thanks that also says goodbye is answered as a goodbye ("thanks, bye" got "anything else?")
    assert social_topic(route("conversational:thank_you"), "thanks, bye") == "goodbye"
    assert social_topic(route("desk_other:thanks"), "thank you, that's all") == "goodbye"
    assert social_topic(route("conversational:thank_you"), "thanks a lot") == "thanks"
    assert social_topic(route("conversational:thank_you", 0.3)) is None  # unsure: not social
    assert social_topic(route("thanks")) == "thanks" and social_topic(route("desk_other:goodbye")) == "goodbye"
    assert social_topic(SimpleNamespace(agent="cards", intent="conversational:thank_you", confidence=0.9)) is None
    for text, topic in (("thanks", "thanks"), ("goodbye", "goodbye"), ("hello", "greeting"),
                        ("are you a bot?", "conversational")):
        assert social_topic(default_router().route(text)) == topic, text
