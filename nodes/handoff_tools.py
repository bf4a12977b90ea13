"""Model-callable handoff tools: ``transfer_to_<agent>`` (schemas only; the agent node decides and acts)."""

from __future__ import annotations

from functools import lru_cache

from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from nodes.prompts import DESCRIPTIONS
from policies.handoff import handoff_tool_name

__all__ = ["HandoffArgs", "handoff_tool"]


class HandoffArgs(BaseModel):
    """Arguments the model writes when it asks for a handoff."""

    reason: str = Field(description="why the target agent should take over, one sentence")
    objective: str | None = Field(default=None, description="what the target must achieve, if not the user's last request")
    facts: dict[str, str] | None = Field(default=None, description="facts found so far, e.g. {'transaction_id': 'tx_1008'}")


def _never_called(**_: object) -> str:  # pragma: no cover - the graph executes handoffs itself
    raise RuntimeError("handoff tools are decided by the agent node, not executed as functions")


@lru_cache(maxsize=None)
def handoff_tool(target: str) -> StructuredTool:
    """The ``transfer_to_<target>`` tool schema bound to models (cached per target)."""
    return StructuredTool.from_function(
        func=_never_called,
        name=handoff_tool_name(target),
        description=f"Hand control of the conversation to the {target} agent ({DESCRIPTIONS.get(target, target)}).",
        args_schema=HandoffArgs,
    )
