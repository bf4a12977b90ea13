"""The turn's reading of the customer's message (``graph.contracts.reading.MessageReading``): made once by the entry node with
the message reader (``nodes.deps.Deps.reader``) and kept in state under ``reading`` (as JSON) for the turn's other
nodes (the paused dialogue, the agent's check of a cancel confirmation)."""

from __future__ import annotations

from graph.contracts.reading import MessageReading, ReadingContext, RouteView
from nodes.deps import Deps

__all__ = ["reading_in"]


def reading_in(state: dict, text: str, deps: Deps) -> MessageReading:
    """The reading of ``text`` kept in ``state`` by this turn's entry node; read now (the message alone, with its route)
    when the state holds none for this text (a run that did not start at entry, such as a resumed approval)."""
    kept = state.get("reading")
    if isinstance(kept, dict) and str(kept.get("text") or "").strip() == (text or "").strip():
        return MessageReading.model_validate(kept)
    return deps.reader.read(text, ReadingContext(route=RouteView.of(deps.router.route(text)) if text else None))
