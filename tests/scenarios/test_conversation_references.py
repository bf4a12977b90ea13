"""Follow-ups answered by the right agent with a relevant answer: each turn names
the answering agent and what the answer must and must not say.

Each row: an id, then per turn ``(customer message, answering agent, must contain, must not contain)``; the agent may
be "a|b" where either is right for a person and the shipped router decides. The conversations run with the offline
model and the shipped default router (the ``desk`` fixture of ``tests/conftest.py``), one fresh business store
per test.
"""

from __future__ import annotations

import pytest

from nodes.embedded.desk_knowledge import load_knowledge
from nodes.embedded.playbook import (
    handbook_follow_up,
    is_plain_no,
    is_plain_yes,
    knows_subject,
    leaning_text,
    names_desk_subject,
)
from nodes.embedded.replies import lists_records_of, opener_subject, reports_it_failed
from nodes.testing.entry_rule import decide as decide_entry_rule
from policies import entry
from tests.conftest import play_content_turns

Turn = tuple[str, str, tuple[str, ...], tuple[str, ...]]

#: What a dump of the last five transactions / of the transfers starts with.
TX_LIST = ("Your latest transactions",)
TR_LIST = ("Your transfers:",)
TRANSFER_TIMES = "how long does a transfer take?"
#: The start of the out_of_scope answer, and of the supported-countries answer.
OOS = "not something this desk can help with"
COUNTRIES = ("Supported countries",)

