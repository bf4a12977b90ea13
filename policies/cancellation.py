"""A paused refund is cancelled only in two steps: the customer says they want to cancel, the desk asks "Cancel refund
rf_… of £23.80? yes/no", and only an explicit yes cancels it. Rules over the message's reading
(``graph.contracts.reading.MessageReading``: cancel wish, confirmation, status question, records named), no text, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from graph.contracts.reading import MessageReading

__all__ = ["PausedReply", "paused_reply", "other_records", "CANCEL_QUESTION", "cancel_confirmed",
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


def other_records(reading: MessageReading, refund_id: str | None = None,
                  transaction_id: str | None = None) -> tuple[str, ...]:
    """The record ids the message names (``reading.records_named``) other than the paused refund ``refund_id`` and its
    own transaction ``transaction_id`` (both read from the refund's record by the caller, never from a message).
    Empty when the message names nothing else: "cancel tr_3002" -> ("tr_3002",); "cancel the refund for tx_1001" on
    tx_1001's refund -> ()."""
    own = {x.lower() for x in (refund_id, transaction_id) if x}
    return tuple(r for r in reading.records_named if r not in own)


def paused_reply(reading: MessageReading, awaiting_confirmation: bool, refund_id: str | None = None,
                 transaction_id: str | None = None) -> PausedReply:
    """What to do with a message (its ``reading``) on a thread paused for an approval. ``awaiting_confirmation``: the
    desk asked the cancel question and the customer has not answered it yet; ``refund_id``/``transaction_id``: the
    paused refund and its own transaction (from the refund's record).

    A message naming another record (:func:`other_records`) never cancels the paused refund nor confirms its question:
    a cancel wish, yes/no or status question about it -> ``elsewhere``, anything else -> ``other``.
    Awaiting: a plain yes -> ``cancel``; no -> ``keep``; otherwise as below. Not awaiting: an explicit wish to
    cancel -> ``ask``; a status question -> ``status``; a plain yes/ok -> ``ack``; anything else -> ``other``. Nothing
    cancels without the yes."""
    if other_records(reading, refund_id, transaction_id):
        # about another record: its cancel wish, yes/no or status question is answered read-only; any other request
        # ("I want a refund for tx_1005") is refused like every change while paused
        about = reading.speaks_of_cancelling or reading.confirmation is not None or reading.status_question
        return "elsewhere" if about else "other"
    if awaiting_confirmation:
        if reading.confirmation == "yes":
            return "cancel"
        if reading.confirmation == "no":
            return "keep"
    if reading.cancel_wish:
        return "ask"
    if reading.status_question:
        return "status"
    if reading.acknowledgement:
        return "ack"
    return "other"


def cancel_confirmed(open_question: str | None, confirmation: Literal["yes", "no"] | None, refund_id: str) -> bool:
    """May ``refund_id`` be cancelled now? True only when the desk's answer just before the customer's reply asked
    :data:`CANCEL_QUESTION` for that very refund as its last question (``open_question``) and the reply confirms it
    (``confirmation`` is ``"yes"``, ``MessageReading.confirmation``). The code's check on the ``cancel_refund`` tool,
    whatever the model decided: an explicit wish, then a yes (the paused refunds' rule, applied to every refund)."""
    return open_question == CANCEL_QUESTION.format(refund_id=refund_id) and confirmation == "yes"


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
