"""Follow-ups stay with the agent that asked: a table of multi-turn conversations with the offline model
and the shipped default router, each asserting the answering agent of every turn, plus the entry rule's own cases.

Each row: an id, then ``(customer message, agent expected to answer)`` per turn. Kinds covered: identifiers, yes/no,
choices among listed items, short fragments, topic changes, cancellations, conversational replies and clarify rounds.
"""

from __future__ import annotations

import pytest

from graph.app.observe import compute_stats
from graph.conversation import Conversation
from nodes.embedded.playbook import PLAIN_YES_ANSWER, REFUND_OFFER
from nodes.embedded.replies import classify_reply, listed_items_of, open_question_of, record_owners
from nodes.testing.entry_rule import decide as decide_entry_rule
from nodes.testing.state import ungated
from policies.answers import CLARIFY_QUESTIONS, instead_of_repeat
from tests.conftest import TWICE, play_content_turns

REFUND = "I'd like my money back for a purchase"
UNKNOWN_CHARGE = "there's a charge on my card I don't recognise"
RATE = "what is the exchange rate at weekends?"

CASES: list[tuple[str, list[tuple[str, str]]]] = [
    # refunds
    ("refund-id", [(REFUND, "refunds"), ("tx_1001", "refunds")]),
    ("refund-id-yes", [(REFUND, "refunds"), ("tx_1001", "refunds"), ("yes please", "refunds")]),
    ("refund-status-id", [("where is my refund?", "refunds"), ("rf_5001", "refunds")]),
    ("refund-thanks", [("where is my refund?", "refunds"), ("thanks", "refunds")]),
    ("refund-hello", [("where is my refund?", "refunds"), ("hello?", "refunds")]),
    ("refund-cancel", [("where is my refund?", "refunds"), ("cancel it", "refunds")]),
    ("refund-never-mind", [("I want a refund for tx_1003", "refunds"), ("never mind", "refunds")]),
    ("refund-yes-stop", [("I want a refund for tx_1008", "refunds"), ("yes", "refunds"), ("stop", "refunds")]),
    ("refund-then-card", [("where is my refund?", "refunds"), ("my card was stolen", "cards")]),
    # billing
    # billing asks "Shall I ask our refunds team to refund the duplicate, tx_1008?": a yes opens it
    ("billing-yes", [(TWICE, "billing"), ("yes go ahead", "refunds")]),
    ("billing-which-duplicate", [(UNKNOWN_CHARGE, "billing"), ("and which one was the duplicate?", "billing")]),
    ("billing-choice-merchant", [(UNKNOWN_CHARGE, "billing"), ("the Uber one", "billing")]),
    ("billing-choice-id", [(UNKNOWN_CHARGE, "billing"), ("tx_1010", "billing")]),
    ("billing-declined-id", [("why was my payment declined?", "billing"), ("tx_1010", "billing")]),
    ("billing-first-one", [("show my recent transactions", "billing"), ("the first one", "billing")]),
    ("billing-then-refund", [("show my recent transactions", "billing"), ("I want a refund for that", "refunds")]),
    ("billing-twice-money-back", [("I was charged twice", "billing"), ("I want my money back", "refunds")]),
    ("billing-thanks", [("I was charged twice", "billing"), ("thanks", "billing")]),
    # cards
    ("cards-last4", [("I lost my card", "cards"), ("the one ending 4242", "cards")]),
    ("cards-yes", [("I lost my card", "cards"), ("yes", "cards")]),
    ("cards-then-fee", [("I lost my card", "cards"), ("why was I charged a fee?", "billing")]),
    ("cards-then-refund", [("I lost my card", "cards"), ("I want a refund for tx_1003", "refunds")]),
    ("cards-unblock-it", [("is my card blocked?", "cards"), ("unblock it please", "cards")]),
    ("cards-choice-1881", [("is my card blocked?", "cards"), ("the one ending 1881", "cards")]),
    ("cards-new-topic-after-policy", [("which currencies can I hold?", "policy"), ("the virtual one", "cards")]),
    ("cards-freeze-after-policy", [("which currencies can I hold?", "policy"), ("freeze my card ending 8899", "cards")]),
    # transfers
    ("transfers-id", [("has my transfer arrived?", "transfers"), ("tr_3001", "transfers")]),
    ("transfers-second", [("has my transfer arrived?", "transfers"), ("the second one", "transfers")]),
    ("transfers-other-one", [("has my transfer arrived?", "transfers"), ("and the other one?", "transfers")]),
    ("transfers-then-refund", [("has my transfer arrived?", "transfers"), ("where is my refund?", "refunds")]),
    ("transfers-unknown-id", [("show my transfers", "transfers"), ("tr_3101", "transfers")]),
    ("transfers-stop", [("has my transfer arrived?", "transfers"), ("stop", "transfers")]),
    ("transfers-yes", [("has my transfer arrived?", "transfers"), ("yes", "transfers")]),
    # account
    ("account-change-it", [("what's my account email?", "account"), ("can I change it?", "account")]),
    ("account-no", [("what's my account email?", "account"), ("no", "account")]),
    ("account-then-card", [("what's my account email?", "account"), ("my card doesn't work", "cards")]),
    ("account-thanks-refund", [("what's my account email?", "account"), ("thanks", "account"),
                               ("where is my refund?", "refunds")]),
    # policy
    ("policy-ok-thanks", [(RATE, "policy"), ("ok thanks", "policy")]),
    ("policy-and-weekdays", [(RATE, "policy"), ("and on weekdays?", "policy")]),
    ("policy-what-about-weekdays", [(RATE, "policy"), ("what about weekdays?", "policy")]),
    ("policy-then-card", [(RATE, "policy"), ("I lost my card", "cards")]),
    # requests the desk does not serve: no specialist, the holder keeps the conversation
    ("oos-first-turn", [("can I get a bigger credit limit?", "out_of_scope")]),
    ("oos-after-clarify", [("hi", "clarify"), ("what's a good mortgage rate?", "out_of_scope")]),
    ("oos-mid-policy", [(RATE, "policy"), ("what's a good mortgage rate?", "out_of_scope")]),
    ("oos-then-back-to-billing", [(TWICE, "billing"), ("can you book me a flight to Rome?", "out_of_scope"),
                                  ("and which one was the duplicate?", "billing")]),
    ("conversational-bot", [("where is my refund?", "refunds"), ("are you a bot?", "refunds")]),
    # clarify: a new question each round, fallback after two answers without progress
    ("clarify-then-card", [("hello", "clarify"), ("I lost my card", "cards")]),
    ("clarify-then-stolen", [("blah", "clarify"), ("my card was stolen", "cards")]),
    # a greeting's answer is not a clarifying round: two clarifying questions, then fallback
    ("clarify-rounds-fallback", [("hello", "clarify"), ("hmm", "clarify"), ("dunno", "clarify"), ("no idea", "fallback")]),
    ("social-never-fallback", [("hi", "clarify"), ("thanks!", "clarify"), ("bye", "clarify")]),
    ("social-after-questions", [("hmm", "clarify"), ("dunno", "clarify"), ("thanks, bye", "clarify")]),
    ("cards-thanks-bye", [("I lost my card", "cards"), ("thanks", "cards"), ("thank you", "cards"), ("bye", "cards")]),
    # a repeated or a bot question stays with the holder; a record named by its id goes to its owner
    ("balance-asked-again", [("what's my balance", "account"), ("what's my balance", "account"),
                             ("what's my balance", "account")]),
    ("account-bot-bye", [("what's my balance?", "account"), ("are you a bot?", "account"), ("bye", "account")]),
    ("cards-frozen-bot", [("I lost my card", "cards"), ("Are you a bot?", "cards")]),
    ("named-transfer-after-refunds", [("where is my refund rf_5001?", "refunds"), ("cancel transfer tr_3002", "transfers"),
                                      ("I'd like to cancel tr_3002", "transfers")]),
    ("named-refund-after-cards", [("I lost my card", "cards"), ("where is rf_5001?", "refunds")]),
    ("named-transfer-new-thread", [("what's the status of tr_3002?", "transfers")]),
    ("transfers-why-pending-cancel", [("I sent money to Mary, has it arrived?", "transfers"), ("tr_3002", "transfers"),
                                      ("why is it still pending?", "transfers"), ("can I cancel it?", "transfers")]),
    ("billing-merchant-named", [("I think I was charged twice at Tesco", "billing")]),
    # "top-up" is not the ordinal "top", "ok and …" is not a yes: fee questions leave refunds
    ("refunds-then-fee-questions", [("Refund £2,000 for tx_1006", "refunds"), ("what is the fee for a top-up?", "billing"),
                                    ("ok and for ATM withdrawals?", "billing")]),
    ("cards-unfreeze-it", [("I lost my card", "cards"), ("I found it again, please unfreeze it", "cards")]),
    # "and for X?" after a policy answer asks policy's question again about X: it stays with policy
    ("policy-and-atm-fee", [("what are the fees for international transfers?", "policy"),
                            ("and for ATM withdrawals?", "policy")]),
]


