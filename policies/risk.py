"""Deterministic refund risk rules: auto-approve, ask a human, or reject.

The numbers are the demo bank's house rules (documented here, the single place to change them):
refunds up to ``AUTO_APPROVE_LIMIT_MINOR`` are paid without a human; larger ones, a customer with
``RECENT_REFUNDS_FOR_REVIEW`` or more refunds in the last ``RECENT_WINDOW_DAYS`` days, an unverified
identity, or a transaction whose earlier refund a person rejected (``REJECTED_BEFORE``: a rejection is not undone by
asking again) go to a human; above ``REJECT_ABOVE_MINOR`` or with the
``refunds_blocked`` flag they are rejected.

Tiers of human approval (four eyes, README "Identity and authorization"): a refund that goes to a human needs one
registered approver; it needs **two distinct approvers** when it is above ``TWO_APPROVERS_ABOVE_MINOR`` or when a
flag in ``TWO_APPROVER_FLAGS`` fired (the customer's identity is not verified, the account is on fraud watch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["RiskRules", "DEFAULT_RISK_RULES",
           "AUTO_APPROVE_LIMIT_MINOR", "REJECT_ABOVE_MINOR", "RECENT_WINDOW_DAYS", "RECENT_REFUNDS_FOR_REVIEW",
           "TWO_APPROVERS_ABOVE_MINOR", "IDENTITY_NOT_VERIFIED", "FRAUD_WATCH", "TWO_APPROVER_FLAGS", "RiskInput",
           "RiskDecision", "assess_refund", "REJECTED_BEFORE"]

#: Auto-approval limit in minor units of the refund's currency (20.00).
AUTO_APPROVE_LIMIT_MINOR = 2000
#: Above this (1,000.00) a refund is never paid through the chat desk.
REJECT_ABOVE_MINOR = 100_000
#: Look-back window for the refund-frequency rule, days.
RECENT_WINDOW_DAYS = 30
#: Prior refunds within the window that send a new one to a human.
RECENT_REFUNDS_FOR_REVIEW = 2
#: Above this (500.00) a human approval needs two distinct approvers.
TWO_APPROVERS_ABOVE_MINOR = 50_000
#: Reasons (as written in ``RiskDecision.reasons``) that raise a human approval to two distinct approvers.
IDENTITY_NOT_VERIFIED = "identity not verified"
FRAUD_WATCH = "account on fraud watch"
TWO_APPROVER_FLAGS = frozenset({IDENTITY_NOT_VERIFIED, FRAUD_WATCH})
#: The flag of a refund for a transaction whose earlier refund was rejected after review: never automatic.
REJECTED_BEFORE = "an earlier refund of this transaction was rejected after review"


@dataclass(frozen=True)
class RiskRules:
    """The numbers of the house rules, overridable as one value (``policies.policy_set.PolicySet.risk``; the
    defaults are the constants above). Amounts in minor units of the refund's currency.

    Attributes:
        auto_approve_limit_minor: refunds up to this amount are paid without a human (other rules permitting).
        reject_above_minor: above this a refund is never paid through the chat desk.
        recent_refunds_for_review: prior refunds in the window that send a new one to a human.
        two_approvers_above_minor: above this a human approval needs two distinct approvers.
    """

    auto_approve_limit_minor: int = AUTO_APPROVE_LIMIT_MINOR
    reject_above_minor: int = REJECT_ABOVE_MINOR
    recent_refunds_for_review: int = RECENT_REFUNDS_FOR_REVIEW
    two_approvers_above_minor: int = TWO_APPROVERS_ABOVE_MINOR


#: Today's house rules.
DEFAULT_RISK_RULES = RiskRules()


@dataclass(frozen=True)
class RiskInput:
    """What the rules look at: ``amount_minor`` (int, minor units), ``currency`` (ISO 4217),
    ``recent_refunds`` (other refunds of the customer in the window), ``flags`` (customer flags),
    ``rejected_before`` (earlier refunds of the same transaction a person rejected; default 0)."""

    amount_minor: int
    currency: str
    recent_refunds: int
    flags: Mapping[str, Any]
    rejected_before: int = 0


@dataclass(frozen=True)
class RiskDecision:
    """``outcome`` and the rules that fired (``reasons``), which become the ApprovalRequest's risk flags;
    ``approvals_required``: distinct approvers a ``human_approval`` needs (1, or 2 for the higher tier; 0 otherwise)."""

    outcome: Literal["auto_approve", "human_approval", "reject"]
    reasons: tuple[str, ...]
    approvals_required: int = 0


def assess_refund(r: RiskInput, rules: RiskRules = DEFAULT_RISK_RULES) -> RiskDecision:
    """Apply the house rules (``rules``; default today's) in order: reject rules first, then review rules (with the
    approval tier), else auto-approve."""
    if r.amount_minor <= 0:
        return RiskDecision("reject", ("non-positive amount",))
    if r.flags.get("refunds_blocked"):
        return RiskDecision("reject", ("refunds are blocked on this account",))
    if r.amount_minor > rules.reject_above_minor:
        return RiskDecision("reject", (f"amount above {rules.reject_above_minor / 100:.2f} {r.currency}",))
    reasons = []
    if r.amount_minor > rules.auto_approve_limit_minor:
        reasons.append(f"amount above the {rules.auto_approve_limit_minor / 100:.2f} {r.currency} auto-approval limit")
    if r.recent_refunds >= rules.recent_refunds_for_review:
        reasons.append(f"{r.recent_refunds} refunds in the last {RECENT_WINDOW_DAYS} days")
    if r.flags.get("identity_verified") is False:
        reasons.append(IDENTITY_NOT_VERIFIED)
    if r.flags.get("fraud_watch"):
        reasons.append(FRAUD_WATCH)
    if r.rejected_before > 0:
        reasons.append(REJECTED_BEFORE)
    if reasons:
        above = r.amount_minor > rules.two_approvers_above_minor
        two = above or bool(TWO_APPROVER_FLAGS & set(reasons))
        if above:
            reasons.append(f"amount above {rules.two_approvers_above_minor / 100:.2f} {r.currency}: two approvers")
        return RiskDecision("human_approval", tuple(reasons), approvals_required=2 if two else 1)
    return RiskDecision("auto_approve", ("within auto-approval rules",))
