"""The refund approval flow: ``risk`` -> ``human_approval`` -> ``refund_execute`` -> ``refunds``.

Deterministic nodes, no model. Every business write is compare-and-swap or idempotent by key, because
LangGraph re-runs an interrupted (or crashed) node from its first line on resume:

* ``risk`` applies ``policies.risk.assess_refund`` and either decides automatically (decision id
  ``auto:<refund>``), or parks the task ``awaiting_approval`` and goes to ``human_approval``;
* ``human_approval`` pauses with ``interrupt(ApprovalRequest)`` (also carrying LangChain's ``HITLRequest`` keys:
  ``graph.contracts.approval.interrupt_payload``); a resume supplies an ApprovalDecision, or LangChain's ``{"decisions":
  [{"type": "approve" | "reject", …}]}`` for it (``graph.contracts.approval.from_hitl``: the same rules). Who decides
  is the run's principal (``nodes.principal.resolve_principal``), never a name in the decision: the principal must
  be the thread's owner (who may only cancel) or a registered operator of the tenant — checked *before* the resume
  value is read, so a refused caller leaves the thread exactly as it was — and the decision must pass
  ``policies.authz.authorize_decision`` (a registered approver who is not the refund's customer; two *distinct*
  approvers for the higher risk tier: the first approval is recorded and the thread pauses again for the second).
  Each decision is claimed at most once in the business store (``decide_approval``) under its decision id, with the
  principal's ref; a refused decision is recorded too (audit row, ``access_denied`` event) and the caller gets
  :class:`graph.contracts.errors.AccessDenied`;
* ``refund_execute`` pays exactly once with the idempotency key ``refund-exec:<task_id>:<handoff_id>`` and
  closes the task; a cancelled task executes nothing.

Control then returns to the refunds agent with a packet whose facts say what happened, so the customer
gets the final answer from the same agent, in one continuous conversation.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from checkpoints.business import (
    BusinessRuleError,
    NotFoundError,
    PaymentNotAuthorized,
    StaleVersionError,
    StoreError,
    iso,
    money,
)
from checkpoints.business.records import UNPAID_FINAL_REFUND_STATUSES
from graph.contracts.approval import ApprovalRequest, PendingApproval, from_hitl, interrupt_payload, parse_decision
from graph.contracts.context import SYSTEM_RISK_POLICY, Principal, RunContext
from graph.contracts.errors import AccessDenied, InputError
from graph.contracts.packet import Fact, HandoffPacket, HandoffRecord, hop_number, observed_now
from graph.contracts.state import TaskState, ensure_ids, path_of, pending_of, task_of
from nodes.deps import Deps, DeskStore
from nodes.instrumentation import emit, note
from nodes.principal import cancel_confirmed_on, operator_facts, resolve_principal
from nodes.transcript import thread_id_of
from policies.authz import AuthzDecision, approval_overdue, authorize_decision, authorize_resume, owner_of
from policies.edges import FALLBACK
from policies.risk import RECENT_WINDOW_DAYS, RiskInput, assess_refund

__all__ = ["make_risk_node", "make_human_approval_node", "make_refund_execute_node", "execution_key", "decision_key",
           "STAGE_OF", "ALREADY_PAID", "after_decision", "to_fallback", "canonical_resume"]

REFUNDS = "refunds"


def execution_key(task_id: str, handoff_id: str | None) -> str:
    """The idempotency key of a refund payment: task + the handoff that brought the request: a re-run node pays once."""
    return f"refund-exec:{task_id}:{handoff_id or '-'}"


#: The approval stage a final decision leads to (``PendingApproval.stage``; the refunds agent words the answer).
STAGE_OF = {"approve": "approved", "reject": "rejected", "cancel": "cancelled", "expire": "expired", "close": "closed"}


def decision_key(raw: Any, task_id: str, index: int, pause: str = "") -> str:
    """The id a resume value is recorded under: its own ``decision_id`` when it carries one, else ``dc_`` + 16 hex of
    SHA-256 over the task, the pause (``pause``: the LangGraph task of this execution of ``human_approval``, its
    ``checkpoint_ns``), the resume's position in that pause (0, 1, …) and the value's JSON — the same on every re-run
    of the node, so a replayed value finds its recorded (or refused) decision; and different in a later pause of the
    same task (a message on the paused thread pauses it again), so a second approver's ``{"decision": "approve"}``
    is never taken for the replay of the first one's."""
    if isinstance(raw, dict) and isinstance(raw.get("decision_id"), str) and raw["decision_id"].strip():
        return raw["decision_id"].strip()
    body = json.dumps(raw, sort_keys=True, default=str)
    return "dc_" + hashlib.sha256(f"{task_id}|{pause}|{index}|{body}".encode()).hexdigest()[:16]


