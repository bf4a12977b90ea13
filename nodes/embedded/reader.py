"""The embedded desk's :class:`graph.contracts.reading.MessageReader`: one reading of a customer's message per turn, made of
this package's keyword rules (``replies``, ``cancellation``, ``playbook``, ``offline_model``, ``desk_knowledge``) and
its learned readers (``understanding``: language, dialogue act, the customer's payments a message names).

The model factory (``nodes.models.make_reader``) hands it to the runtime with the chat model; the runtime never calls
these rules itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from graph.contracts.reading import MessageReading, ReadingContext, RouteView
from nodes.embedded import cancellation, playbook, replies
from nodes.embedded.desk_knowledge import SOCIAL_TOPICS, load_knowledge, social_answers, social_topic
from nodes.embedded.offline_model import is_safety_report, rest_of_safety_report, wants_refund
from nodes.embedded.understanding.entities import parse_amount, resolve_payments
from nodes.embedded.understanding.reading import (
    asks_before_acting,
    is_frustrated,
    reports_foreign_loss,
    understand,
    wants_person,
)
from policies.edges import OUT_OF_SCOPE, SPECIALISTS
from policies.entry import NEW_TOPIC_CONFIDENCE, OUT_OF_SCOPE_SURE, scope_of

__all__ = ["EmbeddedReader"]

#: Words that make a status question one about the paused refund itself ("any news?", "has it been approved?").
_ABOUT_THE_REFUND = re.compile(r"\b(?:refund\w*|money back|request|approv\w*|decid\w*|decision|paid|review\w*|news|"
                               r"update|progress|it)\b", re.I)


class EmbeddedReader:
    """Reads messages with the embedded desk's rules; ``router``: the intent router (``.route(text) -> Route``) that
    reads the subject of a follow-up opener ("what about a personal loan?")."""

    def __init__(self, router: Any):
        self.router = router

    def read(self, text: str, context: ReadingContext) -> MessageReading:
        """The reading of ``text`` (``graph.contracts.reading.MessageReading``, every field documented there) in ``context``."""
        text = text or ""
        understood = self._understood(text, context)
        return MessageReading(text=text, **self._conversation(text, context, understood), **_about_a_refund(text),
                              **understood, social_topic=social_topic(context.route, text))

    def _understood(self, text: str, context: ReadingContext) -> dict[str, Any]:
        """The fields the learned readers give (``understanding``): language, dialogue act, frustration, a request for
        a person in any wording (or frustration a second time on the thread), a question about an action, and the
        specialist of what the message names past the router (:meth:`_named_route`)."""
        if not text.strip():
            return {}
        u = understand(text)
        frustrated = is_frustrated(text)
        again = frustrated and any(is_frustrated(t) for t in context.earlier_messages)
        return {"language": u.language.code, "language_name": u.language.name, "act": u.act.act,
                "frustrated": frustrated, "wants_person": wants_person(text) or again,
                "asks_before_acting": asks_before_acting(text), "named_route": self._named_route(text, context)}

    def _named_route(self, text: str, context: ReadingContext) -> RouteView | None:
        """A card loss reported in another language is cards' (safety first, whatever the router read). A message the
        router calls out of scope that names exactly one of the customer's own payments ("refund for the uber ride",
        "the £250 I sent to Charles": :func:`_payment_owner`) is that payment's specialist's; one whose last clause the
        router gives a specialist ("sorry - what's my balance?": :meth:`_last_clause_route`) is that specialist's.
        None otherwise."""
        if reports_foreign_loss(text):
            return RouteView(agent="cards", intent="card_lost", confidence=1.0)
        route = context.route
        if route is None or scope_of(route.agent, route.intent) != "out_of_scope":
            return None
        owner = _payment_owner(text, context)
        if owner is not None:
            return RouteView(agent=owner, intent="payment_named", confidence=1.0)
        return self._last_clause_route(text)

    def _last_clause_route(self, text: str) -> RouteView | None:
        """The router's reading of the last clause of ``text`` (after its last dash, colon, comma or semicolon: "sorry -
        what's my balance?", "ok, in English: what's my balance?") when it gives a specialist at least
        ``policies.entry.NEW_TOPIC_CONFIDENCE``; None otherwise. An apology or a lead-in before the request is not the
        request."""
        cut = max(text.rfind(c) for c in ("-", ":", ",", ";"))
        tail = text[cut + 1:].strip() if cut >= 0 else ""
        if len(tail.split()) < 2:
            return None
        route = RouteView.of(self.router.route(tail))
        if route is None or route.agent not in SPECIALISTS or route.confidence < NEW_TOPIC_CONFIDENCE:
            return None
        return route

    def _conversation(self, text: str, context: ReadingContext, understood: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of the reading that read ``text`` against the conversation (reply kind, follow-ups, owners), with
        the router's reading as the ``understood`` fields correct it (``policies.entry.learned_routed``): a named
        route is a topic of its own ("meanwhile, what's my balance?" is no fragment for the team), a frustrated
        message the router reads as out of scope is none."""
        last_text = context.previous_answer or ""
        listed = replies.listed_items_of(last_text) or replies.listed_cards_of(last_text)
        loss = playbook.reports_card_loss(text.lower())
        named: RouteView | None = understood.get("named_route")
        route = named or context.route
        raw = context.route
        calmed = raw is not None and understood.get("frustrated", False) \
            and scope_of(raw.agent, raw.intent) == "out_of_scope"
        topic = named is not None or (context.router_topic and not calmed)
        own_topic = topic or loss  # a card loss in the customer's words is always a topic of its own
        reply = replies.classify_reply(text, listed, has_topic=own_topic)
        owners = replies.record_owners(text)
        if playbook.names_card_by_ending(text) and replies.listed_cards_of(last_text):
            owners = owners | {"cards"}  # "actually it's the one ending 8899" after an answer that named a card
        routed = route.agent if route else None
        # a word the last answer used is no lean when the router is sure of another specialist: "what is my balance?"
        # after "… the money is already in your balance" is account's, not refunds'
        other_topic = own_topic and routed in SPECIALISTS and routed != context.active_agent
        back = replies.refers_back(text, listed) or (replies.takes_up_last_answer(text, last_text) and not other_topic)
        opener = replies.opens_follow_up(text)
        opener_oos = opener and not owners and self.opener_out_of_scope(
            text, context.previous_agent == OUT_OF_SCOPE, context.specialist_answer)
        return {"reply": reply.kind, "item": reply.item, "listed": listed, "record_owners": owners,
                "loss_report": loss, "refers_back": back,
                "same_question": _same_question(text, last_text, opener and not opener_oos),
                "follow_up_opener": opener, "opener_out_of_scope": opener_oos,
                "card_action": replies.asks_card_action(text), "lists_records_of": replies.lists_records_of(text)}

    def opener_out_of_scope(self, text: str, after_out_of_scope: bool = False,
                            specialist_answer: str | None = None) -> bool:
        """Is ``text`` a follow-up opener whose subject the desk does not serve ("what about crypto?", "what about a
        mortgage?": ``replies.opener_subject``)? True when nothing in the handbook covers the subject
        (``playbook.knows_subject``), or the subject names nothing of the desk (``playbook.names_desk_subject``: a
        place, a record, a fee subject …) and the router, reading the subject alone, is sure
        (>= ``policies.entry.OUT_OF_SCOPE_SURE``) the desk does not serve it ("a personal loan": 0.96). Without this
        rule such openers would get the previous answer again or another specialist's answer. ``after_out_of_scope``:
        the desk's previous answer was the out_of_scope one; an opener then asks that question again about its subject
        ("what about Paris?" after the weather) unless the subject is something of the desk other than a place, or a
        place of the handbook (``DeskKnowledge.region_of``) while ``specialist_answer`` (the last answer of a
        specialist, before the out-of-scope one) gave a rule a place can change (``playbook.speaks_of_places``):
        countries, then "what about a mortgage?", then "what about Switzerland?" asks the countries question again."""
        subject = replies.opener_subject(text)
        if subject is None:
            return False
        if not playbook.knows_subject(subject):
            return True
        if after_out_of_scope and not playbook.names_desk_subject(subject, places=False):
            return not (load_knowledge().region_of(subject) is not None and playbook.speaks_of_places(specialist_answer))
        if playbook.names_desk_subject(subject):
            return False
        route = RouteView.of(self.router.route(subject))
        assert route is not None
        return scope_of(route.agent, route.intent) == "out_of_scope" and route.confidence >= OUT_OF_SCOPE_SURE

    def social_answer(self, topic: str) -> str | None:
        """The handbook's answer to social ``topic`` (``desk_knowledge.SOCIAL_TOPICS``), None for another topic."""
        return load_knowledge().conversational.get(topic) if topic in SOCIAL_TOPICS else None

    def social_answers(self) -> frozenset[str]:
        """The handbook's answers to a greeting, thanks, goodbye, a question about the desk or what it can do."""
        return social_answers()

    def plan_tool_call(self, agent: str, text: str, facts: Mapping[str, str], done: Sequence[str],
                       hint: str | None = None) -> playbook.ToolCallPlan | None:
        """``agent``'s next business-tool call for ``text`` (``playbook.plan_tool_call``)."""
        return playbook.plan_tool_call(agent, text, dict(facts), list(done), hint)

    def compose_answer(self, agent: str, text: str, results: Sequence[tuple[str, Mapping[str, Any]]],
                       hint: str | None = None) -> str:
        """``agent``'s answer to ``text`` from the tool ``results`` (``playbook.compose_answer``)."""
        return playbook.compose_answer(agent, text, [(n, dict(r)) for n, r in results], hint)