def test_table_covers_every_specialist_and_reply_kind():
    assert len(CASES) >= 40 and len({c for c, _ in CASES}) == len(CASES)
    agents = {a for _, turns in CASES for _, a in turns}
    assert {"cards", "billing", "refunds", "transfers", "account", "policy", "clarify", "fallback", "out_of_scope"} <= agents


@pytest.mark.parametrize("case,turns", CASES, ids=[c for c, _ in CASES])
def test_followup_answering_agent_of_every_turn(desk, case, turns):
    conv = Conversation(case, desk=desk)
    got = [(text, conv.send(text).agent) for text, _ in turns]
    assert got == turns
    decided = desk.deps.events.events(case, kinds=["entry_decided"])
    assert len(decided) == len(turns) and all(e.reason and "reply" in e.detail for e in decided)
    if any(a == "out_of_scope" for _, a in turns):  # no specialist visited, no task opened on those turns
        values = conv.state
        oos_turns = [i + 1 for i, (_, a) in enumerate(turns) if a == "out_of_scope"]
        assert all(h.to_agent == "out_of_scope" for h in values["handoff_path"] if h.turn in oos_turns)
        tasks = {e.turn: e.task_id for e in decided}
        assert all(tasks[t] == tasks.get(t - 1) for t in oos_turns)  # no task opened (an earlier one is kept)


