"""Typed data of the human-approval flow: what the interrupt carries and what a resume must supply."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from graph.errors import InputError

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


class ApprovalDecision(BaseModel):
    """What a resume supplies. ``decision_id`` makes a decision idempotent: replaying the same decision (after a
    crash, or LangGraph re-running the node) decides once; a different decision on a decided task is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    decision: Literal["approve", "reject", "cancel"]
    approver: str = Field(min_length=1, max_length=100, description="who decided (a person, or 'customer' for cancel)")
    note: str = Field(default="", max_length=2000)
    decision_id: str = Field(default_factory=lambda: f"dc_{uuid.uuid4().hex[:12]}")

    @field_validator("approver")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("approver must not be blank")
        return v.strip()


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
