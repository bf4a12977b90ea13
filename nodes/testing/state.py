"""Thread set-ups for tests: the compiled graph without its input gate (``nodes.run_gate``), to write a state no
caller can write (a stored message with control characters, a task marked completed) and check what the desk and the
operator commands do with it. Never used by the desk."""

from __future__ import annotations

from typing import Any

from graph.contracts.packet import HandoffPacket

__all__ = ["ungated", "packet"]


def packet(**fields: Any) -> HandoffPacket:
    """A ``HandoffPacket`` with ``fields`` and placeholders for the required ones a test does not care about
    (``task_id``, ``session_id``, ``trace_id``, ``from_agent``, ``to_agent``, ``reason``, ``objective``); facts may be
    given as dicts."""
    base: dict[str, Any] = {"task_id": "task_test", "session_id": "thread_test", "trace_id": "trace_test",
                            "from_agent": "billing", "to_agent": "fallback", "reason": "", "objective": "test"}
    return HandoffPacket.model_validate({**base, **fields})


def ungated(graph: Any) -> Any:
    """A copy of the compiled ``graph`` whose ``invoke``/``update_state`` skip the input gate (same nodes, saver and
    business store, so the business store's own checks still apply)."""
    return graph.copy({"switchboard_gate": None})
