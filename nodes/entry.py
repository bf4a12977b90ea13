"""The entry node: who may run this turn, bookkeeping at the start of every turn, and the choice of where the turn
starts (rule 6).

Identity first (README "Identity and authorization"): the run's principal (``nodes.principal.resolve_principal``)
must be the customer who owns the thread (``state["owner"]``, written once by the first accepted turn) and known to
the business store in their tenant. Any other run — another customer, an operator sending a turn, a context that
contradicts the server's authenticated user — is refused **before any model call**: the entry node records an
``access_denied`` event, takes the refused run's incoming messages back out of the transcript (``RemoveMessage``, so
the owner's next turn sees exactly their own history) and hands over to the ``access_denied`` node, which raises
:class:`graph.errors.AccessDenied` so the caller gets an error and no state. The graph's input schema
(``graph.state.TurnInput``) admits only ``messages``, so a run cannot write the owner or anything else either.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from checkpoints.business import StoreError
from graph.context import RunContext
from graph.errors import AccessDenied
from graph.packet import HandoffRecord, step_number
from nodes.deps import Deps
from nodes.desk_knowledge import SOCIAL_TOPICS, load_knowledge, social_topic
from nodes.embedded.understanding.reading import (
    is_frustrated,
    other_language,
    reports_foreign_loss,
    understand,
    wants_person,
)
from nodes.instrumentation import emit
from nodes.packets import build_packet
from nodes.playbook import knows_subject, names_card_by_ending, names_desk_subject, reports_card_loss, speaks_of_places
from nodes.principal import acting_context, resolve_principal
from nodes.transcript import desk_answers, last_user_text, thread_id_of
from policies.authz import AuthzDecision, authorize_turn, owner_of
from policies.edges import ACCESS_DENIED, CLARIFY, END, FALLBACK, OUT_OF_SCOPE, PAUSED_DIALOGUE, SPECIALISTS, TRIAGE
from policies.entry import (
    NEW_TOPIC_CONFIDENCE,
    OUT_OF_SCOPE_SURE,
    PERSON_REASON,
    EntryDecision,
    choose_entry,
    scope_of,
)
from policies.replies import (
    asks_card_action,
    asks_for_news,
    asks_same_for,
    classify_reply,
    gives_address,
    is_bare_follow_up,
    listed_cards_of,
    listed_items_of,
    lists_records_of,
    open_question_of,
    opener_subject,
    opens_follow_up,
    record_owners,
    refers_back,
    reports_it_failed,
    takes_up_last_answer,
)

__all__ = ["make_entry_node", "make_access_denied_node", "turn_verdict", "incoming_messages", "decide_entry",
           "opener_out_of_scope"]


def incoming_messages(messages: list[Any]) -> list[Any]:
    """The messages the current run's input appended: the trailing HumanMessages (every finished or paused turn ends
    with a message of the desk, so what follows it came with this run)."""
    out: list[Any] = []
    for m in reversed(messages):
        if not isinstance(m, HumanMessage):
            break
        out.append(m)
    return out[::-1]


def _clarify_rounds(earlier: list[Any]) -> int:
    """Clarify's answers in a row at the end of ``earlier`` that asked the customer to clarify: its conversational
    answers (to a greeting, thanks or goodbye, ``nodes.desk_knowledge.SOCIAL_TOPICS``) are not rounds without
    progress."""
    social = {load_knowledge().conversational.get(t) for t in SOCIAL_TOPICS}
    rounds = 0
    for m in reversed(earlier):
        if m.name != CLARIFY:
            break
        rounds += str(m.content) not in social
    return rounds


def opener_out_of_scope(text: str, deps: Deps, after_out_of_scope: bool = False,
                        specialist_answer: str | None = None) -> bool:
    """Is ``text`` a follow-up opener whose subject the desk does not serve ("what about crypto?", "what about a
    mortgage?": ``policies.replies.opener_subject``)? True when nothing in the handbook covers the subject
    (``nodes.playbook.knows_subject``), or the subject names nothing of the desk (``nodes.playbook.names_desk_subject``:
    a place, a record, a fee subject …) and the router, reading the subject alone, is sure
    (>= ``policies.entry.OUT_OF_SCOPE_SURE``) the desk does not serve it ("a personal loan": 0.96). Without this rule
    such openers would get the previous answer again or another specialist's answer. ``after_out_of_scope``: the desk's
    previous answer was the out_of_scope one; an opener then asks that question again about its subject ("what about
    Paris?" after the weather) unless the subject is something of the desk other than a place, or a place of the
    handbook (``DeskKnowledge.region_of``) while ``specialist_answer`` (the last answer of a specialist, before the
    out-of-scope one) gave a rule a place can change (``nodes.playbook.speaks_of_places``): countries, then "what
    about a mortgage?", then "what about Switzerland?" asks the countries question again."""
    subject = opener_subject(text)
    if subject is None:
        return False
    if not knows_subject(subject):
        return True
    if after_out_of_scope and not names_desk_subject(subject, places=False):
        return not (load_knowledge().region_of(subject) is not None and speaks_of_places(specialist_answer))
    if names_desk_subject(subject):
        return False
    route = deps.router.route(subject)
    return scope_of(route.agent, route.intent) == "out_of_scope" and float(route.confidence) >= OUT_OF_SCOPE_SURE


def _person_requested(deps: Deps, principal: Any, task: dict, turn: int) -> None:
    """A request for a person opens a ``talk_to_person`` service request for the team (the operator case
    ``switchboard tasks --requests`` lists; once per thread and task, or turn when the thread has no task), as on a
    paused thread (``nodes.paused_safety.person_while_paused``); fallback then tells the customer a person takes over.
    A store that cannot be written leaves the hand-over to fallback alone (the thread is listed for the team by its
    fallback status)."""
    if principal is None or principal.kind != "customer":
        return
    try:
        r = deps.store.open_service_request(principal.id, "talk_to_person",
                                            f"person:{thread_id_of()}:{task.get('task_id') or turn}")
    except StoreError as exc:
        emit("tool_finished", agent=FALLBACK, reason=f"talk_to_person not recorded: {exc}".splitlines()[0],
             detail={"action": "talk_to_person", "ok": False})
        return
    emit("tool_finished", agent=FALLBACK, reason="the customer asked for a person",
         detail={"action": "talk_to_person", "ok": True, "request_id": r["request_id"]})


def _learned_route(text: str, route: Any, payment_owner: Callable[[], str | None],
                   last_clause: Callable[[], Any]) -> tuple[str | None, float, Any]:
    """``(agent, confidence, scope)`` of the message: the router's, but a card loss reported in another language is
    cards' (safety first, whatever the router read: ``nodes.embedded.understanding.reading.reports_foreign_loss``);
    a message the router calls out of scope that names one of the customer's own payments ("refund for the uber
    ride", "the £250 I sent to Charles": ``payment_owner``) is that payment's specialist's, one whose last clause the
    router gives a specialist ("sorry - what's my balance?": ``last_clause``) is that specialist's; and a frustrated
    one is about this conversation ("this is the third time im asking!!!"), not a topic the desk does not serve."""
    routed, confidence = (route.agent, float(route.confidence)) if route else (None, 0.0)
    if text and reports_foreign_loss(text):
        return "cards", 1.0, None
    scope = scope_of(routed, route.intent if route else None)
    if scope != "out_of_scope":
        return routed, confidence, scope
    if (owner := payment_owner()) is not None:
        return owner, 1.0, None
    if (clause := last_clause()) is not None:
        return clause.agent, float(clause.confidence), None
    return routed, confidence, "conversational" if is_frustrated(text) else scope


#: The specialist of a payment a message names, by its kind (transfers are transfers'; the rest billing's, which
#: hands a money-back request on to refunds with the payment found).
_PAYMENT_OWNERS = {"transfer_out": "transfers", "transfer_in": "transfers"}


def _last_clause_route(deps: Deps, text: str, named: list[str]) -> Any:
    """The router's reading of the last clause of ``text`` (after its last dash, colon, comma or semicolon: "sorry -
    what's my balance?", "ok, in English: what's my balance?") when it gives a specialist at least
    ``policies.entry.NEW_TOPIC_CONFIDENCE``; None otherwise. An apology or a lead-in before the request is not the
    request."""
    cut = max(text.rfind(c) for c in ("-", ":", ",", ";"))
    tail = text[cut + 1:].strip() if cut >= 0 else ""
    if len(tail.split()) < 2:
        return None
    route = deps.router.route(tail)
    if route.agent not in SPECIALISTS or float(route.confidence) < NEW_TOPIC_CONFIDENCE:
        return None
    named.append(route.agent)
    return route


def _payment_owner(deps: Deps, customer_id: str | None, text: str, named: list[str]) -> str | None:
    """The specialist of the one payment of the customer's own latest 20 that ``text`` names by merchant, amount or
    day (``nodes.embedded.understanding.entities.resolve_payments``), or None (no customer, none or several of more
    than one kind, or the store cannot be read). Only a message with an amount or asking for money back counts: "get
    me an uber to the airport" names no payment of the customer's Uber ride. Only the acting customer's records are
    read."""
    from nodes.embedded.understanding.entities import parse_amount, resolve_payments
    from nodes.offline_model import wants_refund

    if not customer_id or not text or (parse_amount(text) is None and not wants_refund(text)):
        return None

    try:
        txs = deps.store.list_transactions(customer_id, limit=20)
    except StoreError:
        return None
    found = set(resolve_payments(text, txs, deps.store.now().date()))
    owners = {_PAYMENT_OWNERS.get(t.kind, "billing") for t in txs if t.id in found}
    named.extend(owners)
    return owners.pop() if len(owners) == 1 else None


def _to_named_owner(decision: EntryDecision, named: list[str]) -> EntryDecision:
    """A message the router calls out of scope that names one of the customer's own payments, or whose last clause is
    a specialist's request (:func:`_learned_route`), starts at that specialist instead of triage, clarify or out of
    scope (triage would read it with the router alone again)."""
    if len(named) != 1 or decision.target not in (TRIAGE, CLARIFY, OUT_OF_SCOPE):
        return decision
    return EntryDecision(named[0], "the specialist of the payment or the request the message names")


def _wants_person(text: str, before: list[Any]) -> bool:
    """A request for a person in any wording (``nodes.embedded.understanding.reading.wants_person``) or frustration a
    second time (:func:`_frustrated_again`), unless the message reports a lost card (safety first: the card is frozen
    before a person takes over)."""
    return (wants_person(text) or _frustrated_again(text, before)) and not reports_card_loss(text.lower())


def _frustrated_again(text: str, earlier: list[Any]) -> bool:
    """Is ``text`` frustrated or impatient (``nodes.embedded.understanding.reading.is_frustrated``) after an earlier
    message of the customer's on the thread that was too? Then a person is offered the way a request for one is: the
    thread goes to fallback (the team takes it over)."""
    if not is_frustrated(text):
        return False
    return any(is_frustrated(str(m.content)) for m in earlier if isinstance(m, HumanMessage))


def decide_entry(state: dict, deps: Deps, identity_changed: bool,
                 customer_id: str | None = None) -> tuple[EntryDecision, dict]:
    """Gather the inputs of ``policies.entry.choose_entry`` from the thread's state (the previous answer, its open
    question and listed items, the reply kind, the router, clarify rounds — none for a greeting, thanks or goodbye, which
    clarify answers) and decide. ``customer_id``: the customer the run acts for, whose own payments a message may name
    (:func:`_learned_route`). Returns the decision and its inputs (the ``detail`` of the ``entry_decided`` event)."""
    messages = list(state.get("messages") or [])
    incoming = incoming_messages(messages)
    earlier = desk_answers(messages[:len(messages) - len(incoming)])
    last = earlier[-1] if earlier else None
    last_text = str(last.content) if last is not None else ""
    text = last_user_text(messages)
    route = deps.router.route(text) if text else None
    named: list[str] = []  # the specialist _learned_route found past the router (a payment named, a last clause)
    routed, confidence, scope = _learned_route(text, route, lambda: _payment_owner(deps, customer_id, text, named),
                                               lambda: _last_clause_route(deps, text, named))
    packet_questions = tuple((state.get("handoff") or {}).get("open_questions") or ())
    # the open question is the one the desk's last answer asked: an answer that asked nothing closes an earlier offer
    # (billing offers to refund tx_1008, then describes tx_1001: an "ok" to that must not pay tx_1008);
    # the packet's question stands in only when the thread has no desk answer yet
    question = open_question_of(last_text) if last is not None else (packet_questions[-1] if packet_questions else None)
    # what a reply may pick among: the records the last answer listed, else the cards it named ("the third one")
    listed = listed_items_of(last_text) or listed_cards_of(last_text)
    # a message has a topic of its own when the router is sure of a specialist or of "not served here"
    own_topic = routed is not None and confidence >= NEW_TOPIC_CONFIDENCE and scope != "conversational"
    # a lost, stolen or compromised card in the customer's own words is always a topic of its own (safety first)
    own_topic = own_topic or reports_card_loss(text.lower())
    reply = classify_reply(text, listed, has_topic=own_topic)
    rounds = 0 if social_topic(route) else _clarify_rounds(earlier)
    task = dict(state.get("task") or {})
    owners = record_owners(text)
    if names_card_by_ending(text) and listed_cards_of(last_text):
        owners = owners | {"cards"}  # "actually it's the one ending 8899" after an answer that named a card
    # safety first: a lost, stolen or compromised card is frozen before a person takes over
    # a word the last answer used is no lean when the router is sure of another specialist: "what is my balance?"
    # after "… the money is already in your balance" is account's, not refunds'
    other_topic = own_topic and routed in SPECIALISTS and routed != state.get("active_agent")
    back = refers_back(text, listed) or (takes_up_last_answer(text, last_text) and not other_topic)
    person = _wants_person(text, messages[:len(messages) - len(incoming)])
    same = asks_same_for(text) or asks_for_news(text) or is_bare_follow_up(text) or reports_it_failed(text)
    # "it's 12 Baker Street, London" after an answer about the address: the new address, for the agent that answered
    same = same or (gives_address(text) and "address" in last_text.lower())
    opener, card_action, lists = opens_follow_up(text), asks_card_action(text), lists_records_of(text)
    specialist_last = next((str(m.content) for m in reversed(earlier) if m.name in SPECIALISTS), None)
    opener_oos = opener and not owners and opener_out_of_scope(text, deps, last is not None and last.name == OUT_OF_SCOPE,
                                                               specialist_last)
    # "and the US?" after a delivery estimate for Germany: the same question about another place (the router reads the
    # place alone as a question about the supported countries)
    same = same or (opener and not opener_oos and load_knowledge().region_of(opener_subject(text) or "") is not None)
    decision = choose_entry(active_agent=state.get("active_agent"), routed_agent=routed, route_confidence=confidence,
                            identity_changed=identity_changed, available=deps.available, task_status=task.get("status"),
                            reply=reply.kind, open_question=question, clarify_rounds=rounds,
                            scope=scope, refers_back=back, record_owners=owners, wants_person=person,
                            same_question=same, follow_up_opener=opener, card_action=card_action,
                            lists_records_of=lists, opener_out_of_scope=opener_oos,
                            other_language=other_language(text) is not None)
    decision = _to_named_owner(decision, named)
    return decision, {
        "active_agent": state.get("active_agent"), "routed_agent": routed, "route_confidence": round(confidence, 3),
        "scope": scope, "reply": reply.kind, "item": reply.item, "open_question": question, "listed_items": list(listed),
        "clarify_rounds": rounds, "refers_back": back, "task_status": task.get("status"),
        "record_owners": sorted(owners), "wants_person": person, "same_question": same,
        "follow_up_opener": opener, "card_action": card_action, "lists_records_of": lists,
        "opener_out_of_scope": opener_oos, "language": understand(text).language.code if text.strip() else "en",
        "identity_changed": identity_changed}


def turn_verdict(state: dict, runtime: Runtime[RunContext], deps: Deps) -> tuple[AuthzDecision, Any]:
    """``(decision, principal)``: may this run's principal send a turn on this thread?"""
    res = resolve_principal(runtime)
    p = res.principal
    if res.denied:
        return AuthzDecision(False, res.denied), p
    known = False
    if p is not None and p.kind == "customer":
        try:
            known = deps.store.get_customer(p.id, p.tenant_id) is not None
        except StoreError as exc:
            return AuthzDecision(False, f"the customer could not be verified ({exc})"), p
    return authorize_turn(p, owner_of(state), known), p


def _entry_packet(state: dict, runtime: Runtime[RunContext], decision: EntryDecision, task: dict,
                  open_question: str | None) -> dict | None:
    """The packet the entry node hands with the turn: to fallback (facts so far, open questions) or to the agent that
    continues (what earlier turns established, carried from the previous packet, so a bounded model input still knows
    it; the open question is the one its last answer asked, earlier ones are not carried on, and none once the thread's
    task is cancelled or completed); None when the turn is
    re-triaged (a new topic starts clean)."""
    active = state.get("active_agent")
    if decision.target != FALLBACK and decision.target != active:
        return None
    messages = list(state.get("messages") or [])
    ctx = acting_context(state, runtime)
    # a finished task (its refund cancelled, paid or rejected) asks nothing any more: a yes opens nothing
    finished = (state.get("task") or {}).get("status") in ("cancelled", "completed")
    asked = (open_question,) if open_question and not finished else ()
    return build_packet(source="entry", target=decision.target, reason=decision.reason,
                        objective=last_user_text(messages), messages=messages, ctx=ctx, thread_id=thread_id_of(),
                        task=task, trace_id=ctx.request_id, extra_questions=asked,
                        carried={**(state.get("handoff") or {}), "open_questions": []})


def make_entry_node(deps: Deps):
    """``entry(state, runtime) -> Command`` that refuses a run of anyone but the thread's owner (to
    ``access_denied``), else resets the per-turn counters and goes to the chosen agent."""

    def entry(state: dict, runtime: Runtime[RunContext]) -> Command:
        verdict, principal = turn_verdict(state, runtime, deps)
        if not verdict.allowed:
            emit("access_denied", reason=verdict.reason, to_agent=ACCESS_DENIED,
                 detail={"principal": principal.ref if principal else None, "action": "turn"})
            removal = [RemoveMessage(id=m.id) for m in incoming_messages(list(state.get("messages") or [])) if m.id]
            return Command(goto=ACCESS_DENIED, update={"messages": removal} if removal else {})
        turn = int(state.get("turn") or 0) + 1
        if (state.get("pending_approval") or {}).get("stage") == "awaiting":
            # the thread waits for an approval: the message must not start a turn that drops the pending interrupt;
            # the paused dialogue answers it and the thread pauses again (nodes.paused_dialogue)
            return _to_paused_dialogue(state, turn)
        identity = {"user_id": principal.id, "tenant_id": principal.tenant_id}
        stored = state.get("identity")
        identity_changed = bool(stored) and stored != identity
        decision, inputs = decide_entry(state, deps, identity_changed, principal.id)
        task = dict(state.get("task") or {})
        target = decision.target
        continuing = target == state.get("active_agent") and task.get("status") == "open"
        if not continuing and target not in (FALLBACK, OUT_OF_SCOPE):  # out of scope opens no task
            task = {"task_id": f"task_{uuid.uuid4().hex[:12]}", "status": "open", "current_owner": target, "owner_version": 1}
        emit("entry_decided", turn=turn, task_id=task.get("task_id"), to_agent=target, reason=decision.reason,
             detail={**inputs, "hop": step_number(state.get("handoff_path") or [], turn)})
        if decision.reason == PERSON_REASON:
            _person_requested(deps, principal, task, turn)
        packet = _entry_packet(state, runtime, decision, task, inputs.get("open_question"))
        record = HandoffRecord(hop=step_number(state.get("handoff_path") or [], turn), turn=turn, from_agent="entry",
                               to_agent=target,
                               kind="entry", reason=decision.reason,
                               packet=packet if target == FALLBACK else None).model_dump()
        return Command(goto=target, update={
            "turn": turn,
            "owner": {"customer_id": principal.id, "tenant_id": principal.tenant_id},  # kept only on the first turn
            "identity": identity,
            "turn_hops": 0,
            "seen_fingerprints": [],
            "tool_attempts": 0,
            "entry_reason": decision.reason,
            "active_agent": state.get("active_agent") if target == OUT_OF_SCOPE else target,
            "visited_agents": [target],
            "handoff_path": [record],
            "task": task,
            "outcome": None,
            # a packet belongs to its turn (earlier ones stay in handoff_path); a continuing agent or fallback gets the
            # thread's facts and open questions carried from the previous packet
            "handoff": packet,
        })

    return entry


_PAUSED_REASON = "the thread waits for an approval"


def _to_paused_dialogue(state: dict, turn: int) -> Command:
    """Start turn ``turn`` of a thread paused for an approval at ``paused_dialogue`` (control stays with the agent that
    holds the pause; the per-turn counters and the outcome start afresh)."""
    hop = step_number(state.get("handoff_path") or [], turn)
    emit("entry_decided", turn=turn, to_agent=PAUSED_DIALOGUE, reason=_PAUSED_REASON,
         detail={"active_agent": state.get("active_agent"), "hop": hop})
    record = HandoffRecord(hop=hop, turn=turn, from_agent="entry", to_agent=PAUSED_DIALOGUE, kind="entry",
                           reason=_PAUSED_REASON).model_dump()
    return Command(goto=PAUSED_DIALOGUE, update={"turn": turn, "turn_hops": 0, "seen_fingerprints": [],
                                                 "tool_attempts": 0, "entry_reason": _PAUSED_REASON,
                                                 "handoff_path": [record], "outcome": None})


def make_access_denied_node(deps: Deps):
    """``access_denied(state, runtime)``: raises :class:`AccessDenied` for the run the entry node refused. Reached
    again by a later run of an authorized principal (``recover`` continuing the thread), it ends that run quietly."""

    def access_denied(state: dict, runtime: Runtime[RunContext]) -> Command:
        verdict, _ = turn_verdict(state, runtime, deps)
        if verdict.allowed:
            return Command(goto=END)
        raise AccessDenied(f"thread {thread_id_of() or '?'}: {verdict.reason}")

    return access_denied