def test_issue_examples_stay_with_the_agent_and_never_repeat(desk):
    conv = Conversation("ex", desk=desk)
    first = conv.send(REFUND)
    second = conv.send("tx_1001")
    assert (first.agent, second.agent) == ("refunds", "refunds") and [h.to_agent for h in second.handoff_path] == ["refunds"]
    assert "tx_1001" in second.text
    conv = Conversation("dup", desk=desk)
    a = conv.send(UNKNOWN_CHARGE).text
    b = conv.send("and which one was the duplicate?").text
    c = conv.send("and which one was the duplicate?")
    assert c.agent == "billing" and len({a, b, c.text}) == 3  # never the same answer twice


def test_named_record_of_another_agent_re_triages():
    kw = {"active_agent": "refunds", "routed_agent": "refunds", "route_confidence": 0.9, "identity_changed": False}
    assert decide_entry_rule(**kw, reply="cancel", record_owners={"transfers"}).target == "triage"
    assert decide_entry_rule(**kw, reply="identifier", record_owners={"billing", "refunds"}).target == "refunds"
    oos = dict(kw, active_agent=None, routed_agent="other", route_confidence=0.7)
    assert decide_entry_rule(**oos, scope="out_of_scope").target == "out_of_scope"
    assert decide_entry_rule(**oos, scope="out_of_scope", record_owners={"transfers"}).target == "triage"
    assert record_owners("I'd like to cancel tr_3002") == {"transfers"} and record_owners("hello") == frozenset()


def test_a_yes_no_reply_is_never_out_of_scope():
    """"please do" after the supervisor's offer: the router may read two words as another domain's talk (0.81 with the
    embedding head); a yes/no goes to triage (which takes up the offer) or stays with the holder, never out_of_scope."""
    base = {"routed_agent": "other", "route_confidence": 0.95, "identity_changed": False, "scope": "out_of_scope"}
    assert decide_entry_rule(**base, active_agent="supervisor", reply="yes_no").target == "triage"
    assert decide_entry_rule(**base, active_agent=None, reply="yes_no").target == "triage"
    assert decide_entry_rule(**base, active_agent="refunds", reply="yes_no").target == "refunds"
    assert decide_entry_rule(**base, active_agent="supervisor", reply="request").target == "out_of_scope"


def test_a_re_read_with_the_same_facts_says_so_and_nothing_new_only_without_one():
    previous = ["Your balance is £55.71."]
    assert instead_of_repeat("account", previous[0], previous, reread=True) == \
        "I've checked again and nothing has changed. Your balance is £55.71."
    status = ["Transfer tr_3002 to Mary for £80.00 (sent 30 Nov) is pending. It has been sent for processing."]
    assert instead_of_repeat("transfers", status[0], status, reread=True) == \
        "I've checked again and nothing has changed. Transfer tr_3002 to Mary for £80.00 (sent 30 Nov) is pending."
    assert instead_of_repeat("account", previous[0], previous).startswith("I have nothing new")


