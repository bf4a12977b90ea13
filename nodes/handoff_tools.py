"""Model-callable handoff tools: ``transfer_to_<agent>`` and triage's structured ``route_to_agent`` (schemas only;
the agent node decides and acts)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field, field_validator

from nodes.prompts import DESCRIPTIONS
from nodes.tools import schema_tool
from policies.handoff import handoff_tool_name

__all__ = ["HandoffArgs", "handoff_tool", "RouteDecision", "ROUTE_TOOL", "route_tool"]

#: Name of triage's structured routing tool (bound instead of the ``transfer_to_*`` tools when routing is structured).
ROUTE_TOOL = "route_to_agent"


def _stringify_values(value: Any) -> Any:
    """Accept scalar fact values (models often write amounts as numbers) and keep them as text; drop nulls."""
    if isinstance(value, dict):
        return {str(k): (v if isinstance(v, str) else str(v)) for k, v in value.items()
                if v is not None and isinstance(v, (str, int, float, bool))}
    return value


class HandoffArgs(BaseModel):
    """Arguments the model writes when it asks for a handoff. A call whose arguments fail this schema is refused."""

    reason: str = Field(min_length=1, description="why the target agent should take over, one sentence")
    objective: str | None = Field(default=None, description="what the target must achieve, if not the user's last request")
    facts: dict[str, str] | None = Field(default=None, description="facts found so far, e.g. {'transaction_id': 'tx_1008'}")

    @field_validator("facts", mode="before")
    @classmethod
    def _coerce_facts(cls, value: Any) -> Any:
        return _stringify_values(value)


@cache
def handoff_tool(target: str) -> StructuredTool:
    """The ``transfer_to_<target>`` tool schema bound to models (cached per target; the agent node decides the call)."""
    return schema_tool(handoff_tool_name(target),
                       f"Hand control of the conversation to the {target} agent ({DESCRIPTIONS.get(target, target)}).",
                       HandoffArgs)


class RouteDecision(BaseModel):
    """Triage's routing decision as structured output (the arguments of the ``route_to_agent`` tool).

    The decision is a request, not a command: the agent node turns it into a ``transfer_to_<target>`` call that
    ``policies.handoff.arbitrate`` checks against the edge table and the guards like any other handoff; a decision
    that fails this schema (unknown field types, confidence outside 0..1, empty reason) is refused with a ToolMessage.
    """

    target: str = Field(description="the agent that owns the request")
    confidence: float = Field(ge=0.0, le=1.0, description="how sure the routing is, 0..1")
    reason: str = Field(min_length=1, description="why this agent owns the request, one sentence")
    extracted: dict[str, str] = Field(default_factory=dict,
                                      description="fields found in the customer's message, snake_case keys, e.g. "
                                                  "{'merchant': 'Coffee Shop', 'amount': '4.50 GBP', "
                                                  "'transaction_id': 'tx_1008'}")

    @field_validator("extracted", mode="before")
    @classmethod
    def _coerce_extracted(cls, value: Any) -> Any:
        return {} if value is None else _stringify_values(value)

    def handoff_args(self) -> dict[str, Any]:
        """The equivalent ``transfer_to_<target>`` arguments: ``{"reason", "facts", "confidence"}``."""
        return {"reason": self.reason, "facts": dict(self.extracted), "confidence": self.confidence}


@cache
def _route_tool_cached(targets: tuple[str, ...]) -> dict:
    tool = convert_to_openai_tool(RouteDecision)
    fn = tool["function"]
    fn["name"] = ROUTE_TOOL
    fn["description"] = ("Route the customer's request to the one agent that owns it. Agents: "
                         + "; ".join(f"{t}: {DESCRIPTIONS.get(t, t)}" for t in targets) + ".")
    fn["parameters"]["properties"]["target"]["enum"] = list(targets)
    return tool


def route_tool(targets: Iterable[str]) -> dict:
    """The ``route_to_agent`` tool (OpenAI function format) whose arguments are a :class:`RouteDecision`;
    ``target`` is advertised as an enum of ``targets`` (sorted). The enum only guides the model: the edge table
    still decides what is legal."""
    import copy

    return copy.deepcopy(_route_tool_cached(tuple(sorted(targets))))
