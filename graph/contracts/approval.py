"""Typed data of the human-approval flow: what the interrupt carries and what a resume must supply.

Who decides is never part of the decision: the graph records the principal of the run that resumed it
(``nodes.principal.resolve_principal``), and ``ApprovalDecision.approver`` is only accepted when it names that same
principal (a deprecated field kept for old callers).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from graph.contracts.errors import InputError
from graph.contracts.inputs import check_message

__all__ = ["ApprovalRequest", "ApprovalDecision", "parse_decision", "ApprovalStage", "PendingApproval", "STAGES",
           "FINAL_STAGES", "LEGACY_STAGES", "interrupt_payload", "from_hitl", "decision_type", "HITL_ACTION",
           "HITL_DECISIONS"]


class ApprovalRequest(BaseModel):
    """The payload of the ``human_approval`` interrupt (``interrupt(request.model_dump(mode="json"))``)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["refund_approval"] = "refund_approval"
    task_id: str
    thread_id: str
    customer_id: str
    refund_id: str
    transaction_id: str
    amount_minor: int = Field(description="refund amount in minor units of ``currency``")
    currency: str = Field(description="ISO 4217 code")
    amount: str = Field(description="display form, e.g. '£23.80'")
    reason: str
    evidence_refs: tuple[str, ...] = ()
    risk_flags: tuple[str, ...] = ()
    requested_at: str = Field(description="ISO-8601 UTC time the approval was requested")
    approvals_required: int = Field(default=1, ge=1, le=2,
                                    description="distinct approvers needed (policies.risk: 2 for the higher tier)")
    approvals: tuple[str, ...] = Field(default=(), description="refs of the approvers who approved so far")
    deadline: str | None = Field(default=None, description="ISO-8601 UTC time after which the request may be "
                                                            "expired (Settings.approval_deadline_h after requested_at)")


#: Longest approver's note (characters; the former schema limit).
MAX_NOTE_CHARS = 2000