ROWS: list[tuple[str, list[Turn]]] = [
    # 1. a follow-up opener about a place after a handbook answer: that answer for the place, never the records
    ("transfer-times-countries", [
        (TRANSFER_TIMES, "transfers", ("SEPA",), ()),
        ("what about Switzerland?", "transfers", ("Switzerland", "SEPA", "1 business day"), TR_LIST + ("SWIFT",)),
        ("and Japan?", "transfers", ("Japan", "SWIFT", "1 to 5 business days"), TR_LIST + ("SEPA",))]),
    ("card-delivery-countries", [
        ("when will my card arrive?", "cards", ("3 to 5 business days",), ()),
        ("what about Germany?", "cards", ("Germany", "5 to 8 business days"), ("Our handbook", "Your cards:")),
        ("and the US?", "cards", ("the US", "7 to 12 business days"), COUNTRIES)]),
    ("international-fee-then-japan", [
        ("what's the fee for international transfers?", "billing|policy|transfers", ("£0.50",), ()),
        ("and Japan?", "billing|policy|transfers", ("£0.50",), TX_LIST + (OOS,))]),
    ("atm-fee-abroad-then-uk", [
        ("what's the fee for using an ATM abroad?", "billing", ("£1.50",), ()),
        ("and in the UK?", "billing", ("£1.50", "the UK"), TX_LIST + ("tx_1009",))]),
    ("fees-then-why", [
        ("why was I charged a fee?", "billing", ("tx_1003",), ()),
        ("why?", "billing", ("tx_1003", "ATM withdrawal fee"), TX_LIST + ("tx_1009",))]),
    ("list-then-why", [
        ("show my recent transactions", "billing", TX_LIST, ()),
        ("why?", "billing", ("which part",), TX_LIST)]),
    ("tesco-one-not-listed", [
        ("show my recent transactions", "billing", TX_LIST, ("Tesco",)),
        ("what about the Tesco one?", "billing", ("tx_1001", "Tesco", "£23.80"), TX_LIST + ("tx_1009",))]),
    ("unknown-merchant-one", [
        ("show my recent transactions", "billing", TX_LIST, ()),
        ("what about the Lidl one?", "billing", ("can't find a payment from Lidl",), TX_LIST + ("tx_1009",))]),
    # 2. a request to list one kind of the customer's own records goes to their owner, whatever the router reads
    ("what-transfers-new-thread", [
        ("what transfers have I made?", "transfers", TR_LIST + ("tr_3002", "tr_3001"), ("Fees on your account",)),
        ("cancel it", "transfers", ("still pending can be cancelled",), ("checked again", "tx_1003"))]),
    ("which-transfers-after-transfers", [
        ("has my transfer arrived?", "transfers", ("tr_3002",), ()),
        ("which transfers do I have?", "transfers", TR_LIST, ("Fees on your account",))]),
    ("which-cards-after-cards", [
        ("is my card blocked?", "cards", ("1881",), ()),
        ("which cards do I have?", "cards", ("Your cards:", "4242", "8899"), ("top up with",))]),
    ("which-cards-new-thread", [
        ("which cards do I have?", "cards", ("Your cards:", "4242"), ("top up with",))]),
    # 3. an opener about something the desk does not serve gets the out_of_scope answer; one about the desk's own
    # subjects stays with the holder
    ("loan-mortgage-after-countries", [
        ("can I open an account from the US?", "policy", ("Switzerland",), ()),
        ("what about Switzerland?", "policy", ("Switzerland",), (OOS,)),
        ("what about a personal loan?", "out_of_scope", (OOS,), COUNTRIES),
        ("what about a mortgage?", "out_of_scope", ("outside what we can help with",), COUNTRIES)]),
    ("countries-mortgage-then-switzerland", [  # an out-of-scope answer in between
        ("which countries do you support?", "policy", COUNTRIES, ()),
        ("what about a mortgage?", "out_of_scope", (OOS,), COUNTRIES),
        ("what about Switzerland?", "policy", ("Switzerland", "Supported countries"), (OOS, "outside what we can"))]),
    ("crypto-after-card-delivery", [
        ("when will my card arrive?", "cards", ("business days",), ()),
        ("what about crypto?", "out_of_scope", (OOS,), ("recipient", "Our handbook"))]),
    ("joke-mid-thread", [
        ("what's my account email?", "account", ("a***@example.com",), ()),
        ("tell me a joke", "out_of_scope", (OOS,), ("checked again", "Your account"))]),
    ("paris-after-weather", [
        ("what's my account email?", "account", ("a***@example.com",), ()),
        ("what's the weather in Paris?", "out_of_scope", (OOS,), ()),
        ("what about Paris?", "out_of_scope", ("outside what we can help with",), ("Your account", "checked again"))]),
    ("top-ups-opener-stays", [
        ("what's the fee for a top-up?", "billing|policy", ("top",), ()),
        ("and for ATM withdrawals?", "billing|policy", ("£1.50",), (OOS,))]),
    # 4. picks from a list: by position (also further back than the last answer) and by a word of the item's line
    ("list-picks-by-position", [
        ("show my recent transactions", "billing", TX_LIST, ()),
        ("the third one", "billing", ("tx_1008 is Blue Bottle Coffee",), ("automated assistant",) + TX_LIST),
        ("the fourth one", "billing", ("tx_1007 is Blue Bottle Coffee",), (OOS,) + TX_LIST),
        ("the fifth one", "billing", ("tx_1006 is Top-up",), (OOS,) + TX_LIST)]),
    ("card-list-picks-by-position", [  # a pick by position after the card list
        ("which cards do I have?", "cards", ("Your cards:", "8899"), ()),
        ("the third one", "cards", ("virtual card ending 8899 is active",), ("Your cards:", "1881", "4242")),
        ("the first one", "cards", ("card ending 1881 is blocked",), ("Your cards:", "8899")),
        ("the fifth one", "cards", ("There is no fifth one", "the list has 3", "Which one"), ("Your cards:", OOS))]),
    ("transfer-list-no-third-one", [  # a position past the list's end
        ("what transfers have I made?", "transfers", TR_LIST, ()),
        ("the third one", "transfers", ("There is no third one", "the list has 2", "Which one"),
         TR_LIST + ("checked again",)),
        ("the second one", "transfers", ("Transfer tr_3001",), TR_LIST + ("tr_3002",))]),
    ("transfer-pending-one", [
        ("has my transfer arrived?", "transfers", ("tr_3002", "tr_3001"), ()),
        ("the pending one", "transfers", ("Transfer tr_3002", "pending"), TR_LIST + ("tr_3001",))]),
    # 5. an acknowledgement followed by a question is the question
    ("ok-whats-my-balance", [
        ("ok what's my balance", "account", ("Your balance",), ("Okay!",))]),
    # 6. "it" after a limit or a top-up, a currency after the currency list, questions about the desk itself
    ("raise-contactless-limit", [
        ("what's the contactless limit?", "cards", ("£100",), ()),
        ("can I raise it?", "cards|policy", ("can't be raised",), ("Your cards:",))]),
    ("atm-fee-then-raise-it", [  # "it" is the fee: never the transactions
        ("what's the fee for using an ATM?", "billing", ("£1.50",), ()),
        ("can I raise it?", "billing|policy", ("can't be raised",), TX_LIST + ("tx_1009",))]),
    ("declined-then-retry-it", [  # never the desk's self-description
        ("why was my payment declined?", "billing", ("declined",), ()),
        ("can you retry it?", "billing", ("can't retry a payment", "try it again"), ("automated assistant",))]),
    ("address-then-new-address", [  # a new address, never out of scope
        ("what's my address?", "account", ("Profile > Personal details",), ()),
        ("it's 12 Baker Street, London", "account", ("can't change your address in this chat", "Profile > Personal"),
         (OOS,))]),
    ("top-up-how-then-failed", [
        ("I need to top up my account", "transfers", ("Add money",), ("fails when",)),
        ("it failed", "transfers", ("A top-up fails when",), ("nothing new",))]),
    ("send-abroad-then-failed", [
        ("I want to send money abroad", "transfers", ("To send money",), ()),
        ("it didn't work", "transfers", ("When a transfer fails",), ("top-up", "nothing new"))]),
    ("currencies-then-francs", [
        ("which currencies can I hold?", "policy", ("CHF",), ()),
        ("and Swiss francs?", "policy", ("Yes, you can hold and exchange CHF",), ("Exchange rates:",)),
        ("and Thai baht?", "policy", ("No, THB isn't",), (OOS,))]),
    ("what-can-you-do", [
        ("what can you do?", "clarify", ("automated assistant", "refunds, transfers"), ("I'm not sure I understood",)),
        ("what's your name?", "clarify", ("automated assistant",), ("describe it in one sentence",))]),
    ("what-can-you-do-mid-thread", [
        ("I lost my card", "cards", ("4242",), ()),
        ("what can you do?", "cards", ("I can help with your cards",), ("Your cards:",))]),
    ("verify-then-it-keeps-failing", [
        ("how do I verify my identity?", "account", ("Profile > Verify",), ()),
        ("it keeps failing", "account", ("If verification keeps failing",), TR_LIST)]),
    ("top-up-fee-then-by-card", [
        ("what's the fee for a top-up?", "billing|policy", ("0.5%",), ()),
        ("and for top-ups by card?", "billing|policy", ("0.5%",), ("nothing new",))]),
    ("found-card-then-how", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), ()),
        ("I found it", "cards", ("Shall I unfreeze your card ending 4242?",), ()),
        ("how do I do it?", "cards", ("in the app under Cards", "say yes"), ("which part",))]),
    # "ok do it", "go ahead", "please do" to the supervisor's offer to refund the duplicate are a yes, like "yes"
    ("supervisor-offer-ok-do-it", [
        ("Why was I charged twice, and when will my refund arrive?", "supervisor", ("refund the duplicate, tx_1008?",),
         ()),
        ("ok do it", "refunds", ("tx_1008", "paid back"), ("I'm not sure I understood",))]),
    ("supervisor-offer-go-ahead", [
        ("Why was I charged twice, and when will my refund arrive?", "supervisor", ("refund the duplicate, tx_1008?",),
         ()),
        ("go ahead", "refunds", ("tx_1008", "paid back"), ("I'm not sure I understood",))]),
    ("supervisor-offer-no", [  # a no to the supervisor's offer, never clarify
        ("Why was I charged twice, and when will my refund arrive?", "supervisor", ("refund the duplicate, tx_1008?",),
         ()),
        ("no thanks", "triage", ("left tx_1008 as it is",), ("I'm not sure I understood", "paid back"))]),
    ("balance-after-a-paid-refund", [  # a balance question after the refund answer
        ("Why was I charged twice, and when will my refund arrive?", "supervisor", ("refund the duplicate, tx_1008?",),
         ()),
        ("yes", "refunds", ("tx_1008", "paid back"), ()),
        ("what is my balance?", "account", ("balance",), ("can't be refunded", "tx_1008"))]),
    ("supervisor-offer-please-do", [
        ("Why was I charged twice, and when will my refund arrive?", "supervisor", ("refund the duplicate, tx_1008?",),
         ()),
        ("please do", "refunds", ("tx_1008", "paid back"), ("I'm not sure I understood",))]),
    ("billing-offer-ok-do-it", [  # billing's own offer: it explained tx_1008 instead
        ("I was charged twice at Blue Bottle", "billing", ("refund the duplicate, tx_1008?",), ()),
        ("ok do it", "refunds", ("tx_1008", "paid back"), ("status posted",))]),
    ("transfer-times-then-how", [
        (TRANSFER_TIMES, "transfers", ("SEPA",), ()),
        ("how?", "transfers", ("which part",), TR_LIST)]),
]