def canonical_resume(raw: Any) -> Any:
    """A resume value in LangChain's human-in-the-loop shape as the decision it stands for (so both shapes of one
    decision are recorded under one key); any other value (or a malformed HITL one, refused later) as it is."""
    if isinstance(raw, dict) and "decisions" in raw:
        try:
            return from_hitl(raw)
        except InputError:
            return raw
    return raw


def _record(state: dict, source: str, target: str, reason: str) -> HandoffRecord:
    turn = int(state.get("turn") or 0)
    return HandoffRecord(hop=hop_number(path_of(state), turn), turn=turn,
                         from_agent=source, to_agent=target, kind="flow", reason=reason)


def _back_to_refunds(state: dict, source: str, pa: PendingApproval, reason: str, extra: dict | None = None,
                     told: str | None = None) -> Command:
    """Return control to the refunds agent with a packet whose facts describe the outcome. ``reason`` is the hop's
    (handoff path, events: operators read it); ``told`` the packet's, which reaches the refunds agent's model and so
    never names who decided (default: ``reason``)."""
    at = observed_now()  # the approval flow read these from the store just now
    facts = [Fact(key=k, value=str(v), source="system_verified", observed_at=at) for k, v in (
        ("refund_id", pa.refund_id), ("transaction_id", pa.transaction_id),
        ("amount", pa.amount), ("refund_status", pa.stage)) if v]
    # Who decided and their note are internal (decision record, events, pending/history for operators): they never
    # enter the packet, so no model and no answer can pass them on to the customer.
    packet = HandoffPacket(task_id=pa.task_id, session_id=thread_id_of(), trace_id=pa.task_id,
                           from_agent=source, to_agent=REFUNDS, reason=told or reason,
                           objective="tell the customer the outcome of their refund request",
                           known_facts=tuple(facts), evidence_refs=tuple(x for x in (pa.refund_id,
                                                                                     pa.transaction_id) if x),
                           risk_flags=pa.risk_flags)
    task = task_of(state)
    if task is not None:
        task = task.model_copy(update={"current_owner": REFUNDS, "status": _TASK_STATUS_AFTER.get(pa.stage, task.status)})
    update = {"pending_approval": pa, "handoff": packet, "active_agent": REFUNDS,
              "handoff_path": [_record(state, source, REFUNDS, reason)], "task": task}
    update.update(extra or {})
    return Command(goto=REFUNDS, update=update)


#: The task status a final stage leads to (``TaskState.status``); other stages leave it as it is.
_TASK_STATUS_AFTER = {"executed": "completed", "rejected": "completed", "cancelled": "cancelled",
                      "expired": "cancelled", "closed": "cancelled"}


def to_fallback(state: dict, source: str, pa: PendingApproval | None, reason: str) -> Command:
    """End the approval flow in ``fallback``: a person finishes the refund ``pa`` by hand."""
    refund_id = pa.refund_id if pa is not None else ""
    task_id = pa.task_id if pa is not None else ""
    packet = HandoffPacket(task_id=task_id, session_id=thread_id_of(), trace_id=task_id,
                           from_agent=source, to_agent=FALLBACK, reason=reason, objective="refund request",
                           known_facts=(Fact(key="refund_id", value=str(refund_id or None), source="system_verified",
                                             observed_at=observed_now()),),
                           open_questions=("Check and finish this refund by hand.",))
    return Command(goto=FALLBACK, update={"pending_approval": pa, "handoff": packet,
                                          "handoff_path": [_record(state, source, FALLBACK, reason)]})


