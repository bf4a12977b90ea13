"""A thin convenience layer over the compiled graph for scripts and the CLI.

Nothing here is needed to drive the graph (LangGraph's ``invoke``/``stream``/``get_state`` are enough);
it only packages a turn's outcome as a typed :class:`TurnResult`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.types import Command

from graph.builder import build_graph
from graph.context import RunContext
from graph.errors import InputError
from graph.settings import Settings
from graph.state import ensure_ids

__all__ = ["TurnResult", "Conversation", "MAX_MESSAGE_CHARS"]

#: Longest user message accepted (characters); longer input is refused before anything is stored.
MAX_MESSAGE_CHARS = 4000


@dataclass(frozen=True)
class TurnResult:
    """The outcome of one turn.

    Attributes:
        thread_id: the conversation.
        turn: 1-based turn number.
        text: the answer shown to the user ("" while an interrupt is pending).
        agent: the agent that produced ``text`` (or holds control while paused).
        status: answered | clarify | fallback | awaiting_approval.
        handoff_path: this turn's hops as dicts ``{hop, turn, from_agent, to_agent, kind, reason, handoff_id}``,
            the entry hop (``kind="entry"``) first; experts the supervisor consulted appear with
            ``kind="agent_as_tool"`` (control did not move to them).
        pending: the interrupt payload when the run paused (e.g. an ApprovalRequest dict), else None.
        answer: the typed ``graph.agent_as_tool.SupervisorAnswer`` when the supervisor answered, else None.
    """

    thread_id: str
    turn: int
    text: str
    agent: str | None
    status: str
    handoff_path: list[dict] = field(default_factory=list)
    pending: Any = None
    answer: Any = None

    @property
    def path_str(self) -> str:
        """``"entry → triage → billing → refunds"`` for this turn; experts consulted as tools are listed apart:
        ``"entry → triage → supervisor (consulted: billing, refunds)"``."""
        hops = [h for h in self.handoff_path if h.get("kind") != "agent_as_tool"]
        if not hops:
            return ""
        names = [hops[0]["from_agent"]] + [h["to_agent"] for h in hops]
        consulted = [h["to_agent"] for h in self.handoff_path if h.get("kind") == "agent_as_tool"]
        return " → ".join(names) + (f" (consulted: {', '.join(consulted)})" if consulted else "")


class Conversation:
    """One thread of the support desk.

    Example::

        conv = Conversation("t-42", db=".switchboard/switchboard.db")
        r = conv.send("I was charged twice for my coffee")
        print(r.agent, r.text, r.path_str)

    Args:
        thread_id: the thread (new random id when None).
        graph: a compiled graph; default ``build_graph`` with a SQLite checkpointer at ``db``
            (``settings.db`` when ``db`` is None; ``"memory"`` for an in-memory saver).
        context: the run context (identity); default ``RunContext()`` (the demo customer).
    """

    def __init__(self, thread_id: str | None = None, *, graph: Any = None, context: RunContext | None = None,
                 db: str | Path | None = None, settings: Settings | None = None, model: Any = None):
        self.thread_id = thread_id or f"thread_{uuid.uuid4().hex[:10]}"
        if graph is None:
            from checkpoints import open_checkpointer

            settings = settings or Settings.from_env()
            graph = build_graph(model=model, checkpointer=open_checkpointer(db or settings.db), settings=settings)
        self.graph = graph
        self.context = context or RunContext()

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
        if self.pending() is not None:
            raise InputError(f"thread {self.thread_id} is waiting for an approval decision; resume it first")
        msg = ensure_ids([HumanMessage(content=text.strip())])
        self.graph.invoke({"messages": msg}, self.config, context=self.context)
        return self.result()

    def resume(self, decision: Any) -> TurnResult:
        """Resume a paused thread with ``decision`` (the interrupt's answer). Raises InputError when nothing is pending."""
        if self.pending() is None:
            raise InputError(f"thread {self.thread_id} has nothing pending")
        self.graph.invoke(Command(resume=decision), self.config, context=self.context)
        return self.result()

    def result(self) -> TurnResult:
        """The last turn's :class:`TurnResult` read from the checkpoint."""
        values = self.state
        turn = int(values.get("turn") or 0)
        path = [h for h in values.get("handoff_path") or [] if h.get("turn") == turn]
        pending = self.pending()
        outcome = values.get("outcome") or {}
        if pending is not None:
            return TurnResult(self.thread_id, turn, "", values.get("active_agent"), "awaiting_approval", path, pending)
        answer = None
        if outcome.get("answer"):
            from graph.agent_as_tool import SupervisorAnswer

            answer = SupervisorAnswer.model_validate(outcome["answer"])
        return TurnResult(self.thread_id, turn, outcome.get("text", ""), outcome.get("agent"),
                          outcome.get("status", "answered"), path, None, answer)
