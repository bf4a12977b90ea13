"""Where the next turn of a thread starts (control-flow rule 6)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from policies.edges import FALLBACK, SPECIALISTS, TRIAGE

__all__ = ["EntryDecision", "choose_entry", "CONTINUE_CONFIDENCE"]

#: Minimum router confidence for keeping the current agent; below it the message is re-triaged.
#: Chosen on the shipped router's calibration: wrong-agent predictions cluster below 0.35.
CONTINUE_CONFIDENCE = 0.35


@dataclass(frozen=True)
class EntryDecision:
    """``target`` node to start the turn at, and a one-line ``reason`` (recorded in the run's events)."""

    target: str
    reason: str


def choose_entry(
    active_agent: str | None,
    routed_agent: str | None,
    route_confidence: float,
    identity_changed: bool,
    permitted: bool = True,
    available: Collection[str] = SPECIALISTS,
    task_status: str | None = None,
) -> EntryDecision:
    """Choose the entry node of a new turn.

    Args:
        active_agent: the agent stored as active after the previous turn (None on a new thread).
        routed_agent: the agent the router assigns the new message to.
        route_confidence: the router's probability for ``routed_agent`` (0..1).
        identity_changed: the run context's user or tenant differs from the one the thread was started with.
        permitted: the caller may still talk to ``active_agent`` (authorization outcome).
        available: agents that can take turns now.
        task_status: status of the thread's task; a task in ``fallback`` (a person took over) stays with fallback.

    Returns:
        The active agent when the topic continues (router agrees with enough confidence) and permission
        still holds; triage when the topic or the identity/tenant changed; fallback when the agent that
        should continue is unavailable.
    """
    if identity_changed:
        return EntryDecision(TRIAGE, "identity or tenant changed since the thread started")
    if not active_agent or active_agent not in SPECIALISTS:
        return EntryDecision(TRIAGE, "no specialist holds the conversation")
    if not permitted:
        return EntryDecision(TRIAGE, f"permission for {active_agent} no longer holds")
    if routed_agent != active_agent or route_confidence < CONTINUE_CONFIDENCE:
        return EntryDecision(TRIAGE, f"topic changed (router: {routed_agent} at {route_confidence:.2f})")
    if active_agent not in available:
        return EntryDecision(FALLBACK, f"{active_agent} is unavailable")
    if task_status == "fallback":
        return EntryDecision(FALLBACK, "the task waits for a human")
    return EntryDecision(active_agent, f"topic continues with {active_agent}")
