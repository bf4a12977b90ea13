"""Typed results at the public boundary: what one turn produced (:class:`TurnResult`) and a failed model call
(:class:`ModelFailure`). Contract module: imports only other contracts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from graph.contracts.agent_as_tool import ExpertCall, SupervisorAnswer
from graph.contracts.approval import ApprovalRequest
from graph.contracts.packet import HandoffRecord
from graph.contracts.state import Outcome, TurnStatus, outcome_of, path_of

__all__ = ["TurnStatus", "ModelFailureKind", "ModelFailure", "TurnResult", "waiting_clause", "waiting_text"]

#: Classes of model-call failures (``nodes.models.describe_model_error``).
ModelFailureKind = Literal["connection", "timeout", "auth", "not_found", "rate_limit", "server", "bad_request", "other"]


class ModelFailure(BaseModel):
    """A model call that failed after the client's retries (stored in state as ``model_error``, a plain dict).

    Attributes:
        kind: the failure class (:data:`ModelFailureKind`).
        message: one line for the operator (no newlines, at most ~240 characters), e.g. ``"cannot reach the model
            server at http://127.0.0.1:8000 (connection refused); check OPENAI_BASE_URL and that the server is
            running"``.
        status: the HTTP status when the server answered, else None.
        error_type: the exception's class name (e.g. ``APIConnectionError``).
        turn / agent: where it happened (0 / None before it is attached to a turn).
    """

    model_config = ConfigDict(frozen=True)
    kind: ModelFailureKind
    message: str
    status: int | None = None
    error_type: str = ""
    turn: int = 0
    agent: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields."""
        return self.model_dump(mode="json")


def waiting_clause(what: str, *, still: bool = False, requested: str = "") -> str:
    """The one sentence that tells a customer their refund waits for a decision: ``"Your <what> is [still] waiting
    for approval by our team[ (requested <requested>)]; nothing has been paid yet."`` (``what``: "refund rf_… of
    £23.80 for tx_…", from the refund's record). Every answer about a paused refund (the turn that pauses, the paused
    dialogue) starts with it; never how an operator decides (that is for operators: ``pending``, the events, the
    CLI's stderr)."""
    when = f" (requested {requested})" if requested else ""
    return f"Your {what} is {'still ' if still else ''}waiting for approval by our team{when}; nothing has been paid yet."


def waiting_text(request: ApprovalRequest) -> str:
    """What the customer is told by the turn that pauses for an approval: :func:`waiting_clause` and that the answer
    comes in this conversation."""
    return (waiting_clause(f"refund {request.refund_id} of {request.amount} for {request.transaction_id}")
            + " You'll get the answer in this conversation once it is decided.")


@dataclass(frozen=True)
class TurnResult:
    """The outcome of one turn (``graph.conversation.Conversation.send`` / ``resume`` / ``result``).

    Attributes:
        thread_id: the conversation.
        turn: 1-based turn number.
        text: the answer shown to the user ("" while an interrupt is pending).
        agent: the agent that produced ``text`` (or holds control while paused).
        status: :data:`TurnStatus`.
        handoff_path: this turn's hops in order, the entry hop (``kind="entry"``) first; handoffs only — experts
            called as tools are in ``expert_calls`` (control did not move to them).
        expert_calls: the experts the supervisor called as tools this turn (agent as tool), plan order.
        pending: the approval the run waits for, when it paused; else None.
        model_error: the model call of this turn that failed after the client's retries (the turn then ended in
            fallback), else None.
        answer: the supervisor's typed answer when the supervisor answered, else None.
    """

    thread_id: str
    turn: int
    text: str
    agent: str | None
    status: TurnStatus
    handoff_path: tuple[HandoffRecord, ...] = ()
    expert_calls: tuple[ExpertCall, ...] = ()
    pending: ApprovalRequest | None = None
    model_error: ModelFailure | None = None
    answer: SupervisorAnswer | None = field(default=None)

    @property
    def path_str(self) -> str:
        """``"entry → triage → billing → refunds"`` for this turn; experts called as tools are listed apart:
        ``"entry → triage → supervisor (experts: billing, refunds)"``."""
        if not self.handoff_path:
            return ""
        names = [self.handoff_path[0].from_agent] + [h.to_agent for h in self.handoff_path]
        experts = [c.expert for c in self.expert_calls]
        return " → ".join(names) + (f" (experts: {', '.join(experts)})" if experts else "")

    @classmethod
    def from_state(cls, thread_id: str, values: Mapping[str, Any], pending: Any = None) -> TurnResult:
        """Build the result of the last turn from the thread's state ``values`` and its pending interrupt payload
        (``pending``: an ApprovalRequest dict, or None). Raises pydantic.ValidationError on a malformed state."""
        turn = int(values.get("turn") or 0)
        path = tuple(h for h in path_of(values) if h.turn == turn)
        calls = tuple(ExpertCall.model_validate(c) for c in values.get("expert_calls") or [] if c.get("turn") == turn)
        outcome = outcome_of(values) or Outcome()
        if pending is not None:
            request = pending if isinstance(pending, ApprovalRequest) else ApprovalRequest.model_validate(pending)
            # a message answered while the thread waits (nodes.paused_dialogue) has its own text and answering agent
            # (while no approval arrived since: after one, the pause's own text says where it stands)
            answered = outcome.turn == turn and outcome.text and tuple(outcome.approvals or ()) == request.approvals
            return cls(thread_id, turn, outcome.text if answered else waiting_text(request),
                       outcome.agent if answered else values.get("active_agent"), "awaiting_approval", path,
                       calls, request)
        error = values.get("model_error")
        failure = ModelFailure.model_validate(error) if isinstance(error, dict) and error.get("turn") == turn else None
        answer = SupervisorAnswer.model_validate(outcome.answer) if outcome.answer else None
        return cls(thread_id, turn, outcome.text, outcome.agent, outcome.status,
                   path, calls, None, model_error=failure, answer=answer)
