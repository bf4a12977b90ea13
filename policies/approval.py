"""Approval-flow rules: which tool results need a risk check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RISK_CHECKED_TOOLS", "needs_risk_check"]

#: Tools whose successful result starts the risk -> approval -> execution path (money leaves the bank).
RISK_CHECKED_TOOLS = frozenset({"request_refund"})


def needs_risk_check(tool: str, result: Mapping[str, Any], already_assessed: set[str]) -> str | None:
    """The refund id to assess when ``tool`` just created or replayed a requested refund that has not been
    assessed in this task, else None."""
    if tool not in RISK_CHECKED_TOOLS or not result.get("ok", True):
        return None
    nested = result.get("refund")
    refund: Mapping[str, Any] = nested if isinstance(nested, Mapping) else result
    rid = refund.get("refund_id") or refund.get("id")
    status = refund.get("status")
    if not rid or status not in (None, "requested") or rid in already_assessed:
        return None
    return str(rid)
