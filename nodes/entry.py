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
from typing import Any

from langchain_core.messages import HumanMessage, RemoveMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from checkpoints.business import StoreError
from graph.context import RunContext
from graph.errors import AccessDenied
from graph.packet import HandoffRecord
from nodes.deps import Deps
from nodes.instrumentation import emit
from nodes.principal import resolve_principal
from nodes.transcript import last_user_text, thread_id_of
from policies.authz import AuthzDecision, authorize_turn, owner_of
from policies.edges import ACCESS_DENIED, END, FALLBACK
from policies.entry import choose_entry

__all__ = ["make_entry_node", "make_access_denied_node", "turn_verdict", "incoming_messages"]


def incoming_messages(messages: list[Any]) -> list[Any]:
    """The messages the current run's input appended: the trailing HumanMessages (every finished or paused turn ends
    with a message of the desk, so what follows it came with this run)."""
    out: list[Any] = []
    for m in reversed(messages):
        if not isinstance(m, HumanMessage):
            break
        out.append(m)
    return out[::-1]


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
        if (state.get("pending_approval") or {}).get("stage") == "awaiting":
            # the thread waits for an approval: a new message (graph driven directly, e.g. langgraph dev) must not start
            # a turn that drops the pending interrupt and leaves the refund "requested" without an owner; it goes
            # back to the pause (Conversation.send answers such messages itself: cancel confirmation, status)
            emit("interrupt", reason="a message arrived while the thread waits for an approval", to_agent="human_approval")
            return Command(goto="human_approval")
        turn = int(state.get("turn") or 0) + 1
        identity = {"user_id": principal.id, "tenant_id": principal.tenant_id}
        stored = state.get("identity")
        identity_changed = bool(stored) and stored != identity
        text = last_user_text(list(state.get("messages") or []))
        route = deps.router.route(text) if text else None
        task = dict(state.get("task") or {})
        decision = choose_entry(
            active_agent=state.get("active_agent"),
            routed_agent=route.agent if route else None,
            route_confidence=route.confidence if route else 0.0,
            identity_changed=identity_changed,
            available=deps.available,
            task_status=task.get("status"),
        )
        target = decision.target
        continuing = target == state.get("active_agent") and task.get("status") == "open"
        if not continuing and target != FALLBACK:
            task = {"task_id": f"task_{uuid.uuid4().hex[:12]}", "status": "open", "current_owner": target, "owner_version": 1}
        record = HandoffRecord(hop=int(state.get("handoff_count") or 0), turn=turn, from_agent="entry", to_agent=target,
                               kind="entry", reason=decision.reason).model_dump()
        return Command(goto=target, update={
            "turn": turn,
            "owner": {"customer_id": principal.id, "tenant_id": principal.tenant_id},  # kept only on the first turn
            "identity": identity,
            "turn_hops": 0,
            "seen_fingerprints": [],
            "tool_attempts": 0,
            "entry_reason": decision.reason,
            "active_agent": target,
            "visited_agents": [target],
            "handoff_path": [record],
            "task": task,
            "outcome": None,
            "handoff": None,  # a packet belongs to its turn; earlier ones stay in handoff_path
        })

    return entry


def make_access_denied_node(deps: Deps):
    """``access_denied(state, runtime)``: raises :class:`AccessDenied` for the run the entry node refused. Reached
    again by a later run of an authorized principal (``recover`` continuing the thread), it ends that run quietly."""

    def access_denied(state: dict, runtime: Runtime[RunContext]) -> Command:
        verdict, _ = turn_verdict(state, runtime, deps)
        if verdict.allowed:
            return Command(goto=END)
        raise AccessDenied(f"thread {thread_id_of() or '?'}: {verdict.reason}")

    return access_denied