def _required(pa: PendingApproval | None) -> PendingApproval:
    """The thread's approval request; KeyError when it has none (the flow then ends in fallback)."""
    if pa is None:
        raise KeyError("pending_approval")
    return pa


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
        pa = pending_of(state)
        try:
            pa = _required(pa)
            refund = store.load_refund(pa.refund_id)
            if refund is None:
                raise NotFoundError(f"no refund {pa.refund_id}")
            task = store.create_task(pa.task_id, thread_id_of(), REFUNDS, refund_id=refund.id)
            customer = store.get_customer(refund.customer_id)
            recent = [r for r in store.refunds_in_last_days(refund.customer_id, RECENT_WINDOW_DAYS)
                      if r.id != refund.id and r.status not in UNPAID_FINAL_REFUND_STATUSES]
            rejected = [r for r in store.refunds_for_transaction(refund.customer_id, refund.transaction_id)
                        if r.id != refund.id and r.status == "rejected"]
            risk_input = RiskInput(refund.amount_minor, refund.currency, len(recent),
                                   dict(customer.flags) if customer else {}, len(rejected))
            verdict = assess_refund(risk_input, deps.policy_set.risk)
            # what the rules saw, on this visit's agent_finished event: `switchboard whatif` replays it (graph.app.whatif)
            note(refund_id=refund.id, risk_input=asdict(risk_input), risk_outcome=verdict.outcome,
                 approvals_required=verdict.approvals_required)
            pa = pa.evolve(amount_minor=refund.amount_minor, currency=refund.currency,
                           amount=money(refund.amount_minor, refund.currency), transaction_id=refund.transaction_id,
                           risk={"outcome": verdict.outcome, "reasons": list(verdict.reasons)},
                           risk_flags=tuple(verdict.reasons) if verdict.outcome != "auto_approve" else ())
            if refund.status == "executed":  # a replay after the money already left: just report
                return _back_to_refunds(state, "risk", pa.evolve(stage="executed"), "the refund was already paid")

            now = store.now()
            deadline = now + timedelta(hours=deps.settings.approval_deadline_h)
            human = verdict.outcome == "human_approval"
            # what paying this refund requires, recorded once where the money moves (execute_refund reads it back)
            store.record_approval_rule(task.id, max(1, verdict.approvals_required) if human else
                                       0 if verdict.outcome == "auto_approve" else 1, iso(deadline) if human else None)

            def park() -> None:
                t = store.get_task(task.id)
                if t is not None and t.status == "open" and not store.list_decisions(task.id):
                    store.update_task(t.id, t.version, status="awaiting_approval")

            _retry_cas(park)
            if human:
                req = ApprovalRequest(task_id=task.id, thread_id=thread_id_of(), customer_id=refund.customer_id,
                                      refund_id=refund.id, transaction_id=refund.transaction_id,
                                      amount_minor=refund.amount_minor, currency=refund.currency,
                                      amount=pa.amount or "", reason=refund.reason,
                                      evidence_refs=(refund.id, refund.transaction_id),
                                      risk_flags=verdict.reasons, requested_at=iso(now),
                                      approvals_required=verdict.approvals_required, deadline=iso(deadline))
                pa = pa.evolve(stage="awaiting_approval", request=req)
                waiting_task = (task_of(state) or TaskState()).model_copy(update={"status": "awaiting_approval"})
                return Command(goto="human_approval", update={
                    "pending_approval": pa,
                    "task": waiting_task,
                    "handoff_path": [_record(state, "risk", "human_approval", "; ".join(verdict.reasons))]})
            decision = "approve" if verdict.outcome == "auto_approve" else "reject"
            d, won = store.decide_approval(task.id, f"auto:{refund.id}", SYSTEM_RISK_POLICY, decision,
                                           "; ".join(verdict.reasons), refund_id=refund.id)
            pa = pa.evolve(decision=d.to_dict())
            if not won and d.decision != decision:
                pa = pa.evolve(stage={"cancel": "cancelled", "reject": "rejected"}.get(d.decision, "already_decided"))
                return _back_to_refunds(state, "risk", pa, f"already decided: {d.decision}")
            if decision == "approve":
                return Command(goto="refund_execute", update={
                    "pending_approval": pa.evolve(stage="approved"),
                    "handoff_path": [_record(state, "risk", "refund_execute", "auto-approved: " + "; ".join(verdict.reasons))]})
            return _back_to_refunds(state, "risk", pa.evolve(stage="rejected"),
                                    "rejected by the risk rules: " + "; ".join(verdict.reasons))
        except (StoreError, KeyError) as exc:
            return to_fallback(state, "risk", pa, f"the risk check failed ({type(exc).__name__}: {exc})")

    return risk


