"""The routing rules that let the desk end to end reach the router's own accuracy (bench/route_losses.py):
a sentence-only compound split needs confident segments, a safety report is handed on whole after the freeze, sure
small talk is not overruled by the handbook's patterns, and "refunded" asks for no refund. A small scripted router
(per-text scores) stands in for the fitted one, so each rule is exercised at both sides of its threshold."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from graph.app.evaluation import QueryOutcome
from nodes.embedded import compound
from nodes.embedded.offline_model import MISROUTE_CONFIDENCE, NO_SPECIALIST_SURE, OfflineChatModel, wants_refund
from nodes.testing.scripted import TableRouter

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ compound: marked segments
@pytest.mark.parametrize("text,marks", [
    ("Why was I charged twice, and when will my refund arrive?", [False, True]),
    ("I lost my card. Also, where is my transfer?", [False, True]),
    ("I want to top up my account. Can I pay with a phone wallet?", [False, False]),
    ("Hi. I lost my card. Thanks!", [False]),
])
def test_split_marked_says_which_segments_the_message_marks(text, marks):
    split = compound.split_marked(text)
    assert [m for _, m in split] == marks
    assert [s for s, _ in split] == compound.split_requests(text)


def test_sentence_only_split_needs_every_intent_at_the_unmarked_threshold():
    low = compound.UNMARKED_THRESHOLD - 0.05
    scores = [{"cards": 0.9}, {"policy": low}]
    plain = compound.detect_compound(scores, marked=[False, False])
    assert not plain.compound and "unmarked" in plain.reason and plain.experts == ("cards", "policy")
    # the same scores with "Also, ..." (marked) or without marks given: compound as before
    assert compound.detect_compound(scores, marked=[False, True]).compound
    assert compound.detect_compound(scores).compound
    sure = compound.detect_compound([{"cards": 0.9}, {"policy": compound.UNMARKED_THRESHOLD}], marked=[False, False])
    assert sure.compound
    # a marked segment that repeats the first expert does not make an unmarked third one count
    three = compound.detect_compound([{"cards": 0.9}, {"cards": 0.8}, {"policy": low}], marked=[False, True, False])
    assert not three.compound
    with pytest.raises(ValueError):
        compound.detect_compound(scores, marked=[True])
    with pytest.raises(ValueError):
        compound.detect_compound(scores, marked=[False, False], unmarked_threshold=0)


def test_an_unmarked_split_is_single_when_the_whole_message_is_sure_of_one_of_its_experts():
    sure = compound.WHOLE_SURE
    scores = [{"cards": 0.9}, {"policy": 0.8}]  # both above UNMARKED_THRESHOLD: compound without the whole check
    assert compound.detect_compound(scores, marked=[False, False]).compound
    one = compound.detect_compound(scores, marked=[False, False], whole={"cards": sure, "policy": 1 - sure})
    assert not one.compound and "whole message cards" in one.reason
    # below the bar, or sure of an agent that is not among the segments' intents: still compound
    assert compound.detect_compound(scores, marked=[False, False], whole={"cards": sure - 0.05}).compound
    assert compound.detect_compound(scores, marked=[False, False], whole={"billing": 0.99}).compound
    # a message that marks its second request ("Also, ...") is compound whatever the whole text says
    assert compound.detect_compound(scores, marked=[False, True], whole={"cards": 0.99}).compound
    with pytest.raises(ValueError):
        compound.detect_compound(scores, marked=[False, False], whole={"cards": 0.99}, whole_sure=0)


def test_offline_model_applies_the_marks():
    router = TableRouter({"I want to top up my account.": ("transfers", 0.66, "top_up"),
                          "What payment methods can I use?": ("policy", 0.6, "methods"),
                          "Also, what payment methods can I use?": ("policy", 0.6, "methods")})
    model = OfflineChatModel(router=router)
    plain, _ = model.compound("I want to top up my account. What payment methods can I use?")
    assert not plain.compound and "unmarked" in plain.reason
    marked, _ = model.compound("I want to top up my account. Also, what payment methods can I use?")
    assert marked.compound and marked.experts == ("transfers", "policy")


# ------------------------------------------------------------------ refund words
def test_refunded_reports_a_refund_and_asks_for_none():
    assert not wants_refund("I paid two weeks ago and just got refunded")
    assert not wants_refund("Why has my account been refunded for this?")
    assert wants_refund("I'd like a refund for the extra charge")
    assert wants_refund("please refund it") and wants_refund("can I get my money back?")


# ------------------------------------------------------------------ graph: safety report handed on whole, small talk
SAFETY = "Someone stole my card and took money out that I never withdrew"


@pytest.mark.parametrize("whole,answered", [
    (("billing", MISROUTE_CONFIDENCE, "cash_withdrawal_not_recognised"), "billing"),
    (("billing", MISROUTE_CONFIDENCE - 0.05, "cash_withdrawal_not_recognised"), "cards"),
    (("cards", 0.9, "lost_or_stolen_card"), "cards"),
])
def test_safety_report_is_frozen_then_handed_on_whole_when_the_router_is_sure(make_desk, store, whole, answered):
    from graph.conversation import Conversation

    desk = make_desk(router=TableRouter({SAFETY: whole}))
    r = Conversation("safety-whole", desk=desk).send(SAFETY)
    assert r.path_str.startswith("entry → triage → cards"), r.path_str
    assert store.get_card("c_ada", "card_ada_phys").status == "frozen"
    assert r.agent == answered, r.path_str
    assert "frozen your" in r.text and "ending 4242" in r.text


@pytest.mark.parametrize("confidence,answered", [(NO_SPECIALIST_SURE, "clarify"), (NO_SPECIALIST_SURE - 0.1, "policy")])
def test_sure_small_talk_is_not_overruled_by_handbook_patterns(make_desk, confidence, answered):
    from graph.conversation import Conversation

    text = "how old are you"  # a policy pattern ("age limit") matches; the router says small talk
    desk = make_desk(router=TableRouter({text: ("other", confidence, "chitchat")}))
    r = Conversation("small-talk", desk=desk).send(text)
    assert r.agent == answered, r.path_str


# ------------------------------------------------------------------ the bench's grouping
def _outcome(answered: str, reasons: tuple[str, ...]) -> QueryOutcome:
    visited = tuple(r.split(":", 1)[0][len("handoff->"):] for r in reasons if r.startswith("handoff->"))
    return QueryOutcome(index=0, expected="billing", answered=answered, first_handoff=visited[0] if visited else "none",
                        handoffs=len(visited), seconds=0.01, visited=visited, reasons=reasons)


def test_route_losses_groups_by_the_routing_reasons():
    sys.path.insert(0, str(REPO / "bench"))
    from route_losses import loss_reason

    entry = "entry->triage: no specialist holds the conversation"
    cases = [
        (_outcome("supervisor", (entry, "handoff->supervisor: compound request: billing 0.90, cards 0.80")),
         "billing", 0.9, "compound split"),
        (_outcome("out_of_scope", ("entry->out_of_scope: no specialist serves this",)), "billing", 0.6,
         "entry refusal"),
        (_outcome("clarify", (entry, "handoff->clarify: x")), "billing", 0.2, "clarify (low confidence)"),
        (_outcome("refunds", (entry, "handoff->billing: y (router 0.90)",
                              "handoff->refunds: customer wants the money back for the charge identified by billing")),
         "billing", 0.9, "hand-on: billing -> refunds (refund words)"),
        (_outcome("cards", (entry, "handoff->billing: y", "handoff->cards: the desk handbook puts this request with cards")),
         "billing", 0.4, "hand-on: patterns"),
        (_outcome("cards", (entry, "handoff->cards: safety first: a lost, stolen or compromised card is frozen before "
                                   "anything else")), "billing", 0.9, "safety first"),
        (_outcome("policy", (entry, "handoff->policy: z")), "other", 0.45, "clarify -> patterns/record"),
    ]
    for outcome, bare, conf, group in cases:
        assert loss_reason(outcome, bare, conf, clarify_below=0.25) == group


def test_a_sentence_only_split_not_taken_is_said_in_the_handoff_reason(make_desk):
    from graph.conversation import Conversation

    text = "I want to top up my account. What payment methods can I use?"
    router = TableRouter({"I want to top up my account.": ("transfers", 0.66, "top_up"),
                          "What payment methods can I use?": ("policy", 0.6, "methods"),
                          text: ("policy", 0.8, "methods")})
    r = Conversation("plain-split", desk=make_desk(router=router)).send(text)
    assert r.agent == "policy" and "supervisor" not in r.path_str, r.path_str
    reason = next(h.reason for h in r.handoff_path if h.kind == "handoff")
    assert "single request" in reason and "unmarked" in reason, reason
