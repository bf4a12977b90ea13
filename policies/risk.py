"""Deterministic refund risk rules (issue 4): auto-approve, ask a human, or reject.

The numbers are the demo bank's house rules (documented here, the single place to change them):
refunds up to ``AUTO_APPROVE_LIMIT_MINOR`` are paid without a human; larger ones, a customer with
``RECENT_REFUNDS_FOR_REVIEW`` or more refunds in the last ``RECENT_WINDOW_DAYS`` days, or an unverified
identity go to a human; above ``REJECT_ABOVE_MINOR`` or with the ``refunds_blocked`` flag they are rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["AUTO_APPROVE_LIMIT_MINOR", "REJECT_ABOVE_MINOR", "RECENT_WINDOW_DAYS", "RECENT_REFUNDS_FOR_REVIEW",
           "RiskInput", "RiskDecision", "assess_refund"]

#: Auto-approval limit in minor units of the refund's currency (20.00).
AUTO_APPROVE_LIMIT_MINOR = 2000
#: Above this (1,000.00) a refund is never paid through the chat desk.
REJECT_ABOVE_MINOR = 100_000
#: Look-back window for the refund-frequency rule, days.
RECENT_WINDOW_DAYS = 30
#: Prior refunds within the window that send a new one to a human.
RECENT_REFUNDS_FOR_REVIEW = 2


@dataclass(frozen=True)
class RiskInput:
    """What the rules look at: ``amount_minor`` (int, minor units), ``currency`` (ISO 4217),
    ``recent_refunds`` (other refunds of the customer in the window), ``flags`` (customer flags)."""

    amount_minor: int
    currency: str
    recent_refunds: int
    flags: Mapping[str, Any]


@dataclass(frozen=True)
class RiskDecision:
    """``outcome`` and the rules that fired (``reasons``), which become the ApprovalRequest's risk flags."""

    outcome: Literal["auto_approve", "human_approval", "reject"]
    reasons: tuple[str, ...]


def assess_refund(r: RiskInput) -> RiskDecision:
    """Apply the house rules in order: reject rules first, then review rules, else auto-approve."""
    if r.amount_minor <= 0:
        return RiskDecision("reject", ("non-positive amount",))
    if r.flags.get("refunds_blocked"):
        return RiskDecision("reject", ("refunds are blocked on this account",))
    if r.amount_minor > REJECT_ABOVE_MINOR:
        return RiskDecision("reject", (f"amount above {REJECT_ABOVE_MINOR / 100:.2f} {r.currency}",))
    reasons = []
    if r.amount_minor > AUTO_APPROVE_LIMIT_MINOR:
        reasons.append(f"amount above the {AUTO_APPROVE_LIMIT_MINOR / 100:.2f} {r.currency} auto-approval limit")
    if r.recent_refunds >= RECENT_REFUNDS_FOR_REVIEW:
        reasons.append(f"{r.recent_refunds} refunds in the last {RECENT_WINDOW_DAYS} days")
    if r.flags.get("identity_verified") is False:
        reasons.append("identity not verified")
    if r.flags.get("fraud_watch"):
        reasons.append("account on fraud watch")
    if reasons:
        return RiskDecision("human_approval", tuple(reasons))
    return RiskDecision("auto_approve", ("within auto-approval rules",))
