"""A thin convenience layer over the compiled graph for scripts and the CLI.

Nothing here is needed to drive the graph (LangGraph's ``invoke``/``stream``/``get_state`` are enough);
it only packages a turn's outcome as a typed :class:`TurnResult`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from graph.builder import Desk, build_desk
from graph.context import RunContext
from graph.errors import InputError
from graph.results import TurnResult
from graph.settings import Settings, home_dir
from graph.state import ensure_ids

__all__ = ["TurnResult", "Conversation", "MAX_MESSAGE_CHARS"]  # TurnResult re-exported from graph.results

#: Seconds a turn waits for another turn on the same thread to finish before giving up.
LOCK_WAIT_S = 120.0
#: Longest user message accepted (characters); longer input is refused before anything is stored.
MAX_MESSAGE_CHARS = 4000


class Conversation:
    """One thread of the support desk.

    Example::

        conv = Conversation("t-42", db=".switchboard/switchboard.db")
        r = conv.send("I was charged twice for my coffee")
        print(r.agent, r.text, r.path_str)

    Args:
        thread_id: the thread (new random id when None).
        desk: a compiled graph with its dependencies (``graph.builder.build_desk``); default: built here with a
            SQLite checkpointer at ``db`` (``settings.db`` when ``db`` is None; ``"memory"`` for an in-memory saver).
        graph: a plain compiled graph instead of ``desk`` (then ``store`` is the business store that records
            approval claims; default: the one at ``settings.business_db``).
        context: the run context (identity); default ``RunContext()`` (the demo customer).
        on_event: called with each new event dict (``{"event": kind, "agent": …, …}``, see ``graph.events``) while a
            turn runs, for live display (``switchboard chat --stream``); None = plain ``invoke``.
    """

    def __init__(self, thread_id: str | None = None, *, desk: Desk | None = None, graph: Any = None,
                 store: Any = None, context: RunContext | None = None, db: str | Path | None = None,
                 settings: Settings | None = None, model: Any = None, on_event: Callable[[dict], None] | None = None):
        self.thread_id = thread_id or f"thread_{uuid.uuid4().hex[:10]}"
        if desk is None and graph is None:
            from checkpoints import open_checkpointer

            settings = settings or Settings()
            desk = build_desk(model=model, checkpointer=open_checkpointer(db or settings.db), settings=settings)
        if desk is not None:
            graph, store = desk.graph, store if store is not None else desk.deps.store
        elif store is None:
            from checkpoints.business import open_store

            store = open_store((settings or Settings()).business_db)
        self.graph = graph
        self.store = store
        self.context = context or RunContext()
        self.on_event = on_event

    @contextmanager
    def _thread_lock(self, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
        """Serialise turns on this thread across processes (an exclusive file lock on
        ``$SWITCHBOARD_HOME/locks/<thread>.lock``, via ``filelock``): two concurrent turns on one thread would otherwise
        both start from the same checkpoint and one of them would be lost. Raises InputError after ``wait_s`` seconds
        or when the lock file cannot be created."""
        folder = home_dir() / "locks"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the thread lock in {folder}: {exc.strerror or exc}") from None
        lock = FileLock(str(folder / (hashlib.sha256(self.thread_id.encode()).hexdigest()[:32] + ".lock")))
        try:
            lock.acquire(timeout=wait_s, poll_interval=0.05)
        except Timeout:
            raise InputError(f"thread {self.thread_id} is busy with another turn; try again") from None
        except OSError as exc:
            raise InputError(f"cannot create the thread lock in {folder}: {exc.strerror or exc}") from None
        try:
            yield
        finally:
            lock.release()

    def _check_identity(self) -> None:
        """A thread belongs to the customer who started it; the customer must exist in the run context's tenant."""
        stored = self.state.get("identity") or {}
        if stored and "approver" not in self.context.roles and (
                stored.get("user_id"), stored.get("tenant_id")) != (self.context.user_id, self.context.tenant_id):
            raise InputError(f"thread {self.thread_id} belongs to another customer")
        if self.store.get_customer(self.context.user_id, self.context.tenant_id) is None:
            raise InputError(f"unknown customer {self.context.user_id!r} in tenant {self.context.tenant_id!r}")

    def _run(self, graph_input: Any) -> None:
        """Run the graph on ``graph_input``; with ``on_event``, stream and forward the custom (event) chunks."""
        if self.on_event is None:
            self.graph.invoke(graph_input, self.config, context=self.context)
            return
        for chunk in self.graph.stream(graph_input, self.config, context=self.context, stream_mode="custom"):
            if isinstance(chunk, dict) and "event" in chunk:
                self.on_event(chunk)

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
        snap = self.graph.get_state(self.config)
        for task in snap.tasks or ():
            for intr in task.interrupts or ():
                return intr.value
        return None

    def send(self, text: str) -> TurnResult:
        """Run one user turn. Raises InputError (nothing stored) on empty/over-long text or while an approval is pending."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("the message is empty")
        if len(text) > MAX_MESSAGE_CHARS:
            raise InputError(f"the message is {len(text)} characters; the limit is {MAX_MESSAGE_CHARS}")
        if "\x00" in text:
            raise InputError("the message contains a NUL character")
        with self._thread_lock():
            self._check_identity()
            if self.pending() is not None:
                from policies.approval import is_cancellation

                if is_cancellation(text):  # the customer withdraws the request while it waits for a human
                    return self._resume({"decision": "cancel", "approver": "customer", "note": text.strip()})
                raise InputError(f"thread {self.thread_id} is waiting for an approval decision; "
                                 "say 'cancel my refund' to withdraw it, or wait for the decision")
            msg = ensure_ids([HumanMessage(content=text.strip())])
            self._run({"messages": msg})
            return self.result()

    def resume(self, decision: Any) -> TurnResult:
        """Resume a paused approval with ``decision`` (an ApprovalDecision or its dict).

        The decision is validated and authorized first, then claimed at most once in the business store
        (``decide_approval``), and only then is the graph resumed; a losing or invalid resume changes nothing.

        Raises:
            InputError: unknown thread, nothing pending, malformed decision, not authorized, or
                "already decided" (another resume won, or the task was cancelled).
        """
        with self._thread_lock():
            return self._resume(decision)

    def _resume(self, decision: Any) -> TurnResult:
        from graph.approval import parse_decision
        from policies.authz import authorize_approval

        if not self.state:
            raise InputError(f"unknown thread {self.thread_id!r}")
        request = self.pending()
        if request is None:
            earlier = (self.state.get("pending_approval") or {}).get("decision")
            if earlier:
                raise InputError(f"already decided: {earlier.get('decision')} by {earlier.get('approver')} "
                                 f"at {earlier.get('decided_at')}; thread {self.thread_id} has nothing pending")
            raise InputError(f"thread {self.thread_id} has nothing pending")
        d = parse_decision(decision)
        if d.decision == "cancel":
            if "approver" not in self.context.roles and not (
                    "customer" in self.context.roles and isinstance(request, dict)
                    and self.context.user_id == request.get("customer_id")):
                raise InputError("only the customer who asked for the refund or an approver may cancel it")
        else:
            verdict = authorize_approval(self.context.roles, d.approver)
            if not verdict.allowed:
                raise InputError(f"not authorized: {verdict.reason}")
        if isinstance(request, dict) and request.get("task_id"):
            earlier, won = self.store.decide_approval(request["task_id"], d.decision_id, d.approver, d.decision, d.note,
                                                 refund_id=request.get("refund_id"))
            if not won:
                raise InputError(f"already decided: {earlier.decision} by {earlier.approver} at {earlier.decided_at}")
        self._run(Command(resume=d.model_dump()))
        return self.result()

    def recover(self) -> TurnResult | None:
        """Finish work a crashed process left behind on this thread; returns the turn's result, or None when
        there was nothing to do.

        * paused at ``human_approval`` while the business store already holds a decision for its task (the
          deciding process died after claiming it): resume with that same decision (same ``decision_id``,
          so the claim and the payment replay idempotently);
        * stopped between nodes without an interrupt (killed mid-run): continue from the last checkpoint.
        """
        with self._thread_lock():
            return self._recover()

    def _recover(self) -> TurnResult | None:
        snap = self.graph.get_state(self.config)
        if not snap.values:
            raise InputError(f"unknown thread {self.thread_id!r}")
        request = self.pending()
        if request is not None:
            if not isinstance(request, dict) or not request.get("task_id"):
                return None
            decisions = self.store.list_decisions(request["task_id"])
            human = [d for d in decisions if not d.id.startswith("auto:")]
            if not human:
                return None  # cleanly pending: waits for a person
            d = human[0]
            self.graph.invoke(Command(resume={"decision": d.decision, "approver": d.approver, "note": d.note,
                                              "decision_id": d.id}), self.config, context=self.context)
            return self.result()
        outcome = snap.values.get("outcome") or {}
        finished = not snap.next and outcome and outcome.get("turn") == snap.values.get("turn")
        if not finished:  # stopped between nodes, or before the first node ran: continue from the checkpoint
            self.graph.invoke(None, self.config, context=self.context)
            return self.result()
        return None

    def result(self) -> TurnResult:
        """The last turn's :class:`graph.results.TurnResult` read from the checkpoint."""
        return TurnResult.from_state(self.thread_id, self.state, self.pending())
