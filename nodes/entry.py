"""The entry node: bookkeeping at the start of every turn, and the choice of where the turn starts (rule 6)."""

from __future__ import annotations

import uuid

from langgraph.runtime import Runtime
from langgraph.types import Command

from graph.context import RunContext
from graph.packet import HandoffRecord
from nodes.deps import Deps
from nodes.transcript import last_user_text
from policies.edges import FALLBACK
from policies.entry import choose_entry

__all__ = ["make_entry_node"]


def make_entry_node(deps: Deps):
    """``entry(state, runtime) -> Command`` that resets the per-turn counters and goes to the chosen agent."""

    def entry(state: dict, runtime: Runtime[RunContext]) -> Command:
        ctx = runtime.context if isinstance(runtime.context, RunContext) else RunContext()
        turn = int(state.get("turn") or 0) + 1
        identity = {"user_id": ctx.user_id, "tenant_id": ctx.tenant_id}
        stored = state.get("identity")
        identity_changed = bool(stored) and stored != identity
        text = last_user_text(list(state.get("messages") or []))
        route = deps.router.route(text) if text else None
        task = dict(state.get("task") or {})
        decision = choose_entry(
            active_agent=state.get("active_agent"),
            routed_agent=route.agent if route else None,
            route_confidence=route.confidence if route else 0.0,
            identity_changed=identity_changed,
            available=deps.available,
            task_status=task.get("status"),
        )
        target = decision.target
        continuing = target == state.get("active_agent") and task.get("status") == "open"
        if not continuing and target != FALLBACK:
            task = {"task_id": f"task_{uuid.uuid4().hex[:12]}", "status": "open", "current_owner": target, "owner_version": 1}
        record = HandoffRecord(hop=int(state.get("handoff_count") or 0), turn=turn, from_agent="entry", to_agent=target,
                               kind="entry", reason=decision.reason).model_dump()
        return Command(goto=target, update={
            "turn": turn,
            "identity": identity,
            "turn_hops": 0,
            "seen_fingerprints": [],
            "tool_attempts": 0,
            "entry_reason": decision.reason,
            "active_agent": target,
            "visited_agents": [target],
            "handoff_path": [record],
            "task": task,
            "outcome": None,
            "handoff": None,  # a packet belongs to its turn; earlier ones stay in handoff_path
        })

    return entry
