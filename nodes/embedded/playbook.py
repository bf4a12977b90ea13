"""The offline specialists' playbook: which business tool an offline agent calls next and how it words
its answer. Only the ``offline`` model uses this; a real LLM chooses tools and words answers itself.

Flow for one specialist turn (driven by the graph / offline chat model)::

    facts = extract_facts(user_text) | handoff_facts          # what is known before any tool
    done, results = [], []
    while (plan := plan_tool_call(agent, user_text, facts, done)) is not None:
        result = run_tool(plan.name, plan.args, store, ctx)    # nodes.tools.run_tool
        done.append(plan.name); results.append((plan.name, result))
        facts |= facts_from_tool_result(plan.name, result)     # so the next plan can use them
    answer = compose_answer(agent, user_text, results)

Facts are the ``dict[str, str]`` of :mod:`nodes.facts` (``extract_facts``, ``facts_from_tool_result``).

The keyword rules are this module's own (no dataset text); they cover the demo story and the common
shapes of each agent's requests, not every phrasing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from checkpoints.business import money, money_plain, parse_iso
from nodes.embedded.desk_knowledge import DeskIntent, load_knowledge
from nodes.embedded.desk_render import ACCOUNT_CANCEL_ANSWER, count_words, render_desk_tool
from nodes.embedded.replies import listed_items_of
from nodes.facts import extract_facts
from nodes.tools import TOOLS, match_policy_topic
from policies.cancellation import CANCEL_QUESTION

__all__ = [
    "DISPUTE_WHICH",
    "DISPUTE_WHICH_RE",
    "NOT_RECOGNISED",
    "dispute_answer",
    "dispute_offer",
    "is_plain_no",
    "REFUND_OFFER",
    "REJECTED_REASON",
    "CANCEL_REFUND_OFFER",
    "PLAIN_YES_ANSWER",
    "PLAIN_NO_ANSWER",
    "DECLINED_ANSWER",
    "WHAT_ELSE_ANSWER",
    "ANYTHING_ELSE",
    "LOSS_ASKED",
    "is_acknowledgement",
    "BARE_WHY_ANSWER",
    "ACCOUNT_CANCEL_ANSWER",
    "CLOSE_ACCOUNT_ASKED",
    "is_plain_yes",
    "reports_card_loss",
    "LOSS_QUESTION",
    "FREEZE_ADVICE",
    "asks_whether_to_freeze",
    "UNFREEZE_OFFER",
    "found_card_offer",
    "NOTHING_FROZEN",
    "FREEZE_WHICH",
    "FREEZE_ASKED",
    "ToolCallPlan",
    "plan_tool_call",
    "compose_answer",
    "resolve_intent",
    "handbook_follow_up",
    "how_to_answer",
    "leaning_text",
    "knows_subject",
    "names_desk_subject",
    "asks_for_refund",
    "asks_about_refund",
    "cancels_refund",
    "declines_refund",
    "refuses_refund",
    "REFUSED_ANSWER",
]

@dataclass(frozen=True)
class ToolCallPlan:
    """The next business tool call of an offline agent: ``name`` (a key of ``nodes.tools.TOOLS``) and
    ``args`` (the model-visible arguments, valid for that tool's schema)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------------


def _has(text: str, *patterns: str) -> bool:
    return any(re.search(p, text) for p in patterns)


_DUPLICATE = (r"\btwice\b", r"\bdouble[ -]?(?:charged|charge|billed|payment)", r"\bduplicat",
              r"\btwo (?:identical |same )?(?:charges|payments|transactions)\b", r"\bsame (?:charge|payment)",
              r"\bcharged (?:me )?two times\b", r"\bcharged (?:me )?again\b")
_MONEY_BACK = (r"\brefund(?!able|s\b|ed\b)", r"\bmoney back\b", r"\breimburs", r"\bget (?:it|this|that|them) back\b",
               r"\breturn (?:my|the) money\b", r"\bpay (?:me )?back\b", r"\bcompensat")
#: A refund the customer says they do not want, or a question only ("I don't want a refund for tx_1008", "no refund
#: needed, just checking it"): never a request.
_NO_REFUND = (r"\b(?:don'?t|do not|doesn'?t|does not|didn'?t|did not|won'?t|not|never|no)\b(?:\s+\w+){0,4}?\s+"
              r"(?:an?\s+)?(?:refund|money back|reimburs)",
              r"\bno (?:refund|need)\b", r"\bjust (?:checking|asking|wondering|looking)\b")


def declines_refund(text: str) -> bool:
    """Does the (lower-cased) ``text`` say the customer does not want money back, or only asks (:data:`_NO_REFUND`)?"""
    return _has(text, *_NO_REFUND)


#: The customer says in so many words that they want no refund ("I don't want a refund for tx_1008", "we don't need
#: the money back", "no refund needed"): no refund is opened and none is offered.
_REFUSES_REFUND = (r"\b(?:don'?t|do not|doesn'?t|does not|won'?t|will not|not|never)\s+(?:\w+\s+){0,2}?(?:want|need|"
                   r"require|asking for|ask for|looking for)\b(?:\s+[\w']+){0,3}?\s+(?:refund|money back|reimburs)",
                   r"\bno refunds? (?:needed|necessary|required|please|thanks|thank you)\b")


def refuses_refund(text: str) -> bool:
    """Does the (lower-cased) ``text`` say the customer wants no refund (:data:`_REFUSES_REFUND`), without asking to
    cancel one that exists (:func:`cancels_refund`)? Refunds opens nothing and offers nothing
    (:data:`REFUSED_ANSWER`)."""
    return _has(text, *_REFUSES_REFUND) and not cancels_refund(text)


#: A question about refunds, or a tentative mention, that asks for none: "what's your refund
#: policy?", "is a refund possible?", "would I get a refund if I complained?", "maybe a refund?", "what would a refund
#: look like?" open no refund, not even of the transaction billing had just named. A request put
#: as a polite question ("can I get my money back?", "could you refund it?") is still a request.
_REFUND_QUESTION = (r"^\W*(?:and\s+|so\s+|but\s+|ok(?:ay)?,?\s+)?(?:what|what'?s|how|which|why|who|whom|when)\b",
                    r"^\W*(?:and\s+|so\s+|but\s+|ok(?:ay)?,?\s+)?(?:is|are|was|were|does|do|did|should|might|am|has|"
                    r"have)\b",
                    r"^\W*(?:and\s+|so\s+|but\s+|ok(?:ay)?,?\s+)?(?:will|would)\b(?!\s+you\b)",
                    r"\b(?:could|can|may|might|would|will) (?:a|the|my) refund be\b", r"\bany chance\b",
                    r"\b(?:i|we) might\b", r"\bthinking (?:about|of)\b", r"\bnot sure\b", r"\bconsidering\b",
                    r"^\W*(?:could|can|may)\s+(?:i|it|this|that|we)\s+be\s+(?:refunded|reimbursed)\b",
                    r"\b(?:maybe|perhaps|possibly|wondering|hypothetical(?:ly)?)\b",
                    r"\bif\b(?!\s+(?:possible|you (?:can|could|don'?t mind)|that'?s (?:ok|okay|possible|alright)))",
                    r"\brefunds? polic", r"\bqualif", r"(?<!as soon as )\bpossible\s*\?",
                    r"^\W*(?:a\s+|any\s+)?refund\s*\?+\W*$")


#: A word that makes a refund message a request, even put as a question: a verb of asking or giving ("can I get a
#: refund for tx_1008?", "I'd like a refund?"), a request addressed to the desk ("could you …?"), "please", or "refund"
#: used as a verb with its object ("refund tx_1008?", "refund it?").
_REQUEST_MARK = (r"\b(?:can|could|would|will|won'?t|can'?t)\s+(?:you|u|ya)\b",
                 r"\b(?:want|wanna|need|like|demand|expect|request|claim|get|give|gimme|have|send|issue|process|make|"
                 r"do|open|start|file|raise|put|pay|return|arrange|sort)\b",
                 r"\b(?:please|pls|plz)\b",
                 r"\brefund(?:ing)?\s+(?:me|us|it|this|that|them|tx_\w+|the|my|both|all|these|those|one|him|her)\b")
#: A bare noun phrase about a refund put as a question, with no request word (:data:`_REQUEST_MARK`): "and the refund
#: for tx_1008?", "refund for tx_1008?", "tx_1008 refund?" ask about that payment's refund and
#: open none.
_BARE_REFUND_QUESTION = re.compile(r"\?[\W_]*$")


def asks_about_refund(text: str) -> bool:
    """Is the (lower-cased) ``text`` a question about refunds (or a tentative mention) that asks for none
    (:data:`_REFUND_QUESTION`: a wh-question, a yes/no question not addressed to "you", "maybe", "if …", "refund
    policy", "does it qualify"; or a bare noun phrase about a refund with a question mark and no request word,
    :data:`_BARE_REFUND_QUESTION`)? The desk answers it (a transaction's eligibility and the offer as a question; the
    refund rules) and opens nothing."""
    if _has(text, *_REFUND_QUESTION):
        return True
    return (bool(_BARE_REFUND_QUESTION.search(text)) and _has(text, *_MONEY_BACK)
            and not _has(text, *_REQUEST_MARK))


def cancels_refund(text: str) -> bool:
    """Does the (lower-cased) ``text`` ask to cancel, stop or withdraw a refund (``policies.cancellation
    .wants_to_cancel``: "cancel my refund", "I changed my mind, cancel the refund", "I don't want the refund any
    more"), not to open one? Negated wishes ("don't cancel it") are not cancel wishes."""
    from nodes.embedded.cancellation import cancels_something_else, wants_to_cancel

    if cancels_something_else(text):
        return False  # "cancel my subscription to Netflix": not the pending refund
    if re.search(r"\bchanged? (?:my|our) minds?\b", text) and re.search(r"\brefund|\bcancel", text):
        return True
    # "I don't want a refund for tx_1008" declines one (nothing to cancel); "I don't want the refund any more" cancels
    return wants_to_cancel(text) and (not declines_refund(text) or _has(text, *_CANCEL_NOT_DECLINE))


#: A negated wish that is a cancel wish, not a refusal of a refund never asked for: "… any more", "no longer", "the/my
#: refund" (one that exists).
_CANCEL_NOT_DECLINE = (r"\bany ?more\b", r"\bno longer\b", r"\b(?:the|my|this|that) refund\b",
                       r"\bcancel|\bwithdraw|\bstop\b|\bcall\w* (?:it |this |that |the refund )?off\b")


def asks_for_refund(text: str) -> bool:
    """Does the (lower-cased) ``text`` explicitly ask for money back (:data:`_MONEY_BACK`), without saying it does not
    want it (:data:`_NO_REFUND`), without being only a question whether it could be refunded (:data:`_ELIGIBILITY`:
    "can tx_1001 be refunded?" gets the check and the offer, not a request) or another question about refunds
    (:func:`asks_about_refund`), and without asking to cancel one (:func:`cancels_refund`)? The project's rule: no
    money moves unless the customer asked for it."""
    return (_has(text, *_MONEY_BACK) and not declines_refund(text) and not _has(text, *_ELIGIBILITY)
            and not asks_about_refund(text) and not cancels_refund(text))


_REFUND_WHERE = (r"\bwhere(?:'s| is| are| can| do| will)\b", r"\b(?:my|other|all) (?:other )?refunds\b",
                 r"\b(?:see|check|track)\b.*\brefund", r"\bstatus\b",
                 r"\bnot (?:showing|arrived|received|there)\b",
                 r"\bhaven'?t (?:got|received|seen)\b", r"\bstill (?:waiting|not|no)\b",
                 r"\bwhen will\b", r"\bhas(?:n'?t| not)\b.*\b(?:arrived|come|appeared)",
                 r"\bhow long\b", r"\bany news\b", r"\bupdate on\b",
                 r"\b(?:is|has) (?:it|my refund|the refund) (?:been )?(?:approved|paid|done|processed|through)\b",
                 # "did I get my money?", "have I received the refund?": whether it was paid
                 r"\b(?:did|have|has) (?:i|it|my money|the money)\b.{0,12}\b(?:get|got|receive|received|arrive|"
                 r"arrived|come|paid)\b",
                 r"\b(?:got|received) (?:my|the) (?:money|refund|cash)\b",
                 # "why was it rejected?", "why wasn't my refund approved?": the refund's outcome
                 r"\bwhy\b.{0,30}\b(?:rejected|declined|refused|turned down|not approved|(?:n'?t|not) (?:been )?"
                 r"approved?|cancelled|expired)\b",
                 r"\bwhat happened to\b.{0,20}\brefund\b",
                 # "is it in my balance?", "is the money back in my account?": whether it was paid, not a second
                 # request
                 r"\b(?:is|was|has) (?:it|the money|the refund|my refund|that|this)\b.{0,12}\b(?:in|on|into|to) "
                 r"(?:my|the) (?:balance|account)\b",
                 r"\b(?:is|was|has) (?:it|the money|the refund|my refund|that|this) (?:been )?(?:credited|paid out)\b")
_ELIGIBILITY = (r"\brefundable\b", r"\beligib", r"\b(?:can|could) (?:it|this|that|tx_\w+) be refunded\b")
_CARD_FREEZE = (r"\blost\b", r"\bstolen\b", r"\bstole\b", r"\bmissing\b", r"\bcompromis", r"\bfraud", r"\bfreeze\b",
                r"\bblock (?:it|my|the)\b", r"\bcan'?t find (?:my|the) card\b",
                r"\bsomeone (?:has|took|used)")
_FEES = (r"\bfees?\b", r"\bcharged? (?:me )?(?:for|a)\b", r"\bcommission\b", r"\bextra charge",
         r"\bwhy (?:was|am|did) i (?:charged|pay)")
_NOT_MINE = (r"\b(?:didn'?t|did not|never) (?:make|made|authori[sz]e)\b", r"\bnot (?:made|authori[sz]ed) by\b",
             r"\bdispute\b")
_EXPLAIN = (r"\bwhat is\b", r"\bwhat'?s\b", r"\bexplain\b", r"\bdon'?t recogni[sz]e\b", r"\bpending\b",
            r"\bdeclined\b", r"\brevert", r"\bwhy\b", r"\bunknown\b", r"\bstrange\b")


_UNFREEZE = (r"\bunfreeze\b", r"\bun-freeze\b", r"\bunblock (?:my|the) card\b", r"\bfound (?:my|the) card\b",
             r"\b(?:reactivate|re-activate)\b")
#: The customer asks for the unfreeze in so many words (finding the card is not asking: the desk offers, the customer
#: says yes).
_UNFREEZE_ASKED = (r"\bunfreeze\b", r"\bun-freeze\b", r"\bunblock (?:my|the|it)\b", r"\b(?:reactivate|re-activate)\b",
                   r"\b(?:turn|switch) (?:it|my card|the card) (?:back )?on\b")
#: "I found it", "found my card", "it turned up": the lost card is back.
_FOUND_CARD = (r"\bfound (?:it|(?:my|the) (?:lost |missing )?card|them)\b",
               r"\b(?:it|my card|the card) (?:turned|showed) up\b")
#: The cards agent's offer after the customer found a card this conversation froze; a plain yes unfreezes that card.
UNFREEZE_OFFER = "Shall I unfreeze your card ending {last4}?"
_UNFREEZE_OFFERED = re.compile(r"^Shall I unfreeze your card ending (\d{4})\?$")


_FROZE_CARD = re.compile(r"\bfrozen your \w+ card ending (\d{4})\b|\bcard ending (\d{4}) is frozen\b")


#: Cards' answer when the customer found the card before anything was frozen.
NOTHING_FROZEN = "Good to hear you found it! Nothing was frozen, so your cards work as before."


#: Cards' answer when a thread opens with the card found ("thanks, I found my lost card"): nothing to freeze.
FOUND_FIRST = ("Good to hear you found it! If you froze it, tell me its last four digits and I'll unfreeze it; "
               "otherwise it works as before.")


def found_card_offer(text: str, facts: dict[str, str], previous: str | None = None) -> str | None:
    """The cards agent's answer when the customer says they found the card this conversation froze (the packet's
    verified ``card_status`` frozen; the card's last four digits from ``card_last4`` or the desk's ``previous``
    answer that froze it) without asking for the unfreeze: it offers the unfreeze (:data:`UNFREEZE_OFFER`) and does
    nothing yet; when the ``previous`` answer only talked of a freeze and none was done, :data:`NOTHING_FROZEN`; on a
    new thread (no ``previous``), :data:`FOUND_FIRST`; None otherwise (``text`` lower-cased)."""
    if not _has(text, *_FOUND_CARD) or _has(text, *_UNFREEZE_ASKED):
        return None
    if facts.get("card_status") != "frozen":
        # "no wait, I found it" while the desk only asked which card to freeze: nothing was frozen
        asked_freeze = bool(previous) and "freeze" in str(previous) and not _FROZE_CARD.search(str(previous))
        return NOTHING_FROZEN if asked_freeze else FOUND_FIRST if not previous else None
    froze = _FROZE_CARD.search(previous or "")
    last4 = facts.get("card_last4") or (next(g for g in froze.groups() if g) if froze else None)
    if not last4:
        return None
    return (f"Good to hear you found it! Your card ending {last4} is still frozen, so nobody can pay with it. "
            + UNFREEZE_OFFER.format(last4=last4))


def leaning_text(user_text: str, previous: str | None) -> str:
    """``user_text`` with the subject the ``previous`` answer was about when the message reports that "it" failed
    and names nothing itself: "it failed" after the top-up how-to -> "my top-up failed" (so the handbook's
    top-up failure answer follows, not "nothing new"); after the identity check's how-to,
    "my identity verification failed". Unchanged otherwise."""
    from nodes.embedded.replies import reports_it_failed

    if not previous or not reports_it_failed(user_text):
        return user_text
    if re.search(r"\bverify your identity\b|\bidentity (?:check|verification)", previous, re.I):
        return "my identity verification failed"  # "it keeps failing" after the how-to of the identity check
    about = _subjects(previous.lower()) & {"top_up", "transfer"}
    if len(about) != 1:
        return user_text
    what = "was declined" if re.search(r"\bdeclined\b", user_text, re.I) else "failed"
    return f"my {'top-up' if 'top_up' in about else 'transfer'} {what}"


def resolve_intent(agent: str, user_text: str, hint: str | None = None) -> DeskIntent | None:
    """The desk intent of ``agent`` that ``user_text`` asks about (:meth:`DeskKnowledge.resolve`: the project's
    keyword patterns first, then ``hint``, the router's fine label, when it belongs to ``agent``), or None. A follow-up
    with no content of its own ("why?", ``nodes.embedded.replies.is_bare_follow_up``) takes no hint: the router's guess of
    its topic is noise."""
    from nodes.embedded.replies import is_bare_follow_up

    return load_knowledge().resolve(agent, user_text, None if is_bare_follow_up(user_text, strict=True) else hint)


def plan_tool_call(agent: str, user_text: str, facts: dict[str, str],
                   done_tools: list[str], hint: str | None = None, asked: str | None = None,
                   previous: str | None = None) -> ToolCallPlan | None:
    """The next tool the offline ``agent`` should call for ``user_text`` given ``facts`` (user-said and
    system-verified, see the module doc) and the tools already called this turn, or None when it has
    enough to answer. Never returns a tool in ``done_tools`` and never a tool of another agent; agents
    without business tools (triage, clarify, fallback, ...) always get None. ``hint``: the router's fine
    label for the text (used when no keyword pattern of the desk knowledge matches). ``asked``: the open question
    the agent's last answer on the thread asked (the packet's), which a plain yes answers. ``previous``: the desk's
    previous answer on the thread, which gives "it" its meaning: "can I raise it?" after a limit asks to raise the
    limit (policy looks up ``limit_changes``, any other agent answers it from the handbook without a tool), "and how
    long does it take?" after billing gave a transfer's price asks how long a transfer takes (no tool).

    Rules (keyword based, lower-cased text), safety and named records first, then the desk intent
    (:func:`resolve_intent`, ``nodes/data/desk_knowledge.json``): its tool with its fixed arguments, or no
    tool for a ``knowledge`` intent (the answer comes from the handbook text).
    billing: "twice/duplicate/double charge" -> find_duplicate_charges; a transaction id with
    "what/why/pending/declined/don't recognise" (or just an id) -> explain_transaction; then the intent's
    tool; no intent: fee words -> explain_fees, else list_recent_transactions. One tool, then answer.
    refunds: "where/status/not showing" or a known refund id -> refund_status; a wish to cancel a refund
    (:func:`cancels_refund`) -> check_refund_eligibility of the known payment and refund_status (the answer asks
    :data:`CANCEL_REFUND_OFFER` for a waiting refund, whose yes -> cancel_refund); a question about refunds
    (:func:`asks_about_refund`) never requests one; an explicit money-back request (:func:`asks_for_refund`) with
    a known transaction id -> request_refund (reason "duplicate charge" when the text says so); a plain yes
    (:func:`is_plain_yes`) -> request_refund only when ``asked`` is :data:`REFUND_OFFER` (a yes to anything else, such
    as after a cancelled refund, opens nothing), else no tool (the answer is :data:`PLAIN_YES_ANSWER`); but
    "refundable/eligible" -> check_refund_eligibility; a known
    transaction id otherwise -> check_refund_eligibility; nothing known -> refund_status (to show the
    open refunds and ask which transaction).
    cards: card_status first (except a knowledge intent or the delivery estimate); lost/stolen/fraud words or
    a ``freeze`` intent -> freeze_card(the card the customer named — card_ref or card_last4 — else the verified
    card_id; a named card is never replaced by another); "unfreeze/found my card" with the card's last four digits
    -> unfreeze_card (naming the card is the confirmation).
    transfers: a transfer id -> transfer_status, else the intent's tool (list_transfers) or none.
    account / policy: the intent's tool (account_profile, account_balance, request_operator_case,
    lookup_policy with its topic); no intent: account_profile / lookup_policy(best matching topic).
    """
    planner = _PLANNERS.get(agent)
    if planner is None:
        return None
    user_text = leaning_text(user_text, previous)
    text = user_text.lower()
    done = set(done_tools)
    intent = resolve_intent(agent, user_text, hint)

    def plan(name: str, **args: Any) -> ToolCallPlan | None:
        if name in done or name not in TOOLS or TOOLS[name].agent != agent:
            return None
        return ToolCallPlan(name, args)

    if raises_limit(text, previous):  # "can I raise it?" after a limit: the limits can't be raised (handbook)
        return plan("lookup_policy", topic=LIMIT_CHANGES) if agent == "policy" else None
    if _handbook_follow_up(agent, text, previous):
        return None  # "and how long does it take?" after a transfer's price: the handbook's transfer times; "how do
        # I unblock it?" after a PIN answer: the PIN how-to, not the card list again
    if agent == "refunds" and (_bare_yes(text) or (_CANCEL_REFUND_OFFERED.match(asked or "") and _cancel_yes(text))):
        return _refunds_yes_plan(text, facts, done, asked, plan)
    handled, replied = _cards_reply(text, asked, facts, done, plan) if agent == "cards" else (False, None)
    if handled:
        return replied
    handled, replied = _reply_to_question(agent, text, asked, facts, done, plan, previous)
    if handled:
        return replied
    if is_acknowledgement(text) or (agent in _NO_RECORD_TO_EXPLAIN and intent is None and _bare_follow_up(text)):
        # "ok" / "no" that answers no offer: no record is read again, no list shown again; "why?"
        # with no record to re-read: the agent asks what to explain (BARE_WHY_ANSWER)
        return None
    why = _bare_follow_up(text) and not how_to_answer(text, previous) and not (
        facts.keys() & {"transaction_id", "transfer_id", "refund_id"}) and (
        agent == "billing" or (agent in _PLANNERS and not listed_items_of(previous or "")))
    if not done and (why or how_to_answer(text, previous) or handbook_follow_up(agent, user_text, previous)):
        return _follow_up_plan(why, previous, plan)
    found = planner(text, facts, done, intent, plan)
    return _looking_further_back(found) if agent == "billing" else found


#: "how?", "how do I do it?", "so how do I do that?": the customer asks how to do what the last answer described.
_HOW_RE = re.compile(r"^\W*(?:(?:but|and|so|ok(?:ay)?)[,\s]+)?how(?: do i do (?:it|that)| can i do (?:it|that)| do i "
                     r"(?:do|get) (?:it|that) done)?\s*[?!.]*\s*$", re.I)
#: A sentence or clause of an answer that says how to do something ("… in the app under Cards", "open Payments …").
_HOW_TO_CLAUSE = re.compile(r"\bin the app\b|\bopen (?:Profile|Cards|Payments|Exchange|the app)\b|\bunder (?:Cards|Profile|"
                            r"Payments|Add money)\b|\bgo to\b", re.I)


def how_to_answer(user_text: str, previous: str | None) -> str | None:
    """The answer to "how?" / "how do I do it?" (``user_text``) from the desk's ``previous`` answer: after an offer to
    unfreeze a card, how to do it in the app or by a yes; else the clauses of that answer's first sentence that say how
    (in the app, which screen); None when it is no such question or the answer said no how."""
    if not previous or not _HOW_RE.match(user_text or ""):
        return None
    offered = re.search(r"\bShall I unfreeze your card ending (\d{4})\?", previous)
    if offered:
        return (f"You can unfreeze your card ending {offered.group(1)} yourself in the app under Cards, or just say "
                "yes and I'll do it for you now.")
    first = re.split(r"(?<=[.!?])\s+", previous.strip(), maxsplit=1)[0]  # the answer's lead, not a side remark
    steps = [c for c in _clauses(first) if _HOW_TO_CLAUSE.search(c)]
    if not steps:
        return None
    body = "; ".join(steps)
    return f"Here's how: {body[:1].lower() + body[1:]}."


def _follow_up_plan(why: bool, previous: str | None, plan: _Plan) -> ToolCallPlan | None:
    """The plan for a follow-up that leans on the ``previous`` answer: "why?" (``why``) after billing named one
    payment or fee explains that one (after a list it asks which one, after an answer naming no record any agent asks
    what to explain: no tool); "what about Switzerland?" after a handbook answer reads no records
    (:func:`handbook_follow_up`)."""
    listed = listed_items_of(previous or "", ("tx_",))
    return plan("explain_transaction", transaction_id=listed[0]) if why and len(listed) == 1 else None


def _reply_to_question(agent: str, text: str, asked: str | None, facts: dict[str, str], done: set[str],
                       plan: _Plan, previous: str | None = None) -> tuple[bool, ToolCallPlan | None]:
    """``(handled, plan)`` for a (lower-cased) reply to the agent's own question or offer: cards' freeze questions
    (:func:`_cards_reply_to_question`), a yes to account's :data:`CLOSE_ACCOUNT_ASKED` (the request is filed), and a
    wish to withdraw a request to our team (:func:`withdraws_account_request`); ``(False, None)`` otherwise."""
    if agent == "cards" and (meant := _cards_reply_to_question(text, asked, previous)) is not None:
        # the card named in the reply is the one acted on: its digits replace any card carried from earlier
        # ("8899" in reply to "which card?" freezes 8899, not the first active card verified before)
        return True, _plan_cards(meant, {**facts, **extract_facts(meant)}, done, None, plan)
    if agent == "account" and asked == CLOSE_ACCOUNT_ASKED and is_plain_yes(text):
        return True, plan("request_operator_case", kind="close_account")
    if agent == "account" and withdraws_account_request(text):
        kind = _request_kind_named(text)
        return True, plan("withdraw_operator_case", **({"kind": kind} if kind else {}))
    return False, None


_ORDER_ONE = re.compile(r"^\W*(?:(?:ok(?:ay)?|yes|great|then|please|can you|could you)[,\s]+)*(?:order|get|send)"
                        r"(?: me)? (?:one|it|that|a new one)\b", re.I)
_REPLACEMENT_IN_ANSWER = re.compile(r"\b(?:replacement|new card|replace card)\b", re.I)


def order_taken_up(user_text: str, previous: str | None) -> str:
    """Cards: "order one please" right after an answer about a replacement card (``previous``) asks to order a
    replacement card: that request in the desk's words, so the handbook's ``order_physical_card`` answer follows;
    ``user_text`` unchanged otherwise."""
    if _ORDER_ONE.search(user_text) and _REPLACEMENT_IN_ANSWER.search(previous or ""):
        return "order a replacement card"
    return user_text


def _handbook_follow_up(agent: str, text: str, previous: str | None) -> bool:
    """Is the (lower-cased) ``text`` a follow-up that ``agent`` answers from the handbook with no tool: billing's
    transfer times after a transfer's price (:func:`transfer_timing_answer`), cards' PIN how-to after a PIN answer
    (:func:`pin_follow_up_answer`)?"""
    if agent == "billing":
        return transfer_timing_answer(text, previous) is not None
    return agent == "cards" and pin_follow_up_answer(text, previous) is not None


def _refunds_yes_plan(text: str, facts: dict[str, str], done: set[str], asked: str | None,
                      plan: _Plan) -> ToolCallPlan | None:
    """Refunds' tool for a yes: a yes to :data:`CANCEL_REFUND_OFFER` (or a fresh cancel wish, :func:`_cancel_yes`)
    cancels that refund (the cancellation rules: asked, then confirmed); a yes to :data:`REFUND_OFFER` opens the
    request for the payment offered; any other yes opens nothing."""
    offered = _CANCEL_REFUND_OFFERED.match(asked or "")
    if offered and _cancel_yes(text):
        return None if done else plan("cancel_refund", refund_id=offered.group(1))
    tx_id = facts.get("transaction_id")
    if done or asked != REFUND_OFFER or not tx_id:
        return None  # a yes that answers no offer of refunds' opens nothing
    return plan("request_refund", transaction_id=tx_id, reason=_refund_reason(text))


def _cancel_yes(text: str) -> bool:
    """A (lower-cased) yes to refunds' cancel question: a plain yes, or the wish said again ("yes cancel it") with
    no negation (``policies.cancellation.confirmation``)."""
    from nodes.embedded.cancellation import confirmation

    return _bare_yes(text) or confirmation(text) == "yes"


def _cards_reply_to_question(text: str, asked: str | None, previous: str | None = None) -> str | None:
    """What the customer's (lower-cased) reply to a freeze question of cards asks, in their words, or None: "yes" to
    :data:`LOSS_QUESTION` reports the loss ("yes, i lost my card"); a card named in reply to :data:`FREEZE_WHICH`
    ("the one ending 4242", "8899") asks its freeze ("freeze card 8899"), and so does a card picked by its kind ("the
    virtual one") when the desk's ``previous`` answer listed exactly one usable card of that kind
    (:func:`card_of_kind`). A yes to the loss question after an answer that named several cards names none: it is
    "freeze it", which asks which card (:data:`FREEZE_WHICH`; README: cards asks when the answer named several)."""
    if not asked or _NOT.search(text):
        return None
    if asked.startswith(LOSS_ASKED) and _LOSS_YES.fullmatch(text.strip()):
        if len(set(_CARD_ENDING.findall(previous or ""))) > 1 and not _CARD_NAMED_RE.search(text):
            return "freeze it"  # the question followed a list of several cards: which one? (FREEZE_WHICH)
        return "yes, i lost my card"  # "yes" to "Has your card been lost or stolen …? If so, say so and I'll freeze it"
    if asked == FREEZE_ASKED and not _has(text, *_UNFREEZE):
        named = _CARD_NAMED_RE.search(text)
        digits = next((g for g in named.groups() if g), None) if named else card_of_kind(text, previous)
        if digits:
            return f"freeze card {digits}" if digits.isdigit() else f"freeze {digits}"
    return None


#: "card ending 4242": a card an answer names.
_CARD_ENDING = re.compile(r"\bcard ending (\d{4})\b")
#: "physical card ending 4242 is active": a card a card-status answer lists, with its kind and status.
_LISTED_CARD = re.compile(r"\b(virtual|physical) card ending (\d{4}) is (\w+)")


def card_of_kind(text: str, previous: str | None) -> str | None:
    """The last four digits of the card a (lower-cased) reply picks by its kind ("the virtual one", "my physical
    card") among the cards the desk's ``previous`` answer listed: the one card of that kind, or the one of them that
    is not blocked or expired; None when the reply names no kind, or none or several cards fit."""
    kind = _CARD_KIND_RE.search(text)
    if kind is None:
        return None
    listed = [(d, st) for k, d, st in _LISTED_CARD.findall(previous or "") if k == kind.group(1)]
    if len(listed) > 1:
        listed = [(d, st) for d, st in listed if st not in ("blocked", "expired")]
    return listed[0][0] if len(listed) == 1 else None


#: Agents whose "why?" has no record carried to re-read and explain (billing, refunds and transfers re-read theirs).
_NO_RECORD_TO_EXPLAIN = frozenset({"account", "policy", "cards"})
#: The answer to a "why?" / "what do you mean?" that the agent cannot tie to a record.
BARE_WHY_ANSWER = ("Could you tell me which part you'd like me to explain? For example the fee, the limit or the next "
                   "step, and I'll go through it.")


def _bare_follow_up(text: str) -> bool:
    from nodes.embedded.replies import is_bare_follow_up

    return is_bare_follow_up(text, strict=True)


def is_acknowledgement(text: str) -> bool:
    """A short "ok", "yes", "no", "alright", "got it" that asks for nothing itself (``text`` lower-cased): when the
    agent asked nothing, it is answered with :data:`PLAIN_YES_ANSWER` and no tool runs."""
    t = text.strip()
    return (_bare_yes(t) or is_plain_no(t) or bool(_ACK.fullmatch(t))) and len(t.split()) <= 4 \
        and not _has(t, *_CARD_FREEZE, *_UNFREEZE, *_FOUND_CARD)


_ACK = re.compile(r"(?:alright|all right|got it|understood|i see|fine|cool|great|perfect|noted)[ .!]*")


_Plan = Callable[..., "ToolCallPlan | None"]


def _intent_plan(intent: DeskIntent | None, plan: _Plan) -> ToolCallPlan | None:
    if intent is None or intent.tool is None:
        return None
    return plan(intent.tool, **intent.args)


def _plan_billing(text: str, facts: dict[str, str], done: set[str], intent: DeskIntent | None,
                  plan: _Plan) -> ToolCallPlan | None:
    if done or _fee_of_another_thing(text) or _price_question(text):
        return None  # "and for top-ups?" after a fee answer, "what's the fee for international transfers?": that
        # fee (compose_answer), not the transaction list or the fees already charged
    tx_id = facts.get("transaction_id")
    if tx_id and intent is not None and tx_id.lower() not in text and not _POINTS_BACK.search(text):
        tx_id = None  # a transaction carried from earlier does not hijack a new, recognised request ("why is *it*
        # pending?" asks about the carried one, not the whole list again)
    if _PICKS_BY_NAME.search(text) and not tx_id:
        return plan("list_recent_transactions", limit=_MERCHANT_LOOKBACK)  # "the Tesco one": looked for further back
    if _has(text, *_DUPLICATE):
        merchant = _named_merchant(text)
        return plan("find_duplicate_charges", **({"merchant": merchant} if merchant else {}))
    if tx_id and (_has(text, *_EXPLAIN) or not _has(text, *_FEES)):
        return plan("explain_transaction", transaction_id=tx_id)
    if intent is not None:
        return _intent_plan(intent, plan)
    if _has(text, *_FEES):
        return plan("explain_fees")
    return plan("list_recent_transactions", limit=5)


def _cards_reply(text: str, asked: str | None, facts: dict[str, str], done: set[str],
                 plan: _Plan) -> tuple[bool, ToolCallPlan | None]:
    """Cards' reply to its own last answer, ``(handled, plan)``: "no, the other card, the virtual one" after a freeze
    (``card_correction``) reads the customer's own cards, then freezes the one the correction describes
    (``nodes.offline_model`` sets ``card_corrected`` from that list; none when it describes none or several); a yes to
    the unfreeze the agent offered unfreezes that card. ``(False, None)`` for anything else."""
    if facts.get("card_correction"):
        return True, plan("card_status") or (plan("freeze_card", card_id=facts["card_corrected"])
                                             if facts.get("card_corrected") else None)
    offered = _UNFREEZE_OFFERED.match(asked or "")
    if offered and is_plain_yes(text) and "unfreeze_card" not in done:
        return True, plan("unfreeze_card", card_id=offered.group(1))
    return False, None


def _looking_further_back(found: ToolCallPlan | None) -> ToolCallPlan | None:
    """Billing's list of the latest payments reads :data:`_MERCHANT_LOOKBACK` of them, so a payment the customer
    names by merchant, amount or day ("a Tesco payment I don't recognise", 20 days old) is found among their own
    records (``nodes.embedded.understanding.entities.resolve_payments``); the answer still lists
    :data:`_LIST_SHOWN`."""
    if found is not None and found.name == "list_recent_transactions" and found.args.get("limit") == _LIST_SHOWN:
        return ToolCallPlan(found.name, {**found.args, "limit": _MERCHANT_LOOKBACK})
    return found


#: "charged twice at Tesco", "double charged by Uber": the merchant a duplicate-charge question names (lower case).
_MERCHANT_RE = re.compile(r"\b(?:at|by|from|with)\s+(?!(?:the|a|an|my|your|once|same|least|all|it|this|that|"
                          r"weekend|night|atm|an atm|the atm)\b)([a-z][a-z0-9&'.-]+(?:\s+[a-z][a-z0-9&'.-]+){0,2}?)"
                          r"\s*(?:[?.!,;]|$|\s+(?:on|yesterday|today|last|this|for|and|but|in)\b)")


#: A short question pointing back at the record just discussed: "why is it pending?", "what is that?".
_POINTS_BACK = re.compile(r"^(?=(?:\S+\s+){0,7}\S+\W*$).*\b(?:it|that|this|that one|this one)\b")


def _named_merchant(text: str) -> str | None:
    """The merchant named in a duplicate-charge question ("i was charged twice at tesco" -> "tesco"), or None."""
    m = _MERCHANT_RE.search(text)
    return m.group(1).strip() if m else None


def _plan_refunds(text: str, facts: dict[str, str], done: set[str], intent: DeskIntent | None,
                  plan: _Plan) -> ToolCallPlan | None:
    if done & {"request_refund", "refund_status", "check_refund_eligibility"}:
        return _plan_refunds_after(text, facts, done, plan)
    tx_id = facts.get("transaction_id")
    if _PICKS_BY_NAME.search(text) and not _TX_IN_TEXT.search(text):
        # "and the Amazon one?": refunds cannot look payments up by merchant, but its refunds name theirs; a payment
        # with no refund of the customer's gets the question for its id (never the transaction carried from earlier)
        return plan("refund_status")
    if tx_id and _TX_IN_TEXT.search(text) and _has(text, *_REFUND_TIMING) and not _has(text, r"\brf_\w+"):
        # "how long do refunds take? asking about tx_1001": that payment and the refund times, not another refund
        return plan("check_refund_eligibility", transaction_id=tx_id)
    wants_status = _has(text, *_REFUND_WHERE) and not _has(text, *_DUPLICATE)
    if wants_status and _has(text, r"\b(?:other|all|my) refunds\b"):
        return plan("refund_status")  # every refund, not only the one carried from earlier
    if wants_status and _status_of_payment(text):
        return plan("refund_status")  # "refund status for tx_1008?": that payment's refunds (then its eligibility)
    if facts.get("refund_id") and (wants_status or not tx_id or facts["refund_id"].lower() in text):
        # a refund the customer names ("rf_5001") is the one read, not the transaction carried from earlier
        return plan("refund_status", refund_id=facts["refund_id"])
    if wants_status:
        return plan("refund_status")
    return _plan_refund_wish(text, tx_id, plan)


#: A question about one of the customer's own refunds ("what happened to my amazon refund?", "why was the refund
#: rejected?"), not about refunds in general.
_OWN_REFUND = (r"\b(?:my|the|that|this|our)\b(?:\s+[\w'-]+){0,2}?\s+refund\b(?!\s+(?:polic|rules?|process))",
               r"\brf_\w+", r"\b(?:rejected|declined|refused|turned down|approved|cancelled|expired)\b")


def _plan_refunds_after(text: str, facts: dict[str, str], done: set[str], plan: _Plan) -> ToolCallPlan | None:
    """Refunds' next tool after one of its refund tools ran this turn: one settles the turn, except a cancel wish about
    the payment carried from earlier (its eligibility, then the refunds to cancel) and a positive eligibility check of
    a payment the customer explicitly asked money back for (the request)."""
    if cancels_refund(text) and "check_refund_eligibility" in done and "refund_status" not in done:
        return plan("refund_status")
    if (payment := _status_of_payment(text)) and done == {"refund_status"} and _has(text, *_REFUND_WHERE):
        return plan("check_refund_eligibility", transaction_id=payment)  # whether one can be opened, if none exists
    if ("check_refund_eligibility" in done and facts.get("refund_eligible") == "yes"
            and asks_for_refund(text) and facts.get("transaction_id")):
        return plan("request_refund", transaction_id=facts["transaction_id"], reason=_refund_reason(text))
    return None


def _status_of_payment(text: str) -> str | None:
    """The one transaction id a (lower-cased) refund status question names ("refund status for tx_1008?", "where's my
    refund for tx_1001?") when it names no refund id, else None: the answer is that payment's refund, or that it has
    none."""
    named = set(_TX_IN_TEXT.findall(text))
    return named.pop() if len(named) == 1 and not _has(text, r"\brf_\w+") else None


def _refund_status_of_payment(text: str, tool_results: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Refunds' answer to a status question naming one payment (:func:`_status_of_payment`) after it read the
    refunds and that payment's eligibility: the payment's own refunds, or that it has none followed by its eligibility
    (the offer as a question when it can be refunded); never another payment's refund. None for any other turn."""
    results = dict(tool_results)
    payment = _status_of_payment(text)
    if not payment or [n for n, _ in tool_results] != ["refund_status", "check_refund_eligibility"]:
        return None
    hits = [rf for rf in results["refund_status"].get("refunds") or [] if rf.get("transaction_id") == payment]
    if hits:
        return _render_refund_status({"refunds": hits}, text)
    eligibility = results["check_refund_eligibility"]
    said = _render("check_refund_eligibility", eligibility, text)
    return f"There's no refund for {payment}. {said}" if eligibility.get("ok") else said  # no such payment: the refusal


def _plan_refund_wish(text: str, tx_id: str | None, plan: _Plan) -> ToolCallPlan | None:
    """Refunds' tool for a message that asks no status: a cancel wish opens nothing (neither a refund of the
    payment carried from earlier nor of the refunds to cancel); a question about refunds gets the payment's
    eligibility (and the offer as a question) or, with no payment known, the refund rules (no tool); only an explicit
    request for money back (:func:`asks_for_refund`, or a duplicate charge reported to refunds) opens a refund of the
    known payment."""
    if cancels_refund(text):
        return plan("check_refund_eligibility", transaction_id=tx_id) if tx_id else plan("refund_status")
    if refuses_refund(text):
        return None  # "I don't want a refund for tx_1008": nothing to look up, nothing to offer (REFUSED_ANSWER)
    if not tx_id:  # "what happened to my amazon refund?" asks about the customer's refunds; "is a refund possible?"
        # the rules
        return None if asks_about_refund(text) and not _has(text, *_OWN_REFUND) else plan("refund_status")
    if asks_for_refund(text) or (_has(text, *_DUPLICATE) and not declines_refund(text) and not asks_about_refund(text)
                                 and not _has(text, *_ELIGIBILITY)):
        return plan("request_refund", transaction_id=tx_id, reason=_refund_reason(text))
    return plan("check_refund_eligibility", transaction_id=tx_id)  # eligibility, a refusal or a question: no request


#: "the Tesco one", "that Amazon one", "and the Amazon one?": a payment picked by its merchant (not by position: "the
#: first one"); group ``name``: the merchant's words.
_PICKS_BY_NAME = re.compile(r"^\W*(?:(?:and|also|what about|how about)\s+)?(?:the|that)\s+(?!(?:first|second|third|"
                            r"last|other|same|latest|top|bottom|virtual|physical)\b)"
                            r"(?P<name>[a-z][\w&'.-]*(?:\s+[a-z][\w&'.-]*)?)\s+one\b")
#: "how long do refunds take?": a question about the time a refund takes.
_REFUND_TIMING = (r"\bhow long\b", r"\bhow (?:quick|quickly|fast|soon)\b")
_TX_IN_TEXT = re.compile(r"\btx_\w+\b")
#: Refunds' answer to a payment picked by its merchant (refunds has no tool that lists payments).
REFUND_WHICH_BY_ID = ("I can't look payments up by merchant here. Please give the transaction's id (such as tx_1234); "
                      "if you don't have it, ask me to show your recent transactions.")
#: Refunds' offer after a positive eligibility check; a plain yes to it opens the request (through eligibility and risk).
REFUND_OFFER = "Shall I open a refund request for it?"
#: Refunds' answer to a plain yes that answers none of its offers (nothing is opened); every specialist's answer to an
#: "ok" that answers no offer of its own.
PLAIN_YES_ANSWER = "Okay! Is there anything else I can help you with?"
#: The question of :data:`PLAIN_YES_ANSWER` (and of the desk's answer to thanks).
ANYTHING_ELSE = "Is there anything else I can help you with?"
#: The answer to a "no" to a question or offer other than :data:`ANYTHING_ELSE` (nothing is done; the new question
#: replaces the declined one, so a later "ok" opens nothing).
DECLINED_ANSWER = f"All right, I've left it as it is. {ANYTHING_ELSE}"
#: The answer to a yes to :data:`ANYTHING_ELSE`.
WHAT_ELSE_ANSWER = "Sure, what else can I help you with?"
#: A specialist's answer to a plain "no" that answers no offer of its own (nothing is done).
PLAIN_NO_ANSWER = "All right. If anything else comes up, just write here."

#: A yes: "yes", "ok do it", "please go ahead", "sure, please do", "go for it" ("ok do it" to the offer to refund the
#: duplicate is a yes).
_YES = re.compile(r"(?:please\s+)?(?:yes|yeah|yep|sure|ok(?:ay)?|alright|absolutely|of course|please do|go ahead|"
                  r"go for it|do it|do that)\b[\w ,.!']{0,40}")
_NOT = re.compile(r"\b(?:no|not|don'?t|never)\b")


def _bare_yes(text: str) -> bool:
    """A plain yes that asks for nothing itself ("yes please, I want my money back" is a refund request)."""
    return is_plain_yes(text) and not _has(text, *_MONEY_BACK) and not _has(text, *_DUPLICATE)


def is_plain_yes(text: str) -> bool:
    """A short affirmative reply ("yes", "yes please", "sure, go ahead") without a negation, and not a question after
    an acknowledgement ("ok what's my balance" asks for the balance); ``text`` lowercased."""
    t = text.strip()
    return bool(_YES.fullmatch(t)) and not _NOT.search(t) and not _ACK_THEN_ASKS.match(t)


#: "ok what's my balance", "yes how long does it take?", "no, why?": a yes/no word, then a question of its own.
_ACK_THEN_ASKS = re.compile(r"\W*(?:yes|yeah|yep|sure|ok(?:ay)?|no|nope|nah|alright|right)\b[,.!]?\s+(?:what|what'?s|whats|"
                            r"how|why|when|where|which|who|is|are|do(?!\s+(?:it|that|so)\b)|does|did)\b")


_NO = re.compile(r"(?:no|nope|nah|no thanks?|not now|don'?t|leave it)\b[\w ,.!']{0,40}")


def is_plain_no(text: str) -> bool:
    """A short negative reply ("no", "no thanks", "leave it"); ``text`` lowercased."""
    return bool(_NO.fullmatch(text.strip())) and not _ACK_THEN_ASKS.match(text.strip())


def reports_card_loss(text: str) -> bool:
    """Does the customer's own ``text`` (lowercased) report a lost, stolen, compromised or swallowed card: the freeze
    words of :data:`_CARD_FREEZE` or the keyword patterns of a ``freeze`` intent of the desk knowledge? The router's
    guess alone never counts: a freeze is a side effect, and "what's my card limit?" routed to lost_or_stolen_card at
    0.51 froze a card."""
    if _has(text, *_CARD_FREEZE):
        return True
    by_patterns = load_knowledge().resolve("cards", text)  # patterns only, no hint
    if by_patterns is not None and by_patterns.kind == "freeze":
        return True
    from nodes.embedded.understanding.reading import reports_foreign_loss

    return reports_foreign_loss(text)


#: The words of an actual loss in :data:`_CARD_FREEZE` (all but the action's own words, "freeze" and "block").
_LOSS_WORDS = tuple(p for p in _CARD_FREEZE if "freeze" not in p and "block" not in p)
#: Cards' answer to a question whether to freeze a card (:func:`asks_whether_to_freeze`): advice, no freeze.
FREEZE_ADVICE = ("Freezing your card stops new card payments at once, and you can unfreeze it any time in the app. If "
                 "your card is lost or stolen, or you see a payment you didn't make, freezing it is the safe choice: "
                 "say 'freeze my card' and I'll do it right away.")


def asks_whether_to_freeze(text: str) -> bool:
    """Is ``text`` a question about freezing or unfreezing a card ("should i freeze my card just in case?", "if I find
    it, can I unfreeze it myself?": the dialogue act ``question``,
    ``nodes.embedded.understanding.reading.asks_before_acting``) that reports no loss, or a question about a loss that
    has not happened ("what should I do if my card gets stolen?")? It is answered (:data:`FREEZE_ADVICE`), never acted
    on; "I lost my card, should I freeze it?" reports a loss and is frozen (safety first)."""
    from nodes.embedded.understanding.reading import asks_before_acting

    lowered = (text or "").lower()
    words = set(lowered.replace("?", " ").replace(",", " ").split())
    # the action itself, not a status ("is my card blocked?", "how do I unblock my PIN?" is the PIN's how-to)
    acting = words & {"freeze", "freezing", "block", "blocking", "unfreeze", "unfreezing"}
    loss = _has(lowered, *_LOSS_WORDS)
    if loss and "if" not in words or not (acting or loss):
        return False
    return asks_before_acting(text)


#: Cards' question when the router guessed a lost or stolen card but the customer said nothing of the kind.
LOSS_QUESTION = ("Has your card been lost or stolen, or do you think someone else used it? If so, say so and I'll "
                 "freeze it right away.")
#: The question of :data:`LOSS_QUESTION` (as ``nodes.embedded.replies.open_question_of`` finds it in the answer).
LOSS_ASKED = LOSS_QUESTION.split("?")[0] + "?"
#: A yes to :data:`LOSS_QUESTION` that confirms the loss ("yes", "it was", "go ahead, freeze it"); a bare "ok" or "sure"
#: freezes nothing (a freeze is a side effect; the question was asked on the router's guess).
_LOSS_YES = re.compile(r"(?:yes|yeah|yep|yup|it (?:was|has|is)|please do|go ahead|do it|freeze it)\b[\w ,.!']{0,40}")


def _lists_cards(text: str) -> bool:
    """Does the customer ask for their list of cards ("which cards do I have?", ``nodes.embedded.replies.lists_records_of``)?"""
    from nodes.embedded.replies import lists_records_of

    return lists_records_of(text) == "cards"


def _plan_cards(text: str, facts: dict[str, str], done: set[str], intent: DeskIntent | None,
                plan: _Plan) -> ToolCallPlan | None:
    # "thanks, I found my lost card" reports the card back, not a loss: nothing is frozen for it
    wants_freeze = reports_card_loss(text) and not _has(text, *_FOUND_CARD)
    wants_unfreeze = _has(text, *_UNFREEZE) and not _has(text, r"\b(?:lost|stolen|compromis|fraud)")
    if _names_card_only(text) or _lists_cards(text):
        intent = None  # "it's the one ending 4242": the card the customer means, not the router's guess of a topic;
        # "which cards do I have?": the card list (the router reads a spare-card question into it)
    if not (wants_freeze or wants_unfreeze) and (_policy_question(text) or _fee_or_limit_of_another_thing(text)) \
            and load_knowledge().resolve("cards", text) is None:
        return None  # "and my card limit?": the desk's limits (compose_answer), not the card list and a loss question
    if not (wants_freeze or wants_unfreeze) and intent is not None and intent.tool != "card_status" \
            and intent.kind != "freeze":  # a guessed loss: the card list and a question (LOSS_QUESTION), no freeze
        return _intent_plan(intent, plan)
    if "card_status" not in done:
        return plan("card_status")
    named = _CARD_NAMED_RE.search(text)
    if named and facts.get("card_status") == "frozen" and not (wants_freeze or wants_unfreeze) \
            and "freeze_card" not in done and (intent is None or intent.tool == "card_status"):
        # "it's the one ending 4242" after this conversation froze a card: the card the customer named is the lost
        # one; freezing it confirms it (already frozen) or freezes the right one (the customer corrects the guess)
        return plan("freeze_card", card_id=next(g for g in named.groups() if g))
    if wants_unfreeze and facts.get("card_last4"):
        return plan("unfreeze_card", card_id=facts["card_last4"])
    if wants_unfreeze and facts.get("card_status") == "frozen" and facts.get("card_id") and _has(text, r"\bit\b"):
        # "I found it, please unfreeze it" right after the freeze: "it" is the card this conversation froze (a
        # verified fact carried in the packet), not a question back
        return plan("unfreeze_card", card_id=facts["card_id"])
    if wants_freeze and not wants_unfreeze and "freeze_card" not in done:
        # the card the customer named, exactly (card_ref / last four); the verified card only when they named none
        # and reported a loss: a bare "freeze it" freezes the card the conversation meant (card_last4, set by the
        # offline model from the previous answer) or none, and asks (FREEZE_WHICH)
        kind = loss_card_kind(text)
        # a card named by its kind ("my virtual card was stolen") is that card, never the physical default;
        # none usable of that kind: no freeze, cards asks which card
        by_kind = facts.get(f"card_id_{kind}") if kind else None
        target = facts.get("card_ref") or facts.get("card_last4") or by_kind or (
            None if _bare_card_action(text) or kind else facts.get("card_id"))
        if target:
            return plan("freeze_card", card_id=target)
    return None


#: The customer names one card in their message: its last four digits or its id.
_CARD_NAMED_RE = re.compile(r"\b(?:ending|ends|last (?:four|4)(?: digits)?|card)\D{0,12}(\d{4})\b|\b(card_[a-z0-9_]+)\b|"
                            r"^\D*\b(\d{4})\b\D*$")


#: "virtual card", "physical one", "virtual debit card": a card's kind named in a message.
_KIND_NAMED_RE = re.compile(r"\b(virtual|physical)\s+(?:debit\s+|credit\s+|bank\s+)?(?:card|one)s?\b")


def loss_card_kind(text: str) -> str | None:
    """The kind ("virtual" or "physical") of the card the (lower-cased) ``text`` names ("I lost my virtual card",
    "someone stole my virtual card details"), or None when it names no kind or both."""
    kinds = {m.group(1) for m in _KIND_NAMED_RE.finditer(text)}
    return kinds.pop() if len(kinds) == 1 else None


#: "the virtual one", "my physical one": a card picked by its kind.
_CARD_KIND_RE = re.compile(r"^\W*(?:(?:it'?s|it is|and)\s+)?(?:the|my)\s+(virtual|physical)\s+(?:one|card)\b")


#: A card named by its last four digits with a word that says so ("the one ending 8899", "last four 4242").
CARD_ENDING_RE = re.compile(r"\b(?:ending|ends (?:in|with)|last (?:four|4)(?: digits)?)\D{0,12}\d{4}\b", re.I)


def names_card_by_ending(text: str) -> bool:
    """Does ``text`` name one card by its last four digits (:data:`CARD_ENDING_RE`) and nothing else the cards
    intents recognise, in at most 8 words ("actually it's the one ending 8899")?  A card correction is the cards team's
    whoever holds the conversation (also when policy answered the last question)."""
    return bool(CARD_ENDING_RE.search(text or "")) and _names_card_only((text or "").lower())


def _names_card_only(text: str) -> bool:
    """Does the (lower-cased) ``text`` only name a card ("it's the one ending 4242", "4242", "the virtual one"): a
    card named in at most 8 words that no cards intent of the desk knowledge recognises by its own patterns?"""
    return bool(_CARD_NAMED_RE.search(text) or _CARD_KIND_RE.search(text)) and len(text.split()) <= 8 \
        and load_knowledge().resolve("cards", text) is None


#: Specialists without the policy tool that answer a fee or limit question from the policy knowledge themselves, with
#: the subject a question naming none is about ("how much does it cost?" to transfers: a transfer).
_WITHOUT_POLICY_TOOL: dict[str, str | None] = {"transfers": "transfer", "cards": None}


def _fee_or_limit_of_another_thing(text: str) -> bool:
    """An "and for X?" fragment about something the fee schedule or the limits list (ATM withdrawals, top-ups, …):
    the previous question asked again about X, never the status of a record carried from earlier."""
    from nodes.embedded.replies import asks_same_for

    return asks_same_for(text) and bool(_subjects(text) - {"weekday", "weekend", "balance"})


#: A question about the price of a service ("what's the fee for international transfers?", "how much does a top-up
#: cost?"), as opposed to a question about a fee already charged ("why was I charged a fee?", "what is this fee on my
#: account?"): BANKING77's billing intents (``transfer_fee_charged``, ``exchange_charge``, …) are the charged kind,
#: and the router also gives billing the price questions.
_PRICE_ASK = (r"\bwhat(?:'s| is| are| will be)\b", r"\bhow much\b", r"\bis there an? (?:fee|charge|cost)\b",
              r"\bdo (?:you|i have to) (?:charge|pay)\b", r"\bdoes it cost\b")
_CHARGED_ALREADY = (r"\bcharged\b", r"\bwhy\b", r"\bwas i\b", r"\bhave i been\b", r"\bdid (?:i|you)\b",
                    r"\b(?:this|that) (?:fee|charge)\b", r"\bmy (?:account|statement|transactions?|payments?)\b",
                    r"\btx_\w+", r"\bextra\b", r"\btwice\b", r"\bduplicate\b")


def _price_question(text: str) -> bool:
    """Billing: does the (lower-cased) ``text`` ask the price of a service (:data:`_PRICE_ASK` with a fee or cost
    word) or a limit ("and the limit for transfers?"), rather than about a fee already charged
    (:data:`_CHARGED_ALREADY`)? Then billing answers from the desk's fee schedule and limits, like a specialist
    without the policy tool."""
    if _has(text, *_CHARGED_ALREADY) or load_knowledge().resolve("billing", text) is not None:
        return False  # a fee already charged, or a billing intent of its own ("a fee to convert pounds": exchange)
    return (_has(text, *_FEES, *_COST) and _has(text, *_PRICE_ASK)) or _has(text, r"\blimits?\b", r"\bmaximum\b")


def _fee_of_another_thing(text: str) -> bool:
    """Billing: an "and for X?" fragment (``nodes.embedded.replies.asks_same_for``) about something the fee schedule lists
    (ATM withdrawals, top-ups, transfers, card payments, exchange) that no billing intent recognises by its own
    patterns: billing answers charges and fees, so it asks that fee ("and for top-ups?" gets the top-up
    fee, not the list of transactions)."""
    return _fee_or_limit_of_another_thing(text) and load_knowledge().resolve("billing", text) is None


def _plan_transfers(text: str, facts: dict[str, str], done: set[str], intent: DeskIntent | None,
                    plan: _Plan) -> ToolCallPlan | None:
    if done:
        return None
    if (_policy_question(text) or _fee_or_limit_of_another_thing(text)) and not _TRANSFER_ID_RE.search(text):
        # "what's the fee for international transfers?": the desk's fee, not the status of the transfer carried from
        # an earlier turn (a carried id never overrides what the new message asks; compose_answer gives the fee)
        return None
    if _lists_transfers(text):
        return plan("list_transfers")  # "show my transfers": the list, whatever transfer was carried or guessed
    if facts.get("transfer_id"):
        return plan("transfer_status", transfer_id=facts["transfer_id"])
    intent = transfers_intent(text, intent)
    if intent is not None:
        return _intent_plan(intent, plan)
    return plan("list_transfers")


_TRANSFER_ID_RE = re.compile(r"\btr_[a-z0-9]+\b")
#: "show my transfers", "list my payments", "my recent transfers": the customer asks for the list.
_LIST_TRANSFERS = (r"\b(?:show|list|see|view|check)\b.{0,20}\b(?:transfers|payments i (?:sent|made))\b",
                   r"^\W*(?:my )?(?:recent |last |latest )?transfers\W*$")
#: "how long does it take?", "when will it arrive?": a timing question (without a transfer to read: the handbook's).
_TIMING = (r"\bhow long\b", r"\bhow (?:quick|quickly|fast)\b", r"\bwhen will (?:it|the money|my money) (?:arrive|get)")


def _lists_transfers(text: str) -> bool:
    """"show my transfers", "what transfers have I made?": the (lower-cased) ``text`` asks for the list of transfers."""
    from nodes.embedded.replies import lists_records_of

    return _has(text, *_LIST_TRANSFERS) or lists_records_of(text) == "transfers"


def transfers_intent(text: str, intent: DeskIntent | None) -> DeskIntent | None:
    """The transfers intent of the (lower-cased) ``text``: none for a request to list the transfers ("show my
    transfers": the router's guess of another transfers topic is dropped), the handbook's ``transfer_timing`` for a
    timing question ("and how long does it take?"), else ``intent``."""
    if _lists_transfers(text):
        return None
    if intent is None and _has(text, *_CANCEL_WORDS) and "cancel_transfer" in load_knowledge().intents:
        return load_knowledge().intents["cancel_transfer"]  # "cancel it" after the list: which ones can be cancelled
    timing = load_knowledge().intents.get("transfer_timing")
    if timing is not None and _has(text, *_TIMING) and (intent is None or intent.tool is None):
        return timing
    return intent


def _plan_account(text: str, facts: dict[str, str], done: set[str], intent: DeskIntent | None,
                  plan: _Plan) -> ToolCallPlan | None:
    if _UNFREEZE_ACCOUNT.search(text):
        return plan("request_operator_case", kind="unfreeze_account")  # its own request, never the freeze
    if intent is not None and intent.args.get("kind") == "close_account":
        return None  # closing is asked first (CLOSE_ACCOUNT_ASKED); the yes to that files the request
    if intent is not None:
        return _intent_plan(intent, plan)
    if _has(text, *_CANCEL_WORDS, r"\bchanged my mind\b") or _has(text, *_TIMING):
        return None  # "cancel that" (ACCOUNT_CANCEL_ANSWER) or "how long does it take?" (the checks' time), no profile
    if _has(text, _CURRENCY_WORDS):
        return plan("account_balance")  # "and in euros?" after the balance: the balance per currency
    return plan("account_profile")


#: A currency named in a message ("and in euros?").
_CURRENCY_WORDS = (r"\b(?:euros?|dollars?|pounds?|francs?|zloty|kronor|krone|yen|eur|usd|gbp|chf|currenc\w*|baht|rupees?|yuan|"
                   r"renminbi|pesos?|lira|rand|dirhams?|roubles?|rubles?|forints?|koruna|krona|lei|leu)\b")
#: Currency words of a question -> ISO code (the currencies of ``nodes.tools.POLICY_KB["currencies"]`` people name).
_CURRENCY_CODES = {"euro": "EUR", "eur\\b": "EUR", "dollar": "USD", "usd": "USD", "pound": "GBP", "gbp": "GBP",
                   "franc": "CHF", "chf": "CHF", "yen": "JPY", "jpy": "JPY", "zloty": "PLN", "pln": "PLN",
                   "baht": "THB", "rupee": "INR", "yuan": "CNY", "renminbi": "CNY", "peso": "MXN", "lira": "TRY",
                   "rand": "ZAR", "dirham": "AED", "rouble": "RUB", "ruble": "RUB", "forint": "HUF", "koruna": "CZK",
                   "krona": "SEK", "lei": "RON", "leu": "RON"}
#: The account agent's question before a closure request goes to our team ("I want to close my
#: account" files nothing yet); only a plain yes to it files the request.
CLOSE_ACCOUNT_ASKED = "Shall I pass your request to close your account to our team?"
CLOSE_ACCOUNT_QUESTION = ("Closing your account ends all its cards and payments; our team finishes it once the balance "
                          f"is zero. {CLOSE_ACCOUNT_ASKED}")
#: "unfreeze / unlock my account": a request of its own (the team lifts an account freeze), never the freeze.
_UNFREEZE_ACCOUNT = re.compile(r"\b(?:unfreeze|un-freeze|unlock|unblock|unsuspend|reactivate|reopen)\b[\w ]{0,12}"
                               r"\baccount\b")
#: A wish to withdraw a request to the team: "cancel the closure", "I changed my mind, don't close my account".
_WITHDRAW_RE = re.compile(r"\b(?:cancel|withdraw|stop|undo|call off|revoke)\b[\w ,']{0,30}\b(?:clos(?:ure|ing|e)|"
                          r"freez(?:e|ing)|unfreez(?:e|ing)|request|that|it)\b|\bchanged my mind\b|"
                          r"\b(?:don'?t|do not|no longer want to)\b[\w ]{0,12}\b(?:close|freeze|unfreeze)\b[\w ]{0,6}"
                          r"\baccount\b|\bkeep my account\b")


def withdraws_account_request(text: str) -> bool:
    """Does the (lower-cased) message ask to withdraw a request to our team ("no, cancel the closure", "I changed my
    mind", "don't close my account")? Questions about cancelling ("can I cancel it later?") do not."""
    t = text.strip()
    return bool(_WITHDRAW_RE.search(t)) and not re.match(r"(?:can|could|what|how|will|would|if)\b", t)


def _request_kind_named(text: str) -> str | None:
    """The kind of request a withdraw wish names ("cancel the closure" -> close_account), or None."""
    if re.search(r"\bunfreez", text):
        return "unfreeze_account"
    if re.search(r"\bfreez", text):
        return "freeze_account"
    if re.search(r"\bclos", text):
        return "close_account"
    return None


def _plan_policy(text: str, facts: dict[str, str], done: set[str], intent: DeskIntent | None,
                 plan: _Plan) -> ToolCallPlan | None:
    same_for = _same_question_topic(text, facts.get("policy_topic")) or _opener_topic(text, facts.get("policy_topic"))
    if same_for is not None:  # "and for ATM withdrawals?" after a fee answer: the fee of ATM withdrawals
        return plan("lookup_policy", topic=same_for)
    if _has(text, *_LIMIT_ASK) and _subjects(text) & _LIMITED and (intent is None or intent.args.get("topic") != "limits"):
        return plan("lookup_policy", topic="limits")  # "what's the daily ATM withdrawal limit?": the limit, not ATM facts
    if intent is not None and intent.args.get("topic") == "atm" and _has(text, *_FEES, *_COST) \
            and not _has(text, r"\boperators?\b"):
        return plan("lookup_policy", topic="international_fees" if _has(text, _ABROAD) else "fees")  # the ATM fee
    if intent is not None and intent.tool == "lookup_policy":
        return plan("lookup_policy", **intent.args)
    topic = match_policy_topic(text)
    if topic is None and facts.get("policy_topic") and len(text.split()) <= 6:
        topic = facts["policy_topic"]  # "what about Switzerland?" after the countries answer: the same topic
    return plan("lookup_policy", topic=topic or text.strip()[:200] or "fees")


#: A question about a limit ("what's the daily ATM withdrawal limit?", "how much can I withdraw a day?").
_LIMIT_ASK = (r"\blimits?\b", r"\bmaximum\b", r"\bmax\b", r"\bhow much can i\b", r"\bper day\b", r"\ba day\b")
#: The subjects of :data:`_SUBJECTS` the desk's daily limits list (``nodes.tools.POLICY_KB["limits"]``).
_LIMITED = frozenset({"atm", "transfer", "top_up", "card_payment", "balance"})
_ABROAD = r"\b(?:international|abroad|overseas|foreign)\b"
#: What a fee, limit or timing question can be about, and the project's patterns that recognise it in a question and
#: in a sentence of the handbook (``nodes.tools.POLICY_KB``): "and for ATM withdrawals?" is about ``atm``.
_SUBJECTS: dict[str, tuple[str, ...]] = {
    "atm": (r"\batms?\b", r"\bcash (?:machine|withdrawal)", r"\bwithdraw", r"\b(?:taking|take|get|getting) cash\b",
            r"\bcash ?out\b", r"\bcashpoint"),
    "transfer": (r"\b(?<!bank )transfers?\b", r"\bsend(?:ing)? money\b", r"\bswift\b", r"\bsepa\b"),
    "other_card": (r"\bcredit cards?\b", r"\bnon-uk cards?\b", r"\bforeign cards?\b", r"\bdebit cards?\b"),
    "top_up": (r"\btop(?:ping)?[- ]?ups?\b", r"\badd(?:ing)? money\b"),
    "card_payment": (r"\bcard payments?\b", r"\bpaying by card\b", r"\bpurchases?\b", r"\bshopping\b",
                     r"\bcard limits?\b", r"\bspend(?:ing)? limit"),
    "exchange": (r"\bexchang", r"\bforeign[- ]currency\b", r"\bconver"),
    "replacement": (r"\breplacement\b", r"\bnew card\b"),
    "disposable": (r"\bdisposable\b",),
    "balance": (r"\bbalance\b",),
    "weekday": (r"\bweekdays?\b", r"\bduring the week\b"),
    "weekend": (r"\bweekends?\b", r"\bsaturday|\bsunday"),
}
#: Handbook topics that list several items (one sentence or clause each): a question about one item gets that item.
_LIST_TOPICS = frozenset({"fees", "international_fees", "limits"})
#: Topics of one question domain, in the order an "and for X?" fragment looks for X in them (the topic that answered
#: the previous question first): fees abroad fall back to the general fee schedule, and the other way round.
_SAME_DOMAIN: dict[str, tuple[str, ...]] = {
    "fees": ("fees", "international_fees"), "international_fees": ("international_fees", "fees"),
    "limits": ("limits",), "transfer_times": ("transfer_times",), "exchange_rates": ("exchange_rates", "fees"),
}
#: Words that give an "and for X?" fragment a question of its own ("and what's the limit?"): then it is not the same
#: question again.
_OWN_ASPECT = (r"\bfees?\b", r"\bcosts?\b", r"\bcharge", r"\blimits?\b", r"\bmaximum\b", r"\bhow long\b",
               r"\brates?\b")


def _subjects(text: str) -> set[str]:
    """The :data:`_SUBJECTS` a (lower-cased) text is about."""
    return {k for k, pats in _SUBJECTS.items() if _has(text, *pats)}


def _clauses(policy_text: str) -> list[str]:
    """A handbook text cut into its items: sentences, then the parts of a sentence separated by ``;``."""
    return [c.strip().rstrip(".") for s in re.split(r"(?<=\.)\s+", policy_text) for c in s.split(";") if c.strip()]


def _same_question_topic(text: str, previous_topic: str | None) -> str | None:
    """The handbook topic of an "and for X?" fragment (``nodes.embedded.replies.asks_same_for``) after policy answered
    ``previous_topic``: the first topic of its domain (:data:`_SAME_DOMAIN`) that has an item about X; None when the
    text is no such fragment, asks something of its own (:data:`_OWN_ASPECT`) or no topic of the domain covers X."""
    from nodes.embedded.replies import asks_same_for
    from nodes.tools import POLICY_KB

    if not previous_topic or not asks_same_for(text) or _has(text, *_OWN_ASPECT):
        return None
    wanted = _subjects(text)
    for topic in _SAME_DOMAIN.get(previous_topic, (previous_topic,)):
        entry = POLICY_KB.get(topic)
        if entry is not None and (not wanted or any(wanted & _subjects(c.lower()) for c in _clauses(entry.text))):
            return topic
    return None


def _opener_topic(text: str, previous_topic: str | None) -> str | None:
    """``previous_topic`` for a follow-up opener (``nodes.embedded.replies.opens_follow_up``) that names no subject, intent or
    policy topic of its own ("and Swiss francs?" after the supported currencies: the router reads an exchange-rate
    question into it); else None."""
    from nodes.embedded.replies import opens_follow_up

    if not previous_topic or not opens_follow_up(text) or _subjects(text) or _has(text, *_OWN_ASPECT) \
            or load_knowledge().resolve("policy", text) is not None:
        return None
    own = match_policy_topic(text)
    return previous_topic if own in (None, previous_topic) or _has(text, _CURRENCY_WORDS) else None


def _currency_answer(topic: str, policy_text: str, question: str) -> str:
    """A yes or no for a currency named in a question about the supported currencies ("and swiss francs?" -> "Yes, you
    can hold and exchange CHF."), "" when the topic is another or no currency is named."""
    code = next((c for w, c in _CURRENCY_CODES.items() if re.search(rf"\b{w}", question)), None)
    if topic != "currencies" or code is None:
        return ""
    return f"Yes, you can hold and exchange {code}." if re.search(rf"\b{code}\b", policy_text) else \
        f"No, {code} isn't one of the currencies you can hold."


def focused_policy_text(topic: str, title: str, policy_text: str, question: str) -> str:
    """``"{title}: {text}"``, or, for a topic that lists several items (:data:`_LIST_TOPICS`) and a question about
    some of them, only those items ("and for ATM withdrawals?" -> ``"Fees (standard plan): each ATM withdrawal costs a
    flat £1.50."``): a person asking about one fee gets that fee, not the whole schedule. ``question`` is lower-cased."""
    from nodes.embedded.replies import asks_same_for

    wanted = _subjects(question)
    if not wanted or not (topic in _LIST_TOPICS or asks_same_for(question)):  # "and on weekdays?": that part only
        return f"{title}: {policy_text}"
    clauses = _clauses(policy_text)
    head = ""
    if clauses and ":" in clauses[0]:  # "Standard plan: card payments …", "Daily limits: card payments £5,000"
        head, clauses[0] = (x.strip() for x in clauses[0].split(":", 1))
    picked = [c for c in clauses if wanted & _subjects(c.lower())]
    if not picked:
        return f"{title}: {policy_text}"
    label = head if title.lower().rstrip("s") in head.lower() else (f"{title} ({head[0].lower() + head[1:]})" if head
                                                                     else title)
    return f"{label}: {'; '.join(picked)}."


#: "how much does it cost?", "is it free?": a price question.
_COST = (r"\bcosts?\b", r"\bhow much (?:is|does|do|will)\b.*\b(?:charge|pay|cost)", r"\bis (?:it|that|this) free\b",
         r"\bprice\b",
         # "how much is a replacement?" after the damaged-card answer
         r"\bhow much (?:is|are|would be|will be) (?:a |an |the |my )?(?:new |physical )*(?:replacement|card)s?\b")


def _policy_question(text: str) -> bool:
    """Does the (lower-cased) ``text`` ask about the desk's fees or limits, or another question the handbook's policy
    intents recognise by their own patterns ("what's the fee for international transfers?")?"""
    return _has(text, *_FEES, *_COST, r"\blimits?\b", r"\bmaximum\b") or \
        load_knowledge().resolve("policy", text) is not None


def policy_knowledge_answer(text: str, default_subject: str | None = None) -> str | None:
    """The desk's policy knowledge for a fee, limit or other policy question asked of a specialist without the
    policy tool (a transfers agent asked "what's the fee for international transfers?"): the topic of the policy
    intent its patterns match, else the best keyword topic (``nodes.tools.match_policy_topic``), focused on what it
    asks (:func:`focused_policy_text`; a question naming nothing the fees list, "how much does it cost?", is about
    ``default_subject``, e.g. transfers for the transfers agent); None when it is no policy question or no topic
    matches."""
    from nodes.tools import POLICY_KB

    low = text.lower()
    if default_subject and not _subjects(low) and _has(low, *_FEES, *_COST):
        low = f"{low} ({default_subject.replace('_', ' ')})"
    if not _policy_question(low):
        return None
    intent = load_knowledge().resolve("policy", low)
    if _has(low, *_RAISE_LIMIT):
        topic: str | None = LIMIT_CHANGES
    elif _has(low, r"\blimits?\b", r"\bmaximum\b"):
        topic = "limits"
    elif _has(low, *_FEES, *_COST):
        topic = "international_fees" if _has(low, r"\b(?:international|abroad|overseas|foreign)\b") else "fees"
    else:
        topic = (intent.args.get("topic") if intent is not None and intent.tool == "lookup_policy" else None) \
            or match_policy_topic(low)
    entry = POLICY_KB.get(topic or "")
    return focused_policy_text(entry.key, entry.title, entry.text, low) if entry is not None else None


#: The handbook topic on changing limits (``nodes/data/desk_knowledge.json``, ``policy_topics``).
LIMIT_CHANGES = "limit_changes"
#: "can I raise it?", "could you increase that?", "is it possible to have it higher?": a request to raise "it".
_RAISE_IT = re.compile(r"\b(?:raise|increase|lift|extend)\b.*\b(?:it|that|this|them)\b|"
                       r"\b(?:it|that|this)\b.*\b(?:raised|increased|lifted|higher|bigger)\b")
#: "raise my top-up limit", "can the limits be increased?": a request to raise a limit named in the message.
_RAISE_LIMIT = (r"\b(?:raise|increase|lift|extend|higher|bigger)\b.*\blimits?\b",
                r"\blimits?\b.*\b(?:raised|increased|lifted|higher|bigger)\b")
#: A previous answer that gave a limit ("Daily limits: …", "You can top up to £10,000 a day, and your balance can be
#: at most £50,000.", "Each contactless payment is limited to £100").
_LIMIT_IN_ANSWER = re.compile(r"\blimits?\b|\blimited to\b|\bat most\b|\bmaximum\b|\bup to £", re.I)
#: An answer that gave a fee ("Each ATM withdrawal costs a flat £1.50", "ATM withdrawal fee £1.50").
_FEE_IN_ANSWER = re.compile(r"\bfees?\b|\bcosts? (?:a )?(?:flat )?£", re.I)
#: The lead of the answer to "can I raise it?" after a fee.
FEE_NOT_CHANGED = ("A fee can't be raised, lowered or waived on request: our fees follow the fee schedule and are the "
                   "same for every account.")


def raises_limit(text: str, previous: str | None = None) -> bool:
    """Does the (lower-cased) ``text`` ask to raise a limit: one it names ("can I raise my top-up limit?") or "it"
    in a short question ("can I raise it?", at most 8 words) right after an answer that gave a limit (``previous``)?"""
    if _has(text, *_RAISE_LIMIT):
        return True
    return bool(previous) and len(text.split()) <= 8 and bool(_RAISE_IT.search(text)) \
        and bool(_LIMIT_IN_ANSWER.search(previous or "") or _FEE_IN_ANSWER.search(previous or ""))


def _limit_changes_answer(previous: str | None = None) -> str:
    """The handbook's ``limit_changes`` topic; after an answer that gave a fee and no limit (``previous``), led by
    :data:`FEE_NOT_CHANGED` ("can I raise it?" after the ATM fee asks to change the fee)."""
    from nodes.tools import POLICY_KB

    entry = POLICY_KB[LIMIT_CHANGES]
    fee = bool(previous) and bool(_FEE_IN_ANSWER.search(previous or "")) and not _LIMIT_IN_ANSWER.search(previous or "")
    return (f"{FEE_NOT_CHANGED} " if fee else "") + f"{entry.title}: {entry.text}"


#: A question about "it" after an answer about the PIN: how to unblock it, or how to change it.
_PIN_IN_ANSWER = re.compile(r"\bPIN\b")
_IT = re.compile(r"\b(?:it|that|this)\b")
_PIN_UNBLOCK = re.compile(r"\b(?:unblock|unlock|reactivate|get (?:it )?back)\b")
_PIN_CHANGE = re.compile(r"\b(?:change|reset|update|new one)\b")


def pin_follow_up_answer(text: str, previous: str | None) -> str | None:
    """The handbook's PIN how-to for a short question about "it" (at most 10 words, naming no card) right after an
    answer about the PIN (``previous``; ``text`` lower-cased): "how do I unblock it?" -> the ``pin_blocked`` answer,
    "and how do I change it?" -> the ``change_pin`` answer, never the card list again; else None."""
    if not previous or not _PIN_IN_ANSWER.search(previous) or len(text.split()) > 10 or not _IT.search(text) \
            or _CARD_NAMED_RE.search(text) or _has(text, r"\bcard\b"):
        return None
    intents = load_knowledge().intents
    key = "pin_blocked" if _PIN_UNBLOCK.search(text) else "change_pin" if _PIN_CHANGE.search(text) else None
    if key not in intents:
        return None
    answer = intents[str(key)].answer
    how = answer.find("Unblock ")  # the how-to of the blocked-PIN answer, without why it was blocked (said already)
    return answer[how:] if key == "pin_blocked" and how > 0 else answer


def transfer_timing_answer(text: str, previous: str | None) -> str | None:
    """The handbook's transfer times (``transfer_times``) for a timing question naming no record ("and how long does
    it take?", ``text`` lower-cased) right after an answer about transfers (``previous``: billing's price of an
    international transfer); else None."""
    from nodes.tools import POLICY_KB

    if not previous or not _has(text, *_TIMING) or _has(text, r"\b(?:tx|tr|rf)_\w+") \
            or "transfer" not in _subjects(previous.lower()):
        return None
    entry = POLICY_KB["transfer_times"]
    return f"{entry.title}: {entry.text}"


#: How a handbook clause names a region of ``nodes.embedded.desk_knowledge.DeskKnowledge.regions`` ("SEPA transfers within 1
#: business day" is the SEPA region's clause of the transfer times).
_REGION_IN_CLAUSE = {"UK": r"\bUK\b(?! and)", "SEPA": r"\bSEPA\b|\bEEA\b|\bSwitzerland\b",
                     "international": r"\binternational\b|\babroad\b|\bSWIFT\b|\bworldwide\b"}
#: A record id or a card's last four digits in a (lower-cased) message.
_RECORD_NAMED = re.compile(r"\b(?:tx|rf|tr|card)_\w+|\b\d{4}\b")


#: A card delivery estimate in an answer ("A new or replacement card usually arrives within 3 to 5 business days").
_DELIVERY_IN_ANSWER = re.compile(r"\bcard usually arrives within \d+ to \d+ business days\b")


def missing_pick_answer(position: str, items: list[str]) -> str:
    """The answer to a pick by position past the end of the list the desk just gave ("the third one" after two
    transfers): there is no such item, how many the list has, and which one the customer means. ``position`` is the
    customer's word ("third", "3rd"); ``items`` the listed record ids, or cards' last four digits. The list is not repeated."""
    names = [f"the card ending {i}" if i.isdigit() else i for i in items]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    return (f"There is no {position} one: the list has {len(items)} ({listed}). Which one do you mean? You can give "
            f"its {'last four digits' if items[0].isdigit() else 'id'}.")


#: "can you retry it?", "try it again", "please resend it", "could you process it again?": the desk asked to retry.
_RETRY_IT = re.compile(r"\b(?:retry|re-?try|resend|re-?send|re-?submit|re-?process|reattempt)\b|"
                       r"\b(?:try|send|process|run|put)\b.{0,20}\b(?:again|through)\b", re.I)
#: An answer about a declined or failed payment.
_DECLINED_IN_ANSWER = re.compile(r"\b(?:declined|failed|rejected)\b", re.I)
#: The answer to a request to retry a declined payment.
RETRY_ANSWER = ("I can't retry a payment for you: only you can, from the shop, website or app where you paid. A "
                "declined payment took no money from your account, so once the cause is fixed (the card is active, "
                "your balance covers it, it's within your daily limit) just try it again there.")


def retry_answer(text: str, previous: str | None) -> str | None:
    """:data:`RETRY_ANSWER` when ``text`` is a short request (at most 8 words, naming no transfer) to retry or resend
    "it" right after an answer about a declined or failed payment (``previous``); None otherwise. The desk cannot
    retry a card payment: the customer does, at the merchant."""
    if not previous or len(text.split()) > 8 or not _RETRY_IT.search(text) or re.search(r"\btr_\w+|\btransfer", text,
                                                                                          re.I):
        return None
    return RETRY_ANSWER if _DECLINED_IN_ANSWER.search(previous) and re.search(r"\bpayments?\b", previous, re.I) \
        else None


#: Account's answer to a new address given in the chat ("it's 12 Baker Street, London" after the
#: address answer), never the out-of-scope answer. The desk has no tool that changes an address.
ADDRESS_CHANGE_ANSWER = ("I can't change your address in this chat. You can change it yourself in the app under "
                         "Profile > Personal details: enter the new address there and save it.")


def speaks_of_places(answer: str | None) -> bool:
    """Does a specialist's ``answer`` give a rule a place can change: it names a region of the handbook's rules (the UK,
    SEPA/the EEA/Switzerland, international/abroad/SWIFT/worldwide: ``_REGION_IN_CLAUSE``) or is a card delivery
    estimate? A follow-up opener about a place ("what about Switzerland?") then asks that answer's question again for
    the place, even after an out-of-scope answer in between (countries, then "what about a mortgage?", then
    "what about Switzerland?")."""
    text = answer or ""
    return bool(_DELIVERY_IN_ANSWER.search(text)) or any(re.search(p, text) for p in _REGION_IN_CLAUSE.values())


def _handbook_text_of(previous: str) -> str | None:
    """The handbook rule the desk's ``previous`` answer gave (the one that ends last in it, when several): a desk
    intent's answer (``nodes/data/desk_knowledge.json``) or a policy topic's ``"{title}: {text}"``
    (``nodes.tools.POLICY_KB``) that states a figure (a time, a price, a limit: what a place can change; "You can follow
    the card in the app" after a delivery estimate is a side remark); None when it gave none (a list of records, a
    status)."""
    from nodes.tools import POLICY_KB

    low = previous.lower()
    texts = [i.answer for i in load_knowledge().intents.values() if len(i.answer) >= 40 and re.search(r"\d", i.answer)]
    texts += [f"{e.title}: {e.text}" for e in POLICY_KB.values()]
    found: list[tuple[int, str]] = []
    for text in texts:  # the text, or one of its clauses of at least _CLAUSE_SEEN characters (a focused answer)
        ends = [at + len(c) for c in [text.split(": ", 1)[-1][:60], *_clauses(text)]
                if len(c) >= _CLAUSE_SEEN and (at := low.find(c.lower())) >= 0]
        if ends:
            found.append((max(ends), text))
    return max(found)[1] if found else None


def _is_title(text: str) -> bool:
    """Is ``text`` the title of a policy topic of ``nodes.tools.POLICY_KB`` ("Transfer times")?"""
    from nodes.tools import POLICY_KB

    return any(text == e.title for e in POLICY_KB.values())


#: Words of an opener's subject that say nothing about what it is ("what about *the* …", "and *my* …").
_FILLER = frozenset({"a", "an", "the", "my", "your", "our", "for", "of", "to", "with", "on", "in", "at", "by", "and", "or",
                     "me", "i", "you", "new", "some", "any", "all", "about", "please", "then", "too", "also", "as", "well"})
#: A subject that points back or picks among what was said ("the other one", "the same", "those").
_POINTS_AMONG = re.compile(r"\b(?:one|ones|other|others|same|both|rest|those|these|first|second|third|last)\b", re.I)


@lru_cache(maxsize=1)
def _handbook_words() -> str:
    """Every handbook text, intent answer, policy title and keyword in lower case (what the desk can speak about)."""
    from nodes.tools import POLICY_KB

    k = load_knowledge()
    parts = [i.answer for i in k.intents.values()] + [f"{e.title} {e.text} {' '.join(e.keywords)}" for e in POLICY_KB.values()]
    return " ".join(parts).lower()


def names_desk_subject(subject: str, places: bool = True) -> bool:
    """Does the subject of a follow-up opener name something of the desk itself: a record, a pick among what was said
    ("the other one"), a question of its own, a place of ``DeskKnowledge.regions`` (not with ``places`` False: after
    an out-of-scope answer, "what about Paris?" asks that question again), a fee/limit subject, a currency, a
    policy topic (``nodes.tools.match_policy_topic``) or what an intent's patterns recognise? Such a subject is never
    taken for out of scope, whatever the router reads into it alone ("Paris" is off topic at 0.98)."""
    low = " ".join((subject or "").lower().split())
    k = load_knowledge()
    return not low or bool(_RECORD_NAMED.search(low) or _POINTS_AMONG.search(low) or _ASKS_ITSELF.search(low)
                           or (places and k.region_of(low)) or _subjects(low) or _has(low, _CURRENCY_WORDS)
                           or match_policy_topic(low) or any(i.score(low) for i in k.intents.values()))


def knows_subject(subject: str) -> bool:
    """Does the desk have something to say about the subject of a follow-up opener ("what about Switzerland?" ->
    "Switzerland")? True when it names a desk subject (:func:`names_desk_subject`) or one of its words (a plural's
    stem) occurs in the handbook's texts; False for "crypto" or "a mortgage": nothing in the handbook covers them, so
    the opener is out of scope."""
    low = " ".join((subject or "").lower().split())
    if names_desk_subject(low):
        return True
    words = [w for w in re.findall(r"[a-z][a-z'-]+", low) if w not in _FILLER and len(w) >= 3]
    corpus = _handbook_words()
    return any(re.search(rf"\b{re.escape(w[:-1] if w.endswith('s') and len(w) > 3 else w)}", corpus) for w in words)


#: An opener's subject that is a question of its own ("and how long does it take?"), not a place or thing.
_ASKS_ITSELF = re.compile(r"^(?:how|what|why|when|where|which|who|is|are|can|could|do|does|did|will|would|should|"
                          r"shall|may|if)\b|\b(?:it|that|this|them)\b", re.I)
#: Shortest handbook clause that identifies its text inside an answer (shorter ones are common phrases).
_CLAUSE_SEEN = 30


def handbook_follow_up(agent: str, user_text: str, previous: str | None) -> str | None:
    """A specialist's answer (not policy's: it looks topics up with its tool) to a follow-up opener about a place or
    subject ("what about Switzerland?", "and Japan?", "and in the UK?": ``nodes.embedded.replies.opener_subject``) right
    after it answered from the handbook (``previous``, :func:`_handbook_text_of`): the same handbook text, focused on
    the region the place belongs to (``DeskKnowledge.region_of``: "For Switzerland: SEPA transfers within 1 business
    day."), or said to apply as it is when the handbook has no separate rule for it; after a card delivery estimate,
    the delivery days to that region (``DeskKnowledge.delivery_days``). None when the opener names a
    record, picks a payment by merchant ("the Tesco one"), asks a question of its own (an intent, fee, limit or
    subject of the desk: those have their own answers) or the previous answer gave no handbook text ("what about
    Switzerland?" after the transfer times, "and in the UK?" after the ATM fee abroad get handbook answers, not records)."""
    from nodes.embedded.replies import opener_subject

    if agent not in _PLANNERS or agent == "policy" or not previous:
        return None
    subject = opener_subject(user_text)
    low = user_text.lower()
    if subject is None or _ASKS_ITSELF.search(subject) or _RECORD_NAMED.search(low) or _PICKS_BY_NAME.search(low) \
            or _subjects(low) or _policy_question(low) or load_knowledge().resolve(agent, low) is not None:
        return None
    region = load_knowledge().region_of(subject)
    delivery = _DELIVERY_IN_ANSWER.search(previous)
    if delivery and region:  # "what about Germany?" after a card delivery estimate: the days to that region
        key = {"UK": "GB", "SEPA": "CH" if subject.lower() == "switzerland" else "EEA"}.get(region, "default")
        lo, hi = load_knowledge().delivery_days.get(key) or load_knowledge().delivery_days.get("default", (7, 12))
        return f"To an address in {subject}, a new card usually arrives within {lo} to {hi} business days of ordering."
    handbook = _handbook_text_of(previous)
    if handbook is None:
        return None
    body = handbook.partition(": ")[2] if _is_title(handbook.split(": ", 1)[0]) else handbook
    picked = [c for c in _clauses(body) if region and re.search(_REGION_IN_CLAUSE.get(region, r"$^"), c)]
    picked = [c for c in picked if c.lower() in previous.lower()] or picked  # the part the last answer was about
    if picked and len(picked) < len(_clauses(body)):
        body = "; ".join(picked)
        return f"For {subject}: {body[:1].lower() + body[1:] if body[:2] != body[:2].upper() else body}."
    return f"Our handbook has no separate rule for {subject}, so this applies: {handbook}"


def _refund_picked(text: str, tool_results: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Refunds' answer to a payment picked by its merchant after it read the refunds (:func:`_refund_by_merchant`),
    else None."""
    if [n for n, _ in tool_results] != ["refund_status"] or not _PICKS_BY_NAME.search(text) or _TX_IN_TEXT.search(text):
        return None
    return _refund_by_merchant(text, tool_results[0][1])


def _refund_by_merchant(text: str, result: dict[str, Any]) -> str:
    """Refunds' answer to a payment picked by its merchant ("and the Amazon one?", ``text`` lower-cased) from the
    customer's refunds (``refund_status`` ``result``): the one refund whose merchant the customer named, else
    :data:`REFUND_WHICH_BY_ID` (refunds has no tool that finds a payment by its merchant)."""
    picked = _PICKS_BY_NAME.search(text)
    name = picked.group("name") if picked else ""
    hits = [rf for rf in result.get("refunds") or []
            if rf.get("merchant") and (name in rf["merchant"].lower() or rf["merchant"].lower().split()[0] in name)]
    if not result.get("ok") or len(hits) != 1:
        return REFUND_WHICH_BY_ID
    return f"The {hits[0]['merchant']} payment already has a refund. " + _render_refund_status({"refunds": hits}, text)


_PLANNERS: dict[str, Callable[..., ToolCallPlan | None]] = {
    "billing": _plan_billing, "refunds": _plan_refunds, "cards": _plan_cards, "transfers": _plan_transfers,
    "account": _plan_account, "policy": _plan_policy,
}


def _refund_reason(text: str) -> str:
    if _has(text, *_DUPLICATE):
        return "duplicate charge"
    if _has(text, *_NOT_MINE):
        return "payment the customer did not make"
    if _has(text, r"\bnot (?:received|delivered|arrived)\b", r"\bnever (?:got|received|arrived)\b"):
        return "goods or service not received"
    if _has(text, r"\breturn(?:ed)?\b"):
        return "item returned"
    return "customer request"


# --------------------------------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------------------------------

_REFUND_STATUS_TEXT = {
    "requested": "requested and waiting for review; nothing has been paid yet",
    "approved": "approved and about to be paid",
    "rejected": "rejected",
    "executed": "paid back to your account",
    "cancelled": "cancelled",
    # {on}: " since 3 Dec" (when its approval deadline ended it: ``expired_at`` of ``nodes.tools``' refund view) or ""
    "expired": "expired{on}: it was not decided in time, so nothing was paid",
}


#: When a refund's money arrives, by status (answer to "when will it arrive?"; the 5 business days are the desk's
#: refund answer, ``_render_request_refund``). ``{on}``: " on 3 Dec", the day the credit was posted (``paid_at`` of
#: ``nodes.tools``' refund view), or "" when the view has none; ``{amount}``: the amount.
_REFUND_ARRIVAL = {
    "requested": "Once it is approved the money usually reaches your account within 5 business days.",
    "approved": "It has been approved; the money usually reaches your account within 5 business days.",
    "executed": "The {amount} was credited to your account{on}, so it is already in your balance: there is "
                "nothing more to wait for.",
    "rejected": "It was not approved after review, so no money will arrive.",
    "cancelled": "It was cancelled, so no money will arrive.",
    "expired": "No money will arrive for it; you can ask for a new refund.",
}


def _when(iso_text: str) -> str:
    try:
        dt: datetime = parse_iso(iso_text)
    except (TypeError, ValueError):
        return iso_text
    return f"{dt.day} {dt.strftime('%b')} at {dt.strftime('%H:%M')}"


def _day(iso_text: str) -> str:
    try:
        dt = parse_iso(iso_text)
    except (TypeError, ValueError):
        return iso_text
    return f"{dt.day} {dt.strftime('%b')}"


def _on_day(iso_text: str | None) -> str:
    """`` since 3 Dec`` for a timestamp, "" for none."""
    return f" since {_day(iso_text)}" if iso_text else ""


def _on(iso_text: str | None) -> str:
    """`` on 3 Dec`` for a timestamp, "" for none."""
    return f" on {_day(iso_text)}" if iso_text else ""


def _amt(d: dict[str, Any]) -> str:
    return money(d["amount_minor"], d["currency"])


def _tx_line(tx: dict[str, Any]) -> str:
    status = "" if tx["status"] == "posted" else f" ({tx['status']})"
    return f"{tx['id']}: {tx['merchant']} {_amt(tx)} on {_day(tx['created_at'])}{status}"


#: Internal error text that never reaches the customer (tool names, argument validation, exception names): the event
#: log has it.
_INTERNAL_ERROR = re.compile(r"\bRefused\b|\bNot executed\b|bad arguments|\b[A-Z]\w*(?:Error|Exception)\b|"
                             r"\b(?:input should|validation|field required)\b", re.I)


def _customer_error(err: str) -> str | None:
    """``err`` when it is written for the customer ("no card ending 9999"); None when it is empty, names a business
    tool or carries internal text (:data:`_INTERNAL_ERROR`)."""
    if not err or _INTERNAL_ERROR.search(err) or any(name in err for name in TOOLS):
        return None
    return err


def _render_refusal(tool: str, result: dict[str, Any]) -> str:
    """The answer when a tool call did not succeed (``result["ok"]`` false)."""
    err = _customer_error(str(result.get("error") or ""))
    if err is None and tool != "lookup_policy":
        return ("I couldn't do that yet: I'm not sure which one you mean. Please give its id (such as tx_1234, "
                "rf_1234 or tr_1234) or, for a card, its last four digits.")
    if tool == "request_refund":
        return f"I couldn't open a refund: {err}."
    blocked = " " + BLOCKED_NEXT_STEP if tool in ("freeze_card", "unfreeze_card") and " blocked" in (err or "") else ""
    if tool == "freeze_card":
        return f"I couldn't freeze the card: {err}.{blocked}"
    if tool == "unfreeze_card" and blocked:  # the store's reason already says it cannot be unfrozen
        return f"I couldn't unfreeze it: {err}. To pay by card again, order a replacement in the app under Cards (£5)."
    if tool == "cancel_refund":
        return f"I couldn't cancel it: {err}."
    if tool == "lookup_policy":
        return ("I don't have a published policy on that. I can answer questions about fees, limits, "
                "currencies, countries, age, top-ups, exchange rates, verification, ATMs, refunds and "
                "transfer times.")
    return f"I couldn't do that: {err}."


#: "which one was the duplicate?": the customer asks only which payment it was.
_WHICH_ONE = re.compile(r"\bwhich (?:one|payment|charge|transaction|of (?:them|the two))\b")


def _render_find_duplicate_charges(result: dict[str, Any], text: str) -> str:
    pairs = result.get("duplicates") or []
    if result.get("merchant_found") and not pairs:
        shown = result.get("merchant_payments") or []
        listed = "; ".join(f"{t['id']} {_amt(t)} on {_day(t['created_at'])}" for t in shown[:5])
        return (f"I checked your card payments at {shown[0]['merchant'] if shown else result['merchant']}"
                + (f" ({listed})" if listed else "") + " and none of them was charged twice. If one of them looks "
                "wrong, tell me its id and I'll explain it.")
    if pairs and _WHICH_ONE.search(text):
        p = pairs[0]
        o, d = p["original"], p["duplicate"]
        return (f"The duplicate is {d['id']}: the second {d['merchant']} charge of {_amt(d)}, at "
                f"{_when(d['created_at'])[-5:]} on {_day(d['created_at'])}; {o['id']} at "
                f"{_when(o['created_at'])[-5:]} is the original."
                + ("" if p.get("existing_refund") else
                   f" Shall I ask our refunds team to refund the duplicate, {d['id']}?"))  # the live offer (a question)
    if not pairs:
        return ("I checked your recent card payments and found no duplicate charges: no two posted "
                "payments to the same merchant for the same amount within 24 hours.")
    parts = []
    for p in pairs:
        o, d = p["original"], p["duplicate"]
        line = (f"{d['merchant']} charged you {_amt(d)} twice on {_day(d['created_at'])}: "
                f"{o['id']} at {_when(o['created_at'])[-5:]} and {d['id']} at "
                f"{_when(d['created_at'])[-5:]}. {d['id']} is the duplicate.")
        if p.get("existing_refund"):
            rf = p["existing_refund"]
            line += f" Refund {rf['id']} for it is already {rf['status']}."
        parts.append(line)
    head = ("I found a duplicate charge. " if len(pairs) == 1
            else f"I found {len(pairs)} duplicate charges. ")
    open_pairs = [p for p in pairs if not p.get("existing_refund")]
    tail = "" if not open_pairs else \
        f" Shall I ask our refunds team to refund the duplicate, {open_pairs[0]['duplicate']['id']}?" \
        if len(open_pairs) == 1 else " The duplicates can be refunded; our refunds team handles that."
    return head + " ".join(parts) + tail


#: How many of the customer's newest transactions billing looks through for a payment picked by its merchant ("what
#: about the Tesco one?"): a payment older than the last five shown is still found.
_MERCHANT_LOOKBACK = 20
#: How many of the latest payments billing's answer lists.
_LIST_SHOWN = 5


def _render_list_recent_transactions(result: dict[str, Any], text: str) -> str:
    txs = result.get("transactions") or []
    if not txs:
        return "There are no transactions on your account yet."
    picked = _PICKS_BY_NAME.search(text)
    if picked:  # "what about the Tesco one?": that merchant's payments only, never the whole list again
        name = picked.group("name")
        hits = [t for t in txs if name in t["merchant"].lower() or t["merchant"].lower().split()[0] in name.split()]
        if not hits:
            return (f"I can't find a payment from {name.title()} among your last {len(txs)} transactions. Please give "
                    "its id (such as tx_1234), or the merchant's name as it appears on your statement.")
        if len(hits) == 1:
            return f"That is {_tx_line(hits[0])}. Tell me if you'd like me to explain it."
        return f"Your {hits[0]['merchant']} payments: " + "; ".join(_tx_line(t) for t in hits[:5]) + "."
    return "Your latest transactions: " + "; ".join(_tx_line(t) for t in txs[:_LIST_SHOWN]) + "."


def _render_explain_transaction(result: dict[str, Any], text: str) -> str:
    tx = result["transaction"]
    if tx["id"].lower() not in text and _POINTS_BACK.search(text) and _has(text, r"\bwhy\b"):
        # "why is it pending?" about the payment just explained: the reason, not the description again
        why = str(result["explanation"])
        return f"{tx['id']} ({tx['merchant']}, {_amt(tx)}) is {tx['status']}: {why[:1].lower()}{why[1:]}"
    card = f" on the card ending {result['card_last4']}" if result.get("card_last4") else ""
    return (f"{tx['id']} is {tx['merchant']}, {_amt(tx)}{card} on {_day(tx['created_at'])}, "
            f"status {tx['status']}. {result['explanation']}")


def _render_explain_fees(result: dict[str, Any], text: str) -> str:
    fees = result.get("fees_charged") or []
    charged = ("Fees on your account: " + "; ".join(_tx_line(t) for t in fees) + ". ") if fees \
        else "You have not been charged any fees recently. "
    return charged + _SCHEDULE_HEAD + result["schedule"]


#: Where the fee schedule starts in billing's fee answer (left out when the customer asked about one fee).
_SCHEDULE_HEAD = "Our fee schedule: "


def _render_request_refund(result: dict[str, Any], text: str) -> str:
    rf, tx = result["refund"], result["transaction"]
    what = "duplicate " if ("duplicate" in rf.get("reason", "") or _has(text, *_DUPLICATE)) else ""
    again = "already " if result.get("replayed") else ""
    return (f"I've {again}opened refund {rf['id']} for {money_plain(rf['amount_minor'], rf['currency'])} "
            f"for the {what}{tx['merchant']} charge ({tx['id']}). Its status is {rf['status']}: nothing "
            "has been paid yet; once it is approved the money goes back to your account, usually "
            "within 5 business days.")


def _render_refund_status(result: dict[str, Any], text: str) -> str:
    refunds = result.get("refunds") or []
    if not refunds:
        return "You have no refunds on your account."
    lines = []
    for rf in refunds:
        merchant = f"{rf['merchant']}, " if rf.get("merchant") else ""
        lines.append(f"refund {rf['id']} for {_amt(rf)} ({merchant}{rf['transaction_id']}) is "
                     f"{_REFUND_STATUS_TEXT.get(rf['status'], rf['status']).format(on=_on_day(rf.get('expired_at')))} "
                     f"(opened {_day(rf['created_at'])})")
    body = "; ".join(lines)
    answer = body[0].upper() + body[1:] + "."
    if len(refunds) == 1 and refunds[0]["status"] == "rejected" and _has(text, *_WHY_REJECTED):
        return f"{answer} {REJECTED_REASON.format(on=_on(refunds[0].get('rejected_at')))}"
    if len(refunds) == 1 and _has(text, *_REFUND_WHERE):
        answer += " " + _REFUND_ARRIVAL.get(refunds[0]["status"], "").format(
            on=_on(refunds[0].get("paid_at")), amount=_amt(refunds[0])).strip()
    return answer.strip()


#: "why was it rejected?", "why didn't you approve it?": the customer asks why a refund was not approved.
_WHY_REJECTED = (r"\bwhy\b", r"\breason\b", r"\bwhat went wrong\b", r"\bhow come\b")
#: The fixed reason a customer gets for a rejected refund (README "Human approval": the approver's note is for
#: operators only; a rejected customer is told a fixed reason, never the note). ``{on}``: " on 1 Dec" or "".
REJECTED_REASON = ("Our team reviewed it{on} and could not approve it. I can't share the details of the review here; "
                   "nothing was paid. A new request for the same payment goes to our team for another review.")


def _render_check_refund_eligibility(result: dict[str, Any], text: str) -> str:
    tx = result["transaction"]
    earlier = result.get("rejected_refund")
    if result["eligible"] and earlier:  # a rejection is not undone by asking again
        return (f"{tx['id']} ({tx['merchant']}, {_amt(tx)}) already had refund {earlier['id']}, which was not approved "
                f"after review{_on(earlier.get('rejected_at'))}. A new request can't be approved automatically: "
                f"it would go to our team for another review. {REFUND_OFFER}")
    if result["eligible"]:
        return f"{tx['id']} ({tx['merchant']}, {_amt(tx)}) can be refunded. {REFUND_OFFER}"
    return f"{tx['id']} ({tx['merchant']}, {_amt(tx)}) can't be refunded: {result['reason']}."


def _render_card_status(result: dict[str, Any], text: str) -> str:
    cards = result.get("cards") or []
    if not cards:
        return "You have no cards on your account."
    named = _CARD_NAMED_RE.search(text)
    digits = next((g for g in named.groups() if g), "") if named else ""
    kind = _CARD_KIND_RE.search(text)
    one = [c for c in cards if (digits and digits in (c["last4"], c["id"])) or (kind and c["kind"] == kind.group(1))]
    if len(one) == 1 and (digits or kind) and len(text.split()) <= 8:  # "the one ending 1881": that card, not the list
        c = one[0]
        tail = {"frozen": " You can unfreeze it in the app, or tell me and I'll do it.",
                "blocked": " " + BLOCKED_NEXT_STEP}.get(c["status"], "")
        return f"Your {c['kind']} card ending {c['last4']} is {c['status']}.{tail}"
    return "Your cards: " + "; ".join(
        f"{c['kind']} card ending {c['last4']} is {c['status']}" for c in cards) + "."


def _render_freeze_card(result: dict[str, Any], text: str) -> str:
    if result.get("status") != "frozen":  # read back after the action (nodes.tools): never claim a state it lacks
        return (f"Your {result['kind']} card ending {result['last4']} is {result.get('status')}, not frozen: I "
                "couldn't freeze it. Please try again, or tell me and I'll pass it to our team.")
    if result.get("already_frozen") or result.get("replayed"):  # replayed: this task froze it already
        confirm = "Yes, that's the one: your" if _CARD_NAMED_RE.search(text) and not reports_card_loss(text) \
            else "Your"
        return (f"{confirm} {result['kind']} card ending {result['last4']} is frozen, so nobody can pay with it. "
                + (_compromised_next_steps(result) if _no_card_to_find(result, text) else CARD_NEXT_STEPS))
    if _no_card_to_find(result, text):
        return (f"I've frozen your {result['kind']} card ending {result['last4']}, so nobody can pay with it. "
                + _compromised_next_steps(result))
    return (f"I've frozen your {result['kind']} card ending {result['last4']}, so nobody can pay "
            "with it. If you find it you can unfreeze it in the app; if it was stolen, order a "
            "replacement there and check your recent transactions.")


def _no_card_to_find(result: dict[str, Any], text: str) -> bool:
    """A frozen card the customer cannot "find" again: a virtual card, or card details reported stolen or leaked."""
    return result.get("kind") == "virtual" or bool(re.search(r"\bcard (?:details|number)\b|\bcompromis|\bcloned\b|"
                                                          r"\bskimm", text, re.I))


def _compromised_next_steps(result: dict[str, Any]) -> str:
    if result.get("kind") == "virtual":
        return VIRTUAL_NEXT_STEPS
    return ("Its number can't be used again safely: order a replacement in the app (£5; the new card has a new number) "
            "and check your recent transactions. If you froze it by mistake, you can unfreeze it in the app (or tell "
            "me and I'll do it).")


#: What happens after a virtual card (or card details) is frozen: nothing to find, a new number is the fix (a virtual
#: card is free: ``getting_virtual_card`` of ``nodes/data/desk_knowledge.json``).
VIRTUAL_NEXT_STEPS = ("Its number can't be used again safely: create a new card in the app under Cards > Add card (a new "
                      "virtual card is free and has a new number) and check your recent transactions. If you froze it "
                      "by mistake, you can unfreeze it in the app (or tell me and I'll do it).")


#: What happens after a card is frozen (fees: a replacement physical card costs £5, ``nodes.tools.POLICY_KB``).
CARD_NEXT_STEPS = ("If you find it, you can unfreeze it in the app (or tell me and I'll do it). If it's gone for good or "
                   "was stolen, order a replacement in the app (£5) and check your recent transactions; tell me if you "
                   "see a payment you didn't make.")


def _render_list_transfers(result: dict[str, Any], text: str) -> str:
    trs = result.get("transfers") or []
    if not trs:
        return "You have no transfers."
    return "Your transfers: " + "; ".join(
        f"{t['id']} to {t['beneficiary']} for {_amt(t)} on {_day(t['created_at'])} is {t['status']}"
        for t in trs) + "."


def _render_transfer_status(result: dict[str, Any], text: str) -> str:
    t = result["transfer"]
    return (f"Transfer {t['id']} to {t['beneficiary']} for {_amt(t)} (sent {_day(t['created_at'])}) "
            f"is {t['status']}. {result.get('explanation', '')}").strip()


#: A request to change a personal detail ("I want to change my email"): the how-to answers it, not the profile.
_CHANGE_DETAIL = re.compile(r"\b(?:change|update|edit|correct|new)\b")
#: Personal details a question can name -> the profile's field (``nodes.tools`` ``account_profile``).
_PROFILE_FIELDS = ((re.compile(r"\b(?:e-?mail|email address)\b"), "email"), (re.compile(r"\bname\b"), "name"))


def _render_account_profile(result: dict[str, Any], text: str) -> str:
    """The account profile as the (lower-cased) question needs it, not the same summary
    for every question: a request to change a detail gets the detail's current value only (the
    desk intent's how-to follows); a question naming a detail (email, name) gets that detail; a question about the
    identity check gets its state; anything else the whole summary."""
    c = result["customer"]
    verified = "verified" if c.get("identity_verified") else "not verified yet"
    named = [field for pattern, field in _PROFILE_FIELDS if pattern.search(text)]
    if _CHANGE_DETAIL.search(text):
        return " ".join(f"The {f} on your account now is {c[f]}." for f in named)
    if named:
        return " ".join(f"The {f} on your account is {c[f]}." for f in named)
    if re.search(r"\bverif|\bidentity\b|\bblocked\b|\blocked\b|\brestricted\b|\bsuspended\b", text):
        return f"Your identity is {verified}."
    return (f"Your account: {c['name']}, email {c['email']}, {c.get('plan') or 'standard'} plan, "
            f"identity {verified}, {count_words(int(result.get('active_cards') or 0), 'active card')}. You can edit "
            "your personal details in the app under Profile.")


def _render_lookup_policy(result: dict[str, Any], text: str) -> str:
    focused = focused_policy_text(str(result.get("topic", "")), result["title"], result["text"], text)
    return " ".join(p for p in (_currency_answer(str(result.get("topic", "")), result["text"], text), focused) if p)


#: One renderer per business tool: ``(result, lowercased user text) -> answer`` (empty: nothing to say).
def _render_cancel_refund(result: dict[str, Any], text: str) -> str:
    rf = result["refund"]
    merchant = f"{rf['merchant']}, " if rf.get("merchant") else ""
    return (f"I've cancelled refund {rf['id']} for {_amt(rf)} ({merchant}{rf['transaction_id']}). Nothing was paid "
            "and nothing will be.")


#: Refunds' question before it cancels a waiting refund the customer asked to cancel (the cancellation rules of
#: ``policies.cancellation``: an explicit wish, then a yes); a plain yes to it cancels that refund (``cancel_refund``).
CANCEL_REFUND_OFFER = CANCEL_QUESTION
_CANCEL_REFUND_OFFERED = re.compile(r"^Shall I cancel refund (rf_\w+)\?$")
_WAITING = ("requested", "approved")


def _refund_line(rf: dict[str, Any]) -> str:
    merchant = f"{rf['merchant']}, " if rf.get("merchant") else ""
    return f"refund {rf['id']} for {_amt(rf)} ({merchant}{rf['transaction_id']})"


def _cannot_cancel(rf: dict[str, Any]) -> str:
    """Why ``rf`` (a refund view that no longer waits) can't be cancelled, in one sentence."""
    line = _refund_line(rf)
    if rf["status"] == "executed":
        paid = f" on {_day(rf['paid_at'])}" if rf.get("paid_at") else ""
        return (f"{line[0].upper()}{line[1:]} was already paid back to your account{paid}, so it can't be cancelled: "
                "the money is in your balance.")
    done = {"rejected": "was rejected after review", "cancelled": "was already cancelled",
            "expired": "expired"}.get(rf["status"], f"is {rf['status']}")
    return f"{line[0].upper()}{line[1:]} {done}: nothing was paid, so there is nothing to cancel."


def _refund_cancel_answer(tool_results: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Refunds' answer to a wish to cancel a refund (:func:`cancels_refund`), from ``refund_status`` (and the
    ``check_refund_eligibility`` of the payment carried from earlier, when there is one): no refund of that payment
    -> says so (and names a refund still waiting, if any); one refund still waiting -> its status and
    :data:`CANCEL_REFUND_OFFER` (only a yes cancels it); several waiting -> which one; a refund already paid, rejected,
    cancelled or expired -> why it can't be cancelled. None when ``refund_status`` did not answer."""
    res = dict(tool_results)
    status = res.get("refund_status") or {}
    if not status.get("ok"):
        return None
    refunds = list(status.get("refunds") or [])
    waiting = [rf for rf in refunds if rf["status"] in _WAITING]
    elig = res.get("check_refund_eligibility") or {}
    tx = elig.get("transaction") if elig.get("ok") else None
    if tx is not None:
        mine = [rf for rf in refunds if rf["transaction_id"] == tx["id"]]
        if not mine:
            answer = (f"There is no refund of {tx['id']} ({tx['merchant']}, {_amt(tx)}) to cancel: none was opened, "
                      "and nothing has been paid for it.")
            if len(waiting) == 1:
                answer += (f" Your {_refund_line(waiting[0])} is still waiting for review; if that's the one you mean, "
                           f"say \"cancel {waiting[0]['id']}\".")
            return answer
        refunds, waiting = mine, [rf for rf in mine if rf["status"] in _WAITING]
    if len(waiting) == 1:
        rf = waiting[0]
        state = _REFUND_STATUS_TEXT.get(rf["status"], rf["status"]).format(on="")
        line = _refund_line(rf)
        return f"{line[0].upper()}{line[1:]} is {state}. {CANCEL_REFUND_OFFER.format(refund_id=rf['id'])}"
    if waiting:
        listed = "; ".join(_refund_line(rf) for rf in waiting)
        return f"These refunds are still waiting: {listed}. Which one would you like to cancel? Please give its id."
    if not refunds:
        return "You have no refund to cancel: none was opened on your account, and nothing has been paid."
    if len(refunds) == 1:
        return _cannot_cancel(refunds[0])  # the one asked about (named, or carried from earlier)
    latest = max(refunds, key=lambda rf: rf.get("created_at", ""))
    return "You have no refund waiting that could be cancelled. " + _cannot_cancel(latest)


_RENDERERS: dict[str, Callable[[dict[str, Any], str], str]] = {
    "cancel_refund": _render_cancel_refund,
    "find_duplicate_charges": _render_find_duplicate_charges,
    "list_recent_transactions": _render_list_recent_transactions,
    "explain_transaction": _render_explain_transaction,
    "explain_fees": _render_explain_fees,
    "request_refund": _render_request_refund,
    "refund_status": _render_refund_status,
    "check_refund_eligibility": _render_check_refund_eligibility,
    "card_status": _render_card_status,
    "freeze_card": _render_freeze_card,
    "list_transfers": _render_list_transfers,
    "transfer_status": _render_transfer_status,
    "account_profile": _render_account_profile,
    "lookup_policy": _render_lookup_policy,
}


def _render(tool: str, result: dict[str, Any], user_text: str) -> str:
    """The offline agent's answer for one tool result: a refusal line when the call failed, else the tool's renderer
    in ``_RENDERERS`` ("" for a tool without one)."""
    if not result.get("ok"):
        return _render_refusal(tool, result)
    renderer = _RENDERERS.get(tool)
    return renderer(result, user_text.lower()) if renderer is not None else ""


_NO_TOOL_ANSWERS = {
    "billing": "I can look into charges on your account. Which transaction is it about (its id, such as "
               "tx_1234, or the merchant and amount)?",
    "refunds": "Which transaction would you like refunded? Please give its id (such as tx_1234) or the "
               "merchant and amount.",
    "cards": "I can help with your cards. Is it about a lost or stolen card, a card that doesn't work, "
             "or a new card?",
    "transfers": "Which transfer is it about? Its id (such as tr_1234) or the recipient and amount helps.",
    "account": "I can help with your account details and identity verification. What would you like to do?",
    "policy": "What would you like to know? I can answer questions about fees, limits, currencies, "
              "countries, top-ups, exchange rates and verification.",
}


#: What happens after an unfreeze request (the desk knowledge has answers for the closure and the freeze only).
UNFREEZE_ACCOUNT_ANSWER = ("Our team will check your account with you and lift any freeze they find on it. Your cards "
                           "are separate: I can tell you their state or unfreeze one here.")


def _filed_request(tool_results: list[tuple[str, dict[str, Any]]],
                   intent: DeskIntent | None) -> tuple[DeskIntent | None, list[str]]:
    """``(intent, tail)`` after account's ``request_operator_case``: the desk intent of the request actually filed
    (its answer says what happens next; "unfreeze my account" is never answered with the freeze's text) and, for an
    unfreeze request, which the desk knowledge has no entry for, :data:`UNFREEZE_ACCOUNT_ANSWER`. Unchanged
    ``(intent, [])`` when no request was filed."""
    case = dict(tool_results).get("request_operator_case") or {}
    if not case.get("ok"):
        return intent, []
    kind = case.get("kind")
    filed = next((i for i in load_knowledge().intents.values()
                  if i.tool == "request_operator_case" and i.args.get("kind") == kind), None)
    return filed, [UNFREEZE_ACCOUNT_ANSWER] if kind == "unfreeze_account" else []


def _with_intent_answer(agent: str, text: str, intent: DeskIntent | None, names: list[str],
                        parts: list[str]) -> list[str]:
    """``parts`` (the rendered tool results) followed by the desk intent's own answer when that intent needs no tool
    or its tool was the one called, unless a record-specific tool answered already; a loss the router only guessed
    gets :data:`LOSS_QUESTION` instead (cards freezes nothing on a guess); a question about one fee keeps that fee,
    not the whole schedule. ``text``: the customer's message, lowercased."""
    record_specific = {"unfreeze_card", "explain_transaction", "transfer_status", "check_refund_eligibility"} & set(names)
    if intent is not None and intent.key == "cancel_transfer":
        record_specific.discard("transfer_status")  # "can I cancel it?": the transfer's status, then how to cancel
    guessed_loss = intent is not None and intent.kind == "freeze" and not reports_card_loss(text)
    if guessed_loss and agent == "cards":
        return [*parts, LOSS_QUESTION]  # the router's guess alone freezes nothing: ask
    if intent is not None and intent.answer and not record_specific and (intent.tool is None or intent.tool in names
                                                 or (intent.kind == "freeze" and "card_status" in names)):
        parts = [*parts, intent.answer]
        if intent.tool == "explain_fees":  # a question about one fee ("and for ATM withdrawals?"): that fee, not the
            parts = [p.split(_SCHEDULE_HEAD)[0].strip() for p in parts[:-1]] + parts[-1:]  # whole schedule
            parts = [p for p in parts if p]
    return parts


def compose_answer(agent: str, user_text: str, tool_results: list[tuple[str, dict[str, Any]]],
                   hint: str | None = None, asked: str | None = None, previous: str | None = None) -> str:
    """A concise customer-facing answer for ``agent`` from this turn's ``(tool_name, result)`` pairs,
    naming concrete things from the results (transaction id, merchant, amount, refund id and status),
    followed by the desk intent's own answer (:func:`resolve_intent` with ``hint``) when that intent needs no
    tool or its tool was the one called.

    Each result is rendered by a per-tool template in order (card_status is left out when freeze_card
    or unfreeze_card follows, since that says what matters); with no results and no intent the agent asks for
    what it needs. Refunds: after request_refund the answer names the refund, the amount as "4.50 GBP", the
    merchant and the transaction id, and says nothing is paid yet. When the refunds agent only listed refunds,
    it also asks which transaction to refund. ``asked``: the agent's open question on the thread (a yes to "anything
    else?" asks what else, it is not answered with the same question again). ``previous``: the desk's previous answer
    on the thread (an "and for X?" after a limits answer asks the limit of X; "it failed" after a top-up answer is
    about the top-up, :func:`leaning_text`)."""
    user_text = leaning_text(user_text, previous)
    text = user_text.lower()
    if not tool_results and (short := _reply_without_tool(agent, user_text, asked, previous, hint)) is not None:
        return short
    names = [name for name, _ in tool_results]
    if agent == "refunds" and (first := _refunds_first_answer(text, tool_results, names)) is not None:
        return first
    parts: list[str] = []
    for name, result in tool_results:
        if name == "card_status" and {"freeze_card", "unfreeze_card"} & set(names) and result.get("ok"):
            continue
        rendered = render_desk_tool(name, result) or _render(name, result, user_text)
        if rendered:
            parts.append(rendered)
    intent, known = _answer_intent(agent, user_text, hint, bool(tool_results), previous)
    if known:
        parts = [known]
    intent, tail = _filed_request(tool_results, intent)
    parts = _with_intent_answer(agent, text, intent, names, parts) + tail
    if not parts:
        return _NO_TOOL_ANSWERS.get(agent, "How can I help?")
    if agent == "refunds":
        parts = _refunds_tail(text, names, parts)
    if agent == "cards":
        parts = _cards_tail(text, tool_results, parts, asked, previous)
    balance = dict(tool_results).get("account_balance") or {}
    if agent == "account" and balance.get("ok"):
        parts = _currency_not_held(text, balance) + parts
    status = dict(tool_results).get("transfer_status") or {}
    if status.get("ok"):
        parts.extend(p for p in _transfer_follow_up(text, status) if p not in parts)
    return " ".join(parts)


def _cards_tail(text: str, tool_results: list[tuple[str, dict[str, Any]]], parts: list[str], asked: str | None,
                previous: str | None) -> list[str]:
    """Cards' answer ``parts`` with what follows them: after the card list alone, nothing to unfreeze (an unfreeze
    request with no card frozen: no loss question) or the follow-up question (which card); after a new
    freeze, the other cards that stay frozen (:func:`_others_still_frozen`)."""
    if [name for name, _ in tool_results] == ["card_status"]:
        nothing = _nothing_to_unfreeze(text, dict(tool_results)["card_status"])
        if nothing is not None:
            return [*parts[:1], nothing]
        return [*parts, *_card_follow_up(_cards_reply_to_question(text, asked, previous) or text)]
    return [*parts, *_others_still_frozen(tool_results)]


#: What a blocked card's owner can do: a blocked card stays blocked (``checkpoints.business`` refuses its unfreeze);
#: a replacement physical card costs £5 (``nodes.tools.POLICY_KB``).
BLOCKED_NEXT_STEP = "A blocked card can't be unfrozen or used again: order a replacement in the app under Cards (£5)."


def _nothing_to_unfreeze(text: str, status: dict[str, Any]) -> str | None:
    """Cards' answer to an unfreeze request that names no card when none of the customer's cards is frozen
    (``status``: the card_status result): nothing to unfreeze, and what a blocked card needs; None otherwise."""
    cards = status.get("cards") or []
    if not status.get("ok") or not _has(text, *_UNFREEZE_ASKED) or _CARD_NAMED_RE.search(text) \
            or any(c["status"] == "frozen" for c in cards):
        return None
    blocked = [c["last4"] for c in cards if c["status"] == "blocked"]
    return "None of your cards is frozen, so there's nothing to unfreeze." + (
        f" Your card ending {blocked[0]} is blocked. {BLOCKED_NEXT_STEP}" if len(blocked) == 1 else
        f" {BLOCKED_NEXT_STEP}" if blocked else "")


def _others_still_frozen(tool_results: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """After a new freeze, the other cards that were frozen before it (the turn's card_status result) stay frozen:
    say so, and offer to unfreeze the one such card (:data:`UNFREEZE_OFFER`, whose yes unfreezes it) — "actually it's
    the one ending 8899" after the desk froze 4242 for "I lost my card"."""
    results = dict(tool_results)
    frozen, status = results.get("freeze_card") or {}, results.get("card_status") or {}
    if not frozen.get("ok") or frozen.get("already_frozen") or frozen.get("replayed") or not status.get("ok"):
        return []
    others = [c for c in status.get("cards") or [] if c["status"] == "frozen" and c["last4"] != frozen.get("last4")]
    if not others:
        return []
    if len(others) > 1:
        return ["Your cards ending " + " and ".join(c["last4"] for c in others) + " stay frozen too; tell me if you "
                "want one of them unfrozen."]
    c = others[0]
    return [f"Your {c['kind']} card ending {c['last4']} stays frozen too.", UNFREEZE_OFFER.format(last4=c["last4"])]


def _refunds_first_answer(text: str, tool_results: list[tuple[str, dict[str, Any]]], names: list[str]) -> str | None:
    """Refunds' whole answer when the turn is a pick by merchant (:func:`_refund_picked`) or a wish to cancel a refund
    (:func:`_refund_cancel_answer`), else None."""
    if (picked := _refund_picked(text, tool_results)) is not None:
        return picked
    if (of_payment := _refund_status_of_payment(text, tool_results)) is not None:
        return of_payment
    if "cancel_refund" not in names and cancels_refund(text):
        return _refund_cancel_answer(tool_results)
    return None


#: How the policy answers of a question domain start ("Daily limits: …", "Fees (standard plan): …", "International
#: fees: …") -> the word that asks that question again about another thing.
_ASPECT_OF_ANSWER = (("Daily limits", "limit"), ("Limits", "limit"), ("International fees", "fee abroad"),
                     ("Fees", "fee"))


def _with_previous_aspect(user_text: str, previous: str | None) -> str:
    """``user_text`` with the question of the previous answer added when it is an "and for X?" fragment
    (``nodes.embedded.replies.asks_same_for``) naming no question of its own and that answer was a limits or fees answer of
    the policy knowledge: "and for ATM withdrawals?" after "Daily limits: …" -> "limit and for ATM withdrawals?"."""
    from nodes.embedded.replies import asks_same_for

    if not previous or not asks_same_for(user_text) or _has(user_text.lower(), *_OWN_ASPECT):
        return user_text
    aspect = next((word for head, word in _ASPECT_OF_ANSWER if previous.startswith(head)), None)
    return f"{aspect} {user_text}" if aspect else user_text


def _answer_intent(agent: str, user_text: str, hint: str | None, acted: bool,
                   previous: str | None = None) -> tuple[DeskIntent | None, str | None]:
    """``(intent, policy answer)`` of :func:`compose_answer`: the desk intent whose answer follows the tool results
    (none for a message that only names a card; transfers' own reading of list and timing questions), or, when no
    tool ran (``acted`` False), the policy knowledge a specialist without the policy tool gives for a fee or limit
    question ("and for top-ups?" to billing, "what's the fee for international transfers?" to transfers), with no
    intent (the router's guess of one is dropped; an "and for X?" asks the question of the ``previous`` answer)."""
    text = user_text.lower()
    asked = _with_previous_aspect(user_text, previous)
    intent = None if agent == "cards" and _names_card_only(text) else resolve_intent(agent, user_text, hint)
    if agent == "transfers":
        intent = transfers_intent(text, intent)
    known: str | None = None
    if not acted and raises_limit(text, previous):
        known = _limit_changes_answer(previous)  # "can I raise it?" after a limit or fee, to an agent without the
        # policy tool
    elif agent == "billing" and not acted and (timing := transfer_timing_answer(text, previous)) is not None:
        known = timing
    elif agent == "billing" and not acted and _fee_of_another_thing(text):
        known = policy_knowledge_answer(asked if asked != user_text else f"fee {text}")
    elif agent == "billing" and not acted and _price_question(text):
        known = policy_knowledge_answer(text)
    elif agent in _WITHOUT_POLICY_TOOL and not acted and resolve_intent(agent, user_text) is None:
        known = policy_knowledge_answer(asked, default_subject=_WITHOUT_POLICY_TOOL[agent])
    if not known and not acted:
        known = handbook_follow_up(agent, user_text, previous)  # "what about Switzerland?" after the transfer times
    if known and previous and " ".join(known.split()).lower() == " ".join(previous.split()).lower():
        from policies.answers import AS_I_SAID  # the same handbook text asked for again: said so, not "nothing new"

        known = f"{AS_I_SAID} {known}"
    return (None, known) if known else (intent, None)


def _reply_without_tool(agent: str, user_text: str, asked: str | None = None,
                        previous: str | None = None, hint: str | None = None) -> str | None:
    """A specialist's answer when no tool ran and the message asks for none: a yes/no to "anything else?"
    (:data:`WHAT_ELSE_ANSWER` / :data:`PLAIN_NO_ANSWER`), a "no" to another question or offer (:data:`DECLINED_ANSWER`,
    which asks "anything else?" so the declined offer is no longer the open question), an "ok" that answers no offer
    (:data:`PLAIN_YES_ANSWER`), a "why?" with no record to explain (:data:`BARE_WHY_ANSWER`), "cancel that" to
    account (:data:`ACCOUNT_CANCEL_ANSWER`), cards' PIN how-to after a PIN answer (``previous``,
    :func:`pin_follow_up_answer`), a wish to close the account (:data:`CLOSE_ACCOUNT_QUESTION`: asked before anything
    is filed; ``hint``: the router's label), "how do I do it?" (:func:`how_to_answer`); else None."""
    if agent in _PLANNERS and (how := how_to_answer(user_text, previous)) is not None:
        return how  # "how do I do it?": the how of the desk's ``previous`` answer (:func:`how_to_answer`)
    text = user_text.lower()
    if agent == "cards" and (pin := pin_follow_up_answer(text, previous)) is not None:
        return pin
    if agent in _PLANNERS and is_acknowledgement(text):
        if is_plain_no(text):
            return PLAIN_NO_ANSWER if asked in (None, ANYTHING_ELSE, WHAT_ELSE_ANSWER) else DECLINED_ANSWER
        return WHAT_ELSE_ANSWER if asked == ANYTHING_ELSE and _bare_yes(text) else PLAIN_YES_ANSWER
    if agent in _PLANNERS and _bare_follow_up(text) and resolve_intent(agent, user_text) is None:
        # billing: a "why?" after a list of several payments (it explains one it named); any agent: a "why?" or "how?"
        # with no record to re-read (transfers after the transfer times: not the list of transfers)
        return BARE_WHY_ANSWER
    if agent == "account" and not _UNFREEZE_ACCOUNT.search(text) and not withdraws_account_request(text) and \
            getattr(resolve_intent(agent, user_text, hint), "args", {}).get("kind") == "close_account":
        return CLOSE_ACCOUNT_QUESTION
    if agent == "refunds" and _PICKS_BY_NAME.search(text) and not _TX_IN_TEXT.search(text):
        return REFUND_WHICH_BY_ID
    if agent == "refunds" and refuses_refund(text):
        named = _TX_IN_TEXT.search(text)
        return REFUSED_ANSWER.format(what=f" for {named.group(0)}" if named else "")
    if (agent == "refunds" and asks_about_refund(text) and not asks_for_refund(text) and not cancels_refund(text)
            and not _has(text, *_OWN_REFUND)):
        return f"{_refund_rules()} {REFUND_WHICH_QUESTION}"  # "what's your refund policy?", no payment known yet
    if agent == "account" and _has(text, *_TIMING) and resolve_intent(agent, user_text) is None:
        from nodes.tools import POLICY_KB  # the account agent's timing question: how long the identity checks take

        entry = POLICY_KB["verification"]
        return "Identity checks: " + "; ".join(c for c in _clauses(entry.text) if "minutes" in c) + "."
    return None


#: Refunds' answer when the customer says they want no refund (:func:`refuses_refund`): nothing is opened and nothing
#: is offered. ``{what}``: " for tx_1008" or "".
REFUSED_ANSWER = f"All right: I won't open a refund{{what}}, and nothing has been changed. {ANYTHING_ELSE}"
#: Refunds' question after the refund rules when no payment is known: the customer names one to be offered a refund.
REFUND_WHICH_QUESTION = "Would you like me to check a payment? Please give its id (such as tx_1234)."
#: A question about how refunds work ("what's your refund policy?", "what would a refund look like?"): the rules
#: come before the payment's eligibility.
_HOW_REFUNDS_WORK = (r"\bpolic", r"\bhow (?:do|does|would|will)\b", r"\blook like\b", r"\bwork\b", r"\brules?\b",
                     r"\bwhat would\b", r"\bprocess\b")


def _refund_rules() -> str:
    """The refund rules of the handbook (``nodes.tools.POLICY_KB["refunds"]``), as refunds says them."""
    from nodes.tools import POLICY_KB

    return f"Refunds: {POLICY_KB['refunds'].text}"


def _refunds_tail(text: str, names: list[str], parts: list[str]) -> list[str]:
    """Refunds' ``parts`` with what the (lower-cased) question still needs: after only the list of refunds for a
    money-back request, which transaction to refund; after an eligibility check asked how long refunds take, the
    refund times (:func:`_with_refund_times`)."""
    if names == ["refund_status"] and _has(text, *_MONEY_BACK) and not _has(text, *_REFUND_WHERE):
        return [*parts, "Which transaction would you like refunded? Please give its id (such as tx_1234)."]
    if names == ["check_refund_eligibility"] and _has(text, *_REFUND_TIMING):
        return _with_refund_times(parts)
    if names == ["check_refund_eligibility"] and asks_about_refund(text) and _has(text, *_HOW_REFUNDS_WORK):
        return [_refund_rules(), *parts]  # the rules asked about, then the payment's eligibility and the offer
    return parts


def _with_refund_times(parts: list[str]) -> list[str]:
    """``parts`` of an eligibility answer with the handbook's refund times (``refund_not_showing_up``) before the
    offer to open a refund, which stays the last question ("how long do refunds take? asking about tx_1001")."""
    times = load_knowledge().intents["refund_not_showing_up"].answer
    offered = any(REFUND_OFFER in p for p in parts)
    out = [q for q in (p.replace(REFUND_OFFER, "").strip() for p in parts) if q] + [times]
    return out + [REFUND_OFFER] if offered else out


def _currency_not_held(text: str, balance: dict[str, Any]) -> list[str]:
    """["You don't hold any EUR at the moment; your money is in GBP only."] when the (lower-cased) question names a
    currency the balance has none of ("and in euros?"), else []."""
    held = {b["currency"] for b in balance.get("balances") or []}
    asked = next((c for w, c in _CURRENCY_CODES.items() if re.search(rf"\b{w}", text)), None)
    if not asked or asked in held:
        return []
    return [f"You don't hold any {asked} at the moment" + (f"; your money is in {', '.join(sorted(held))} only."
                                                            if held else ".")]


_CANCEL_WORDS = (r"\bcancel", r"\bstop (?:it|the|my|this|that)\b", r"\b(?:undo|recall|call (?:it )?back)\b")
_WHY_PENDING = (r"\bwhy\b", r"\bstill\b", r"\btaking so long\b", r"\bstuck\b")


def _transfer_follow_up(text: str, result: dict[str, Any]) -> list[str]:
    """What the customer asked about the transfer whose status was just read: how to cancel
    it ("can I cancel it?", the handbook's ``cancel_transfer`` answer), or why it is still pending ("why is it still
    pending?", the handbook's ``pending_transfer`` answer)."""
    intents = load_knowledge().intents
    pending = (result.get("transfer") or {}).get("status") == "pending"
    out: list[str] = []
    if _has(text, *_CANCEL_WORDS) and "cancel_transfer" in intents:
        out.append("It is still pending, so you can still cancel it yourself in the app under Payments; once a "
                   "transfer has completed only the recipient can send the money back." if pending
                   else intents["cancel_transfer"].answer)
    elif pending and _has(text, *_WHY_PENDING) and "pending_transfer" in intents:
        out.append(intents["pending_transfer"].answer)
    return out


#: Cards' question when a bare "freeze it" names no card and the conversation meant none (no account freeze
#: is filed); a card the customer then names is frozen (:func:`plan_tool_call`).
FREEZE_WHICH = ("Do you want me to freeze a card or your whole account? For a card, tell me its last four digits and "
                "I'll freeze it right away; for the whole account, say \"freeze my account\" and I'll pass it to our "
                "team.")
#: The question of :data:`FREEZE_WHICH` (as ``nodes.embedded.replies.open_question_of`` finds it in the answer).
FREEZE_ASKED = FREEZE_WHICH.split("?")[0] + "?"


def _bare_card_action(text: str) -> bool:
    from nodes.embedded.replies import asks_card_action

    return asks_card_action(text)


def _card_follow_up(text: str) -> list[str]:
    if _has(text, *_UNFREEZE):
        return ["Tell me which card to unfreeze (its last four digits) and I'll do it right away."]
    if _bare_card_action(text):
        return [FREEZE_WHICH]
    if _has(text, *_CARD_FREEZE):
        return ["Tell me which card (its last four digits) and I'll freeze it right away."]
    return []


# --------------------------------------------------------------------------------------------------
# A payment the customer does not recognise: billing names it and offers a dispute; a yes opens it (refunds)
# --------------------------------------------------------------------------------------------------

#: The billing intent of a card payment the customer does not recognise (``nodes/data/desk_knowledge.json``).
NOT_RECOGNISED = "card_payment_not_recognised"
#: The question of that intent's answer after the list of recent payments (the knowledge file's text ends with it).
DISPUTE_WHICH = "Which of these payments didn't you make?"
#: Billing's open question asking which payment to dispute (:data:`DISPUTE_WHICH`, or its short form after a bare yes).
DISPUTE_WHICH_RE = re.compile(r"\bWhich (?:of these )?payments? didn't you make\?")


def dispute_offer(tx: dict[str, Any]) -> str:
    """The yes/no question billing asks about one named payment: ``"Shall I dispute tx_1001 (Tesco, £23.80) and ask
    for your money back?"``. A yes opens the dispute: a refund request through the refunds agent, with its usual
    eligibility check, risk rules and approval (``nodes.embedded.offline_model``)."""
    return f"Shall I dispute {tx['id']} ({tx['merchant']}, {_amt(tx)}) and ask for your money back?"


def _named_payment(text: str, results: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], bool] | None:
    """The one payment this turn's results name: the explained transaction (True: already described), or the one
    listed transaction whose merchant the customer named (False)."""
    for name, result in results:
        if not result.get("ok"):
            continue
        if name == "explain_transaction":
            return result["transaction"], True
        if name == "list_recent_transactions":
            hit = payment_named(text, result.get("transactions") or [])
            if hit is not None:
                return hit, False
    return None


def payment_named(text: str, transactions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one payment among ``transactions`` (tool views of the customer's own, newest first; top-ups are no
    payments) that ``text`` names by merchant (fuzzily), amount or day (``nodes.embedded.understanding.entities``),
    the newest when they are all of one merchant; None when it names none or several merchants."""
    from types import SimpleNamespace

    from nodes.embedded.understanding.entities import resolve_payments

    pool = [t for t in transactions if t.get("kind") != "top_up"]
    today = datetime.now(UTC).date()
    ids = resolve_payments(text, [SimpleNamespace(**t) for t in pool], today)
    hits = [t for t in pool if t["id"] in ids]
    return hits[0] if hits and len({t["merchant"] for t in hits}) == 1 else None


def dispute_answer(user_text: str, results: list[tuple[str, dict[str, Any]]], answer: str) -> str | None:
    """Billing's answer when the customer does not recognise a payment and one payment is named (its id, or the
    merchant among the recent payments): ``answer`` (the explanation) or that payment's line, then
    :func:`dispute_offer`. None when no single payment is named (the list and :data:`DISPUTE_WHICH` stand)."""
    found = _named_payment(user_text, results)
    if found is None:
        return None
    tx, described = found
    head = answer if described else f"That is {_tx_line(tx)}."
    if tx.get("status") in _NOTHING_TO_DISPUTE:  # no money left the account: nothing to dispute
        why = _NOTHING_TO_DISPUTE[tx["status"]]
        return head if described and why.split(",")[0] in head else f"{head} {why}"
    return f"{head} {dispute_offer(tx)}"


#: What billing says instead of a dispute offer about a payment that took no money (a dispute asks for money back).
_NOTHING_TO_DISPUTE = {
    "declined": ("This payment was declined, so no money left your account and there is nothing to dispute. If you "
                 "didn't try to make it, someone may have your card details: tell me and our cards team will freeze "
                 "the card."),
    "reverted": "The merchant cancelled this payment, so the money is back in your account and there is nothing to "
                "dispute.",
}