def _deny(store: DeskStore, caller: Principal | None, action: str, reason: str, task_id: str,
          key: str | None = None) -> None:
    """Record a refusal: an ``access_denied`` event and an audit row (``key``: the refused decision's id, so a replay
    of the same resume value is skipped instead of decided again)."""
    ref = caller.ref if caller is not None else "unknown"
    emit("access_denied", reason=reason, detail={"principal": ref, "action": action, "task_id": task_id,
                                                 "decision_id": key})
    try:
        store.record_audit(ref, action, target=task_id, outcome="denied", detail={"reason": reason}, key=key)
    except StoreError:
        pass  # the refusal stands; the event log has it


def _refused_before(store: DeskStore, key: str) -> bool:
    return any(e.outcome == "denied" for e in store.audit_entries(key=key, limit=5))


def _pause_of_this_execution() -> str:
    """The LangGraph task of the running ``human_approval`` execution (``checkpoint_ns``, ``human_approval:<id>``):
    the same while its resumes replay, another for a later pause; "" outside a run."""
    from langgraph.config import get_config

    try:
        return str((get_config().get("configurable") or {}).get("checkpoint_ns") or "")
    except RuntimeError:
        return ""


class _Refused(Exception):
    """A resume value that was read and refused: recorded, then raised to the caller as AccessDenied."""


