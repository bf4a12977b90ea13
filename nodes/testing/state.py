"""Thread set-ups for tests: the compiled graph without its input gate (``nodes.run_gate``), to write a state no
caller can write (a stored message with control characters, a task marked completed) and check what the desk and the
operator commands do with it. Never used by the desk."""

from __future__ import annotations

from typing import Any

__all__ = ["ungated"]


def ungated(graph: Any) -> Any:
    """A copy of the compiled ``graph`` whose ``invoke``/``update_state`` skip the input gate (same nodes, saver and
    business store, so the business store's own checks still apply)."""
    return graph.copy({"switchboard_gate": None})
