"""Authorization decisions (control-flow rule 4): taken from the run context, never from model-written arguments."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["AuthzDecision", "authorize_tool", "authorize_approval"]


@dataclass(frozen=True)
class AuthzDecision:
    """``allowed`` and a one-line ``reason`` (shown to the model in the refusing ToolMessage)."""

    allowed: bool
    reason: str = ""


def authorize_tool(tool: str, side_effect: bool, roles: Collection[str], user_id: str | None) -> AuthzDecision:
    """May the caller run ``tool``?  Read-only tools need an identified user; side effects additionally need the
    ``customer`` role (acting on one's own records; the store scopes every record by ``user_id``)."""
    if not user_id:
        return AuthzDecision(False, f"{tool} needs an identified customer")
    if side_effect and "customer" not in roles:
        return AuthzDecision(False, f"{tool} changes records and needs the customer role")
    return AuthzDecision(True)


def authorize_approval(roles: Collection[str], approver: str | None) -> AuthzDecision:
    """May this caller decide a pending approval?  Needs a named approver with the ``approver`` role."""
    if not approver or not approver.strip():
        return AuthzDecision(False, "an approver name is required")
    if "approver" not in roles:
        return AuthzDecision(False, "the approver role is required to decide an approval")
    return AuthzDecision(True)
