"""Finishing what a crashed process left on a thread (``switchboard recover``, ``Conversation.recover``).

Two things can be left behind (``graph.cut_turns.cut_short``):

* a thread paused at ``human_approval`` while the business store already holds a decision for its task that the
  graph has not taken (the deciding process died after claiming it): it is resumed with that same decision (same
  ``decision_id``, so the claim and the payment replay idempotently), as the caller;
* a turn stopped between nodes without an interrupt (killed mid-run), or stored but never entered (killed before its
  entry node, the first turn of a thread included): it is continued from the last checkpoint **with the rights of the
  thread's owner** (:meth:`ThreadRecovery.recorded_owner`), so an interrupted refund request is still made. Recovery
  adds no input: it finishes the owner's own turn.

The caller — the owner, or an enabled operator of the owner's tenant (``policies.authz.authorize_resume``) — is
recorded as who triggered it: a ``recovered`` event and an audit row. The owner's next message finishes a cut turn the
same way on every way in (``graph.cut_turns.DeskGraph``); this module is the operator's explicit command.
"""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.types import Command

from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied, InputError
from graph.cut_turns import cut_short, interrupt_value

__all__ = ["ThreadRecovery"]


class ThreadRecovery:
    """Recovery of one thread: ``graph`` (the compiled desk graph), ``store`` (the business store), ``events`` (the
    event log, or None), ``thread_id``, and ``context`` (the caller's run context)."""

    def __init__(self, graph: Any, store: Any, events: Any, thread_id: str, context: RunContext):
        self.graph, self.store, self.events, self.thread_id, self.context = graph, store, events, thread_id, context
        self.config = {"configurable": {"thread_id": thread_id}}

    def _deny(self, reason: str) -> AccessDenied:
        from nodes.run_gate import record_refusal

        try:
            who = self.context.principal().ref
        except ValueError:
            who = "unknown"
        record_refusal(self.store, self.events, self.thread_id, who, "recover", reason)
        return AccessDenied(reason)

    def recorded_owner(self, values: dict) -> tuple[str, str] | None:
        """``(customer_id, tenant_id)`` of the customer who started this thread, as recorded server-side: the
        business store's ``thread_owners`` row (written before the thread's first run), else the write-once ``owner``
        the entry node put in the state ``values``; None when neither exists. Never taken from a message, a packet or
        a model's arguments.

        Raises AccessDenied (recorded) when the two records name different customers."""
        from policies.authz import owner_of

        row = self.store.thread_owner(self.thread_id)
        stored = (row.customer_id, row.tenant_id) if row is not None else None
        in_state = owner_of(values)
        if stored is not None and in_state is not None and stored != in_state:
            raise self._deny(f"thread {self.thread_id}: its recorded owner customer:{stored[0]} does not match its "
                             f"checkpoint's customer:{in_state[0]}")
        return stored or in_state

    def cut_turn(self) -> str | None:
        """Where the thread's last turn was cut short: ``"unentered"`` or ``"between_nodes"``
        (``graph.cut_turns.cut_short``); None when the thread is unknown, finished, paused for approval or refused."""
        snap = self.graph.get_state(self.config)
        return None if not snap.values or interrupt_value(snap) is not None else cut_short(snap)

    def run(self) -> bool:
        """Finish what was left (module doc); True when something was run, False when there was nothing to do (a
        finished thread, or one cleanly waiting for a person).

        Raises:
            InputError: unknown thread.
            AccessDenied: the caller may not recover this thread, or its owner records disagree (recorded).
        """
        snap = self.graph.get_state(self.config)
        if not snap.values:
            raise InputError(f"unknown thread {self.thread_id!r}")
        request = interrupt_value(snap)
        if request is not None:
            if not isinstance(request, dict) or not request.get("task_id"):
                return False
            d = self._unconsumed_decision(request)
            if d is None:
                return False  # cleanly pending: waits for a person
            self.graph.invoke(Command(resume={"decision": d.decision, "note": d.note, "decision_id": d.id}),
                              self.config, context=self.context)
            return True
        where = cut_short(snap)
        return where is not None and self._continue_as_owner(snap, where)

    def _continue_as_owner(self, snap: Any, where: str) -> bool:
        """Continue the stopped turn in ``snap`` (``invoke(None)``) as the thread's owner, after checking that the
        caller may recover it; False when the thread has no recorded owner (nothing of a customer's to continue: a
        thread driven through the bare graph API that was killed before its entry node)."""
        from nodes.principal import operator_facts
        from policies.authz import authorize_resume

        owner = self.recorded_owner(dict(snap.values or {}))
        if owner is None:
            return False
        try:
            principal = self.context.principal()
        except ValueError as exc:
            raise self._deny(str(exc)) from None
        facts = operator_facts(self.store, principal.id) if principal.kind == "operator" else None
        verdict = authorize_resume(principal, owner, facts)
        if not verdict.allowed:
            raise self._deny(f"not authorized: {verdict.reason}")
        as_owner = RunContext.for_customer(owner[0], owner[1], locale=self.context.locale)
        self._record(principal.ref, owner, where, list(snap.next), as_owner.request_id)
        self.graph.invoke(None, self.config, context=as_owner)
        return True

    def _record(self, trigger: str, owner: tuple[str, str], where: str, next_nodes: list[str],
                request_id: str) -> None:
        """Who triggered a recovery, on whose behalf: a ``recovered`` event on this thread (``detail``: triggered_by,
        continued_as, where, next, request_id) and an audit row (actor = the trigger). Best effort, like refusals."""
        detail = {"triggered_by": trigger, "continued_as": f"customer:{owner[0]}", "tenant_id": owner[1],
                  "where": where, "next": next_nodes, "request_id": request_id}
        if self.events is not None:
            try:
                from checkpoints.event_log import event_key, now_iso

                self.events.record("recovered", key=event_key("recovery", self.thread_id, uuid.uuid4().hex),
                                   ts=now_iso(), thread_id=self.thread_id, reason=f"recovered by {trigger}",
                                   detail=detail)
            except Exception:  # noqa: BLE001 - the recovery must not fail on its record
                pass
        try:
            self.store.record_audit(trigger, "recover", target=f"thread:{self.thread_id}", detail=detail)
        except Exception:  # noqa: BLE001 - as above
            pass

    def _unconsumed_decision(self, request: dict) -> Any:
        """The first decision claimed in the business store for the paused task that the graph has not taken yet (a
        final one, or an approval by someone not among ``request["approvals"]``), or None."""
        taken = set(request.get("approvals") or ())
        for d in self.store.list_decisions(request["task_id"]):
            if d.id.startswith("auto:"):
                continue
            if d.final or d.approver not in taken:
                return d
        return None
