"""Agent as tool: the typed contracts of supervisor mode (DESIGN.md, "The two relations between agents").

A handoff moves control and carries a :class:`graph.contracts.packet.HandoffPacket`; an expert called *as a tool*
receives an :class:`ExpertTask`, returns an :class:`ExpertResult` to the supervisor and never holds control.
The supervisor answers once with a :class:`SupervisorAnswer`, whichever experts ran.

Stored in graph state as plain JSON dicts (``model_dump(mode="json")``), like the packet.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from graph.contracts.packet import Fact

__all__ = ["ExpertTask", "ExpertFact", "ProposedAction", "ExpertResult", "SupervisorPlan", "SupervisorAnswer",
           "ExpertCall", "MergedFact", "Conflict", "Gap", "AnswerPart"]


@dataclass(frozen=True)
class MergedFact:
    """One fact of the merged answer: ``key``, ``value``, the strongest ``source`` that vouches for it, the
    ``experts`` that reported it (plan order) and the ``subject`` it is about (a transaction id or None)."""

    key: str
    value: str
    source: str
    experts: tuple[str, ...]
    subject: str | None = None


@dataclass(frozen=True)
class Conflict:
    """Two or more values for one key (and subject).

    Attributes:
        key / subject: what disagrees (``subject`` None for a source conflict over the whole request).
        values: ``(expert, value, source)`` for every value reported.
        resolved_to: the value kept, or None when the conflict is unresolved (nothing asserted).
        rule: the rule applied, e.g. ``"system_verified over user_said"`` or ``"must agree: unresolved"``.
        question: for an unresolved conflict, the question put to the customer ("" otherwise).
    """

    key: str
    subject: str | None
    values: tuple[tuple[str, str, str], ...]
    resolved_to: str | None
    rule: str
    question: str = ""


@dataclass(frozen=True)
class Gap:
    """What could not be checked: the ``expert``, its sub-task ``objective``, ``status`` (failed | timeout |
    missing) and a one-line ``reason``."""

    expert: str
    objective: str
    status: str
    reason: str


@dataclass(frozen=True)
class AnswerPart:
    """One sub-task of the plan and what came of it (``answer`` None unless ``status == "ok"``)."""

    task_id: str
    expert: str
    objective: str
    status: str
    answer: str | None = None


class ExpertTask(BaseModel):
    """One sub-task the supervisor gives an expert (the argument of the expert's "as tool" form)."""

    model_config = ConfigDict(frozen=True)
    task_id: str = Field(description="the id of the supervisor's expert_<expert> tool call; the result answers it")
    plan_id: str = Field(description="the fan-out this sub-task belongs to")
    expert: str = Field(description="the specialist called (billing, refunds, …)")
    objective: str = Field(description="the sub-task in the customer's words")
    request: str = Field(default="", description="the customer's whole message, for context")
    known_facts: tuple[Fact, ...] = Field(default=(), description="facts the supervisor already has, with their source")
    turn: int = 0


class ExpertFact(Fact):
    """A fact an expert found: ``key``, ``value``, ``source`` (user_said | system_verified | model_written) and ``via``, the
    business tool that verified it (None for what the user said)."""

    via: str | None = None


class ProposedAction(BaseModel):
    """A side effect an expert would take (experts never change business state; the supervisor reports it)."""

    model_config = ConfigDict(frozen=True)
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    expert: str | None = None


class ExpertResult(BaseModel):
    """What an expert called as a tool returns to the supervisor (never shown to the user as such)."""

    model_config = ConfigDict(frozen=True)
    task_id: str
    plan_id: str
    expert: str
    objective: str
    status: Literal["ok", "failed", "timeout"]
    answer: str | None = Field(default=None, description="the proposed answer to the sub-task (status ok)")
    facts: tuple[ExpertFact, ...] = ()
    evidence_refs: tuple[str, ...] = Field(default=(), description="ids of records backing the facts (tx_…, rf_…)")
    open_questions: tuple[str, ...] = ()
    proposed_actions: tuple[ProposedAction, ...] = ()
    tools_called: tuple[str, ...] = ()
    error: str | None = Field(default=None, description="why the expert failed or timed out (one line)")
    model_calls: int = 0
    elapsed_ms: float = 0.0


class SupervisorPlan(BaseModel):
    """The supervisor's fan-out of one turn, kept in state under ``supervisor_plan``.

    ``status``: ``requested`` (a multi-handoff message asked for these experts; the supervisor has not run
    yet), ``running`` (sub-tasks sent to the experts), ``merged`` (the answer is out).
    """

    model_config = ConfigDict(frozen=True)
    plan_id: str = Field(default_factory=lambda: f"p_{uuid.uuid4().hex[:12]}")
    turn: int
    status: Literal["requested", "running", "merged"]
    source: Literal["model", "multi_handoff"] = "model"
    tasks: tuple[ExpertTask, ...] = ()


class ExpertCall(BaseModel):
    """One call of an expert as a tool (agent as tool), kept in state under ``expert_calls`` — apart from the
    ``handoff_path``, because control never moved to the expert.

    Attributes:
        turn: the turn of the call; plan_id: the supervisor's fan-out; call_id: the supervisor's ``expert_<agent>``
        tool call id (the ExpertTask's ``task_id``); expert: the agent called; objective: its sub-task.
    """

    model_config = ConfigDict(frozen=True)
    turn: int
    plan_id: str
    call_id: str
    expert: str
    objective: str = ""


class SupervisorAnswer(BaseModel):
    """The one typed final output of supervisor mode (also in ``state["outcome"]["answer"]``).

    ``status``: ``complete`` (every expert answered; also when the supervisor answered without experts) or
    ``partial`` (some sub-tasks could not be checked: see ``gaps``; the ``text`` says so).
    """

    model_config = ConfigDict(frozen=True)
    plan_id: str | None = None
    text: str
    status: Literal["complete", "partial"]
    parts: tuple[AnswerPart, ...] = ()
    facts: tuple[MergedFact, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    gaps: tuple[Gap, ...] = ()
    open_questions: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    proposed_actions: tuple[ProposedAction, ...] = ()

    @property
    def experts(self) -> tuple[str, ...]:
        """The experts called, in plan order."""
        return tuple(p.expert for p in self.parts)