def test_clarify_never_asks_twice_and_stats_count_no_repeated_question(desk):
    # one store for all: conversations that open refunds would meet each other's refunds, so they are left out here
    for case, turns in [(c, t) for c, t in CASES if not any("refund for" in text for text, _ in t)]:
        conv = Conversation(case, desk=desk)
        for text, _ in turns:
            conv.send(text)
    conv = Conversation("clarify", desk=desk)
    results = [conv.send(t) for t in ("hello", "hmm", "dunno", "no idea", "what")]
    # "hello" is greeted (not a clarifying round); "hmm" and "dunno" get clarifying questions; "no idea" is the second
    # clarifying answer without progress (fallback); "what" starts again with a question not asked before in the thread
    assert [r.agent for r in results[:4]] == ["clarify", "clarify", "clarify", "fallback"]
    clar = [r.text for r in results if r.text in CLARIFY_QUESTIONS]
    assert len(clar) == len(set(clar)) >= 2
    stats = compute_stats(desk.deps.events.events())
    assert stats.questions > 0 and stats.repeated_questions == 0


# ---------------------------------------------------------------- the pure rules
def test_reply_kinds():
    listed = listed_items_of("Your transfers: tr_3002 is pending; tr_3001 is completed.")
    assert listed == ("tr_3002", "tr_3001")
    assert classify_reply("tr_3001", listed).kind == "choice"
    assert classify_reply("the second one", listed).kind == "choice"
    assert classify_reply("tx_1001").kind == "identifier"
    assert classify_reply("the one ending 4242").kind == "identifier"
    assert classify_reply("yes go ahead").kind == "yes_no"
    assert classify_reply("no thanks").kind == "yes_no"
    assert classify_reply("cancel it").kind == "cancel"
    assert classify_reply("and which one was the duplicate?").kind == "fragment"
    assert classify_reply("my card was stolen", has_topic=True).kind == "request"
    assert classify_reply("I would like to know why my transfer to my landlord has not arrived yet").kind == "request"
    assert open_question_of("Found it. Which transaction would you like refunded? Please give its id.") == \
        "Which transaction would you like refunded?"


def test_entry_rule():
    c = decide_entry_rule
    q = "Which transaction would you like refunded?"
    assert c("refunds", "cards", 0.3, False, reply="identifier", open_question=q).target == "refunds"
    assert c("refunds", "cards", 0.9, False, reply="identifier", open_question=q).target == "refunds"
    assert c("billing", "cards", 0.9, False, reply="identifier").target == "triage"  # an unasked id with its own topic
    assert c("billing", "other", 0.6, False, reply="yes_no").target == "billing"
    assert c("billing", "cards", 0.9, False, reply="fragment").target == "triage"
    assert c("billing", "cards", 0.3, False, reply="fragment").target == "billing"
    assert c("billing", "cards", 0.9, False, reply="cancel").target == "billing"
    assert c("billing", "other", 0.4, False, open_question=q, scope="conversational").target == "billing"
    assert c("billing", "other", 0.9, False, scope="out_of_scope").target == "out_of_scope"
    assert c("billing", "other", 0.9, False, reply="fragment", scope="out_of_scope",
             follow_up_opener=True).target == "billing"
    assert c(None, "other", 0.9, False, scope="out_of_scope").target == "out_of_scope"
    assert c(None, "other", 0.9, False, scope="conversational").target == "triage"
    assert c("clarify", "other", 0.9, False, clarify_rounds=1, scope="out_of_scope").target == "out_of_scope"
    assert c("billing", "cards", 0.2, False).target == "triage"
    assert c("clarify", "other", 0.5, False, reply="fragment", clarify_rounds=1).target == "triage"
    assert c("clarify", "other", 0.5, False, reply="fragment", clarify_rounds=2).target == "fallback"
    assert c("clarify", "cards", 0.8, False, clarify_rounds=2).target == "triage"
    assert c("billing", "billing", 0.9, False, reply="yes_no", task_status="fallback").target == "fallback"
    # a request for a person goes to fallback (the team), whoever holds the thread
    assert c("billing", "other", 0.9, False, scope="conversational", wants_person=True).target == "fallback"
    assert c(None, "other", 0.9, False, scope="conversational", wants_person=True).target == "fallback"
    # a short request pointing back at what the agent just answered ("any news on it?") stays, never out of scope
    assert c("refunds", "other", 0.5, False, scope="out_of_scope", refers_back=True).target == "refunds"
    assert c("refunds", "other", 0.5, False, scope="out_of_scope").target == "out_of_scope"
    assert c("refunds", "cards", 0.9, False, refers_back=True).target == "triage"  # another specialist's clear topic


def test_instead_of_repeat():
    assert instead_of_repeat("billing", "new text", ["old text"]) is None
    said = instead_of_repeat("refunds", "Same.", ["same."], ["Which transaction would you like refunded?"])
    assert said is not None and "?" not in said and "which transaction would you like refunded" in said.lower()
    assert instead_of_repeat("clarify", CLARIFY_QUESTIONS[0], [CLARIFY_QUESTIONS[0]]) == CLARIFY_QUESTIONS[1]