@pytest.mark.parametrize("case,turns", ROWS, ids=[c for c, _ in ROWS])
def test_follow_up_answered_by_the_right_agent(desk, case, turns):
    play_content_turns(desk, case, turns)


def test_opener_subject_and_regions():
    assert opener_subject("what about Switzerland?") == "Switzerland"
    assert opener_subject("and in the UK?") == "the UK"
    assert opener_subject("what about a personal loan?") == "a personal loan"
    assert opener_subject("how long does a transfer take?") is None
    k = load_knowledge()
    assert (k.region_of("Switzerland"), k.region_of("the UK"), k.region_of("Japan"), k.region_of("crypto")) == \
        ("SEPA", "UK", "international", None)


def test_handbook_follow_up_needs_a_handbook_answer_and_a_plain_subject():
    times = load_knowledge().intents["transfer_timing"].answer
    assert handbook_follow_up("transfers", "and Japan?", times) == \
        "For Japan: international SWIFT transfers in 1 to 5 business days."
    assert handbook_follow_up("transfers", "and Japan?", "Your transfers: tr_3002 to Mary …") is None  # no handbook
    assert handbook_follow_up("transfers", "and how long does it take?", times) is None  # a question of its own
    assert handbook_follow_up("transfers", "and tr_3001?", times) is None  # a record
    assert handbook_follow_up("policy", "and Japan?", times) is None  # policy looks its topics up itself


