"""The typed values of the desk's graph state (``graph.contracts.state.SupportState``) and their readers.

``TaskState``, ``Owner`` and ``Outcome`` are the models of the keys ``task``, ``owner`` and ``outcome``; the handoff
packet, handoff path and refund approval request are ``graph.contracts.packet.HandoffPacket``,
``graph.contracts.packet.HandoffRecord`` and
``graph.contracts.approval.PendingApproval``. The readers (:func:`packet_of`, :func:`path_of`, :func:`pending_of`,
:func:`task_of`, :func:`owner_record`, :func:`outcome_of`) return a key as its model from any mapping of state values:
a snapshot of the graph (models), a checkpoint read without the graph, or a served engine's JSON (dicts), including the
plain dicts earlier versions stored. This module imports no LangGraph, so listings that read checkpoints without the
graph (``checkpoints.threads``) and the policies use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from graph.contracts.approval import ApprovalRequest, PendingApproval
from graph.contracts.packet import Constraints, Fact, HandoffPacket, HandoffRecord

__all__ = ["TaskState", "Owner", "Outcome", "TurnStatus", "as_model", "packet_of", "packet_to", "path_of",
           "pending_of", "task_of", "owner_record", "outcome_of", "STATE_MODELS", "MSGPACK_ALLOWLIST"]


class TaskState(BaseModel):
    """The thread's task as kept in graph state (the business store holds the versioned record)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    task_id: str = ""
    status: str = Field(default="open", description="open|awaiting_approval|completed|cancelled|fallback (a person "
                        "takes over): the business store's task statuses")
    current_owner: str = Field(default="", description="the agent that owns the task")
    owner_version: int = Field(default=0, description="+1 on every change of owner")


class Owner(BaseModel):
    """Who a thread belongs to: written once, by the entry node of its first accepted turn."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    customer_id: str
    tenant_id: str = ""


#: How a turn ended (``Outcome.status``, ``graph.contracts.results.TurnResult.status``): an agent answered; clarify asked what
#: the customer needs; fallback handed the request to a person; the run paused for a human approval; the request is
#: not one the desk serves.
TurnStatus = Literal["answered", "clarify", "fallback", "awaiting_approval", "out_of_scope"]


class Outcome(BaseModel):
    """What the last turn produced."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    agent: str | None = Field(default=None, description="the agent that answered")
    text: str = ""
    status: TurnStatus = "answered"
    turn: int = 0
    answer: dict[str, Any] | None = Field(default=None, description="the typed SupervisorAnswer (graph.contracts.agent_as_tool, "
                                          "as JSON) when the supervisor answered")
    approvals: tuple[str, ...] | None = Field(default=None, description="the approvals recorded when a message on a "
                                              "paused thread was answered (nodes.paused_dialogue); None otherwise")


M = TypeVar("M", bound=BaseModel)


def as_model(model: type[M], value: object) -> M | None:
    """``value`` as a ``model``: an instance as it is, a mapping validated (the plain dicts earlier versions stored,
    or a served engine's JSON), None or an empty mapping as None. Raises ``pydantic.ValidationError`` for a mapping
    that is not a valid ``model``."""
    if value is None or isinstance(value, model):
        return value
    if isinstance(value, Mapping) and not value:
        return None
    return model.model_validate(value)


def packet_of(values: Mapping[str, Any] | None) -> HandoffPacket | None:
    """The current handoff packet of state ``values`` (key ``handoff``), or None."""
    return as_model(HandoffPacket, (values or {}).get("handoff"))


def packet_to(values: Mapping[str, Any] | None, agent: str) -> HandoffPacket | None:
    """The current handoff packet of state ``values`` when it was handed to ``agent``, else None."""
    packet = packet_of(values)
    return packet if packet is not None and packet.to_agent == agent else None


def path_of(values: Mapping[str, Any] | None) -> list[HandoffRecord]:
    """The handoff path of state ``values`` (key ``handoff_path``), as records."""
    items = (values or {}).get("handoff_path") or []
    if isinstance(items, list) and all(isinstance(x, HandoffRecord) for x in items):
        return items
    return [HandoffRecord.model_validate(x) for x in items]


def pending_of(values: Mapping[str, Any] | None) -> PendingApproval | None:
    """The refund approval request of state ``values`` (key ``pending_approval``), or None."""
    return as_model(PendingApproval, (values or {}).get("pending_approval"))


def task_of(values: Mapping[str, Any] | None) -> TaskState | None:
    """The task of state ``values`` (key ``task``), or None."""
    return as_model(TaskState, (values or {}).get("task"))


def owner_record(values: Mapping[str, Any] | None) -> Owner | None:
    """Who the thread of state ``values`` belongs to (key ``owner``), or None."""
    return as_model(Owner, (values or {}).get("owner"))


def outcome_of(values: Mapping[str, Any] | None) -> Outcome | None:
    """What the last turn of state ``values`` produced (key ``outcome``), or None."""
    return as_model(Outcome, (values or {}).get("outcome"))


#: Every model the graph state holds, nested ones included: what a checkpoint may store besides plain data and
#: LangChain messages.
STATE_MODELS: tuple[type[BaseModel], ...] = (HandoffPacket, Fact, Constraints, HandoffRecord, PendingApproval,
                                             ApprovalRequest, TaskState, Owner, Outcome)
#: ``(module, class)`` of :data:`STATE_MODELS`: the types LangGraph's msgpack serializer may rebuild from a checkpoint
#: besides its own safe types (``JsonPlusSerializer(allowed_msgpack_modules=…)``, ``checkpoints.factory``).
MSGPACK_ALLOWLIST: tuple[tuple[str, str], ...] = tuple((m.__module__, m.__name__) for m in STATE_MODELS)
