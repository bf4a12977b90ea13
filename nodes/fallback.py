"""The fallback agent: a controlled, deterministic end when the automated desk cannot finish.

It answers with the facts so far and the open questions from the packet that brought control here,
and marks the task status ``fallback`` (a person takes over). It calls no model, so it cannot fail the way the model did.
"""

from __future__ import annotations

import re

from langchain_core.messages import AIMessage
from langgraph.graph import END
from langgraph.types import Command

from graph.contracts.packet import Fact, HandoffPacket
from graph.contracts.state import Outcome, ensure_ids, task_of
from graph.contracts.state_values import packet_to
from policies.entry import PERSON_REASON, WAITING_REASON

__all__ = ["fallback_node", "fallback_text", "customer_reason", "customer_fact", "PERSON_ANSWER", "PERSON_NEXT",
           "WAITING_ANSWER", "WAITING_AGAIN"]

#: Fallback's answer when the customer asked for a person (``policies.entry.PERSON_REASON``): the thread's task is
#: marked ``fallback`` and the thread is listed for the team (``switchboard threads``: last status fallback).
PERSON_ANSWER = "Of course. I've asked a member of our team to take over this conversation."
#: Fallback's answer to a greeting, "ok" or short fragment while the team has the conversation (``WAITING_REASON``).
WAITING_ANSWER = ("A member of our team has this conversation and will reply here. If something else comes up "
                  "meanwhile, such as a lost card, just tell me.")
#: The same said briefly when the customer writes again right after :data:`WAITING_ANSWER` (never the same words twice).
WAITING_AGAIN = "Our team will reply here as soon as they can."
#: How it goes on, after the facts so far.
PERSON_NEXT = ("They'll reply to you here, in this conversation, as soon as they can; you don't need to repeat "
               "anything.")


#: The few reasons a customer is told, each in fixed words of ours (:func:`customer_reason`): an internal reason
#: (a loop's state fingerprint, a hop budget, an exception, a tool name, who decided) is never shown; it stays in the
#: packet (``state["handoff"]``), the handoff path and the event log, for operators.
_CUSTOMER_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bthe \w+ service is unavailable\b|^(?:the risk check|the payment|recording the decision) failed\b"),
     "one of our services is unavailable"),
    (re.compile(r"^the model failed\b|^the model's output could not be used\b"),
     "our automated assistant could not answer"),
)
#: Packet facts not shown to the customer: internal record ids (the card's last four digits are shown), the raw
#: parts of an amount (``amount_minor``, ``currency``: the amount is shown once, formatted with its currency) and who
#: decided a refund (``decided_by``: packets of threads decided before it left the packet still carry it).
_INTERNAL_FACTS = frozenset({"card_id", "amount_minor", "currency", "decided_by"})
#: How each fact key reads in customer text (keys not listed read as their words: ``policy_topic`` -> "policy topic").
_FACT_LABELS = {
    "transaction_id": "transaction", "transaction_ids": "transactions", "original_transaction_id": "original payment",
    "refund_id": "refund", "refund_status": "refund status", "transfer_id": "transfer", "transfer_status":
    "transfer status", "card_last4": "card ending", "card_ref": "card", "card_status": "card status",
    "refund_eligible": "can be refunded",
}


def customer_reason(reason: str) -> str | None:
    """What the customer is told of a fallback's internal ``reason``: one of the fixed phrases of
    :data:`_CUSTOMER_REASONS` (``"the card_status service is unavailable (ConnectionError: down)"`` -> ``"one of our
    services is unavailable"``; ``"the model failed (timeout …)"`` -> ``"our automated assistant could not answer"``),
    else None — no reason at all ("loop detected: state fingerprint 702f… repeated …", "hop budget of 7 …",
    "bounce-back detected: …" are for operators only). Nothing of ``reason`` itself reaches the customer."""
    for pattern, phrase in _CUSTOMER_REASONS:
        if pattern.search(reason or ""):
            return phrase
    return None


def customer_fact(key: str, value: str, facts: dict[str, str] | None = None) -> str:
    """One packet fact in customer words: ``"amount", "100.00 GBP"`` -> ``"amount: £100.00"`` (money formatted with
    babel through ``checkpoints.business.money``, as everywhere in customer text; the minor units of ``facts`` when
    present, else the value parsed), ``"transaction_id", "tx_1008"`` -> ``"transaction: tx_1008"``."""
    if key == "policy_topic":  # "you asked about supported countries", not "question about: countries"
        return f"you asked about {value.replace('_', ' ')}"
    label = _FACT_LABELS.get(key, key.replace("_", " "))
    if key == "amount":
        value = _money_text(value, facts or {})
    return f"{label}: {value}"