def test_lists_records_of_and_the_entry_rule():
    for text, owner in (("what transfers have I made?", "transfers"), ("which transfers do I have?", "transfers"),
                        ("which cards do I have?", "cards"), ("show me all my refunds", "refunds"),
                        ("what payments have I made?", "billing"), ("what are my transactions?", "billing")):
        assert lists_records_of(text) == owner, text
    for text in ("which cards can I top up with?", "what transfer fees do you charge?", "show my balance",
                 "which transfers do I have to approve for my business account before the end of the month?"):
        assert lists_records_of(text) is None, text
    c = decide_entry_rule
    base = {"routed_agent": "billing", "route_confidence": 0.66, "identity_changed": False, "lists_records_of": "transfers"}
    assert c("transfers", **base).target == "transfers"
    assert c("cards", **base).target == "triage" and c(None, **base).target == "triage"
    assert c("transfers", task_status="fallback", **base).target == "fallback"


def test_subjects_the_desk_knows_and_chitchat_scope():
    for subject in ("Switzerland", "Japan", "the UK", "ATM withdrawals", "top-ups", "euros", "weekdays",
                    "the other one", "the Amazon one", "tr_3001", "a credit card", "Apple Pay"):
        assert knows_subject(subject), subject
    for subject in ("crypto", "a mortgage", "bitcoin", "insurance"):
        assert not knows_subject(subject), subject
    assert names_desk_subject("Paris") and not names_desk_subject("Paris", places=False)
    assert not names_desk_subject("a personal loan")  # the router decides ("personal" is a handbook word)
    assert entry.scope_of("other", "conversational:tell_joke") == "out_of_scope"
    assert entry.scope_of("other", "conversational:greeting") == "conversational"
    oos = {"routed_agent": "other", "route_confidence": 0.97, "identity_changed": False, "scope": "out_of_scope",
               "reply": "fragment", "follow_up_opener": True}
    assert decide_entry_rule("policy", **oos).target == "policy"  # an opener alone stays with the holder ...
    assert decide_entry_rule("policy", opener_out_of_scope=True, **oos).target == "out_of_scope"  # ... unless


