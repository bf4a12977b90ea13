"""The refund approval flow (issue 4): ``risk`` -> ``human_approval`` -> ``refund_execute`` -> ``refunds``.

Deterministic nodes, no model. Every business write is compare-and-swap or idempotent by key, because
LangGraph re-runs an interrupted (or crashed) node from its first line on resume:

* ``risk`` applies ``policies.risk.assess_refund`` and either decides automatically (decision id
  ``auto:<refund>``), or parks the task ``awaiting_approval`` and goes to ``human_approval``;
* ``human_approval`` pauses with ``interrupt(ApprovalRequest)``; a resume supplies an ApprovalDecision, which is
  authorized from the run context and claimed at most once in the business store (``decide_approval``);
* ``refund_execute`` pays exactly once with the idempotency key ``refund-exec:<task_id>:<handoff_id>`` and
  closes the task; a cancelled task executes nothing.

Control then returns to the refunds agent with a packet whose facts say what happened, so the customer
gets the final answer from the same agent, in one continuous conversation.
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from checkpoints.business import NotFoundError, StaleVersionError, StoreError, iso, money
from graph.approval import ApprovalRequest, parse_decision
from graph.context import RunContext
from graph.errors import InputError
from graph.packet import Fact, HandoffPacket, HandoffRecord
from graph.state import ensure_ids
from nodes.deps import Deps
from nodes.instrumentation import emit
from nodes.transcript import thread_id_of
from policies.authz import authorize_approval
from policies.edges import FALLBACK
from policies.risk import RECENT_WINDOW_DAYS, RiskInput, assess_refund

__all__ = ["make_risk_node", "make_human_approval_node", "make_refund_execute_node", "execution_key"]

REFUNDS = "refunds"


def execution_key(task_id: str, handoff_id: str | None) -> str:
    """The idempotency key of a refund payment: task + the handoff that brought the request (issue 4, item 3)."""
    return f"refund-exec:{task_id}:{handoff_id or '-'}"


def _ctx(runtime: Runtime[RunContext]) -> RunContext:
    return runtime.context if isinstance(runtime.context, RunContext) else RunContext()


def _record(state: dict, source: str, target: str, reason: str) -> dict:
    return HandoffRecord(hop=int(state.get("handoff_count") or 0), turn=int(state.get("turn") or 0),
                         from_agent=source, to_agent=target, kind="flow", reason=reason).model_dump()


def _back_to_refunds(state: dict, source: str, pa: dict, reason: str, extra: dict | None = None) -> Command:
    """Return control to the refunds agent with a packet whose facts describe the outcome."""
    facts = [Fact(key=k, value=str(v), source="system_verified") for k, v in (
        ("refund_id", pa.get("refund_id")), ("transaction_id", pa.get("transaction_id")),
        ("amount", pa.get("amount")), ("refund_status", pa.get("stage")),
        ("decided_by", (pa.get("decision") or {}).get("approver")),
        ("decision_note", (pa.get("decision") or {}).get("note"))) if v]
    packet = HandoffPacket(task_id=pa.get("task_id", ""), session_id=thread_id_of(), trace_id=pa.get("task_id", ""),
                           from_agent=source, to_agent=REFUNDS, reason=reason,
                           objective="tell the customer the outcome of their refund request",
                           known_facts=tuple(facts), evidence_refs=tuple(x for x in (pa.get("refund_id"),
                                                                                     pa.get("transaction_id")) if x),
                           risk_flags=tuple(pa.get("risk_flags") or ()),
                           ).model_dump(mode="json")
    task = dict(state.get("task") or {})
    if task:
        task["current_owner"] = REFUNDS
        task["status"] = {"executed": "completed", "rejected": "completed", "cancelled": "cancelled"}.get(
            pa.get("stage"), task.get("status", "open"))
    update = {"pending_approval": pa, "handoff": packet, "active_agent": REFUNDS,
              "handoff_path": [_record(state, source, REFUNDS, reason)], "task": task or None}
    update.update(extra or {})
    return Command(goto=REFUNDS, update=update)


def _to_fallback(state: dict, source: str, pa: dict, reason: str) -> Command:
    packet = HandoffPacket(task_id=pa.get("task_id", ""), session_id=thread_id_of(), trace_id=pa.get("task_id", ""),
                           from_agent=source, to_agent=FALLBACK, reason=reason, objective="refund request",
                           known_facts=(Fact(key="refund_id", value=str(pa.get("refund_id")), source="system_verified"),),
                           open_questions=("Check and finish this refund by hand.",)).model_dump(mode="json")
    return Command(goto=FALLBACK, update={"pending_approval": pa, "handoff": packet,
                                          "handoff_path": [_record(state, source, FALLBACK, reason)]})


def _retry_cas(fn, attempts: int = 5):
    """Run a compare-and-swap step, re-reading and deciding again on a stale version (bounded)."""
    for i in range(attempts):
        try:
            return fn()
        except StaleVersionError:
            if i + 1 == attempts:
                raise
            time.sleep(0.01 * (2 ** i))
    return None  # pragma: no cover


def make_risk_node(deps: Deps):
    """``risk(state, runtime) -> Command``: assess the requested refund in ``state["pending_approval"]``."""

    def risk(state: dict, runtime: Runtime[RunContext]) -> Command:
        store = deps.store
        pa = dict(state.get("pending_approval") or {})
        try:
            refund = store.load_refund(pa["refund_id"])
            if refund is None:
                raise NotFoundError(f"no refund {pa['refund_id']}")
            task = store.create_task(pa["task_id"], thread_id_of(), REFUNDS)
            customer = store.get_customer(refund.customer_id)
            recent = [r for r in store.refunds_in_last_days(refund.customer_id, RECENT_WINDOW_DAYS)
                      if r.id != refund.id and r.status not in ("cancelled", "rejected")]
            verdict = assess_refund(RiskInput(refund.amount_minor, refund.currency, len(recent),
                                              dict(customer.flags) if customer else {}))
            pa.update(amount_minor=refund.amount_minor, currency=refund.currency,
                      amount=money(refund.amount_minor, refund.currency), transaction_id=refund.transaction_id,
                      risk={"outcome": verdict.outcome, "reasons": list(verdict.reasons)},
                      risk_flags=list(verdict.reasons) if verdict.outcome != "auto_approve" else [])
            if refund.status == "executed":  # a replay after the money already left: just report
                pa["stage"] = "executed"
                return _back_to_refunds(state, "risk", pa, "the refund was already paid")

            def park() -> None:
                t = store.get_task(task.id)
                if t.status == "open" and not store.list_decisions(task.id):
                    store.update_task(t.id, t.version, status="awaiting_approval")

            _retry_cas(park)
            if verdict.outcome == "human_approval":
                req = ApprovalRequest(task_id=task.id, thread_id=thread_id_of(), customer_id=refund.customer_id,
                                      refund_id=refund.id, transaction_id=refund.transaction_id,
                                      amount_minor=refund.amount_minor, currency=refund.currency,
                                      amount=pa["amount"], reason=refund.reason,
                                      evidence_refs=(refund.id, refund.transaction_id),
                                      risk_flags=verdict.reasons, requested_at=iso(store.now()))
                pa.update(stage="awaiting", request=req.model_dump(mode="json"))
                return Command(goto="human_approval", update={
                    "pending_approval": pa,
                    "task": {**(state.get("task") or {}), "status": "awaiting_approval"},
                    "handoff_path": [_record(state, "risk", "human_approval", "; ".join(verdict.reasons))]})
            decision = "approve" if verdict.outcome == "auto_approve" else "reject"
            d, won = store.decide_approval(task.id, f"auto:{refund.id}", "risk-policy", decision,
                                           "; ".join(verdict.reasons), refund_id=refund.id)
            pa["decision"] = d.to_dict()
            if not won and d.decision != decision:
                pa["stage"] = {"cancel": "cancelled", "reject": "rejected"}.get(d.decision, "already_decided")
                return _back_to_refunds(state, "risk", pa, f"already decided: {d.decision}")
            if decision == "approve":
                pa["stage"] = "approved"
                return Command(goto="refund_execute", update={
                    "pending_approval": pa,
                    "handoff_path": [_record(state, "risk", "refund_execute", "auto-approved: " + "; ".join(verdict.reasons))]})
            pa["stage"] = "rejected"
            return _back_to_refunds(state, "risk", pa, "rejected by the risk rules: " + "; ".join(verdict.reasons))
        except (StoreError, KeyError) as exc:
            return _to_fallback(state, "risk", pa, f"the risk check failed ({type(exc).__name__}: {exc})")

    return risk


def make_human_approval_node(deps: Deps):
    """``human_approval(state, runtime) -> Command``: pause with the ApprovalRequest until a valid decision arrives."""

    def human_approval(state: dict, runtime: Runtime[RunContext]) -> Command:
        ctx = _ctx(runtime)
        pa = dict(state.get("pending_approval") or {})
        request = dict(pa.get("request") or {})
        # A malformed or unauthorized resume pauses again with the reason; the thread stays pending.
        while True:
            raw = interrupt(request)
            try:
                decision = parse_decision(raw)
                if decision.decision == "cancel":
                    if "approver" not in ctx.roles and not ("customer" in ctx.roles
                                                            and ctx.user_id == request.get("customer_id")):
                        raise InputError("only the customer who asked for the refund or an approver may cancel it")
                else:
                    verdict = authorize_approval(ctx.roles, decision.approver)
                    if not verdict.allowed:
                        raise InputError(verdict.reason)
                break
            except InputError as exc:
                request = {**request, "last_error": str(exc)}
        extra: dict[str, Any] = {}
        if decision.decision == "cancel" and decision.note:
            # the customer's cancel message starts a new turn of the conversation
            turn = int(state.get("turn") or 0) + 1
            state = {**state, "turn": turn}
            extra["messages"] = ensure_ids([HumanMessage(content=decision.note, id=f"m_{decision.decision_id}")])
            extra["turn"] = turn
        try:
            d, won = deps.store.decide_approval(pa["task_id"], decision.decision_id, decision.approver,
                                                decision.decision, decision.note, refund_id=pa.get("refund_id"))
        except StoreError as exc:
            return _to_fallback(state, "human_approval", pa, f"recording the decision failed ({exc})")
        pa["decision"] = d.to_dict()
        if not won:
            pa["stage"] = "cancelled" if d.decision == "cancel" else "already_decided"
            return _back_to_refunds(state, "human_approval", pa,
                                    f"already decided: {d.decision} by {d.approver} at {d.decided_at}", extra)
        if d.decision == "approve":
            pa["stage"] = "approved"
            return Command(goto="refund_execute", update={
                "pending_approval": pa, **extra,
                "handoff_path": [_record(state, "human_approval", "refund_execute", f"approved by {d.approver}")]})
        pa["stage"] = "rejected" if d.decision == "reject" else "cancelled"
        return _back_to_refunds(state, "human_approval", pa, f"{pa['stage']} by {d.approver}", extra)

    return human_approval


def make_refund_execute_node(deps: Deps):
    """``refund_execute(state, runtime) -> Command``: pay the approved refund exactly once and close the task."""

    def refund_execute(state: dict, runtime: Runtime[RunContext]) -> Command:
        store = deps.store
        pa = dict(state.get("pending_approval") or {})
        try:
            task = store.get_task(pa["task_id"])
            if task is None or task.status == "cancelled":
                pa["stage"] = "cancelled"
                return _back_to_refunds(state, "refund_execute", pa, "the task was cancelled; nothing was paid")
            emit("tool_called", tool="execute_refund", refund_id=pa["refund_id"], side_effect=True)
            result = store.execute_refund(pa["refund_id"], execution_key(pa["task_id"], pa.get("handoff_id")))
            emit("tool_finished", tool="execute_refund", refund_id=pa["refund_id"],
                        status="replayed" if result.get("replayed") else "ok")

            def close() -> None:
                t = store.get_task(pa["task_id"])
                if t.status not in ("completed", "cancelled"):
                    store.update_task(t.id, t.version, status="completed")

            _retry_cas(close)
        except StoreError as exc:
            refund = store.load_refund(pa.get("refund_id", ""))
            if refund is not None and refund.status in ("cancelled", "rejected"):
                pa["stage"] = refund.status
                return _back_to_refunds(state, "refund_execute", pa, f"the refund is {refund.status}; nothing was paid")
            return _to_fallback(state, "refund_execute", pa, f"the payment failed ({type(exc).__name__}: {exc})")
        pa.update(stage="executed", result=result)
        return _back_to_refunds(state, "refund_execute", pa, "refund paid",
                                {"state_version": int(state.get("state_version") or 0) + (0 if result.get("replayed") else 1)})

    return refund_execute