def _money_text(value: str, facts: dict[str, str]) -> str:
    from checkpoints.business import money, parse_money

    minor, ccy = facts.get("amount_minor", ""), facts.get("currency", "")
    if minor.lstrip("-").isdigit() and ccy:
        try:
            return money(int(minor), ccy)
        except (ValueError, KeyError):
            pass
    parsed = parse_money(value)
    return money(*parsed) if parsed is not None else value


#: How the customer sees a fact nobody verified: what they said, or what an agent noted (model-written).
_SOURCE_NOTE = {"user_said": " (you told us)", "model_written": " (noted, not yet checked)"}


def _as_of(fact: Fact) -> str:
    """`` (as of 30 Nov 23:20 UTC)`` for a system-verified fact with its ``observed_at``; "" otherwise."""
    from checkpoints.business import parse_iso

    if fact.source != "system_verified" or not fact.observed_at or fact.key == "policy_topic":
        return ""  # a topic is what was asked, not a record read at a time
    try:
        dt = parse_iso(fact.observed_at)
    except (TypeError, ValueError):
        return ""
    return f" (as of {dt.day} {dt.strftime('%b')} {dt.strftime('%H:%M')} UTC)"


def fallback_text(packet: HandoffPacket | None) -> str:
    """The customer-facing fallback answer for ``packet`` (or None): a fixed apology, the reason only when it is one a
    customer is told (:func:`customer_reason`), the facts so far without internal ones (:data:`_INTERNAL_FACTS`), and
    the open questions."""
    reason_given = packet.reason if packet is not None else ""
    if reason_given == WAITING_REASON:
        return WAITING_ANSWER
    if reason_given == PERSON_REASON:  # asked for, not a failure: say who takes over and how, no apology
        parts = [PERSON_ANSWER]
    else:
        parts = ["I'm sorry, I couldn't complete this automatically, so I've passed it to a member of our team."]
        reason = customer_reason(reason_given)
        if reason:
            parts.append(f"(Reason: {reason}.)")
    all_facts = list(packet.known_facts) if packet is not None else []
    values = {f.key: f.value for f in all_facts if f.source == "system_verified"}
    values.update({f.key: f.value for f in all_facts if f.key not in values})
    known = [f for f in all_facts if f.key not in _INTERNAL_FACTS]
    facts = [f for f in known if f.source == "system_verified"]
    facts += [f for f in known if f.source != "system_verified"]
    if facts:
        parts.append("What we know so far: " + "; ".join(
            customer_fact(f.key, f.value, values) + _SOURCE_NOTE.get(f.source, "") + _as_of(f) for f in facts) + ".")
    questions = list(packet.open_questions) if packet is not None else []
    if questions:
        parts.append("Still open: " + " ".join(questions))
    parts.append(PERSON_NEXT if reason_given == PERSON_REASON else
                 "You don't need to repeat anything; a colleague will continue this conversation.")
    return " ".join(parts)


def fallback_node(state: dict) -> Command:
    """Answer with the facts so far and the open questions; mark the task ``fallback`` (a person takes over); end the turn."""
    text = fallback_text(packet_to(state, "fallback"))
    said = [str(m.content) for m in state.get("messages") or [] if isinstance(m, AIMessage) and m.name == "fallback"]
    if said and text == WAITING_ANSWER and said[-1] in (WAITING_ANSWER, WAITING_AGAIN):
        text = WAITING_AGAIN if said[-1] == WAITING_ANSWER else WAITING_ANSWER
    task = task_of(state)
    if task is not None:
        task = task.model_copy(update={"status": "fallback", "current_owner": "fallback",
                                       "owner_version": task.owner_version + 1})
    turn = int(state.get("turn") or 0)
    return Command(goto=END, update={
        "messages": ensure_ids([AIMessage(content=text, name="fallback")]),
        "active_agent": "fallback",
        "task": task,
        "outcome": Outcome(agent="fallback", text=text, status="fallback", turn=turn),
    })