def test_an_acknowledgement_then_a_question_is_no_plain_yes_or_no():
    assert is_plain_yes("ok") and is_plain_yes("yes please") and is_plain_yes("sure, go ahead")
    for text in ("ok do it", "yes do it", "please go ahead", "ok, do it", "go for it", "sure, please do"):
        assert is_plain_yes(text), text
    assert not is_plain_yes("ok do you charge a fee?") and not is_plain_yes("no, do it later")
    assert not is_plain_yes("ok what's my balance") and not is_plain_yes("yes how long does it take")
    assert is_plain_no("no thanks") and not is_plain_no("no what is that")


def test_an_address_is_recognised():
    from nodes.embedded.replies import gives_address

    for text in ("it's 12 Baker Street, London", "221b Baker St", "my new address is NW1 6XE"):
        assert gives_address(text), text
    for text in ("what's my address?", "I paid 12 pounds at the shop", "the third one"):
        assert not gives_address(text), text


def test_it_failed_leans_on_the_previous_answer():
    assert reports_it_failed("it keeps failing") and reports_it_failed("that didn't work")
    assert not reports_it_failed("my card failed") and not reports_it_failed("it failed to load the page yesterday")
    assert leaning_text("it keeps failing", "To verify your identity, open Profile > Verify") == \
        "my identity verification failed"
    assert leaning_text("it failed", "Top up by card in the app under Add money") == "my top-up failed"
    assert leaning_text("it was declined", "To send money, open Payments") == "my transfer was declined"
    assert leaning_text("it failed", "Your cards: physical card ending 4242 is active.") == "it failed"  # no subject
    assert leaning_text("my card failed", "Top up by card") == "my card failed"  # names its own subject


EXPLAIN_ROWS = [
    ("policy-what-does-that-mean", [
        ("what is the exchange rate at weekends?", "policy", ("1%",), ()),
        ("what does that mean?", "policy", ("which part",), ("not something this desk can help with",))]),
    ("account-dont-understand", [
        ("how do I verify my identity?", "account", ("Profile > Verify",), ()),
        ("I don't understand", "account", ("which part",), ("Ada Lovelace",))]),
]


@pytest.mark.parametrize("case,turns", EXPLAIN_ROWS, ids=[c for c, _ in EXPLAIN_ROWS])
def test_a_request_to_explain_the_last_answer_stays_with_its_agent(desk, case, turns):
    """'what does that mean?' mid-thread was answered as out of scope, 'I don't understand' with the profile summary."""
    play_content_turns(desk, case, turns)


def test_requests_to_explain_are_bare_follow_ups():
    from nodes.embedded.replies import is_bare_follow_up

    for text in ("what does that mean?", "I don't understand", "sorry, I don't get it", "can you explain that?",
                 "explain please", "I'm confused", "what do you mean by that?"):
        assert is_bare_follow_up(text, strict=True), text
    for text in ("what does APR mean?", "I don't understand this fee on my card", "can you explain the fee?"):
        assert not is_bare_follow_up(text, strict=True), text