def test_yes_to_refunds_question_opens_the_refund(desk):
    # refunds asks "Shall I open a refund request for it?"; a plain yes opens it (and it goes to risk: £23.80 pauses)
    conv = Conversation("yes-opens", desk=desk)
    conv.send("I'd like my money back for a purchase")
    asked = conv.send("tx_1001")
    assert asked.agent == "refunds" and "Shall I open a refund request" in asked.text
    r = conv.send("yes please")
    assert r.status == "awaiting_approval" and r.pending is not None and r.pending.transaction_id == "tx_1001"


def test_a_no_or_a_long_sentence_is_not_a_plain_yes():
    from nodes.embedded.playbook import is_plain_yes

    assert is_plain_yes("yes") and is_plain_yes("sure, go ahead") and is_plain_yes("ok")
    assert not is_plain_yes("no") and not is_plain_yes("yes but not now")
    assert not is_plain_yes("yesterday I bought a coffee") and not is_plain_yes("maybe")


def test_a_stray_yes_after_a_cancelled_refund_opens_nothing(desk, store):
    # "cancel my refund" -> "yes" (cancelled) -> a second "yes" opens no new refund request
    conv = Conversation("stray-yes", desk=desk)
    paused = conv.send("I want a refund for tx_1001 please")
    assert paused.status == "awaiting_approval"
    conv.send("cancel my refund")
    assert "cancelled" in conv.send("yes").text
    before = [(r.id, r.status) for r in store.list_refunds("c_ada")]
    again = conv.send("yes")
    assert again.status == "answered" and again.pending is None
    assert again.agent == "refunds" and again.text == PLAIN_YES_ANSWER
    assert [(r.id, r.status) for r in store.list_refunds("c_ada")] == before


def test_a_yes_opens_the_refund_only_while_the_offer_is_open(desk, store):
    # the offer was asked, but the thread's task was closed since (e.g. by an operator): the yes answers nothing
    conv = Conversation("closed-offer", desk=desk)
    conv.send(REFUND)
    assert REFUND_OFFER in conv.send("tx_1001").text
    config = {"configurable": {"thread_id": "closed-offer"}}
    task = desk.graph.get_state(config).values["task"]
    ungated(desk.graph).update_state(config, {"task": task.model_copy(update={"status": "completed"})})
    r = conv.send("yes")
    assert r.pending is None and r.text == PLAIN_YES_ANSWER
    assert not [x for x in store.list_refunds("c_ada") if x.transaction_id == "tx_1001"]


def test_a_plain_yes_plans_a_refund_only_for_the_refund_offer():
    from nodes.embedded.playbook import plan_tool_call

    facts = {"transaction_id": "tx_1001"}
    assert plan_tool_call("refunds", "yes", facts, [], asked=REFUND_OFFER).name == "request_refund"
    assert plan_tool_call("refunds", "yes", facts, []) is None
    assert plan_tool_call("refunds", "yes", facts, [], asked="Which transaction would you like refunded?") is None
    assert plan_tool_call("refunds", "refund it please", facts, []).name == "request_refund"  # not a plain yes
    # a yes that itself asks for the money back is a refund request, offer or not
    assert plan_tool_call("refunds", "yes please, I want my money back for that", facts, []).name == "request_refund"


def test_asking_for_a_person_reaches_the_team(desk):
    """"speak to a human please" gets no self-description of the bot: it goes to fallback, which hands the thread to the team."""
    from nodes.embedded.understanding.reading import wants_person

    r = Conversation("person", desk=desk).send("speak to a human please")
    assert r.agent == "fallback" and "member of our team" in r.text
    # asked for, not a failure: no apology for an error, no "Reason:", says how it goes on
    assert "couldn't complete" not in r.text and "Reason" not in r.text and "take over" in r.text
    assert wants_person("I want to talk to a real person") and wants_person("human agent now")
    assert not wants_person("how do I transfer money to a person") and not wants_person("talk to you later")
    # neither out of scope nor small talk
    for ask in ("I want to speak to someone", "connect me to customer service", "can I get a human?"):
        assert wants_person(ask), ask
    assert not wants_person("can someone help me with my card") and not wants_person("talk to me about fees")


