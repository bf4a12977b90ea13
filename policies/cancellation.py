"""What a customer's message on a paused refund means: an explicit wish to cancel (negation handled), an answer to the
confirmation question, a status question, or something else. Pure functions, no I/O.

A paused refund is cancelled only in two steps: the customer says they want to cancel (:func:`wants_to_cancel`), the
desk asks "Cancel refund rf_… of £23.80? yes/no", and only an explicit yes (:func:`confirmation`) cancels it.
"Please don't cancel it", "do NOT withdraw my request", "what happens if I cancel?" are not a wish to cancel.

The word lists are this module's own (English; no dataset text). Why negation is handled: a match on the cancel verb
alone takes 4 of 5 negated phrasings for a wish to cancel a paused refund.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["PausedReply", "wants_to_cancel", "cancels_something_else", "confirmation", "is_status_question",
           "paused_reply", "speaks_of_cancelling", "CANCEL_QUESTION", "cancel_confirmed", "other_records",
           "CONFIRMATION_ACTION", "confirmation_key", "cancel_was_confirmed"]

#: The refunds agent's question before it cancels a waiting refund no conversation pauses on (``{refund_id}``: rf_…);
#: only a yes to it cancels (:func:`cancel_confirmed`).
CANCEL_QUESTION = "Shall I cancel refund {refund_id}?"

#: The audit action under which the desk records its cancel question on a paused thread and the customer's answer
#: (``nodes.paused_dialogue``): ``detail.state`` ``"asked"`` (the question is the desk's last
#: word on the thread) or ``"answered"`` (with ``detail.reply``: ``cancel`` for the yes, ``keep``, or what else was
#: answered instead), under the key :func:`confirmation_key`.
CONFIRMATION_ACTION = "cancel_confirmation"

#: What the desk does with a message on a paused thread: ``ask`` (ask the yes/no confirmation), ``cancel`` (the
#: customer confirmed: cancel), ``keep`` (the customer said no: the refund stays with the team), ``status`` (answer
#: where the refund stands), ``ack`` (a plain yes/ok that answers no question), ``elsewhere`` (the message names another
#: record — a transfer, another refund, a transaction other than the paused refund's: it is not about the paused
#: refund, which it never cancels), ``other`` (not understood while paused: the caller refuses with a hint).
PausedReply = Literal["ask", "cancel", "keep", "status", "ack", "elsewhere", "other"]

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


def other_records(text: str, refund_id: str | None = None, transaction_id: str | None = None) -> tuple[str, ...]:
    """The record ids ``text`` names (tx_/tr_/rf_/sr_, lower case, in order, once each) other than the paused refund
    ``refund_id`` and its own transaction ``transaction_id`` (both read from the refund's record by the caller, never
    from a message). Empty when the message names nothing else. "cancel tr_3002" -> ("tr_3002",); "cancel the refund
    for tx_1001" on tx_1001's refund -> ()."""
    own = {x.lower() for x in (refund_id, transaction_id) if x}
    found: list[str] = []
    for m in _RECORD_ID.finditer(_norm(text)):
        if m.group(0) not in own and m.group(0) not in found:
            found.append(m.group(0))
    return tuple(found)


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


def paused_reply(text: str, awaiting_confirmation: bool, refund_id: str | None = None,
                 transaction_id: str | None = None) -> PausedReply:
    """What to do with ``text`` on a thread paused for an approval. ``awaiting_confirmation``: the desk asked the
    cancel question and the customer has not answered it yet; ``refund_id``/``transaction_id``: the paused refund and
    its own transaction (from the refund's record).

    A message naming another record (:func:`other_records`) never cancels the paused refund nor confirms its question:
    a cancel wish, yes/no or status question about it -> ``elsewhere``, anything else -> ``other``.
    Awaiting: a plain yes -> ``cancel``; no -> ``keep``; otherwise as below. Not awaiting: an explicit wish to
    cancel -> ``ask``; a status question -> ``status``; a plain yes/ok (:data:`_ACK`) -> ``ack``; anything else ->
    ``other``. Nothing cancels without the yes."""
    if other_records(text, refund_id, transaction_id):
        # about another record: its cancel wish, yes/no or status question is answered read-only; any other request
        # ("I want a refund for tx_1005") is refused like every change while paused
        about = speaks_of_cancelling(text) or confirmation(text) is not None or is_status_question(text)
        return "elsewhere" if about else "other"
    if awaiting_confirmation:
        answer = confirmation(text)
        if answer == "yes":
            return "cancel"
        if answer == "no":
            return "keep"
    if wants_to_cancel(text) and not cancels_something_else(text):
        return "ask"
    if is_status_question(text):
        return "status"
    if _ACK.fullmatch(_norm(text)):
        return "ack"
    return "other"


def cancel_confirmed(previous_answer: str | None, reply: str, refund_id: str) -> bool:
    """May ``refund_id`` be cancelled now? True only when the desk's answer just before the customer's ``reply``
    asked :data:`CANCEL_QUESTION` for that very refund (as its last question) and ``reply`` confirms it
    (:func:`confirmation` is ``"yes"``). The code's check on the ``cancel_refund`` tool, whatever the model decided:
    an explicit wish, then a yes (this module's rule for paused refunds, applied to every refund)."""
    question = CANCEL_QUESTION.format(refund_id=refund_id)
    sentences = re.split(r"(?<=[.!?])\s+", (previous_answer or "").strip())
    asked = [x.strip() for x in sentences if x.strip().endswith("?")]
    return bool(asked) and asked[-1] == question and confirmation(reply) == "yes"


def confirmation_key(thread_id: str, task_id: str) -> str:
    """The audit key of the cancel confirmation of paused task ``task_id`` on ``thread_id`` (:data:`CONFIRMATION_ACTION`):
    one question per pause, so a yes never carries over to another refund's pause."""
    return f"{CONFIRMATION_ACTION}:{thread_id}:{task_id}"


def cancel_was_confirmed(latest: Mapping[str, Any] | None) -> bool:
    """May the customer's ``cancel`` decision be taken on a paused refund, given ``latest``, the ``detail`` of the
    newest confirmation record of that pause (:func:`confirmation_key`; None when the desk never asked)?

    True when the desk's question "Cancel refund …? yes/no" is still the last thing it said on the pause
    (``state == "asked"``: a cancel decision sent now is the answer to it — over HTTP, ``resume {"decision":
    "cancel"}``), or when the customer's yes to it was recorded (``state == "answered"``, ``reply == "cancel"``: the
    chat records the yes just before it resumes). False otherwise: never asked, answered no, or the desk answered
    something else since. The module doc's two-step rule, applied to every way a decision arrives."""
    if not isinstance(latest, Mapping):
        return False
    return latest.get("state") == "asked" or (latest.get("state") == "answered" and latest.get("reply") == "cancel")
