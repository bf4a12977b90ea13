"""The entry node: who may run this turn, bookkeeping at the start of every turn, and the choice of where the turn
starts (rule 6).

Identity first (README "Identity and authorization"): the run's principal (``nodes.principal.resolve_principal``)
must be the customer who owns the thread (``state["owner"]``, written once by the first accepted turn) and known to
the business store in their tenant. Any other run — another customer, an operator sending a turn, a context that
contradicts the server's authenticated user — is refused **before any model call**: the entry node records an
``access_denied`` event, takes the refused run's incoming messages back out of the transcript (``RemoveMessage``, so
the owner's next turn sees exactly their own history) and hands over to the ``access_denied`` node, which raises
:class:`graph.contracts.errors.AccessDenied` so the caller gets an error and no state. The graph's input schema
(``graph.contracts.state.TurnInput``) admits only ``messages``, so a run cannot write the owner or anything else either.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from checkpoints.business import StoreError
from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied
from graph.contracts.packet import HandoffPacket, HandoffRecord, hop_number
from graph.contracts.reading import MessageReading, ReadingContext, RouteView
from graph.contracts.state import Owner, TaskState, packet_of, path_of, pending_of, task_of
from nodes import admission
from nodes.deps import Deps
from nodes.instrumentation import emit
from nodes.packets import build_packet
from nodes.principal import acting_context, resolve_principal, run_config
from nodes.transcript import desk_answers, last_user_text, open_question_of, thread_id_of
from policies.authz import AuthzDecision, authorize_turn, owner_of
from policies.edges import ACCESS_DENIED, CLARIFY, END, FALLBACK, OUT_OF_SCOPE, PAUSED_DIALOGUE, SPECIALISTS
from policies.entry import NEW_TOPIC_CONFIDENCE, PERSON_REASON, EntryDecision, Routed, ThreadView, choose_entry, scope_of

__all__ = ["make_entry_node", "make_access_denied_node", "turn_verdict", "incoming_messages", "decide_entry",
           "read_message"]


def incoming_messages(messages: list[Any]) -> list[Any]:
    """The messages the current run's input appended: the trailing HumanMessages (every finished or paused turn ends
    with a message of the desk, so what follows it came with this run)."""
    out: list[Any] = []
    for m in reversed(messages):
        if not isinstance(m, HumanMessage):
            break
        out.append(m)
    return out[::-1]


def _clarify_rounds(earlier: list[Any], social: frozenset[str]) -> int:
    """Clarify's answers in a row at the end of ``earlier`` that asked the customer to clarify: its conversational
    answers (``social``: the reader's answers to a greeting, thanks or goodbye) are not rounds without progress."""
    rounds = 0
    for m in reversed(earlier):
        if m.name != CLARIFY:
            break
        rounds += str(m.content) not in social
    return rounds


def read_message(state: dict, deps: Deps, customer_id: str | None = None) -> tuple[MessageReading, Any]:
    """The one reading of this turn's message (``deps.reader``, ``graph.contracts.reading.MessageReading``) and the router's
    result for it (None for an empty message), read against the thread's state: the desk's previous answer and who
    gave it, the last specialist's answer, the agent holding the conversation, the router's reading, the customer's
    earlier messages and, for ``customer_id`` (the customer the run acts for), their own latest payments (read from the
    business store only if the reader asks: :func:`_own_payments`) and the store's date."""
    messages = list(state.get("messages") or [])
    incoming = incoming_messages(messages)
    before = messages[:len(messages) - len(incoming)]
    earlier = desk_answers(before)
    last = earlier[-1] if earlier else None
    text = last_user_text(messages)
    route = deps.router.route(text) if text else None
    view = RouteView.of(route)
    scope = scope_of(view.agent, view.intent) if view else None
    # a message has a topic of its own when the router is sure of a specialist or of "not served here"
    router_topic = view is not None and view.agent is not None and view.confidence >= NEW_TOPIC_CONFIDENCE \
        and scope != "conversational"
    context = ReadingContext(
        previous_answer=str(last.content) if last is not None else "", previous_agent=last.name if last else None,
        specialist_answer=next((str(m.content) for m in reversed(earlier) if m.name in SPECIALISTS), None),
        active_agent=state.get("active_agent"), route=view, router_topic=router_topic,
        earlier_messages=tuple(str(m.content) for m in before if isinstance(m, HumanMessage)),
        own_payments=(lambda: _own_payments(deps, customer_id)) if customer_id else None,
        today=_today(deps) if customer_id else None)
    return deps.reader.read(text, context), route


#: How many of the customer's latest payments a message may name by merchant, amount or day.
OWN_PAYMENTS = 20


def _own_payments(deps: Deps, customer_id: str) -> list[Any]:
    """The acting customer's own latest :data:`OWN_PAYMENTS` payments (``Transaction`` records); empty when the store
    cannot be read (the message is then read without them). Only the acting customer's records are read."""
    try:
        return list(deps.store.list_transactions(customer_id, limit=OWN_PAYMENTS))
    except StoreError:
        return []


def _today(deps: Deps) -> Any:
    """The business store's date (its clock decides what "yesterday" is), None when the store cannot tell."""
    try:
        return deps.store.now().date()
    except StoreError:
        return None


def _person_requested(deps: Deps, principal: Any, task: TaskState | None, turn: int, decision: EntryDecision) -> None:
    """A request for a person (``decision`` for :data:`policies.entry.PERSON_REASON`) opens a ``talk_to_person``
    service request for the team (the operator case ``switchboard tasks --requests`` lists; once per thread and task,
    or turn when the thread has no task), as on a paused thread (``nodes.paused_safety.person_while_paused``); fallback
    then tells the customer a person takes over. A store that cannot be written leaves the hand-over to fallback alone
    (the thread is listed for the team by its fallback status). Nothing for any other decision."""
    if decision.reason != PERSON_REASON or principal is None or principal.kind != "customer":
        return
    try:
        r = deps.store.open_service_request(principal.id, "talk_to_person",
                                            f"person:{thread_id_of()}:{(task.task_id if task is not None else None) or turn}")
    except StoreError as exc:
        emit("tool_finished", agent=FALLBACK, reason=f"talk_to_person not recorded: {exc}".splitlines()[0],
             detail={"action": "talk_to_person", "ok": False})
        return
    emit("tool_finished", agent=FALLBACK, reason="the customer asked for a person",
         detail={"action": "talk_to_person", "ok": True, "request_id": r["request_id"]})


def decide_entry(state: dict, deps: Deps, identity_changed: bool,
                 reading: MessageReading, route: Any) -> tuple[EntryDecision, dict]:
    """Decide where the turn starts (``policies.entry.choose_entry``) from the turn's ``reading``, the router's
    ``route`` and a typed view of the thread's state (the previous answer's open question, clarify rounds — none for a
    greeting, thanks or goodbye, which clarify answers). Returns the decision and its inputs (the ``detail`` of the
    ``entry_decided`` event)."""
    messages = list(state.get("messages") or [])
    incoming = incoming_messages(messages)
    earlier = desk_answers(messages[:len(messages) - len(incoming)])
    carried = packet_of(state)
    packet_questions = carried.open_questions if carried is not None else ()
    # the open question is the one the desk's last answer asked: an answer that asked nothing closes an earlier offer
    # (billing offers to refund tx_1008, then describes tx_1001: an "ok" to that must not pay tx_1008);
    # the packet's question stands in only when the thread has no desk answer yet
    question = open_question_of(str(earlier[-1].content)) if earlier else \
        (packet_questions[-1] if packet_questions else None)
    task = task_of(state)
    thread = ThreadView(
        active_agent=state.get("active_agent"), task_status=task.status if task is not None else None,
        open_question=question, identity_changed=identity_changed, available=frozenset(deps.available),
        clarify_rounds=0 if reading.social_topic else _clarify_rounds(earlier, deps.reader.social_answers()))
    routed = Routed.of(RouteView.of(route))
    decision = choose_entry(reading, thread, routed)
    return decision, {
        "active_agent": thread.active_agent, "routed_agent": routed.agent, "route_confidence": round(routed.confidence, 3),
        "scope": routed.scope, "reply": reading.reply, "item": reading.item, "open_question": question,
        "listed_items": list(reading.listed), "clarify_rounds": thread.clarify_rounds, "refers_back": reading.refers_back,
        "task_status": thread.task_status, "record_owners": sorted(reading.record_owners),
        "wants_person": reading.wants_person and not reading.loss_report, "same_question": reading.same_question,
        "follow_up_opener": reading.follow_up_opener, "card_action": reading.card_action,
        "lists_records_of": reading.lists_records_of, "opener_out_of_scope": reading.opener_out_of_scope,
        "language": reading.language, "act": reading.act, "frustrated": reading.frustrated,
        "named_agent": reading.named_route.agent if reading.named_route else None,
        "identity_changed": identity_changed}


def turn_verdict(state: dict, runtime: Runtime[RunContext], deps: Deps) -> tuple[AuthzDecision, Any]:
    """``(decision, principal)``: may this run's principal send a turn on this thread? The customer row is read from
    the business store unless the graph's gate admitted this very principal on this thread for this run
    (``nodes.admission``)."""
    config = run_config()
    res = resolve_principal(runtime, config)
    p = res.principal
    if res.denied:
        return AuthzDecision(False, res.denied), p
    known = False
    if p is not None and p.kind == "customer":
        try:
            known = admission.take(config, thread_id_of(), p.ref) or deps.store.get_customer(p.id, p.tenant_id) is not None
        except StoreError as exc:
            return AuthzDecision(False, f"the customer could not be verified ({exc})"), p
    return authorize_turn(p, owner_of(state), known), p


def _entry_packet(state: dict, runtime: Runtime[RunContext], decision: EntryDecision, task: TaskState | None,
                  open_question: str | None) -> HandoffPacket | None:
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
    before = task_of(state)
    finished = before is not None and before.status in ("cancelled", "completed")
    asked = (open_question,) if open_question and not finished else ()
    return build_packet(source="entry", target=decision.target, reason=decision.reason,
                        objective=last_user_text(messages), messages=messages, ctx=ctx, thread_id=thread_id_of(),
                        task=task, trace_id=ctx.request_id, extra_questions=asked,
                        carried=_without_questions(packet_of(state)))


def _without_questions(packet: HandoffPacket | None) -> HandoffPacket | None:
    """``packet`` with no open questions (an earlier turn's questions are not carried on)."""
    return packet.model_copy(update={"open_questions": ()}) if packet is not None else None


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
        # the one reading of this turn's message
        reading, route = read_message(state, deps, principal.id if principal.kind == "customer" else None)
        kept = reading.model_dump(mode="json")
        waiting = pending_of(state)
        if waiting is not None and waiting.waiting:
            # the thread waits for an approval: the message must not start a turn that drops the pending interrupt;
            # the paused dialogue answers it and the thread pauses again (nodes.paused_dialogue)
            return _to_paused_dialogue(state, turn, kept)
        identity = {"user_id": principal.id, "tenant_id": principal.tenant_id}
        stored = state.get("identity")
        identity_changed = bool(stored) and stored != identity
        decision, inputs = decide_entry(state, deps, identity_changed, reading, route)
        task = task_of(state)
        target = decision.target
        continuing = target == state.get("active_agent") and task is not None and task.status == "open"
        if not continuing and target not in (FALLBACK, OUT_OF_SCOPE):  # out of scope opens no task
            task = TaskState(task_id=f"task_{uuid.uuid4().hex[:12]}", status="open", current_owner=target,
                             owner_version=1)
        hop = hop_number(path_of(state), turn)
        emit("entry_decided", turn=turn, task_id=task.task_id if task is not None else None, to_agent=target,
             reason=decision.reason, detail={**inputs, "hop": hop})
        _person_requested(deps, principal, task, turn, decision)
        packet = _entry_packet(state, runtime, decision, task, inputs.get("open_question"))
        record = HandoffRecord(hop=hop, turn=turn, from_agent="entry", to_agent=target, kind="entry",
                               reason=decision.reason, packet=packet if target == FALLBACK else None)
        return Command(goto=target, update={
            "turn": turn,
            "owner": Owner(customer_id=principal.id, tenant_id=principal.tenant_id),  # kept only on the first turn
            "identity": identity,
            "turn_hops": 0,
            "seen_fingerprints": [],
            "tool_attempts": 0,
            "entry_reason": decision.reason,
            "reading": kept,
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


def _to_paused_dialogue(state: dict, turn: int, reading: dict) -> Command:
    """Start turn ``turn`` of a thread paused for an approval at ``paused_dialogue`` (control stays with the agent that
    holds the pause; the per-turn counters and the outcome start afresh; ``reading``: the turn's reading, as JSON)."""
    hop = hop_number(path_of(state), turn)
    emit("entry_decided", turn=turn, to_agent=PAUSED_DIALOGUE, reason=_PAUSED_REASON,
         detail={"active_agent": state.get("active_agent"), "hop": hop})
    record = HandoffRecord(hop=hop, turn=turn, from_agent="entry", to_agent=PAUSED_DIALOGUE, kind="entry",
                           reason=_PAUSED_REASON)
    return Command(goto=PAUSED_DIALOGUE, update={"turn": turn, "turn_hops": 0, "seen_fingerprints": [],
                                                 "tool_attempts": 0, "entry_reason": _PAUSED_REASON, "reading": reading,
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
