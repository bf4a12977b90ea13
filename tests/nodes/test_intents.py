"""The per-intent table: every request kind the desk serves gets its own behaviour.

One project-written request per intent: the 77 BANKING77 intents (``../shared/data/banking77/agent_map.json``) and
the 20 desk intents of CLINC150 (``../shared/data/clinc150/desk_map.json``), 97 rows. Each row runs the owning
agent's offline behaviour (``nodes.embedded.playbook``: plan, run the business tools on the demo store, compose the answer)
and asserts the intent recognised, the behaviour kind (the intent's tool was called, the card frozen, an operator
request opened, or no tool for a handbook answer), that the answer carries that intent's own text and no other
intent's, and that no internal tool name, card id or error class reaches the customer. The sentences are ours.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from checkpoints.business import BusinessStore
from nodes.embedded.desk_knowledge import load_knowledge
from nodes.embedded.playbook import CLOSE_ACCOUNT_ASKED, compose_answer, plan_tool_call, resolve_intent
from nodes.facts import extract_facts, facts_from_tool_result
from nodes.testing.state import packet
from nodes.tools import POLICY_KB, TOOLS, ToolContext, run_tool

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
REF = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)
ADA = ToolContext(customer_id="c_ada", tenant_id="t_demo", thread_id="th-intents", task_id="task-intents")
KNOWLEDGE = load_knowledge()

#: (dataset label, our request). BANKING77 first (77 rows), then the CLINC150 desk intents (20 rows).
ROWS: list[tuple[str, str]] = [
    ('card_arrival', "I ordered a card two weeks ago and it still hasn't arrived"),
    ('card_linking', 'Can I link the debit card from my other bank to this app?'),
    ('card_delivery_estimate', 'How long will it take for a new card to be delivered?'),
    ('card_not_working', "My card doesn't work in any shop today"),
    ('lost_or_stolen_card', 'I think I lost my card on the bus this morning'),
    ('pin_blocked', 'I typed the wrong PIN too many times and now it is blocked'),
    ('contactless_not_working', 'Contactless payments keep failing at the supermarket'),
    ('getting_virtual_card', "I'd like to create a virtual card for shopping online"),
    ('card_acceptance', 'Will my card be accepted at shops in Japan?'),
    ('get_physical_card', 'Can I get a plastic card as well as the one in the app?'),
    ('disposable_card_limits', 'How many disposable cards can I make in one day?'),
    ('compromised_card', 'I think my card details were leaked in a data breach'),
    ('change_pin', 'I would like to change the PIN on my card'),
    ('card_swallowed', 'The cash machine at the station swallowed my card'),
    ('getting_spare_card', 'Can I order a second card for my husband?'),
    ('order_physical_card', 'I need to order a replacement card'),
    ('virtual_card_not_working', 'My virtual card keeps getting rejected on a website'),
    ('get_disposable_virtual_card', 'How do I create a one-time card for a single purchase?'),
    ('activate_my_card', 'My new card came in the post, how do I activate it?'),
    ('card_about_to_expire', 'My card is about to expire next month, what happens?'),
    ('apple_pay_or_google_pay', 'Can I add my card to Apple Pay on my iPhone?'),
    ('extra_charge_on_statement', "There is an extra charge on my statement I can't explain"),
    ('card_payment_fee_charged', 'Why was I charged a fee when I paid by card at a restaurant?'),
    ('card_payment_wrong_exchange_rate', 'The exchange rate on my card payment in Spain looks wrong'),
    ('card_payment_not_recognised', "I don't recognise a payment on my account from yesterday"),
    ('direct_debit_payment_not_recognised', 'A direct debit went out that I never set up'),
    ('transaction_charged_twice', 'The coffee shop took the same payment from me twice'),
    ('pending_card_payment', 'My restaurant payment has been pending for three days'),
    ('declined_card_payment', 'Why was my payment at the petrol station declined?'),
    ('reverted_card_payment?', 'A purchase I made was reverted, what does that mean?'),
    ('cash_withdrawal_not_recognised', "There is a cash withdrawal on my account that I didn't make"),
    ('cash_withdrawal_charge', 'Why did I pay a fee for taking cash out of an ATM?'),
    ('wrong_exchange_rate_for_cash_withdrawal', 'I withdrew cash in Prague and the rate was terrible'),
    ('exchange_charge', 'Is there a fee to convert pounds into euros?'),
    ('transfer_fee_charged', 'I was charged for sending a transfer, why?'),
    ('top_up_by_card_charge', 'Does topping up with my credit card cost anything? I saw a fee'),
    ('top_up_by_bank_transfer_charge', 'I was charged a fee when I did a top up by bank transfer'),
    ('wrong_amount_of_cash_received', 'The ATM gave me less money than it took from my account'),
    ('pending_cash_withdrawal', 'My cash withdrawal from last night still shows as pending'),
    ('declined_cash_withdrawal', 'The ATM declined my withdrawal even though I have money'),
    ('request_refund', 'I returned the shoes, please refund tx_1005'),
    ('Refund_not_showing_up', "My refund still isn't showing in my account"),
    ('cancel_transfer', 'Please cancel the transfer I sent by mistake'),
    ('transfer_not_received_by_recipient', "My landlord says he hasn't received the money I sent"),
    ('declined_transfer', 'My transfer to my sister was declined'),
    ('pending_transfer', 'Why is my transfer still pending after a day?'),
    ('transfer_timing', 'How long does a transfer to Germany take?'),
    ('beneficiary_not_allowed', "The app won't let me add a new beneficiary"),
    ('receiving_money', 'How can my friend send money to me from abroad?'),
    ('failed_transfer', 'My transfer failed, what happened to the money?'),
    ('transfer_into_account', 'How do I move money from my other bank into my account here?'),
    ('balance_not_updated_after_bank_transfer', "I sent money from my old bank but my balance hasn't updated after the transfer"),
    ('automatic_top_up', 'Can I set up an automatic top up when my money runs low?'),
    ('pending_top_up', 'My top up is still pending, is that normal?'),
    ('top_up_limits', 'What is the maximum I can top up in a day?'),
    ('top_up_reverted', 'My top up was reverted, where is the money?'),
    ('verify_top_up', 'The app asks me to verify my top up with a code, how?'),
    ('top_up_by_cash_or_cheque', 'Can I deposit a cheque into my account?'),
    ('topping_up_by_card', 'How do I top up with my debit card?'),
    ('top_up_failed', 'My top up failed again this morning'),
    ('balance_not_updated_after_cheque_or_cash_deposit', 'I deposited cash at my old bank but my balance shows nothing'),
    ('edit_personal_details', 'I moved house and need to update my address'),
    ('why_verify_identity', 'Why do you need to verify my identity at all?'),
    ('unable_to_verify_identity', "I can't verify my identity, the app keeps rejecting my passport"),
    ('verify_my_identity', 'How do I get my identity verified?'),
    ('verify_source_of_funds', 'You asked for my source of funds, what should I send?'),
    ('passcode_forgotten', "I forgot my passcode and can't log in"),
    ('terminate_account', "I'd like to close my account for good"),
    ('lost_or_stolen_phone', 'Someone stole my phone with the banking app on it'),
    ('exchange_rate', 'Which exchange rate do you apply?'),
    ('fiat_currency_support', 'Which currencies can I hold in my account?'),
    ('supported_cards_and_currencies', 'Which cards can I use to top up?'),
    ('country_support', 'Can I open an account if I live in Portugal? Which countries do you support?'),
    ('age_limit', 'How old must I be to open an account? Is there an age limit?'),
    ('exchange_via_app', 'How do I exchange money in the app?'),
    ('visa_or_mastercard', 'Is your card Visa or Mastercard?'),
    ('atm_support', 'Which ATMs can I use?'),
    ('pin_change', 'please help me set a new pin for my card'),
    ('report_fraud', 'someone used my card for purchases I never made'),
    ('replacement_card_duration', 'when will my replacement card arrive'),
    ('expiration_date', 'what is the expiry date on my card'),
    ('damaged_card', 'my card is cracked and the chip is damaged'),
    ('report_lost_card', 'my card is missing, I must have lost it'),
    ('card_declined', 'why does my card keep getting declined'),
    ('new_card', 'I need a new card please'),
    ('travel_notification', "I'm travelling to Canada next week, do I need to let you know about my card?"),
    ('transactions', 'show me my recent transactions'),
    ('spending_history', 'how much did I spend last month'),
    ('transfer', 'I want to send 50 pounds to my brother'),
    ('pay_bill', 'how do I pay my electricity bill'),
    ('freeze_account', 'please freeze my account for now'),
    ('account_blocked', 'why has my account been blocked'),
    ('balance', "What's my balance?"),
    ('routing', 'what is my sort code and account number'),
    ('direct_deposit', 'how do I set up direct deposit for my salary'),
    ('international_fees', 'are there fees for using my card abroad'),
    ('exchange_rate', "what's the rate between pounds and dollars today"),
]
BANKING77_ROWS, CLINC_ROWS = ROWS[:77], ROWS[77:]
LEAKS = ("card_ada", "call_", "Error", "Traceback", "Exception", "idempotency", "tx_None")


def _owners() -> tuple[dict[str, str], dict[str, str]]:
    b77, clinc = DATA / "banking77" / "agent_map.json", DATA / "clinc150" / "desk_map.json"
    if not (b77.exists() and clinc.exists()):
        pytest.fail(f"agent maps missing under {DATA}; tests that read ../shared/data must not be skipped")
    by_b77 = {i: a for a, names in json.loads(b77.read_text())["agents"].items() for i in names}
    by_clinc = {i: a for a, names in json.loads(clinc.read_text())["agents"].items() for i in names}
    return by_b77, by_clinc


@pytest.fixture(scope="module")
def owners() -> dict[str, str]:
    b77, clinc = _owners()
    return {**b77, **clinc}


@pytest.mark.data
def test_the_table_covers_every_intent_once() -> None:
    b77, clinc = _owners()
    assert sorted(label for label, _ in BANKING77_ROWS) == sorted(b77)
    assert sorted(label for label, _ in CLINC_ROWS) == sorted(clinc)
    assert len(ROWS) == 97 and len({text for _, text in ROWS}) == 97
    for label in [*b77, *clinc]:
        intent = KNOWLEDGE.by_label(label)
        assert intent is not None, f"{label} has no entry in nodes/data/desk_knowledge.json"
        assert intent.agent == {**b77, **clinc}[label], f"{label}: knowledge says {intent.agent}"


def test_knowledge_file_is_consistent() -> None:
    for intent in KNOWLEDGE.intents.values():
        assert intent.patterns, intent.key
        if intent.tool is not None:
            assert TOOLS[intent.tool].agent == intent.agent, intent.key
            if intent.args:
                TOOLS[intent.tool].args_schema.model_validate(intent.args)
        else:
            assert intent.kind == "knowledge" and intent.answer, intent.key
        if intent.tool == "lookup_policy":
            assert intent.args["topic"] in POLICY_KB, intent.key


def _run(agent: str, text: str, store: BusinessStore) -> tuple[list[str], str]:
    facts = dict(extract_facts(text))
    done: list[str] = []
    results = []
    while (plan := plan_tool_call(agent, text, facts, done)) is not None:
        result = run_tool(plan.name, plan.args, store, ADA, agent=agent)
        done.append(plan.name)
        results.append((plan.name, result))
        facts.update(facts_from_tool_result(plan.name, result))
    return done, compose_answer(agent, text, results)


@pytest.mark.data
@pytest.mark.parametrize(("label", "text"), ROWS, ids=[f"{i:02d}-{label}" for i, (label, _) in enumerate(ROWS)])
def test_each_intent_has_its_own_behaviour(label: str, text: str, owners: dict[str, str], tmp_path: Path) -> None:
    agent = owners[label]
    expected = KNOWLEDGE.by_label(label)
    assert expected is not None
    intent = resolve_intent(agent, text)
    assert intent is not None and intent.key == expected.key, f"{text!r} read as {intent and intent.key}"
    assert KNOWLEDGE.owner_by_patterns(agent, text) is None, "another agent's handbook entry claims this request"

    store = BusinessStore(tmp_path / "business.db", now=lambda: REF)
    store.seed_demo()
    tools, answer = _run(agent, text, store)

    if expected.kind == "knowledge":
        assert tools == [], f"a handbook answer needs no tool, called {tools}"
    elif expected.kind == "freeze":
        assert tools[:2] == ["card_status", "freeze_card"]
        assert "frozen" in answer
    elif expected.kind == "operator" and expected.args.get("kind") == "close_account":
        assert tools == [] and CLOSE_ACCOUNT_ASKED in answer  # closing is asked first; a yes files it
    elif expected.kind == "operator":
        assert tools == ["request_operator_case"] and "reference sr_" in answer
    else:
        assert expected.tool in tools, f"expected {expected.tool}, called {tools}"
    if expected.answer and not (expected.kind == "operator" and expected.args.get("kind") == "close_account"):
        assert expected.answer in answer
    if expected.tool == "lookup_policy":
        assert POLICY_KB[expected.args["topic"]].text in answer
    for other in KNOWLEDGE.intents.values():
        if other.key != expected.key and other.answer:
            assert other.answer not in answer, f"the answer carries {other.key}'s text"
    for other_topic, entry in POLICY_KB.items():
        if expected.tool != "lookup_policy" or other_topic != expected.args["topic"]:
            assert entry.text not in answer or expected.tool == "explain_fees", f"the answer carries policy {other_topic}"
    assert not any(leak in answer for leak in LEAKS), answer
    assert not any(f" {name} " in f" {answer} " for name in TOOLS), answer


EXAMPLES = [  # the issue's examples, one-shot on a new thread, shipped router and offline model
    ("How do I activate my new card?", "cards", "activate_my_card"),
    ("My card hasn't arrived yet", "cards", "card_arrival"),
    ("Can I change my PIN?", "cards", "change_pin"),
    ("What's my balance?", "account", "balance"),
    ("I want to close my account", "account", "terminate_account"),
]


def test_the_issue_examples_get_their_own_answer(make_desk) -> None:
    from graph.conversation import Conversation
    from nodes.router import load_router

    desk = make_desk(router=load_router())
    answers = {}
    for i, (text, agent, key) in enumerate(EXAMPLES):
        conv = Conversation(f"ex-{i}", desk=desk)
        r = conv.send(text)
        assert r.agent == agent, (text, r.agent, r.text)
        if key == "terminate_account":  # asked first; the yes files the request
            assert CLOSE_ACCOUNT_ASKED in r.text and "reference sr_" not in r.text, r.text
            r = conv.send("yes")
            assert r.agent == agent, (text, r.agent, r.text)
        intent = KNOWLEDGE.intents[key]
        assert intent.answer in r.text or key == "balance", r.text
        answers[text] = r.text
    assert "Your balance" in answers["What's my balance?"]
    assert "reference sr_" in answers["I want to close my account"]
    assert len(set(answers.values())) == len(EXAMPLES)

    r = Conversation("ex-unfreeze", desk=desk).send("I found my card, please unfreeze card 4242")
    assert r.agent == "cards" and "4242 isn't frozen" in r.text and "Link a card" not in r.text
    bye = Conversation("ex-bye", desk=desk).send("bye")
    assert bye.agent == "clarify" and "Goodbye" in bye.text and "not sure I understood" not in bye.text


def test_safety_first_in_compound_requests(make_desk, store) -> None:
    from graph.conversation import Conversation
    from nodes.router import load_router

    desk = make_desk(router=load_router())
    r = Conversation("safety-1", desk=desk).send("I lost my card yesterday, and what is the fee for international transfers?")
    assert r.path_str.startswith("entry → triage → cards") and "supervisor" not in r.path_str, r.path_str
    assert store.get_card("c_ada", "card_ada_phys").status == "frozen"
    assert "frozen your card ending 4242" in r.text and "£0.50" in r.text
    assert "Not done yet" not in r.text and not any(leak in r.text for leak in LEAKS)

    r = Conversation("safety-2", desk=desk).send("Someone has used my card for things I never bought. Also where is my refund?")
    assert r.agent == "cards" and "frozen" in r.text
    assert "where is my refund" in r.text and "refunds team" in r.text
    assert not any(leak in r.text for leak in LEAKS)


def test_supervisor_never_shows_tool_or_card_ids() -> None:
    from graph.contracts.agent_as_tool import ProposedAction
    from nodes.supervisor import compose_answer_text
    from policies.merge import MergeOutcome

    text = compose_answer_text(MergeOutcome(status="complete", reason="", parts=()),
                               (ProposedAction(expert="cards", tool="freeze_card", args={"card_id": "card_ada_phys"}),
                                ProposedAction(expert="cards", tool="freeze_card", args={"card_id": "4242"})))
    assert "card_ada" not in text and "freeze_card" not in text and "freeze your card" in text
    assert "ending 4242" in text


def test_a_paid_refund_is_never_reported_as_requested(make_desk, store) -> None:
    from graph.conversation import Conversation
    from nodes.router import load_router

    conv = Conversation("paid", desk=make_desk(router=load_router()))
    first = conv.send("Please refund tx_1008, it was a duplicate coffee")  # small: approved and paid in the same turn
    assert "paid back" in first.text
    refund = next(r for r in store.list_refunds("c_ada") if r.transaction_id == "tx_1008")
    assert refund.status == "executed"
    later = conv.send("where is my refund?")
    assert later.agent == "refunds" and f"{refund.id} for £4.50" in later.text, later.text
    mine = later.text.split(refund.id, 1)[1].split(";")[0]
    assert "paid back" in mine and "requested" not in mine


def test_fallback_text_keeps_exceptions_and_internal_ids_out() -> None:
    from nodes.fallback import fallback_text

    text = fallback_text(packet(**{"reason": "the card_status service is unavailable (ConnectionError: pool exhausted)",
                          "known_facts": [{"key": "card_id", "value": "card_ada_phys", "source": "system_verified"},
                                          {"key": "card_last4", "value": "4242", "source": "user_said"}]}))
    assert "one of our services is unavailable" in text and "4242" in text
    assert not any(leak in text for leak in ("ConnectionError", "card_status", "card_ada", "pool exhausted"))


def test_fallback_text_says_the_topic_asked_in_words() -> None:
    """A policy topic reads as what the customer asked, with no reading time (never "question about: countries
    (as of …)")."""
    from nodes.fallback import PERSON_REASON, fallback_text

    text = fallback_text(packet(**{"reason": PERSON_REASON, "known_facts": [
        {"key": "policy_topic", "value": "supported_countries", "source": "system_verified",
         "observed_at": "2026-12-01T03:40:00+00:00"}]}))
    assert "you asked about supported countries." in text, text
    assert "question about" not in text and "as of" not in text
