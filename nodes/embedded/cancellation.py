"""The embedded reader's rules for what a customer's message about a (paused) refund says: an explicit wish to cancel
(negation handled), an answer to the confirmation question, a status question, the records it names. Pure functions
over text, no I/O; the decisions over them are ``policies.cancellation``'s.

A paused refund is cancelled only in two steps: the customer says they want to cancel (:func:`wants_to_cancel`), the
desk asks "Cancel refund rf_… of £23.80? yes/no", and only an explicit yes (:func:`confirmation`) cancels it.
"Please don't cancel it", "do NOT withdraw my request", "what happens if I cancel?" are not a wish to cancel.

The word lists are this module's own (English; no dataset text). Why negation is handled: a match on the cancel verb
alone takes 4 of 5 negated phrasings for a wish to cancel a paused refund.
"""

from __future__ import annotations

import re
from typing import Literal

from graph.contracts.reading import MessageReading
from policies import cancellation as rules

__all__ = ["wants_to_cancel", "cancels_something_else", "confirmation", "is_status_question", "speaks_of_cancelling",
           "records_named", "is_acknowledgement", "paused_reply", "cancel_confirmed"]

#: A record id a customer may name: a transaction (tx_), transfer (tr_), refund (rf_) or service request (sr_).
_RECORD_ID = re.compile(r"\b(?:tx|tr|rf|sr)_[a-z0-9]+\b")

#: A wish to stop the request, as a verb phrase (negation is checked separately, in the words before it).
_CANCEL_VERB = re.compile(
    r"\b(?:cancel(?:l?ing|l?ed)?|withdraw(?:ing|n)?|call(?:ing)? (?:it |this |that |the refund )?off|abort|retract|revoke"
    r"|scrap|stop (?:it|this|that|the (?:refund|request)|my (?:refund|request))|drop (?:it|the (?:refund|request)|my "
    r"(?:refund|request))|forget (?:about )?(?:it|the refund|my refund)|never ?mind)\b")
#: A wish to stop phrased with a negation that *is* the intent ("I don't want the refund any more").
_NOT_WANTED = re.compile(
    r"\b(?:don'?t|do not|no longer) (?:want|need) (?:the |my |this |that |a )?(?:refund|money back|request)\b"
    r"|\b(?:don'?t|do not|no longer) (?:want|need) (?:it|this|that) any ?more\b")
#: Words before the verb (same clause) that turn it around: "don't", "not", "no need to", "rather not", …
_NEGATION = re.compile(
    r"\b(?:don'?t|dont|do not|does not|doesn'?t|not|never(?! ?mind)|no need to|needn'?t|shouldn'?t|should not|won'?t"
    r"|will not|wouldn'?t|would not|rather not|without|refuse to|no)\b")
#: Words before the verb that make it a question about cancelling, not a wish: "what happens if I cancel?".
_HYPOTHETICAL = re.compile(r"\b(?:if|whether|what happens|what if|would it|suppose|in case)\b")
#: A message that is only "stop" ("stop", "please stop", "stop now!"): the customer wants what is going on to stop.
_BARE_STOP = re.compile(r"(?:please )?stop(?: (?:please|now|that))?[.!]*")
_CLAUSE = re.compile(r"[.;!?]|,|\bbut\b|\bhowever\b|\bthough\b")

_YES = re.compile(r"^(?:yes|y|yeah|yep|yup|sure|confirm(?:ed)?|correct|please do|do it|go ahead|ok(?:ay)?|absolutely"
                  r"|affirmative|that'?s right)\b")
_NO = re.compile(r"^(?:no|n|nope|nah|don'?t|do not|keep|wait|hold on|not now|negative|cancel that question)\b")

_STATUS = re.compile(
    r"\b(?:status|where(?:'s| is)?|when|how long|any (?:news|update)|update|progress|what'?s happening|what is happening"
    r"|still waiting|been (?:approved|decided|paid|reviewed)|is it (?:approved|done|paid|through)|decided yet"
    r"|waiting (?:for|on))\b")


#: A plain yes or ok that asks for nothing ("yes", "ok great", "sure, thanks"): while a refund waits for approval it
#: answers no question of the desk and is acknowledged (``ack``), not refused.
_ACK = re.compile(r"(?:yes|y|yeah|yep|yup|sure|ok(?:ay)?|alright|all right|fine|great|cool|good|perfect|got it|noted"
                  r"|understood)(?:[ ,.!]+(?:please|thanks?|thank you|great|good|cool|ok(?:ay)?|sure|fine))*[ .!]*")


def _norm(text: str) -> str:
    return " ".join((text or "").replace("\u2019", "'").replace("\u2018", "'").lower().split())