# ---------------------------------------------------------------- what each answer says
#: Each row: an id, then per turn ``(customer message, answering agent, must contain, must not contain)``. The agent
#: may be "a|b" where either is right for a person and the shipped router decides (a fee question on a thread transfers
#: holds is answered by transfers from the policy knowledge, or re-triaged to policy).
CONTENT_CASES: list[tuple[str, list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]]] = [
    # 1. a carried transfer id never overrides what the new message asks
    ("transfer-fee-after-status", [
        ("where is my transfer tr_3002?", "transfers", ("tr_3002", "pending"), ()),
        # the shipped router gives a price question BANKING77's billing topic (fees charged); billing then answers
        # the price from the fee schedule, not the fees already on the account
        ("what's the fee for international transfers?", "transfers|policy|billing",
         ("international transfer costs £0.50",), ("tr_3002", "pending", "checked again", "Fees on your account")),
        ("and the limit for transfers?", "transfers|policy|billing", ("£25,000",), ("top up", "tr_3002"))]),
    # 2. the card the customer names after a freeze is confirmed (or frozen when it is another one)
    ("cards-named-after-freeze", [
        ("I lost my card", "cards", ("frozen your physical card ending 4242",), ()),
        ("it's the one ending 4242", "cards", ("that's the one", "card ending 4242 is frozen", "replacement"),
         ("Your cards:", "1881", "8899")),
        ("ok", "cards", ("Okay!",), ("Your cards",)),
        ("no", "cards", ("All right",), ("Your cards",))]),
    ("cards-digits-only-after-freeze", [
        ("I lost my card", "cards", ("ending 4242",), ()),
        ("4242", "cards", ("card ending 4242 is frozen",), ("Refused", "bad arguments", "card_id"))]),
    ("cards-other-card-after-freeze", [
        ("I lost my card", "cards", ("ending 4242",), ()),
        ("it's the one ending 8899", "cards", ("frozen your virtual card ending 8899",), ("Link a card",))]),
    ("cards-blocked-named", [
        ("is my card blocked?", "cards", ("1881",), ()),
        ("the one ending 1881", "cards", ("physical card ending 1881 is blocked",), ("8899", "automated assistant"))]),
    ("cards-virtual-one", [
        ("my card doesn't work", "cards", ("8899",), ()),
        ("the virtual one", "cards", ("virtual card ending 8899 is active",), ("create a virtual card",))]),
    # 3. "and for X?" after policy answered stays with policy and answers X in the same question domain
    ("policy-and-for-fees", [
        ("what are the fees for international transfers?", "policy", ("£0.50",), ()),
        ("and for ATM withdrawals?", "policy", ("each ATM withdrawal costs £1.50",), ("transfer",)),
        ("and for top-ups?", "policy", ("credit card", "0.5%"), ("ATM",))]),
    ("policy-and-on-weekdays", [
        (RATE, "policy", ("1% markup",), ()),
        ("and on weekdays?", "policy", ("interbank rate",), ("markup", "checked again"))]),
    # 4. a re-asked status: one short sentence, never the whole answer again, never the same words twice
    ("transfer-any-news", [
        ("where is my transfer tr_3002?", "transfers", ("sent for processing",), ()),
        ("any news?", "transfers", ("I've checked again and nothing has changed. Transfer tr_3002",),
         ("sent for processing", "not something this desk")),
        ("any update?", "transfers", ("Still no change since then. Transfer tr_3002",), ("sent for processing",))]),
    # 5. a request for a person: a hand-over with the facts so far, not an error
    ("person-after-refund", [
        ("where is my refund rf_5001?", "refunds", ("rf_5001",), ()),
        ("can I talk to a real person please?", "fallback", ("take over", "rf_5001", "reply to you here"),
         ("sorry", "couldn't", "Reason"))]),
    ("person-then-hello-then-card", [
        ("I want to speak to a human", "fallback", ("take over", "reply to you here"), ("sorry", "couldn't")),
        ("hello?", "fallback", ("has this conversation",), ("What can I do for you",)),
        ("ok", "fallback", ("Our team will reply here",), ("not sure I understood",)),
        ("my card was stolen", "cards", ("frozen your physical card ending 4242",), ())]),
    # 6. five-turn conversations in the style of real customers (billing, refunds, account)
    ("billing-why-pending", [
        ("show my recent transactions", "billing", ("tx_1009",), ()),
        ("what's tx_1009?", "billing", ("tx_1009 is Uber",), ()),
        ("why is it pending?", "billing", ("tx_1009 (Uber, £12.30) is pending: the merchant has authorised",),
         ("Your latest transactions",)),
        ("ok", "billing", ("Okay!",), ("tx_1009",)),
        ("thanks", "billing", ("You're welcome",), ())]),
    ("refunds-named-refund-why-not", [
        ("where is my refund?", "refunds", ("rf_5001",), ()),
        ("rf_5001", "refunds", ("Refund rf_5001",), ("can't be refunded",)),
        ("I want a refund for tx_1005", "refunds", ("already has refund rf_5001",), ()),
        ("why not?", "refunds", ("rf_5001",), ("verify",)),
        ("ok", "refunds", ("Okay!",), ())]),
    ("transfers-first-one-cancel", [
        ("I sent money to my landlord and it hasn't arrived", "transfers", ("tr_3002", "tr_3001"), ()),
        ("the first one", "transfers", ("Transfer tr_3002", "pending"), ("Your transfers:", "tr_3001")),
        ("can I cancel it?", "transfers", ("cancel it yourself in the app",), ("tr_3001",))]),
    ("transfers-list-cost-time", [
        ("show my transfers", "transfers", ("Your transfers: tr_3002",), ("Faster Payments",)),
        ("how do I send money abroad?", "transfers", ("Payments in the app",), ()),
        ("how much does it cost?", "transfers", ("international transfers cost £0.50",), ("Your transfers",)),
        ("and how long does it take?", "transfers", ("1 to 5 business days",), ("card",)),
        ("ok thanks", "transfers", ("You're welcome",), ())]),
    ("account-verify-how-long", [
        ("how do I verify my identity?", "account", ("selfie",), ()),
        ("and how long does it take?", "account", ("within minutes",), ("Ada Lovelace", "card"))]),
    ("cards-pin-how-limit", [
        ("can I change my PIN?", "cards", ("Change PIN",), ()),
        ("how?", "cards", ("which part",), ("not something this desk",)),
        # limits are policy's (the shipped router's topic); cards answers them too when it keeps the thread
        ("and my card limit?", "cards|policy", ("card payments £5,000",), ("lost or stolen", "Your cards")),
        ("ok", "cards|policy", ("Okay!",), ("frozen",)),
        ("yes", "cards|policy", ("what else can I help you with",), ("nothing new",))]),
    ("refunds-declined-offer-then-ok", [
        (REFUND, "refunds", ("Which transaction",), ()),
        ("tx_1001", "refunds", ("Shall I open a refund request",), ()),
        ("no", "refunds", ("left it as it is",), ()),
        ("ok", "refunds", ("what else",), ("waiting for approval", "opened refund")),
        ("no", "refunds", ("If anything else comes up",), ())]),
    ("billing-and-for-fees", [
        ("why was I charged a fee?", "billing", ("tx_1003",), ()),
        ("and for top-ups?", "billing", ("credit card", "0.5%"), ("Your latest transactions",)),
        ("and for transfers?", "billing", ("international transfers cost £0.50",), ("Your latest transactions",)),
        ("ok", "billing", ("Okay!",), ())]),
    ("policy-countries-what-about", [
        ("can I open an account from the US?", "policy", ("UK, the EEA and Switzerland",), ()),
        ("what about Switzerland?", "policy", ("Switzerland",), ("don't have a published policy",))]),
    ("refunds-by-merchant-is-it-approved", [
        ("I want a refund", "refunds", ("Which transaction",), ()),
        ("the Tesco one", "refunds", ("give the transaction's id",), ("tx_1005", "can't be refunded")),
        ("tx_1001", "refunds", ("tx_1001 (Tesco, £23.80) can be refunded",), ()),
        ("where's my refund", "refunds", ("rf_5001",), ()),
        ("is it approved?", "refunds", ("nothing has changed", "rf_5001", "waiting for review"),
         ("can't be refunded",))]),
    ("transfers-limits-and-for", [
        ("where is my transfer tr_3002?", "transfers", ("tr_3002",), ()),
        ("and the limits?", "transfers|policy", ("outgoing transfers £25,000",), ("tr_3002",)),
        ("and for ATM withdrawals?", "transfers|policy", ("ATM withdrawals £500",), ("tr_3002", "Mastercard logo")),
        ("and for top-ups?", "transfers|policy", ("top-ups £10,000",), ("tr_3002",)),
        ("and for tr_3001?", "transfers", ("Transfer tr_3001",), ())]),
    ("cards-limit-and-for-atm", [
        ("what's my card limit?", "cards|policy", ("card payments £5,000",), ("lost or stolen",)),
        ("and for ATM withdrawals?", "cards|policy", ("ATM withdrawals £500",), ("£1.50",))]),
    ("account-euros-close-cancel", [
        ("what's my balance?", "account", ("£55.71",), ()),
        ("and in euros?", "account", ("don't hold any EUR", "GBP only"), ("Ada Lovelace",)),
        ("I want to close my account", "account", ("close your account",), ()),
        ("why?", "account", ("which part",), ("verify",)),
        ("actually no, cancel that", "account", ("Nothing has been closed",), ("Ada Lovelace",))]),
]


