"""Business-store set-ups for tests and benchmarks: a refund approved the way the approval flow approves one, so
``BusinessStore.execute_refund`` (which pays only on recorded decisions) can be exercised without the graph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["approve_refund", "paid_refunds", "thread_config", "denied_events"]


def approve_refund(store: Any, refund_id: str, approvers: Sequence[str] = ("operator:ann",), *,
                   task_id: str | None = None, thread_id: str = "") -> Any:
    """Decide ``refund_id`` as approved by ``approvers`` (principal refs, distinct; one or two) on a task of its own
    (``task_id``, default ``task-<refund_id>``, of ``thread_id``): the task is created, its approval rule recorded
    (``len(approvers)`` approvers), parked for approval and approved, exactly as ``risk`` and ``human_approval`` do.
    Returns the task. Raises what the store raises (e.g. ``BusinessRuleError`` for an approver named twice)."""
    task = store.create_task(task_id or f"task-{refund_id}", thread_id, "refunds", refund_id=refund_id)
    store.record_approval_rule(task.id, len(approvers))
    task = store.get_task(task.id)
    if task.status == "open":
        store.update_task(task.id, task.version, status="awaiting_approval")
    for i, who in enumerate(approvers):
        store.decide_approval(task.id, f"dc-{task.id}-{i}", who, "approve", refund_id=refund_id,
                              required_approvals=len(approvers))
    return store.get_task(task.id)


def paid_refunds(store: Any, customer: str = "c_ada") -> list[Any]:
    """The refunds of ``customer`` the business store records as paid (``executed``), newest first."""
    return [r for r in store.list_refunds(customer) if r.status == "executed"]


def thread_config(thread: str) -> dict[str, Any]:
    """The LangGraph config of thread ``thread``."""
    return {"configurable": {"thread_id": thread}}


def denied_events(desk: Any, thread: str) -> list[Any]:
    """The ``access_denied`` events of ``thread`` in ``desk``'s event log."""
    return desk.deps.events.events(thread, kinds=["access_denied"])