def wants_to_cancel(text: str) -> bool:
    """True when ``text`` explicitly asks to cancel (withdraw, call off, stop, never mind, "I don't want the refund any
    more"), and no negation ("don't", "not", "no need to", "rather not", …) or hypothetical ("if", "what happens if")
    comes before the verb in the same clause. "Please don't cancel it" -> False; "cancel it, please" -> True."""
    t = _norm(text)
    if _NOT_WANTED.search(t) or _BARE_STOP.fullmatch(t):
        return True
    for clause in _CLAUSE.split(t):
        for m in _CANCEL_VERB.finditer(clause):
            before = clause[: m.start()]
            if _NEGATION.search(before) or _HYPOTHETICAL.search(before):
                continue
            return True
    return False


#: What a customer may want cancelled besides a refund: a cancel wish naming one of these and no refund ("I want to
#: cancel my subscription to Netflix") is no refund's (its "yes" never withdraws a pending refund such as rf_5001).
_OTHER_THING = re.compile(r"\b(?:subscriptions?|memberships?|direct debits?|standing orders?|cards?|accounts?|"
                          r"transfers?|bookings?|plans?|contracts?|insurance|policies|policy|tickets?|flights?)\b")
_REFUND_WORD = re.compile(r"\brefund|\brf_\w+|\bmoney back\b")


def cancels_something_else(text: str) -> bool:
    """Is ``text`` a wish to cancel something that is not a refund (:data:`_OTHER_THING` named, no refund word)?
    Such a wish never leads to the question "Shall I cancel refund …?"."""
    t = _norm(text)
    return bool(_OTHER_THING.search(t)) and not _REFUND_WORD.search(t)


def confirmation(text: str) -> Literal["yes", "no"] | None:
    """The answer to "Cancel refund …? yes/no": ``"yes"`` only for a plain yes (yes/confirm/go ahead/ok, possibly
    followed by words: "yes, cancel it"), ``"no"`` for no/keep/wait (or a negated cancel such as "don't cancel"), None
    when it answers neither — a fresh "cancel …" sentence is a new wish, not a yes ("cancel the refund for
    tx_1005" does not confirm the question about another refund)."""
    t = _norm(text)
    if _NO.match(t) and not _YES.match(t):
        return "no"
    if _YES.match(t):
        return "no" if _NEGATION.search(t) and not wants_to_cancel(t) and _CANCEL_VERB.search(t) else "yes"
    if wants_to_cancel(t):
        return None  # a new wish to cancel: the caller asks its question again
    if _CANCEL_VERB.search(t):
        return "no"  # a cancel verb that was negated: "please don't cancel"
    return None


def speaks_of_cancelling(text: str) -> bool:
    """True when ``text`` uses a cancel verb at all, wished, negated or hypothetical ("please don't cancel it", "do NOT
    withdraw my request"): on a paused thread such a message is about the refund, never another specialist's
    question."""
    return bool(_CANCEL_VERB.search(_norm(text)) or _NOT_WANTED.search(_norm(text)))


def is_status_question(text: str) -> bool:
    """True when ``text`` asks where the request stands ("any news?", "where is my refund", "how long will it take",
    "has it been approved?")."""
    t = _norm(text)
    return bool(_STATUS.search(t)) or (t.endswith("?") and not _CANCEL_VERB.search(t))




def records_named(text: str) -> tuple[str, ...]:
    """The record ids ``text`` names (tx_/tr_/rf_/sr_, lower case, in order, once each)."""
    return tuple(dict.fromkeys(m.group(0) for m in _RECORD_ID.finditer(_norm(text))))


def is_acknowledgement(text: str) -> bool:
    """Is ``text`` a plain yes or ok that asks for nothing ("yes", "ok great", "sure, thanks")?"""
    return bool(_ACK.fullmatch(_norm(text)))


def reading_of(text: str) -> MessageReading:
    """The paused-refund part of the reading of ``text`` (``graph.contracts.reading.MessageReading``)."""
    return MessageReading(text=text, records_named=records_named(text),
                          cancel_wish=wants_to_cancel(text) and not cancels_something_else(text),
                          speaks_of_cancelling=speaks_of_cancelling(text), confirmation=confirmation(text),
                          status_question=is_status_question(text), acknowledgement=is_acknowledgement(text))


def paused_reply(text: str, awaiting_confirmation: bool, refund_id: str | None = None,
                 transaction_id: str | None = None) -> rules.PausedReply:
    """``policies.cancellation.paused_reply`` over this module's reading of ``text``."""
    return rules.paused_reply(reading_of(text), awaiting_confirmation, refund_id, transaction_id)


def other_records(text: str, refund_id: str | None = None, transaction_id: str | None = None) -> tuple[str, ...]:
    """``policies.cancellation.other_records`` over the records ``text`` names."""
    return rules.other_records(MessageReading(records_named=records_named(text)), refund_id, transaction_id)


def cancel_confirmed(previous_answer: str | None, reply: str, refund_id: str) -> bool:
    """``policies.cancellation.cancel_confirmed`` for the desk's ``previous_answer`` (its last question) and the
    customer's ``reply``."""
    sentences = re.split(r"(?<=[.!?])\s+", (previous_answer or "").strip())
    asked = [x.strip() for x in sentences if x.strip().endswith("?")]
    return rules.cancel_confirmed(asked[-1] if asked else None, confirmation(reply), refund_id)
