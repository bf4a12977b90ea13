"""Process bodies for the business store's two-process races (tests/checkpoints/test_store.py). Kept apart from the test
module so that a spawned child imports only the store, not pytest."""

from __future__ import annotations

from typing import Any

from checkpoints.business import BusinessRuleError, BusinessStore


def execute_refund(url: str, refund_id: str, key: str, start: Any, out: Any) -> None:
    """Open the store, wait for ``start``, execute the refund; put "executed", "replayed" or "refused: …"."""
    store = BusinessStore(url)
    start.wait()
    try:
        out.put("replayed" if store.execute_refund(refund_id, key)["replayed"] else "executed")
    except BusinessRuleError as exc:
        out.put(f"refused: {exc}")


def decide_approval(url: str, decision_id: str, approver: str, decision: str, start: Any, out: Any) -> None:
    """Open the store, wait for ``start``, decide task ``task-p`` (refund rf_5001); put ``(decision id, won)``."""
    store = BusinessStore(url)
    start.wait()
    d, won = store.decide_approval("task-p", decision_id, approver, decision, refund_id="rf_5001")
    out.put((d.id, won))