class _Approval:
    """One execution of ``human_approval``: reads resume values until a final decision (see the module doc)."""

    def __init__(self, deps: Deps, state: dict, caller: Principal, pa: PendingApproval):
        self.deps, self.state, self.caller, self.pa = deps, state, caller, pa
        self.request = pa.request
        self.task_id = pa.task_id or (self.request.task_id if self.request is not None else "")
        self.required = self.request.approvals_required if self.request is not None else 1
        # approvals recorded before this pause began (a message on the paused thread pauses it again, in a new run)
        self.approvals: list[str] = [x.approver for x in deps.store.list_decisions(self.task_id)
                                     if x.decision == "approve" and not x.final] if self.task_id else []
        self.operator = operator_facts(deps.store, caller.id) if caller.kind == "operator" else None
        self.pause = _pause_of_this_execution()

    def next_decision(self) -> tuple[Any, bool]:
        """Pause until a final decision; return ``(Decision, won)`` (won False: the task was decided elsewhere)."""
        index = 0
        while True:
            # our ApprovalRequest, also in LangChain's HITLRequest shape (graph.contracts.approval.interrupt_payload)
            raw = interrupt(interrupt_payload(self.request, self.approvals))
            key = decision_key(canonical_resume(raw), self.task_id, index, self.pause)
            index += 1
            recorded = self.deps.store.get_decision(key)
            if recorded is not None and recorded.task_id == self.task_id:  # taken before: replay, whoever took it
                if recorded.decision == "approve" and not recorded.final:
                    if recorded.approver not in self.approvals:
                        self.approvals.append(recorded.approver)
                    continue
                return recorded, True
            if _refused_before(self.deps.store, key):
                continue
            d, won = self._decide(raw, key)
            if won and d.decision == "approve" and not d.final:
                self.approvals.append(d.approver)
                continue
            return d, won

    def _decide(self, raw: Any, key: str) -> tuple[Any, bool]:
        try:
            decision = parse_decision(raw)
        except InputError as exc:
            self._refuse("decision", str(exc), key)
        verdict = self._authorize(decision)
        if not verdict.allowed:
            self._refuse(decision.decision, verdict.reason, key)
        try:
            # refund_id None: the store settles the refund its task decides (checked by _request_mismatch)
            return self.deps.store.decide_approval(self.task_id, key, self.caller.ref, decision.decision, decision.note,
                                                   required_approvals=self.required)
        except BusinessRuleError as exc:  # the same approver twice, or a decision id of another task
            self._refuse(decision.decision, str(exc), key)
        raise AssertionError("unreachable")  # pragma: no cover

    def _authorize(self, decision: Any) -> AuthzDecision:
        if decision.approver is not None and decision.approver not in (self.caller.id, self.caller.ref):
            return AuthzDecision(False, f"the decision names {decision.approver!r} but was sent by {self.caller.ref}; "
                                        "the approver is the caller")
        overdue = False
        if decision.decision == "expire":
            overdue = approval_overdue(self.request.model_dump(mode="json") if self.request is not None else {},
                                       self.deps.store.now())
        # a customer's cancel follows the chat's confirmation rule on every way in (policies.cancellation)
        confirmed = decision.decision == "cancel" and self.caller.kind == "customer" and \
            cancel_confirmed_on(self.deps.store, thread_id_of(), self.task_id)
        return authorize_decision(self.caller, self.operator, decision.decision,
                                  self.request.customer_id if self.request is not None else "", self.approvals,
                                  overdue, confirmed)

    def _refuse(self, action: str, reason: str, key: str) -> None:
        _deny(self.deps.store, self.caller, action, reason, self.task_id, key)
        raise _Refused(reason)


def make_human_approval_node(deps: Deps):
    """``human_approval(state, runtime) -> Command``: pause with the ApprovalRequest until an authorized final
    decision arrives. Raises :class:`AccessDenied` for a caller who may not resume the thread (before reading the
    resume value) and for a refused decision (recorded, then skipped when LangGraph replays it)."""

    def human_approval(state: dict, runtime: Runtime[RunContext]) -> Command:
        pa = pending_of(state)
        request = pa.request if pa is not None else None
        res = resolve_principal(runtime)
        caller = res.principal
        owner = owner_of(state) or ((request.customer_id, "") if request is not None and request.customer_id else None)
        if res.denied or caller is None:
            gate = AuthzDecision(False, res.denied or "no identified caller")
        else:
            operator = operator_facts(deps.store, caller.id) if caller.kind == "operator" else None
            gate = authorize_resume(caller, owner, operator)
        if not gate.allowed or caller is None:
            _deny(deps.store, caller, "resume", gate.reason, pa.task_id if pa is not None else "")
            raise AccessDenied(f"thread {thread_id_of() or '?'}: {gate.reason}")
        mismatch = _request_mismatch(deps.store, pa)
        if mismatch or pa is None:  # the pause shows an approver exactly the refund the store will pay, or nothing
            _deny(deps.store, caller, "resume", mismatch, pa.task_id if pa is not None else "")
            return to_fallback(state, "human_approval", pa, "the approval request does not match the business store")
        flow = _Approval(deps, state, caller, pa)
        try:
            paid = deps.store.load_refund(pa.refund_id)
            if paid is not None and paid.status == "executed":  # paid outside this conversation while it waited
                return _already_paid(deps.store, state, pa, paid, "human_approval")
            d, won = flow.next_decision()
        except _Refused as exc:
            raise AccessDenied(f"thread {thread_id_of() or '?'}: {exc}") from None
        except StoreError as exc:
            return to_fallback(state, "human_approval", pa, f"recording the decision failed ({exc})")
        return after_decision(state, pa, d, won)

    return human_approval