@pytest.mark.parametrize("case,turns", CONTENT_CASES, ids=[c for c, _ in CONTENT_CASES])
def test_followup_answers_say_what_was_asked(desk, case, turns):
    play_content_turns(desk, case, turns)


def test_yes_to_the_loss_question_freezes_and_no_does_nothing():
    from nodes.embedded.playbook import LOSS_QUESTION, plan_tool_call

    asked = open_question_of(LOSS_QUESTION)
    assert plan_tool_call("cards", "yes", {}, [], asked=asked).name == "card_status"
    assert plan_tool_call("cards", "yes", {"card_id": "card_1"}, ["card_status"], asked=asked).name == "freeze_card"
    assert plan_tool_call("cards", "no", {"card_id": "card_1"}, ["card_status"], asked=asked) is None
    assert plan_tool_call("cards", "yes", {"card_id": "card_1"}, ["card_status"]) is None  # nothing was asked
    assert plan_tool_call("cards", "ok", {"card_id": "card_1"}, ["card_status"], asked=asked) is None  # not a loss


def test_tool_errors_with_internal_text_never_reach_the_customer():
    from nodes.embedded.playbook import compose_answer

    internal = compose_answer("cards", "4242", [("freeze_card", {
        "ok": False, "error": "Refused: bad arguments for freeze_card: card_id: Input should be a valid string"})])
    assert not any(x in internal for x in ("Refused", "freeze_card", "card_id", "Input should")) and "last four" in internal
    own = compose_answer("transfers", "tr_9999", [("transfer_status", {"ok": False, "error": "no transfer tr_9999"})])
    assert "no transfer tr_9999" in own  # an error written for the customer is kept


