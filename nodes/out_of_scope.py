"""The out-of-scope answer (issue 12 §2): a request the desk does not serve gets a short, fixed answer saying what the
desk can help with. No model call, no specialist, no task; the conversation's holder (if any) is kept, so a later reply
on the earlier topic continues with it."""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.graph import END
from langgraph.types import Command

from graph.state import ensure_ids
from policies.edges import OUT_OF_SCOPE

__all__ = ["OUT_OF_SCOPE_TEXT", "out_of_scope_node"]

#: The answer; the list matches the specialists of ``policies.edges.SPECIALISTS``.
OUT_OF_SCOPE_TEXT = ("Sorry, that's not something this desk can help with. We can help with your cards, payments "
                     "and charges on your account, refunds, transfers, your account details, and our fees and limits.")


def out_of_scope_node(state: dict) -> Command:
    """Answer :data:`OUT_OF_SCOPE_TEXT` with status ``out_of_scope`` and end the turn (state: ``outcome`` and the
    message; ``active_agent`` and ``task`` untouched)."""
    turn = int(state.get("turn") or 0)
    return Command(goto=END, update={
        "messages": ensure_ids([AIMessage(content=OUT_OF_SCOPE_TEXT, name=OUT_OF_SCOPE)]),
        "outcome": {"agent": OUT_OF_SCOPE, "text": OUT_OF_SCOPE_TEXT, "status": "out_of_scope", "turn": turn},
    })