def _request_mismatch(store: DeskStore, pa: PendingApproval | None) -> str:
    """Why the approval request in graph state is not the business store's ("" when it is): the task must be this
    thread's, decide the request's refund, and the refund's customer, transaction, amount and currency, and the task's
    recorded approval rule, must be the request's. The approver decides what the store holds, never a copy of it."""
    if pa is None or pa.request is None:
        return "the thread holds no approval request"
    request = pa.request
    task = store.get_task(pa.task_id or request.task_id)
    if task is None:
        return f"no task {pa.task_id!r} in the business store"
    if task.thread_id != (thread_id_of() or task.thread_id):
        return f"task {task.id} belongs to another thread"
    wanted = request.refund_id
    if not task.refund_id or task.refund_id != wanted or (pa.refund_id or wanted) != wanted:
        return f"task {task.id} decides refund {task.refund_id}, not {wanted or pa.refund_id}"
    refund = store.load_refund(task.refund_id)
    if refund is None:
        return f"no refund {task.refund_id} in the business store"
    shown = (request.customer_id, request.transaction_id, request.amount_minor, request.currency)
    if shown != (refund.customer_id, refund.transaction_id, refund.amount_minor, refund.currency):
        return f"the request does not show refund {refund.id} as the business store holds it"
    if task.approvals_required is not None and request.approvals_required != task.approvals_required:
        return f"task {task.id} records {task.approvals_required} required approver(s)"
    return ""


def _as_stored(pa: PendingApproval, refund: Any) -> PendingApproval:
    """``pa`` with the refund's identity and amount taken from the store's record ``refund`` (what was acted on)."""
    return pa.evolve(refund_id=refund.id, transaction_id=refund.transaction_id, amount_minor=refund.amount_minor,
                     currency=refund.currency, amount=money(refund.amount_minor, refund.currency))


def after_decision(state: dict, pa: PendingApproval, d: Any, won: bool, message_in_state: bool = False) -> Command:
    """Route a final decision: approve -> ``refund_execute``; else back to refunds with the outcome. A customer's
    cancel that came as a resume carries the customer's words as its note: they become the turn's message, unless
    the message is in the state already (``message_in_state``: the paused dialogue took the cancel from it)."""
    extra: dict[str, Any] = {}
    if d.decision == "cancel" and d.note and d.approver.startswith("customer:") and not message_in_state:
        # the customer's cancel message starts a new turn of the conversation
        turn = int(state.get("turn") or 0) + 1
        state = {**state, "turn": turn}
        extra["messages"] = ensure_ids([HumanMessage(content=d.note, id=f"m_{d.id}")])
        extra["turn"] = turn
    pa = pa.evolve(decision=d.to_dict())
    if not won:
        pa = pa.evolve(stage="cancelled" if d.decision == "cancel" else "already_decided")
        return _back_to_refunds(state, "human_approval", pa,
                                f"already decided: {d.decision} by {d.approver} at {d.decided_at}", extra,
                                told=f"already decided: {d.decision}")
    if d.decision == "approve":
        return Command(goto="refund_execute", update={
            "pending_approval": pa.evolve(stage="approved"), **extra,
            "handoff_path": [_record(state, "human_approval", "refund_execute", f"approved by {d.approver}")]})
    pa = pa.evolve(stage=STAGE_OF.get(d.decision, d.decision))
    return _back_to_refunds(state, "human_approval", pa, f"{pa.stage} by {d.approver}", extra,
                            told=f"the refund request was {pa.stage}")


#: The hop reason of ``human_approval``/``refund_execute`` when the refund had been paid before this decision (under
#: another idempotency key, e.g. by an operator outside the conversation); ``switchboard resume`` tells the operator.
ALREADY_PAID = "the refund was already paid before this decision; nothing was paid twice"