def test_and_for_x_news_and_why_are_follow_ups():
    from nodes.embedded.replies import asks_for_news, asks_same_for, is_bare_follow_up

    assert asks_same_for("and for ATM withdrawals?") and asks_same_for("ok and on weekdays?")
    assert asks_same_for("what about with a credit card?")
    assert not asks_same_for("and I lost my card") and not asks_same_for("and for tr_3001?")
    assert not asks_same_for("and for the transfer I made to my landlord last week from my other account?")
    assert asks_for_news("any news?") and asks_for_news("any update?") and not asks_for_news("news about my card limit")
    assert is_bare_follow_up("why not?") and is_bare_follow_up("how come?") and not is_bare_follow_up("why was I charged?")
    c = decide_entry_rule
    assert c("policy", "billing", 0.88, False, reply="fragment", same_question=True).target == "policy"
    assert c("transfers", "account", 0.57, False, reply="request", same_question=True).target == "transfers"
    assert c("policy", "billing", 0.88, False, reply="fragment").target == "triage"
    # after the hand-over to a person, small talk stays with fallback; a topic of its own is triaged
    assert c("fallback", "other", 0.8, False, scope="conversational").target == "fallback"
    assert c("fallback", "cards", 0.9, False, reply="request").target == "triage"


#: No money moves unless the customer asks for it. Each case: the turns, then the
#: transactions that must have no refund afterwards.
NO_REFUND_CASES = [
    ("negated-refund", ["I don't want a refund for tx_1008"], ("tx_1008",)),
    ("negated-just-checking", ["I don't want a refund for tx_1001, just checking it"], ("tx_1001",)),
    ("eligibility-question", ["can tx_1001 be refunded?"], ("tx_1001",)),
    ("injection-with-refunds-word", ["tx_1001; DROP TABLE refunds;--"], ("tx_1001",)),
    # billing offered to refund tx_1008, then answered another question without asking: a later "ok" pays nothing
    ("stale-offer-ok", ["I was charged twice for my coffee", "what does tx_1001 look like?", "ok"],
     ("tx_1008", "tx_1001")),
    ("stale-offer-yes", ["I was charged twice for my coffee", "tx_1001", "yes"], ("tx_1008", "tx_1001")),
]


@pytest.mark.parametrize("case,turns,untouched", NO_REFUND_CASES, ids=[c for c, _, _ in NO_REFUND_CASES])
def test_no_refund_is_opened_unless_the_customer_asks_for_it(desk, store, case, turns, untouched):
    conv = Conversation(case, desk=desk)
    for text in turns:
        r = conv.send(text)
        assert "refund rf_" not in r.text, (text, r.text)
    assert not [f for f in store.list_refunds("c_ada") if f.transaction_id in untouched]


def test_the_offer_the_last_answer_made_is_still_taken_by_a_yes(desk, store):
    conv = Conversation("offer-then-yes", desk=desk)
    conv.send("I was charged twice for my coffee")
    r = conv.send("yes")
    assert r.agent == "refunds" and "refund rf_" in r.text, r.text
    assert [f for f in store.list_refunds("c_ada") if f.transaction_id == "tx_1008"]

