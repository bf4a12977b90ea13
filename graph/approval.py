"""Typed data of the human-approval flow: what the interrupt carries and what a resume must supply.

Who decides is never part of the decision: the graph records the principal of the run that resumed it
(``nodes.principal.resolve_principal``), and ``ApprovalDecision.approver`` is only accepted when it names that same
principal (a deprecated field kept for old callers).
"""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from graph.errors import InputError
from graph.inputs import check_message

__all__ = ["ApprovalRequest", "ApprovalDecision", "parse_decision"]


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
                      "history for operators), never shown to the customer; text as a message (graph.inputs."
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
    """Validate a resume value (dict or ApprovalDecision). Raises InputError with a one-line reason."""
    if isinstance(value, ApprovalDecision):
        return value
    try:
        return ApprovalDecision.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "decision"
        raise InputError(f"malformed decision: {where}: {first.get('msg')}") from None
