"""Agent as tool: which expert expert calls the supervisor may run, and what an expert may do.

Two relations between agents are kept apart everywhere (DESIGN.md): a *handoff* moves control
(``transfer_to_<agent>``); *agent as tool* keeps control with the caller — the supervisor calls
``expert_<agent>`` and gets the expert's typed result back.  This module decides, over plain data:

* :func:`plan_expert_calls` — which ``expert_*`` calls of one supervisor message become sub-tasks;
* :func:`arbitrate_expert_tools` — what happens to each tool call an expert's model writes (an expert never
  hands off, and never changes business state: side effects become *proposed actions* for the supervisor).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from policies.handoff import ToolCallView, handoff_target_of

__all__ = ["EXPERT_TOOL_PREFIX", "expert_tool_name", "expert_of_tool", "ExpertCallDecision", "ExpertCallPlan",
           "plan_expert_calls", "ExpertToolOutcome", "arbitrate_expert_tools"]

EXPERT_TOOL_PREFIX = "expert_"


def expert_tool_name(expert: str) -> str:
    """``"billing"`` -> ``"expert_billing"``: the agent-as-tool form of an expert, as the supervisor's model sees it."""
    return f"{EXPERT_TOOL_PREFIX}{expert}"


def expert_of_tool(tool_name: str) -> str | None:
    """The expert of an expert tool name, or None when ``tool_name`` is not an expert tool."""
    if tool_name.startswith(EXPERT_TOOL_PREFIX):
        return tool_name[len(EXPERT_TOOL_PREFIX):] or None
    return None


@dataclass(frozen=True)
class ExpertCallDecision:
    """What happens to one tool call of a supervisor message: ``call`` (a sub-task for ``expert`` with
    ``objective``) or ``refused`` (answered at once with ``message``)."""

    call_id: str
    name: str
    action: Literal["call", "refused"]
    expert: str | None = None
    objective: str = ""
    message: str = ""


@dataclass(frozen=True)
class ExpertCallPlan:
    """The decision over one supervisor message: one outcome per tool call, in the calls' order."""

    outcomes: tuple[ExpertCallDecision, ...]

    @property
    def calls(self) -> tuple[ExpertCallDecision, ...]:
        """The accepted expert calls (the sub-tasks), in order."""
        return tuple(o for o in self.outcomes if o.action == "call")

    @property
    def refused(self) -> tuple[ExpertCallDecision, ...]:
        """The refused calls (each answered by a ToolMessage with its ``message``)."""
        return tuple(o for o in self.outcomes if o.action == "refused")


def plan_expert_calls(calls: Sequence[ToolCallView], experts: Collection[str], max_experts: int,
                  default_objective: str) -> ExpertCallPlan:
    """Decide the tool calls of one supervisor message.

    Args:
        calls: the message's tool calls in order, invalid ones included.
        experts: experts that can be called now (the edge table's ``EXPERTS`` that are available).
        max_experts: the most sub-tasks one request may fan out to (``Settings.max_experts``).
        default_objective: the sub-task when a call gives no ``objective`` (the user's request).

    Rules (in the calls' order): invalid JSON -> refused; ``transfer_to_*`` -> refused (the supervisor keeps
    control, it calls instead); unknown tool or an expert not in ``experts`` -> refused; a second
    expert call of the same expert -> refused (one sub-task per expert: its objective should cover both);
    beyond ``max_experts`` -> refused.  Every refusal says why.
    """
    out: list[ExpertCallDecision] = []
    taken: list[str] = []
    for c in calls:
        if not c.valid:
            out.append(ExpertCallDecision(c.id, c.name, "refused",
                                      message=f"Refused: the arguments of {c.name} were not valid JSON "
                                              f"({c.error or 'unparseable'})."))
            continue
        if handoff_target_of(c.name) is not None:
            out.append(ExpertCallDecision(c.id, c.name, "refused",
                                      message="Refused: the supervisor keeps control and does not hand off; "
                                              "call the expert with expert_<agent> instead."))
            continue
        expert = expert_of_tool(c.name)
        if expert is None or expert not in experts:
            allowed = ", ".join(f"expert_{e}" for e in sorted(experts)) or "none"
            out.append(ExpertCallDecision(c.id, c.name, "refused",
                                      message=f"Refused: unknown tool {c.name!r} for the supervisor (available: {allowed})."))
            continue
        if expert in taken:
            out.append(ExpertCallDecision(c.id, c.name, "refused", expert=expert,
                                      message=f"Refused: {expert} is already called in this message; one sub-task per expert."))
            continue
        if len(taken) >= max_experts:
            out.append(ExpertCallDecision(c.id, c.name, "refused", expert=expert,
                                      message=f"Refused: at most {max_experts} experts per request."))
            continue
        taken.append(expert)
        objective = str((c.args or {}).get("objective") or "").strip() or default_objective
        out.append(ExpertCallDecision(c.id, c.name, "call", expert=expert, objective=objective))
    return ExpertCallPlan(tuple(out))


@dataclass(frozen=True)
class ExpertToolOutcome:
    """What happens to one tool call of an expert's model: ``execute`` (a read-only business tool),
    ``proposed`` (a side-effecting tool: not run, recorded as a proposed action for the supervisor) or
    ``refused``; ``message`` answers the call when it is not executed."""

    call_id: str
    name: str
    action: Literal["execute", "proposed", "refused"]
    message: str = ""


def arbitrate_expert_tools(expert: str, calls: Sequence[ToolCallView], business_tools: Collection[str],
                           side_effect_tools: Collection[str]) -> tuple[ExpertToolOutcome, ...]:
    """Decide every tool call of one expert message.

    Args:
        expert: the expert called as a tool.
        calls: the message's tool calls in order.
        business_tools: the expert's business tools (the same as the specialist's).
        side_effect_tools: those of ``business_tools`` that change business state.

    Rules: an expert never hands off (no ``transfer_to_*`` tool is bound; a model that writes one anyway is
    refused) and never changes business state — it answers a sub-task for a supervisor that keeps control,
    may run in parallel with other experts and may be cut off by a timeout, so a side effect there could
    neither be ordered nor be taken back.  A side-effecting call is returned as a *proposed action*.
    """
    out: list[ExpertToolOutcome] = []
    for c in calls:
        if not c.valid:
            out.append(ExpertToolOutcome(c.id, c.name, "refused",
                                         f"Refused: the arguments of {c.name} were not valid JSON ({c.error or 'unparseable'})."))
        elif handoff_target_of(c.name) is not None:
            out.append(ExpertToolOutcome(c.id, c.name, "refused",
                                         f"Refused: {expert} is called as an expert by the supervisor and cannot hand off; "
                                         "answer your sub-task with what you found."))
        elif c.name not in business_tools:
            out.append(ExpertToolOutcome(c.id, c.name, "refused", f"Refused: unknown tool {c.name!r} for {expert}."))
        elif c.name in side_effect_tools:
            out.append(ExpertToolOutcome(c.id, c.name, "proposed",
                                         f"Not executed: an expert called by the supervisor does not change business "
                                         f"state; {c.name} is recorded as a proposed action. Answer with what you found."))
        else:
            out.append(ExpertToolOutcome(c.id, c.name, "execute"))
    return tuple(out)
