"""A thin convenience layer over the compiled graph for scripts and the CLI.

Nothing here is needed to drive the graph (LangGraph's ``invoke``/``stream``/``get_state`` are enough);
it only packages a turn's outcome as a typed :class:`TurnResult`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.types import Command

from checkpoints import open_checkpointer
from checkpoints.business import open_store
from checkpoints.business.faults import require_business_store
from checkpoints.locks import thread_lock
from graph.builder import Desk, build_desk
from graph.contracts.approval import parse_decision
from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied, InputError
from graph.contracts.inputs import MAX_MESSAGE_CHARS, check_text, check_thread_id
from graph.contracts.results import TurnResult
from graph.contracts.settings import Settings
from graph.contracts.state import ensure_ids
from graph.contracts.state_values import pending_of
from graph.contracts.views import view_for
from graph.cut_turns import interrupt_value as _interrupt_value
from graph.recovery import ThreadRecovery
from nodes.principal import operator_facts
from nodes.run_gate import record_refusal
from policies.authz import NOT_YOURS, authorize_resume, owner_of

__all__ = ["TurnResult", "Conversation", "MAX_MESSAGE_CHARS"]  # TurnResult re-exported from graph.contracts.results

#: Seconds a turn waits for another turn on the same thread to finish before giving up.
LOCK_WAIT_S = 120.0


class Conversation:
    """One thread of the support desk.

    Example::

        conv = Conversation("t-42", db=".switchboard/switchboard.db")
        r = conv.send("I was charged twice for my coffee")
        print(r.agent, r.text, r.path_str)

    Args:
        thread_id: the thread (new random id when None; else 1-128 characters of ``A-Z a-z 0-9 . _ : -``, see
            ``graph.contracts.inputs``; an empty or malformed id raises InputError).
        desk: a compiled graph with its dependencies (``graph.builder.build_desk``); default: built here with a
            SQLite checkpointer at ``db`` (``settings.db`` when ``db`` is None; ``"memory"`` for an in-memory saver).
        graph: a plain compiled graph instead of ``desk`` (then ``store`` is the business store that records
            approval claims; default: the one at ``settings.business_db``).
        context: the run context: who acts (README "Identity and authorization"). A customer
            (``RunContext(user_id=…, tenant_id=…)``; default ``RunContext()``, the demo customer) sends turns on their
            own threads and may cancel their own pending refund once they confirmed it (``policies.cancellation``); an
            operator (``RunContext.for_operator(name, tenant)``) resumes paused threads with decisions other than
            cancel (the approver is always this principal, never a name in the decision) and recovers them.
        on_event: called with each new event dict (``{"event": kind, "agent": …, …}``, see ``graph.contracts.events``) while a
            turn runs, for live display (``switchboard chat --stream``); None = plain ``invoke``.
    """

    def __init__(self, thread_id: str | None = None, *, desk: Desk | None = None, graph: Any = None,
                 store: Any = None, context: RunContext | None = None, db: str | Path | None = None,
                 settings: Settings | None = None, model: Any = None, on_event: Callable[[dict], None] | None = None):
        self.thread_id = check_thread_id(thread_id) if thread_id is not None else f"thread_{uuid.uuid4().hex[:10]}"
        if desk is None and graph is None:
            settings = settings or Settings.from_env(db=db)
            desk = build_desk(model=model, checkpointer=open_checkpointer(db or settings.db), settings=settings)
        events = None
        self._router = desk.deps.router if desk is not None else None
        if desk is not None:
            graph, store = desk.graph, store if store is not None else desk.deps.store
            settings, events = settings or desk.deps.settings, desk.deps.events
        elif store is None:
            s = settings or Settings()
            require_business_store(s.business_db, s.db)
            store = open_store(s.business_db)
        self.graph = graph
        self.store = store
        self.settings = settings or Settings()
        self.events = events if events is not None else _event_log_of(graph)
        self.context = context or RunContext()
        self.on_event = on_event

    @contextmanager
    def _thread_lock(self, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
        """Serialise turns on this thread across processes (``checkpoints.locks.thread_lock``: an advisory lock on
        PostgreSQL, else a file lock): two concurrent turns on one thread would otherwise both start from the same
        checkpoint and one of them would be lost. Raises InputError after ``wait_s`` seconds."""
        with thread_lock(str(self.settings.db), self.thread_id, wait_s):
            yield

    def _deny(self, action: str, reason: str, task_id: str | None = None) -> AccessDenied:
        """Record a refusal (an ``access_denied`` event on this thread and an audit row, best effort:
        ``nodes.run_gate.record_refusal``) and return the error to raise."""
        try:
            who = self.context.principal().ref
        except ValueError:
            who = "unknown"
        record_refusal(self.store, self.events, self.thread_id, who, action, reason, task_id=task_id)
        return AccessDenied(reason)

    def _recovery(self) -> Any:
        return ThreadRecovery(self.graph, self.store, self.events, self.thread_id, self.context)

    def recorded_owner(self, values: dict | None = None) -> tuple[str, str] | None:
        """The thread's owner as recorded server-side (``graph.recovery.ThreadRecovery.recorded_owner``)."""
        return self._recovery().recorded_owner(self.state if values is None else values)

    def _run(self, graph_input: Any) -> TurnResult:
        """Run the graph on ``graph_input`` and return the turn's result; with ``on_event``, stream and forward the
        custom (event) chunks. Without it, the result is built from what ``invoke`` returns (the final state values
        and ``__interrupt__``), so the state is not read again after the run."""
        if self.on_event is None:
            out = self.graph.invoke(graph_input, self.config, context=self.context)
            if isinstance(out, dict):
                interrupts = out.get("__interrupt__") or ()
                values = {k: v for k, v in out.items() if k != "__interrupt__"}
                return TurnResult.from_state(self.thread_id, values, interrupts[0].value if interrupts else None)
            return self.result()
        for chunk in self.graph.stream(graph_input, self.config, context=self.context, stream_mode="custom"):
            if isinstance(chunk, dict) and "event" in chunk:
                self.on_event(chunk)
        return self.result()

    def _snapshot(self) -> tuple[dict, Any]:
        """``(state values, pending interrupt payload or None)`` of the thread, from one ``get_state``."""
        snap = self.graph.get_state(self.config)
        return dict(snap.values or {}), _interrupt_value(snap)

    @property
    def config(self) -> dict:
        """The LangGraph config of this thread."""
        return {"configurable": {"thread_id": self.thread_id}}

    @property
    def state(self) -> dict:
        """The thread's current state values (empty dict for a new thread)."""
        return dict(self.graph.get_state(self.config).values or {})

    def pending(self) -> Any:
        """The pending interrupt's payload, or None."""
        return _interrupt_value(self.graph.get_state(self.config))

    def view(self) -> dict:
        """The thread's state as this conversation's principal may read it (``graph.contracts.views.view_for``): an operator
        the whole state, a customer the customer's view (``graph.contracts.views.customer_view``: their messages and the desk's
        answers, the turn, the last outcome, the waiting request while one waits, the outcome of the last refund
        request) — what the served engines give the same principal's token. Who may read is who may act on the
        thread (``policies.authz.authorize_resume``: its owner, or a registered operator of its tenant). Raises
        AccessDenied (recorded) for anyone else, InputError for an unknown thread."""
        values = self.state
        if not values:
            raise InputError(f"unknown thread {self.thread_id!r}")
        try:
            principal = self.context.principal()
        except ValueError as exc:
            raise self._deny("read", str(exc)) from None
        operator = operator_facts(self.store, principal.id) if principal.kind == "operator" else None
        verdict = authorize_resume(principal, owner_of(values), operator)
        if not verdict.allowed:
            raise self._deny("read", verdict.reason.replace("the thread is", f"thread {self.thread_id} is"))
        return view_for(principal.kind, values)

    def send(self, text: str) -> TurnResult:
        """Run one user turn: the graph answers, on a thread paused for an approval too (``nodes.paused_dialogue``:
        cancel with a confirmation, status questions, a lost card frozen at once, …), exactly as it answers any other
        caller. Raises InputError (nothing stored) on a ``text`` that is not a ``str`` (bytes are named as bytes,
        valid UTF-8 or not: ``graph.contracts.inputs.not_text``), empty/over-long text, control characters other than newline
        and tab, or invalid UTF-8 (``graph.contracts.inputs.check_message``); AccessDenied (recorded, thread unchanged) when this
        conversation's principal may not send a turn on the thread (``graph.cut_turns.DeskGraph``)."""
        check_text(text)  # not text, empty, too long, control characters, invalid UTF-8: refused before anything is stored
        with self._thread_lock():
            return self._run({"messages": ensure_ids([HumanMessage(content=text.strip())])})

    def resume(self, decision: Any) -> TurnResult:
        """Resume a paused approval with ``decision`` (an ApprovalDecision or its dict: ``{"decision": "approve" |
        "reject" | "cancel" | "expire", "note": …}``; or LangChain's human-in-the-loop answer ``{"decisions":
        [{"type": "approve"} | {"type": "reject", "message": …}]}``, ``graph.contracts.approval.from_hitl``).

        The decider is this conversation's principal (``context``), never a name in ``decision`` (a deprecated
        ``approver`` field must name the same principal). The decision is validated and authorized first
        (``policies.authz``: a registered approver of the tenant who is not the refund's customer, a second
        *different* approver for the higher risk tier, never a cancel; the customer may only cancel, and only while
        the desk's question "Cancel refund …? yes/no" is open or just answered yes), then claimed at most once in
        the business store (``decide_approval``), and only then is the graph resumed; a losing or refused resume
        changes nothing but the record of the refusal. The first of two required approvals is recorded and the
        thread stays paused (``TurnResult.pending.approvals`` lists who approved).

        Raises:
            InputError: unknown thread, nothing pending, malformed decision, or "already decided" (another resume
                won, or the task was cancelled).
            AccessDenied: the principal may not take this decision (recorded as ``access_denied``).
        """
        with self._thread_lock():
            return self._resume(decision)

    def _customer_owns_thread(self) -> None:
        """A customer's resume (a cancel) on a thread that is not theirs, or that does not exist, is refused before
        anything about the thread is said, with the same line for both (``policies.authz.NOT_YOURS``); a refusal on an
        existing thread is recorded. Operators are checked later (``_authorize_decision``)."""
        try:
            principal = self.context.principal()
        except ValueError:
            return  # refused with its reason by _authorize_decision
        if principal.kind != "customer" or owner_of(self.state) == (principal.id, principal.tenant_id):
            return
        reason = NOT_YOURS.replace("the thread is", f"thread {self.thread_id} is")
        if not self.state:
            raise InputError(reason)
        raise self._deny("resume", reason)

    def _decided(self, decision: Any, approver: Any) -> str:
        """``"reject by operator:ann"`` for an operator; a customer reads the decision without who took it (internal:
        the decision record, ``graph.contracts.views``), unless it was their own."""
        try:
            principal = self.context.principal()
        except ValueError:
            principal = None
        if principal is not None and principal.kind == "customer" and approver != principal.ref:
            return str(decision)
        return f"{decision} by {approver}"

    def _resume(self, decision: Any) -> TurnResult:
        self._customer_owns_thread()
        values, request = self._snapshot()
        if not values:
            raise InputError(f"unknown thread {self.thread_id!r}")
        if request is None:
            pa = pending_of(values)
            earlier = pa.decision if pa is not None else None
            if earlier:
                raise InputError(f"already decided: {self._decided(earlier.get('decision'), earlier.get('approver'))} "
                                 f"at {earlier.get('decided_at')}; thread {self.thread_id} has nothing pending")
            raise InputError(f"thread {self.thread_id} has nothing pending")
        # who may take it, and whether it was taken already, is the graph's to decide (nodes.run_gate.check_resume,
        # then human_approval, which claims it once in the business store): the same on every way in
        d = parse_decision(decision).with_id()
        return self._run(Command(resume=d.model_dump(exclude_none=True)))

    def recover(self) -> TurnResult | None:
        """Finish work a crashed process left behind on this thread, as this conversation's principal
        (``graph.recovery``: a decision claimed but not taken is resumed; a cut turn is continued with the owner's
        rights); the turn's result, or None when there was nothing to do.

        Raises:
            InputError: unknown thread.
            AccessDenied: the caller may not recover this thread, or its owner records disagree (recorded).
        """
        with self._thread_lock():
            return self.result() if self._recovery().run() else None

    def cut_turn(self) -> str | None:
        """Where this thread's last turn was cut short (``"unentered"`` / ``"between_nodes"``), which :meth:`recover`
        and the owner's next :meth:`send` finish; None when unknown, finished, paused for approval or refused."""
        return self._recovery().cut_turn()

    def result(self) -> TurnResult:
        """The last turn's :class:`graph.contracts.results.TurnResult` read from the checkpoint."""
        return TurnResult.from_state(self.thread_id, self.state, self.pending())


def _event_log_of(graph: Any) -> Any:
    """The event log a compiled graph records to (its ``EventRecorder`` callback), or None."""
    for cb in ((getattr(graph, "config", None) or {}).get("callbacks") or []):
        recorder = getattr(cb, "recorder", None)
        if recorder is not None and getattr(recorder, "log", None) is not None:
            return recorder.log
    return None
