"""Where the next turn of a thread starts (control-flow rule 6), decided from the thread's state, not the router alone.

Inputs are typed data (the entry node gathers them; every input and the reason go into the ``entry_decided`` event):
the turn's reading of the message (``graph.contracts.reading.MessageReading``: what kind of reply it is, the records it names,
whether it leans on the conversation …), the router's reading of it (:class:`Routed`) and the thread's state
(:class:`ThreadView`: who holds the conversation, the question it left open, identity, permission, availability, a
task waiting for a human, clarify rounds without progress).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from graph.contracts.reading import MessageReading, ReplyKind, RouteView
from policies.edges import CLARIFY, FALLBACK, OUT_OF_SCOPE, SPECIALISTS, TRIAGE

__all__ = ["EntryDecision", "ThreadView", "Routed", "choose_entry", "learned_routed", "scope_of", "CONTINUE_CONFIDENCE",
           "NEW_TOPIC_CONFIDENCE", "MAX_CLARIFY_ROUNDS", "NO_SPECIALIST", "PERSON_REASON", "LANGUAGE_REASON", "NAMED_REASON",
           "OUT_OF_SCOPE_SURE", "CARD_ACTION_OWNER",
           "WAITING_REASON", "OUT_OF_SCOPE_TOPICS", "CHITCHAT_TOPICS", "OUT_OF_SCOPE_PREFIX", "Scope"]

#: Minimum router confidence for keeping the current agent on a self-contained request; below it the message is
#: re-triaged. Chosen on the shipped router's calibration: wrong-agent predictions cluster below 0.35.
CONTINUE_CONFIDENCE = 0.35
#: A short follow-up (a fragment, or an identifier nobody asked for) leaves the active agent only when the router gives
#: another specialist at least this probability (a clear new topic such as "the virtual one" after a fees question);
#: chosen on the follow-up table of ``tests/scenarios/test_conversation_routing.py``.
NEW_TOPIC_CONFIDENCE = 0.5
#: A short follow-up (a fragment) leaves the agent holding the conversation for the out_of_scope answer when the router
#: gives "not served here" at least this probability and the fragment neither opens as a follow-up ("what about X?")
#: nor points back at the last answer. On the shipped router, the out-of-scope fragments ("what is a
#: mortgage rate today?" 0.95, "what is the weather today?" 0.97) are above it, and the follow-ups of
#: ``tests/scenarios/test_conversation_routing.py`` and ``tests/scenarios/test_conversation_flows.py`` read as out of scope
# either open as a follow-up
#: ("what about Switzerland?" 0.93), ask the same question again ("can I raise it?" 0.92) or stay below it.
OUT_OF_SCOPE_SURE = 0.9
#: The specialist whose action a bare "freeze it" / "unfreeze it" asks for (``nodes.embedded.replies.asks_card_action``).
CARD_ACTION_OWNER = "cards"
#: Clarifying answers in a row after which an answer that still names no specialist goes to fallback.
MAX_CLARIFY_ROUNDS = 2
#: The entry reason when the customer asks for a person (fallback words its answer for that case: ``nodes.fallback``).
PERSON_REASON = "the customer asked for a person"
#: The entry reason for a message in another language than English that reports no lost card
#: (``MessageReading.language``); the out_of_scope node answers it with the desk's language answer, in English.
LANGUAGE_REASON = "written in another language than English"
#: The entry reason for a message the router reads as out of scope that names one of the customer's own payments or
#: asks a specialist's question after a lead-in (``MessageReading.named_route``).
NAMED_REASON = "the specialist of the payment or the request the message names"
#: The entry reason when fallback holds the conversation (a person takes over) and the customer sends a greeting, yes/no
#: or short fragment without a topic of its own: fallback says the team has it (a new topic is triaged as usual).
WAITING_REASON = "the conversation waits for a person"
#: The router's label for "no specialist" (greetings, thanks, off-topic, other products).
NO_SPECIALIST = "other"

#: The router's fine labels (topics of ``nodes/data/router_examples.csv``) under "no specialist" that mean "a request
#: the desk does not serve" (other banking products, other domains); every other "no specialist" label (greetings,
#: thanks, yes/no, are-you-a-bot, gibberish) is conversational.
OUT_OF_SCOPE_TOPICS = frozenset({"out_of_scope_finance", "off_topic"})

#: CLINC150's conversational categories (a trained router's ``conversational:<category>`` labels) that ask the
#: assistant for something a bank's support desk does not do (a joke, a fun fact, its hobbies, device settings): out of
#: scope like off-topic requests. The
#: other conversational categories are greetings, thanks, questions about the assistant and replies (yes/no/cancel).
CHITCHAT_TOPICS = frozenset({"tell_joke", "fun_fact", "meaning_of_life", "do_you_have_pets", "what_are_your_hobbies",
                             "change_speed", "whisper_mode", "change_volume", "change_language", "change_accent",
                             "sync_device", "change_user_name", "change_ai_name", "reset_settings", "user_name"})

#: The router's reading of a message: a specialist's topic (None), or one of the two "no specialist" kinds.
Scope = Literal["out_of_scope", "conversational"] | None


#: Prefix of a trained router's fine labels of a label map's ``no_specialist.out_of_scope`` group
#: (``switchboard train-router`` renames such a category ``c`` to ``out_of_scope:c``; ``nodes.router``).
OUT_OF_SCOPE_PREFIX = "out_of_scope:"


def scope_of(routed_agent: str | None, intent: str | None) -> Scope:
    """``"out_of_scope"`` when the router gives no specialist and its topic is in :data:`OUT_OF_SCOPE_TOPICS` (also
    under a trained router's ``desk_other:`` prefix) or is a label of a training map's ``out_of_scope`` group
    (:data:`OUT_OF_SCOPE_PREFIX`) or a conversational category of :data:`CHITCHAT_TOPICS` ("tell me a joke");
    ``"conversational"`` for any other no-specialist topic; None when a specialist was
    chosen."""
    if routed_agent != NO_SPECIALIST:
        return None
    label = intent or ""
    if label.startswith(OUT_OF_SCOPE_PREFIX) or label.rsplit(":", 1)[-1] in OUT_OF_SCOPE_TOPICS \
            or (label.startswith("conversational:") and label.rsplit(":", 1)[-1] in CHITCHAT_TOPICS):
        return "out_of_scope"
    return "conversational"


#: Reply kinds that answer the active agent's own question or offer: they stay with it whatever the router says.
_ANSWERS = frozenset({"yes_no", "choice", "cancel"})


@dataclass(frozen=True)
class EntryDecision:
    """``target`` node to start the turn at, and a one-line ``reason`` (recorded in the run's events)."""

    target: str
    reason: str


def _checked(decision: EntryDecision, active_agent: str, available: Collection[str],
             task_status: str | None) -> EntryDecision:
    """A decision to continue with ``active_agent`` holds only while it is available and its task is not with a person."""
    if decision.target != active_agent:
        return decision
    if active_agent not in available:
        return EntryDecision(FALLBACK, f"{active_agent} is unavailable")
    if task_status == "fallback":
        return EntryDecision(FALLBACK, "the task waits for a human")
    return decision


def _after_clarify(routed_agent: str | None, route_confidence: float, clarify_rounds: int, scope: Scope) -> EntryDecision:
    if scope == "out_of_scope":
        return EntryDecision(OUT_OF_SCOPE, "the answer to clarify asks for something the desk does not serve")
    if routed_agent in SPECIALISTS and route_confidence >= CONTINUE_CONFIDENCE:
        return EntryDecision(TRIAGE, f"the answer to clarify names a topic (router: {routed_agent} at {route_confidence:.2f})")
    if clarify_rounds >= MAX_CLARIFY_ROUNDS:
        return EntryDecision(FALLBACK, f"{clarify_rounds} clarifying answers without progress")
    return EntryDecision(TRIAGE, f"clarify round {clarify_rounds}: still no topic (router: {routed_agent} at "
                                 f"{route_confidence:.2f})")


@dataclass(frozen=True)
class ThreadView:
    """What the entry rule reads from the thread's state (gathered by the entry node).

    Attributes:
        active_agent: the agent stored as active after the previous turn (None on a new thread).
        task_status: status of the thread's task; a task in ``fallback`` (a person took over) stays with fallback.
        open_question: the question the active agent left open (its last answer's question, or the packet's), if any.
        clarify_rounds: clarifying answers in a row just before this message (0 when the last answer was not clarify's).
        identity_changed: the run context's user or tenant differs from the one the thread was started with.
        permitted: the caller may still talk to ``active_agent`` (authorization outcome).
        available: agents that can take turns now.
    """

    active_agent: str | None = None
    task_status: str | None = None
    open_question: str | None = None
    clarify_rounds: int = 0
    identity_changed: bool = False
    permitted: bool = True
    available: frozenset[str] = frozenset(SPECIALISTS)


@dataclass(frozen=True)
class Routed:
    """The router's reading of the message: ``agent`` (``"other"`` = no specialist, None for an empty message), its
    probability ``confidence`` (0..1) and the no-specialist ``scope`` (:func:`scope_of`; None for a specialist)."""

    agent: str | None = None
    confidence: float = 0.0
    scope: Scope = None

    @classmethod
    def of(cls, route: RouteView | None) -> Routed:
        """The entry rule's view of a router result (``graph.contracts.reading.RouteView``), empty for None."""
        if route is None:
            return cls()
        return cls(route.agent, route.confidence, scope_of(route.agent, route.intent))


def choose_entry(reading: MessageReading, thread: ThreadView, routed: Routed) -> EntryDecision:
    """Choose the entry node of a new turn: :func:`_choose` over the router's reading as the message's own words
    correct it (:func:`learned_routed`), with two decisions before it and one after.

    Before: triage when the identity changed; fallback when the customer asks for a person (``wants_person``, unless
    the message reports a card loss: ``loss_report``, safety first); out_of_scope with :data:`LANGUAGE_REASON` for a
    message in another language (``language``) that reports no lost card (the holder of the conversation is kept, so
    the next English message goes on as before). After: a decision for triage, clarify or out_of_scope becomes the
    specialist of ``named_route`` (:data:`NAMED_REASON`) when the router read the message as out of scope and it names
    one of the customer's own payments or asks a specialist's question after a lead-in (triage would read it with the
    router alone again).
    """
    if thread.identity_changed:
        return EntryDecision(TRIAGE, "identity or tenant changed since the thread started")
    if reading.wants_person and not reading.loss_report:  # safety first: a lost card is frozen before a person
        return EntryDecision(FALLBACK, PERSON_REASON)
    if reading.language != "en" and not reading.loss_report:
        return EntryDecision(OUT_OF_SCOPE, LANGUAGE_REASON)
    decision = _choose(reading, thread, learned_routed(reading, routed))
    named = reading.named_route
    if (named is not None and named.agent in SPECIALISTS and routed.scope == "out_of_scope" and not reading.loss_report
            and decision.target in (TRIAGE, CLARIFY, OUT_OF_SCOPE)):
        return EntryDecision(named.agent, NAMED_REASON)
    return decision


def learned_routed(reading: MessageReading, routed: Routed) -> Routed:
    """The router's reading as the message's words correct it: a card loss in another language is cards' whatever
    the router read (``named_route``, with ``loss_report``); a message the router reads as out of scope that names a
    specialist's payment or request (``named_route``) is that specialist's; a frustrated one the router reads as out
    of scope ("this is the third time im asking!!!": ``frustrated``) is about this conversation (``conversational``),
    not a topic the desk does not serve. ``routed`` unchanged otherwise."""
    named = reading.named_route
    if named is not None and named.agent in SPECIALISTS and (reading.loss_report or routed.scope == "out_of_scope"):
        return Routed.of(named)
    if routed.scope == "out_of_scope" and reading.frustrated:
        return Routed(routed.agent, routed.confidence, "conversational")
    return routed


def _choose(reading: MessageReading, thread: ThreadView, routed: Routed) -> EntryDecision:
    """The entry node of a new turn (after :func:`choose_entry`'s first decisions) from the turn's ``reading`` of the
    message (``graph.contracts.reading``), the ``thread``'s state and the router's reading ``routed``.

    The reading's fields used: ``reply`` (a reply that answers the active agent's question or offer stays with it),
    ``record_owners`` (a named ``tr_…`` is transfers', whoever holds the conversation),
    ``refers_back`` and ``same_question`` and ``follow_up_opener`` (the message leans on the conversation: it stays with
    the holder and is never taken for out of scope), ``card_action`` (a bare "freeze it" is :data:`CARD_ACTION_OWNER`'s
    whatever the router says), ``lists_records_of`` (a request to list one kind of record is its owner's) and
    ``opener_out_of_scope`` (a follow-up opener about something no specialist serves: the out_of_scope answer).

    Returns:
        In order: fallback when the customer sends a greeting, yes/no or fragment while fallback holds the
        conversation (:data:`WAITING_REASON`); triage when the
        message names a record that the active agent does not own; for a card action, cards when it holds the
        conversation, else triage (which sends it to cards); likewise for a request to list one kind of record and its
        owner; out_of_scope for a follow-up opener about something the desk does not serve; after clarify,
        out_of_scope for an out-of-scope answer, triage when the answer names a topic, fallback after
        :data:`MAX_CLARIFY_ROUNDS` rounds without one, else triage; out_of_scope for an out-of-scope message on a
        thread nobody holds, a self-contained out-of-scope request, or a fragment the router is sure
        (>= :data:`OUT_OF_SCOPE_SURE`) the desk does not serve that does not lean on the conversation — never for a
        yes/no reply nor for a reply that answers the active agent; triage when nobody holds the conversation or
        permission lapsed. With an active specialist: itself for a reply that answers it (yes/no, choice, cancel, or
        an identifier when it had asked a question), for the same question again, for a fragment or an unasked
        identifier unless the router gives another specialist >= :data:`NEW_TOPIC_CONFIDENCE`, for a request the
        router gives it (>= :data:`CONTINUE_CONFIDENCE`) and for a conversational message; triage otherwise (a new
        topic). Continuing is turned into fallback when the agent is unavailable or its task waits for a human.
    """
    active_agent, owners, reply, scope = thread.active_agent, reading.record_owners, reading.reply, routed.scope
    if active_agent == FALLBACK and _waits(reading, scope):
        return EntryDecision(FALLBACK, WAITING_REASON)  # "hello?", "ok" after the hand-over: the team still has it
    if owners and active_agent not in owners:
        named = "/".join(sorted(owners))
        return EntryDecision(TRIAGE, f"names a record of {named}" + (f", not {active_agent}'s" if active_agent else ""))
    owned = _owned_request(reading, thread)
    if owned is not None:
        return owned
    if reading.opener_out_of_scope and not owners:
        return EntryDecision(OUT_OF_SCOPE, "a follow-up about something no specialist serves")
    if active_agent == CLARIFY and thread.clarify_rounds > 0:
        return _after_clarify(routed.agent, routed.confidence, thread.clarify_rounds, scope)
    holder = active_agent if active_agent in SPECIALISTS else None
    if _out_of_scope(reading, routed, holder):
        return EntryDecision(OUT_OF_SCOPE, f"no specialist serves this (router: {routed.agent} at {routed.confidence:.2f})")
    if holder is None:
        return EntryDecision(TRIAGE, "no specialist holds the conversation")
    if not thread.permitted:
        return EntryDecision(TRIAGE, f"permission for {holder} no longer holds")
    return _checked(_continue_or_triage(holder, routed.agent, routed.confidence, reply, thread.open_question, scope,
                                        reading.refers_back, reading.same_question), holder, thread.available,
                    thread.task_status)


def _waits(reading: MessageReading, scope: Scope) -> bool:
    """While fallback holds the conversation, does the message leave it with the team: a greeting, yes/no or fragment
    that names no record and asks for no card action?"""
    return not reading.record_owners and not reading.card_action and (
        scope == "conversational" or reading.reply in ("yes_no", "fragment"))


def _owned_request(reading: MessageReading, thread: ThreadView) -> EntryDecision | None:
    """A card action ("freeze it") is cards'; a request to list records ("what transfers have I made?") is their
    owner's: it continues when the owner holds the conversation, else triage sends it there. None otherwise."""
    lister = reading.lists_records_of if reading.lists_records_of in SPECIALISTS else None
    owner = CARD_ACTION_OWNER if reading.card_action else lister
    if owner is None:
        return None
    what = "a card action (freeze/unfreeze it)" if reading.card_action else f"a request to list records {owner} keeps"
    if thread.active_agent != owner or not thread.permitted:
        return EntryDecision(TRIAGE, f"{what} is {owner}'s")
    return _checked(EntryDecision(owner, f"{what}: continues with {owner}"), owner, thread.available, thread.task_status)


def _out_of_scope(reading: MessageReading, routed: Routed, holder: str | None) -> bool:
    """Is the message one the desk does not serve? An out-of-scope message on a thread no specialist holds, a
    self-contained request that does not point back, or a fragment the router is sure of
    (>= :data:`OUT_OF_SCOPE_SURE`) that does not lean on the conversation; never a yes/no ("please do": two words give
    the router no topic — it read "please do" as smart-home talk at 0.81 after the supervisor's offer)."""
    if routed.scope != "out_of_scope" or reading.reply == "yes_no":
        return False
    leans = reading.refers_back or reading.same_question or reading.follow_up_opener
    return (holder is None or (reading.reply == "request" and not reading.refers_back and not reading.same_question)
            or (reading.reply == "fragment" and routed.confidence >= OUT_OF_SCOPE_SURE and not leans))


def _continue_or_triage(active_agent: str, routed_agent: str | None, route_confidence: float, reply: ReplyKind,
                        open_question: str | None, scope: Scope, refers_back: bool = False,
                        same_question: bool = False) -> EntryDecision:
    asked = f" to {active_agent}'s question" if open_question else ""
    if same_question and reply in ("fragment", "request"):
        return EntryDecision(active_agent, f"a follow-up to {active_agent}'s last answer (\"and for …?\", \"any "
                                           f"news?\", \"why not?\"): continues with {active_agent}")
    if reply in _ANSWERS or (reply == "identifier" and open_question):
        return EntryDecision(active_agent, f"{reply.replace('_', '/')} reply{asked}: continues with {active_agent}")
    other_specialist = routed_agent in SPECIALISTS and routed_agent != active_agent
    if reply in ("fragment", "identifier"):
        if reply == "fragment" and refers_back:
            return EntryDecision(active_agent, f"follow-up about what {active_agent} just answered: continues with "
                                               f"{active_agent}")
        if other_specialist and route_confidence >= NEW_TOPIC_CONFIDENCE:
            return EntryDecision(TRIAGE, f"topic changed (router: {routed_agent} at {route_confidence:.2f})")
        return EntryDecision(active_agent, f"{'follow-up' if reply == 'fragment' else 'identifier'}{asked}: "
                                           f"continues with {active_agent}")
    if routed_agent == active_agent and route_confidence >= CONTINUE_CONFIDENCE:
        return EntryDecision(active_agent, f"topic continues with {active_agent}")
    if refers_back and not (other_specialist and route_confidence >= NEW_TOPIC_CONFIDENCE):
        return EntryDecision(active_agent, f"question about what {active_agent} just answered: continues with "
                                           f"{active_agent}")
    if scope == "conversational":
        return EntryDecision(active_agent, f"conversational reply: {active_agent} holds the conversation")
    return EntryDecision(TRIAGE, f"topic changed (router: {routed_agent} at {route_confidence:.2f})")