class ApprovalDecision(BaseModel):
    """What a resume supplies: ``{"decision": "approve" | "reject" | "cancel" | "expire", "note": …}``.

    ``decision_id`` makes a decision idempotent: replaying the same decision (after a crash, or LangGraph re-running
    the node) decides once; a different decision on a decided task is refused. When absent, the graph derives one
    from the task, the position of the resume and its content (``nodes.approval_flow.decision_key``).
    ``approver`` is deprecated and never trusted: the decider is the run's principal; a value that names anyone else
    is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    decision: Literal["approve", "reject", "cancel", "expire"]
    approver: str | None = Field(default=None, max_length=100,
                                 description="deprecated: must name the resuming principal if given")
    note: str = Field(default="", description="the decider's reason: internal (decision record, events, pending/"
                      "history for operators), never shown to the customer; text as a message (graph.contracts.inputs."
                      "check_message), at most MAX_NOTE_CHARS characters")
    decision_id: str | None = Field(default=None, min_length=1, max_length=100)

    @field_validator("approver")
    @classmethod
    def _not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("approver must not be blank")
        return v.strip() if v is not None else None

    @field_validator("note", mode="before")
    @classmethod
    def _note_is_text(cls, v: object) -> object:
        """The note passes the message checks (InputError, one line: control character, invalid UTF-8, too long)."""
        check_message(v, "the note")
        if isinstance(v, str) and len(v) > MAX_NOTE_CHARS:
            raise InputError(f"the note is {len(v)} characters; the limit is {MAX_NOTE_CHARS}")
        return v

    def with_id(self) -> ApprovalDecision:
        """This decision with a fresh random ``decision_id`` when it has none (``dc_<12 hex>``)."""
        return self if self.decision_id else self.model_copy(update={"decision_id": f"dc_{uuid.uuid4().hex[:12]}"})


def parse_decision(value: object) -> ApprovalDecision:
    """Validate a resume value: an ApprovalDecision, its dict, or LangChain's human-in-the-loop response
    ``{"decisions": [{"type": "approve"} | {"type": "reject", "message": …}]}`` (:func:`from_hitl`). Raises
    InputError with a one-line reason."""
    if isinstance(value, ApprovalDecision):
        return value
    if isinstance(value, Mapping) and "decisions" in value:
        value = from_hitl(value)
    try:
        return ApprovalDecision.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "decision"
        raise InputError(f"malformed decision: {where}: {first.get('msg')}") from None


#: Where a thread's refund approval request is (``PendingApproval.stage``), set by ``nodes.approval_flow``:
#: ``risk`` (requested, the risk rules run next), ``awaiting_approval`` (the thread is paused at the ``human_approval``
#: interrupt until a
#: decision), ``approved`` (the payment runs next), and the final stages: ``executed`` (paid), ``rejected``,
#: ``cancelled``, ``expired``, ``closed`` (a decision or the refund's record ended it unpaid), ``already_decided``
#: (a decision taken elsewhere first).
ApprovalStage = Literal["risk", "awaiting_approval", "approved", "executed", "rejected", "cancelled", "expired",
                        "closed", "already_decided"]
#: Every value of :data:`ApprovalStage`, in the order a request goes through them.
STAGES: tuple[str, ...] = ApprovalStage.__args__  # type: ignore[attr-defined]
#: The stages a refund request ends in.
FINAL_STAGES = frozenset({"executed", "rejected", "cancelled", "expired", "closed", "already_decided"})
#: Stage names stored by earlier versions -> today's name (a thread checkpointed then still loads and resumes).
LEGACY_STAGES: dict[str, str] = {"awaiting": "awaiting_approval"}


class PendingApproval(BaseModel):
    """The thread's refund approval request as kept in graph state (key ``pending_approval``), from the refund's
    request to its end: kept after the decision, its :attr:`stage` says where it is.

    Written by the refunds agent (``stage="risk"``) and the approval flow (``nodes.approval_flow``); a new stage is a
    new value (:meth:`evolve`), never a change in place. Validated from the plain dicts earlier versions stored, so old
    threads load (``graph.contracts.state``'s channels validate every value they read or receive)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    stage: ApprovalStage
    task_id: str = ""
    refund_id: str = ""
    transaction_id: str | None = None
    handoff_id: str | None = Field(default=None, description="the handoff that brought the request (the payment's "
                                   "idempotency key includes it)")
    amount: str | None = Field(default=None, description="display form, e.g. '£23.80'")
    amount_minor: int | None = Field(default=None, description="amount in minor units of ``currency``")
    currency: str | None = Field(default=None, description="ISO 4217 code")
    risk: dict[str, Any] | None = Field(default=None, description="``{outcome, reasons}`` of policies.risk")
    risk_flags: tuple[str, ...] = ()
    request: ApprovalRequest | None = Field(default=None, description="the interrupt's payload, once it waits")
    decision: dict[str, Any] | None = Field(default=None, description="the business store's decision record "
                                            "(``Decision.to_dict()``), once decided")
    result: dict[str, Any] | None = Field(default=None, description="the payment's result, once paid")

    @field_validator("stage", mode="before")
    @classmethod
    def _today_name(cls, v: object) -> object:
        """A stage stored under an earlier name (:data:`LEGACY_STAGES`) reads as today's."""
        return LEGACY_STAGES.get(v, v) if isinstance(v, str) else v

    def evolve(self, **changes: Any) -> PendingApproval:
        """A copy with ``changes`` applied and validated again (a stage outside :data:`ApprovalStage` raises
        ``pydantic.ValidationError``)."""
        return PendingApproval.model_validate({**dict(self), **changes})

    @property
    def waiting(self) -> bool:
        """Does the request wait for a human decision now?"""
        return self.stage == "awaiting_approval"

    @property
    def final(self) -> bool:
        """Has the request ended (:data:`FINAL_STAGES`)?"""
        return self.stage in FINAL_STAGES


# ---------------------------------------------------------------- LangChain's human-in-the-loop shape
# LangChain 1.x (``langchain.agents.middleware.human_in_the_loop``) standardised the interrupt a human decides on: a
# ``HITLRequest`` {"action_requests": [{"name", "args", "description"}], "review_configs": [{"action_name",
# "allowed_decisions"}]}, answered with a ``HITLResponse`` {"decisions": [{"type": "approve"} | {"type": "reject",
# "message"} | {"type": "edit", …} | {"type": "respond", …}]}. UIs built for LangGraph servers render and answer it.

#: The action a refund approval asks a human about (``action_requests[0].name``).
HITL_ACTION = "refund"
#: The decisions a refund approval offers in that shape: no ``edit`` (an approver decides the refund the business
#: store holds, never a changed one) and no ``respond`` (nothing answers on the refund's behalf).
HITL_DECISIONS: tuple[str, ...] = ("approve", "reject")
#: The customer-facing arguments of the refund action, as ``ApprovalRequest`` names them.
HITL_ARGS: tuple[str, ...] = ("refund_id", "transaction_id", "amount", "amount_minor", "currency", "reason")


def _describe(request: Mapping[str, Any], approvals: Sequence[str]) -> str:
    required = int(request.get("approvals_required") or 1)
    flags = "; ".join(str(f) for f in request.get("risk_flags") or ()) or "none"
    waits = f"{required} approver(s) required, {len(approvals)} so far"
    by = f"; decide by {request['deadline']}" if request.get("deadline") else ""
    return (f"Refund {request.get('amount')} for {request.get('transaction_id')} ({request.get('refund_id')}) to "
            f"customer {request.get('customer_id')}. Risk: {flags}. {waits}{by}. Approve pays it; reject pays nothing "
            "(your message is an internal note, never shown to the customer).")


def interrupt_payload(request: ApprovalRequest | Mapping[str, Any] | None,
                      approvals: Sequence[str]) -> dict[str, Any]:
    """What ``human_approval`` pauses with: the :class:`ApprovalRequest` fields (``request``, its JSON form; a
    mapping is taken as that form already; None as no fields) with ``approvals`` (refs of the approvers so far), and,
    in the same dict, LangChain's ``HITLRequest`` keys: ``action_requests`` (one action :data:`HITL_ACTION` whose
    ``args`` are :data:`HITL_ARGS` and whose ``description`` says the risk, the approvers required and the deadline)
    and ``review_configs`` (allowed decisions :data:`HITL_DECISIONS`)."""
    if isinstance(request, ApprovalRequest):
        request = request.model_dump(mode="json")
    request = request if request is not None else {}
    args = {k: request.get(k) for k in HITL_ARGS if request.get(k) is not None}
    return {**request, "approvals": list(approvals),
            "action_requests": [{"name": HITL_ACTION, "args": args, "description": _describe(request, approvals)}],
            "review_configs": [{"action_name": HITL_ACTION, "allowed_decisions": list(HITL_DECISIONS)}]}


def from_hitl(value: Mapping[str, Any]) -> dict[str, Any]:
    """Translate a ``HITLResponse`` into this module's decision dict: ``{"decisions": [{"type": "approve"}]}`` ->
    ``{"decision": "approve"}``; ``{"decisions": [{"type": "reject", "message": m}]}`` -> ``{"decision": "reject",
    "note": m}`` (the message is the decision's internal note, checked as :class:`ApprovalDecision` checks a note).
    Who decides is the run's principal, as for every decision.

    Raises:
        InputError (one line): other keys beside ``decisions``, not exactly one decision (the refund is one action),
            a decision that is not a mapping, a type this request does not offer (``edit``, ``respond``, anything
            else), or keys a decision of that type does not have.
    """
    extra = sorted(str(k) for k in value if k != "decisions")
    if extra:
        raise InputError(f"malformed decision: a human-in-the-loop response holds only decisions, not {', '.join(extra)}")
    decisions = value.get("decisions")
    if not isinstance(decisions, (list, tuple)) or len(decisions) != 1:
        n = len(decisions) if isinstance(decisions, (list, tuple)) else type(decisions).__name__
        raise InputError(f"malformed decision: decisions: one decision expected (one refund action), got {n}")
    d = decisions[0]
    if not isinstance(d, Mapping):
        raise InputError(f"malformed decision: decisions.0: a mapping expected, not {type(d).__name__}")
    kind = d.get("type")
    if kind not in HITL_DECISIONS:
        raise InputError(f"malformed decision: decisions.0.type: {kind!r} is not offered for a refund approval; "
                         f"allowed: {', '.join(HITL_DECISIONS)}")
    allowed = {"type"} | ({"message"} if kind == "reject" else set())
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise InputError(f"malformed decision: decisions.0: {kind} takes no {', '.join(unknown)}")
    out: dict[str, Any] = {"decision": kind}
    if d.get("message") is not None:
        out["note"] = d["message"]
    return out


def decision_type(value: object) -> str | None:
    """The decision a resume value names (``approve``, ``reject``, …) in either shape, without validating it (for
    describing and counting); None when it names none."""
    if isinstance(value, ApprovalDecision):
        return value.decision
    if not isinstance(value, Mapping):
        return None
    if "decisions" in value:
        ds = value.get("decisions")
        first = ds[0] if isinstance(ds, (list, tuple)) and ds else None
        kind = first.get("type") if isinstance(first, Mapping) else None
        return str(kind) if kind is not None else None
    kind = value.get("decision")
    return str(kind) if kind is not None else None