def _same_question(text: str, last_text: str, desk_opener: bool) -> bool:
    """Does ``text`` ask the previous question again: about another thing, for news, with no content of its own, a new
    address after an address answer, or (``desk_opener``: a follow-up opener about something of the desk) about
    another place of the handbook ("and the US?" after a delivery estimate for Germany: the router reads the place
    alone as a question about the supported countries)?"""
    if (replies.asks_same_for(text) or replies.asks_for_news(text) or replies.is_bare_follow_up(text)
            or replies.reports_it_failed(text)):
        return True
    # "it's 12 Baker Street, London" after an answer about the address: the new address, for the agent that answered
    if replies.gives_address(text) and "address" in last_text.lower():
        return True
    return desk_opener and load_knowledge().region_of(replies.opener_subject(text) or "") is not None


#: The specialist of a payment a message names, by its kind (transfers are transfers'; the rest billing's, which
#: hands a money-back request on to refunds with the payment found).
_PAYMENT_OWNERS = {"transfer_out": "transfers", "transfer_in": "transfers"}


def _payment_owner(text: str, context: ReadingContext) -> str | None:
    """The specialist of the one payment of the customer's own latest (``context.own_payments``) that ``text`` names
    by merchant, amount or day (``understanding.entities.resolve_payments``), or None (no payments known, none or
    several of more than one kind). Only a message with an amount or asking for money back counts: "get me an uber to
    the airport" names no payment of the customer's Uber ride."""
    if context.own_payments is None or context.today is None:
        return None
    if parse_amount(text) is None and not wants_refund(text):
        return None
    payments = list(context.own_payments())
    found = set(resolve_payments(text, payments, context.today))
    owners = {_PAYMENT_OWNERS.get(p.kind, "billing") for p in payments if p.id in found}
    return owners.pop() if len(owners) == 1 else None


def _about_a_refund(text: str) -> dict[str, Any]:
    """The fields of the reading about a (paused) refund and a card loss: cancel wish, confirmation, status question,
    records named, the safety report and the rest of it."""
    # a question about freezing ("should i freeze my card just in case?") reports no loss: answered, nothing frozen
    safety = is_safety_report(text) and not playbook.asks_whether_to_freeze(text)
    return {"safety_report": safety, "records_named": cancellation.records_named(text),
            "cancel_wish": cancellation.wants_to_cancel(text) and not cancellation.cancels_something_else(text),
            "speaks_of_cancelling": cancellation.speaks_of_cancelling(text),
            "confirmation": cancellation.confirmation(text), "status_question": cancellation.is_status_question(text),
            "about_the_refund": bool(_ABOUT_THE_REFUND.search(text)),
            "acknowledgement": cancellation.is_acknowledgement(text), "wants_refund": wants_refund(text),
            "rest_of_loss_report": " ".join(rest_of_safety_report(text)) if safety else ""}