def _already_paid(store: DeskStore, state: dict, pa: PendingApproval, refund: Any,
                  source: str = "refund_execute") -> Command:
    """Report a refund that was paid before this thread's payment ran (``execute_refund`` refused a second key): the
    customer hears that it was paid, the task is completed, and no "payment failed" reaches anyone."""
    def close() -> None:
        t = store.get_task(pa.task_id)
        if t is not None and t.status not in ("completed", "cancelled"):
            store.update_task(t.id, t.version, status="completed")

    try:
        _retry_cas(close)
    except StoreError:
        pass  # the money is paid either way; the task is then listed by 'switchboard tasks --stuck'
    pa = pa.evolve(stage="executed", result={"refund_id": refund.id, "transaction_id": refund.transaction_id,
                                             "credit_transaction_id": f"tx_{refund.id}",
                                             "amount_minor": refund.amount_minor, "currency": refund.currency,
                                             "status": "executed", "already_paid": True, "replayed": True})
    return _back_to_refunds(state, source, pa, ALREADY_PAID)


def make_refund_execute_node(deps: Deps):
    """``refund_execute(state, runtime) -> Command``: pay the approved refund exactly once and close the task."""

    def refund_execute(state: dict, runtime: Runtime[RunContext]) -> Command:
        store = deps.store
        pa = pending_of(state)
        if pa is None:
            return to_fallback(state, "refund_execute", None, "no refund request to pay")
        try:
            task = store.get_task(pa.task_id)
            if task is None or task.status == "cancelled":
                return _back_to_refunds(state, "refund_execute", pa.evolve(stage="cancelled"),
                                        "the task was cancelled; nothing was paid")
            # The authority to pay is the store's: the task must be this thread's and decide this refund, and
            # execute_refund pays only what the task's recorded decisions allow (PaymentNotAuthorized otherwise).
            if task.thread_id != (thread_id_of() or task.thread_id) or not task.refund_id \
                    or task.refund_id != pa.refund_id:
                reason = f"task {task.id} does not decide refund {pa.refund_id} on this thread"
                _deny(store, None, "execute_refund", reason, task.id)
                return to_fallback(state, "refund_execute", pa, "the payment does not match the business store")
            emit("tool_called", tool="execute_refund", refund_id=task.refund_id, side_effect=True)
            result = store.execute_refund(task.refund_id, execution_key(task.id, pa.handoff_id))
            emit("tool_finished", tool="execute_refund", refund_id=task.refund_id,
                 status="replayed" if result.get("replayed") else "ok")

            def close() -> None:
                t = store.get_task(task.id)
                if t is not None and t.status not in ("completed", "cancelled"):
                    store.update_task(t.id, t.version, status="completed")

            _retry_cas(close)
        except PaymentNotAuthorized as exc:
            _deny(store, None, "execute_refund", str(exc), pa.task_id)
            return to_fallback(state, "refund_execute", pa, "no recorded decision allows this payment; nothing was paid")
        except StoreError as exc:
            refund = store.load_refund(pa.refund_id)
            if refund is not None and refund.status in UNPAID_FINAL_REFUND_STATUSES:
                return _back_to_refunds(state, "refund_execute", pa.evolve(stage=refund.status),
                                        f"the refund is {refund.status}; nothing was paid")
            if refund is not None and refund.status == "executed":
                return _already_paid(store, state, pa, refund)
            return to_fallback(state, "refund_execute", pa, f"the payment failed ({type(exc).__name__}: {exc})")
        paid = store.load_refund(result["refund_id"])
        pa = _as_stored(pa, paid) if paid is not None else pa  # the answer names the record that was paid
        pa = pa.evolve(stage="executed", result=result)
        return _back_to_refunds(state, "refund_execute", pa, "refund paid",
                                {"state_version": int(state.get("state_version") or 0) + (0 if result.get("replayed") else 1)})

    return refund_execute
