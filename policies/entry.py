"""Where the next turn of a thread starts (control-flow rule 6), decided from the thread's state, not the router alone.

Inputs are plain data (the nodes gather them; every input and the reason go into the ``entry_decided`` event): who
holds the conversation, the question it left open, what kind of reply the new message is
(:mod:`policies.replies`), the router's reading of it, and the thread's guards (identity, permission, availability,
a task waiting for a human, clarify rounds without progress).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from policies.edges import CLARIFY, FALLBACK, OUT_OF_SCOPE, SPECIALISTS, TRIAGE
from policies.replies import ReplyKind

__all__ = ["EntryDecision", "choose_entry", "scope_of", "CONTINUE_CONFIDENCE", "NEW_TOPIC_CONFIDENCE",
           "MAX_CLARIFY_ROUNDS", "NO_SPECIALIST", "PERSON_REASON", "LANGUAGE_REASON", "OUT_OF_SCOPE_SURE", "CARD_ACTION_OWNER",
           "WAITING_REASON", "OUT_OF_SCOPE_TOPICS", "CHITCHAT_TOPICS", "OUT_OF_SCOPE_PREFIX", "Scope"]

#: Minimum router confidence for keeping the current agent on a self-contained request; below it the message is
#: re-triaged. Chosen on the shipped router's calibration: wrong-agent predictions cluster below 0.35.
CONTINUE_CONFIDENCE = 0.35
#: A short follow-up (a fragment, or an identifier nobody asked for) leaves the active agent only when the router gives
#: another specialist at least this probability (a clear new topic such as "the virtual one" after a fees question);
#: chosen on the follow-up table of ``tests/test_conversation_routing.py``.
NEW_TOPIC_CONFIDENCE = 0.5
#: A short follow-up (a fragment) leaves the agent holding the conversation for the out_of_scope answer when the router
#: gives "not served here" at least this probability and the fragment neither opens as a follow-up ("what about X?")
#: nor points back at the last answer. On the shipped router, the out-of-scope fragments ("what is a
#: mortgage rate today?" 0.95, "what is the weather today?" 0.97) are above it, and the follow-ups of
#: ``tests/test_conversation_routing.py`` and ``tests/test_conversation_flows.py`` read as out of scope either open as a follow-up
#: ("what about Switzerland?" 0.93), ask the same question again ("can I raise it?" 0.92) or stay below it.
OUT_OF_SCOPE_SURE = 0.9
#: The specialist whose action a bare "freeze it" / "unfreeze it" asks for (``policies.replies.asks_card_action``).
CARD_ACTION_OWNER = "cards"
#: Clarifying answers in a row after which an answer that still names no specialist goes to fallback.
MAX_CLARIFY_ROUNDS = 2
#: The entry reason when the customer asks for a person (fallback words its answer for that case: ``nodes.fallback``).
PERSON_REASON = "the customer asked for a person"
#: The entry reason for a message in another language than English (``choose_entry``'s ``other_language``); the
#: out_of_scope node answers it with the desk's language answer.
LANGUAGE_REASON = "written in another language than English"
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


def _before_the_message(identity_changed: bool, wants_person: bool, other_language: bool) -> EntryDecision | None:
    """The decisions no reading of the message against the thread can change, in order: triage when the identity
    changed, fallback for a person, out_of_scope (the language answer) for another language; None otherwise."""
    if identity_changed:
        return EntryDecision(TRIAGE, "identity or tenant changed since the thread started")
    if wants_person:
        return EntryDecision(FALLBACK, PERSON_REASON)
    if other_language:
        return EntryDecision(OUT_OF_SCOPE, LANGUAGE_REASON)
    return None


def choose_entry(
    active_agent: str | None,
    routed_agent: str | None,
    route_confidence: float,
    identity_changed: bool,
    permitted: bool = True,
    available: Collection[str] = SPECIALISTS,
    task_status: str | None = None,
    *,
    reply: ReplyKind = "request",
    open_question: str | None = None,
    clarify_rounds: int = 0,
    scope: Scope = None,
    refers_back: bool = False,
    record_owners: Collection[str] = (),
    wants_person: bool = False,
    same_question: bool = False,
    follow_up_opener: bool = False,
    card_action: bool = False,
    lists_records_of: str | None = None,
    opener_out_of_scope: bool = False,
    other_language: bool = False,
) -> EntryDecision:
    """Choose the entry node of a new turn.

    Args:
        active_agent: the agent stored as active after the previous turn (None on a new thread).
        routed_agent: the agent the router assigns the new message to (``"other"`` = no specialist).
        route_confidence: the router's probability for ``routed_agent`` (0..1).
        identity_changed: the run context's user or tenant differs from the one the thread was started with.
        permitted: the caller may still talk to ``active_agent`` (authorization outcome).
        available: agents that can take turns now.
        task_status: status of the thread's task; a task in ``fallback`` (a person took over) stays with fallback.
        reply: the kind of the new message read against the previous answer (``policies.replies.classify_reply``).
        open_question: the question the active agent left open (its last answer's question, or the packet's), if any.
        clarify_rounds: clarifying answers in a row just before this message (0 when the last answer was not clarify's).
        scope: the router's no-specialist kind of the message (:func:`scope_of`), None when it chose a specialist.
        refers_back: the message points back at a record the previous answer named (``policies.replies.refers_back``):
            a fragment that does stays with the active agent whatever the router says ("when will it arrive?" after a
            paid refund is about that refund, not transfer times); a short request that does ("any news on it?")
            stays with it too, and is never taken for out of scope, unless the router gives another specialist >=
            :data:`NEW_TOPIC_CONFIDENCE`.
        record_owners: the specialists owning the records the message names (``policies.replies.record_owners``):
            a named ``tr_…`` is transfers', whoever holds the conversation.
        wants_person: the customer asks for a person (``nodes.embedded.understanding.reading.wants_person``):
            fallback, which hands the thread to the team with the facts so far (a request for a human is never
            answered by the bot alone).
        same_question: the message asks the previous question again, about another thing ("and for ATM
            withdrawals?", ``policies.replies.asks_same_for``) or for news of the record just answered ("any
            update?", ``policies.replies.asks_for_news``), or a follow-up with no content of its own ("why not?",
            ``policies.replies.is_bare_follow_up``): it stays with the active specialist, whose question it is,
            whatever the router reads into its words.
        follow_up_opener: the message opens as a follow-up ("what about X?", "and X?", "and for X?":
            ``policies.replies.opens_follow_up``): a fragment that does is never taken for out of scope while a
            specialist holds the conversation ("what about Switzerland?" after the supported-countries answer).
        card_action: the message is a bare "freeze it" / "unfreeze it" (``policies.replies.asks_card_action``): the
            card action is :data:`CARD_ACTION_OWNER`'s, whatever the router says (it reads "freeze it" as an account
            freeze at 0.31 and "unfreeze it" as small talk).
        lists_records_of: the specialist whose records the message asks to list ("what transfers have I made?" ->
            transfers, ``policies.replies.lists_records_of``): it continues when it holds the conversation, else
            triage sends the request to it (the router reads a transfer fee into the first, top-up cards into "which
            cards do I have?").
        opener_out_of_scope: the message is a follow-up opener whose subject the desk does not serve ("what about
            a mortgage?", ``nodes.entry.opener_out_of_scope``): the out_of_scope answer, whoever holds the
            conversation (an opener about something of the desk, "what about Switzerland?", stays with the holder).
        other_language: the message is written in a language the desk recognises but does not speak and reports no
            lost card (``nodes.embedded.understanding.reading.other_language``): out_of_scope, which says so in
            English; the holder of the conversation is kept, so the next English message goes on as before.

    Returns:
        In order: triage when the identity changed; fallback when the customer asks for a person, or sends a
        greeting, yes/no or fragment while fallback holds the conversation (:data:`WAITING_REASON`); triage when the
        message names a record (``record_owners``) that ``active_agent`` does not own (a record of the desk is never
        out of scope either); for a card action (``card_action``), cards when it holds the conversation, else triage
        (which sends it to cards); likewise for a request to list one kind of record (``lists_records_of``) and its
        owner; out_of_scope for a follow-up opener about something the desk does not serve
        (``opener_out_of_scope``); after clarify, out_of_scope for an out-of-scope answer, triage when the answer names a
        topic, fallback after :data:`MAX_CLARIFY_ROUNDS` rounds without one, else triage; out_of_scope for an
        out-of-scope message on a thread nobody holds, a self-contained out-of-scope request, or a fragment the router
        is sure (>= :data:`OUT_OF_SCOPE_SURE`) the desk does not serve that neither opens as a follow-up
        (``follow_up_opener``), points back (``refers_back``) nor asks the same question again (``same_question``);
        never for a yes/no reply (whoever holds the conversation: "please do" after the supervisor's offer) nor for
        a reply that answers the active agent (choice, identifier, cancel); triage when nobody
        holds the conversation or permission lapsed. With an active specialist: itself for a reply that answers it
        (yes/no, choice among listed items, cancel — cancellation
        follows ``policies.approval`` there — or an identifier when it had asked a question), for the same question
        again ("and for X?", "any news?": ``same_question``), for a fragment or an unasked identifier unless the
        router gives another specialist >= :data:`NEW_TOPIC_CONFIDENCE`, for a request the router gives it (>=
        :data:`CONTINUE_CONFIDENCE`) and for a conversational message (it holds the conversation); triage otherwise (a
        new topic). Continuing is turned into fallback when the agent is unavailable or its task waits for a human.
    """
    first = _before_the_message(identity_changed, wants_person, other_language)
    if first is not None:
        return first
    if active_agent == FALLBACK and not record_owners and not card_action and (
            scope == "conversational" or reply in ("yes_no", "fragment")):
        return EntryDecision(FALLBACK, WAITING_REASON)  # "hello?", "ok" after the hand-over: the team still has it
    if record_owners and active_agent not in record_owners:
        owners = "/".join(sorted(record_owners))
        return EntryDecision(TRIAGE, f"names a record of {owners}" + (f", not {active_agent}'s" if active_agent else ""))
    owner = CARD_ACTION_OWNER if card_action else lists_records_of if lists_records_of in SPECIALISTS else None
    if owner is not None:  # "freeze it" is cards'; "what transfers have I made?" is transfers'
        what = "a card action (freeze/unfreeze it)" if card_action else f"a request to list records {owner} keeps"
        if active_agent != owner or not permitted:
            return EntryDecision(TRIAGE, f"{what} is {owner}'s")
        return _checked(EntryDecision(owner, f"{what}: continues with {owner}"), owner, available, task_status)
    if opener_out_of_scope and not record_owners:
        return EntryDecision(OUT_OF_SCOPE, "a follow-up about something no specialist serves")
    if active_agent == CLARIFY and clarify_rounds > 0:
        return _after_clarify(routed_agent, route_confidence, clarify_rounds, scope)
    holder = active_agent if active_agent in SPECIALISTS else None
    leans = refers_back or same_question or follow_up_opener  # leans on the conversation: never out of scope
    # a yes/no ("please do") is never out of scope: two words give the router no topic (it read "please do" as
    # smart-home talk at 0.81 after the supervisor's offer)
    if scope == "out_of_scope" and reply != "yes_no" and (
            holder is None or (reply == "request" and not refers_back and not same_question)
            or (reply == "fragment" and route_confidence >= OUT_OF_SCOPE_SURE and not leans)):
        return EntryDecision(OUT_OF_SCOPE, f"no specialist serves this (router: {routed_agent} at {route_confidence:.2f})")
    if holder is None:
        return EntryDecision(TRIAGE, "no specialist holds the conversation")
    if not permitted:
        return EntryDecision(TRIAGE, f"permission for {holder} no longer holds")
    return _checked(_continue_or_triage(holder, routed_agent, route_confidence, reply, open_question, scope,
                                        refers_back, same_question), holder, available, task_status)


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
